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

A file the project index parses (phase 1, the second round, a record read on demand) is screened there too, from the
same tree (`Prefilter.ahead`, kept by the project as an `Ahead`): the structural stage, the answers of the questions
about the file that the rules asked across modules declare (`Ask`), and what their questions about the project read
of the file's tree (a question's `file_parts`: `opens_through_project`'s). Its own screen then takes these and does
not parse the file again (`select`); the questions about the project are asked there, in the same order as
ever, the first that decides ending each declaration.

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
import hashlib
import re
from dataclasses import dataclass
from typing import Sequence

from amplint.suppression import file_suppression  # `# amplint: noqa`, in a real comment on a line of its own
from amplint.index.functions import index_text
from amplint.parsing import python_identifiers
from amplint.index.project import STANDALONE, ProjectIndex, part_key
from amplint.index.summary import Summary
from amplint.rules.screen import AllOf, AnyOf, Ask, AskProject, Need


class Verdict(enum.Enum):
    SKIP_WORDS = "no word of an enabled rule"
    SKIP_NOQA = "`# amplint: noqa`"
    SKIP_STRUCTURE = "no enabled rule's structure"
    ANALYSE = "analyse"

    @property
    def skipped(self) -> bool:
        return self is not Verdict.ANALYSE


@dataclass(frozen=True)
class Ahead:
    """The screen's structural stage on a file (`Prefilter._structure`), decided where the project index parsed the
    file (`Prefilter.ahead`), for its own screen to take (`Prefilter.select`) instead of parsing it again."""

    rules: tuple[str, ...]  # the codes of the prefilter's rules: the stage of that set of rules
    digest: bytes  # of the text screened (`text_digest`)
    verdict: Verdict
    candidates: tuple[str, ...]  # the codes of the rules it kept
    exact: bool  # the summary's mode after it, in which the questions across modules are asked
    # A rule asked across modules (`Rule.requires_across`) -> the answers of its questions about the file (`Ask`,
    # in the order of the declaration; None: the question raised), the project's questions left to phase 2.
    answers: tuple[tuple[str, tuple[bool | None, ...]], ...] = ()
    # What those project's questions read of the file's own tree (a question's `file_parts`), by part (`part_key`):
    # `ModuleView.file_part`.
    parts: tuple[tuple[str, object], ...] = ()


def text_digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _codes(rules: Sequence[type]) -> tuple[str, ...]:
    return tuple(getattr(rule, "code", rule.__name__) for rule in rules)


def _file_questions(need: Need) -> list[Ask] | None:
    """The questions about the file (`Ask`, not `AskProject`) of a declaration, in its order; None when it holds
    a kind of condition other than these and `&`/`|` of them."""
    if isinstance(need, AskProject):
        return []
    if isinstance(need, Ask):
        return [need]
    if isinstance(need, (AllOf, AnyOf)):
        found: list[Ask] = []
        for part in need.parts:
            inner = _file_questions(part)
            if inner is None:
                return None
            found += inner
        return found
    return None


class _Answered(Need):
    """A question about the file answered ahead (`Ahead.answers`): its answer, or the error it raised, again."""

    def __init__(self, answer: bool | None) -> None:
        self.answer = answer

    def holds(self, summary, view=None) -> bool:
        if self.answer is None:
            raise RuntimeError("the question raised when asked ahead")
        return self.answer


def _answered(need: Need, answers: list) -> Need:
    """The declaration with each question about the file replaced by its answer (taken from `answers`, in order),
    the project's questions as they are: asked in the same order, the first that decides ends it, as before."""
    if isinstance(need, AskProject):
        return need
    if isinstance(need, Ask):
        return _Answered(answers.pop(0))
    kind = AllOf if isinstance(need, AllOf) else AnyOf
    return kind(*[_answered(part, answers) for part in need.parts])


def _project_questions(need: Need) -> list[AskProject]:
    if isinstance(need, AskProject):
        return [need]
    return [question for part in getattr(need, "parts", ()) for question in _project_questions(part)]


