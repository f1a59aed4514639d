"""The default format: each diagnostic with a source frame pointing at the reported range."""

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


def render(report) -> str:
    lines: list[str] = []
    for diagnostic in report.diagnostics:
        lines.append(concise.line(diagnostic, report.unsafe_fixes))
        if diagnostic.source_line:
            lines.extend(frame(diagnostic))
        if report.show_fixes and diagnostic.fix is not None:
            lines.append(f"  = help: {diagnostic.fix.message} ({diagnostic.fix.applicability.value} fix)")
        lines.append("")
    lines.extend(printable(message) for message in report.messages)
    lines.append(concise.summary(report))
    return "\n".join(lines) + "\n"
