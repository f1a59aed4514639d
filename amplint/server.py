"""`amplint server`: a Language Server Protocol server over stdio, for editors.

It publishes amplint's diagnostics for open Python documents (at once on open and save, 0.3 s after the last
change while typing) and offers each diagnostic's fix as a code action, plus a "fix all" source action. The
project's configuration (select, ignore, per-file-ignores) is read from the document's folder upwards, as
the command line does.

pygls is imported only when the server starts, so the rest of amplint never needs it:
`pip install "amplint[server]"`. Both pygls 1.x and 2.x are supported (their module layouts differ).
"""

from __future__ import annotations

import asyncio
import bisect
import os
import re
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

from amplint import __version__
from amplint import rules as registry
from amplint.config import ConfigError, load_settings
from amplint.diagnostics import Applicability, Diagnostic, Location
from amplint.engine import lint_text
from amplint.fixer import fix_text
from amplint.runner import rules_for

DEBOUNCE_SECONDS = 0.3
NAME = "amplint"
FIX_ALL_KIND = "source.fixAll.amplint"
ERROR_CODES = frozenset({"AMP900", "AMP901", "AMP902"})
PYTHON_SUFFIXES = (".py", ".pyi")


class PyglsMissing(Exception):
    """pygls (or lsprotocol) is not installed."""


# --- positions (no pygls needed) -------------------------------------------------------------------------------


class Positions:
    """Offsets and amplint locations of one text as LSP positions: 0-based line, and the character counted in
    the encoding agreed with the client (UTF-16 code units unless the client offered UTF-8 or UTF-32)."""

    def __init__(self, text: str, encoding: str = "utf-16") -> None:
        self.text = text
        self.encoding = str(getattr(encoding, "value", encoding)).lower()
        self.starts = [0] + [match.end() for match in re.finditer("\n", text)]

    def units(self, text: str) -> int:
        if self.encoding == "utf-8":
            return len(text.encode("utf-8"))
        if self.encoding == "utf-32":
            return len(text)
        return len(text.encode("utf-16-le")) // 2

    def at_offset(self, offset: int) -> tuple[int, int]:
        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self.starts, offset) - 1
        return line, self.units(self.text[self.starts[line]:offset])

    def at_location(self, location: Location) -> tuple[int, int]:
        """amplint's 1-based row and column (in characters) as an LSP position, clamped to the text."""
        line = min(max(location.row - 1, 0), len(self.starts) - 1)
        line_end = self.starts[line + 1] - 1 if line + 1 < len(self.starts) else len(self.text)
        offset = min(self.starts[line] + max(location.column - 1, 0), line_end)
        return self.at_offset(offset)

    def end(self) -> tuple[int, int]:
        return self.at_offset(len(self.text))


def uri_to_path(uri: str) -> str | None:
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    path = unquote(parsed.path)
    if os.name == "nt" and re.match(r"^/[A-Za-z]:", path):
        path = path[1:]
    return path


def lint_document(text: str, path: str | None, root: str | None = None) -> list[Diagnostic]:
    """Lint one open document with the configuration that applies to its folder (or the workspace root).

    Raises ConfigError for a broken configuration, so that the server can tell the user.
    """
    start = Path(path).parent if path else Path(root or os.getcwd())
    settings = load_settings(start=start)
    filename = path or "untitled.py"
    if path and settings.force_exclude and settings.excluded(path):
        return []
    rule_classes = registry.select(settings.select, settings.ignore, settings.extend_select)
    return lint_text(text, filename, rules_for(filename, rule_classes, settings)).diagnostics


def fix_all(text: str, path: str | None, root: str | None = None) -> str:
    """The document with every safe fix applied (the `--fix` result)."""
    start = Path(path).parent if path else Path(root or os.getcwd())
    settings = load_settings(start=start)
    filename = path or "untitled.py"
    rule_classes = registry.select(settings.select, settings.ignore, settings.extend_select)
    return fix_text(text, filename, rules_for(filename, rule_classes, settings)).text


def kind_wanted(kind: str, only: list[str] | None) -> bool:
    """LSP's `only` filter is hierarchical: `source.fixAll` asks for `source.fixAll.amplint` too."""
    return not only or any(kind == wanted or kind.startswith(wanted + ".") for wanted in only)


# --- the server (pygls) ----------------------------------------------------------------------------------------


def _load_pygls():
    try:
        from lsprotocol import types

        try:
            from pygls.lsp.server import LanguageServer  # pygls 2.x
        except ImportError:
            from pygls.server import LanguageServer  # pygls 1.x
    except ImportError as error:
        raise PyglsMissing(str(error)) from None
    return types, LanguageServer


