"""Checking at run time: `with amplint.runtime.watch() as report:` around a training step reports the AMP
mistakes the program actually makes, with the codes of the static rules (docs/runtime.md).

This package is the only part of amplint that imports torch, and it does so only when `watch` is first used:
importing `amplint.runtime` (for `AmpRuntimeWarning` in a `-W error::amplint.runtime.AmpRuntimeWarning`
filter, or for the pytest plugin) stays cheap and torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["AmpRuntimeError", "AmpRuntimeWarning", "RuntimeFinding", "watch"]


class AmpRuntimeWarning(UserWarning):
    """Issued once per finding, at the user's line (`warnings.warn_explicit`)."""


class AmpRuntimeError(AssertionError):
    """Raised when a `watch(strict=True)` block ends with findings; `.findings` holds them."""

    def __init__(self, findings: list[RuntimeFinding]):
        self.findings = list(findings)
        super().__init__(f"{len(self.findings)} AMP finding(s) at run time:\n" +
                         "\n".join(f"  {finding}" for finding in self.findings))


@dataclass(frozen=True)
class RuntimeFinding:
    """One AMP mistake seen at run time: the rule's code, a one-line message and the user's frame where it
    happened: the first frame of the user's own code, outside torch, amplint, the standard library and installed
    packages (site-packages); `column`, `end_line` and `end_column` (1-based) span the expression running there
    (the call, the operator) when Python recorded it. When the mistake ran in installed code (a framework: a
    trainer's backward, an accelerator's step) called from there, `via_filename`, `via_line` and `via_column` are
    that code's frame (the innermost one, which called torch), else None."""

    code: str
    message: str
    filename: str
    line: int
    column: int | None = field(default=None, compare=False)
    end_line: int | None = field(default=None, compare=False)
    end_column: int | None = field(default=None, compare=False)
    via_filename: str | None = field(default=None, compare=False)
    via_line: int | None = field(default=None, compare=False)
    via_column: int | None = field(default=None, compare=False)

    @property
    def site(self) -> tuple[str, str, int]:
        return (self.code, self.filename, self.line)

    @property
    def via(self) -> str | None:
        """`package/module.py:LINE` of the installed code the mistake ran in (the path from the package's folder
        on), or None."""
        if self.via_filename is None:
            return None
        return f"{installed_path(self.via_filename)}:{self.via_line}"

    def __str__(self) -> str:
        via = f" (via {self.via})" if self.via else ""
        return f"{self.filename}:{self.line}: {self.code} {self.message}{via}"

    def to_diagnostic(self):
        """The finding as the linter's Diagnostic, for amplint's output formats (`amplint watch`): the carets
        under the expression that ran, else under the line's code (its comment left out)."""
        import linecache

        from amplint.diagnostics import Diagnostic, Location, Note
        from amplint.rules import RULES_BY_CODE

        rule = RULES_BY_CODE.get(self.code)
        source = linecache.getline(self.filename, self.line).rstrip("\r\n")
        if self.column is not None and self.end_line is not None and self.end_column is not None:
            start, end = Location(self.line, self.column), Location(self.end_line, self.end_column)
        else:
            column = len(source) - len(source.lstrip()) + 1
            start = Location(self.line, column)
            end = Location(self.line, max(column + 1, len(_code_of(source)) + 1))
        notes = ()
        if self.via_filename is not None:
            notes = (Note("where it ran: installed code, called from the reported line",
                          Location(self.via_line, self.via_column or 1), self.via_filename),)
        return Diagnostic(code=self.code, name=rule.name if rule else self.code, message=self.message,
                          filename=self.filename, location=start, end_location=end, source_line=source,
                          notes=notes, **({"severity": rule.severity} if rule else {}))


INSTALLED_FOLDERS = ("site-packages", "dist-packages")  # where installed packages live (dist-packages: Debian's)


def installed_path(filename: str) -> str:
    """The path of an installed module from its package's folder on (`lightning/pytorch/core/module.py`); any
    other path as it is."""
    parts = filename.replace("\\", "/").split("/")
    for index in range(len(parts) - 1, -1, -1):
        if parts[index] in INSTALLED_FOLDERS:
            return "/".join(parts[index + 1:])
    return filename


def _code_of(line: str) -> str:
    """The line without its trailing comment and spaces (a `#` inside a string is not a comment)."""
    import io
    import tokenize

    try:
        for token in tokenize.generate_tokens(io.StringIO(line + "\n").readline):
            if token.type == tokenize.COMMENT:
                return line[:token.start[1]].rstrip()
    except (tokenize.TokenError, SyntaxError):  # a line of a statement that goes on: no token stream of its own
        pass
    return line.rstrip()


def __getattr__(name: str):
    if name in ("watch", "WatchReport"):  # the part that imports torch
        from amplint.runtime import watcher

        return getattr(watcher, name)
    raise AttributeError(f"module 'amplint.runtime' has no attribute {name!r}")
