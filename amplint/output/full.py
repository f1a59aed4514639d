"""The default format: each diagnostic's message, a source frame pointing at the reported range, then what to do."""

from __future__ import annotations

from amplint.diagnostics import Diagnostic, python_lines
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


def note_lines(diagnostic: Diagnostic) -> list[str]:
    """Where the facts of the message were shown (`= note: path:line:col: what`), rustc's and ruff's notes."""
    lines = []
    for note in diagnostic.notes:
        cell = f"cell {note.cell}:" if note.cell is not None else ""
        where = f"{printable(note.filename or diagnostic.filename)}:{cell}{note.location.row}:{note.location.column}"
        lines.append(f"  = note: {where}: {printable(note.message)}")
    return lines


def help_lines(diagnostic: Diagnostic, show_fixes: bool) -> list[str]:
    """What to do, under the frame (ruff's `= help:`); with --show-fixes, how much the fix can be trusted."""
    fix = diagnostic.fix if show_fixes else None
    if diagnostic.help and fix is not None and fix.message == diagnostic.help:
        return [f"  = help: {printable(diagnostic.help)} ({fix.applicability.value} fix)"]
    lines = [f"  = help: {printable(diagnostic.help)}"] if diagnostic.help else []
    if fix is not None:
        lines.append(f"  = fix: {printable(fix.message)} ({fix.applicability.value} fix)")
    return lines


def patch_lines(diagnostic: Diagnostic) -> list[str]:
    """The fix as a unified diff of the file's lines, under the help (`--show-fixes`); none for a fix with no
    edits (advice only)."""
    fix = diagnostic.fix
    if fix is None or not fix.edits or not all(edit.original or edit.start == edit.end for edit in fix.edits):
        return []
    lines, shift = [], 0
    for edit in sorted(fix.edits, key=lambda edit: edit.start):
        lines.extend(f"    {printable(line, keep=chr(9))}" for line in edit.patch(shift))
        shift += len(python_lines(edit.content)) - len(python_lines(edit.original))
    return lines


def render(report) -> str:
    lines: list[str] = []
    for diagnostic in report.diagnostics:
        lines.append(concise.line(diagnostic, report.unsafe_fixes))
        if diagnostic.source_line:
            lines.extend(frame(diagnostic))
        lines.extend(note_lines(diagnostic))
        lines.extend(help_lines(diagnostic, report.show_fixes))
        if report.show_fixes:
            lines.extend(patch_lines(diagnostic))
        lines.append("")
    lines.extend(printable(message) for message in report.messages)
    if report.totals:
        lines.append(concise.totals(report))
    return "\n".join(lines) + "\n"
