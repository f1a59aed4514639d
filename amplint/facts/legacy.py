"""Where a module names a deprecated AMP API (`torch.cuda.amp.autocast`, `torch.cpu.amp.GradScaler`...), and in
what role: called, a decorator, wrapped in `functools.partial`, referenced (`isinstance`, an annotation, a base
class), bound to a name the module calls through (an alias), or star-imported; and which of those sit in a
compatibility shim for old torch versions (`try: <torch.amp> except ImportError: <legacy>`, `if hasattr(...)`);
which of them warn (`Site.warns`, `Scan.warned_sites`, `Scan.warned_names`, `Scan.called_star_imports`).
Read from the code, never from comments. The table of deprecated spellings is the vocabulary's
(`vocabulary.DEPRECATIONS`); the rule AMP007 reads these facts, and its migration (amplint/rules/migrate.py) too.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from amplint import vocabulary as vocab
from amplint.facts.names import DEPRECATED_AMP, DEPRECATED_AMP_MODULES, PARTIAL, ImportBinding, code_words, \
    dotted_name
from amplint.facts.walk import walk
from amplint.index.summary import dotted
from amplint.lazy import libcst as cst, visitor_class

if TYPE_CHECKING:
    from amplint.facts.module import ModuleFacts

LEGACY_NAMES = tuple(dict.fromkeys(row.new_name for row in vocab.DEPRECATIONS))  # the AMP names the legacy modules hold
# Words of an `if` test (names, strings, numbers: `code_words`) that make its branches a deliberate
# compatibility shim for old torch versions.
COMPAT_TEST = re.compile(r"hasattr|version|torch\.amp|\d+_\d+|\d+\.\d+")
# Handlers of a `try: <new spelling> except ...: <old spelling>` shim (a bare `except:` too).
COMPAT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "AttributeError", "TypeError", "Exception"})
CALLED = ("call", "decorator", "partial", "value")  # the roles of a site that warn (a value where it is called)
TYPE_TESTS = frozenset({"isinstance", "issubclass"})  # calls whose arguments name a type, not a value handed on
# Builtins that only look at what they are given: a legacy class passed to one is not called there.
INSPECTS = frozenset({"print", "getattr", "hasattr", "setattr", "id", "repr", "str", "type", "vars", "dir",
                      "callable", "hash", "format", "len"})


def called_behind_a_name(summary) -> bool:
    """The screen's question for what `legacy_aliases` and the star imports report: a call through a name that an
    assignment binds to a legacy API or module (either branch of `a if test else b`), or a bare call of an AMP
    name with a legacy module star-imported. A bare decorator through such a name is looked for in the text
    (`@name`): more files kept, none dropped."""
    legacy = (*DEPRECATED_AMP, *DEPRECATED_AMP_MODULES)

    def exact() -> bool:
        starred = set(LEGACY_NAMES) if summary.imported_modules & set(DEPRECATED_AMP_MODULES) else set()
        called = set(starred)  # names whose call may reach a legacy API
        for targets, value in summary.assignments:
            branches = [value]
            while branches:
                branch = branches.pop()
                if type(branch) is ast.IfExp:
                    branches += [branch.body, branch.orelse]
                elif summary.resolves(branch, legacy) or dotted(branch) in starred:
                    called |= targets
        for sites in summary.call_sites_by_name.values():
            for _, _, receiver, _, call in sites:
                if dotted(call.func) in called or receiver in called:
                    return True
                if any(dotted(arg) in called for arg in call.args) \
                        or any(dotted(keyword.value) in called for keyword in call.keywords):
                    return True  # handed on to a function that may call it
        return any(f"@{name}" in summary.text for name in called)

    return summary.ask(summary.has_token(vocab.AMP) and summary.has_token("cuda", "cpu"), exact)


def used_as_value(summary) -> bool:
    """The screen's question for a deprecated class or function handed on as a value (`register()(GradScaler)`,
    `{"cuda": torch.cuda.amp.GradScaler}`, `self.scaler_cls = ...`, `return ...`): a name of the table that the
    imports resolve, anywhere in the tree but a `Load` of a call's function (those are `calls_api`'s)."""
    legacy = tuple(DEPRECATED_AMP)

    def exact() -> bool:
        for node in ast.walk(summary.tree):
            if isinstance(node, (ast.Call, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.Assign, ast.Return,
                                 ast.IfExp, ast.BoolOp)):
                children = [*ast.iter_child_nodes(node), *(k.value for k in getattr(node, "keywords", ()))]
                for child in children:
                    if isinstance(child, (ast.Name, ast.Attribute)) and not (
                            isinstance(node, ast.Call) and child is node.func) and summary.resolves(child, legacy):
                        return True
        return False

    return summary.ask(summary.has_token(*LEGACY_NAMES), exact)


@dataclass(eq=False)
class Site:
    # "call" | "decorator" | "partial" | "reference" | "base" (a class's base) | "alias" (see Alias) | "value" (handed
    # on: an argument, in a collection or a registry, returned; called elsewhere)
    kind: str
    node: cst.CSTNode  # the Call (call, partial), the decorator expression, or the reference expression
    reference: cst.BaseExpression  # the dotted expression that names the deprecated API
    qualified: str
    head: str
    skip: bool = False  # inside a compatibility shim, or the name is ambiguous

    @property
    def report(self) -> cst.CSTNode:
        return self.reference if self.kind in ("partial", "reference", "value") else self.node

    @property
    def row(self) -> vocab.Deprecated:
        """The vocabulary's row of the deprecated API it names: replacement, device, legacy signature."""
        return vocab.DEPRECATED_BY_SPELLING[self.qualified]

    @property
    def warns(self) -> bool:
        """Does this use warn: a call, a decorator, a partial or a value handed on to be called (a reference, a base
        class or an alias's value warns nothing here), outside a shim and not through an ambiguous name?"""
        return not self.skip and self.kind in CALLED


