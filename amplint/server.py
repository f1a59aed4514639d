"""`amplint server`: a Language Server Protocol server over stdio, for editors.

It publishes amplint's diagnostics for open Python documents (at once on open and save, 0.3 s after the last
change while typing) and offers each diagnostic's fix as a code action, plus a "fix all" source action. The
project's configuration (select, ignore, per-file-ignores) is read from the document's folder upwards, as
the command line does.

The server stays responsive and alive whatever it is sent: linting runs in a worker process (`Linter`), not
on the event loop (a long document never delays the next request, and a crash in a native parser costs that
document an AMP902 diagnostic, not the server), one run per document at a time, and a run whose document
changed meanwhile is stopped, never published: the latest version is linted instead. Every request is
answered, with a JSON-RPC error for one that cannot be served (see `FrameReader`), and an error inside
amplint is a message to the user, not a traceback.

pygls is imported only when the server starts, so the rest of amplint never needs it:
pygls (`pip install pygls`, or the `server` extra: `pip install ".[server]"` from a checkout). Both pygls 1.x and 2.x are supported (their module layouts differ).
"""

from __future__ import annotations

import asyncio
import bisect
import json
import multiprocessing
import os
import re
import signal
import sys
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from urllib.parse import unquote, urlparse

from amplint import __version__
from amplint.diagnostics import Applicability, Diagnostic, Location, Severity, with_docs_url, with_severities
from amplint.outcome import Mode

# The linter itself (amplint.pipeline, engine, config, selection, parallel: every rule, through them) is imported
# where it is used, not here: the server answers `initialize` having loaded pygls and this module alone, and the
# worker loads the linter right after (`warm_up`), before the first document arrives.

DEBOUNCE_SECONDS = 0.3
NAME = "amplint"
FIX_ALL_KIND = "source.fixAll.amplint"
PYTHON_SUFFIXES = (".py", ".pyi")
INVALID_MESSAGE = "amplint/invalidMessage"  # the request `FrameReader` puts in place of one that cannot be served
MAX_CONTENT_LENGTH = 1 << 28  # bytes: a longer declared message is taken as a broken header


class PyglsMissing(Exception):
    """pygls (or lsprotocol) is not installed."""


# --- positions (no pygls needed) -------------------------------------------------------------------------------


class Positions:
    """Offsets and amplint locations of one text as LSP positions: 0-based line, and the character counted in
    the encoding agreed with the client (UTF-16 code units unless the client offered UTF-8 or UTF-32)."""

    def __init__(self, text: str, encoding: str = "utf-16") -> None:
        self.text = text
        self.encoding = str(getattr(encoding, "value", encoding)).lower()
        # LSP counts `\r\n`, `\r` and `\n` as line breaks, as Python (and amplint's rows) do
        from amplint.engine import LineIndex

        self.starts = LineIndex(text).starts

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


def _document(text: str, path: str | None, root: str | None):
    """(settings, source, rules) for one open document: the configuration closest to its file (or to the workspace
    root, for a document without one) and the torch range its project declares, as the command line reads them
    (`settings_for`); ConfigError for a broken one. The buffer is not screened: its syntax errors are shown."""
    from amplint import sources
    from amplint.config import settings_for
    from amplint.selection import enabled, rules_for

    settings = settings_for(path, fallback=Path(root or os.getcwd()))
    filename = path or "untitled.py"
    source = sources.from_text(text, filename, screened=False)
    return settings, source, rules_for(filename, enabled(settings), settings)


_WORKSPACE = None  # the lint worker's project index (amplint/index/workspace.py), kept between documents


def workspace_view(text: str, path: str | None, buffers: dict[str, str] | None):
    """The document's view of the session's project index, with every open buffer's text standing for its file;
    None for a document without a file (it has no module name)."""
    global _WORKSPACE
    if not path:
        return None
    from amplint.index.workspace import Workspace

    if _WORKSPACE is None:
        _WORKSPACE = Workspace()
    _WORKSPACE.update({**(buffers or {}), path: text})
    return _WORKSPACE.view(path)


def lint_document(text: str, path: str | None, root: str | None = None,
                  buffers: dict[str, str] | None = None) -> list[Diagnostic]:
    """Lint one open document with the configuration that applies to its folder (or the workspace root).
    `buffers`: the other open documents (path -> text), which stand for their files in the project index.

    Raises ConfigError for a broken configuration, so that the server can tell the user.
    """
    from amplint import pipeline

    settings, source, rules = _document(text, path, root)
    if path and settings.force_exclude and settings.excluded(path):
        return []
    diagnostics = pipeline.run(source, rules, Mode(), project=workspace_view(text, path, buffers)).diagnostics
    return with_docs_url(with_severities(diagnostics, settings.severity_levels()),  # `[tool.amplint.severity]`
                         settings.docs_url)


