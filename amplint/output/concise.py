"""`path:line:col: CODE [*] message`, one per line."""

from __future__ import annotations

from amplint.diagnostics import Diagnostic, Severity
from amplint.output.common import printable


def location(diagnostic: Diagnostic) -> str:
    cell = f"cell {diagnostic.cell}:" if diagnostic.cell is not None else ""
    return f"{printable(diagnostic.filename)}:{cell}{diagnostic.location.row}:{diagnostic.location.column}"


def line(diagnostic: Diagnostic, unsafe: bool) -> str:
    marker = " [*]" if diagnostic.fixable(unsafe) else ""
    return f"{location(diagnostic)}: {diagnostic.code}{marker} {diagnostic.message}"


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' if count != 1 else ''}"


def by_severity(diagnostics) -> str:
    """"3 errors and 202 warnings", "1 warning", "0": each level that occurs, errors first."""
    errors = sum(d.severity is Severity.ERROR for d in diagnostics)
    warnings = len(diagnostics) - errors
    parts = [plural(count, noun) for count, noun in ((errors, "error"), (warnings, "warning")) if count]
    return " and ".join(parts) or "0"


def totals(report) -> str:
    """"Found 3 errors and 202 warnings." (ruff's line, with eslint's two levels). After fixes: "Found 8 problems
    (6 fixed, 1 error and 1 warning remaining).", where found is what the files reported before fixing (the fixed
    ones, whose levels are not kept, plus those that remain); then how to fix what remains."""
    count = len(report.diagnostics)
    parts = []
    if report.fixed:
        found = report.fixed + count
        parts.append(f"Found {plural(found, 'problem')} ({report.fixed} fixed, "
                     f"{by_severity(report.diagnostics)} remaining).")
    elif count:
        parts.append(f"Found {by_severity(report.diagnostics)}.")
    if count:
        fixable = sum(d.fixable(report.unsafe_fixes) for d in report.diagnostics)
        hidden = sum(d.fixable(True) for d in report.diagnostics) - fixable
        if fixable:  # the command that applies them: unsafe ones need the option this run was given
            unsafe = fixable - sum(d.fixable(False) for d in report.diagnostics)
            command = "amplint check --fix --unsafe-fixes" if unsafe else "amplint check --fix"
            parts.append(f"[*] {fixable} fixable with `{command}`.")
        if hidden:
            parts.append(f"{hidden} hidden fix{'es' if hidden != 1 else ''} can be enabled with `--unsafe-fixes`.")
    elif not report.fixed:
        parts.append("All checks passed!")
    return "\n".join(parts)


def render(report) -> str:
    lines = [line(d, report.unsafe_fixes) for d in report.diagnostics]
    lines.extend(printable(message) for message in report.messages)
    if report.totals:
        lines.append(totals(report))
    return "\n".join(lines) + "\n"
