"""The one path from a source to its outcome: read, cache, screen, lint or fix, diff, write back.

Every kind of source (amplint/sources/: a file, stdin, a notebook's cells, an editor's buffer, the file flake8
hands over, the harness's programs) goes through `run`; what differs between kinds is asked of the source (how
it is read, what program its text is, how findings and fixes map back, where fixes go), never decided here by
its kind. The rules come chosen (amplint/selection.py); the screen's verdict is asked there too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from amplint.diagnostics import Diagnostic
from amplint.engine import IO_ERROR, SYNTAX_ERROR, error_diagnostic, lint_text
from amplint import selection
from amplint.outcome import FileOutcome, Mode
from amplint.selection import screen
from amplint.source import DEFAULT_MAX_FILE_SIZE, SourceError, SourceText
from amplint.sources import NOTEBOOK_SUFFIX, Source, from_text, open_path
from amplint.sources.base import FixRefused
from amplint.suppression import file_suppression, warn_unknown

if TYPE_CHECKING:
    from amplint.rules.base import Rule


def run(source: Source, rules: list[Rule], mode: Mode = Mode(), cache=None, project=None) -> FileOutcome:
    """Lint (or fix, or diff) one source with `rules`; lint results come from `cache` when given (amplint/cache.py).
    `project`: the project index seen from this source, for calls that leave it (engine.lint_text)."""
    try:
        loaded = source.read()
    except SourceError as error:
        return FileOutcome(source.path, [error_diagnostic(IO_ERROR, source.path, str(error))], output=source.raw)
    if cache is not None and not (mode.fix or mode.diff):
        if source.screened and not selection.has_words(loaded.text, rules):  # decided faster than an entry is read
            return FileOutcome(source.path, [], internal_error=False)
        found = cache.lint(loaded.raw, loaded.text, rules, source.path,
                           lambda: analyse(source, loaded.text, rules, mode, project).diagnostics,
                           words_decide=False, project=project)  # its words were asked just above
        return FileOutcome(source.path, found, internal_error=_internal(found))
    outcome = analyse(source, loaded.text, rules, mode, project)
    if outcome.fixed and not mode.diff:
        return _deliver(source, loaded, outcome, rules, project)
    outcome.output = None if source.writes else loaded.raw
    return outcome


def analyse(source: Source, text: str, rules: list[Rule], mode: Mode, project=None) -> FileOutcome:
    """The outcome of one source's text, nothing written."""
    path = source.path
    try:
        program = source.program(text)
    except SourceError as error:  # not a source of its kind (a malformed notebook)
        return FileOutcome(path, [error_diagnostic(IO_ERROR, path, str(error))])
    fixing = mode.fix or mode.diff
    if not program.analysable:
        return FileOutcome(path, [], fixed_text=text if fixing else None)
    warn_unknown(file_suppression(program.text), path)  # `# amplint: noqa: AMP099`: said once per analysis
    if source.screens(program):
        candidates = screen(program.text, rules, project)
        if candidates is None and program.skippable():  # no enabled rule can fire here
            return FileOutcome(path, [], fixed_text=text if fixing else None)
        if candidates is not None and not fixing:  # only the rules that can fire here (a fix can wake another)
            rules = candidates
    rules = selection.loaded(rules)  # the rules themselves (amplint/selection.py hands out stand-ins)
    if not fixing:
        found = lint_program(program, path, rules, source.line_noqa, project)
        return FileOutcome(path, found, internal_error=_internal(found))
    return _fix(source, text, program, rules, mode, project)


def lint_program(program, filename: str, rules: list[Rule], line_noqa: bool = True, project=None) -> list[Diagnostic]:
    """The findings of a program, as its source's: after a syntax error the program may leave out what is broken
    (a notebook's cell) and be analysed again, so that the rest is still linted."""
    if not program.analysable:
        return []
    found = lint_text(program.text, filename, rules, line_noqa=line_noqa, project=project).diagnostics
    if _syntax_error(found) and program.isolate(filename):
        found = lint_text(program.text, filename, rules, line_noqa=line_noqa, project=project).diagnostics
    return program.map(found)


