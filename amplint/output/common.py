"""Helpers shared by the formats meant for CI tools: paths as those tools expect them, stable fingerprints."""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

from amplint.diagnostics import Diagnostic

# The codes the engine reports for files it could not analyse; not rules, but reported like them.
FILE_ERRORS = {
    "AMP900": "The file cannot be parsed as Python.",
    "AMP901": "The file cannot be read or decoded.",
    "AMP902": "amplint failed while analysing the file.",
}


# Characters that move the cursor, end a line or drive the terminal when printed: C0, DEL, C1, line separators.
# Bidirectional overrides too: they reorder what follows them on screen.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def name_bytes(text: str) -> bytes:
    """The bytes of a file name as the system gave them: Python keeps bytes that are not UTF-8 as lone
    surrogates (U+DC80-U+DCFF), which become those bytes again. Any other lone surrogate is escaped."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace")


def portable(text: str) -> str:
    """Text every encoder accepts (JSON, XML, a UTF-8 file or terminal): the bytes of a file name that are not
    UTF-8 become `\\xNN` escapes; everything else is unchanged."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return name_bytes(text).decode("utf-8", "backslashreplace")
    return text


def printable(text: str, keep: str = "") -> str:
    """`portable` text that also prints on one line: control characters become escapes (`\\n`, `\\x1b`), so a
    file name with a newline cannot split a report line or forge another. `keep` names characters the caller
    encodes itself."""
    def escape(match: re.Match) -> str:
        char = match.group()
        if char in keep:
            return char
        return SHORT_ESCAPES.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")

    return CONTROL.sub(escape, portable(text))


GIT_ESCAPES = {0x07: "\\a", 0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0B: "\\v", 0x0C: "\\f", 0x0D: "\\r",
               0x22: '\\"', 0x5C: "\\\\"}


def diff_path(text: str) -> str:
    """A name for a diff header (`a/x.py`), quoted the way git quotes it when it must be, so that `git apply`
    and GNU patch read it back: a name with a control character, a quote, a backslash or bytes that are not
    UTF-8 goes in double quotes with those as escapes (octal for a byte); so does a name with a space (GNU patch
    ends an unquoted name at a space). Other names are left as they are."""
    special = '"\\ ' if os.sep == "/" else '" '  # a backslash is a separator on Windows, part of a name elsewhere
    if portable(text) == text and not CONTROL.search(text) and not any(char in text for char in special):
        return text
    out = []
    for char in name_bytes(text).decode("utf-8", "surrogateescape"):
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8
            out.append(f"\\{code - 0xDC00:03o}")
        elif code in GIT_ESCAPES and (code != 0x5C or os.sep == "/"):
            out.append(GIT_ESCAPES[code])
        elif CONTROL.match(char):
            out.extend(f"\\{byte:03o}" for byte in char.encode("utf-8"))
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


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
        result.append(_sha256(name_bytes(text)).hexdigest()[:32])
    return result


def _sha256(data: bytes):
    import hashlib  # only the formats that fingerprint findings need it

    return hashlib.sha256(data)
