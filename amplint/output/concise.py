"""`path:line:col: CODE [*] message`, one per line."""

from __future__ import annotations

from amplint.diagnostics import Diagnostic
from amplint.output.common import printable


def location(diagnostic: Diagnostic) -> str:
    cell = f"cell {diagnostic.cell}:" if diagnostic.cell is not None else ""
    return f"{printable(diagnostic.filename)}:{cell}{diagnostic.location.row}:{diagnostic.location.column}"


def line(diagnostic: Diagnostic, unsafe: bool) -> str:
    marker = " [*]" if diagnostic.fixable(unsafe) else ""
    return f"{location(diagnostic)}: {diagnostic.code}{marker} {diagnostic.message}"


def summary(report) -> str:
    """After fixes, ruff's line: "Found 8 errors (6 fixed, 2 remaining).", where found is what the files reported
    before fixing (the fixed ones plus those that remain); then how to fix what remains."""
    count = len(report.diagnostics)
    parts = []
    if report.fixed:
        found = report.fixed + count
        parts.append(f"Found {found} error{'s' if found != 1 else ''} ({report.fixed} fixed, {count} remaining).")
    elif count:
        parts.append(f"Found {count} error{'s' if count != 1 else ''}.")
    if count:
        fixable = sum(d.fixable(report.unsafe_fixes) for d in report.diagnostics)
        hidden = sum(d.fixable(True) for d in report.diagnostics) - fixable
        if fixable:
            parts.append(f"[*] {fixable} fixable with `amplint check --fix`.")
        if hidden:
            parts.append(f"{hidden} hidden fix{'es' if hidden != 1 else ''} can be enabled with `--unsafe-fixes`.")
    elif not report.fixed:
        parts.append("All checks passed!")
    return "\n".join(parts)


def render(report) -> str:
    lines = [line(d, report.unsafe_fixes) for d in report.diagnostics]
    lines.extend(printable(message) for message in report.messages)
    lines.append(summary(report))
    return "\n".join(lines) + "\n"
