"""One JSON object per line (the `json` format's objects), for streaming and line-oriented tools."""

from __future__ import annotations

import json


def render(report) -> str:
    return "".join(json.dumps(d.to_dict(), ensure_ascii=False) + "\n" for d in report.diagnostics)
