"""The default format: each diagnostic's message, a source frame pointing at the reported range, then what to do."""

from __future__ import annotations

from amplint.diagnostics import Diagnostic
from amplint.output import concise
from amplint.output.common import printable


def frame(diagnostic: Diagnostic) -> list[str]:
    row = str(diagnostic.location.row)
    gutter = " " * len(row)
    source = diagnostic.source_line.expandtabs(1)
    start = diagnostic.location.column - 1
    if diagnostic.end_location.row == diagnostic.location.row:
        width = max(1, diagnostic.end_location.column - diagnostic.location.column)
    else:
        width = max(1, len(source.rstrip()) - start)
    return [
        f"{gutter} |",
        f"{row} | {source}",
        f"{gutter} | {' ' * start}{'^' * width} {diagnostic.code}",
        f"{gutter} |",
    ]


def help_lines(diagnostic: Diagnostic, show_fixes: bool) -> list[str]:
    """What to do, under the frame (ruff's `= help:`); with --show-fixes, how much the fix can be trusted."""
    fix = diagnostic.fix if show_fixes else None
    if diagnostic.help and fix is not None and fix.message == diagnostic.help:
        return [f"  = help: {printable(diagnostic.help)} ({fix.applicability.value} fix)"]
    lines = [f"  = help: {printable(diagnostic.help)}"] if diagnostic.help else []
    if fix is not None:
        lines.append(f"  = fix: {printable(fix.message)} ({fix.applicability.value} fix)")
    return lines


def render(report) -> str:
    lines: list[str] = []
    for diagnostic in report.diagnostics:
        lines.append(concise.line(diagnostic, report.unsafe_fixes))
        if diagnostic.source_line:
            lines.extend(frame(diagnostic))
        lines.extend(help_lines(diagnostic, report.show_fixes))
        lines.append("")
    lines.extend(printable(message) for message in report.messages)
    if report.summary:
        lines.append(concise.summary(report))
    return "\n".join(lines) + "\n"
