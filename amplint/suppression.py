"""Suppression comments, found by Python's tokenizer: a `# noqa` inside a string, a docstring or an f-string is
text, not a comment, and suppresses nothing.

- `# noqa` (every code) or `# noqa: AMP001, AMP003` (those codes; a rule's name is accepted too) at the end of
  the reported line.
- `# amplint: noqa` on a line of its own: the whole file; `# amplint: noqa: AMP002` on a line of its own: only
  those codes in the whole file, as ruff's `# ruff: noqa: F401`. A code no rule has is warned about on stderr.

The tokenizer runs only when the text holds the word (a plain search first), and once per text.
"""

from __future__ import annotations

import io
import re
import sys
import tokenize
from dataclasses import dataclass

LINE_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z][\w-]*(?:[,\s]+[A-Za-z][\w-]*)*))?", re.IGNORECASE)
FILE_NOQA = re.compile(r"^#\s*amplint:\s*noqa(?P<rest>\b.*)$", re.IGNORECASE)
_FILE_WORD = re.compile(r"amplint:\s*noqa", re.IGNORECASE)
_FILE_CODES = re.compile(r"^\s*:\s*(?P<codes>[A-Za-z][\w-]*(?:[,\s]+[A-Za-z][\w-]*)*)", re.IGNORECASE)
_LINE_BREAK = re.compile(r"\r\n?|\n")


def comments(text: str) -> list[tuple[int, int, str]]:
    """(row, column0, text) of every comment of `text`, as Python's tokenizer reads them (rows as Python counts
    them: a lone `\\r` ends a line too). A text the tokenizer stops on (a syntax error) keeps the comments before
    the point where it stopped."""
    if "\r" in text:
        lines = [match for match in re.split(r"(?<=\r\n)|(?<=\r)(?!\n)|(?<=\n)", text) if match]
        text = "".join(_one_break(line) for line in lines)
    found = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                found.append((token.start[0], token.start[1], token.string))
    except (tokenize.TokenError, SyntaxError, ValueError):
        pass
    return found


def _one_break(line: str) -> str:
    """A line with its break made `\\n` (the tokenizer's rows are then the text's, whatever its breaks)."""
    stripped = _LINE_BREAK.sub("", line)
    return stripped + "\n" if len(stripped) != len(line) else line


@dataclass(frozen=True)
class FileSuppression:
    """The file-level `# amplint: noqa` of a text: `codes` None for every code, else the codes (upper case)."""

    codes: frozenset[str] | None
    unknown: tuple[tuple[int, str], ...] = ()  # (row, what was written) naming no rule

    @property
    def everything(self) -> bool:
        return self.codes is None

    def covers(self, code: str) -> bool:
        return self.codes is None or code in self.codes


def _known() -> tuple[dict[str, str], frozenset[str]]:
    from amplint.rules import CATALOG  # codes and names only: no rule module is imported

    codes = frozenset({rule.code for rule in CATALOG} | {"AMP900", "AMP901", "AMP902"})
    return {rule.name: rule.code for rule in CATALOG}, codes


def _resolve(written: str) -> str | None:
    """The code a word of a noqa list means (a code, or a rule's name), None for none."""
    names, codes = _known()
    if written.upper() in codes:
        return written.upper()
    return names.get(written.lower())


_LAST: list = [None, None]  # the last text asked about and its answer (the screen, the engine and the warning ask)


def file_suppression(text: str) -> FileSuppression | None:
    """The file-level suppression of `text`, None when it has none (only comments on a line of their own)."""
    if _LAST[0] is text:
        return _LAST[1]
    if "noqa" not in text.lower() or not _FILE_WORD.search(text):  # (the plain test first: 50x faster on large texts)
        return None
    found = _file_suppression(text)
    _LAST[:] = [text, found]
    return found


def _file_suppression(text: str) -> FileSuppression | None:
    lines = None
    codes: set[str] = set()
    unknown = []
    seen = False
    for row, column, comment in comments(text):
        match = FILE_NOQA.match(comment)
        if match is None:
            continue
        if lines is None:
            lines = _LINE_BREAK.split(text)
        if lines[row - 1][:column].strip():
            continue  # after code on its line: not a file-level comment
        listed = _FILE_CODES.match(match.group("rest"))
        if listed is None:
            return FileSuppression(None)  # bare: the whole file
        seen = True
        for word in (w for w in re.split(r"[,\s]+", listed.group("codes")) if w):
            code = _resolve(word)
            if code is None:
                unknown.append((row, word))
            else:
                codes.add(code)
    if not seen:
        return None
    return FileSuppression(frozenset(codes), tuple(unknown))


def warn_unknown(suppression: FileSuppression | None, filename: str) -> None:
    """A warning on stderr for each code of a file-level `# amplint: noqa: CODES` that names no rule."""
    if suppression is None:
        return
    for row, word in suppression.unknown:
        print(f"amplint: warning: {filename}:{row}: `# amplint: noqa` names an unknown code {word!r}; "
              "it suppresses nothing", file=sys.stderr)


class LineSuppressions:
    """The `# noqa` comments of one text by row, tokenized on first use."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._rows: dict[int, list[str]] | None = None

    def rows(self) -> dict[int, list[str]]:
        if self._rows is None:
            self._rows = {}
            for row, _, comment in comments(self.text):
                if "noqa" in comment.lower():
                    self._rows.setdefault(row, []).append(comment)
        return self._rows

    def suppresses(self, row: int, code: str, line: str) -> bool:
        """Does a `# noqa` comment on `row` (whose text is `line`) suppress `code`?"""
        if "noqa" not in line.lower():
            return False  # no tokenizing for the common case
        for comment in self.rows().get(row, ()):
            for match in LINE_NOQA.finditer(comment):
                listed = match.group("codes")
                if listed is None:
                    return True
                words = [w for w in re.split(r"[,\s]+", listed) if w]
                if code in {_resolve(word) for word in words}:
                    return True
        return False
