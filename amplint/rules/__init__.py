"""The rule registry: every rule amplint has, and selection by code, prefix or name.

What a run needs to know of a rule before a file is analysed (its code and name for `--select` and the
configuration, its words for the screen's first stage, the torch version it needs, its severity and fix) is read
from amplint/rules/catalog.py, generated from the rule modules (`python -m amplint.rules`; tests/test_rule_catalog.py
checks that it matches them). So a run imports a rule's module only when a file may need it: a file without a word
of any rule imports none. Selection hands out `RuleRef`s, which stand for the classes: their catalog fields are
read at once, anything else (`requires`, the documentation, `check`) from the class, imported when first asked.

`ALL_RULES`, `RULES_BY_CODE` and `RULES_BY_NAME` are the classes themselves, every rule module imported when
one of them is first read.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

from amplint.diagnostics import Severity
from amplint.rules.catalog import CATALOG as _ROWS

if TYPE_CHECKING:
    from amplint.rules.base import Rule

PACKAGE = __name__


class RuleRef:
    """One rule of the catalog, standing for its class: `code`, `name`, `words`, `min_torch`, `fix` and
    `severity` as the class declares them (from the catalog); any other attribute, and a call (an instance), from
    the class, whose module is imported when first needed (`load`)."""

    def __init__(self, code: str, name: str, module: str, class_name: str, words: tuple[str, ...] | None,
                 min_torch: str | None, fix: str, severity: str, opt_in: bool = False) -> None:
        self.code, self.name, self.module, self.class_name = code, name, module, class_name
        self.words, self.min_torch, self.fix, self.severity = words, min_torch, fix, Severity(severity)
        self.opt_in = opt_in
        self._class: type[Rule] | None = None

    def load(self) -> type[Rule]:
        """The rule's class (its module imported the first time)."""
        if self._class is None:
            self._class = getattr(importlib.import_module(f"{PACKAGE}.{self.module}"), self.class_name)
        return self._class

    def __getattr__(self, attribute: str):
        if attribute.startswith("__"):  # copy, pickle and the like ask for dunders: not the class's to answer
            raise AttributeError(attribute)
        return getattr(self.load(), attribute)

    def __call__(self) -> Rule:
        return self.load()()

    def __reduce__(self):
        return ref, (self.code,)  # the registry's own entry in another process

    def __repr__(self) -> str:
        return f"<rule {self.code} {self.name}>"


CATALOG: tuple[RuleRef, ...] = tuple(RuleRef(*row) for row in _ROWS)  # every rule, in code order
REFS_BY_CODE: dict[str, RuleRef] = {rule.code: rule for rule in CATALOG}
REFS_BY_NAME: dict[str, RuleRef] = {rule.name: rule for rule in CATALOG}


def ref(code: str) -> RuleRef:
    """The catalog's entry of a rule code."""
    return REFS_BY_CODE[code]


def __getattr__(attribute: str):
    """`ALL_RULES`, `RULES_BY_CODE`, `RULES_BY_NAME`: the classes, every rule module imported on first use."""
    if attribute == "ALL_RULES":
        value = tuple(rule.load() for rule in CATALOG)
    elif attribute == "RULES_BY_CODE":
        value = {rule.code: rule.load() for rule in CATALOG}
    elif attribute == "RULES_BY_NAME":
        value = {rule.name: rule.load() for rule in CATALOG}
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")
    globals()[attribute] = value
    return value


class UnknownSelector(ValueError):
    """A code, prefix or name that matches no rule."""


def matching(selector: str, opt_in: bool = False) -> list[RuleRef]:
    """Rules a selector names: `ALL`, a full code, a code prefix (`AMP00`), or a kebab-case name. Without
    `opt_in`, an opt-in rule is among them only when the selector is its full code or its name (what enables a
    rule: `select`, `extend-select`); with it, whenever the selector covers it (what disables one: `ignore`)."""
    selector = selector.strip()
    if selector.upper() == "ALL":
        return [rule for rule in CATALOG if opt_in or not rule.opt_in]
    if selector in REFS_BY_NAME:
        return [REFS_BY_NAME[selector]]
    found = [rule for rule in CATALOG if rule.code.startswith(selector.upper())] if selector[:1].isalpha() else []
    if not found or not selector.upper().startswith("AMP"):
        raise UnknownSelector(selector)
    return [rule for rule in found if opt_in or not rule.opt_in or rule.code == selector.upper()]


