"""The one vocabulary of the tool: locations, edits, fixes, diagnostics.

Rules produce diagnostics, the fixer applies their fixes, every output format renders them. Nothing here
knows about AMP, files on disk or the command line.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

def rule_url(code: str, docs_url: str | None) -> str | None:
    """The page of a code on the documentation site at `docs_url` (the `docs-url` setting): `<docs-url>/rules/CODE/`,
    as `mkdocs build` lays the site out; None without a site (no report then points at an address that may not
    exist, and `amplint rule CODE` prints the same documentation)."""
    if not docs_url:
        return None
    return f"{docs_url.rstrip('/')}/rules/{code}/"


@dataclass(frozen=True, order=True)
class Location:
    """A position in a source file: 1-based row, 1-based column (in characters)."""

    row: int
    column: int


class Severity(str, enum.Enum):
    """How much a finding matters (eslint's two levels). An error changes what a program computes or makes it
    raise; a warning is worth fixing but harmless (a deprecated spelling, needless work). Errors fail a run;
    warnings fail it only with `--exit-non-zero-on-warning`."""

    ERROR = "error"
    WARNING = "warning"


class Applicability(str, enum.Enum):
    """How much a fix can be trusted (ruff's meaning)."""

    SAFE = "safe"  # keeps the code's intent; applied by --fix
    UNSAFE = "unsafe"  # may change behaviour beyond the bug; needs --unsafe-fixes
    DISPLAY_ONLY = "display-only"  # shown as advice, never applied


def python_lines(text: str) -> list[str]:
    """The lines of `text` as Python's tokenizer counts them (the rows of a location): `\\r\\n`, `\\r` and `\\n` end
    a line, nothing else (`str.splitlines` also splits at `\\f`, `\\v`, `\\x1c`-`\\x1e`, `\\x85`, U+2028, U+2029,
    which may lie inside a line of code or a string), without their line breaks."""
    import re

    lines = re.split(r"\r\n|\r|\n", text)
    return lines[:-1] if lines[-1] == "" else lines


@dataclass(frozen=True)
class Edit:
    """Replace the text between two offsets of the source with `content`.

    `start`/`end` are character offsets into the decoded source; `location`/`end_location` are the same
    span as rows and columns, for reports.
    """

    start: int
    end: int
    content: str
    location: Location
    end_location: Location
    original: str = field(default="", compare=False)  # the text replaced, for `--show-fixes`' patch

    def patch(self, shift: int = 0) -> list[str]:
        """The edit as unified diff hunks (`@@ -row,n +row,n @@`, then ` `, `-`, `+` lines), rows the file's;
        `shift`: how many lines the edits before this one add (the new side's rows move by as many)."""
        import difflib
        import re

        old, new = python_lines(self.original), python_lines(self.content)
        hunks = []
        for line in list(difflib.unified_diff(old, new, n=1, lineterm=""))[2:]:
            match = re.match(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@$", line)
            if match:
                row = self.location.row - 1
                # difflib writes an empty side's start one line before where it would be
                before = int(match.group(1)) + row
                after = int(match.group(3)) + row + shift
                line = f"@@ -{before}{match.group(2) or ''} +{after}{match.group(4) or ''} @@"
            hunks.append(line)
        return hunks

    def to_dict(self) -> dict:
        return {
            "content": self.content,
            "location": {"row": self.location.row, "column": self.location.column},
            "end_location": {"row": self.end_location.row, "column": self.end_location.column},
        }


@dataclass(frozen=True)
class Fix:
    message: str
    edits: tuple[Edit, ...]
    applicability: Applicability = Applicability.SAFE

    def to_dict(self) -> dict:
        return {
            "applicability": self.applicability.value,
            "message": self.message,
            "edits": [edit.to_dict() for edit in self.edits],
        }


@dataclass(frozen=True)
class Note:
    """Evidence for a finding at another place: where a value became what the message says (the op, the autocast
    region, the call it came through). `filename` None: the diagnostic's own file. Rendered as `= note:` lines in
    the text formats, as `relatedLocations` in SARIF (GitHub shows them beside the result), as `notes` in JSON."""

    message: str
    location: Location
    filename: str | None = None
    cell: int | None = None  # 1-based notebook cell (rows then count within it), as Diagnostic's

    def to_dict(self, filename: str) -> dict:
        return {"message": self.message, "filename": self.filename or filename, "cell": self.cell,
                "location": {"row": self.location.row, "column": self.location.column}}


@dataclass(frozen=True)
class Diagnostic:
    code: str
    name: str
    message: str
    filename: str
    location: Location
    end_location: Location
    fix: Fix | None = None
    cell: int | None = None  # 1-based notebook cell, None for plain Python files
    source_line: str = field(default="", compare=False)  # the first reported line, for the source frame
    # The rule's default level (Rule.severity); a run's configuration may change it (amplint/config.py).
    severity: Severity = Severity.ERROR
    # What to do about it (a short line, often the fix's title); None when the message says it all.
    help: str | None = None
    # The documentation site (the run's `docs-url` setting), set after linting as the levels are; None: no links.
    docs_url: str | None = field(default=None, compare=False)
    # Where the facts the message states were shown (see Note); empty for most findings.
    notes: tuple[Note, ...] = ()

    @property
    def url(self) -> str | None:
        """The code's page on the documentation site, None when no `docs-url` is set."""
        return rule_url(self.code, self.docs_url)

    def sort_key(self) -> tuple:
        return (self.filename, self.cell or 0, self.location.row, self.location.column, self.code)

    def fixable(self, unsafe: bool = False) -> bool:
        if self.fix is None:
            return False
        if self.fix.applicability is Applicability.SAFE:
            return True
        return unsafe and self.fix.applicability is Applicability.UNSAFE

    def to_dict(self) -> dict:
        return {
            "code": self.code,
            "name": self.name,
            "message": self.message,
            "help": self.help,
            "filename": self.filename,
            "cell": self.cell,
            "location": {"row": self.location.row, "column": self.location.column},
            "end_location": {"row": self.end_location.row, "column": self.end_location.column},
            "fix": self.fix.to_dict() if self.fix else None,
            "severity": self.severity.value,
            "url": self.url,
            "notes": [note.to_dict(self.filename) for note in self.notes],
        }


def with_severities(diagnostics: list[Diagnostic], levels: dict[str, Severity]) -> list[Diagnostic]:
    """The diagnostics with the levels a run's configuration gives their codes (code -> level; codes not named
    keep their rule's default). Applied after linting, so the cache holds the defaults whatever the settings."""
    if not levels:
        return diagnostics
    return [replace(d, severity=levels[d.code]) if levels.get(d.code, d.severity) is not d.severity else d
            for d in diagnostics]


def with_docs_url(diagnostics: list[Diagnostic], docs_url: str | None) -> list[Diagnostic]:
    """The diagnostics linking to the documentation site at `docs_url` (the `docs-url` setting)."""
    if not docs_url:
        return diagnostics
    return [replace(d, docs_url=docs_url) for d in diagnostics]
