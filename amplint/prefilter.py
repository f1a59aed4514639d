"""Deciding cheaply whether a file can possibly trigger an enabled rule, before any libcst work.

Most Python files never touch mixed precision; parsing them with libcst is where a run over a large tree
would spend its time. Each file goes through two stages, and only the files that pass both reach the engine:

1. Words. Each rule declares `words` (`Rule.words`): words one of which a file must contain (plain
   substrings) for the rule to possibly fire. A file that contains none of the words of any enabled rule is
   skipped.
2. Structure. Each rule declares what must co-occur for it to fire (`Rule.requires`, amplint/rules/screen.py);
   `Rule.maybe_applies(summary)` evaluates the declaration with a `Summary` of the file shared by all rules:
   does it import torch, call something named `autocast`, call `.backward()`
   where an autocast region can be open, step a scaler under `no_grad`... (see `Summary`). Each rule is asked
   twice: first with answers from the text alone (a name that is not in the text cannot be called), which
   costs no parse; then, for the rules that said yes, with answers from the stdlib `ast` tree, built once.
   The rules that say yes in the end are the only ones the engine runs on the file (`Prefilter.select`).

A file that would be analysed but holds a bare `# amplint: noqa` comment on a line of its own is skipped too
(the engine would report nothing for it); `# amplint: noqa: CODES` leaves out the rules of those codes.

Both stages are conservative: they may keep a file no rule flags, never drop one a rule flags
(tests/test_prefilter.py checks it on every fixture, variants of them and generated programs). A rule that
declares nothing (`words = None`, `requires = None`) is run on every file. A file whose `ast`
tree is needed but cannot be built always goes to the engine, which reports it (AMP900); a file ruled out by
its words or by the text-mode answers is not parsed at all, so a syntax error in it goes unreported.
"""

from __future__ import annotations

import enum
import re
from typing import Sequence

from amplint.suppression import file_suppression  # `# amplint: noqa`, in a real comment on a line of its own
from amplint.index.functions import index_text
from amplint.parsing import python_identifiers
from amplint.index.project import STANDALONE, ProjectIndex
from amplint.index.summary import Summary


class Verdict(enum.Enum):
    SKIP_WORDS = "no word of an enabled rule"
    SKIP_NOQA = "`# amplint: noqa`"
    SKIP_STRUCTURE = "no enabled rule's structure"
    ANALYSE = "analyse"

    @property
    def skipped(self) -> bool:
        return self is not Verdict.ANALYSE


def _declares_words(rule: type) -> bool:
    return bool(getattr(rule, "words", None))


def _declares_structure(rule: type) -> bool:
    """Does the rule declare what must co-occur for it to fire (`Rule.requires`)?"""
    from amplint.rules.base import Rule

    method = getattr(rule, "maybe_applies", None)
    return getattr(rule, "requires", None) is not None or (
        method is not None and getattr(method, "__func__", None) is not Rule.maybe_applies.__func__)


def _declares_across(rule: type) -> bool:
    """Does the rule declare what of the project makes it fire here (`Rule.requires_across`)?"""
    from amplint.rules.base import Rule

    method = getattr(rule, "maybe_applies_across", None)
    return getattr(rule, "requires_across", None) is not None or (
        method is not None and getattr(method, "__func__", None) is not Rule.maybe_applies_across.__func__)


def _asked_safely(rule: type, summary: Summary, view) -> bool:
    try:
        return bool(rule.maybe_applies_across(summary, view))
    except Exception:  # noqa: BLE001 - a failing question must cost time, never a finding
        return True


