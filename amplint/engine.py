"""One source text in, diagnostics out. The engine knows nothing of AMP: it parses, builds the facts, runs the
selected rules, turns findings into diagnostics (with text edits) and applies suppressions."""

from __future__ import annotations

import ast
import bisect
import gc
import re
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from amplint.lazy import libcst as cst

from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix, Location, Note
from amplint.parsing import (MAX_NESTING, TooDeeplyNested, nesting, parse_module, python_identifiers, too_large,
                             recursion_room)
from amplint.suppression import LineSuppressions, file_suppression

if TYPE_CHECKING:  # the facts (and the rules) are imported when a text is analysed, not for a file the screen skips
    from amplint.facts import ModuleFacts
    from amplint.rules.base import Finding, Rule

SYNTAX_ERROR = ("AMP900", "syntax-error")
IO_ERROR = ("AMP901", "io-error")
INTERNAL_ERROR = ("AMP902", "internal-error")

_LF = re.compile("\n")


LINE_BREAK = re.compile(r"\r\n?|\n")  # Python's line breaks, as its tokenizer and libcst count rows


class LineIndex:
    """Converts between character offsets and (row, column) for one text. Rows are Python's (and libcst's):
    a lone `\r` ends a line too, so a file with mixed newlines gets its findings' lines and `# noqa`s right."""

    suppresses = True  # do the text's `# noqa` comments apply (not for flake8, which applies its own)

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0] + [match.end() for match in (LINE_BREAK if "\r" in text else _LF).finditer(text)]
        self.noqa = LineSuppressions(text)  # the text's `# noqa` comments, tokenized when first asked
        self.file_noqa = None  # the file-level `# amplint: noqa: CODES` (amplint/suppression.py), when it has one

    def offset(self, row: int, column0: int) -> int:
        return self.starts[row - 1] + column0

    def location(self, offset: int) -> Location:
        row = bisect.bisect_right(self.starts, offset)
        return Location(row, offset - self.starts[row - 1] + 1)

    def line(self, row: int) -> str:
        start = self.starts[row - 1] if row - 1 < len(self.starts) else len(self.text)
        end = self.starts[row] if row < len(self.starts) else len(self.text)
        return self.text[start:end].rstrip("\r\n")


class SliceIndex(LineIndex):
    """The index of a sliced text (amplint/facts/slicing.py): offsets into the slice, which are the original's,
    and lines read from the original (a diagnostic's `source_line` is the user's code, not the blanks)."""

    def __init__(self, sliced: str, original: LineIndex) -> None:
        self.text = sliced
        self.starts = original.starts  # blanking keeps every line break in place
        self.original = original
        self.suppresses = original.suppresses
        self.noqa = original.noqa
        self.file_noqa = original.file_noqa

    def line(self, row: int) -> str:
        return self.original.line(row)


def text_edit(old: str, new: str, index: LineIndex, offset: int = 0) -> Edit | None:
    """The smallest single edit turning `old` into `new` (common prefix and suffix kept), widened to whole lines.
    `old` starts at `offset` of the text `index` indexes (a slice of it, for a change confined to that slice)."""
    if old == new:
        return None
    limit = min(len(old), len(new))
    prefix = _longest(lambda n: old[:n] == new[:n], limit)
    suffix = _longest(lambda n: old[len(old) - n:] == new[len(new) - n:], limit - prefix)
    # Widen to whole lines so the edit reads naturally in diffs and reports.
    start = old.rfind("\n", 0, prefix) + 1
    end = len(old) - suffix
    line_end = old.find("\n", end)
    end_in_old = len(old) if line_end == -1 else line_end + 1
    grow = end_in_old - end
    content = new[start: len(new) - suffix + grow]
    return Edit(offset + start, offset + end_in_old, content, index.location(offset + start),
                index.location(offset + end_in_old), original=old[start:end_in_old])


def fix_edits(result, index: LineIndex) -> tuple[Edit, ...]:
    """The edits of a built fix: one per changed statement when the fix says which spans it changed (amplint/rules/
    rewrite.py), else one for the whole difference."""
    changes = getattr(result, "changes", None)
    if changes is None:
        edits = (text_edit(index.text, result.code, index),)
    elif changes[0] != index.text:
        return ()  # the module's code is not the file's text (libcst drops a lone CR that ends a file): no fix
    else:
        edits = (text_edit(index.text[start:end], new, index, start) for start, end, new in changes[1])
    return tuple(edit for edit in edits if edit is not None)


@dataclass
class FileResult:
    diagnostics: list[Diagnostic]
    internal_error: bool = False


def error_diagnostic(kind: tuple[str, str], filename: str, message: str, row: int = 1, column: int = 1,
                     line: str = "") -> Diagnostic:
    location = Location(row, column)
    return Diagnostic(kind[0], kind[1], message, filename, location, location, source_line=line)