def fix_all(text: str, path: str | None, root: str | None = None, buffers: dict[str, str] | None = None) -> str:
    """The document with every safe fix applied (the `--fix` result)."""
    from amplint import pipeline

    _, source, rules = _document(text, path, root)
    return pipeline.run(source, rules, Mode(fix=True), project=workspace_view(text, path, buffers)).fixed_text


def kind_wanted(kind: str, only: list[str] | None) -> bool:
    """LSP's `only` filter is hierarchical: `source.fixAll` asks for `source.fixAll.amplint` too."""
    return not only or any(kind == wanted or kind.startswith(wanted + ".") for wanted in only)


# --- framing (no pygls needed) --------------------------------------------------------------------------------


class FrameReader:
    """The client's byte stream as pygls reads it (`readline`, `read`), in well-formed frames only.

    pygls takes exactly `Content-Length: N` and, on anything else, loses its place in the stream and reads
    nothing more, silently; a request whose params do not fit the protocol is dropped without an answer.
    Here, headers are read leniently (any case and spacing), a message whose length is missing or not a
    number is recovered by reading one JSON value, a body shorter or longer than its declared length is
    resynchronised at the next header, and a request that cannot be served (a broken header, not JSON-RPC
    2.0, params that `check` refuses) is replaced by an `INVALID_MESSAGE` request with the same id, which the
    server answers with a JSON-RPC error. What cannot be answered (no id) is reported on stderr and skipped.
    """

    def __init__(self, stream, check=None, log=None) -> None:
        self.stream = stream
        self.read_some = getattr(stream, "read1", None) or stream.read
        self.check = check  # raises for a request pygls cannot read
        self.log = log if log is not None else sys.stderr
        self.buffer = bytearray()  # read from the stream, not yet taken
        self.frames = bytearray()  # well-formed frames, not yet read by pygls
        self.pending: tuple[bytes, str | None] | None = None  # `peek`: the next message's body, not yet framed

    @property
    def closed(self) -> bool:
        return self.stream.closed

    def readline(self) -> bytes:
        if not self.frames:
            self._produce()
        end = self.frames.find(b"\n") + 1 or len(self.frames)
        line = bytes(self.frames[:end])
        del self.frames[:end]
        return line

    def read(self, size: int = -1) -> bytes:
        if not self.frames:
            self._produce()
        size = len(self.frames) if size is None or size < 0 else size
        data = bytes(self.frames[:size])
        del self.frames[:size]
        return data

    # reading the stream
    def _fill(self) -> bool:
        data = self.read_some(65536)
        if not data:
            return False
        self.buffer += data
        return True

    def _line(self) -> bytes | None:
        while (end := self.buffer.find(b"\n")) < 0:
            if not self._fill():
                if not self.buffer:
                    return None
                end = len(self.buffer) - 1
                break
        line = bytes(self.buffer[:end + 1])
        del self.buffer[:end + 1]
        return line

    def _exactly(self, size: int) -> bytes | None:
        while len(self.buffer) < size:
            if not self._fill():
                return None
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def _json_value(self) -> bytes | None:
        """One JSON object or array from the stream, read by its brackets (its length is not known); b"" when
        the stream does not go on with one."""
        index = 0
        while True:
            while index >= len(self.buffer):
                if not self._fill():
                    return None
            if self.buffer[index] not in b" \t\r\n":
                break
            index += 1
        if self.buffer[index] not in b"{[":
            return b""
        depth, in_string, escaped = 0, False, False
        while True:
            while index >= len(self.buffer):
                if not self._fill():
                    return None
            char = self.buffer[index]
            index += 1
            if in_string:
                if escaped:
                    escaped = False
                elif char == 0x5C:  # backslash
                    escaped = True
                elif char == 0x22:
                    in_string = False
            elif char == 0x22:
                in_string = True
            elif char in b"{[":
                depth += 1
            elif char in b"}]":
                depth -= 1
                if depth == 0:
                    value = bytes(self.buffer[:index])
                    del self.buffer[:index]
                    return value

    def peek(self):
        """The next message, parsed (None when it is not a JSON object with a well-formed header, or the stream
        ends), still to be read as usual: it is framed and checked when pygls reads it."""
        if self.pending is None and not self.frames:
            self.pending = self._next_body()
        if self.pending is None or self.pending[1] is not None:
            return None
        try:
            message = json.loads(self.pending[0])
        except ValueError:
            return None
        return message if isinstance(message, dict) else None

    # frames
    def _produce(self) -> None:
        while not self.frames:
            read, self.pending = self.pending or self._next_body(), None
            if read is None:
                return  # end of the stream
            for body in self._messages(*read):
                self.frames += b"Content-Length: %d\r\n\r\n" % len(body) + body

    def _messages(self, body: bytes, problem: str | None) -> list[bytes]:
        """The bodies to hand to pygls for one message: a JSON-RPC batch (an array, which pygls cannot read) is
        taken apart into its messages, each read as if sent alone; a message that is neither an object nor an
        array is skipped, said on stderr (pygls would fail on it with a traceback)."""
        try:
            message = json.loads(body)
        except ValueError:  # not JSON: `_message` says so, or finds the message it starts with
            message = {}
        if isinstance(message, list):
            parts = [json.dumps(item).encode("utf-8") for item in message if isinstance(item, dict)]
            if len(parts) < len(message) or not message:
                self._say(f"skipped {len(message) - len(parts)} of the {len(message)} values of a batch that are "
                          "not JSON-RPC messages")
            return [each for part in parts for each in [self._message(part, problem)] if each is not None]
        if not isinstance(message, dict):
            self._say(f"skipped a message that is not a JSON object ({type(message).__name__})")
            return []
        body = self._message(body, problem)
        return [] if body is None else [body]

    def _next_body(self) -> tuple[bytes, str | None] | None:
        """The next message's body and what was wrong with its header (None if nothing)."""
        length, problem, started = None, None, False
        while True:
            line = self._line()
            if line is None:
                return None
            if not line.strip():
                if started:
                    break
                continue
            started = True
            at = line.lower().rfind(b"content-length")
            if at < 0:
                continue  # another header (Content-Type), or what is left of a broken message
            value = line[at + len(b"content-length"):].strip()
            value = value[1:].strip() if value.startswith(b":") else b"?" + value
            if value.isdigit() and int(value) <= MAX_CONTENT_LENGTH:
                length, problem = int(value), None
            else:
                length, problem = None, f"invalid Content-Length header {value.decode('ascii', 'replace')!r}"
        if length is not None:
            body = self._exactly(length)
            return None if body is None else (body, None)
        body = self._json_value()
        return None if body is None else (body, problem or "no Content-Length header")

    def _message(self, body: bytes, problem: str | None) -> bytes | None:
        """The body to hand to pygls: this one, an INVALID_MESSAGE request in its place, or None (skipped)."""
        try:
            message = json.loads(body)
        except ValueError:  # UnicodeDecodeError included
            message = self._first_value(body)
            if message is None:
                self._say(f"skipped a message that is not JSON ({len(body)} bytes)")
                return None
            problem = problem or "the Content-Length header does not match the message"
        if not (isinstance(message, dict) and "method" in message and "id" in message):
            if problem is None and isinstance(message, dict) and "method" in message and self.check is not None:
                try:
                    self.check(message)
                except Exception:  # noqa: BLE001 - pygls would fail on it with a traceback; nothing to answer
                    problem = f"{message['method']}: invalid params"
            if problem is not None:
                self._say(f"skipped a message without a request id: {problem}")
                return None
            return body
        if problem is None and message.get("jsonrpc") != "2.0":
            problem = "not a JSON-RPC 2.0 message"
        if problem is None and self.check is not None:
            try:
                self.check(message)
            except Exception:  # noqa: BLE001 - whatever pygls would refuse to read is answered here
                problem = "invalid params"
        if problem is None:
            return body
        request_id = message["id"]
        if isinstance(request_id, bool) or not isinstance(request_id, (int, str)):
            self._say(f"skipped a request with an invalid id: {problem}")
            return None
        reason = f"{message['method']}: {problem}" if isinstance(message["method"], str) else problem
        return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": INVALID_MESSAGE,
                           "params": {"reason": reason}}).encode("utf-8")

    def _first_value(self, body: bytes):
        """The JSON value a body starts with, when a wrong declared length made it run into the next message
        (which is put back to be read); None when the body does not start with one."""
        text = body.decode("utf-8", "surrogateescape")
        start = len(text) - len(text.lstrip())
        try:
            value, end = json.JSONDecoder().raw_decode(text, start)
        except ValueError:
            return None
        rest = text[end:].encode("utf-8", "surrogateescape")
        self.buffer[:0] = rest
        return value

    def _say(self, text: str) -> None:
        try:
            print(f"amplint server: {text}", file=self.log, flush=True)
        except (OSError, ValueError):
            pass