def lookup(code_or_name: str) -> RuleRef:
    rule = REFS_BY_CODE.get(code_or_name.upper()) or REFS_BY_NAME.get(code_or_name)
    if rule is None:
        raise UnknownSelector(code_or_name)
    return rule


def select(select: list[str] | None, ignore: list[str], extend_select: list[str] | None = None) -> list[RuleRef]:
    """The rules enabled by select/extend-select/ignore, in registry order."""
    chosen: set[RuleRef] = set()
    for selector in (select if select is not None else ["ALL"]):
        chosen.update(matching(selector))
    for selector in extend_select or []:
        chosen.update(matching(selector))
    for selector in ignore:
        chosen.difference_update(matching(selector, opt_in=True))
    return [rule for rule in CATALOG if rule in chosen]


# --- the catalog, generated --------------------------------------------------------------------------------------

CATALOG_PATH = Path(__file__).with_name("catalog.py")
_FIELDS = ("code", "name", "module", "class", "words", "min_torch", "fix", "severity")


def catalog_source() -> str:
    """The text of amplint/rules/catalog.py, from the rule modules (amplint/rules/amp*.py, one rule class each):
    each rule's `words` written as its class body writes them (names of the vocabulary), the rest as values."""
    import ast

    from amplint import vocabulary
    from amplint.rules.base import Rule

    rows = []
    for path in sorted(CATALOG_PATH.parent.glob("amp[0-9]*.py")):
        module = importlib.import_module(f"{PACKAGE}.{path.stem}")
        classes = [value for value in vars(module).values() if isinstance(value, type) and issubclass(value, Rule)
                   and value.__module__ == module.__name__ and "code" in vars(value)]
        if len(classes) != 1:
            raise ValueError(f"{path.name} defines {len(classes)} rule classes; one is expected")
        [rule] = classes
        words = "None" if rule.words is None else _words_source(rule, path, ast, vocabulary)
        opt_in = ", True" if rule.opt_in else ""
        rows.append(f"    ({_quoted(rule.code)}, {_quoted(rule.name)}, {_quoted(path.stem)}, {_quoted(rule.__name__)},\n"
                    f"     {words}, {_quoted(rule.min_torch)}, {_quoted(rule.fix)}, {_quoted(rule.severity.value)}"
                    f"{opt_in}),\n")
    rows.sort()
    return ('"""Every rule\'s catalog entry, generated from the rule modules by `python -m amplint.rules`: do not edit.\n'
            f'({", ".join(_FIELDS)}[, opt_in])."""\n\n'
            "from amplint import vocabulary as vocab\n\n"
            "CATALOG = (\n" + "".join(rows) + ")\n")


def _quoted(value: str | None) -> str:
    import json

    return "None" if value is None else json.dumps(value)


def _words_source(rule, path: Path, ast, vocabulary) -> str:
    """The class body's `words = ...` expression, when it is a tuple of the vocabulary's names (`vocab.NAME`) and
    string literals that gives the class's words; else each word spelled by the vocabulary's name for it, or as a
    literal."""
    text = path.read_text(encoding="utf-8")

    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "vocab":
            return getattr(vocabulary, node.attr, None)
        return None

    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef) and node.name == rule.__name__:
            for statement in node.body:
                if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Tuple) \
                        and [getattr(target, "id", None) for target in statement.targets] == ["words"] \
                        and tuple(value(part) for part in statement.value.elts) == rule.words:
                    return " ".join(ast.get_source_segment(text, statement.value).split())
    names = {value: name for name, value in sorted(vars(vocabulary).items(), reverse=True)
             if name.isupper() and isinstance(value, str)}
    spelled = [f"vocab.{names[word]}" if word in names else _quoted(word) for word in rule.words]
    return "(" + ", ".join(spelled) + ("," if len(spelled) == 1 else "") + ")"
