"""Applying fixes: non-overlapping edits, re-lint, repeat until nothing is left to fix; never a result that does not
compile.

Three guarantees, each enforced here for every rule (a rule's own care is not trusted):
- **Valid code.** A file that compiled before is written only if it still compiles with CPython: libcst accepts
  code `compile()` rejects (a keyword given twice, `global` after use, a statement above `from __future__`). A
  file that did not compile before (a notebook fragment, code for a newer Python) is judged by libcst's parse.
  A round whose result fails is retried fix by fix; a fix that fails alone is refused and reported.
- **A real fixed point.** Rounds go on while they make progress: each round must take away at least one of the
  findings whose fixes it applied (as fixable findings, by code, place and message); a round that does not, or
  that brings back an earlier text (a cycle), is refused. A statement leaving 15 nested regions one per round
  needs 15 rounds, so the safety bound grows with the findings and the file's block depth, not a fixed count.
- **No overlap.** Edits that touch are never applied in one round.
"""

from __future__ import annotations

import ast
import builtins
import re
import symtable
import warnings
from dataclasses import dataclass, field
from functools import cached_property

from amplint.lazy import libcst as cst

from amplint.diagnostics import Diagnostic, Edit
from amplint.engine import lint_text
from amplint.parsing import parse_module
from amplint.rules.base import Rule

# The safety bound on rounds: MIN_ROUNDS plus, per fixable finding, two rounds per block level of the file. Only
# a fix that moves its finding somewhere new every round (never a real fix) reaches it.
MIN_ROUNDS = 10
ROUNDS_PER_FINDING_LEVEL = 2
_INDENT = re.compile(r"^[ \t]*(?=[^ \t\r\n#])", re.MULTILINE)
# Top-level `await` is valid in a notebook's joined cells (IPython runs them in a loop), so it is allowed.
_COMPILE_FLAGS = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT


@dataclass
class FixOutcome:
    text: str  # the fixed source (the original when nothing applied)
    applied: list[Diagnostic] = field(default_factory=list)  # the diagnostics whose fixes were applied
    remaining: list[Diagnostic] = field(default_factory=list)  # what the fixed text still reports
    error: str | None = None  # why fixing stopped early or refused a fix, if it did
    found: list[Diagnostic] = field(default_factory=list)  # what the original text reported

    @property
    def changed(self) -> bool:
        return bool(self.applied)

    @property
    def removed(self) -> int:
        """How many findings fixing took away: found before, minus those remaining (never below 0)."""
        return max(0, len(self.found) - len(self.remaining))


def apply_edits(text: str, edits: list[Edit]) -> str:
    for edit in sorted(edits, key=lambda e: e.start, reverse=True):
        text = text[: edit.start] + edit.content + text[edit.end:]
    return text


