"""Jupyter notebooks (`.ipynb`): the code cells, in order, linted and fixed as one program.

A GradScaler built in one cell and stepped in a loop in another is one program, so the code cells are joined
with newlines into one text, IPython syntax (magics, shell escapes, help lines, continued or not) is replaced by
placeholders with the same number of lines, as IPython's own input transforms read it, and diagnostic rows are
mapped back to (cell, row within the cell). A cell that does not parse even so is reported on its own and left
out of the program (blanked), so that the other cells are still linted.

Cells are numbered as they appear in the notebook: 1-based among *all* cells, markdown and raw cells
included, so "cell 3" is the third cell from the top whatever the kinds of the cells above it.
"""

from __future__ import annotations

import ast
import bisect
import codecs
import copy
import dataclasses
import difflib
import json
import re
import textwrap
import warnings
from dataclasses import dataclass, field

from amplint.diagnostics import Applicability, Diagnostic, Fix, Location
from amplint.engine import SYNTAX_ERROR, lint_text
from amplint.fixer import parse_error
from amplint.parsing import too_large
from amplint.source import DEFAULT_MAX_FILE_SIZE, SourceError, SourceText, read_bytes, write_atomically
from amplint.sources.base import FixRefused, Source, unified_diff

PLACEHOLDER = "pass  # amplint: magic"
CONTINUED = PLACEHOLDER + " (continued)"  # a continuation line of the IPython statement above it
PLACEHOLDER_LINE = re.compile(
    r"^(?P<indent>[ \t]*)pass  # amplint: magic(?P<continued> \(continued\))?(?P<cr>\r?)$")
# Cell magics whose body is Python run in the kernel: only their first line is masked. Any other `%%` cell
# (`%%bash`, `%%writefile`, `%%html`, `%%python` in a subprocess, an unknown one) is not linted.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug"})
# What starts an IPython line: magic, shell, help, and the autocall escapes (`/f x`, `,f x`, `;f x`).
ESCAPES = ("%", "!", "?", "/", ",", ";")
# `x = !ls`, `files = %sx ls`: an assignment whose value is IPython syntax.
MAGIC_ASSIGNMENT = re.compile(r"^[ \t]*[A-Za-z_][\w.,\[\] \t]*=[ \t]*[!%]")
# IPython's line magics and the shell aliases it defines on POSIX, which a one-line cell may call without `%`.
AUTOMAGIC = frozenset({
    "alias", "alias_magic", "autoawait", "autocall", "automagic", "bookmark", "cat", "cd", "clear", "colors",
    "conda", "config", "cp", "cpaste", "debug", "dhist", "dirs", "doctest_mode", "ed", "edit", "env", "gui",
    "hist", "history", "killbgscripts", "ldir", "less", "lf", "lk", "ll", "load", "load_ext", "loadpy",
    "logoff", "logon", "logstart", "logstate", "logstop", "ls", "lsmagic", "lx", "macro", "magic", "mamba",
    "man", "matplotlib", "micromamba", "mkdir", "more", "mv", "notebook", "page", "pastebin", "pdb", "pdef",
    "pdoc", "pfile", "pinfo", "pinfo2", "pip", "popd", "pprint", "precision", "prun", "psearch", "psource",
    "pushd", "pwd", "pycat", "pylab", "qtconsole", "quickref", "recall", "rehashx", "reload_ext", "rep",
    "rerun", "reset", "reset_selective", "rm", "rmdir", "run", "save", "sc", "set_env", "store", "sx", "system",
    "tb", "time", "timeit", "unalias", "unload_ext", "uv", "who", "who_ls", "whos", "xdel", "xmode"
})
# Pasted prompts, as IPython's PromptStripper reads them: (the first line's pattern, every line's pattern). The
# classic `>>> ` / `... ` prompts, then IPython's own `In [3]: ` / `   ...: ` (vi mode's `[ins] ` in front).
# IPython's `In [1]: ` / `...: ` prompt stripper: (first-line pattern, every-line pattern).
IPYTHON_PROMPT = (re.compile(r"^(((\[nav\]|\[ins\])? )?In \[\d+\]: |\s*\.{3,}: ?)"),) * 2
# Its classic `>>>` stripper runs in doctest mode (IPython 9): indented prompts too (`    >>> x`), `...`
# continuations only in a block that has a `>>>` line, nothing inside a triple-quoted string, then each stripped
# run dedented.
DOCTEST_PS1 = re.compile(r"^\s*>>>[ \t]?")
DOCTEST_PS2 = re.compile(r"^\s*\.\.\.[ \t]?")
TRIPLE_QUOTE = re.compile(r"(?<!\\)(\"\"\"|\'\'\')")
STRING_PREFIX = re.compile(r"(?i)^[rubf]*$")
AUTOMAGIC_LINE = re.compile(r"^(?P<name>[A-Za-z_]\w*)(?P<rest>(?:[ \t].*)?)$")
LINE_REFERENCE = re.compile(r"\bline (\d+)\b")


class NotebookError(SourceError):
    """A file that is not a notebook amplint can read; the message is shown to the user (AMP901)."""


