"""Helpers shared by the formats meant for CI tools: paths as those tools expect them, stable fingerprints."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

from amplint.diagnostics import Diagnostic

# The codes the engine reports for files it could not analyse; not rules, but reported like them.
FILE_ERRORS = {
    "AMP900": "The file cannot be parsed as Python.",
    "AMP901": "The file cannot be read or decoded.",
    "AMP902": "amplint failed while analysing the file.",
}


def relative_path(filename: str) -> str:
    """The reported path relative to the current folder when it lies inside it, always with forward slashes.

    CI tools (code scanning, GitLab, annotations) resolve paths against the checkout, where amplint runs.
    """
    if filename == "-":
        return filename
    path = Path(filename)
    if path.is_absolute():
        try:
            path = path.resolve().relative_to(Path.cwd().resolve())
        except ValueError:
            return path.as_posix()
    return path.as_posix()  # Path drops `.` parts: "./a/b.py" -> "a/b.py"


def fingerprints(diagnostics: list[Diagnostic]) -> list[str]:
    """One fingerprint per diagnostic that survives unrelated edits: lines added above do not change it.

    It hashes the relative path, the code and the stripped text of the reported line, plus how many earlier
    diagnostics had the same three (so two identical lines in one file stay distinct), never the line number.
    """
    seen: Counter[tuple[str, str, str]] = Counter()
    result = []
    for diagnostic in diagnostics:
        key = (relative_path(diagnostic.filename), diagnostic.code, diagnostic.source_line.strip())
        occurrence = seen[key]
        seen[key] += 1
        text = "\0".join((*key, str(occurrence)))
        result.append(hashlib.sha256(text.encode("utf-8")).hexdigest()[:32])
    return result
