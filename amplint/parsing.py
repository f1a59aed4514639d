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

Before libcst, `nesting` measures how deeply the text nests (see there); a text nested deeper than libcst can
parse safely is refused (`TooDeeplyNested`) rather than parsed: libcst's native parser overflows its stack
on such input and the process dies (a segmentation fault: no diagnostic for any file).
"""

from __future__ import annotations

import ast
import functools
import re
import sys
import warnings
from contextlib import contextmanager

from amplint.lazy import libcst as cst

CHUNK_LINES = 2000
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")  # lines as Python's tokenizer counts them


def parse_module(text: str) -> cst.Module:
    """libcst's Module for the text; raises libcst's ParserSyntaxError (or RecursionError) as parse_module, and
    TooDeeplyNested (a RecursionError) without parsing a text nested deeper than `MAX_NESTING`."""
    measured = nesting(text)
    if measured.depth > MAX_NESTING:
        raise TooDeeplyNested(measured)
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


# Size -----------------------------------------------------------------------------------------------------------
# A parse's tree grows with the text: measured (libcst 1.9, CPython 3.11, files of short functions, peak resident
# memory of a child process) libcst's tree takes about 175 bytes per character and the stdlib `ast`'s, which the
# index and the slicer build first, about 160; the analysis of a module whose every function holds a finding
# about 650 in all. A whole-file parse past `MAX_PARSED_CHARS` (2 MiB: about 350 MB for libcst's tree, 330 MB
# for the analysis of a module of few findings) would pass ~500 MB and keep growing (10 MB of such code: 115 s
# and 2.4 GB; 50 MB: beyond the 12 GB of most machines), so such a text is not parsed: the engine reports it
# (AMP901, with the reason) and the index leaves it out (known by name only). Only a file that the text screen
# sends to the analysis meets the bound: a large file with no AMP vocabulary is skipped as before, unparsed.
MAX_PARSED_CHARS = 2 * 1024 * 1024
BYTES_PER_CHAR = 175  # libcst's tree, per character of source (measured; see above)


def too_large(text: str, limit: int | None = None) -> str | None:
    """Why `text` is not parsed (longer than `limit`, `MAX_PARSED_CHARS` by default); None when it is parsed."""
    limit = MAX_PARSED_CHARS if limit is None else limit
    if len(text) <= limit:
        return None
    need = len(text) * BYTES_PER_CHAR / 2 ** 30
    return (f"too large to analyse: {len(text):,} characters, over the {limit:,} amplint parses in one file "
            f"(its parser would need about {need:.1f} GB of memory here); split the file or exclude it")


# Nesting -------------------------------------------------------------------------------------------------------
# libcst's native parser recurses on the native stack, several frames per level of the tree: past some depth the
# process dies (SIGSEGV, the whole run with it). Measured in child processes, Python 3.11, one construct per
# file (`x = ...`), with a 1 MB stack: the number of levels at which libcst dies, and `nesting`'s depth there.
# An 8 MB stack (a main thread's usual) goes about 8 times as deep; checked at 8 MB: `(((a)))` and `f(f(a))`
# parse at 1,000 levels and die at 1,500 (1.5.1, 1.0.1), `a + a + ...` parses at 3,000 and dies at 8,000 (1.5.1).
#   construct                          dies at (1.9.0 / 1.5.1 / 1.0.1)   nesting per level   least nesting there
#   `a + a + ...`, `a ** a ...`         850 / 850 / 750                    1                   750
#   `a and a and ...`, `or`             862 / 850 / 750                    1                   750
#   `"a" "a" ...` (adjacent strings)    1,250 / 1,075 / 700                1                   700
#   `(((a)))`, `[[[a]]]`                159 / 146 / 165                    7                   1,022
#   `f(f(a))`, `a[a[a]]`                146 / 159 / -                      7                   1,022
#   `a.b.c...`                          725 / 725 / 625                    1                   625
#   `a.b().b()...`                      393 / 387 / 343                    3                   1,029
#   `a[0][0]...`                        775 / 762 / 562                    2                   1,124
#   `-a`, `not a` prefixes              1,012 / 1,212 / -                  1                   1,012
#   `a if b else ...`                   687 / 675 / 518                    2                   1,036
#   `lambda: lambda: ...`               431 / 443 / 387                    2                   774
#   `a < a < ...` (flat in libcst)      none at 16,000 (1.5.1, 8 MB)       0
#   `if`/`elif` chain (1.9.0)           between 600 and 1,000 (1 MB); none at 5,000 (8 MB)   1 (`_elif_chains`)
# So libcst survives a nesting of about 625 per MB of stack, 5,000 with 8 MB; `MAX_NESTING` is 2,000 (285
# nested brackets; CPython refuses more than 200, and CPython 3.11 refuses trees deeper than
# about 3,000). Past 1,000 or so libcst is also slow: a 2,000-term `a + a + ...` takes seconds to parse.
#
# `nesting` is a cheap upper bound of a statement's tree depth, measured on tokens (no parse, no recursion):
# within one element (between commas, in a bracket or a logical line), the longest run of operators of each
# precedence (see `_PRECEDENCE`), and a bracketed operand's own depth plus `BRACKET_WEIGHT` (a bracket costs libcst
# several rules of its grammar). A comma, `;`, `=`, a statement keyword or the end of a logical line starts a new
# element. Names, numbers, comments and string contents add nothing. Generated expressions (tests/test_parsing.py)
# are never deeper than it says (plus the few whitespace and operator nodes at the leaves). On torch's 462 KB
# distributed_test.py (depth 35) it takes 18-36 ms, about 2% of libcst's parse of the same text (1.3-1.8 s, a
# loaded machine); the 8,359 files of the test environment's site-packages (135 MB) take 13 s, the deepest is
# sympy's generated resolvent_lookup.py (588; its stdlib tree is 569 deep), 18 are 100 or more.
BRACKET_WEIGHT = 5
MAX_NESTING = 2000
# Operators by precedence, lowest first, and the levels each adds to the tree: a run of operators of one
# precedence nests (`a + b - c`: two levels), and an operator of a lower one ends the runs above it (in
# `a*b + c*d` the products are two operands of `+`, side by side). Comparisons are flat in libcst: they add
# nothing but end the runs above them. `.` and a call's or subscript's bracket are the primary level (a
# bracket two levels); adjacent string literals, which nest too, the highest.
_PRECEDENCE = (("lambda", 2), ("if else", 1), ("or", 1), ("and", 1), ("not", 1),
               ("< > == != <= >= in is", 0), ("|", 1), ("^", 1), ("&", 1), ("<< >>", 1), ("+ -", 1),
               ("* / // % @", 1), ("~", 1), ("**", 1), ("await", 1), (".", 1))
_OPERATORS = {operator: (level, weight) for level, (operators, weight) in enumerate(_PRECEDENCE)
              for operator in operators.split()}
_PRIMARY = _OPERATORS["."][0]
_STRING = _PRIMARY + 1
_LEVELS = _STRING + 1
_WORDS = r"(?:lambda|if|else|or|and|not|in|is|await)\b"
_STATEMENT_WORDS = (r"(?:for|while|with|return|yield|del|assert|import|from|class|def|global|nonlocal|raise|except"
                    r"|elif|case|match|try|finally|pass|break|continue|async)\b")
_TOKEN = re.compile(
    # Skipped inside the match (no depth): names other than these words, numbers, spaces, `:`.
    r"(?:(?!" + _WORDS + "|" + _STATEMENT_WORDS + r")[^\W\d]\w*|[\d \t:]+)*+"
    r"(?:(#[^\r\n]*|\\(?:\r\n|\r|\n))"  # 1: a comment, a line continuation
    r"|('''(?:[^'\\]+|\\.|'(?!''))*+(?:'''|\Z)"  # 2: a string (its prefix was skipped as a name)
    r'|"""(?:[^"\\]+|\\.|"(?!""))*+(?:"""|\Z)'
    r"""|'(?:[^'\\\r\n]+|\\(?:\r\n|.))*+'?"""
    r'''|"(?:[^"\\\r\n]+|\\(?:\r\n|.))*+"?)'''
    r"|([(\[{])|([)\]}])"  # 3: an opening, 4: a closing bracket
    r"|([,;]|->|:=|=(?!=)|" + _STATEMENT_WORDS + ")"  # 5: a new element (`=`: its two sides are apart)
    r"|(\r\n|\r|\n)"  # 6: a line break (the end of a logical line outside brackets)
    r"|(\*\*|//|<<|>>|<=|>=|==|!=|[-+*/%@&|^~<>.]|" + _WORDS + ")"  # 7: an operator
    r"|(.)|\Z)",  # 8: anything else (`$`, `!`, a stray character); the end: a match never fails (no backtracking)
    re.DOTALL)