# --- the linting process (no pygls needed) ---------------------------------------------------------------------


class Crashed(Exception):
    """The worker process died while linting (a native crash, killed, out of memory)."""


class Cancelled(Exception):
    """The run was stopped because its document changed: its result would have been stale."""


WARM_UP = """import torch


def step(model, x, optimizer, scaler):
    with torch.autocast("cuda"):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""


# What the fork server imports once, so that every worker it forks has the linter loaded: the first one, and the
# new one after a run stopped as stale (`cancel` kills the worker). "__main__" is multiprocessing's default.
WORKER_PRELOAD = ["__main__", "amplint.server", "amplint.pipeline", "amplint.selection", "amplint.config",
                  "amplint.index.workspace", "libcst"]


def warm_up() -> None:
    """What a new worker's first document would otherwise wait for: the linter's modules, every rule and libcst's
    parser, loaded by linting a small program (its result is dropped; a failure here is the first document's to
    report, not this one's)."""
    try:
        from amplint import pipeline, sources
        from amplint.config import Settings
        from amplint.rules import ALL_RULES
        from amplint.selection import rules_for

        source = sources.from_text(WARM_UP, "warm_up.py", screened=False)
        pipeline.run(source, rules_for("warm_up.py", list(ALL_RULES), Settings()), Mode())
    except Exception:  # noqa: BLE001 - a warm-up never fails the server
        pass


def _load_server_side() -> None:
    """What the server process uses of the linter: line positions (amplint.engine) and stopping workers
    (amplint.parallel), loaded while the worker warms up rather than on the first result or the first stop."""
    import amplint.engine  # noqa: F401
    import amplint.parallel  # noqa: F401


def _start_lint_worker(server: int) -> None:
    from amplint.parallel import die_with

    die_with(server)  # a fork server's child: the server is not its parent
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the editor's Ctrl-C is for the server, which stops this


class Linter:
    """Runs amplint's work for the server in one worker process, one run at a time, off the event loop and
    outside the server: a long document holds no lock the server needs (libcst's parser keeps the GIL for
    seconds at a time), and a crash kills the worker, not the server; the next run starts a new one. A run
    whose document changed is stopped (`cancel`): the worker is killed and the next run gets a new one, at
    once. Workers start from a fork server (or are spawned), never forked from the server's threads."""

    def __init__(self) -> None:
        self.pool: ProcessPoolExecutor | None = None
        self.turn = asyncio.Lock()  # one run at a time: the run in the worker is known, and can be stopped
        self.current: object = None  # the key of the run in the worker
        self.stopped: set[int] = set()  # ids of the pools killed by `cancel`

    def _submit(self, function, *args) -> tuple[ProcessPoolExecutor, Future]:
        for _ in range(2):  # a pool that broke since its last run is replaced once
            if self.pool is None:
                methods = multiprocessing.get_all_start_methods()
                context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
                if "forkserver" in methods:  # before the fork server starts: it loads them once for every worker
                    context.set_forkserver_preload(WORKER_PRELOAD)
                self.pool = ProcessPoolExecutor(max_workers=1, mp_context=context, initializer=_start_lint_worker,
                                                initargs=(os.getpid(),))
            pool = self.pool
            try:
                return pool, pool.submit(function, *args)
            except (BrokenProcessPool, RuntimeError):
                self._discard(pool)
        raise Crashed("the linting process cannot be started")

    async def run(self, key, function, *args):
        """`function(*args)` in the worker; Crashed when the worker died on it, Cancelled when `cancel(key)`
        stopped it."""
        async with self.turn:
            if self.pool is None:  # a new worker: starting it waits for the fork server, off the event loop
                pool, future = await asyncio.get_running_loop().run_in_executor(None, self._submit, function, *args)
            else:
                pool, future = self._submit(function, *args)
            self.current = key
            try:
                return await asyncio.wrap_future(future)
            except BrokenProcessPool:
                self._discard(pool)
                if id(pool) in self.stopped:
                    self.stopped.discard(id(pool))
                    raise Cancelled() from None
                raise Crashed() from None
            finally:
                self.current = None

    async def warm(self) -> None:
        """Start the worker and load the linter in it (`warm_up`), so that the first document is linted at once;
        then this process loads what it needs of the linter (`_load_server_side`), in a thread, while the first
        document is linted. Runs like any other run: a document opened meanwhile waits for it, never for a second
        start."""
        try:
            await self.run(None, warm_up)
        except (Crashed, Cancelled):
            pass  # the next run starts a new worker
        await asyncio.get_running_loop().run_in_executor(None, _load_server_side)

    def cancel(self, key) -> None:
        """Stop the run for `key` if it is the one in the worker."""
        if key is not None and self.current == key and self.pool is not None:
            self.stopped.add(id(self.pool))
            self._kill(self.pool)

    def _discard(self, pool: ProcessPoolExecutor) -> None:
        if self.pool is pool:
            self.pool = None
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """Stop the worker at once, even in the middle of a long document; then wait (a few seconds at most) for
        the pool's manager thread to close its wake-up pipe (`amplint.parallel.close_killed`)."""
        from amplint.parallel import close_killed

        pool, self.pool = self.pool, None
        if pool is not None:
            self._kill(pool)
            close_killed(pool)

    @staticmethod
    def _kill(pool: ProcessPoolExecutor) -> None:
        from amplint.parallel import kill_processes, pool_processes

        kill_processes(pool_processes(pool))


def crashed_diagnostic(path: str | None) -> Diagnostic:
    from amplint.engine import INTERNAL_ERROR, error_diagnostic

    return error_diagnostic(INTERNAL_ERROR, path or "untitled.py",
                            "the analyser crashed on this document; its findings are unknown; please report it")


# --- the server (pygls) ----------------------------------------------------------------------------------------


def _load_pygls():
    try:
        from lsprotocol import types
        from pygls.exceptions import JsonRpcInvalidRequest

        try:
            from pygls.lsp.server import LanguageServer  # pygls 2.x
        except ImportError:
            from pygls.server import LanguageServer  # pygls 1.x
    except ImportError as error:
        raise PyglsMissing(str(error)) from None
    return types, LanguageServer, JsonRpcInvalidRequest


def lint_safely(text: str, path: str | None, root: str | None,
                buffers: dict[str, str] | None = None) -> tuple[list[Diagnostic], str | None]:
    """`lint_document`, never raising: the diagnostics, and a message for the user when there are none to
    give (a broken configuration, an error inside amplint)."""
    from amplint.config import ConfigError

    try:
        return lint_document(text, path, root, buffers), None
    except ConfigError as error:
        return [], f"amplint: {error}"
    except Exception as error:  # noqa: BLE001 - the server must outlive any one document
        return [], f"amplint: internal error: {type(error).__name__}: {error} (please report it)"


def fix_safely(text: str, path: str | None, root: str | None, buffers: dict[str, str] | None = None) -> str:
    """`fix_all`, or the text unchanged when it cannot be fixed."""
    try:
        return fix_all(text, path, root, buffers)
    except Exception:  # noqa: BLE001 - no fix rather than a broken one
        return text


def create_server():
    """The configured pygls LanguageServer (not started)."""
    types, LanguageServer, InvalidRequest = _load_pygls()
    server = LanguageServer(NAME, __version__, text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
    pending: dict[str, asyncio.TimerHandle] = {}
    reported_errors: set[str] = set()
    linter = Linter()
    server.amplint_linter = linter  # stopped by `serve` when the client goes
    tasks: set[asyncio.Task] = set()  # runs in flight (the loop keeps only weak references)
    running: dict[str, tuple] = {}  # uri -> (version, text) of the document's run in flight
    again: set[str] = set()  # documents to lint again once their run ends
    results: dict[str, tuple] = {}  # uri -> (version, text, diagnostics) of the last run published

    def encoding() -> str:
        return getattr(server.workspace, "position_encoding", None) or "utf-16"

    def lsp_range(start: tuple[int, int], end: tuple[int, int]):
        return types.Range(start=types.Position(line=start[0], character=start[1]),
                           end=types.Position(line=end[0], character=end[1]))

    def opened(uri: str):
        """The open document at `uri`, or None (pygls keys its documents by the unquoted URI)."""
        documents = server.workspace.text_documents
        return documents.get(uri) or documents.get(unquote(uri))

    def wanted(document) -> bool:
        if document.uri.startswith("vscode-notebook-cell:"):
            return False  # a cell alone is not the notebook's program; `amplint check` lints notebooks
        language = getattr(document, "language_id", None)
        return language == "python" or document.uri.endswith(PYTHON_SUFFIXES)

    def root() -> str | None:
        return getattr(server.workspace, "root_path", None)

    def buffers() -> dict[str, str]:
        """path -> text of every open Python document with a file: they stand for their files in the index."""
        found = {}
        for document in list(server.workspace.text_documents.values()):
            path = uri_to_path(document.uri)
            if path and wanted(document):
                found[path] = document.source
        return found

    def tell(message: str | None) -> None:
        """Show a run's message once, not on every keystroke; a clean run forgets the messages shown."""
        if message is None:
            reported_errors.clear()
        elif message not in reported_errors:
            reported_errors.add(message)
            show_message(message)

    def to_lsp(diagnostic: Diagnostic, positions: Positions):
        return types.Diagnostic(
            range=lsp_range(positions.at_location(diagnostic.location),
                            positions.at_location(diagnostic.end_location)),
            # What is wrong, then what to do on its own line (editors show both in the hover).
            message=diagnostic.message + (f"\nhelp: {diagnostic.help}" if diagnostic.help else ""),
            severity=types.DiagnosticSeverity.Error if diagnostic.severity is Severity.ERROR
            else types.DiagnosticSeverity.Warning,
            code=diagnostic.code,
            code_description=types.CodeDescription(href=diagnostic.url) if diagnostic.url else None,
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

    async def lint(key, text: str, path: str | None) -> tuple[list[Diagnostic], str | None] | None:
        """The diagnostics and a message for the user; None when the run was stopped as stale."""
        try:
            return await linter.run(key, lint_safely, text, path, root(), buffers())
        except Crashed:
            return [crashed_diagnostic(path)], None
        except Cancelled:
            return None

    def publish(uri: str) -> None:
        """Lint the document in the worker and publish the result, unless the document changed meanwhile:
        then its latest version is linted instead. One run per document at a time."""
        pending.pop(uri, None)
        document = opened(uri)
        if document is None or not wanted(document):
            return  # closed meanwhile
        version, text = document.version, document.source
        if uri in running:
            again.add(uri)
            if running[uri] != (version, text):
                linter.cancel(uri)  # its result would be stale
            return
        running[uri] = (version, text)
        run = asyncio.get_running_loop().create_task(lint(uri, text, uri_to_path(uri)))
        tasks.add(run)
        run.add_done_callback(tasks.discard)
        run.add_done_callback(lambda done: finished(uri, version, text, done))

    def finished(uri: str, version, text: str, done) -> None:
        running.pop(uri, None)
        document = opened(uri)
        if document is None or done.cancelled():
            return  # closed meanwhile (its diagnostics were cleared), or the server is stopping
        result = done.result()
        if result is None or uri in again or document.version != version or document.source != text:
            again.discard(uri)
            if uri not in pending:  # else the debounce timer lints it
                publish(uri)
            return
        diagnostics, message = result
        tell(message)
        results[uri] = (version, text, diagnostics)
        positions = Positions(text, encoding())
        send(uri, [to_lsp(d, positions) for d in diagnostics], version)

    async def current_diagnostics(document) -> list[Diagnostic]:
        """The diagnostics of the document as it is now: the last run's, else a run of its own."""
        version, text = document.version, document.source
        known = results.get(document.uri)
        if known is not None and known[0] == version and known[1] == text:
            return known[2]
        result = await lint(None, text, uri_to_path(document.uri))
        diagnostics, message = result if result is not None else ([], None)
        tell(message)
        return diagnostics

    def cancel(uri: str) -> None:
        handle = pending.pop(uri, None)
        if handle is not None:
            handle.cancel()

    def schedule(uri: str) -> None:
        cancel(uri)
        pending[uri] = asyncio.get_running_loop().call_later(DEBOUNCE_SECONDS, publish, uri)

    @server.feature(types.INITIALIZED)
    def initialized(ls, params) -> None:
        """`initialize` has been answered: now the worker starts and loads the linter (the first document waits
        for that, not the editor's handshake)."""
        warming = asyncio.get_running_loop().create_task(linter.warm())
        tasks.add(warming)
        warming.add_done_callback(tasks.discard)

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
        for uri in list(server.workspace.text_documents):  # their findings may read what was saved
            if uri != params.text_document.uri and uri not in pending:
                schedule(uri)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls, params) -> None:
        cancel(params.text_document.uri)
        results.pop(params.text_document.uri, None)
        send(params.text_document.uri, [], None)

    @server.feature(INVALID_MESSAGE)
    def invalid_message(ls, params) -> None:
        reason = params.get("reason") if isinstance(params, dict) else getattr(params, "reason", None)
        raise InvalidRequest(message=f"Invalid Request: {reason or 'unreadable request'}")

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
        code_action_kinds=[types.CodeActionKind.QuickFix, FIX_ALL_KIND], resolve_provider=False))
    async def code_action(ls, params):
        uri = params.text_document.uri
        document = opened(uri)
        if document is None or not wanted(document):
            return None  # not an open Python document: nothing to offer
        only = [str(getattr(kind, "value", kind)) for kind in (params.context.only or [])]
        text = document.source
        positions = Positions(text, encoding())
        requested = (params.range.start.line, params.range.start.character), \
                    (params.range.end.line, params.range.end.character)
        actions = []
        diagnostics = await current_diagnostics(document)
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
            try:
                fixed = await linter.run(None, fix_safely, text, uri_to_path(uri), root(), buffers())
            except (Crashed, Cancelled):
                fixed = text
            if fixed != text:
                edit = types.TextEdit(range=lsp_range((0, 0), positions.end()), new_text=fixed)
                actions.append(types.CodeAction(title="Fix all safe amplint fixes", kind=FIX_ALL_KIND,
                                                edit=types.WorkspaceEdit(changes={uri: [edit]})))
        return actions

    return server


