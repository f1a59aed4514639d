"""Which rules run on one source, decided in one place.

Three questions narrow the rules, in this order: which rules the settings enable (`select`, `extend-select`,
`ignore`: `enabled`), which of those apply to one file (its `per-file-ignores`: `rules_for`; the supported torch
releases turn no rule off, they only decide what a deprecation finding and a fix may say: amplint/facts/versions.py),
and which of those can fire on its text at all (the screen, amplint/prefilter.py: `screen`). The
command line, the workers, the server, the flake8 plugin and the harness ask here; nothing else finishes a
selection.

The first two answer from the registry's catalog (amplint/rules/__init__.py) without importing a rule's module:
`rules_for` hands out a `LazyRule` for each catalog entry. The screen's first stage (words) needs no more; the
rules whose words a text holds are imported there, and only those go on to the screen's second stage and to
the engine. So a file without a word of any enabled rule imports no rule module (and no libcst).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Sequence

from amplint import rules as registry
from amplint.parsing import python_identifiers

if TYPE_CHECKING:
    from amplint.facts.versions import TorchSupport
    from amplint.rules.base import Rule

_INSTANCES: dict[tuple[object, TorchSupport], object] = {}  # rules keep no state: one per rule and torch range


class LazyRule:
    """A rule of the catalog for one torch range, as `rules_for` hands it out: what the catalog knows (`code`,
    `name`, `words`, `min_torch`, `fix`, `severity`) and `torch` at once; the rule itself (`rule`: its module
    imported, its class instantiated) when anything else is first asked of it."""

    def __init__(self, ref: registry.RuleRef, support: TorchSupport) -> None:
        self.ref = ref
        self.code, self.name, self.words = ref.code, ref.name, ref.words
        self.min_torch, self.fix, self.severity = ref.min_torch, ref.fix, ref.severity
        self.torch = support
        self._rule: Rule | None = None

    @property
    def rule(self) -> Rule:
        if self._rule is None:
            self._rule = _instance(self.ref.load(), self.torch)
        return self._rule

    def check(self, facts):
        return self.rule.check(facts)

    def __getattr__(self, attribute: str):
        if attribute.startswith("__"):  # copy, pickle and the like ask for dunders: not the rule's to answer
            raise AttributeError(attribute)
        return getattr(self.rule, attribute)

    def __repr__(self) -> str:
        return f"<rule {self.code} {self.name} for torch {self.torch}>"


def enabled(settings) -> list[registry.RuleRef]:
    """The rules the settings enable (`select`, `extend-select`, `ignore`), in registry order."""
    return registry.select(settings.select, settings.ignore, settings.extend_select)


def rules_for(path: str, rule_classes: Sequence[object], settings) -> list[Rule]:
    """The enabled rules (catalog entries or rule classes) that apply to the file at `path`: its per-file ignores
    taken away. Each knows the torch releases the project supports (`TorchSupport`); none is left out for them.
    A catalog entry's rule is a `LazyRule`."""
    ranged = getattr(settings, "torch_range_for", None)  # each file's own project (amplint/config.py)
    target, below = ranged(path) if ranged is not None else (settings.target_torch_version,
                                                             getattr(settings, "torch_below", None))
    return list(_rules(tuple(rule_classes), tuple(settings.ignored_for(path)), target, below))


def all_rules(opt_in: bool = False) -> list[Rule]:
    """Every rule, with no settings (the flake8 plugin, the harness): what no configuration narrows; the opt-in
    rules too with `opt_in` (the harness, the judge of every rule)."""
    return list(_rules(tuple(rule for rule in registry.CATALOG if opt_in or not rule.opt_in), (), None))


@functools.lru_cache(maxsize=256)
def _rules(rule_classes: tuple[object, ...], ignored_selectors: tuple[str, ...], target: str | None,
           below: str | None = None) -> list[Rule]:
    """The enabled rules minus per-file ignores, for the torch range of the target (asked for every file: computed
    once per distinct answer)."""
    from amplint.facts.versions import TorchSupport

    ignored = {rule.code for selector in ignored_selectors for rule in registry.matching(selector, opt_in=True)}
    support = TorchSupport(target, below)  # which spellings the fixes may write (amplint/facts/versions.py)
    return [_handed_out(rule, support) for rule in rule_classes
            if rule.code not in ignored]


def _handed_out(rule, support: TorchSupport):
    """A catalog entry's `LazyRule`, a class's instance: one per rule and torch range."""
    key = (rule, support)
    found = _INSTANCES.get(key)
    if found is None:
        found = _INSTANCES[key] = LazyRule(rule, support) if isinstance(rule, registry.RuleRef) \
            else _instance(rule, support)
    return found


def _instance(rule: type[Rule], support: TorchSupport) -> Rule:
    key = (rule, support)
    found = _INSTANCES.get(key)
    if found is None:
        found = _INSTANCES[key] = rule()
        found.torch = support
    return found


def loaded(rules: Sequence[object]) -> list[Rule]:
    """The rules themselves: each `LazyRule`'s rule (its module imported), any other rule as it is."""
    return [rule.rule if isinstance(rule, LazyRule) else rule for rule in rules]


def has_words(text: str, rules: Sequence[object]) -> bool:
    """The screen's first stage on a text as it is (amplint/prefilter.py, `Prefilter.has_words`): does it hold a
    word of some rule (always, when a rule declares none)? Asked of the rules' declarations: no module imported."""
    if not rules:
        return False
    if not all(rule.words for rule in rules):
        return True
    return any(word in text for rule in rules for word in rule.words)


def screen(text: str, rules: Sequence[object], project=None) -> list[Rule] | None:
    """The screen's verdict on a Python text: None when no rule of `rules` can fire on it (it need not reach
    libcst), else the rules that can, in their order (amplint/prefilter.py), themselves (`loaded`). `project`:
    the project index seen from the text's module, for rules whose findings here can come from other files.

    The first stage is asked here of the declarations, so that only the rules whose words the text holds (as
    Python reads its identifiers) are imported; they alone can pass the second."""
    normal = python_identifiers(text)  # `ｔｏｒｃｈ` is `torch` to Python (NFKC): its words are torch's
    present = [rule for rule in rules if not rule.words or any(word in normal for word in rule.words)]
    if not present:
        return None
    from amplint.prefilter import prefilter_for  # the second stage: Python's structure (the index's summaries)

    present = loaded(present)
    verdict, candidates = prefilter_for(present).select(text, project)
    if verdict.skipped:
        return None
    return [rule for rule in present if type(rule) in candidates]


def screen_ahead(text: str, rules: Sequence[object], summary):
    """The structural stage of `screen` on a Python text that the project index parses, from its `summary`
    (amplint/prefilter.py, `Prefilter.ahead`): what the text's own screen then takes; None where it has nothing to
    take (no rule whose words the text holds)."""
    normal = python_identifiers(text)
    present = [rule for rule in rules if not rule.words or any(word in normal for word in rule.words)]
    if not present:
        return None
    from amplint.prefilter import prefilter_for

    return prefilter_for(loaded(present)).ahead(text, summary)