class Nesting:
    """How deeply a text nests (`nesting`): `depth`, and `offset`, where the deepest logical line starts."""

    __slots__ = ("depth", "offset")

    def __init__(self, depth: int, offset: int) -> None:
        self.depth, self.offset = depth, offset


class TooDeeplyNested(RecursionError):
    """A text nested deeper than libcst can parse safely: a RecursionError, as libcst's own would be."""

    def __init__(self, measured: Nesting) -> None:
        super().__init__(f"too deeply nested to analyse (depth {measured.depth:,}, limit {MAX_NESTING:,})")
        self.nesting = measured


@functools.lru_cache(maxsize=2)  # asked by the parse, then by the analysis of the same text
def nesting(text: str) -> Nesting:
    """An upper bound of the depth of the text's syntax tree in libcst's nodes (see the notes above).

    Per element: `runs[level]` counts the current run of operators of one precedence, `longest[level]` the
    longest so far, `total` their sum (the element's depth without its brackets), `deepest` its deepest
    bracketed operand; `top` is the most (total + deepest) of a bracket's elements so far."""
    zeros = [0] * _LEVELS
    operators, primary, string = _OPERATORS, _PRIMARY, _STRING
    runs, longest = zeros[:], zeros[:]
    total = deepest = top = high = 0  # high: the highest precedence with a run going on
    stack: list[tuple] = []  # the enclosing brackets' (runs, longest, total, deepest, top, high)
    push, pop = stack.append, stack.pop
    best = best_offset = line_start = 0
    starts = [0] if "elif" in text else None  # where each logical line starts, for `_elif_chains`
    for match in _TOKEN.finditer(text):
        kind = match.lastindex
        if kind == 7 or kind == 2 or kind == 3:
            if kind == 7:
                level, weight = operators[match.group(7)]
            elif kind == 2:
                level, weight = string, 1
            else:
                level, weight = primary, 2  # a call or a subscript: two more levels of its operand
            run = runs[level] + weight
            runs[level] = run
            if run > longest[level]:
                total += run - longest[level]
                longest[level] = run
            if high > level:  # a run above this precedence has ended
                runs[level + 1:] = zeros[level + 1:]
            high = level
            if total + deepest > top:
                top = total + deepest
            if kind == 3:
                push((runs, longest, total, deepest, top, high))
                runs, longest = zeros[:], zeros[:]
                total = deepest = top = high = 0
        elif kind == 4:
            if stack:
                inner = top + BRACKET_WEIGHT
                runs, longest, total, deepest, top, high = pop()
                if inner > deepest:
                    deepest = inner
                if total + deepest > top:
                    top = total + deepest
        elif kind == 5:
            runs, longest = zeros[:], zeros[:]
            total = deepest = high = 0
        elif kind == 6 and not stack:
            if top > best:
                best, best_offset = top, line_start
            runs, longest = zeros[:], zeros[:]
            total = deepest = top = high = 0
            line_start = match.end()
            if starts is not None:
                starts.append(line_start)
    while stack:  # brackets left open (a syntax error): as if closed at the end
        inner = top + BRACKET_WEIGHT
        runs, longest, total, deepest, top, high = pop()
        top = max(top, total + max(deepest, inner))
    if top > best:
        best, best_offset = top, line_start
    if starts is not None:
        chain, chain_offset = _elif_chains(text, starts)
        if chain > best:
            best, best_offset = chain, chain_offset
    return Nesting(best, best_offset)


