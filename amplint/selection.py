"""Which rules run on one source, decided in one place.

Three questions narrow the rules, in this order: which rules the settings enable (`select`, `extend-select`,
`ignore`: `enabled`), which of those apply to one file (its `per-file-ignores`, and the target torch version:
`rules_for`), and which of those can fire on its text at all (the screen, amplint/prefilter.py: `screen`). The
command line, the workers, the server, the flake8 plugin and the harness ask here; nothing else finishes a
selection.
"""

from __future__ import annotations

import functools

from amplint import rules as registry
from amplint.facts.versions import TorchSupport, rule_applies
from amplint.prefilter import prefilter_for
from amplint.rules.base import Rule

_INSTANCES: dict[tuple[type[Rule], TorchSupport], Rule] = {}  # rules keep no state: one per rule and torch range


def enabled(settings) -> list[type[Rule]]:
    """The rules the settings enable (`select`, `extend-select`, `ignore`), in registry order."""
    return registry.select(settings.select, settings.ignore, settings.extend_select)


def rules_for(path: str, rule_classes: list[type[Rule]], settings) -> list[Rule]:
    """The enabled rules that apply to the file at `path`: its per-file ignores taken away, and the rules that
    need a newer torch than the target."""
    return list(_rules(tuple(rule_classes), tuple(settings.ignored_for(path)), settings.target_torch_version,
                       getattr(settings, "torch_below", None)))


def all_rules() -> list[Rule]:
    """Every rule, with no settings (the flake8 plugin, the harness): what no configuration narrows."""
    return list(_rules(registry.ALL_RULES, (), None))


@functools.lru_cache(maxsize=256)
def _rules(rule_classes: tuple[type[Rule], ...], ignored_selectors: tuple[str, ...], target: str | None,
           below: str | None = None) -> list[Rule]:
    """The enabled rules minus per-file ignores and rules needing a newer torch than the target (asked for every
    file: computed once per distinct answer)."""
    ignored: set[type[Rule]] = set()
    for selector in ignored_selectors:
        ignored.update(registry.matching(selector))
    support = TorchSupport(target, below)  # which spellings the fixes may write (amplint/facts/versions.py)
    return [_INSTANCES.get((rule, support)) or _INSTANCES.setdefault((rule, support), _instance(rule, support))
            for rule in rule_classes if rule not in ignored and rule_applies(rule.min_torch, target)]


def _instance(rule: type[Rule], support: TorchSupport) -> Rule:
    instance = rule()
    instance.torch = support
    return instance


def screen(text: str, rules: list[Rule], project=None) -> list[Rule] | None:
    """The screen's verdict on a Python text: None when no rule of `rules` can fire on it (it need not reach
    libcst), else the rules that can, in their order (amplint/prefilter.py). `project`: the project index seen
    from the text's module, for rules whose findings here can come from other files."""
    verdict, candidates = prefilter_for(rules).select(text, project)
    if verdict.skipped:
        return None
    return [rule for rule in rules if type(rule) in candidates]
