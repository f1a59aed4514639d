"""Diagnostics grouped under a header per file: `path:` then `  line:col CODE [*] message` lines."""

from __future__ import annotations

from amplint.diagnostics import Diagnostic
from amplint.output import concise
from amplint.output.common import printable


def by_file(diagnostics: list[Diagnostic]) -> dict[str, list[Diagnostic]]:
    """Group by filename, files in the order they first appear (the report is sorted, so by path)."""
    groups: dict[str, list[Diagnostic]] = {}
    for diagnostic in diagnostics:
        groups.setdefault(diagnostic.filename, []).append(diagnostic)
    return groups


def line(diagnostic: Diagnostic, unsafe: bool) -> str:
    cell = f"cell {diagnostic.cell}:" if diagnostic.cell is not None else ""
    marker = " [*]" if diagnostic.fixable(unsafe) else ""
    where = f"{cell}{diagnostic.location.row}:{diagnostic.location.column}"
    return f"  {where} {diagnostic.code}{marker} {diagnostic.message}"


def render(report) -> str:
    lines: list[str] = []
    for filename, diagnostics in by_file(report.diagnostics).items():
        lines.append(f"{printable(filename)}:")
        lines.extend(line(d, report.unsafe_fixes) for d in diagnostics)
        lines.append("")
    lines.extend(printable(message) for message in report.messages)
    if report.totals:
        lines.append(concise.totals(report))
    return "\n".join(lines) + "\n"