def _request_check(server):
    """What pygls does to read a message, as a check for `FrameReader` (None where it is not known), its log of a
    message it cannot read kept quiet: the reader answers or skips that message and says so in one line."""
    import logging

    protocol = getattr(server, "protocol", None) or getattr(server, "lsp", None)
    structure = getattr(protocol, "structure_message", None)
    if structure is None:
        return None
    logger = logging.getLogger(getattr(structure, "__module__", None) or "pygls")  # where it logs

    def check(message):
        disabled, logger.disabled = logger.disabled, True
        try:
            return structure(message)
        finally:
            logger.disabled = disabled
    return check


def _refuse_after_shutdown(server, invalid_request) -> None:
    """After `shutdown`, a request other than `exit` is answered with InvalidRequest (the LSP specification);
    pygls drops such a request unanswered, and a client waiting on it would hang. Notifications stay dropped. An
    `exit` before any `shutdown` is noted, for `serve`'s exit status."""
    protocol = getattr(server, "protocol", None) or getattr(server, "lsp", None)
    handle = getattr(protocol, "handle_message", None)
    send = getattr(protocol, "_send_response", None)
    if handle is None or send is None or not hasattr(protocol, "_shutdown"):
        return

    def handle_message(message):
        method = getattr(message, "method", None)
        request_id = getattr(message, "id", None)
        if method == "exit" and not protocol._shutdown:
            protocol._exited_without_shutdown = True  # `serve` exits 1 (the LSP specification)
        if protocol._shutdown and method not in (None, "exit") and request_id is not None:
            error = invalid_request(message=f"Invalid Request: the server is shut down, {method} is not served")
            as_response = getattr(error, "to_response_error", None) or error.to_dict  # pygls 2.x, 1.x
            send(request_id, error=as_response())
            return None
        return handle(message)

    protocol.handle_message = handle_message


