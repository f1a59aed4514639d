"""Deciding cheaply whether a file can possibly trigger an enabled rule, before any libcst work.

Most Python files never touch mixed precision; parsing them with libcst is where a run over a large tree
would spend its time. Each file goes through two stages, and only the files that pass both reach the engine:

1. Words. Each rule declares `words` (`Rule.words`): words one of which a file must contain for the rule to
   possibly fire. A file that contains none of the words of any enabled rule is skipped. Files that contain
   `# amplint: noqa` on a line of their own are skipped here too (the engine would report nothing for them).
2. Structure. Each rule may declare `maybe_applies(summary)` (`Rule.maybe_applies`), asked with a `Summary`
   of the file shared by all rules: which identifiers it uses, which methods it calls, whether it has
   with-statements or call decorators, whether it passes a literal `False`... The summary is lazy: its
   questions are first answered from the text (a word that is not there cannot be an identifier), and the
   stdlib `ast` tree is built only when a question needs it, once per file.

Both stages must be conservative: they may keep a file no rule flags, never drop one a rule flags. A rule that
declares nothing (`words = None`, `maybe_applies` not overridden) is run on every file. A file that `ast`
cannot parse always goes to the engine, which reports it (AMP900).
"""

from __future__ import annotations

import ast
import enum
import functools
import re
import warnings
from typing import Sequence

from amplint.engine import FILE_NOQA  # `# amplint: noqa` on a line of its own: the engine reports nothing


class Verdict(enum.Enum):
    SKIP_WORDS = "no word of an enabled rule"
    SKIP_NOQA = "`# amplint: noqa`"
    SKIP_STRUCTURE = "no enabled rule's structure"
    ANALYSE = "analyse"

    @property
    def skipped(self) -> bool:
        return self is not Verdict.ANALYSE


class _Unparsable(Exception):
    """`ast` cannot parse the file: the engine must see it (and report the syntax error)."""


# What may stand between a name and the `(` of its call: spaces, line continuations, comments (inside brackets)
# and the closing parentheses of `(x.name)(...)`; between a `.` and the attribute's name, the same but `)`.
# Possessive (`*+`): a line of `#####` must not make the regex backtrack.
_GAP = r"(?:\s|\\|#[^\n]*+|\))*+"
_DOT_GAP = r"(?:\s|\\|#[^\n]*+)*+"
_DEF_NAME = re.compile(r"(?<![A-Za-z0-9_])def(?:\s|\\)+([^\W\d]\w*)")
_ACCELERATOR = re.compile(r"accelerator|fabric", re.IGNORECASE)


@functools.lru_cache(maxsize=None)
def _token_pattern(name: str, kind: str = "token") -> re.Pattern[str]:
    """The name as a whole identifier token (ASCII boundaries, which every identifier has); for kind "call",
    followed by the `(` of a call; for "method", also preceded by a `.`."""
    token = rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])"
    if kind == "token":
        return re.compile(token)
    if kind == "call":
        return re.compile(token + rf"{_GAP}\(")
    return re.compile(rf"\.{_DOT_GAP}{re.escape(name)}(?![A-Za-z0-9_]){_GAP}\(")


