"""GitLab code quality report: a JSON list of issues that merge requests show and compare between pipelines."""

from __future__ import annotations

import json

from amplint.diagnostics import Diagnostic, Severity
from amplint.output.common import FILE_ERRORS, fingerprints, portable, relative_path


def severity(diagnostic: Diagnostic) -> str:
    """GitLab's scale (info, minor, major, critical, blocker): a warning is minor, an error major; a file that
    could not be analysed may hide any number of findings, so it ranks above one finding."""
    if diagnostic.code in FILE_ERRORS:
        return "critical"
    return "major" if diagnostic.severity is Severity.ERROR else "minor"


def issue(diagnostic, fingerprint: str) -> dict:
    cell = f" (cell {diagnostic.cell})" if diagnostic.cell is not None else ""
    entry = {
        "description": portable(f"{diagnostic.code}{cell} {diagnostic.message}"),
        "check_name": diagnostic.code,
        "fingerprint": fingerprint,
        "severity": severity(diagnostic),
        "location": {
            "path": portable(relative_path(diagnostic.filename)),
            "lines": {"begin": diagnostic.location.row, "end": diagnostic.end_location.row},
        },
    }
    if diagnostic.help:
        entry["content"] = {"body": portable(f"help: {diagnostic.help}")}  # GitLab's markdown details
    return entry


def render(report) -> str:
    issues = [issue(d, fp) for d, fp in zip(report.diagnostics, fingerprints(report.diagnostics))]
    return json.dumps(issues, indent=2, ensure_ascii=False) + "\n"