# An `elif` is an `If` in the `orelse` of the one before it: a chain of them nests as deep as it is long, in
# libcst's parser, its code generation and its visitors, though each starts a statement of its own. Measured on
# logical lines (strings, brackets and continuations are skipped by `_TOKEN`): an `elif` at an indentation
# lengthens the chain open there, any other statement but `else` at that indentation ends it, a statement indented
# less ends the chains indented more; a chain inside an `elif`'s or the `else`'s body nests inside the one around
# it, so the depth at a point is the sum of the chains open there, `ELIF_WEIGHT` levels per `elif`. (Counting
# every `elif` at an indentation in the file refused large files of many short `if`/`elif` statements.)
ELIF_WEIGHT = 1
_INDENT = re.compile(r"[ \t\x0c]*")
_ELIF_WORD = re.compile(r"elif(?!\w)")
_ELSE_WORD = re.compile(r"else(?!\w)")


def _elif_chains(text: str, starts: list[int]) -> tuple[int, int]:
    """(the depth of the deepest nest of `elif` chains, where its innermost chain's first `elif` starts), from the
    starts of the text's logical lines."""
    open_chains: list[list[int]] = []  # [indentation width, elifs, offset of the first], outermost first
    depth = best = best_offset = 0
    indent, elif_word, else_word = _INDENT.match, _ELIF_WORD.match, _ELSE_WORD.match
    for start in starts:
        end = indent(text, start).end()
        if end >= len(text) or text[end] in "\r\n#":
            continue  # a blank or comment line: no statement
        width = len(text[start:end].rsplit("\x0c", 1)[-1].expandtabs(8))  # a form feed resets the column
        while open_chains and open_chains[-1][0] > width:
            depth -= open_chains.pop()[1]
        is_elif = elif_word(text, end) is not None
        if open_chains and open_chains[-1][0] == width:
            if is_elif:
                open_chains[-1][1] += 1
                depth += 1
            elif else_word(text, end) is None:  # an `else:` body nests in the chain's last `If`, as an elif's
                depth -= open_chains.pop()[1]
        elif is_elif:
            open_chains.append([width, 1, end])
            depth += 1
        if depth > best:
            best, best_offset = depth, open_chains[-1][2]
    return best * ELIF_WEIGHT, best_offset