class Summary:
    """What the structural stage knows about one file; every rule asks the same instance.

    Questions (all conservative: True whenever the engine could see the thing):

    - `contains(*words)`: a word occurs in the text (anywhere, as a substring).
    - `mentions(*names)`: a name is used as an identifier: a variable, an attribute (`x.name`), a part of an
      imported module or name, an `as` alias, or a function's name.
    - `calls(*names)`: a call whose callee is `name(...)` or `<expr>.name(...)`.
    - `calls_method(*names)`: a call `<expr>.name(...)`; `calls_method_outside_functions(*names)`: one at module
      level or in a class body.
    - `imports_name(*names)`: an import whose last part is the name (`from x import name [as y]`).
    - `uses_api(*names)`: `calls(*names)` or `imports_name(*names)`: a call that may resolve through the
      imports to an API whose last part is one of the names, aliases included.
    - `imports_module(name)`: an absolute import of the module or of something in it (`import torch.amp`,
      `from torch import autocast`).
    - `defines_function(pattern)`: a `def` whose name the compiled regex `pattern` finds (`search`).
    - `has_with`, `has_call_decorator` (a decorator that is a call, `@f(...)`, on a function),
      `false_argument` (a call with a literal `False` as a positional argument or as `enabled=False`),
      `accelerator_named()` (a name ending in `accelerator`/`fabric`, any case).
    - Helpers built from these: `regions_possible()` (an autocast region can exist), `scaler_possible()` (an
      object can be known as a GradScaler), `backward_possible()` (a backward call can exist).

    The prefilter asks each rule twice: first in text mode (`exact` False), where every question is answered
    from the text alone (True when the words it needs are there), which costs no parse; then, for the rules
    that said yes, in exact mode, where questions look at the `ast` tree. So `maybe_applies` must be monotone:
    built with `and`/`or` from these questions, never `not`.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.exact = False
        self._present: dict[tuple[str, str], bool] = {}
        self._tree_done = False
        self._unparsable = False
        self.identifiers: set[str] = set()
        self.callees: set[str] = set()
        self.methods: set[str] = set()
        self.module_methods: set[str] = set()  # methods called outside every function (module or class body)
        self.imported_names: set[str] = set()
        self.imported_modules: set[str] = set()
        self.function_names: list[str] = []
        self._with = False
        self._call_decorator = False
        self._false_argument = False

    # text ----------------------------------------------------------------------------------------------
    def contains(self, *words: str) -> bool:
        return any(word in self.text for word in words)

    def has_token(self, *names: str, kind: str = "token") -> bool:
        """A name occurs as a whole token in the text (comments and strings included); kind "call": followed
        by `(`; kind "method": also preceded by `.`."""
        for name in names:
            key = (name, kind)
            present = self._present.get(key)
            if present is None:
                present = name in self.text and _token_pattern(name, kind).search(self.text) is not None
                self._present[key] = present
            if present:
                return True
        return False

    # tree ----------------------------------------------------------------------------------------------
    def _tree(self) -> None:
        if self._tree_done:
            if self._unparsable:
                raise _Unparsable
            return
        self._tree_done = True
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tree = ast.parse(self.text)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
            self._unparsable = True
            raise _Unparsable from None
        self._collect(tree)

    def _collect(self, tree: ast.AST) -> None:
        identifiers, callees, methods = self.identifiers, self.callees, self.methods
        name_type, attribute_type, call_type, constant_type = ast.Name, ast.Attribute, ast.Call, ast.Constant
        functions = (ast.FunctionDef, ast.AsyncFunctionDef)
        withs = (ast.With, ast.AsyncWith)
        module_methods = self.module_methods
        iter_children = ast.iter_child_nodes
        # (node, inside a function body or lambda body): the facts layer's "function is None" is the outside.
        stack: list[tuple[ast.AST, bool]] = [(tree, False)]
        pop, push = stack.pop, stack.append
        while stack:
            node, inside = pop()
            kind = type(node)
            if kind in functions:  # decorators, defaults and annotations run outside the body
                for child in node.body:
                    push((child, True))
                for child in (*node.decorator_list, node.args, node.returns, *getattr(node, "type_params", ())):
                    if child is not None:
                        push((child, inside))
            elif kind is ast.Lambda:
                push((node.body, True))
                push((node.args, inside))
            else:
                for child in iter_children(node):
                    push((child, inside))
            if kind is name_type:
                identifiers.add(node.id)
            elif kind is attribute_type:
                identifiers.add(node.attr)
            elif kind is call_type:
                func = node.func
                if type(func) is attribute_type:
                    methods.add(func.attr)
                    callees.add(func.attr)
                    if not inside:
                        module_methods.add(func.attr)
                elif type(func) is name_type:
                    callees.add(func.id)
                if not self._false_argument:
                    for argument in node.args:
                        if type(argument) is constant_type and argument.value is False:
                            self._false_argument = True
                    for keyword in node.keywords:
                        value = keyword.value
                        if keyword.arg == "enabled" and type(value) is constant_type and value.value is False:
                            self._false_argument = True
            elif kind in functions:
                self.function_names.append(node.name)
                identifiers.add(node.name)
                if not self._call_decorator:
                    self._call_decorator = any(type(d) is call_type for d in node.decorator_list)
            elif kind in withs:
                self._with = True
            elif kind is ast.Import:
                for alias in node.names:
                    parts = alias.name.split(".")
                    identifiers.update(parts)
                    self.imported_names.add(parts[-1])
                    self.imported_modules.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
                    if alias.asname:
                        identifiers.add(alias.asname)
            elif kind is ast.ImportFrom:
                if node.module:
                    parts = node.module.split(".")
                    identifiers.update(parts)
                    if not node.level:
                        self.imported_modules.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
                for alias in node.names:
                    parts = alias.name.split(".")
                    identifiers.update(parts)
                    self.imported_names.add(parts[-1])
                    if alias.asname:
                        identifiers.add(alias.asname)

    def _ask(self, precondition: bool, exact) -> bool:
        if not precondition:
            return False
        if not self.exact:
            return True
        self._tree()
        return exact()

    def mentions(self, *names: str) -> bool:
        return self._ask(self.has_token(*names), lambda: any(name in self.identifiers for name in names))

    def calls(self, *names: str) -> bool:
        return self._ask(self.has_token(*names, kind="call"), lambda: any(name in self.callees for name in names))

    def calls_method(self, *names: str) -> bool:
        return self._ask(self.has_token(*names, kind="method"), lambda: any(name in self.methods for name in names))

    def calls_method_outside_functions(self, *names: str) -> bool:
        """A call `<expr>.name(...)` at module level or in a class body (not in a def's or lambda's body)."""
        return self._ask(self.has_token(*names, kind="method"),
                         lambda: any(name in self.module_methods for name in names))

    def imports_name(self, *names: str) -> bool:
        return self._ask(self.has_token(*names) and self.has_token("import"),
                         lambda: any(name in self.imported_names for name in names))

    def uses_api(self, *names: str) -> bool:
        return self.calls(*names) or self.imports_name(*names)

    def imports_module(self, name: str) -> bool:
        return self._ask(self.has_token(name) and self.has_token("import"), lambda: name in self.imported_modules)

    def defines_function(self, pattern: re.Pattern[str]) -> bool:
        written = any(pattern.search(match) for match in _DEF_NAME.findall(self.text)) if "def" in self.text else False
        return self._ask(written, lambda: any(pattern.search(name) for name in self.function_names))

    def accelerator_named(self) -> bool:
        return self._ask(_ACCELERATOR.search(self.text) is not None,
                         lambda: any(name.lower().endswith(("accelerator", "fabric")) for name in self.identifiers))

    @property
    def has_with(self) -> bool:
        return self._ask(self.has_token("with"), lambda: self._with)

    @property
    def has_call_decorator(self) -> bool:
        return self._ask("@" in self.text, lambda: self._call_decorator)

    @property
    def false_argument(self) -> bool:
        return self._ask(self.has_token("False"), lambda: self._false_argument)

    # what the facts layer needs ------------------------------------------------------------------------
    def regions_possible(self) -> bool:
        """An autocast region can exist: `autocast` is used as a name (every spelling of torch's autocast,
        a `partial(...)` of it, an accelerator's `.autocast()`), torch is imported (every autocast resolves
        through an import of torch) or an accelerator is named, and a with-statement or a call decorator can
        open it."""
        return (self.mentions("autocast") and (self.imports_module("torch") or self.accelerator_named())
                and (self.has_with or self.has_call_decorator))

    def scaler_possible(self) -> bool:
        """Some object can be known as a GradScaler: one is constructed (a call resolving to a GradScaler), or
        something is used the way only a scaler is (`x.unscale_(...)`, `x.scale(loss).backward()`)."""
        return ((self.uses_api("GradScaler", "ShardedGradScaler") and self.imports_module("torch"))
                or self.calls_method("unscale_")
                or (self.calls_method("scale") and self.calls_method("backward")))

    def backward_possible(self) -> bool:
        """A backward can run: `x.backward()`, or a call resolving to `torch.autograd.backward`/`grad`."""
        return self.uses_api("backward", "grad")


def _declares_words(rule: type) -> bool:
    return bool(getattr(rule, "words", None))


def _declares_structure(rule: type) -> bool:
    from amplint.rules.base import Rule

    method = getattr(rule, "maybe_applies", None)
    return method is not None and getattr(method, "__func__", None) is not Rule.maybe_applies.__func__


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
        if not self.has_words(text):
            return Verdict.SKIP_WORDS
        if FILE_NOQA.search(text):
            return Verdict.SKIP_NOQA
        if self.always:
            return Verdict.ANALYSE
        summary = Summary(text)
        candidates = []
        for rule in self.rules:
            if _declares_words(rule) and not summary.contains(*rule.words):
                continue
            if not _declares_structure(rule):
                return Verdict.ANALYSE
            if rule.maybe_applies(summary):  # text mode: no parse
                candidates.append(rule)
        if candidates:
            summary.exact = True
            try:
                if any(rule.maybe_applies(summary) for rule in candidates):
                    return Verdict.ANALYSE
            except _Unparsable:
                return Verdict.ANALYSE
        return Verdict.SKIP_STRUCTURE


_PREFILTERS: dict[tuple[type, ...], Prefilter] = {}


def prefilter_for(rules: Sequence[object]) -> Prefilter:
    """The prefilter of a set of enabled rules, built once per process for each distinct set."""
    key = tuple(rule if isinstance(rule, type) else type(rule) for rule in rules)
    prefilter = _PREFILTERS.get(key)
    if prefilter is None:
        prefilter = _PREFILTERS[key] = Prefilter(key)
    return prefilter
