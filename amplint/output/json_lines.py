"""One JSON object per line (the `json` format's objects), for streaming and line-oriented tools."""

from __future__ import annotations

import json

from amplint.output.json_format import record


def render(report) -> str:
    return "".join(json.dumps(record(d), ensure_ascii=False) + "\n" for d in report.diagnostics)