def suppressed(diagnostic: Diagnostic, index: LineIndex) -> bool:
    """Is the diagnostic suppressed by a file-level `# amplint: noqa: CODES` or, unless flake8 applies its own,
    by a `# noqa` comment on its line (real comments only: amplint/suppression.py)?"""
    if index.file_noqa is not None and index.file_noqa.covers(diagnostic.code):
        return True
    if not index.suppresses:
        return False
    row = diagnostic.location.row
    return index.noqa.suppresses(row, diagnostic.code, index.line(row))


def _longest(matches, limit: int) -> int:
    """The largest n <= limit with matches(n), for a property true up to some n and false after (a binary search
    over slice comparisons: fast on large texts)."""
    low, high = 0, limit
    while low < high:
        middle = (low + high + 1) // 2
        if matches(middle):
            low = middle
        else:
            high = middle - 1
    return low


def build_fixes(findings: list[Finding], facts: ModuleFacts, index: LineIndex) -> dict:
    """id of each fix plan -> (the plan, its edits). A plan shared by several findings (a module-wide
    migration) is built once; the findings' nodes and every plan's replaced nodes are found in one code
    generation pass (amplint/facts/locate.py)."""
    plans = {id(f.fix): f.fix for f in findings
             if f.fix is not None and f.fix.applicability is not Applicability.DISPLAY_ONLY}
    results = {key: plan.rewrite() for key, plan in plans.items()}
    replaced = [node for result in results.values() for node in getattr(result, "replacements", ())]
    locations = facts.locate([finding.node for finding in findings], extra=replaced)
    built = {}
    for key, result in results.items():
        if result is not None and hasattr(result, "locations"):
            result.locations = locations
        built[key] = (plans[key], fix_edits(result, index) if result is not None else ())  # the plan kept alive
    return built


def to_diagnostic(rule: Rule, finding: Finding, facts: ModuleFacts, filename: str, index: LineIndex,
                  built: dict) -> Diagnostic:
    """`built`: the edits of the file's fix plans (`build_fixes`)."""
    start, end = facts.position(finding.node)
    fix = None
    if finding.fix is not None and finding.fix.applicability is Applicability.DISPLAY_ONLY:
        fix = Fix(finding.fix.message, (), Applicability.DISPLAY_ONLY)
    elif finding.fix is not None and built[id(finding.fix)][1]:
        fix = Fix(finding.fix.message, built[id(finding.fix)][1], finding.fix.applicability)
    return Diagnostic(
        code=rule.code,
        name=rule.name,
        message=finding.message,
        filename=filename,
        location=Location(start.line, start.column + 1),
        end_location=Location(end.line, end.column + 1),
        fix=fix,
        source_line=index.line(start.line),
        severity=rule.severity,
        help=finding.help_line(),
        notes=tuple(note(where, text, facts) for where, text in finding.notes),
    )


def note(where, text: str, facts: ModuleFacts) -> Note:
    """A finding's note as a Diagnostic's: a node of the module at its start, or (filename, line, column)."""
    if isinstance(where, tuple):
        filename, line, column = where
        return Note(text, Location(line, column), filename)
    start = facts.position(where)[0]
    return Note(text, Location(start.line, start.column + 1))


def cpython_syntax_error(text: str) -> tuple[int, int, str] | None:
    """Row, 1-based column and message of CPython's syntax error in `text` (more precise than libcst's, so
    preferred when libcst fails too); None when CPython parses it. Warnings are not errors and are not shown."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(text)
    except SyntaxError as syntax_error:
        return syntax_error.lineno or 1, max(syntax_error.offset or 1, 1), syntax_error.msg
    except (ValueError, RecursionError, MemoryError, OverflowError) as other:  # null bytes, nesting
        return 1, 1, str(other)
    return None


def parse(text: str) -> cst.Module:
    return parse_module(text)  # a long module in pieces (amplint/parsing.py)


@contextmanager
def cyclic_gc_paused():
    """Python's cyclic garbage collector off for the duration.

    A libcst tree is hundreds of thousands of objects per large file, none of them cyclic garbage; while they
    pile up the collector scans them again and again, which makes parsing and analysis grow faster than the
    file (measured: a 100,000-line file parsed 13x slower than a 10,000-line one with it on, 9x with it off).
    The objects are freed by reference counting as usual; the collector runs again afterwards.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def lint_text(text: str, filename: str, rules: list[Rule], line_noqa: bool = True, project=None) -> FileResult:
    """Lint one decoded source text with the given rules. `line_noqa=False` keeps findings that a line's `# noqa`
    suppresses (flake8 applies its own); the file-level `# amplint: noqa` always applies. `project`: the project
    index seen from this file (`amplint.index.ModuleView`), or None to analyse the text alone."""
    with cyclic_gc_paused():
        return _lint_text(text, filename, rules, line_noqa, project)