def create_server():
    """The configured pygls LanguageServer (not started)."""
    types, LanguageServer = _load_pygls()
    server = LanguageServer(NAME, __version__, text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
    pending: dict[str, asyncio.TimerHandle] = {}
    reported_errors: set[str] = set()

    def encoding() -> str:
        return getattr(server.workspace, "position_encoding", None) or "utf-16"

    def lsp_range(start: tuple[int, int], end: tuple[int, int]):
        return types.Range(start=types.Position(line=start[0], character=start[1]),
                           end=types.Position(line=end[0], character=end[1]))

    def wanted(document) -> bool:
        if document.uri.startswith("vscode-notebook-cell:"):
            return False  # a cell alone is not the notebook's program; `amplint check` lints notebooks
        language = getattr(document, "language_id", None)
        return language == "python" or document.uri.endswith(PYTHON_SUFFIXES)

    def root() -> str | None:
        return getattr(server.workspace, "root_path", None)

    def lint(document) -> list[Diagnostic]:
        try:
            diagnostics = lint_document(document.source, uri_to_path(document.uri), root())
        except ConfigError as error:
            message = f"amplint: {error}"
            if message not in reported_errors:  # tell once, not on every keystroke
                reported_errors.add(message)
                show_message(message)
            return []
        reported_errors.clear()
        return diagnostics

    def to_lsp(diagnostic: Diagnostic, positions: Positions):
        return types.Diagnostic(
            range=lsp_range(positions.at_location(diagnostic.location),
                            positions.at_location(diagnostic.end_location)),
            message=diagnostic.message,
            severity=types.DiagnosticSeverity.Error if diagnostic.code in ERROR_CODES
            else types.DiagnosticSeverity.Warning,
            code=diagnostic.code,
            code_description=types.CodeDescription(href=diagnostic.url),
            source=NAME,
        )

    def show_message(message: str) -> None:
        if hasattr(server, "window_show_message"):  # pygls 2.x
            server.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning, message=message))
        else:
            server.show_message(message, types.MessageType.Warning)

    def send(uri: str, diagnostics: list, version: int | None) -> None:
        if hasattr(server, "text_document_publish_diagnostics"):  # pygls 2.x
            server.text_document_publish_diagnostics(
                types.PublishDiagnosticsParams(uri=uri, diagnostics=diagnostics, version=version))
        else:
            server.publish_diagnostics(uri, diagnostics, version)

    def publish(uri: str) -> None:
        pending.pop(uri, None)
        if uri not in server.workspace.text_documents:
            return  # closed meanwhile
        document = server.workspace.get_text_document(uri)
        if not wanted(document):
            return
        positions = Positions(document.source, encoding())
        send(uri, [to_lsp(d, positions) for d in lint(document)], document.version)

    def cancel(uri: str) -> None:
        handle = pending.pop(uri, None)
        if handle is not None:
            handle.cancel()

    def schedule(uri: str) -> None:
        cancel(uri)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = getattr(server, "loop", None) or asyncio.get_event_loop()
        pending[uri] = loop.call_later(DEBOUNCE_SECONDS, publish, uri)

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls, params) -> None:
        cancel(params.text_document.uri)
        publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls, params) -> None:
        schedule(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls, params) -> None:
        cancel(params.text_document.uri)
        publish(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls, params) -> None:
        cancel(params.text_document.uri)
        send(params.text_document.uri, [], None)

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
        code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL_KIND], resolve_provider=False))
    def code_action(ls, params):
        uri = params.text_document.uri
        document = server.workspace.get_text_document(uri)
        if not wanted(document):
            return None
        only = [str(getattr(kind, "value", kind)) for kind in (params.context.only or [])]
        text = document.source
        positions = Positions(text, encoding())
        requested = (params.range.start.line, params.range.start.character), \
                    (params.range.end.line, params.range.end.character)
        actions = []
        diagnostics = lint(document)
        for diagnostic in diagnostics:
            fix = diagnostic.fix
            if fix is None or fix.applicability is Applicability.DISPLAY_ONLY:
                continue
            if not kind_wanted(types.CodeActionKind.QuickFix.value, only):
                break
            start = positions.at_location(diagnostic.location)
            end = positions.at_location(diagnostic.end_location)
            if end < requested[0] or start > requested[1]:
                continue  # not at the requested range
            safe = fix.applicability is Applicability.SAFE
            edits = [types.TextEdit(range=lsp_range(positions.at_offset(edit.start),
                                                    positions.at_offset(edit.end)), new_text=edit.content)
                     for edit in fix.edits]
            actions.append(types.CodeAction(
                title=f"{fix.message} ({diagnostic.code})" + ("" if safe else " (unsafe)"),
                kind=types.CodeActionKind.QuickFix,
                diagnostics=[to_lsp(diagnostic, positions)],
                is_preferred=safe,
                edit=types.WorkspaceEdit(changes={uri: edits}),
            ))
        if kind_wanted(FIX_ALL_KIND, only) and any(d.fixable() for d in diagnostics):
            fixed = fix_all(text, uri_to_path(uri), root())
            if fixed != text:
                edit = types.TextEdit(range=lsp_range((0, 0), positions.end()), new_text=fixed)
                actions.append(types.CodeAction(title="Fix all safe amplint fixes", kind=FIX_ALL_KIND,
                                                edit=types.WorkspaceEdit(changes={uri: [edit]})))
        return actions

    return server


def serve() -> int:
    """Run the server over stdio until the client exits it; 2 when pygls is missing."""
    try:
        server = create_server()
    except PyglsMissing as error:
        print(f"amplint server needs pygls, which is not installed ({error}); "
              f"install it with: pip install \"amplint[server]\"", file=sys.stderr)
        return 2
    server.start_io()
    return 0