class _AnsweredQuietly:
    """A logging filter for pygls's log: the JSON-RPC error the server sends for an unreadable request (its
    `INVALID_MESSAGE` handler raises it) is an answer, not a failure to log with a traceback."""

    def __init__(self, error_type) -> None:
        self.error_type = error_type

    def filter(self, record) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (isinstance(error, self.error_type) and str(error).find("Invalid Request:") >= 0)


def serve() -> int:
    """Run the server over stdio until the client exits it: 0 after `shutdown`, 1 on an `exit` without it (the
    LSP specification); 2 when pygls is missing."""
    reader = FrameReader(sys.stdin.buffer)
    early = answer_initialize(reader, sys.stdout.buffer) if _pygls_major() == EARLY_PYGLS else None
    try:
        server = create_server()
    except PyglsMissing as error:
        print(f"amplint server needs pygls, which is not installed ({error}); "
              f"install it with: pip install pygls (or pip install \".[server]\" from a checkout of amplint)", file=sys.stderr)
        return 2
    import logging

    from pygls.exceptions import JsonRpcInvalidRequest

    reader.check = _request_check(server)
    if early is not None:
        _answered_already(server, *early)
    _refuse_after_shutdown(server, JsonRpcInvalidRequest)
    quiet = _AnsweredQuietly(JsonRpcInvalidRequest)
    for handler in logging.getLogger().handlers:
        handler.addFilter(quiet)
    for name in ("pygls.protocol.json_rpc", "pygls.protocol", "pygls"):
        logging.getLogger(name).addFilter(quiet)
    try:
        server.start_io(reader, sys.stdout.buffer)  # pygls swallows the SystemExit its `exit` handler raises
    finally:
        server.amplint_linter.close()
    protocol = getattr(server, "protocol", None) or getattr(server, "lsp", None)
    # The LSP specification: 0 when `shutdown` came before `exit` (or the input ended), 1 for an `exit` without it.
    return 1 if getattr(protocol, "_exited_without_shutdown", False) else 0


