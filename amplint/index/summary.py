"""What the project index knows about one file, from the stdlib `ast` (and, before any parse, from its text).

`Summary` is the screen's model of a file: every rule's declared `requires` asks it generic questions (does
the file import torch, call something named `autocast`, call `.backward()` where a region can be open...). A rule
with a question of its own writes it in its own file from the generic accessors here (`ask`, `sites`,
`call_sites_by_name`, `written_call`, ...). The per-function summaries of the project index
(`amplint/index/functions.py`) are built from the same walk.
"""

from __future__ import annotations

import ast
import builtins
import functools
import re
import warnings
from typing import Collection, Iterable, Iterator, Sequence

from amplint import vocabulary as vocab
from amplint.vocabulary import ACCELERATOR_NAMES, GRAD_SCALERS, may_build_optimizer
from amplint.parsing import too_large


class _Unparsable(Exception):
    """`ast` cannot parse the file: the engine must see it (and report the syntax error)."""


# What may stand between a name and the `(` of its call: spaces, line continuations, comments (inside brackets)
# and the closing parentheses of `(x.name)(...)`.
# Possessive (`*+`): a line of `#####` must not make the regex backtrack.
_GAP = r"(?:\s|\\|#[^\n]*+|\))*+"
_DEF_NAME = re.compile(r"def(?:\s|\\)+([^\W\d]\w*)")  # also matches inside longer names: more names, fine
_ACCELERATOR = re.compile("|".join(ACCELERATOR_NAMES), re.IGNORECASE)


@functools.lru_cache(maxsize=None)
def _token_pattern(name: str, kind: str = "token") -> re.Pattern[str]:
    """The name not followed by an identifier character; for kinds "call" and "method", followed by the `(` of a
    call. The pattern starts with the name itself so that the regex engine scans for it quickly; what comes
    before it is checked by `_find_token`."""
    token = rf"{re.escape(name)}(?![A-Za-z0-9_])"
    return re.compile(token if kind == "token" else token + rf"{_GAP}\(")


_IDENTIFIER_CHARACTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_DOT_GAP_CHARACTERS = frozenset(" \t\f\r\\")


def _find_token(text: str, name: str, kind: str) -> bool:
    """The name as a whole identifier token (ASCII boundaries, which every identifier has); for kind "call",
    followed by the `(` of a call; for "method", also preceded by a `.` (or by a line break, after which the
    `.` may stand on an earlier line: taken as a yes)."""
    for match in _token_pattern(name, kind).finditer(text):
        start = match.start()
        if start and text[start - 1] in _IDENTIFIER_CHARACTERS:
            continue  # the end of a longer name
        if kind != "method":
            return True
        before = start - 1
        while before >= 0 and text[before] in _DOT_GAP_CHARACTERS:
            before -= 1
        if before >= 0 and text[before] in ".\n":
            return True
    return False


def dotted(node: ast.AST) -> str | None:
    """`a.b.c` for a Name/Attribute chain, else None (as the facts layer's `dotted_name`)."""
    parts = []
    while type(node) is ast.Attribute:
        parts.append(node.attr)
        node = node.value
    if type(node) is not ast.Name:
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def last_name(node: ast.AST) -> str | None:
    """The last part of a dotted name (`torch.float16`: float16), else None."""
    name = dotted(node)
    return name.rsplit(".", 1)[-1] if name else None


PARTIAL_API = frozenset({"functools.partial"})
_FLOAT32_NAMES = vocab.FLOAT32_WORDS
DTYPE_NAMES = vocab.DTYPE_WORDS


def argument(call: ast.Call, position: int, keyword: str) -> ast.AST | None:
    for item in call.keywords:
        if item.arg == keyword:
            return item.value
    positional = [arg for arg in call.args if type(arg) is not ast.Starred]
    return positional[position] if position < len(positional) else None


def is_float32_name(node: ast.AST | None) -> bool:
    return node is not None and last_name(node) in _FLOAT32_NAMES


def target_names(target: ast.AST, into: set[str]) -> None:
    if type(target) in (ast.Tuple, ast.List):
        for element in target.elts:
            target_names(element, into)
    elif type(target) is ast.Starred:
        target_names(target.value, into)
    else:
        name = dotted(target)
        if name:
            into.add(name)


FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
# Nodes binding a name otherwise than an `ast.Name` target: a parameter, `except ... as e`, a `match` capture,
# `global`/`nonlocal` (a function writing a module's name).
_OTHER_BINDINGS = frozenset({ast.arg, ast.ExceptHandler, ast.Global, ast.Nonlocal, ast.MatchAs, ast.MatchStar,
                             ast.MatchMapping})
_BUILTINS = frozenset(dir(builtins))
# Calls that bind a module's names at run time (`globals()["scaler"] = ...`): no name of such a module is free.
_DYNAMIC_BINDERS = frozenset({"globals", "exec"})
_LEAF_FIELDS = {"ctx", "type_comment"}
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def names_in(target: ast.AST) -> set[str]:
    """The plain names a for-loop target binds: `opt`, `(i, opt)`, `first, *rest`."""
    if type(target) is ast.Name:
        return {target.id}
    if type(target) is ast.Starred:
        return names_in(target.value)
    if type(target) in (ast.Tuple, ast.List):
        return set().union(*(names_in(element) for element in target.elts))
    return set()