class Prefilter:
    """The two stages for one set of enabled rules (classes or instances)."""

    def __init__(self, rules: Sequence[object]) -> None:
        classes = [rule if isinstance(rule, type) else type(rule) for rule in rules]
        self.rules = classes
        # Stage 1: None when some enabled rule has no words (every file passes).
        self.words: tuple[str, ...] | None = None
        if classes and all(_declares_words(rule) for rule in classes):
            self.words = tuple(sorted({word for rule in classes for word in rule.words}))
        # One compiled alternation of every word (plain substrings, as declared). See `has_words` for how
        # it is searched.
        self.pattern = (re.compile("|".join(re.escape(w) for w in sorted(self.words, key=lambda w: (-len(w), w))))
                        if self.words else None)
        self.across = [rule for rule in classes if _declares_across(rule)]
        self.always = not classes or any(not _declares_structure(rule) and not _declares_words(rule)
                                         for rule in classes)

    def has_words(self, text: str) -> bool:
        """Stage 1: does the text contain a word of some enabled rule?

        For a few words, one substring search per word (a fast scan in C) beats one search of the compiled
        alternation, which tries every alternative at every position that starts like one; with many words
        the alternation wins.
        """
        if not self.rules:
            return False
        if self.words is None:
            return True
        if len(self.words) <= 12:
            return any(word in text for word in self.words)
        return self.pattern.search(text) is not None

    def decide(self, text: str) -> Verdict:
        return self.select(text)[0]

    def select(self, text: str, view=None) -> tuple[Verdict, list[type]]:
        """The verdict and, when the file is to be analysed, the enabled rules that can fire on it (each rule
        is asked alone, so the engine need not run the others). `view`: the project index seen from the file,
        for the rules whose findings here can come from other files (`Rule.maybe_applies_across`)."""
        text = python_identifiers(text)  # `ｔｏｒｃｈ` is `torch` to Python (NFKC): its words are torch's
        if not self.has_words(text):
            return Verdict.SKIP_WORDS, []
        summary = Summary(text)
        verdict, candidates = self._structure(text, summary)
        if self.across and not self.always:
            if view is None:  # a text alone: a project of this module only, as the engine's (ModuleFacts.project)
                view = ProjectIndex().view(STANDALONE)
            # its own record when asked: from the tree parsed here
            view.provide(lambda: index_text(text, summary), summary)
            more = [rule for rule in self.across if rule not in candidates
                    and (not _declares_words(rule) or any(word in text for word in rule.words))
                    and _asked_safely(rule, summary, view)]
            if more:
                verdict, candidates = Verdict.ANALYSE, [rule for rule in self.rules if rule in candidates or rule in more]
        if verdict is Verdict.ANALYSE:  # asked last: it may tokenize the whole text
            suppression = file_suppression(text)
            if suppression is not None:
                candidates = [rule for rule in candidates if not suppression.covers(rule.code)]
                if not candidates:
                    return Verdict.SKIP_NOQA, []
        return verdict, candidates

    def _structure(self, text: str, summary: Summary) -> tuple[Verdict, list[type]]:
        if self.always:
            return Verdict.ANALYSE, list(self.rules)
        try:
            analysed, candidates = [], []
            for rule in self.rules:
                if _declares_words(rule) and not summary.contains(*rule.words):
                    continue
                if not _declares_structure(rule):
                    analysed.append(rule)  # words alone decide for it
                elif rule.maybe_applies(summary):  # text mode: no parse
                    candidates.append(rule)
            if candidates:
                summary.exact = True
                analysed += [rule for rule in candidates if rule.maybe_applies(summary)]
        except Exception:  # noqa: BLE001 - unparsable, or a failing question: it must cost time, never a finding
            return Verdict.ANALYSE, list(self.rules)
        if not analysed:
            return Verdict.SKIP_STRUCTURE, []
        return Verdict.ANALYSE, [rule for rule in self.rules if rule in analysed]  # in the enabled order


_PREFILTERS: dict[tuple[type, ...], Prefilter] = {}


def prefilter_for(rules: Sequence[object]) -> Prefilter:
    """The prefilter of a set of enabled rules, built once per process for each distinct set."""
    key = tuple(rule if isinstance(rule, type) else type(rule) for rule in rules)
    prefilter = _PREFILTERS.get(key)
    if prefilter is None:
        prefilter = _PREFILTERS[key] = Prefilter(key)
    return prefilter
