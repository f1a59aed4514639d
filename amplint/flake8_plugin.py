"""flake8 plugin: `flake8` reports amplint's findings as AMP codes next to its own.

Registered as the `AMP` entry point of `flake8.extension`. Each file is linted with the configuration closest
to it and the torch range its project declares, as `amplint check` and the editor server lint it
(`amplint.config.settings_for`): its `select`, `ignore`, `per-file-ignores` and `target-torch-version` apply. flake8,
not amplint, decides what a `# noqa` comment suppresses (and honours `--disable-noqa`), so the plugin reports every
finding the configuration selects; it keeps only the file-level `# amplint: noqa` opt-out. Syntax errors are left
to flake8, which reports them itself (E999). A configuration amplint cannot use is reported on the file's first
line (AMP902, with the problem), never a traceback; its warnings go to stderr, once per process.
"""

from __future__ import annotations

import ast
import sys
from typing import Iterator

from amplint import __version__, pipeline, sources
from amplint.diagnostics import Diagnostic
from amplint.engine import INTERNAL_ERROR, SYNTAX_ERROR, error_diagnostic
from amplint.outcome import Mode

_WARNED: set[str] = set()


def _settings(filename: str):
    """(the settings for the file, None) or (None, what is wrong with its configuration). Read for each file, as
    the editor server does: a configuration edited meanwhile is never served stale."""
    from amplint.config import ConfigError, settings_for

    try:
        return settings_for(filename), None
    except ConfigError as error:
        return None, str(error)


def unsuppressed_diagnostics(text: str, filename: str) -> list[Diagnostic]:
    """The configured rules' diagnostics for one source through the one pipeline, before any line `# noqa` is
    applied (flake8 applies its own). The screen spares libcst the files no rule can fire on. Syntax errors are
    left to flake8 (E999); a file amplint refuses to analyse (too deeply nested) is reported as AMP901."""
    from amplint.selection import enabled, rules_for

    settings, problem = _settings(filename)
    if settings is None:
        return [error_diagnostic(INTERNAL_ERROR, filename, f"the configuration cannot be used, so nothing was "
                                                           f"analysed: {problem}")]
    for warning in settings.warnings:
        if warning not in _WARNED:
            _WARNED.add(warning)
            print(f"amplint: warning: {warning}", file=sys.stderr)
    rules = rules_for(filename, enabled(settings), settings)
    outcome = pipeline.run(sources.from_text(text, filename, line_noqa=False), rules, Mode())
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
