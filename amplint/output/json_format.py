"""A JSON list of diagnostic objects (code, name, message, filename, location, end_location, fix, url)."""

from __future__ import annotations

import json


def render(report) -> str:
    return json.dumps([d.to_dict() for d in report.diagnostics], indent=2) + "\n"
