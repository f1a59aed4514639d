"""What a rule declares must co-occur in a file for it to fire; the screen is computed from the declaration.

A rule states its reach once, as data (`Rule.requires`, and `Rule.requires_across` when its findings can come
from other modules): a tree of questions about the file's `amplint.index.summary.Summary` (`Ask`) or about the
project seen from the file (`AskProject`, an `amplint.index.ModuleView`), joined with `&` (all must hold) and
`|` (one must). The prefilter (amplint/prefilter.py) asks `Rule.maybe_applies` / `Rule.maybe_applies_across`,
which evaluate the declaration here and nowhere else; no rule writes those methods.

A declaration must be conservative (False only where the rule surely reports nothing) and monotone (`&` and `|`
of questions, never a negation): the prefilter asks it once with answers read from the text, then with answers
from the parsed tree. tests/test_prefilter.py proves both on every fixture, for every rule.
"""

from __future__ import annotations

from typing import Callable

from amplint.index.summary import Summary  # the file's model the questions ask: rules name it from here

__all__ = ["AllOf", "AnyOf", "Ask", "AskProject", "Need", "Summary"]


class Need:
    """A condition on a file that a rule's finding needs."""

    def holds(self, summary, view=None) -> bool:  # pragma: no cover - interface
        raise NotImplementedError

    def __and__(self, other: Need) -> Need:
        return AllOf(self, other)

    def __or__(self, other: Need) -> Need:
        return AnyOf(self, other)


class Ask(Need):
    """One question about the file: `question(summary, *args, **kwargs)`, a method of `Summary`
    (`Ask(Summary.calls_method, vocab.STEP)`) or a function of the rule's module taking the summary first."""

    def __init__(self, question: Callable[..., object], *args, **kwargs) -> None:
        self.question, self.args, self.kwargs = question, args, kwargs

    def holds(self, summary, view=None) -> bool:
        return bool(self.question(summary, *self.args, **self.kwargs))

    def __repr__(self) -> str:
        return f"Ask({getattr(self.question, '__qualname__', self.question)}, {self.args}, {self.kwargs})"


class AskProject(Ask):
    """One question about the project seen from the file: `question(view, *args, **kwargs)`; only in
    `requires_across` (the view exists there)."""

    def holds(self, summary, view=None) -> bool:
        return bool(self.question(view, *self.args, **self.kwargs))


class AllOf(Need):
    """Every part holds (asked in order; the first that fails ends it)."""

    def __init__(self, *parts: Need) -> None:
        self.parts = tuple(part for each in parts for part in (each.parts if isinstance(each, AllOf) else (each,)))

    def holds(self, summary, view=None) -> bool:
        return all(part.holds(summary, view) for part in self.parts)

    def __repr__(self) -> str:
        return "(" + " & ".join(map(repr, self.parts)) + ")"


class AnyOf(Need):
    """One part holds (asked in order; the first that holds ends it)."""

    def __init__(self, *parts: Need) -> None:
        self.parts = tuple(part for each in parts for part in (each.parts if isinstance(each, AnyOf) else (each,)))

    def holds(self, summary, view=None) -> bool:
        return any(part.holds(summary, view) for part in self.parts)

    def __repr__(self) -> str:
        return "(" + " | ".join(map(repr, self.parts)) + ")"