def _answer(question: Ask, summary: Summary) -> bool | None:
    try:
        return question.holds(summary)
    except Exception:  # noqa: BLE001 - asked again in phase 2, it raises again there: the rule is then kept
        return None


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


def _declares_own_across(rule: type) -> bool:
    """Is the rule's question across modules its declaration (`requires_across`), not a method of its own?"""
    from amplint.rules.base import Rule

    method = getattr(rule, "maybe_applies_across", None)
    return getattr(rule, "requires_across", None) is not None and \
        getattr(method, "__func__", None) is Rule.maybe_applies_across.__func__


def _asked_ahead(rule: type, answers: tuple, summary: Summary, view) -> bool:
    """`_asked_safely` with the questions about the file answered ahead (`Ahead.answers`)."""
    try:
        return bool(_answered(rule.requires_across, list(answers)).holds(summary, view))
    except Exception:  # noqa: BLE001 - a failing question must cost time, never a finding
        return True


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
        self.codes = dict(zip(classes, _codes(classes)))  # each rule's code: what an `Ahead` names it by
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
        ahead = self._ahead_of(view, text)
        if ahead is not None:  # decided where the index parsed the file: not parsed again here
            summary.exact = ahead.exact
            verdict, candidates = ahead.verdict, [rule for rule in self.rules if self.codes[rule] in ahead.candidates]
        else:
            verdict, candidates = self._structure(text, summary)
        if self.across and not self.always:
            if view is None:  # a text alone: a project of this module only, as the engine's (ModuleFacts.project)
                view = ProjectIndex().view(STANDALONE)
            # its own record when asked: from the tree parsed here
            view.provide(lambda: index_text(text, summary), summary, dict(ahead.parts) if ahead is not None else None)
            answered = dict(ahead.answers) if ahead is not None else {}
            more = [rule for rule in self.across if rule not in candidates
                    and (not _declares_words(rule) or any(word in text for word in rule.words))
                    and (_asked_ahead(rule, answered[self.codes[rule]], summary, view)
                         if self.codes[rule] in answered else _asked_safely(rule, summary, view))]
            if more:
                verdict, candidates = Verdict.ANALYSE, [rule for rule in self.rules if rule in candidates or rule in more]
        if verdict is Verdict.ANALYSE:  # asked last: it may tokenize the whole text
            suppression = file_suppression(text)
            if suppression is not None:
                candidates = [rule for rule in candidates if not suppression.covers(rule.code)]
                if not candidates:
                    return Verdict.SKIP_NOQA, []
        return verdict, candidates

    def ahead(self, text: str, summary: Summary) -> Ahead | None:
        """The structural stage on a text the project index parses (with `summary`, whose tree the index's record is
        then built from), for the file's own screen to take (`select`); None where `select` would not ask it (no
        word, a rule that declares nothing) or would ask it of another text (identifiers not in NFKC form)."""
        if self.always or python_identifiers(text) is not text or not self.has_words(text):
            return None
        verdict, candidates = self._structure(text, summary)
        answers, parts = [], {}
        for rule in self.across:  # as `select` asks them: the rules not kept, whose words the text holds
            questions = _file_questions(rule.requires_across) if _declares_own_across(rule) else None
            if rule not in candidates and questions is not None and \
                    (not _declares_words(rule) or any(word in text for word in rule.words)):
                answers.append((self.codes[rule], tuple(_answer(question, summary) for question in questions)))
                for asked in _project_questions(rule.requires_across):
                    for part in getattr(asked.question, "file_parts", ()):
                        key = part_key(part)
                        if key not in parts:
                            try:
                                parts[key] = part(summary)
                            except Exception:  # noqa: BLE001 - found in phase 2 then, where it raises again
                                continue
        return Ahead(_codes(self.rules), text_digest(text), verdict, _codes(candidates), summary.exact,
                     tuple(answers), tuple(parts.items()))

    def _ahead_of(self, view, text: str) -> Ahead | None:
        """The `Ahead` the project keeps of the view's file, when it is of this text and this set of rules."""
        if self.always or view is None:
            return None
        ahead = view.screened()
        if ahead is None or ahead.rules != _codes(self.rules) or ahead.digest != text_digest(text):
            return None
        return ahead

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