@dataclass(eq=False)
class Alias:
    """A name an assignment binds to a legacy API or module (`autocast = torch.cuda.amp.autocast if amp else
    contextlib.suppress`, `amp_mod = torch.cuda.amp`), with the calls that go through it: each warns."""

    reference: cst.BaseExpression  # where the legacy spelling is written: the value, or a branch of it
    target: str  # the name bound
    qualified: str  # what the reference names: a key of DEPRECATED_AMP, or of DEPRECATED_AMP_MODULES
    uses: list[tuple[cst.CSTNode, str]]  # (a call or decorator through the name, the legacy API it reaches)
    site: "Site | None"  # the reference's site, for an API (a module has none)
    shimmed: bool  # inside a compatibility shim
    assignment: object  # the Assignment that binds it

    @property
    def head(self) -> str:
        """The name the legacy spelling starts from (`torch` in `torch.cuda.amp`)."""
        return (dotted_name(self.reference) or "").split(".", 1)[0]

    def skipped(self, plan: object) -> bool:
        """Inside a compatibility shim, or naming a legacy object through an ambiguous name (as its site)."""
        if self.site is not None:
            return self.site.skip
        return self.shimmed or self.head in plan.ambiguous


def _branches(value: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The expressions an assignment's value may evaluate to: both branches of `a if test else b`."""
    if isinstance(value, cst.IfExp):
        return _branches(value.body) + _branches(value.orelse)
    return [value]


def legacy_aliases(facts: ModuleFacts, scan: "Scan") -> list[Alias]:
    """Names bound by an assignment to a legacy API or module, and called through (an alias never called warns
    nothing: silent). Their reference sites become "alias" sites, which no migration rewrites: a call through
    the name passes the legacy arguments (`autocast()`, `Scaler(2.0**14)`), which the new signature reads
    otherwise."""
    sites = {id(site.reference): site for site in scan.sites}
    aliases = []
    for assignment in facts.assignments:
        if len(assignment.targets) != 1:
            continue
        target = assignment.targets[0]
        for branch in _branches(assignment.value):
            qualified = facts.imports.qualify(branch)
            site = sites.get(id(branch))
            if site is None and id(branch) not in scan.module_references:
                continue
            uses = _uses_of(facts, assignment, target, qualified)
            if not uses:
                continue
            if site is not None:
                site.kind = "alias"
            aliases.append(Alias(branch, target, qualified, uses, site, scan.module_references.get(id(branch), False),
                                  assignment))
    return aliases


def _uses_of(facts: ModuleFacts, assignment, target: str, qualified: str) -> list[tuple[cst.CSTNode, str]]:
    """The calls (and bare decorators) that reach a legacy API through the name `target` bound by
    `assignment`: `target(...)` for an API, `target.autocast(...)` for a module."""
    def reached(dotted: str | None) -> str | None:
        if dotted == target and qualified in DEPRECATED_AMP:
            return qualified
        if dotted is not None and qualified in DEPRECATED_AMP_MODULES and dotted.startswith(f"{target}."):
            api = f"{qualified}.{dotted[len(target) + 1:]}"
            return api if api in DEPRECATED_AMP else None
        return None

    def bound_here(frame) -> bool:
        return any(binding is assignment for binding in facts.bindings(target, frame))

    uses = []
    for call in facts.calls:
        api = reached(call.dotted)
        if api is not None and bound_here(call.frame):
            uses.append((call.node, api))
        elif qualified in DEPRECATED_AMP and bound_here(call.frame) and _hands_on(facts, call, target):
            uses.append((call.node, qualified))  # `train(..., amp_autocast=amp_ctx)` calls `amp_autocast()`
    for function in facts.functions:
        for decorator in function.decorators:
            api = reached(dotted_name(decorator.decorator))
            if api is not None and bound_here(function.frame.parent):
                uses.append((decorator.decorator, api))
    return uses


def _hands_on(facts: ModuleFacts, call, target: str) -> bool:
    """Does the call pass the name `target` (by position or keyword) to a function, of this module or another
    (through the project index), that calls the parameter receiving it (`with amp_autocast():`)?"""
    passed = [(position, arg.keyword.value if arg.keyword is not None else None)
              for position, arg in enumerate(call.node.args) if dotted_name(arg.value) == target and not arg.star]
    if not passed or call.dotted is None or (call.qualified or "").startswith("torch."):
        return False
    return _callee_calls(facts, call, passed) is True


def _callee_calls(facts: ModuleFacts, call, passed: list[tuple[int, str | None]]) -> bool | None:
    """Does the function a call reaches (of this module or another, through the project index) call a parameter
    receiving one of the `passed` arguments (position, keyword)? None where the callee is not a project
    function (a library's, or a value computed at run time: `register()(cls)`)."""
    if call.dotted is None:
        return None
    view = facts.project
    info = facts.function_info(call.frame)
    found = view.resolve(info.qualname if info else None, call.dotted)
    summary = view.function(found) if found is not None else None
    if summary is None:
        return None
    params = list(summary.params)
    if call.method is not None and params and "." in summary.qualname:
        params = params[1:]  # a method called on its object: the first parameter is the object
    called = {record.callee for record in summary.calls}
    for position, keyword in passed:
        name = keyword if keyword is not None else (params[position] if position < len(params) else None)
        if name is not None and name in summary.params and name in called:
            return True
    return False



def _compat_test(test: cst.BaseExpression) -> bool:
    """Does an `if` test name a version, `hasattr` or `torch.amp` (in its code: a comment says nothing)?"""
    return any(COMPAT_TEST.search(word) for word in code_words(test))


def _compat_try(node: cst.Try) -> bool:
    """Does the body import (a statement, `importlib.import_module`, `__import__`) or name `torch.amp`, and a
    handler catch an import or attribute error (or everything)? Read from the code: a comment is no import."""
    imports = any(isinstance(s, (cst.Import, cst.ImportFrom)) for s in _small_statements(node.body)) or any(
        "import" in word or vocab.TORCH_AMP in word for word in code_words(node.body))
    return imports and any(
        handler.type is None or {word.rsplit(".", 1)[-1] for word in code_words(handler.type)} & COMPAT_ERRORS
        for handler in node.handlers)


def _small_statements(block: cst.BaseSuite) -> Iterator[cst.CSTNode]:
    """The simple statements of a block and of the blocks inside it."""
    pending = [block]
    while pending:
        current = pending.pop()
        if isinstance(current, cst.BaseSmallStatement):
            yield current
        elif not isinstance(current, cst.BaseExpression):
            pending.extend(current.children)


class Scan:  # a libcst visitor once made one with amplint.lazy.visitor_class
    """References to deprecated AMP names (with their role), the imports that sit in compatibility shims, and
    name loads, in one walk. What each import binds is the facts layer's (`facts.imports`); this walk only adds,
    per name, its bindings in source order and whether a shim guards them."""

    def __init__(self, facts: ModuleFacts) -> None:
        super().__init__()
        self.facts = facts
        self.bindings: dict[str, list[ImportBinding]] = {}
        self.guarded: set[int] = set()  # ids of the import statements inside a compatibility shim
        self._by_statement: dict[int, list[ImportBinding]] = {}
        for records in facts.imports.records.values():
            for record in records:
                self._by_statement.setdefault(id(record.statement), []).append(record)
        self.sites: list[Site] = []
        self.decorator_calls: set[int] = set()  # ids of the calls written as a decorator (`@custom_fwd(...)`)
        self.import_sites: list[tuple[cst.ImportFrom, list[str]]] = []
        self.star_sites: list[tuple[cst.ImportFrom, list[str]]] = []  # (star import, deprecated names it binds)
        self.module_references: dict[int, bool] = {}  # id of a name of a legacy module -> inside a shim
        self.imported_as: dict[tuple[int, str], str] = {}
        self.qualified_of: dict[tuple[int, str], str] = {}
        self.loads: dict[str, int] = {}  # local name -> how many times it is read (outside imports)
        self.consumed: set[int] = set()
        # ids of expressions whose value is handed on (an argument, an element of a collection, a dict's value,
        # stored in an attribute or a subscript, returned): a legacy class or function there is called elsewhere
        self.values: set[int] = set()
        self.type_tests: set[int] = set()  # ids of `isinstance`/`issubclass` arguments: a type, not a value
        # id of a call's argument -> (the call, its position, its keyword); a collection bound to a plain name ->
        # the name (its values are handed on where the module reads the name)
        self.arguments: dict[int, tuple[cst.Call, int, str | None]] = {}
        self.stored: dict[int, str] = {}
        self.guards: list[bool] = []
        self.in_bases = False
        self.scope_depth = 0
        self.quotes = {'"': 0, "'": 0}

    # scopes and guards ------------------------------------------------------------------------------
    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        for decorator in node.decorators:
            walk(decorator, self)
        walk(node.params, self)
        if node.returns is not None:
            walk(node.returns, self)
        self.scope_depth += 1
        walk(node.body, self)
        self.scope_depth -= 1
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        for decorator in node.decorators:
            walk(decorator, self)
        self.in_bases = True  # `class MyScaler(GradScaler)`: the new base class has another signature
        for arg in node.bases:
            walk(arg, self)
        self.in_bases = False
        self.scope_depth += 1
        walk(node.body, self)
        self.scope_depth -= 1
        return False

    def visit_Param(self, node: cst.Param) -> bool:
        if node.annotation is not None:
            walk(node.annotation, self)
        if node.default is not None:
            walk(node.default, self)
        return False

    def visit_If(self, node: cst.If) -> None:
        self.guards.append(_compat_test(node.test))

    def leave_If(self, node: cst.If) -> None:
        self.guards.pop()

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> bool:
        self._statements(node.body)
        return False

    def visit_Module(self, node: cst.Module) -> bool:
        self._statements(node.body)
        return False

    def _statements(self, statements) -> None:
        """After `if <new torch>: return ...`, the rest of the block is the old-torch fallback."""
        pushed = 0
        for statement in statements:
            walk(statement, self)
            if isinstance(statement, cst.If) and _compat_test(statement.test) \
                    and isinstance(statement.body, cst.IndentedBlock) and statement.body.body:
                last = statement.body.body[-1]
                if isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], (cst.Return, cst.Raise)):
                    self.guards.append(True)
                    pushed += 1
        del self.guards[len(self.guards) - pushed:]

    def visit_Try(self, node: cst.Try) -> None:
        """`try: <torch.amp spelling or an import> except ImportError/AttributeError: <legacy>` is a shim."""
        self.guards.append(_compat_try(node))

    def leave_Try(self, node: cst.Try) -> None:
        self.guards.pop()

    @property
    def guard_depth(self) -> int:
        return sum(self.guards)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        quote = node.quote[-1:]
        if quote in self.quotes:
            self.quotes[quote] += 1

    # imports ----------------------------------------------------------------------------------------
    def _bind(self, node: cst.Import | cst.ImportFrom) -> list[ImportBinding]:
        """The bindings of one import statement (from the facts layer), noted in source order."""
        if self.guard_depth:
            self.guarded.add(id(node))
        records = self._by_statement.get(id(node), [])
        for record in records:
            self.bindings.setdefault(record.local, []).append(record)
        return records

    def visit_Import(self, node: cst.Import) -> bool:
        self._bind(node)
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        deprecated = []
        for record in self._bind(node):
            if record.qualified in DEPRECATED_AMP and not self.guard_depth:
                deprecated.append(record.local)
                self.qualified_of[(id(node), record.local)] = record.qualified
                if record.alias is None:
                    continue  # a star import's name: reported with its statement
                name = dotted_name(record.alias.name)
                self.imported_as[(id(node), record.local)] = name if record.local == name else \
                    f"{name} as {record.local}"
        if deprecated:
            sites = self.star_sites if isinstance(node.names, cst.ImportStar) else self.import_sites
            sites.append((node, deprecated))
        return False

    # references -------------------------------------------------------------------------------------
    def _deprecated(self, node: cst.CSTNode) -> str | None:
        qualified = self.facts.imports.qualify(node)
        return qualified if qualified in DEPRECATED_AMP else None

    def _site(self, kind: str, node: cst.CSTNode, reference: cst.BaseExpression, qualified: str) -> None:
        self.consumed.add(id(reference))
        if kind == "reference" and self.in_bases:
            kind = "base"
        head = (dotted_name(reference) or "").split(".", 1)[0]
        self.sites.append(Site(kind, node, reference, qualified, head, skip=self.guard_depth > 0))

    def visit_Decorator(self, node: cst.Decorator) -> None:
        expr = node.decorator
        if isinstance(expr, cst.Call):
            self.decorator_calls.add(id(expr))
        if isinstance(expr, (cst.Name, cst.Attribute)):
            qualified = self._deprecated(expr)
            if qualified is not None:
                self._site("decorator", expr, expr, qualified)

    def visit_Call(self, node: cst.Call) -> None:
        qualified = self._deprecated(node.func)
        if qualified is not None:
            self._site("call", node, node.func, qualified)
            return
        if self.facts.imports.qualify(node.func) in PARTIAL and node.args and node.args[0].keyword is None:
            first = node.args[0].value
            qualified = self._deprecated(first)
            if qualified is not None:
                self._site("partial", node, first, qualified)
        tested = dotted_name(node.func) in TYPE_TESTS
        for position, arg in enumerate(node.args):
            (self.type_tests if tested else self.values).add(id(arg.value))
            if not tested:
                self.arguments[id(arg.value)] = (node, position, arg.keyword.value if arg.keyword else None)

    def _hand_on(self, container: cst.CSTNode, *values: cst.CSTNode) -> None:
        """The values of a collection (or the branches of `a if t else b`) are handed on where it is."""
        for into in (self.values, self.type_tests):
            if id(container) in into:
                into.update(id(value) for value in values)
        if id(container) in self.stored:
            self.stored.update((id(value), self.stored[id(container)]) for value in values)

    def visit_Tuple(self, node: cst.Tuple) -> None:
        self._hand_on(node, *(element.value for element in node.elements))

    visit_List = visit_Set = visit_Tuple

    def visit_Dict(self, node: cst.Dict) -> None:
        self._hand_on(node, *(element.value for element in node.elements if isinstance(element, cst.DictElement)))

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._hand_on(node, node.body, node.orelse)

    def visit_BooleanOperation(self, node: cst.BooleanOperation) -> None:
        self._hand_on(node, node.left, node.right)

    def visit_Assign(self, node: cst.Assign) -> None:
        if any(isinstance(target.target, (cst.Attribute, cst.Subscript)) for target in node.targets):
            self.values.add(id(node.value))  # `REGISTRY["cuda"] = ...`, `self.scaler_class = ...`
        elif len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name) and \
                isinstance(node.value, (cst.Dict, cst.List, cst.Tuple, cst.Set)):
            self.stored[id(node.value)] = node.targets[0].target.value  # `SCALERS = {"cuda": ...}`

    def visit_Return(self, node: cst.Return) -> None:
        if node.value is not None:
            self.values.add(id(node.value))

    def visit_Arg(self, node: cst.Arg) -> bool:
        walk(node.value, self)
        return False

    def _reference(self, node: cst.Attribute | cst.Name) -> None:
        if id(node) in self.consumed:
            return
        qualified = self.facts.imports.qualify(node)
        if qualified in DEPRECATED_AMP:
            value = (id(node) in self.values or id(node) in self.stored) and id(node) not in self.type_tests
            self._site("value" if value else "reference", node, node, qualified)
        elif qualified in DEPRECATED_AMP_MODULES:
            self.module_references[id(node)] = self.guard_depth > 0

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        self._reference(node)
        walk(node.value, self)
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self.loads[node.value] = self.loads.get(node.value, 0) + 1
        self._reference(node)

    # answers (after `legacy_aliases` and the migration's marks of ambiguous names) ------------------------------
    @property
    def found(self) -> bool:
        """Does the module name a deprecated API or module at all (a site, an import, a star import)?"""
        return bool(self.sites or self.import_sites or self.star_sites or self.module_references)

    def star_bound(self) -> set[str]:
        """The names some star import binds (`from torch.cuda.amp import *`)."""
        return {name for name, bindings in self.bindings.items() if any(b.alias is None for b in bindings)}

    def warned_sites(self) -> list[Site]:
        """The sites reported where they are: references (isinstance, annotations, base classes) warn nothing by
        themselves, and aliases and names from a star import are reported where the legacy spelling is written."""
        starred = self.star_bound()
        return [site for site in self.sites if site.warns and site.head not in starred]

    def warned_names(self, aliases: list[Alias]) -> set[str]:
        """The names whose use warns: called or handed on, or the head of an alias called through."""
        return {site.head for site in self.sites if site.warns} | {alias.head for alias in aliases}

    def called_star_imports(self) -> Iterator[tuple[cst.ImportFrom, list[str], list[cst.CSTNode]]]:
        """Each star import with the deprecated names it binds that the module calls, and those calls in source
        order (a star import whose names are never called warns nothing)."""
        for statement, names in self.star_sites:
            uses = {name: [site for site in self.sites if site.head == name and site.warns] for name in names}
            names = [name for name in names if uses[name]]
            if names:
                yield statement, names, sorted((site.node for name in names for site in uses[name]),
                                               key=self.facts.line_of)


def scan_module(facts: ModuleFacts) -> Scan:
    """One walk of the module: its references to deprecated AMP names, its imports and shims (`Scan`). A legacy
    class or function is a "value" where the code hands it on to be called elsewhere: an argument of a call
    (unless the callee is a project function that never calls the parameter receiving it, or a builtin that only
    inspects it), returned, stored in an attribute or a subscript (a registry), or in a collection that is itself
    handed on or bound to a name the module reads."""
    scan = visitor_class(Scan)(facts)
    walk(facts.module, scan)
    calls = {id(call.node): call for call in facts.calls}
    for site in scan.sites:
        if site.kind != "value":
            continue
        name = scan.stored.get(id(site.node))
        if name is not None and id(site.node) not in scan.values and scan.loads.get(name, 0) <= 1:
            site.kind = "reference"  # a collection under a name nothing reads (its one load is the target)
            continue
        argument = scan.arguments.get(id(site.node))
        if argument is None:
            continue
        node, position, keyword = argument
        call = calls.get(id(node))
        if dotted_name(node.func) in INSPECTS or (
                call is not None and _callee_calls(facts, call, [(position, keyword)]) is False):
            site.kind = "reference"  # inspected, or handed to a project function that never calls it
    return scan