@dataclass
class CodeCell:
    number: int  # 1-based position among all cells of the notebook
    position: int  # index in the notebook's `cells` list
    lines: list[str]  # the source split on "\n", as written
    masked: list[str]  # the same lines with IPython syntax replaced by placeholders (or blanked)
    start: int  # 0-based index of the cell's first line in the joined text
    python: bool = True  # False for a `%%bash`-like cell: blanked, never edited
    indent: str = ""  # the first line's indentation, which IPython removes from every line that has it
    removed: list[str] = field(default_factory=list)  # what IPython removes from each line: indentation, prompt
    prompted: bool = False  # pasted prompts (`>>> `, `In [1]: `) are removed

    error: Diagnostic | None = None  # the cell's own syntax error (rows of the joined text); the cell is blanked

    def masks(self, index: int) -> bool:
        """Is line `index` replaced by a placeholder (or blanked) in the joined text?"""
        return self.masked[index] != self.stripped(index)

    def stripped(self, index: int) -> str:
        """Line `index` as IPython reads it, without the indentation or prompt it removes."""
        return self.lines[index][len(self.removed[index]) if index < len(self.removed) else 0:]

    @property
    def end(self) -> int:
        return self.start + len(self.lines)


@dataclass(frozen=True)
class JsonStyle:
    """How the notebook file was serialized, so that writing it back changes only what was edited."""

    indent: int | str | None = 1
    ensure_ascii: bool = False
    separators: tuple[str, str] = (",", ": ")
    newline: str = "\n"
    trailing_newline: bool = True

    def dump(self, data: dict) -> str:
        text = json.dumps(data, indent=self.indent, ensure_ascii=self.ensure_ascii, separators=self.separators)
        if self.newline != "\n":  # json.dumps escapes newlines inside strings: every raw "\n" is layout
            text = text.replace("\n", self.newline)
        return text + self.newline if self.trailing_newline else text


