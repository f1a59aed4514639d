"""Applying fixes: non-overlapping edits, re-lint, repeat until nothing changes; never a result that does not parse."""

from __future__ import annotations

from dataclasses import dataclass, field

from amplint.lazy import libcst as cst

from amplint.diagnostics import Diagnostic, Edit
from amplint.engine import lint_text
from amplint.rules.base import Rule

MAX_ROUNDS = 10


@dataclass
class FixOutcome:
    text: str  # the fixed source (the original when nothing applied)
    applied: list[Diagnostic] = field(default_factory=list)  # the diagnostics whose fixes were applied
    remaining: list[Diagnostic] = field(default_factory=list)  # what the fixed text still reports
    error: str | None = None  # why fixing stopped early, if it did

    @property
    def changed(self) -> bool:
        return bool(self.applied)


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


def fix_text(text: str, filename: str, rules: list[Rule] | None = None, unsafe: bool = False) -> FixOutcome:
    """Fix `text` as far as the fixes allow. Idempotent: fixing the result again changes nothing."""
    if rules is None:
        from amplint.rules import ALL_RULES

        rules = [rule() for rule in ALL_RULES]
    outcome = FixOutcome(text)
    seen = {text}
    for _ in range(MAX_ROUNDS):
        result = lint_text(outcome.text, filename, rules)
        fixable = [d for d in result.diagnostics if d.fixable(unsafe)]
        outcome.remaining = result.diagnostics
        if not fixable:
            return outcome
        chosen = _non_overlapping(fixable)
        # Fixes that do not overlap in text can still clash (two of them emptying one block): when the
        # round does not parse, fall back to its first fix alone, then re-lint.
        for attempt in (chosen, chosen[:1]) if len(chosen) > 1 else (chosen,):
            candidate = apply_edits(outcome.text, [edit for d in attempt for edit in d.fix.edits])
            try:
                cst.parse_module(candidate)
            except cst.ParserSyntaxError as error:
                problem = error.message
                continue
            chosen = attempt
            break
        else:
            outcome.error = f"a fix produced code that does not parse ({problem}); fixes not applied"
            return outcome
        if candidate in seen:
            outcome.error = "fixes keep changing the file in a cycle; stopped"
            return outcome
        seen.add(candidate)
        outcome.text = candidate
        outcome.applied.extend(chosen)
    outcome.remaining = lint_text(outcome.text, filename, rules).diagnostics
    return outcome
