"""`path:line:col: CODE [*] message`, one per line."""

from __future__ import annotations

from amplint.diagnostics import Diagnostic


def location(diagnostic: Diagnostic) -> str:
    cell = f"cell {diagnostic.cell}:" if diagnostic.cell is not None else ""
    return f"{diagnostic.filename}:{cell}{diagnostic.location.row}:{diagnostic.location.column}"


def line(diagnostic: Diagnostic, unsafe: bool) -> str:
    marker = " [*]" if diagnostic.fixable(unsafe) else ""
    return f"{location(diagnostic)}: {diagnostic.code}{marker} {diagnostic.message}"


def summary(report) -> str:
    count = len(report.diagnostics)
    parts = []
    if report.fixed:
        parts.append(f"Fixed {report.fixed} error{'s' if report.fixed != 1 else ''}.")
    if count:
        parts.append(f"Found {count} error{'s' if count != 1 else ''}.")
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
    lines.extend(report.messages)
    lines.append(summary(report))
    return "\n".join(lines) + "\n"
