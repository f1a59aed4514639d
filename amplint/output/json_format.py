"""A JSON list of diagnostic objects (code, name, message, help, filename, cell, location, end_location, fix,
severity, url)."""

from __future__ import annotations

import json

from amplint.output.common import portable


def record(diagnostic) -> dict:
    """The diagnostic's object, its file name and message as text any JSON reader accepts (a name's bytes that
    are not UTF-8 as `\\xNN` escapes, never a lone surrogate)."""
    data = diagnostic.to_dict()
    data["filename"] = portable(data["filename"])
    data["message"] = portable(data["message"])
    if data["help"] is not None:
        data["help"] = portable(data["help"])
    return data


def render(report) -> str:
    return json.dumps([record(d) for d in report.diagnostics], indent=2) + "\n"
