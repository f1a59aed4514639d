"""GitHub Actions workflow commands: one `::error ...::message` (or `::warning`, by the diagnostic's level) line per
diagnostic, shown as annotations."""

from __future__ import annotations

from amplint.diagnostics import Diagnostic
from amplint.output.common import printable, relative_path


def escape_data(text: str) -> str:
    """The message part: GitHub decodes %25, %0D and %0A, so those three must be encoded (`%` first); other
    control characters (which GitHub does not decode) and bytes that are not UTF-8 become escapes."""
    text = printable(text, keep="\r\n")
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A `key=value` property: `:` ends the properties and `,` separates them, so they are encoded too."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(diagnostic: Diagnostic) -> str:
    properties = {
        "file": relative_path(diagnostic.filename),
        "line": diagnostic.location.row,
        "col": diagnostic.location.column,
        "endLine": diagnostic.end_location.row,
        "endColumn": diagnostic.end_location.column,
        "title": f"{diagnostic.code} {diagnostic.name}",
    }
    joined = ",".join(f"{key}={escape_property(str(value))}" for key, value in properties.items())
    # Rows of a notebook count from the top of the cell, so the annotation says which cell.
    cell = f"cell {diagnostic.cell}: " if diagnostic.cell is not None else ""
    # The annotation shows what is wrong, and what to do on its own line.
    help_line = f"\nhelp: {diagnostic.help}" if diagnostic.help else ""
    return f"::{diagnostic.severity.value} {joined}::{escape_data(cell + diagnostic.message + help_line)}"


def render(report) -> str:
    lines = [command(d) for d in report.diagnostics]
    lines.extend(f"::warning title=amplint::{escape_data(message)}" for message in report.messages)
    return "".join(line + "\n" for line in lines)