def _lint_text(text: str, filename: str, rules: list[Rule], line_noqa: bool = True, project=None) -> FileResult:
    file_noqa = file_suppression(text)
    if file_noqa is not None and file_noqa.everything:
        return FileResult([])
    large = too_large(text)  # a whole-file parse's memory would pass ~500 MB (amplint/parsing.py)
    if large is not None:
        return FileResult([error_diagnostic(IO_ERROR, filename, large)])
    index = LineIndex(text)
    if not line_noqa:
        index.suppresses = False
    index.file_noqa = file_noqa
    if "\x0c" in text and FORM_FEED_INDENT.search(text):
        return _lint_mapped(text, FORM_FEED_INDENT.sub("", text), filename, rules, index, line_noqa, project)
    normal = python_identifiers(text)  # NFKC identifiers, as CPython reads them (amplint/parsing.py)
    if normal is not text:
        return _lint_mapped(text, normal, filename, rules, index, line_noqa, project)
    sliced = _lint_sliced(text, filename, rules, index, project) if rules else None
    if sliced is not None:
        return sliced
    try:
        module = parse(text)
    except cst.ParserSyntaxError as error:
        cpython = cpython_syntax_error(text)  # one CPython parse: does it compile, else where it fails
        if cpython is None and mixed_newlines(text):
            return _lint_mapped(text, LINE_BREAK.sub("\n", text), filename, rules, index, line_noqa, project)
        row, column, message = cpython or (error.raw_line, error.raw_column + 1, error.message)
        line = index.line(row) if row <= len(index.starts) else ""
        return FileResult([error_diagnostic(SYNTAX_ERROR, filename, f"cannot parse: {message}", row, column, line)])
    except TooDeeplyNested as error:  # refused before libcst, which would crash (amplint/parsing.py)
        row = index.location(error.nesting.offset).row
        return FileResult([error_diagnostic(IO_ERROR, filename, str(error), row, 1, index.line(row))])
    except RecursionError:
        return FileResult([error_diagnostic(IO_ERROR, filename, "too deeply nested to analyse")])
    except UnicodeEncodeError:  # a lone surrogate (an editor's buffer, `\udcff` in JSON): CPython refuses it too
        offset = next((i for i, char in enumerate(text) if "\ud800" <= char <= "\udfff"), 0)
        where = index.location(offset)
        return FileResult([error_diagnostic(SYNTAX_ERROR, filename, f"cannot parse: U+{ord(text[offset]):04X}, a "
                                            "lone surrogate, is no character a Python source can hold", where.row,
                                            where.column, index.line(where.row))])
    try:
        diagnostics = [d for d in diagnose(module, text, filename, rules, index, project) if not suppressed(d, index)]
    except Exception as error:  # noqa: BLE001 - one bad file must not stop the run
        return FileResult([internal_error(filename, error)], internal_error=True)
    diagnostics.sort(key=Diagnostic.sort_key)
    return FileResult(diagnostics)


def _lint_sliced(text: str, filename: str, rules: list[Rule], index: LineIndex, project=None) -> FileResult | None:
    """The diagnostics of the text, from libcst's parse of its slice (the functions no rule needs blanked:
    amplint/facts/slicing.py); None when the text is analysed whole: nothing worth blanking, a text nested too
    deeply (the whole text's refusal is reported), a slice that does not parse or whose analysis fails (the
    whole text's parse or analysis reports it), a fix whose edits touch a blanked range (it may have been built
    from the blanks), a fix writing a quote where the blanked strings would have chosen another."""
    from amplint.facts.slicing import slice_module

    try:
        piece = slice_module(text)
        if piece is None or nesting(text).depth > MAX_NESTING:
            return None
        module = parse(piece.text)
        found = diagnose(module, piece.text, filename, rules, SliceIndex(piece.text, index), project)
    except Exception:  # noqa: BLE001 - the whole text is analysed instead, and reports what is wrong
        return None
    edits = [edit for d in found if d.fix is not None for edit in d.fix.edits]
    if any(piece.touches(edit.start, edit.end) for edit in edits):
        return None
    if any("'" in edit.content or '"' in edit.content for edit in edits) and not piece.same_quotes():
        return None  # a fix writes the module's usual quote, which the blanked strings may have decided
    diagnostics = [d for d in found if not suppressed(d, index)]
    diagnostics.sort(key=Diagnostic.sort_key)
    return FileResult(diagnostics)


def mixed_newlines(text: str) -> bool:
    """Does the text end its lines in more than one way (`\r\n`, `\r`, `\n`)?"""
    return "\r" in text and len(set(LINE_BREAK.findall(text))) > 1


