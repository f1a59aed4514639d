"""Parsing a module with libcst, a long one in pieces.

libcst's parser takes more than linear time on long inputs (measured with libcst 1.9, cyclic GC off: 1.2 s
for 10,000 lines, 16 s for 100,000), while pieces of a few thousand lines parse at a steady rate. A module
longer than `CHUNK_LINES * 2` lines is cut before top-level statements into pieces of about `CHUNK_LINES`
lines (the cut points come from the stdlib `ast`, which parses about ten times faster); each piece is parsed
alone and the pieces are joined into one Module with the same code and the same tree as a parse of the whole
text (tests/test_parsing.py compares them).

What makes the pieces join exactly: each cut goes before the empty lines and column-0 comments that precede a
top-level statement (libcst gives those to the statement as `leading_lines`, or to the module `header` for a
piece's first statement: they are given back to it), and only where the line before them is code, so that a
piece ends on the last line of a statement (libcst does not give back every layout of blank and comment lines
at the end of a text exactly); every piece must agree on the indentation and newline libcst detected, else the
text is parsed whole.
"""

from __future__ import annotations

import ast
import re
import warnings

from amplint.lazy import libcst as cst

CHUNK_LINES = 2000
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")  # lines as Python's tokenizer counts them


def parse_module(text: str) -> cst.Module:
    """libcst's Module for the text; raises libcst's ParserSyntaxError (or RecursionError) as parse_module."""
    if text.count("\n") < 2 * CHUNK_LINES and text.count("\r") < 2 * CHUNK_LINES:
        return cst.parse_module(text)
    lines = _LINE.findall(text)
    cuts = _cut_points(text, lines)
    if not cuts:
        return cst.parse_module(text)
    bounds = [0, *cuts, len(lines)]
    pieces = [cst.parse_module("".join(lines[start:end])) for start, end in zip(bounds, bounds[1:])]
    return _join(pieces) or cst.parse_module(text)


def _cut_points(text: str, lines: list[str]) -> list[int]:
    """0-based line indexes to cut before (each the first line of a piece)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return []  # libcst parses it whole and reports the error
    cuts: list[int] = []
    previous = 0
    for statement in tree.body:
        decorators = getattr(statement, "decorator_list", None)
        first = (decorators[0].lineno - 1) if decorators else statement.lineno - 1  # 0-based
        if first - previous < CHUNK_LINES:
            continue
        cut = first
        while cut > previous and _blank_or_column0_comment(lines[cut - 1]):
            cut -= 1  # these lines belong to the statement: they open its piece
        if cut - previous >= CHUNK_LINES // 2 and _code(lines[cut - 1]) and not lines[first][:1].isspace():
            cuts.append(cut)
            previous = cut
    return cuts


def _code(line: str) -> bool:
    """Neither blank nor a comment: a piece must end on the last line of a statement (libcst does not give back
    every layout of blank and comment lines at the end of a text exactly)."""
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _blank_or_column0_comment(line: str) -> bool:
    """An empty line, or a comment at column 0 (a line of spaces may close the block above: it stays there)."""
    return not line.strip("\r\n") or line.startswith("#")


def _join(pieces: list[cst.Module]) -> cst.Module | None:
    """One Module from pieces parsed alone; None when they disagree on the detected indentation or newline."""
    first = pieces[0]
    indents = {piece.default_indent for piece in pieces if _indented(piece)}
    if len(indents) > 1 or len({piece.default_newline for piece in pieces}) > 1:
        return None
    body: list[cst.BaseStatement] = list(first.body)
    carried: list[cst.EmptyLine] = list(first.footer)  # lines at the end of a piece: they lead the next statement
    for piece in pieces[1:]:
        if not piece.body:
            return None
        lead = piece.body[0]
        lead = lead.with_changes(leading_lines=[*carried, *piece.header, *lead.leading_lines])
        body += [lead, *piece.body[1:]]
        carried = list(piece.footer)
    return first.with_changes(body=body, footer=carried, default_indent=indents.pop() if indents else
                              first.default_indent, has_trailing_newline=pieces[-1].has_trailing_newline)


def _indented(module: cst.Module) -> bool:
    """Did libcst see an indented block in this piece (so that its detected indentation means something)?"""
    return any(isinstance(getattr(statement, "body", None), cst.IndentedBlock) for statement in module.body)