# --- `initialize`, answered before pygls is loaded ---------------------------------------------------------------
# Loading pygls takes most of a second (its protocol types, `lsprotocol.types`, alone 0.3-0.4 s), and a client
# waits for the answer to `initialize` before it sends anything else. The answer depends only on the features
# this server registers and on the client's position encodings, so it is written here as pygls 2 writes it, the
# moment the request arrives; pygls then reads the same request, sets itself up from it, and its own answer is
# compared with the one sent and not sent again (`_answered_already`). tests/test_server.py checks that both
# answers agree for the client capabilities that shape them. Any other pygls, or a request whose shape is not
# plain (`initialize_result` returns None), is answered by pygls itself.
EARLY_PYGLS = 2  # the major version of pygls whose answer `initialize_result` writes
ENCODINGS = ("utf-8", "utf-16", "utf-32")  # the position encodings pygls can serve


def _pygls_major() -> int | None:
    from importlib import metadata

    try:
        version = metadata.version("pygls")
    except (metadata.PackageNotFoundError, ValueError):
        return None
    major = version.split(".", 1)[0]
    return int(major) if major.isdigit() else None


def initialize_result(params) -> dict | None:
    """What pygls 2 answers to `initialize` with these params for this server's features; None when the params
    are not of the plain shape this function knows (pygls answers those)."""
    if not isinstance(params, dict) or not isinstance(params.get("capabilities"), dict):
        return None
    capabilities = params["capabilities"]
    general = capabilities.get("general", {})
    document = capabilities.get("textDocument", {})
    if not isinstance(general, dict) or not isinstance(document, dict):
        return None
    encodings = general.get("positionEncodings")
    if encodings is not None and not (isinstance(encodings, list) and all(isinstance(e, str) for e in encodings)):
        return None
    synchronization = document.get("synchronization", {})
    if not isinstance(synchronization, dict):
        return None
    sync: dict = {"openClose": True, "change": 2}  # incremental
    for key in ("willSave", "willSaveWaitUntil"):  # stated by the client: pygls says this server does not
        value = synchronization.get(key)
        if value is not None and not isinstance(value, bool):
            return None
        if value is not None:
            sync[key] = False
    sync["save"] = True
    encoding = next((each for each in encodings or () if each in ENCODINGS), "utf-16")
    return {"capabilities": {
        "positionEncoding": encoding,
        "textDocumentSync": sync,
        "codeActionProvider": {"codeActionKinds": ["quickfix", FIX_ALL_KIND], "resolveProvider": False},
        "executeCommandProvider": {"commands": []},
        "workspace": {"workspaceFolders": {"supported": True, "changeNotifications": True}, "fileOperations": {}},
    }, "serverInfo": {"name": NAME, "version": __version__}}