# Whitespace up to a line's last form feed in its indentation: CPython's tokenizer resets the column at a form
# feed (tokenizer.c: `col = altcol = 0`), so `\x0c    with ...` is indented by 4. libcst does not (it refuses
# such a line opening a block, and drops the form feed from the code it gives back).
FORM_FEED_INDENT = re.compile(r"(?:\A|(?<=[\r\n]))[ \t\x0c]*\x0c")


def _lint_mapped(text: str, transformed: str, filename: str, rules: list[Rule], index: LineIndex, line_noqa: bool,
                 project=None) -> FileResult:
    """The diagnostics of `text`, from the analysis of `transformed`: the same rows, each the same line but for
    a prefix taken away (the form feeds of its indentation) and its line break (mixed newlines made `\n`, which
    libcst 1.0 refuses: "Found newline ... but it's not EOL"). Rows map to rows, columns move by the line's
    prefix; a fix's edits are mapped back, every line break they write being the line's own in `text` (by
    position in the replaced lines; a line added past them takes the last one's), and a fix touching a line that
    lost a prefix or whose identifiers were given their NFKC form (amplint/parsing.py) is left out (its edit
    would drop the form feed, or rewrite the identifiers as Python reads them rather than as written)."""
    inner_index = LineIndex(transformed)
    shift = [0] * len(index.starts)
    for row in range(1, len(index.starts) + 1):
        if row <= len(inner_index.starts):
            shift[row - 1] = len(index.line(row)) - len(inner_index.line(row))
    endings = [text[start + len(index.line(row)):index.starts[row] if row < len(index.starts) else len(text)]
               for row, start in enumerate(index.starts, 1)]
    changed = {row for row in range(1, len(shift) + 1) if row > len(inner_index.starts)
               or index.line(row) != inner_index.line(row)}
    default = next((ending for ending in endings if ending), "\n")

    def location(where: Location) -> Location:
        row = min(where.row, len(shift))
        return Location(where.row, where.column + shift[row - 1])

    def offset(inner: int) -> int:
        where = inner_index.location(inner)
        column0 = where.column - 1
        if column0 == 0:
            return index.starts[where.row - 1]
        return min(index.starts[where.row - 1] + column0 + shift[where.row - 1], len(text))

    def edit(inner: Edit) -> Edit | None:
        first, last = inner.location.row, inner.end_location.row
        rows = range(first, min(last + (inner.end_location.column > 1), len(shift) + 1))
        if any(row in changed for row in rows):
            return None
        own = [endings[row - 1] for row in rows if endings[row - 1]] or [
            ending for ending in endings[max(first - 2, 0):first] if ending][-1:] or [default]
        parts = inner.content.split("\n")
        content = "".join(part + (own[min(number, len(own) - 1)] if number < len(parts) - 1 else "")
                          for number, part in enumerate(parts))
        start, end = offset(inner.start), offset(inner.end)
        return Edit(start, end, content, index.location(start), index.location(end))

    def mapped(diagnostic: Diagnostic) -> Diagnostic:
        fix = diagnostic.fix
        if fix is not None and fix.edits:
            edits = [edit(each) for each in fix.edits]
            fix = replace(fix, edits=tuple(edits)) if all(edits) else None
        row = diagnostic.location.row
        return replace(diagnostic, location=location(diagnostic.location),
                       end_location=location(diagnostic.end_location), fix=fix,
                       source_line=index.line(row) if row <= len(index.starts) else diagnostic.source_line)

    result = _lint_text(transformed, filename, rules, line_noqa, project)
    result.diagnostics = [mapped(diagnostic) for diagnostic in result.diagnostics]
    return result


def diagnose(module: cst.Module, text: str, filename: str, rules: list[Rule], index: LineIndex,
             project=None) -> list[Diagnostic]:
    """Every finding of `rules` on the parsed module as a diagnostic with its fix, before any `# noqa`."""
    from amplint.facts import ModuleFacts

    with recursion_room(text):  # libcst's code generation recurses per level of the tree
        facts = ModuleFacts(module, text, project=project)
        findings = [(rule, finding) for rule in rules for finding in rule.check(facts)]
        built = build_fixes([finding for _, finding in findings], facts, index)
        return [to_diagnostic(rule, finding, facts, filename, index, built) for rule, finding in findings]


def internal_error(filename: str, error: Exception) -> Diagnostic:
    import traceback

    where = traceback.extract_tb(error.__traceback__)[-1]
    message = (f"internal error while analysing this file: {type(error).__name__}: {error} "
               f"(at {where.filename.rsplit('/', 1)[-1]}:{where.lineno}); please report it")
    return error_diagnostic(INTERNAL_ERROR, filename, message)
