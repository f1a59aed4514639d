"""flake8 plugin: `flake8` reports amplint's findings as AMP codes next to its own.

Registered as the `AMP` entry point of `flake8.extension`. flake8, not amplint, decides what a `# noqa`
comment suppresses (and honours `--disable-noqa`), so the plugin reports every finding; it keeps only the
file-level `# amplint: noqa` opt-out. Syntax errors are left to flake8, which reports them itself (E999).
"""

from __future__ import annotations

import ast
from typing import Iterator

from amplint import __version__, pipeline, sources
from amplint.diagnostics import Diagnostic
from amplint.engine import SYNTAX_ERROR
from amplint.outcome import Mode
from amplint.selection import all_rules


def unsuppressed_diagnostics(text: str, filename: str) -> list[Diagnostic]:
    """All rules' diagnostics for one source through the one pipeline, before any line `# noqa` is applied
    (flake8 applies its own). The screen spares libcst the files no rule can fire on. Syntax errors are left
    to flake8 (E999); a file amplint refuses to analyse (too deeply nested) is reported as AMP901."""
    outcome = pipeline.run(sources.from_text(text, filename, line_noqa=False), all_rules(), Mode())
    return [d for d in outcome.diagnostics if d.code != SYNTAX_ERROR[0]]


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