# libcst's code generation and visitors recurse two or three Python frames per level of the tree (amplint's
# own walks do not recurse): four per level of `nesting` let every construct of the table above reach
# MAX_NESTING with any rule's fix (tests/test_hostile_input.py).
FRAMES_PER_LEVEL = 4
_ROOMY = 100  # below this depth the default recursion limit has room enough: it is left alone


@contextmanager
def recursion_room(text: str):
    """Python's recursion limit raised for the duration, by as much as the text nests."""
    depth = nesting(text).depth
    if depth < _ROOMY:
        yield
        return
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(previous + FRAMES_PER_LEVEL * depth)
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


# Identifiers as Python reads them -------------------------------------------------------------------------------
# CPython's parser normalizes every identifier to NFKC (PEP 3131): `ｔｏｒｃｈ.autocast` (full-width letters) is
# `torch.autocast`. libcst keeps the text as written, so amplint compares the names of a text whose identifiers are
# given their NFKC form where that form has the same length (full-width letters, most compatibility forms): the
# offsets, rows and columns stay those of the text. Strings and comments are left as written (Python does not
# normalize them), and so are letters NFKC keeps apart (Cyrillic `о` is no Latin `o`, to Python or to amplint).


def python_identifiers(text: str) -> str:
    """`text` with each identifier that is not in NFKC form replaced by its NFKC form, where that keeps its length
    (found with the tokenizer: never inside strings or comments); `text` itself when nothing changes or the text
    does not tokenize."""
    global _LAST_NORMALIZED
    if text.isascii():
        return text
    import unicodedata

    if unicodedata.is_normalized("NFKC", text):  # no identifier can change (one pass in C)
        return text
    last_text, last_normal = _LAST_NORMALIZED
    if text is last_text:  # the screen and the engine ask of the same text in turn: it is tokenized once
        return last_normal
    normal = _normalized_identifiers(text)
    _LAST_NORMALIZED = (text, normal)
    return normal


_LAST_NORMALIZED: tuple[str | None, str] = (None, "")


def _normalized_identifiers(text: str) -> str:
    import io
    import tokenize
    import unicodedata

    starts = [0] + [match.end() for match in re.finditer(r"\r\n?|\n", text)]
    replaced: list[tuple[int, int, str]] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(text, newline="").readline):
            if token.type != tokenize.NAME or token.string.isascii():
                continue
            normal = unicodedata.normalize("NFKC", token.string)
            if normal != token.string and len(normal) == len(token.string) and token.start[0] <= len(starts):
                start = starts[token.start[0] - 1] + token.start[1]
                if text[start:start + len(normal)] == token.string:
                    replaced.append((start, start + len(normal), normal))
    except (tokenize.TokenError, SyntaxError, ValueError, IndentationError, RecursionError, MemoryError):
        return text
    if not replaced:
        return text
    parts, previous = [], 0
    for start, end, normal in replaced:
        parts += [text[previous:start], normal]
        previous = end
    parts.append(text[previous:])
    return "".join(parts)