def answer_initialize(reader: FrameReader, out) -> tuple[object, dict] | None:
    """Wait for the client's first message; when it is an `initialize` request of a plain shape, write its answer
    to `out` now and return (its id, the answer's result). The request stays in `reader` for pygls to read."""
    message = reader.peek()
    if message is None or message.get("method") != "initialize" or message.get("jsonrpc") != "2.0":
        return None
    request_id = message.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, (int, str)):
        return None
    result = initialize_result(message.get("params"))
    if result is None:
        return None
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode("utf-8")
    try:
        out.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        out.flush()
    except (OSError, ValueError):
        return None
    return request_id, result


def _answered_already(server, request_id, sent: dict) -> None:
    """pygls's own answer to the `initialize` answered early is not sent again; it is compared with the one sent,
    and a difference said on stderr (the client was told something pygls does not do)."""
    protocol = getattr(server, "protocol", None)
    send = getattr(protocol, "_send_response", None)
    if send is None:
        return
    pending = [request_id]

    def send_response(msg_id, result=None, error=None):
        if pending and msg_id == pending[0]:
            pending.clear()
            converter = getattr(protocol, "_converter", None)
            own = converter.unstructure(result) if converter is not None and result is not None else result
            if error is not None or own != sent:
                print(f"amplint server: the answer sent to `initialize` differs from pygls's ({error or own})",
                      file=sys.stderr, flush=True)
            return None
        return send(msg_id, result=result, error=error)

    protocol._send_response = send_response