def _non_overlapping(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    """The fixes that can be applied together: in source order, skipping any that touch an earlier one."""
    chosen: list[Diagnostic] = []
    taken: list[tuple[int, int]] = []
    for diagnostic in sorted(diagnostics, key=lambda d: (min(e.start for e in d.fix.edits), d.code)):
        spans = [(e.start, e.end) for e in diagnostic.fix.edits]
        if any(start < t_end and t_start < end or (start == end == t_start) for start, end in spans
               for t_start, t_end in taken):
            continue
        chosen.append(diagnostic)
        taken.extend(spans)
    return chosen


def compile_error(text: str, filename: str) -> str | None:
    """Why CPython would not compile `text` (None when it does). Compiled apart from this module's `__future__`
    flags; warnings (invalid escapes and the like) are not errors and are not shown."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            compile(text, filename, "exec", flags=_COMPILE_FLAGS, dont_inherit=True)
        except SyntaxError as error:
            return f"{error.msg} (line {error.lineno})" if error.lineno else str(error.msg)
        except (ValueError, OverflowError, RecursionError, MemoryError) as error:
            return str(error) or type(error).__name__
    return None


def parse_error(text: str) -> str | None:
    """Why the engine's parse (libcst, amplint/parsing.py) would not take `text` (None when it does)."""
    try:
        parse_module(text)
    except cst.ParserSyntaxError as error:
        return error.message
    except RecursionError as error:  # TooDeeplyNested: refused before libcst, which would crash
        return str(error) or "too deeply nested"
    return None


# Names a module reads without binding them: its own dunders and the builtins.
_ALWAYS_BOUND = frozenset(dir(builtins)) | {"__name__", "__file__", "__doc__", "__spec__", "__loader__", "__package__",
                                            "__builtins__", "__path__", "__annotations__", "__dict__", "__module__",
                                            "__qualname__", "__class__", "__cached__"}
_STAR_IMPORT = re.compile(r"\bimport\s*\(?\s*\*")


def unbound_names(text: str, bound: set[str] | None = None) -> set[tuple[str, str]] | None:
    """(scope, name) for each name the program reads where no scope binds it (a NameError when run), found with
    CPython's own scope analysis (`symtable`); None when it cannot be known (a star import, a text symtable
    refuses). `bound`, when given, gets every name some scope binds."""
    if _STAR_IMPORT.search(text):
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            top = symtable.symtable(text, "<fixed>", "exec")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None
    tables, pending = [], [(top, top.get_name())]
    while pending:
        table, path = pending.pop()
        tables.append((table, path))
        pending += [(child, f"{path}.{child.get_name()}") for child in table.get_children()]
    module = {symbol.get_name() for symbol in top.get_symbols() if symbol.is_assigned() or symbol.is_imported()
              or symbol.is_namespace() or symbol.is_parameter()}
    module |= {symbol.get_name() for table, _ in tables for symbol in table.get_symbols()
               if symbol.is_declared_global() and (symbol.is_assigned() or symbol.is_imported()
                                                    or symbol.is_namespace())}
    if bound is not None:
        bound.update(symbol.get_name() for table, _ in tables for symbol in table.get_symbols()
                     if symbol.is_assigned() or symbol.is_imported() or symbol.is_namespace() or symbol.is_parameter())
    unbound = set()
    for table, path in tables:
        for symbol in table.get_symbols():
            name = symbol.get_name()
            if not symbol.is_referenced() or name in module or name in _ALWAYS_BOUND:
                continue
            if table is top or (symbol.is_global() and not symbol.is_assigned() and not symbol.is_imported()
                                and not symbol.is_parameter() and not symbol.is_namespace()):
                unbound.add((path, name))
    return unbound


class _Judge:
    """Whether a fixed text is acceptable: it compiles when the original compiled, else it parses. The original is
    compiled only once some fix is to be judged (most files have nothing to fix)."""

    def __init__(self, original: str, filename: str) -> None:
        self.original, self.filename = original, filename

    @cached_property
    def compiles(self) -> bool:
        return compile_error(self.original, self.filename) is None

    @property
    def verb(self) -> str:
        return "compile" if self.compiles else "parse"

    @cached_property
    def unbound(self) -> set[tuple[str, str]] | None:
        self.bound: set[str] = set()  # every name the original binds somewhere
        return unbound_names(self.original, self.bound)

    def problem(self, text: str) -> str | None:
        return compile_error(text, self.filename) if self.compiles else parse_error(text)

    def lost_bindings(self, text: str) -> list[str]:
        """The names the fixed program reads that no scope binds any more, though the original bound them: a fix
        removed a binding that the program (another fix's edit, or the code it left) still reads. (A name the
        original never bound is not a lost binding.) Asked of programs that compile (CPython's scope analysis
        needs them whole)."""
        if not self.compiles or self.unbound is None:
            return []
        after = unbound_names(text)
        if after is None:
            return []
        return sorted({name for _, name in after - self.unbound if name in self.bound})


def _key(diagnostic: Diagnostic) -> tuple:
    """A finding's identity between rounds: what, where and what it says."""
    return (diagnostic.code, diagnostic.location, diagnostic.end_location, diagnostic.message)


def _refusal_key(diagnostic: Diagnostic) -> tuple:
    """A refused fix's identity across rounds, where other fixes may have moved its offsets."""
    return (diagnostic.code, diagnostic.message, tuple(edit.content for edit in diagnostic.fix.edits))


def round_limit(text: str, fixable: int) -> int:
    """The safety bound on rounds (see MIN_ROUNDS): block levels are the distinct indentations of code lines."""
    levels = len(set(_INDENT.findall(text)))
    return MIN_ROUNDS + ROUNDS_PER_FINDING_LEVEL * fixable * (levels + 1)


def _try_round(text: str, chosen: list[Diagnostic], judge: _Judge, refused: dict[tuple, str]):
    """(the fixed text, the fixes in it): all of `chosen` together, else as many as work together, taken in order;
    each fix that fails alone is added to `refused` with its reason, and so is a fix whose edits together with
    those taken before it remove a binding that the program still reads (a `NameError` when run: the message
    names the fix that removes it and the fix that reads it). (None, []) when none works."""
    candidate = apply_edits(text, [edit for d in chosen for edit in d.fix.edits])
    if judge.problem(candidate) is None and not judge.lost_bindings(candidate):
        return candidate, chosen
    taken: list[Diagnostic] = []
    result = None
    for diagnostic in chosen:
        trial = apply_edits(text, [edit for d in [*taken, diagnostic] for edit in d.fix.edits])
        problem = judge.problem(trial)
        lost = [] if problem else judge.lost_bindings(trial)
        if problem is None and not lost:
            taken.append(diagnostic)
            result = trial
            continue
        if not taken or problem is not None:
            alone = apply_edits(text, list(diagnostic.fix.edits))
            problem = judge.problem(alone)
            lost_alone = [] if problem else judge.lost_bindings(alone)
            if problem is not None:
                refused[_refusal_key(diagnostic)] = f"{diagnostic.code}: {problem}"
                continue
            if lost_alone:
                refused[_refusal_key(diagnostic)] = (f"{diagnostic.code}: it removes the binding of "
                                                     f"{_names(lost_alone)}, which the program still reads")
                continue
            if not taken or not lost:
                continue  # it works alone but not with the others: a later round takes it
        def mentions(d: Diagnostic, source: bool) -> bool:
            return any(re.search(rf"\b{re.escape(name)}\b", text[edit.start:edit.end] if source else edit.content)
                       for name in lost for edit in d.fix.edits)

        if mentions(diagnostic, source=False):  # its edits read the name: an earlier fix removed the binding
            removers = [d.code for d in taken if mentions(d, source=True)] or [taken[-1].code]
            reason = f"it reads {_names(lost)}, whose binding the {removers[0]} fix removes"
        else:
            readers = [d.code for d in taken if mentions(d, source=False)] or [taken[-1].code]
            reason = f"it removes the binding of {_names(lost)}, which the {readers[0]} fix reads"
        refused[_refusal_key(diagnostic)] = f"{diagnostic.code}: dropped: {reason}"
    return (result, taken) if taken else (None, [])


def _names(names: list[str]) -> str:
    return ", ".join(f"`{name}`" for name in names)


def fix_text(text: str, filename: str, rules: list[Rule] | None = None, unsafe: bool = False,
             project=None) -> FixOutcome:
    """Fix `text` as far as the fixes allow. Idempotent: fixing the result again changes nothing."""
    if rules is None:
        from amplint.rules import ALL_RULES

        rules = [rule() for rule in ALL_RULES]
    outcome = FixOutcome(text)
    judge = _Judge(text, filename)
    seen = {text}
    refused: dict[tuple, str] = {}
    diagnostics = outcome.found = outcome.remaining = lint_text(text, filename, rules, project=project).diagnostics
    limit = None
    rounds = 0
    stopped = None
    while True:
        fixable = [d for d in diagnostics if d.fixable(unsafe) and _refusal_key(d) not in refused]
        if not fixable:
            break
        limit = limit if limit is not None else round_limit(text, len(fixable))
        if rounds >= limit:
            stopped = f"fixes did not settle after {rounds} rounds; stopped"
            break
        rounds += 1
        candidate, chosen = _try_round(outcome.text, _non_overlapping(fixable), judge, refused)
        if candidate is None:
            continue  # every fix tried is refused now: the next round tries the rest, or ends
        if candidate in seen:
            stopped = "fixes keep changing the file in a cycle; stopped"
            break
        after = lint_text(candidate, filename, rules, project=project).diagnostics
        left = {_key(d) for d in after if d.fixable(unsafe)}
        if all(_key(d) in left for d in chosen):
            stopped = f"fixes did not remove their findings ({', '.join(sorted({d.code for d in chosen}))}); stopped"
            break
        seen.add(candidate)
        outcome.text = candidate
        outcome.applied.extend(chosen)
        diagnostics = outcome.remaining = after
    problems = [stopped] if stopped else []
    if refused:
        broken = sorted({reason for reason in refused.values() if "binding" not in reason})
        dropped = sorted({reason for reason in refused.values() if "binding" in reason})
        if dropped:
            problems.insert(0, f"a fix would leave a name unbound ({'; '.join(dropped)}); fixes not applied")
        if broken:
            problems.insert(0, f"a fix produced code that does not {judge.verb} ({'; '.join(broken)}); "
                               "fixes not applied")
    outcome.error = "; ".join(problems) or None
    return outcome