def _child_nodes(node: ast.AST) -> list[ast.AST]:
    """The node's children (what ast.iter_child_nodes gives, without its generators)."""
    kind = type(node)
    fields = _CHILD_FIELDS.get(kind)
    if fields is None:
        fields = _CHILD_FIELDS[kind] = _child_fields(kind)
    children = []
    for field in fields:
        value = getattr(node, field)
        if type(value) is list:
            children += [child for child in value if isinstance(child, ast.AST)]
        elif isinstance(value, ast.AST):
            children.append(value)
    return children


def _child_fields(kind: type) -> tuple[str, ...]:
    """The fields of a node type that can hold nodes (`ctx` markers and plain values left out)."""
    if kind is ast.Constant:
        return ()
    return tuple(field for field in kind._fields if field not in _LEAF_FIELDS)
_WITHS = (ast.With, ast.AsyncWith)
ENTER_CONTEXT = "enter_context"  # an ExitStack's: `stack.enter_context(cm)` enters `cm` until the stack's with ends


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
    - `accelerator_named()`: a name ending in `accelerator`/`fabric`, any case.
    - `regions_possible()`: an autocast region can exist: `autocast` is used as a name, torch is imported (or an
      accelerator named), and a with-item or a call decorator can open one (it calls something named
      `autocast`, an import alias of it, or a name assigned something that can open one, or it is such a
      name).
    - `calls_outside_functions(*names)`, `calls_in_same_function(names, others)`,
      `calls_in_function_named(names, pattern)`, `calls_under(names, contexts)` (inside `with <context>(...)`
      or a function decorated with one): where calls to the names (or to import aliases of them) are; with
      `on_scaler=True`, only method calls on a receiver that can hold a GradScaler (assigned from a
      `GradScaler(...)`, or used with `.unscale_()`/`.scale(...).backward()`).
    - `calls_in_loop(*names)`: in a loop's body, or in a function called in one.
    - `calls_again(*names)`: a method call that can run twice with nothing between: in a loop's body (not only
      `for x in ...` over its first argument), or next to another such call or a `step` in the same function.
    - `module_without_backward()`, `calls_in_function_without_backward(names, pattern, calling)`: no method call
      `.backward()`/`.manual_backward()` in the module, or in the function (a `def` named like `pattern`, or
      calling one of `calling`) holding a call to one of the names. Text mode cannot see an absence: they
      answer from the names alone.
    - `calls_in_region(*names, on_scaler=, on_stepper=)`: a call to one of the names (or to an import alias of
      one) can run in an autocast region: inside a with-statement or a call-decorated function that can open
      one, or in a function called (by its name, any number of calls deep) from such a place; with
      `on_scaler`, only methods of something that can hold a GradScaler; with `on_stepper`, also of something
      the code uses as an optimizer (stepped by a scaler, `zero_grad()`, `param_groups`, built by a class).
    - `region_in_region_possible()`: a region can open inside another in the same function (a with-statement
      in a with-statement or in a call-decorated function), or a call-decorated function is called from a
      region.
    - `disabled_region_possible()`: a call that can open a disabled region: one passing a literal `False`
      (positionally or as `enabled=False`) to something that can open a region, or to a `partial`.
    - `scaler_possible()` (an object can be known as a GradScaler), `backward_possible()` (a backward call can
      exist).
    - `calls_api(*qualified, partial=, decorator=)`: a call (a bare decorator, a `functools.partial` of it) naming
      one of these qualified names through the imports, as the facts layer's ImportMap resolves it.
    A rule asks a question of its own the same way, written in amplint/facts/ over this tree (AMP014's
    `device_suspect_possible` in facts/devices.py: an autocast call whose device can be wrong).

    The prefilter asks each rule twice: first in text mode (`exact` False), where every question is answered
    from the text alone (True when the words it needs are there), which costs no parse; then, for the rules
    that said yes, in exact mode, where questions look at the `ast` tree. So a rule's `requires` must be monotone:
    built with `and`/`or` from these questions, never `not` (a question's text-mode answer is never False
    where its exact answer is True).
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.exact = False
        self._present: dict[tuple[str, str], bool] = {}
        self._words: dict[str, bool] = {}  # word -> in the text (each searched once per file)
        self._tree_done = False
        self.tree: ast.Module | None = None  # the parsed tree, once a question needed it (`parse_tree`)
        self._unparsable = False
        self.identifiers: set[str] = set()
        self.methods: set[str] = set()
        self.module_methods: set[str] = set()  # methods called outside every function (module or class body)
        self.imported_names: set[str] = set()  # the last part of every imported name
        self.imported_modules: set[str] = set()  # absolute imports and their parents: torch, torch.cuda...
        self.import_bound: dict[str, set[str]] = {}  # local name bound by an import -> last parts it stands for
        self.assigned: set[str] = set()  # dotted names assigned anywhere (what the facts layer can follow)
        # Plain names bound anywhere (an assignment, loop or `with` target, a parameter, `except ... as`, `del`...),
        # and those bound at module level (class bodies and `global` statements included): `free_names`.
        self.bound: set[str] = set()
        self.module_bound: set[str] = set()
        self.assignments: list[tuple[set[str], ast.AST]] = []  # (dotted targets, value) of `=` statements
        self.call_assignments: list[tuple[ast.AST | None, ast.Assign | ast.AnnAssign]] = []  # (its function, `x = f(...)`)
        self.import_nodes: list[ast.AST] = []  # every import statement, in any scope
        self._openers: set[str] | None = None
        self.function_names: list[str] = []
        self.function_nodes: list[ast.AST] = []  # every def, in any scope
        self.class_nodes: list[ast.ClassDef] = []  # every class statement, in any scope
        self._text_def_names: set[str] | None = None
        # callee's last name -> [(innermost function or lambda, or None; with-statements around it in there;
        # for a method call, its receiver's dotted name, "self.scaler" for self.scaler.step(...); the loops
        # whose body holds it in there, outermost first; the call itself)]
        self.call_sites_by_name: dict[str, list[tuple[ast.AST | None, tuple, str | None, tuple, ast.Call]]] = {}
        self._scaler_usages: set[str] = set()  # receivers of x.unscale_(...) and x.scale(...).backward()
        # every `x.unscale_` (called or not) with its innermost function: one taken without a call there
        # (`un = scaler.unscale_`, `partial(scaler.unscale_, opt)`) may unscale wherever it is called
        self.unscale_attributes: list[tuple[ast.AST | None, ast.Attribute]] = []
        self._scalers: set[str] | None = None
        self._free: set[str] | None = None
        self._value_names: list[tuple[set[str], set[str]]] | None = None
        self._optimizers: set[str] | None = None
        self.withs: list[tuple[ast.AST, ast.AST | None, tuple]] = []  # (with, its function, withs around it)
        self.call_decorators: dict[int, list[ast.Call]] = {}  # id(function) -> its call decorators
        self._all_decorators: dict[int, list[ast.AST]] = {}  # id(function) -> all its decorators
        self.function_names_by_id: dict[int, str] = {}
        self.false_calls: list[ast.Call] = []
        self.qualified_imports: dict[str, set[str]] = {}  # local name -> every qualified name an import binds it to
        self._bare_decorators: set[str] = set()  # dotted names used as decorators without a call
        self.device_parameters: set[str] = set()  # parameters annotated `<...>.device`
        self.star_unknown = False  # a `from m import *` of a module other than torch's: it may bind any name
        self._reachable: set[str] | None = None
        self._capable: dict[int, bool] = {}

    # text ----------------------------------------------------------------------------------------------
    def contains(self, *words: str) -> bool:
        for word in words:
            present = self._words.get(word)
            if present is None:
                present = self._words[word] = word in self.text
            if present:
                return True
        return False

    def has_token(self, *names: str, kind: str = "token") -> bool:
        """A name occurs as a whole token in the text (comments and strings included); kind "call": followed
        by `(`; kind "method": also preceded by `.`."""
        for name in names:
            key = (name, kind)
            present = self._present.get(key)
            if present is None:
                present = name in self.text and _find_token(self.text, name, kind)
                self._present[key] = present
            if present:
                return True
        return False

    # tree ----------------------------------------------------------------------------------------------
    def parse_tree(self) -> None:
        if self._tree_done:
            if self._unparsable:
                raise _Unparsable
            return
        self._tree_done = True
        if too_large(self.text) is not None:  # not parsed at all: the engine reports it (amplint/parsing.py)
            self._unparsable = True
            raise _Unparsable
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tree = ast.parse(self.text)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
            self._unparsable = True
            raise _Unparsable from None
        self.tree = tree
        self._collect(tree)

    def _collect(self, tree: ast.AST) -> None:
        """One walk of the tree, each node with its context: the innermost function (or lambda) it runs in and
        the with-statements around it inside that function."""
        identifiers, methods, module_methods, calls = self.identifiers, self.methods, self.module_methods, self.call_sites_by_name
        name_type, attribute_type, call_type, constant_type = ast.Name, ast.Attribute, ast.Call, ast.Constant
        ast_type = ast.AST
        load_type, bound, module_bound = ast.Load, self.bound, self.module_bound
        unscale = vocab.UNSCALE
        # (node, innermost function or None, with-statements around it in that function, loops whose body holds
        # it in that function, outermost first)
        stack: list[tuple[ast.AST, ast.AST | None, tuple, tuple]] = [(tree, None, (), ())]
        pop, push = stack.pop, stack.append
        loops = (ast.For, ast.AsyncFor, ast.While)
        while stack:
            node, function, withs, looped = pop()
            kind = type(node)
            if kind is name_type:
                identifiers.add(node.id)
                if type(node.ctx) is not load_type:  # a target (Store) or `del` (Del)
                    (bound if function is not None else module_bound).add(node.id)
                continue
            if kind is attribute_type:
                identifiers.add(node.attr)
                if node.attr == unscale:
                    self.unscale_attributes.append((function, node))
                push((node.value, function, withs, looped))
                continue
            if kind in FUNCTIONS:
                self.function_names.append(node.name)
                self.function_nodes.append(node)
                identifiers.add(node.name)
                self.call_decorators[id(node)] = [d for d in node.decorator_list if type(d) is call_type]
                self.function_names_by_id[id(node)] = node.name
                self._all_decorators[id(node)] = node.decorator_list
                self._note_decorators(node)
                arguments = node.args
                for argument in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs):
                    if argument.annotation is not None and last_name(argument.annotation) == "device":
                        self.device_parameters.add(argument.arg)
                for child in node.body:  # the body runs in the function; the rest where it is defined
                    push((child, node, (), ()))
                for child in (*node.decorator_list, node.args, node.returns, *getattr(node, "type_params", ())):
                    if child is not None:
                        push((child, function, withs, looped))
                continue
            if kind is ast.Lambda:
                push((node.body, node, (), ()))
                push((node.args, function, withs, looped))
                continue
            if kind in _WITHS:
                self.withs.append((node, function, withs))
                for item in node.items:
                    push((item, function, withs, looped))
                inner = (*withs, node)
                for child in node.body:
                    push((child, function, inner, looped))
                continue
            if kind in loops:  # the body repeats; the header and the else-branch do not
                inner = (*looped, node)
                for child in node.body:
                    push((child, function, withs, inner))
                for child in (*node.orelse, getattr(node, "test", None), getattr(node, "iter", None),
                              getattr(node, "target", None)):
                    if child is not None:
                        push((child, function, withs, looped))
                continue
            # _child_nodes inlined: a call per node costs a fifth of this walk (measured)
            fields = _CHILD_FIELDS.get(kind)
            if fields is None:
                fields = _CHILD_FIELDS[kind] = _child_fields(kind)
            for field in fields:
                value = getattr(node, field)
                if type(value) is list:
                    for child in value:
                        if isinstance(child, ast_type):
                            push((child, function, withs, looped))
                elif isinstance(value, ast_type):
                    push((value, function, withs, looped))
            if kind is call_type:
                func = node.func
                callee = receiver = None
                if type(func) is attribute_type:
                    callee = func.attr
                    receiver = dotted(func.value) or ""  # "" for a method of an expression: f().backward()
                    methods.add(callee)
                    if function is None:
                        module_methods.add(callee)
                    if callee == vocab.UNSCALE and receiver:
                        self._scaler_usages.add(receiver)
                    elif callee == vocab.BACKWARD and type(func.value) is call_type:
                        inner = func.value.func
                        if type(inner) is attribute_type and inner.attr == vocab.SCALE:
                            scaler = dotted(inner.value)
                            if scaler:
                                self._scaler_usages.add(scaler)
                elif type(func) is name_type:
                    callee = func.id
                if callee is not None:
                    calls.setdefault(callee, []).append((function, withs, receiver, looped, node))
                if any(type(a) is constant_type and a.value is False for a in node.args) or any(
                        k.arg == vocab.ENABLED and type(k.value) is constant_type and k.value.value is False
                        for k in node.keywords):
                    self.false_calls.append(node)
            elif kind is ast.Assign or kind is ast.AnnAssign:
                if type(node.value) is call_type:  # `x = f()` and `x: T = f()` bind alike
                    self.call_assignments.append((function, node))
                targets: set[str] = set()
                for target in (node.targets if kind is ast.Assign else (node.target,)):
                    target_names(target, targets)
                self.assigned |= targets
                if node.value is not None:
                    self.assignments.append((targets, node.value))
            elif kind in (ast.AugAssign, ast.NamedExpr):
                target_names(node.target, self.assigned)
            elif kind is ast.ClassDef:
                self.class_nodes.append(node)
                self._note_decorators(node)
                (bound if function is not None else module_bound).add(node.name)
            elif kind is ast.Import:
                self.import_nodes.append(node)
                for alias in node.names:
                    self.qualified_imports.setdefault(alias.asname or alias.name.split(".")[0], set()).add(
                        alias.name if alias.asname else alias.name.split(".")[0])
                    parts = alias.name.split(".")
                    identifiers.update(parts)
                    self.imported_names.add(parts[-1])
                    self.imported_modules.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
                    local = alias.asname or parts[0]
                    identifiers.add(local)
                    self.import_bound.setdefault(local, set()).add(parts[-1] if alias.asname else parts[0])
            elif kind is ast.ImportFrom:
                self.import_nodes.append(node)
                if any(alias.name == "*" for alias in node.names) and (
                        node.level or (node.module or "").split(".", 1)[0] != vocab.TORCH):
                    self.star_unknown = True
                if node.module and not node.level:
                    for alias in node.names:
                        if alias.name != "*":
                            self.qualified_imports.setdefault(alias.asname or alias.name, set()).add(
                                f"{node.module}.{alias.name}")
                if node.module:
                    parts = node.module.split(".")
                    identifiers.update(parts)
                    if not node.level:
                        self.imported_modules.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
                for alias in node.names:
                    parts = alias.name.split(".")
                    identifiers.update(parts)
                    self.imported_names.add(parts[-1])
                    local = alias.asname or alias.name
                    identifiers.add(local)
                    self.import_bound.setdefault(local, set()).add(parts[-1])
            elif kind in _OTHER_BINDINGS:
                if kind is ast.arg:
                    bound.add(node.arg)
                elif kind is ast.Global or kind is ast.Nonlocal:
                    module_bound.update(node.names)
                else:  # except ... as name, match captures (`case x`, `*rest`, `**rest`)
                    name = getattr(node, "name", None) or getattr(node, "rest", None)
                    if name:
                        (bound if function is not None else module_bound).add(name)

    def _note_decorators(self, node: ast.AST) -> None:
        for decorator in node.decorator_list:
            name = dotted(decorator)
            if name:
                self._bare_decorators.add(name)

    def ask(self, precondition: bool, exact) -> bool:
        if not precondition:
            return False
        if not self.exact:
            return True
        self.parse_tree()
        return exact()

    # what can open an autocast region (the facts layer's classify_context, from above) ---------------------
    def _names_for(self, names: Iterable[str]) -> set[str]:
        """The names and every local name an import binds to one of them (`from x import grad as g`: g)."""
        wanted = set(names)
        return wanted | {local for local, imported in self.import_bound.items() if imported & wanted}

    def _opener_names(self) -> set[str]:
        """Dotted names assigned something that can open a region: a value that uses the name `autocast`, an
        import alias of it, or (any number of assignments away) another such name: `ctx = torch.autocast(...)`,
        `amp = partial(autocast, "cuda")`, `Ctx = ac if amp else nullcontext`, `self.ctx = ctx`."""
        if self._openers is None:
            aliases = {vocab.AUTOCAST} | {local for local, imported in self.import_bound.items()
                                          if vocab.AUTOCAST in imported}
            uses = self._assignment_names() + self._factory_names()
            openers: set[str] = set()
            changed = True
            while changed:
                changed = False
                for targets, names in uses:
                    if not targets <= openers and (names & aliases or names & openers):
                        openers |= targets
                        changed = True
            self._openers = openers
        return self._openers

    def _assignment_names(self) -> list[tuple[set[str], set[str]]]:
        """(targets, what the value uses) of every `=` statement: its names, its attributes' last names and the
        dotted names of its attributes (`torch.autocast`, `torch`...), found once for every question."""
        if self._value_names is None:
            self._value_names = []
            name_type, attribute_type = ast.Name, ast.Attribute
            for targets, value in self.assignments:
                names: set[str] = set()
                stack = [value]
                while stack:
                    node = stack.pop()
                    kind = type(node)
                    if kind is name_type:
                        names.add(node.id)
                        continue
                    if kind is attribute_type:
                        names.add(node.attr)
                        name = dotted(node)
                        if name:
                            names.add(name)
                    stack += _child_nodes(node)
                self._value_names.append((targets, names))
        return self._value_names

    def _factory_names(self) -> list[tuple[set[str], set[str]]]:
        """(a function's names as called: `f`, `self.f`, `cls.f`; what its returns use, and a generator's
        with-items) for every def: a factory returning a region (`return torch.autocast(...)`), or a
        `@contextmanager` yielding in one, opens one where a `with` enters its call (amplint/index/functions.py,
        `returns_autocast`)."""
        found: list[tuple[set[str], set[str]]] = []
        if self.tree is None or vocab.AUTOCAST not in self.text:
            return found
        for function in self.function_nodes:
            values, items, generator = [], [], False
            pending = list(function.body)
            while pending:
                node = pending.pop()
                kind = type(node)
                if kind in FUNCTIONS or kind in (ast.Lambda, ast.ClassDef):
                    continue
                if kind is ast.Return and node.value is not None:
                    values.append(node.value)
                elif kind in (ast.Yield, ast.YieldFrom):
                    generator = True
                elif kind in _WITHS:
                    items.extend(item.context_expr for item in node.items)
                pending.extend(ast.iter_child_nodes(node))
            names: set[str] = set()
            stack = values + items if generator else values
            while stack:
                node = stack.pop()
                if type(node) is ast.Name:
                    names.add(node.id)
                    continue
                if type(node) is ast.Attribute:
                    names.add(node.attr)
                    name = dotted(node)
                    if name:
                        names.add(name)
                stack += _child_nodes(node)
            if names:
                found.append(({function.name, f"self.{function.name}", f"cls.{function.name}"}, names))
        return found

    def callee_can_open(self, func: ast.AST) -> bool:
        """Calling this can open a region: it is named `autocast` (torch's, an accelerator's), is an import
        alias of an `autocast`, or is a name assigned something that can open one."""
        if type(func) is ast.Attribute and func.attr == vocab.AUTOCAST:
            return True
        if type(func) is ast.Name and (func.id == vocab.AUTOCAST
                                       or vocab.AUTOCAST in self.import_bound.get(func.id, ())):
            return True
        name = dotted(func)
        return name is not None and name in self._opener_names()

    def can_open(self, expr: ast.AST) -> bool:
        """Can this expression open a region (either branch of an `a if c else b`, followed without recursion:
        a chain of them can be thousands deep)?"""
        pending = [expr]
        while pending:
            expr = pending.pop()
            if type(expr) is ast.IfExp:
                pending += (expr.orelse, expr.body)
            elif type(expr) is ast.Call:
                if self.callee_can_open(expr.func):
                    return True
            else:
                name = dotted(expr)
                if name is not None and name in self._opener_names():
                    return True
        return False

    def with_can_open(self, with_node: ast.AST) -> bool:
        key = id(with_node)
        if key not in self._capable:
            self._capable[key] = any(self.can_open(item.context_expr) for item in with_node.items) or any(
                site[1] and site[1][-1] is with_node and site[4].args and self.can_open(site[4].args[0])
                for site in self.call_sites_by_name.get(ENTER_CONTEXT, ()))  # `stack.enter_context(autocast())`
        return self._capable[key]

    def context_can_open(self, function: ast.AST | None, withs: tuple) -> bool:
        return any(self.with_can_open(with_node) for with_node in withs) or (
            function is not None and any(self.can_open(d) for d in self.call_decorators.get(id(function), ())))

    def _reachable_functions(self) -> set[str]:
        """Names of functions that can run in a region because a call to them can (the facts layer follows
        two calls; any number here)."""
        if self._reachable is None:
            defined = set(self.function_names)
            reachable: set[str] = set()
            changed = True
            while changed:
                changed = False
                for name in defined - reachable:
                    for function, withs, _, _, _ in self.call_sites_by_name.get(name, ()):
                        if self.context_can_open(function, withs) or (
                                type(function) in FUNCTIONS and function.name in reachable):
                            reachable.add(name)
                            changed = True
                            break
            self._reachable = reachable
        return self._reachable

    def _in_region_possible(self, names: Iterable[str], receivers=None) -> bool:
        for name in self._names_for(names):
            for function, withs, receiver, _, _ in self.call_sites_by_name.get(name, ()):
                if receivers is not None and not receivers(receiver):
                    continue
                if self.context_can_open(function, withs):
                    return True
                if type(function) in FUNCTIONS and function.name in self._reachable_functions():
                    return True
        return False

    def _last_names(self, expr: ast.AST) -> set[str]:
        """What a with-item or decorator names: its callee's (or its own) last name, and what an import binds
        that name to."""
        if type(expr) is ast.Call:
            expr = expr.func
        if type(expr) is ast.Attribute:
            return {expr.attr}
        if type(expr) is ast.Name:
            return {expr.id} | self.import_bound.get(expr.id, set())
        return set()

    def scaler_names(self) -> set[str]:
        """Dotted names that can hold a GradScaler: assigned a value that uses a name `GradScaler` (or an
        import alias of one), or used the way only a scaler is."""
        if self._scalers is None:
            wanted = self._names_for((vocab.GRAD_SCALER, vocab.SHARDED_GRAD_SCALER))
            scalers = set(self._scaler_usages)
            # `x.scale(...)`, `x.step(...)` and `x.update()` together: only a GradScaler has all three
            scalers |= set.intersection(*({receiver for _, _, receiver, _, _ in self.call_sites_by_name.get(method, ()) if receiver}
                                          for method in (vocab.SCALE, vocab.STEP, vocab.UPDATE)))
            # `x.step(arg)` and `x.update()` in one function: a scaler handed in (the facts layer's usage keys)
            stepped = {(id(function), receiver) for function, _, receiver, _, call
                       in self.call_sites_by_name.get(vocab.STEP, ()) if receiver and call.args}
            scalers |= {receiver for function, _, receiver, _, call in self.call_sites_by_name.get(vocab.UPDATE, ())
                        if receiver and not call.args and (id(function), receiver) in stepped}
            for targets, names in self._assignment_names():
                if names & wanted:  # a name or an attribute's last name (the dotted names never match a word)
                    scalers |= targets
            self._scalers = scalers
        return self._scalers

    def screened_scaler_names(self) -> set[str]:
        """`scaler_names`, and the names imported from a module other than torch's, or read and never bound
        (`free_names`), that are used as a scaler is (`from state import scaler`; `scaler.scale(...)`): that
        module, or the modules importing this one, may build one, which the facts layer asks the project index
        (`ModuleView.module_binding`). The screen's set: the index's own facts keep to
        `scaler_names`, where an imported scheduler's `step()` must stay a plain step."""
        imported = {alias.asname or alias.name for node in self.import_nodes if type(node) is ast.ImportFrom
                    and (node.module or "").split(".")[0] != "torch" for alias in node.names}
        imported |= self.free_names()  # a name the modules importing this one bind (`scaler` set by `main.py`)
        return self.scaler_names() | {receiver for method in (vocab.SCALE, vocab.UNSCALE, vocab.STEP, vocab.UPDATE)
                                      for _, _, receiver, _, _ in self.call_sites_by_name.get(method, ())
                                      if receiver in imported}

    def free_names(self) -> set[str]:
        """The names the module calls (`loss_scaler(...)`) or calls a method of (`scaler.scale(...)`) and never
        binds: no assignment, loop or `with` target, parameter, def, class, import or `global` write of the name
        anywhere in it, and not a builtin. Python reads such a name from the module's globals, which a star import
        or another module sets (`import m; m.scaler = scaler`): the project index asks the star-imported modules,
        then the modules importing this one (`ModuleView.module_binding`, `ModuleView.resolve`). Empty when the
        module binds names at run time (`globals()`, `exec`)."""
        if self._free is None:
            self._free = set()
            if not (self.identifiers & _DYNAMIC_BINDERS):
                candidates = {receiver.split(".", 1)[0] if receiver else name
                              for name, sites in self.call_sites_by_name.items()
                              for _, _, receiver, _, _ in sites if receiver is None or receiver}
                taken = self.bound | self.module_bound | self.import_bound.keys() | set(self.function_names)
                self._free = {name for name in candidates - taken
                              if name not in _BUILTINS and not name.startswith("__")}
        return self._free

    def _optimizer_names(self) -> set[str]:
        """Dotted names the facts layer can take for an optimizer (`ModuleFacts.is_optimizer`, which knows one by
        use, never by its name): an argument of `step`/`unscale_` on something that can hold a scaler, a
        receiver of `zero_grad()` (with `param_groups` anywhere: every receiver of `step()`), or a name assigned
        a call to something that may build one (`may_build_optimizer`: a class, `torch.optim.AdamW`, `Lamb`, or
        a known optimizer factory)."""
        if self._optimizers is None:
            optimizers: set[str] = set()
            for method in (vocab.STEP, vocab.UNSCALE):
                for _, _, receiver, _, call in self.call_sites_by_name.get(method, ()):
                    if receiver and receiver in self.screened_scaler_names():
                        for argument in (*call.args, *(keyword.value for keyword in call.keywords)):
                            name = dotted(argument)
                            if name:
                                optimizers.add(name)
            # `x.zero_grad()` or `x.param_groups`: used the way an optimizer is (the facts layer's usage keys)
            optimizers.update(receiver for _, _, receiver, _, _ in self.call_sites_by_name.get(vocab.ZERO_GRAD, ())
                              if receiver)
            if vocab.PARAM_GROUPS in self.identifiers:
                optimizers.update(receiver for _, _, receiver, _, _ in self.call_sites_by_name.get(vocab.STEP, ())
                                  if receiver)
            for targets, value in self.assignments:
                if type(value) is ast.Call:
                    lasts = self._last_names(value)  # with what an import alias stands for
                    if any(may_build_optimizer(last) for last in lasts):
                        optimizers |= targets
            self._optimizers = optimizers
        return self._optimizers

    def sites(self, names: Iterable[str], on_scaler: bool = False, looped: bool = False):
        """(function, withs) of every call to one of the names (or an import alias); with `on_scaler`, only
        method calls whose receiver can hold a GradScaler; with `looped`, only calls in a loop's body."""
        for name in self._names_for(names):
            for function, withs, receiver, in_loop, _ in self.call_sites_by_name.get(name, ()):
                if on_scaler and not (receiver and receiver in self.screened_scaler_names()):
                    continue
                if looped and not in_loop:
                    continue
                yield function, withs

    def functions_calling_backward(self) -> set[int]:
        """Functions (ids; 0 for module level) whose body calls a method `backward`/`manual_backward`: the
        facts layer surely sees a backward there."""
        found = set()
        for name in (vocab.BACKWARD, vocab.MANUAL_BACKWARD):
            for function, _, receiver, _, _ in self.call_sites_by_name.get(name, ()):
                if receiver is not None:
                    found.add(id(function) if function is not None else 0)
        return found

    # questions -----------------------------------------------------------------------------------------
    def mentions(self, *names: str) -> bool:
        return self.ask(self.has_token(*names), lambda: any(name in self.identifiers for name in names))

    def calls(self, *names: str) -> bool:
        return self.ask(self.has_token(*names, kind="call"), lambda: any(name in self.call_sites_by_name for name in names))

    def calls_method(self, *names: str) -> bool:
        return self.ask(self.has_token(*names, kind="method"), lambda: any(name in self.methods for name in names))

    def calls_method_outside_functions(self, *names: str) -> bool:
        """A call `<expr>.name(...)` at module level or in a class body (not in a def's or lambda's body)."""
        return self.ask(self.has_token(*names, kind="method"),
                         lambda: any(name in self.module_methods for name in names))

    def calls_outside_functions(self, *names: str, on_scaler: bool = False) -> bool:
        """A call to one of the names (or an import alias) at module level or in a class body."""
        return self.ask(self.written_call(names), lambda: any(
            function is None for function, _ in self.sites(names, on_scaler)))

    def calls_in_same_function(self, names: Sequence[str], others: Sequence[str], on_scaler: bool = False) -> bool:
        """Calls to one of `names` (with `on_scaler`, methods of a scaler) and to one of `others` in the body of
        one function (or both outside every function)."""
        def exact() -> bool:
            functions = {id(function) for function, _ in self.sites(names, on_scaler)}
            return any(id(function) in functions for function, _ in self.sites(others))

        return self.ask(self.written_call(names) and self.written_call(others), exact)

    def calls_in_function_named(self, names: Sequence[str], pattern: re.Pattern[str], on_scaler: bool = False) -> bool:
        """A call to one of the names in the body of a `def` whose name `pattern` finds."""
        return self.ask(self.written_call(names) and self.defines_function(pattern), lambda: any(
            type(function) in FUNCTIONS and pattern.search(function.name)
            for function, _ in self.sites(names, on_scaler)))

    def calls_under(self, names: Sequence[str], contexts: Sequence[str], on_scaler: bool = False) -> bool:
        """A call to one of the names inside a with-statement (in the same function) one of whose items calls
        or names one of `contexts` (by its last name, or an import alias), or in a function decorated with
        one: `with torch.no_grad(): scaler.step(opt)`."""
        wanted = set(contexts)

        def exact() -> bool:
            for function, withs in self.sites(names, on_scaler):
                if any(self._last_names(item.context_expr) & wanted for node in withs for item in node.items):
                    return True
                if function is not None and any(self._last_names(decorator) & wanted
                                                for decorator in self._all_decorators.get(id(function), ())):
                    return True
            return False

        return self.ask(self.written_call(names) and self.has_token(*contexts), exact)

    def calls_in_loop(self, *names: str) -> bool:
        """A call to one of the names in a loop's body (in its function), or in a function that is called (by
        its name) in a loop's body."""
        def exact() -> bool:
            looped = {id(function) for function, _ in self.sites(names, looped=True)}
            if looped:
                return True
            callers_in_loops = {name for name in set(self.function_names) if any(self.sites((name,), looped=True))}
            return any(type(function) in FUNCTIONS and function.name in callers_in_loops
                       for function, _ in self.sites(names))

        return self.ask(self.written_call(names) and (self.has_token("for") or self.has_token("while")), exact)

    def written_call(self, names: Sequence[str]) -> bool:
        return self.has_token(*names, kind="call") or self.imports_name(*names)

    def imports_name(self, *names: str) -> bool:
        return self.ask(self.has_token(*names) and self.has_token("import"),
                         lambda: any(name in self.imported_names for name in names))

    def uses_api(self, *names: str) -> bool:
        return self.calls(*names) or self.imports_name(*names)

    def resolves(self, node: ast.AST, qualified: Collection[str]) -> bool:
        """Does this dotted expression name one of `qualified` through the file's imports (as the facts layer's
        ImportMap resolves it: the head bound by an import, the rest appended)? Every import of a name counts."""
        name = dotted(node)
        return name is not None and self._resolves_name(name, qualified)

    def _resolves_name(self, name: str, qualified: Collection[str]) -> bool:
        head, _, rest = name.partition(".")
        return any((f"{target}.{rest}" if rest else target) in qualified
                   for target in self.qualified_imports.get(head, ()))

    def api_calls(self, qualified: Collection[str]) -> Iterator[ast.Call]:
        for callee in self._names_for({name.rsplit(".", 1)[-1] for name in qualified}):  # import aliases too
            for *_, call in self.call_sites_by_name.get(callee, ()):
                if self.resolves(call.func, qualified):
                    yield call

    def calls_api(self, *qualified: str, partial: bool = False, decorator: bool = False) -> bool:
        """A call to one of these qualified names, resolved through the imports (`torch.cuda.amp.autocast` for
        `from torch.cuda import amp; amp.autocast()`); with `decorator`, also a bare decorator naming one;
        with `partial`, also a `functools.partial` of one."""
        lasts = {name.rsplit(".", 1)[-1] for name in qualified}

        def exact() -> bool:
            if any(self.api_calls(qualified)):
                return True
            if decorator and any(self._resolves_name(name, qualified) for name in self._bare_decorators):
                return True
            return partial and any(call.args and self.resolves(call.args[0], qualified)
                                   for call in self.api_calls(PARTIAL_API))

        return self.ask(self.has_token(*lasts), exact)

    def imports_module(self, name: str) -> bool:
        """Also for a star import of a module the vocabulary does not know (`from common import *`): it may bind
        the name (the facts layer asks the project what it binds)."""
        return self.ask(self.has_token(name) and self.has_token("import"),
                        lambda: name in self.imported_modules or self.star_unknown)

    def written_def_names(self) -> set[str]:
        """The names after `def` in the text (in comments and strings too): a superset of its functions' names."""
        if self._text_def_names is None:
            self._text_def_names = set(_DEF_NAME.findall(self.text)) if "def" in self.text else set()
        return self._text_def_names

    def defines_function(self, pattern: re.Pattern[str]) -> bool:
        written = any(pattern.search(name) for name in self.written_def_names())
        return self.ask(written, lambda: any(pattern.search(name) for name in self.function_names))

    def accelerator_named(self) -> bool:
        return self.ask(_ACCELERATOR.search(self.text) is not None,
                         lambda: any(name.lower().endswith(ACCELERATOR_NAMES) for name in self.identifiers))

    def regions_possible(self) -> bool:
        if not (self.mentions(vocab.AUTOCAST) and (self.imports_module("torch") or self.accelerator_named())):
            return False
        return self.ask(self.has_token("with") or "@" in self.text, lambda: any(
            self.with_can_open(node) for node, _, _ in self.withs) or any(
            self.can_open(d) for decorators in self.call_decorators.values() for d in decorators))

    def calls_in_region(self, *names: str, on_scaler: bool = False, on_stepper: bool = False) -> bool:
        """With `on_scaler`, only method calls on a receiver that can hold a GradScaler; with `on_stepper`, also
        on one that can hold an optimizer (`_optimizer_names`, a superset of the facts layer's `is_optimizer`: an
        argument of a scaler's step/unscale_, a receiver of `zero_grad()` or of `step()` where `param_groups`
        is read, or a name bound to a call of a class or optimizer factory; never a name alone)."""
        written = self.has_token(*names, kind="call") or self.imports_name(*names)
        receivers = None
        if on_scaler or on_stepper:
            def receivers(receiver: str | None) -> bool:
                return bool(receiver) and (receiver in self.screened_scaler_names() or (
                    on_stepper and receiver in self._optimizer_names()))
        return self.ask(written and (self.has_token("with") or "@" in self.text),
                         lambda: self._in_region_possible(names, receivers))

    def scaler_possible(self) -> bool:
        """Some object can be known as a GradScaler: one is constructed (a call resolving to a GradScaler), or
        something is used the way only a scaler is (`x.unscale_(...)`, `x.scale(loss).backward()`, all of
        `x.scale(...)`, `x.step(...)` and `x.update()`, `x.step(arg)` and `x.update()` in one function, or a
        name imported from a module other than torch's and used so: `scaler_names`)."""
        return ((self.imports_module("torch") and (
                    self.calls_api(*GRAD_SCALERS) if self.exact else self.has_token(*vocab.SCALER_CLASSES)))
                or self.calls_method(vocab.UNSCALE)
                or (self.calls_method(vocab.SCALE) and (self.calls_method(vocab.BACKWARD) or (
                    self.calls_method(vocab.STEP) and self.calls_method(vocab.UPDATE))))
                or ((self.calls_method(vocab.STEP) or self.calls_method(vocab.SCALE))
                    and self.ask(True, lambda: bool(self.screened_scaler_names()))))

    def backward_possible(self) -> bool:
        """A backward can run: `x.backward()`, or a call resolving to `torch.autograd.backward`/`grad`."""
        return self.uses_api(vocab.BACKWARD, vocab.GRAD)