def _fix(source: Source, text: str, program, rules: list[Rule], mode: Mode, project) -> FileOutcome:
    """Fix (or diff) one program; `fixed_text` is the source's text after the fixes, `text` when none apply."""
    path = source.path
    outcome = fix_text(program.text, path, rules, unsafe=mode.unsafe, project=project)
    if not outcome.applied and _syntax_error(outcome.remaining) and program.isolate(path):
        outcome = fix_text(program.text, path, rules, unsafe=mode.unsafe, project=project)  # the rest still fixed
    if not outcome.applied:
        found = program.map(outcome.remaining)
        return FileOutcome(path, found, removed=outcome.removed, fixed_text=text, note=outcome.error,
                           internal_error=_internal(found))
    try:
        content = program.content(outcome.text)
    except FixRefused as error:
        found = lint_program(program, path, rules, source.line_noqa, project)
        return FileOutcome(path, found, fixed_text=text, note=f"fixes not applied: {error}",
                           internal_error=_internal(found))
    if mode.diff:  # the findings of the source as it is, which the diff would take away
        found = lint_program(program, path, rules, source.line_noqa, project)
        return FileOutcome(path, found, diff=program.diff(path, outcome.text), fixed_text=text, note=outcome.error,
                           internal_error=_internal(found) or _internal(outcome.remaining))
    fixed = source.program(content)
    found = fixed.map(outcome.remaining) if fixed.text == outcome.text else \
        lint_program(fixed, path, rules, source.line_noqa, project)
    return FileOutcome(path, found, fixed=len(outcome.applied), removed=outcome.removed, fixed_text=content,
                       note=outcome.error, internal_error=_internal(found),
                       applied=tuple(d.code for d in outcome.applied))


def _deliver(source: Source, loaded: SourceText, outcome: FileOutcome, rules: list[Rule], project) -> FileOutcome:
    """Fixes applied: written back to the file, or handed back as bytes in the input's own encoding (stdin);
    a text handed over as text takes `fixed_text`. When they cannot be, the source's findings as it is, and why."""
    if loaded.raw is None:
        return outcome
    try:
        data = loaded.encode(outcome.fixed_text)
    except UnicodeEncodeError as error:
        return _kept(source, loaded, rules, project,
                     f"fixes not applied: cannot encode as {loaded.encoding}: {error.reason}")
    if not source.writes:
        outcome.output = data
        return outcome
    try:
        source.write(data, loaded.raw)
    except (SourceError, OSError) as error:
        return _kept(source, loaded, rules, project, f"fixes not written: {getattr(error, 'strerror', None) or error}")
    return outcome


def _kept(source: Source, loaded: SourceText, rules: list[Rule], project, note: str) -> FileOutcome:
    """The outcome of a source whose fixes were not applied: its findings as it is, the note saying why."""
    original = analyse(source, loaded.text, rules, Mode(), project)
    original.note = note
    original.output = None if source.writes else loaded.raw
    return original


def fix_text(text: str, filename: str, rules: list[Rule], unsafe: bool = False, project=None):
    """amplint.fixer's `fix_text`, its module (and libcst's) imported when a fix is first asked for."""
    from amplint.fixer import fix_text as fix

    return fix(text, filename, rules, unsafe=unsafe, project=project)


def _syntax_error(diagnostics: list[Diagnostic]) -> bool:
    return any(d.code == SYNTAX_ERROR[0] for d in diagnostics)


def _internal(diagnostics: list[Diagnostic]) -> bool:
    return any(d.code == "AMP902" for d in diagnostics)


# --- shorthands ------------------------------------------------------------------------------------------------


def process_file(path: str, rules: list[Rule], mode: Mode = Mode(), cache=None,
                 max_size: int = DEFAULT_MAX_FILE_SIZE, project=None) -> FileOutcome:
    """`run` on the file at `path` (a notebook by its suffix); a larger file than `max_size` is not read (AMP901)."""
    return run(open_path(path, max_size), rules, mode, cache, project)


def process_text(text: str, path: str, rules: list[Rule], mode: Mode = Mode(), prefilter: bool = True,
                 project=None) -> FileOutcome:
    """`run` on a text named `path`: a notebook's JSON by the name's suffix, else Python (screened unless
    `prefilter` is false)."""
    if path.endswith(NOTEBOOK_SUFFIX):
        from amplint.sources.notebook import NotebookSource

        return run(NotebookSource(path, text=text), rules, mode, project=project)
    return run(from_text(text, path, screened=prefilter), rules, mode, project=project)
