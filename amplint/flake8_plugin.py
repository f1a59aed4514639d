"""flake8 plugin: `flake8` reports amplint's findings as AMP codes next to its own.

Registered as the `AMP` entry point of `flake8.extension`. flake8, not amplint, decides what a `# noqa`
comment suppresses (and honours `--disable-noqa`), so the plugin reports every finding; it keeps only the
file-level `# amplint: noqa` opt-out. Syntax errors are left to flake8, which reports them itself (E999).
"""

from __future__ import annotations

import ast
from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import __version__
from amplint import rules as registry
from amplint.diagnostics import Diagnostic
from amplint.engine import LineIndex, cyclic_gc_paused, diagnose, internal_error, parse
from amplint.prefilter import prefilter_for


def unsuppressed_diagnostics(text: str, filename: str) -> list[Diagnostic]:
    """All rules' diagnostics for one source, before any line `# noqa` is applied (flake8 applies its own).
    The prefilter spares libcst the files no rule can fire on (flake8 itself reports syntax errors)."""
    verdict, candidates = prefilter_for(registry.ALL_RULES).select(text)
    if verdict.skipped:
        return []
    with cyclic_gc_paused():
        try:
            module = parse(text)
        except (cst.ParserSyntaxError, RecursionError):
            return []
        try:
            diagnostics = diagnose(module, text, filename, [rule() for rule in candidates], LineIndex(text))
        except Exception as error:  # noqa: BLE001 - one bad file must not stop flake8's run
            return [internal_error(filename, error)]
    return sorted(diagnostics, key=Diagnostic.sort_key)


class AmplintChecker:
    """A flake8 AST plugin (flake8 calls it once per file, with the file's lines)."""

    name = "amplint"
    version = __version__

    def __init__(self, tree: ast.AST, filename: str, lines: list[str]) -> None:
        # `tree` is unused, but asking for it is what makes flake8 run this once per file.
        self.filename = filename
        self.lines = lines

    def run(self) -> Iterator[tuple[int, int, str, type]]:
        for diagnostic in unsuppressed_diagnostics("".join(self.lines), self.filename):
            # amplint's columns are 1-based; flake8 wants a 0-based offset and adds 1 when it prints.
            yield (diagnostic.location.row, diagnostic.location.column - 1,
                   f"{diagnostic.code} {diagnostic.message}", type(self))