@dataclass
class Notebook:
    data: dict
    cells: list[CodeCell] = field(default_factory=list)
    python: bool = True  # False when the kernel's language is not Python (nothing is linted)
    document: str = field(default="", repr=False, compare=False)  # the JSON text it was read from
    _ends: list[int] | None = field(default=None, init=False, repr=False, compare=False)  # for `cell_at`
    isolated: bool = field(default=False, init=False, repr=False, compare=False)  # broken cells looked for

    # The notebook is the program its source is analysed as (amplint/sources/base.py, PythonProgram).
    @property
    def text(self) -> str:
        """The joined program: every code cell's masked lines, cells separated by a newline."""
        return "\n".join(line for cell in self.cells for line in cell.masked)

    @property
    def analysable(self) -> bool:
        """Is there Python to analyse (a Python kernel, some code cell)?"""
        return self.python and bool(self.cells)

    def skippable(self) -> bool:
        """May the screen's "no rule can fire here" stand: does the joined program parse (CPython's parser, no code
        built)? Asked only of a program the screen would skip; one that does not parse goes to the engine, which
        reports the cells that do not. A program too large to parse is not parsed here (amplint/parsing.py)."""
        if too_large(self.text) is not None:
            return True
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # invalid escapes and the like: warnings, not errors
                compile(self.text, "<notebook>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
            return False
        return True

    def isolate(self, filename: str) -> bool:
        """After a syntax error: blank the cells that do not parse alone (see `isolate_broken_cells`)."""
        return isolate_broken_cells(self, filename)

    def map(self, diagnostics: list[Diagnostic]) -> list[Diagnostic]:
        """The program's findings, and the broken cells' syntax errors, with rows counted within their cells."""
        diagnostics = [at_lines(d, self.text) for d in diagnostics]
        return [map_diagnostic(d, self) for d in with_cell_errors(diagnostics, self)]

    def content(self, fixed: str) -> str:
        """The notebook's JSON text with the fixed program split back into the cells' sources, every other byte
        as it was; FixRefused when a fix cannot be split back or the splice would change more than sources."""
        try:
            sources = split_fixed_text(self, fixed)
            written = splice_sources(self.document, self, sources)
            check_only_sources_changed(self.data, written, set(sources))
        except (CrossCellEdit, NotebookError) as error:
            raise FixRefused(f"{error}; the notebook is left as it was") from None
        return written

    def diff(self, path: str, fixed: str) -> str:
        """The fixed program as a patch of each changed cell (`path:cell N`)."""
        return cell_diff(path, self, split_fixed_text(self, fixed))

    def cell_at(self, row: int) -> CodeCell:
        """The code cell holding a 1-based row of the joined text (the last cell for rows past the end). Found by
        bisection over the cells' ends (in order): every finding and every line a message names asks."""
        ends = [cell.end for cell in self.cells] if self._ends is None or len(self._ends) != len(self.cells) \
            else self._ends
        self._ends = ends
        return self.cells[min(bisect.bisect_right(ends, row - 1), len(self.cells) - 1)]


# --- reading ---------------------------------------------------------------------------------------------------


class LongInteger:
    """A JSON integer with more digits than CPython converts (`int()` refuses over 4,300 digits, so `json.loads`
    raises ValueError): kept as its text, equal to another with the same text. Only metadata and outputs hold
    such numbers; a notebook that has one is still read and fixed (its bytes outside the edited sources kept)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LongInteger) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"LongInteger({self.text[:20]}...)"


def _integer(text: str):
    try:
        return int(text)
    except ValueError:
        return LongInteger(text)


def load_json(text: str):
    """`json.loads`, with integers of any length (LongInteger)."""
    return json.loads(text, parse_int=_integer)


def detect_style(text: str, data: dict) -> JsonStyle:
    """The serialization that reproduces `text` exactly, or the closest guess (nbformat's style) if none does
    (always for a notebook holding a LongInteger, which json cannot write back)."""
    newline = "\r\n" if "\r\n" in text else "\n"
    trailing = text.endswith("\n")
    match = re.match(r"\s*\{\r?\n([ \t]*)\S", text)
    if match is None:
        indents: list[int | str | None] = [None]
    else:
        spaces = match.group(1)
        indents = ["\t" * len(spaces)] if spaces.startswith("\t") else [len(spaces)]
    for indent in indents:
        separators_choices = [(",", ": ")] if indent is not None else [(", ", ": "), (",", ":")]
        for separators in separators_choices:
            for ensure_ascii in (False, True):
                style = JsonStyle(indent, ensure_ascii, separators, newline, trailing)
                try:
                    if style.dump(data) == text:
                        return style
                except (TypeError, ValueError, RecursionError):
                    break
    indent = indents[0] if indents[0] is not None else 1
    return JsonStyle(indent, not _has_non_ascii(text), (",", ": "), newline, trailing)


def _has_non_ascii(text: str) -> bool:
    return any(ord(char) > 127 for char in text)


def join_source(source, where: str) -> str:
    """A cell's source as one string (nbformat allows a string or a list of strings)."""
    if isinstance(source, str):
        return source
    if isinstance(source, list) and all(isinstance(part, str) for part in source):
        return "".join(source)
    raise NotebookError(f"{where}: `source` must be a string or a list of strings")


def split_source(text: str, as_list: bool):
    """The inverse of join_source, in the form the cell had (nbformat's list keeps each line's newline)."""
    if not as_list:
        return text
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def kernel_language(data: dict) -> str | None:
    metadata = data.get("metadata")
    if not isinstance(metadata, dict):
        return None
    for key, name_key in (("language_info", "name"), ("kernelspec", "language")):
        section = metadata.get(key)
        if isinstance(section, dict) and isinstance(section.get(name_key), str):
            return section[name_key].lower()
    return None


def parse_notebook(text: str) -> Notebook:
    """Read a notebook's JSON text: nbformat 4, code cells collected, IPython syntax masked."""
    try:
        data = load_json(text)
    except json.JSONDecodeError as error:
        raise NotebookError(f"not a valid notebook: invalid JSON: {error}") from None
    except RecursionError:
        raise NotebookError("not a valid notebook: JSON nested too deeply") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise NotebookError("not a valid notebook: no `cells` list")
    if data.get("nbformat") != 4:
        raise NotebookError(f"unsupported notebook format (nbformat {data.get('nbformat')!r}); "
                            f"amplint reads nbformat 4")
    notebook = Notebook(data, document=text)
    language = kernel_language(data)
    notebook.python = language is None or language == "python"
    start = 0
    for position, cell in enumerate(data["cells"]):
        if not isinstance(cell, dict):
            raise NotebookError(f"not a valid notebook: cell {position + 1} is not an object")
        if cell.get("cell_type") != "code":
            continue
        lines = join_source(cell.get("source", ""), f"cell {position + 1}").split("\n")
        masked, python = mask_ipython(lines)
        removed = removed_prefixes(lines) if python else [""] * len(lines)
        indent = leading_indent(lines) if python else ""
        notebook.cells.append(CodeCell(position + 1, position, lines, masked, start, python, indent, removed,
                                       removed != [undent_prefix(line, indent) for line in lines]))
        start += len(lines)
    return notebook


# --- IPython syntax --------------------------------------------------------------------------------------------
# IPython's own input transforms (IPython.core.inputtransformer2, and the prefilter's automagic) done by hand,
# line for line: each IPython line, with its `\` continuation lines, becomes placeholders of the same number of
# lines, so that rows stay exact and no rule sees (or fix moves) anything but `pass`.


def leading_indent(lines: list[str]) -> str:
    """The indentation of the first non-blank line, which IPython removes from every line that starts with it
    (a cell pasted from inside a function runs as it is)."""
    first = next((line for line in lines if line.strip()), "")
    return first[: len(first) - len(first.lstrip(" \t"))]


def undent_prefix(line: str, indent: str) -> str:
    return indent if indent and line.startswith(indent) else ""


def removed_prefixes(lines: list[str]) -> list[str]:
    """What IPython removes from the front of each line before reading the cell: the first line's indentation
    (from every line that has it), then pasted prompts, as its PromptStripper does: classic `>>>` prompts in
    doctest mode (`doctest_prefixes`), then `In [1]: ` prompts, applied to every line, only when the first non-blank
    line matches the first-line pattern or the line after it matches the prompt pattern."""
    indent = leading_indent(lines)
    prefixes = [undent_prefix(line, indent) for line in lines]
    first = next((index for index, line in enumerate(lines) if line.strip()), None)
    if first is None:
        return prefixes
    work = [line[len(prefix):] for line, prefix in zip(lines, prefixes)]
    prefixes = [prefix + more for prefix, more in zip(prefixes, doctest_prefixes(work))]
    work = [line[len(prefix):] for line, prefix in zip(lines, prefixes)]
    initial, prompt = IPYTHON_PROMPT
    if initial.match(work[first]) or (first + 1 < len(work) and prompt.match(work[first + 1])):
        prefixes = [prefix + (match.group(0) if (match := prompt.match(line)) and index >= first else "")
                    for index, (prefix, line) in enumerate(zip(prefixes, work))]
    return prefixes


def doctest_prefixes(lines: list[str]) -> list[str]:
    """What IPython's classic prompt stripper (doctest mode) removes from each line: `>>>` and `...` prompts,
    indented or not, outside triple-quoted strings, when the block has a `>>>` line there; then each run of lines
    outside strings where a prompt went is dedented. Nothing when the block has no such `>>>` line."""
    inside = _in_triple_quotes(lines)
    if not any(not quoted and DOCTEST_PS1.match(line) for line, quoted in zip(lines, inside)):
        return [""] * len(lines)
    prefixes = []
    for line, quoted in zip(lines, inside):
        match = None if quoted else (DOCTEST_PS1.match(line) or DOCTEST_PS2.match(line))
        prefixes.append(match.group(0) if match else "")
    start = 0
    while start < len(lines):  # runs of lines alike (inside a string or not)
        end = start
        while end < len(lines) and inside[end] == inside[start]:
            end += 1
        if not inside[start] and any(prefixes[start:end]):
            rest = [line[len(prefix):] for line, prefix in zip(lines[start:end], prefixes[start:end])]
            dedented = textwrap.dedent("\n".join(rest)).split("\n")
            for index, (before, after) in enumerate(zip(rest, dedented), start):
                prefixes[index] += before[: len(before) - len(after)]
        start = end
    return prefixes


def _in_triple_quotes(lines: list[str]) -> list[bool]:
    """Per line: is it inside a triple-quoted string whose prompts IPython keeps (a string opened with no prompt
    in front of it, or before any prompt)? IPython's own heuristic, line by line."""
    mask: list[bool] = []
    quote: str | None = None
    keep = False
    seen_prompt = False
    for line in lines:
        mask.append(quote is not None and keep)
        for match in TRIPLE_QUOTE.finditer(line):
            if quote is None:
                quote = match.group(1)
                before = line[: match.start()]
                stripped = DOCTEST_PS2.sub("", DOCTEST_PS1.sub("", before, count=1), count=1)
                prompted = stripped != before and seen_prompt
                keep = bool(not prompted and STRING_PREFIX.match(stripped.strip()))
                mask[-1] = keep
            elif quote == match.group(1):
                quote = None
                keep = False
        seen_prompt = seen_prompt or bool(DOCTEST_PS1.match(line))
    return mask


def mask_ipython(lines: list[str]) -> tuple[list[str], bool]:
    """The cell's lines as the Python that IPython runs, one line for one line; (masked lines, is the cell Python).

    The first line's indentation is removed from every line that has it, then pasted prompts. A cell whose
    first non-blank line is a cell magic (`%%bash`) is not Python: every line becomes blank, except for the few
    cell magics whose body is Python (`%%time`), where only the magic line is masked. Line magics, shell escapes,
    `x = !cmd`, help lines (`obj?`, `?obj`), autocall escapes (`/f x`) and, in a one-line cell that is not
    Python, automagic (`cd data`) become `pass  # amplint: magic` with the line's indentation, continuation
    lines included, but only where a new statement starts (not inside strings or brackets).
    """
    work = [line[len(prefix):] for line, prefix in zip(lines, removed_prefixes(lines))]
    first = next((index for index, line in enumerate(work) if line.strip()), None)
    cell_magic = None
    if first is not None and work[first].startswith("%%"):
        words = work[first][2:].split(maxsplit=1)
        if not words or words[0] not in PYTHON_CELL_MAGICS:
            return ["\r" if line.endswith("\r") else "" for line in lines], False
        cell_magic = first
    masked = list(work)
    spans = ipython_spans(work, cell_magic)
    if not spans and first is not None and is_automagic(work, first):
        spans = [(first, first + 1)]
    for start, end in spans:
        masked[start:end] = placeholders(work[start:end])
    return masked, True


def placeholder(line: str, continued: bool = False) -> str:
    indent = line[: len(line) - len(line.lstrip(" \t"))]
    return indent + (CONTINUED if continued else PLACEHOLDER) + ("\r" if line.endswith("\r") else "")


def placeholders(lines: list[str]) -> list[str]:
    """One IPython statement's lines: a placeholder, then continued placeholders at the same indentation (a
    continuation line's own indentation is not Python's)."""
    head = placeholder(lines[0])
    indent = head[: len(head) - len(head.lstrip(" \t"))]
    return [head] + [placeholder(indent + line.lstrip(" \t"), continued=True) for line in lines[1:]]


def starts_ipython(line: str) -> bool:
    """A line magic, shell escape, help or autocall escape, or `x = !cmd` (the line starts a statement)."""
    stripped = line.lstrip(" \t")
    return stripped.startswith(ESCAPES) or bool(MAGIC_ASSIGNMENT.match(line))


def continued_end(lines: list[str], index: int) -> int:
    """The index past the last line of the IPython statement at `index`: a line ending in `\\` continues it
    (IPython's find_end_of_continued_line; a `#` there is the command's, not a comment)."""
    end = index
    while end + 1 < len(lines) and lines[end].rstrip("\r").endswith("\\"):
        end += 1
    return end + 1


def is_automagic(lines: list[str], index: int) -> bool:
    """Is the cell one line (blank lines aside) that IPython runs as a magic without its `%` (`cd data`,
    `pip install x`)? IPython does so only in a one-line cell, for a command it knows, when the line is not an
    assignment; here also only when the line is not Python on its own (`ls -l` is a subtraction to Python)."""
    if any(line.strip() for line in lines[index + 1:]):
        return False
    line = lines[index].rstrip("\r")
    match = AUTOMAGIC_LINE.match(line)
    if match is None or match.group("name") not in AUTOMAGIC:
        return False
    return match.group("rest").lstrip()[:1] not in ("=", ",", "(") and not _parses(line)


def ipython_spans(lines: list[str], skip: int | None = None) -> list[tuple[int, int]]:
    """The (start, end) line ranges that are IPython statements, found only where a new statement starts.

    A small scanner tracks strings (single and triple quoted), brackets and backslash continuations, which is
    all that is needed to tell a line that starts a statement from one that continues an expression or a
    string. IPython lines themselves are not scanned (`!echo "it's"` opens no string). A help line (`obj?`)
    is the whole logical line that ends in `?`.
    """
    found = []
    quote = ""  # the open string's quote ("'", '"', "'''" or '"""'), "" when none
    depth = 0
    continued = False
    logical = 0  # where the current logical line started
    index = 0
    while index < len(lines):
        line = lines[index]
        fresh = not quote and depth == 0 and not continued
        continued = False
        if fresh:
            logical = index
        if index == skip:
            found.append((index, index + 1))
            index += 1
            continue
        if fresh and starts_ipython(line):
            end = continued_end(lines, index)
            found.append((index, end))
            index = end
            continue
        code_end = len(line)
        position = 0
        while position < len(line):
            char = line[position]
            if quote:
                if char == "\\":
                    position += 2
                elif line.startswith(quote, position):
                    position += len(quote)
                    quote = ""
                else:
                    position += 1
                continue
            if char == "#":
                code_end = position
                break
            if char in "'\"":
                triple = char * 3
                quote = triple if line.startswith(triple, position) else char
                position += len(quote)
                continue
            if char in "([{":
                depth += 1
            elif char in ")]}":
                depth = max(0, depth - 1)
            position += 1
        if len(quote) == 1:
            quote = ""  # a one-quote string cannot span lines (except after a backslash, rare enough)
        code = line[:code_end].rstrip()
        if not quote and depth == 0 and code.endswith("?"):
            found.append((logical, index + 1))  # `obj?`, `obj??`: help
        continued = not quote and code.endswith("\\")
        index += 1
    return found


# --- diagnostics -----------------------------------------------------------------------------------------------


def _cell_location(location: Location, cell: CodeCell) -> Location:
    """A location of the joined text within its cell: the row counted from the cell's first line, the column
    moved right by what IPython removed from that line (indentation, prompt)."""
    row = location.row - cell.start
    column = location.column
    if 0 < row <= len(cell.removed):
        column += len(cell.removed[row - 1])
    return Location(row, column)


def _last_row(edit) -> int:
    """The last row an edit touches (an edit of whole lines ends at the start of the next one)."""
    end = edit.end_location
    return end.row - 1 if end.column == 1 and end.row > edit.location.row else end.row


_LONE_CR = re.compile(r"\r(?!\n)")
_PYTHON_BREAK = re.compile(r"\r\n|\r|\n")


def at_lines(diagnostic: Diagnostic, text: str) -> Diagnostic:
    """The diagnostic with the rows Python counts in `text` (a lone `\\r` ends a row) turned into the text's lines
    (split on `\\n`, as the cells' sources are, and as their patches count), columns counted from the line's
    start; `line N` in its messages too. The diagnostic itself when the text has no lone `\\r`."""
    if not _LONE_CR.search(text):
        return diagnostic
    lines = [0] + [match.end() for match in re.finditer("\n", text)]
    rows = [0] + [match.end() for match in _PYTHON_BREAK.finditer(text)]

    def location(where: Location) -> Location:
        if not 0 < where.row <= len(rows):
            return where
        offset = rows[where.row - 1]
        line = bisect.bisect_right(lines, offset)
        return Location(line, where.column + offset - lines[line - 1])

    def message(text_: str | None) -> str | None:
        return text_ and LINE_REFERENCE.sub(lambda match: f"line {location(Location(int(match.group(1)), 1)).row}",
                                            text_)

    fix = diagnostic.fix
    if fix is not None:
        fix = dataclasses.replace(fix, edits=tuple(dataclasses.replace(
            edit, location=location(edit.location), end_location=location(edit.end_location)) for edit in fix.edits))
    notes = tuple(dataclasses.replace(note, location=location(note.location), message=message(note.message))
                  if note.filename is None else note for note in diagnostic.notes)
    return dataclasses.replace(diagnostic, location=location(diagnostic.location),
                               end_location=location(diagnostic.end_location), message=message(diagnostic.message),
                               help=message(diagnostic.help), fix=fix, notes=notes)


def map_diagnostic(diagnostic: Diagnostic, notebook: Notebook) -> Diagnostic:
    """The same diagnostic with rows counted within its cell, and `cell` set."""
    if not notebook.cells:
        return diagnostic
    cell = notebook.cell_at(diagnostic.location.row)
    fix = diagnostic.fix
    if fix is not None and any(notebook.cell_at(edit.location.row) is not cell
                               or notebook.cell_at(_last_row(edit)) is not cell for edit in fix.edits):
        # A fix that edits other cells too (a module-wide import migration): its edits have no place in this
        # cell's rows, so the report shows what it does without them; `--fix` and `--diff` still apply it.
        fix = Fix(fix.message, (), Applicability.DISPLAY_ONLY)
    elif fix is not None:
        edits = tuple(dataclasses.replace(edit, location=_cell_location(edit.location, cell),
                                          end_location=_cell_location(edit.end_location, cell))
                      for edit in fix.edits)
        fix = Fix(fix.message, edits, fix.applicability)
    notes = tuple(dataclasses.replace(note, location=_cell_location(note.location, notebook.cell_at(note.location.row)),
                                      cell=notebook.cell_at(note.location.row).number,
                                      message=map_message(note.message, cell, notebook))
                  if note.filename is None else note for note in diagnostic.notes)
    row = diagnostic.location.row - cell.start
    source_line = cell.lines[row - 1].rstrip("\r") if 0 < row <= len(cell.lines) else diagnostic.source_line
    return dataclasses.replace(diagnostic, message=map_message(diagnostic.message, cell, notebook),
                               help=diagnostic.help and map_message(diagnostic.help, cell, notebook),
                               location=_cell_location(diagnostic.location, cell),
                               end_location=_cell_location(diagnostic.end_location, cell), fix=fix,
                               cell=cell.number, source_line=source_line, notes=notes)


def map_message(message: str, cell: CodeCell, notebook: Notebook) -> str:
    """Messages name other lines ("the loop at line 12"): count those within their cells too."""
    def replace(match: re.Match) -> str:
        row = int(match.group(1))
        other = notebook.cell_at(row)
        if other is cell:
            return f"line {row - cell.start}"
        return f"line {row - other.start} of cell {other.number}"

    return LINE_REFERENCE.sub(replace, message)


def with_cell_errors(diagnostics: list[Diagnostic], notebook: Notebook) -> list[Diagnostic]:
    errors = [cell.error for cell in notebook.cells if cell.error is not None]
    return sorted(errors + diagnostics, key=Diagnostic.sort_key) if errors else diagnostics


def isolate_broken_cells(notebook: Notebook, filename: str) -> bool:
    """Find the cells that do not parse on their own, keep each one's syntax error and blank it (same number of
    lines), so that the other cells are still linted as one program; whether any was found.

    Asked only when the joined program does not parse, once per notebook: each cell is parsed alone, so the
    work is linear. A cell that parses alone is complete, so the others, joined, parse too.
    """
    if notebook.isolated:
        return False
    notebook.isolated = True
    found = False
    for cell in notebook.cells:
        if not cell.python:
            continue
        errors = [d for d in lint_text("\n".join(cell.masked), filename, []).diagnostics
                  if d.code == SYNTAX_ERROR[0]]
        if not errors:
            continue
        error = at_lines(errors[0], "\n".join(cell.masked))  # rows as the cell's lines (a lone `\r` inside one)
        row = min(error.location.row, max(len(cell.masked), 1)) + cell.start  # an error at the end: the last line
        # the message counts lines within the cell alone ("on line 1"): count them in the joined text, as the
        # rows of every other message, so that `map_message` names them within this cell
        message = LINE_REFERENCE.sub(lambda match: f"line {int(match.group(1)) + cell.start}", error.message)
        cell.error = dataclasses.replace(error, message=message, location=Location(row, error.location.column),
                                         end_location=Location(row, error.location.column))
        cell.masked = ["\r" if line.endswith("\r") else "" for line in cell.masked]
        cell.python = False
        found = True
    return found


# --- fixing ----------------------------------------------------------------------------------------------------


class CrossCellEdit(Exception):
    """A fix that cannot be split back into the cells; the message says which cells."""


def split_fixed_text(notebook: Notebook, new_text: str) -> dict[int, str]:
    """The new source of each changed code cell (by position in `cells`), from the fixed joined text.

    Lines are compared with difflib: an unchanged line stays in its cell, a changed or deleted run of lines
    must lie in one cell, and an insertion between two cells goes to the next cell, or to the previous one
    when it is indented (it continues the previous cell's block). Placeholders are turned back into the
    IPython lines they stand for. Raises CrossCellEdit when the change cannot be attributed to single cells.
    """
    old_lines = notebook.text.split("\n")
    new_lines = new_text.split("\n")
    owner: list[CodeCell] = [cell for cell in notebook.cells for _ in cell.lines]
    pieces: dict[int, list[str]] = {cell.position: [] for cell in notebook.cells}
    fixed: dict[int, list[str]] = {cell.position: [] for cell in notebook.cells}  # the fixer's lines, per cell
    changed: set[int] = set()
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for offset in range(i2 - i1):
                cell = owner[i1 + offset]
                pieces[cell.position].append(cell.lines[i1 + offset - cell.start])
                fixed[cell.position].append(new_lines[j1 + offset])
            continue
        if tag == "insert":
            cell = _insertion_cell(notebook, i1, new_lines[j1:j2])
            originals: list[tuple[str, str, str]] = []
        else:
            first, last = owner[i1], owner[i2 - 1]
            if first is not last:
                raise CrossCellEdit(f"a fix changes cells {first.number} and {last.number} together")
            cell = first
            originals = [(cell.lines[index], cell.masked[index], cell.removed[index])
                         for index in range(i1 - cell.start, i2 - cell.start) if cell.masks(index)]
        if not cell.python:
            raise CrossCellEdit(f"a fix changes cell {cell.number}, which is not Python")
        # A line rewritten in place keeps the prompt it had; any other line gets the indentation alone.
        prefixes = cell.removed[i1 - cell.start:i2 - cell.start] if tag == "replace" and i2 - i1 == j2 - j1 \
            else None
        pieces[cell.position].extend(_restore_magics(new_lines[j1:j2], originals, cell, prefixes))
        fixed[cell.position].extend(new_lines[j1:j2])
        changed.add(cell.position)
    result = {}
    for cell in notebook.cells:
        if cell.position not in changed:
            continue
        source = "\n".join(pieces[cell.position])
        magic = next((line for line in cell.lines if line.strip()), "")
        if magic.lstrip().startswith("%%") and next((line for line in source.split("\n") if line.strip()), "") != magic:
            raise CrossCellEdit(f"a fix would move the cell magic of cell {cell.number} from the cell's first line")
        masked_new, _ = mask_ipython(source.split("\n"))
        if cell.prompted and masked_new != fixed[cell.position]:
            # The prompts put back must make IPython read exactly the fixed lines, or nothing is written.
            raise CrossCellEdit(f"a fix in cell {cell.number} cannot keep its pasted prompts (`>>> `, `In [1]: `)")
        if _parses("\n".join(cell.masked)) and not _parses("\n".join(masked_new)):
            raise CrossCellEdit(f"cell {cell.number} would no longer be valid Python on its own")
        result[cell.position] = source
    return result


def _insertion_cell(notebook: Notebook, index: int, inserted: list[str]) -> CodeCell:
    for number, cell in enumerate(notebook.cells):
        if index < cell.end or number == len(notebook.cells) - 1:
            if index != cell.start or number == 0:
                return cell
            first = next((line for line in inserted if line.strip()), "")
            return notebook.cells[number - 1] if first[:1] in (" ", "\t") else cell
    return notebook.cells[-1]


def _restore_magics(new_lines: list[str], originals: list[tuple[str, str, str]], cell: CodeCell,
                    prefixes: list[str] | None = None) -> list[str]:
    """The cell's lines for a changed run of the joined text: each placeholder turned back into its IPython line
    (`originals`: (line, placeholder, what IPython removed from the line) in order), moved by as much as the fix
    moved the placeholder, and what IPython removed put back on every line: `prefixes`, one for each line, where
    the run was rewritten line for line, else the indentation (on every line that is not blank)."""
    found = [(index, PLACEHOLDER_LINE.match(line)) for index, line in enumerate(new_lines)]
    placeholders = [(index, match) for index, match in found if match]
    if [bool(match.group("continued")) for _, match in placeholders] != \
            [bool(PLACEHOLDER_LINE.match(masked).group("continued")) for _, masked, _ in originals]:
        raise CrossCellEdit(f"a fix moves IPython lines (magics, `!` commands) in cell {cell.number}")
    restored = [prefix + line for prefix, line in zip(prefixes, new_lines)] if prefixes is not None else \
        [cell.indent + line if line.strip() else line for line in new_lines]
    previous = {index: match for index, match in placeholders}
    for (index, match), (original, masked, removed) in zip(placeholders, originals):
        old = PLACEHOLDER_LINE.match(masked).group("indent")
        new = match.group("indent")
        if match.group("continued"):
            head = previous.get(index - 1)  # the line above, the run's first line aside, must be its head
            if (head.group("indent") if head else None if index else old) != new:
                raise CrossCellEdit(f"a fix splits an IPython command of cell {cell.number}")
        prefix = removed if prefixes is None else prefixes[index]
        text = original[len(removed):]
        text = new + (text[len(old):] if text.startswith(old) else text.lstrip(" \t"))
        restored[index] = prefix + text
    return restored


def _parses(text: str) -> bool:
    return parse_error(text) is None


# The JSON text is edited where the edited cells' `source` values lie; every other byte stays as it was (a
# duplicate key, `1e5`, `image\/png`, key order, layout), which a load-and-dump cannot promise.
_STRUCTURE = re.compile(r'["{}\[\]]')
_SCALAR = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|true|false|null|NaN|-?Infinity")
_SPACE = re.compile(r"[ \t\n\r]*")


def _space(text: str, index: int) -> int:
    return _SPACE.match(text, index).end()


def _value_end(text: str, index: int) -> int:
    """The index just past the JSON value starting at `index` (the text is valid JSON: it was loaded).
    Iterative, and strings are skipped by json's own scanner, so it is linear and has no depth limit."""
    char = text[index]
    if char == '"':
        return json.decoder.scanstring(text, index + 1)[1]
    if char not in "{[":
        return _SCALAR.match(text, index).end()
    depth = 0
    position = index
    while True:
        match = _STRUCTURE.search(text, position)
        if match.group() == '"':
            position = json.decoder.scanstring(text, match.end())[1]
            continue
        depth += 1 if match.group() in "{[" else -1
        position = match.end()
        if depth == 0:
            return position


def _members(text: str, index: int):
    """(key, value start, value end) of each member of the object whose `{` is at `index`, in text order."""
    position = _space(text, index + 1)
    if text[position] == "}":
        return
    while True:
        key, position = json.decoder.scanstring(text, position + 1)
        start = _space(text, _space(text, position) + 1)  # past the `:`
        end = _value_end(text, start)
        yield key, start, end
        position = _space(text, end)
        if text[position] == "}":
            return
        position = _space(text, position + 1)  # past the `,`


def _items(text: str, index: int) -> list[tuple[int, int]]:
    """(start, end) of each item of the array whose `[` is at `index`."""
    spans = []
    position = _space(text, index + 1)
    if text[position] == "]":
        return spans
    while True:
        end = _value_end(text, position)
        spans.append((position, end))
        position = _space(text, end)
        if text[position] == "]":
            return spans
        position = _space(text, position + 1)


def _last_member(text: str, index: int, key: str) -> tuple[int, int] | None:
    """The span of the value of `key` in the object at `index`: the last one, as json.loads keeps."""
    found = None
    for name, start, end in _members(text, index):
        if name == key:
            found = (start, end)
    return found


def _source_spans(text: str, positions: set[int]) -> dict[int, tuple[int, int]]:
    """The span of the `source` value of each cell at `positions`, in the notebook's JSON text."""
    cells = _last_member(text, _space(text, 0), "cells")
    if cells is None:
        raise NotebookError("cannot find the `cells` list in the notebook's text")
    spans = {}
    for position, (start, _) in enumerate(_items(text, cells[0])):
        if position in positions:
            source = _last_member(text, start, "source")
            if source is None:
                raise NotebookError(f"cell {position + 1} has no `source` to edit")
            spans[position] = source
    return spans


def _list_layout(text: str, start: int, end: int, items: list[tuple[int, int]], style: JsonStyle):
    """(after `[`, between items, before `]`) as the array at text[start:end] writes them, or as the style
    would for an empty one."""
    if items:
        opener = text[start + 1:items[0][0]]
        separator = text[items[0][1]:items[1][0]] if len(items) > 1 else "," + opener
        return opener, separator, text[items[-1][1]:end - 1]
    if style.indent is None:
        return "", style.separators[0], ""
    line = text[text.rfind("\n", 0, start) + 1:start]  # the key's line, up to the value
    indentation = line[:len(line) - len(line.lstrip(" \t"))]
    unit = " " * style.indent if isinstance(style.indent, int) else style.indent
    newline = style.newline
    return newline + indentation + unit, "," + newline + indentation + unit, newline + indentation


def _source_value(text: str, span: tuple[int, int], source: str, style: JsonStyle) -> str:
    """The JSON text of a cell's new source, in the form (string or list of lines) and layout the old one had;
    a line that is unchanged keeps its old text (escapes included)."""
    start, end = span
    if text[start] != "[":
        return json.dumps(source, ensure_ascii=style.ensure_ascii)
    items = _items(text, start)
    old = {}
    for item_start, item_end in items:
        old.setdefault(json.loads(text[item_start:item_end]), text[item_start:item_end])
    lines = split_source(source, True)
    if not lines:
        return "[]"
    opener, separator, closer = _list_layout(text, start, end, items, style)
    encoded = [old.get(line) or json.dumps(line, ensure_ascii=style.ensure_ascii) for line in lines]
    return "[" + opener + separator.join(encoded) + closer + "]"


def splice_sources(text: str, notebook: Notebook, sources: dict[int, str]) -> str:
    """The notebook's JSON text with the given cells' sources replaced, every other byte as it was."""
    try:
        spans = _source_spans(text, set(sources))
    except (ValueError, IndexError, AttributeError) as error:
        raise NotebookError(f"cannot locate the cells in the notebook's text: {error}") from None
    if set(spans) != set(sources):
        raise NotebookError("cannot locate every edited cell in the notebook's text")
    style = detect_style(text, notebook.data)  # only here: it dumps the whole notebook, outputs included
    pieces = []
    position = 0
    for cell, (start, end) in sorted(spans.items(), key=lambda item: item[1]):
        pieces += [text[position:start], _source_value(text, (start, end), sources[cell], style)]
        position = end
    return "".join(pieces) + text[position:]


def check_only_sources_changed(original: dict, written: str, positions: set[int]) -> None:
    """The written text must load to the original data except the edited cells' `source`."""
    loaded = load_json(written)
    expected = copy.deepcopy(original)
    for position in positions:
        expected["cells"][position]["source"] = loaded["cells"][position]["source"]
    if loaded != expected:
        raise NotebookError("internal check failed: writing the notebook back would change more than sources")


def cell_diff(path: str, notebook: Notebook, sources: dict[int, str]) -> str:
    """Each changed cell's source as a patch of its own (`a/x.ipynb:cell 3`): its lines are the cell's lines
    (split on `\\n` only, as everywhere here), counted from the cell's first line as findings are."""
    return "".join(unified_diff(path, "\n".join(cell.lines), sources[cell.position],
                                suffix=f":cell {cell.number}")
                   for cell in notebook.cells if cell.position in sources)


# --- the source ------------------------------------------------------------------------------------------------


class NotebookSource(Source):
    """A notebook, from its path (fixes are written back), from bytes (stdin) or from its JSON text.

    A malformed notebook is reported whatever its words (`screened` is false: the cache never decides one by
    its words), and so is a cell that does not parse: the screen skips its program only when it parses
    (`Notebook.skippable`)."""

    screened = False

    def screens(self, program: Notebook) -> bool:
        return True

    def __init__(self, path: str, raw: bytes | None = None, text: str | None = None,
                 max_size: int = DEFAULT_MAX_FILE_SIZE) -> None:
        self.path = path
        self.raw = raw
        self.text = text
        self.max_size = max_size
        self.writes = raw is None and text is None

    def read(self) -> SourceText:
        if self.text is not None:
            return SourceText(self.text, "utf-8", None)
        raw = self.raw if self.raw is not None else read_bytes(self.path, self.max_size)  # amplint/source.py
        return decode_notebook(raw)

    def program(self, text: str) -> Notebook:
        return parse_notebook(text)

    def write(self, data: bytes, expected: bytes) -> None:
        write_atomically(self.path, data, expected)


def decode_notebook(raw: bytes) -> SourceText:
    """A notebook's bytes as UTF-8 text; written back with the byte order mark they had, if any."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise SourceError(f"cannot decode as utf-8: {error}") from None
    return SourceText(text, "utf-8-sig" if raw.startswith(codecs.BOM_UTF8) else "utf-8", raw)
