"""Where a value handed to a call comes from, as far as its function's code shows it: one definition, read by the
index for every call's arguments (`CallRecord.args`) and by the rules for a value of their own.

A value's *flow* says whether it went through a GradScaler's `scale(...)`:
- `SCALED` ("s"): some path into it calls `<x>.scale(...)` (`loss = scaler.scale(loss) if scaler else loss`
  counts: scaled on one path);
- `UNSCALED` ("u"): computed here (a call, arithmetic, a literal) from nothing scaled and from no parameter;
- "p:a,b": unscaled unless one of these parameters of the function is scaled: what the callers pass decides;
- None: not known (an attribute `self.loss` set elsewhere, a global, a loop or `with` target, a closure's name).

A call computes a new value (`criterion(out, y)`, `self.model(x)`, `F.mse_loss(...)`): scaled when it is handed
something scaled, unscaled otherwise; a builtin or torch function combining its arguments (`sum(losses)`,
`torch.stack(losses)`) carries their flows, a parameter's included. A method of a value of the
function keeps that value's flow (`loss.mean()`, `outputs.loss`, `losses["total"]`); arithmetic combines its
operands' (`loss / accumulation`).
"""

from __future__ import annotations

import ast

from amplint import vocabulary as vocab
from amplint.index.summary import dotted

SCALED = "s"
UNSCALED = "u"
PARAMS = "p:"
STARRED = "*"  # a call site with `*args`/`**kwargs`: which argument is which parameter is not known

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_UNKNOWN = object()  # a binding whose value is not an expression of the scope (a loop target, `with` target...)
_IMPORTED = object()  # a binding by an import: a module or what it defines, not a value of the scope
# Functions whose result is their tensor arguments combined (a scaled one stays scaled): builtins and torch's.
_COMBINING = frozenset({"sum", "mean", "stack", "cat", "concat", "add", "sub", "mul", "div", "true_divide", "max",
                        "min", "clone", "squeeze", "reshape", "nansum", "nanmean", "where"})
_DEPTH = 24  # names followed through one another
# Steps one argument's flow may take: names bound many times, each from others, branch at every step (a module of
# 3,000 lines took minutes); past this the flow is unknown, which makes no finding and no safe fix.
_STEPS = 2000


class _Exhausted(Exception):
    """The flow of one argument took more than `_STEPS` steps."""


def combine(flows) -> str | None:
    """The flow of a value made of these: scaled if any is, unknown if any is, else the parameters they carry."""
    params: set[str] = set()
    for flow in flows:
        if flow == SCALED:
            return SCALED
    for flow in flows:
        if flow is None:
            return None
        if flow.startswith(PARAMS):
            params.update(flow[len(PARAMS):].split(","))
    return PARAMS + ",".join(sorted(params)) if params else UNSCALED


def parameters_of(flow: str | None) -> list[str]:
    """The parameters a flow carries ("p:a,b" -> ["a", "b"])."""
    return flow[len(PARAMS):].split(",") if flow and flow.startswith(PARAMS) else []


def says_scale(node: ast.AST) -> bool:
    """Does the expression call a `.scale(...)` method anywhere (`scaler.scale(loss)`, `self.scaler.scale(l)`)?"""
    return any(type(n) is ast.Call and type(n.func) is ast.Attribute and n.func.attr == vocab.SCALE
               for n in ast.walk(node))


class Scope:
    """A function's (or a module's) bindings, for the flows of its values."""

    def __init__(self, node: ast.AST | None) -> None:
        self.params: set[str] = set()
        self.bindings: dict[str, list] = {}
        self.steps = 0
        self._names: dict[tuple[str, frozenset], str | None] = {}  # a name's flow, once per set of names visited
        if node is None:
            return
        if type(node) in (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda):
            arguments = node.args
            for argument in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs):
                self.params.add(argument.arg)
            for argument in (arguments.vararg, arguments.kwarg):
                if argument is not None:
                    self.bindings.setdefault(argument.arg, []).append(_UNKNOWN)  # a tuple/dict of what is passed
            body = node.body if type(node) is not ast.Lambda else [node.body]
        else:
            body = list(getattr(node, "body", []))
        pending = list(body)
        while pending:
            statement = pending.pop()
            kind = type(statement)
            if kind in _SCOPES:
                if kind is not ast.Lambda:
                    self._unknown(statement.name)
                continue
            if kind is ast.Assign:
                for target in statement.targets:
                    self._bind(target, statement.value)
            elif kind is ast.AnnAssign and statement.value is not None:
                self._bind(statement.target, statement.value)
            elif kind is ast.AugAssign:
                if type(statement.target) is ast.Name:
                    self._value(statement.target.id, ast.BinOp(ast.Name(statement.target.id, ast.Load()),
                                                                statement.op, statement.value))
            elif kind is ast.NamedExpr:
                self._bind(statement.target, statement.value)
            elif kind in (ast.For, ast.AsyncFor, ast.comprehension):
                self._bind(statement.target, None)
            elif kind in (ast.With, ast.AsyncWith):
                for item in statement.items:
                    if item.optional_vars is not None:
                        self._bind(item.optional_vars, None)
            elif kind is ast.ExceptHandler and statement.name:
                self._unknown(statement.name)
            elif kind in (ast.Import, ast.ImportFrom):
                for alias in statement.names:
                    self.bindings.setdefault((alias.asname or alias.name).split(".", 1)[0], []).append(_IMPORTED)
            elif kind in (ast.Global, ast.Nonlocal):
                for name in statement.names:
                    self._unknown(name)
            pending.extend(child for child in ast.iter_child_nodes(statement))

    def _unknown(self, name: str) -> None:
        self.bindings.setdefault(name, []).append(_UNKNOWN)

    def _value(self, name: str, value: ast.AST) -> None:
        self.bindings.setdefault(name, []).append(value)

    def _bind(self, target: ast.AST, value: ast.AST | None) -> None:
        kind = type(target)
        if kind is ast.Name:
            self._value(target.id, value) if value is not None else self._unknown(target.id)
        elif kind is ast.Attribute and _root(target) == "self":
            name = dotted(target)  # `self.loss = ...` in the method: what the method's later reads see
            if name is not None:
                self._value(name, value) if value is not None else self._unknown(name)
        elif kind in (ast.Tuple, ast.List):
            for element in target.elts:  # `loss, logs = compute(...)`: each holds part of the value
                self._bind(element, value)
        elif kind is ast.Starred:
            self._bind(target.value, value)
        # an attribute or a subscript target binds no name of the scope

    def flow_of(self, expr: ast.AST) -> str | None:
        """The flow of a value, or None (unknown) when finding it takes more than `_STEPS` steps."""
        self.steps = 0
        try:
            return self.flow(expr)
        except _Exhausted:
            return None

    def flow(self, expr: ast.AST, depth: int = 0, visiting: frozenset = frozenset()) -> str | None:
        if depth > _DEPTH:
            return None
        self.steps += 1
        if self.steps > _STEPS:
            raise _Exhausted
        if says_scale(expr):
            return SCALED
        kind = type(expr)
        if kind is ast.Name:
            return self._name(expr.id, depth, visiting)
        if kind is ast.Constant:
            return UNSCALED
        if kind is ast.Attribute and dotted(expr) in self.bindings:
            return combine([None if value is _UNKNOWN or value is _IMPORTED else self.flow(value, depth + 1, visiting)
                            for value in self.bindings[dotted(expr)]])
        if kind in (ast.Attribute, ast.Subscript):
            root = _root(expr)
            if root is None or root == "self" or not self._local(root):
                return None  # `self.loss` set in another method, a global's attribute: not in view
            return self.flow(expr.value, depth + 1, visiting)
        if kind is ast.Call:
            func = expr.func
            root = _root(func) if type(func) is ast.Attribute else None
            if root is not None and self._local(root) and root != "self":
                return self.flow(func.value, depth + 1, visiting)  # `loss.mean()`: the value's own method
            handed = [self.flow(a.value if type(a) is ast.Starred else a, depth + 1, visiting) for a in expr.args]
            handed += [self.flow(k.value, depth + 1, visiting) for k in expr.keywords]
            if SCALED in handed:
                return SCALED
            name = func.attr if type(func) is ast.Attribute else getattr(func, "id", None)
            if name in _COMBINING:  # `sum(losses)`, `torch.stack(losses).mean()`: the values handed, combined
                return combine(handed)
            return UNSCALED  # a new value (`criterion(out, y)`, `self.model(x)`) from nothing scaled
        if kind is ast.BinOp and type(expr.op) in (ast.Div, ast.FloorDiv):
            return self.flow(expr.left, depth + 1, visiting)  # `loss / accumulation`: the dividend's scale
        if kind is ast.BinOp:
            return combine([self.flow(expr.left, depth + 1, visiting), self.flow(expr.right, depth + 1, visiting)])
        if kind is ast.UnaryOp:
            return self.flow(expr.operand, depth + 1, visiting)
        if kind is ast.IfExp:
            return combine([self.flow(expr.body, depth + 1, visiting), self.flow(expr.orelse, depth + 1, visiting)])
        if kind in (ast.Tuple, ast.List):
            return combine([self.flow(e, depth + 1, visiting) for e in expr.elts])
        return None

    def _local(self, name: str) -> bool:
        """A value of the scope: a parameter or a name it binds (not only by imports)."""
        return name in self.params or any(value is not _IMPORTED for value in self.bindings.get(name, ()))

    def _name(self, name: str, depth: int, visiting: frozenset) -> str | None:
        own = [PARAMS + name] if name in self.params else []
        if name in visiting:
            return combine(own)  # `loss = loss / n`: the earlier values are the other bindings
        values = self.bindings.get(name)
        if not values:
            return own[0] if own else None  # a parameter never rebound; else a global, a builtin, a closure's
        key = (name, visiting)
        if key in self._names:
            return self._names[key]
        inner = visiting | {name}
        found = combine(own + [None if value is _UNKNOWN or value is _IMPORTED else self.flow(value, depth + 1, inner)
                               for value in values])
        self._names[key] = found
        return found


def _root(node: ast.AST) -> str | None:
    """The name an attribute/subscript/call chain starts from (`outputs.loss["x"]`: outputs)."""
    while type(node) in (ast.Attribute, ast.Subscript, ast.Call):
        node = node.func if type(node) is ast.Call else node.value
    return node.id if type(node) is ast.Name else None


def argument_flows(scope: Scope, call: ast.Call) -> tuple[str, ...]:
    """What a call site hands over: "<position>=<flow>" and "<keyword>=<flow>" for each argument whose flow is
    known, and `STARRED` when `*args`/`**kwargs` make the positions unknown."""
    found: list[str] = []
    for position, argument in enumerate(call.args):
        if type(argument) is ast.Starred:
            return (STARRED,)
        flow = scope.flow_of(argument)
        if flow is not None:
            found.append(f"{position}={flow}")
    for keyword in call.keywords:
        if keyword.arg is None:
            return (STARRED,)
        flow = scope.flow_of(keyword.value)
        if flow is not None:
            found.append(f"{keyword.arg}={flow}")
    return tuple(found)


def handed(args: tuple[str, ...], params: tuple[str, ...], param: str, bound: bool) -> str | None:
    """The flow a call site (`argument_flows`) hands to the parameter `param` of a function with these
    parameters (`bound`: called as a method of an object, its first parameter is that object). None when not
    known: not passed (its default), passed through `*args`, or of unknown flow."""
    if STARRED in args or param not in params:
        return None
    index = params.index(param) - (1 if bound else 0)
    for item in args:
        slot, _, flow = item.partition("=")
        if slot == param or (slot.isdigit() and int(slot) == index):
            return flow
    return None


def parameter_flow(view, target, param: str, depth: int = 3) -> tuple[str | None, int]:
    """(flow, number of call sites) of what the project's callers of the function `target` hand to its
    parameter `param`, every call site the index resolves to it (`ModuleView.callers`), following callers'
    own parameters `depth` callers up. SCALED when one hands something scaled; UNSCALED when each of at least one
    hands something unscaled; None when no caller is seen or one is not known (a caller the index cannot see,
    a callback, `functools.partial`, may pass anything: what is seen is all that is known)."""
    summary = view.function(target)
    if summary is None or param not in summary.params:
        return None, 0
    flows: list[str | None] = []
    sites = 0
    for site in view.callers(target):
        sites += 1
        bound = "." in target.qualname and _bound(site.call.callee, target.qualname)
        flow = handed(site.call.args, summary.params, param, bound)
        inner = parameters_of(flow)
        if inner:
            flow = combine([parameter_flow(view, site.caller, name, depth - 1)[0] if depth > 0 else None
                            for name in inner] + [UNSCALED])
        flows.append(flow)
        if flow == SCALED:
            return SCALED, sites
    if not flows:
        return None, 0
    return combine(flows), sites


def _bound(callee: str, qualname: str) -> bool:
    """Is a method called on an object (`self.f(x)`, `trainer.f(x)`, `obj(x)` for `__call__`), its first
    parameter that object? Not when called through its class (`Trainer.f(trainer, x)`)."""
    owner = qualname.rsplit(".", 2)[-2]
    head, _, _ = callee.rpartition(".")
    return head.rsplit(".", 1)[-1] != owner


class Located:
    """A module's tree, to find the flow of the receiver of a method call written at a place of its text (the
    rules' libcst nodes name places; the flow is read from the `ast` tree, as the index reads callers')."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        try:
            self.tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
            self.tree = None
        self._scopes: dict[int, Scope] = {}

    def receiver_flow(self, line: int, column: int) -> str | None:
        """The flow of `x` in the call `x.method(...)` starting at (line, column in characters); None if absent."""
        if self.tree is None or not 0 < line <= len(self.lines):
            return None
        offset = len(self.lines[line - 1][:column].encode())  # ast's columns count UTF-8 bytes
        pending: list[tuple[ast.AST, ast.AST | None]] = [(self.tree, None)]
        while pending:
            node, function = pending.pop()
            if type(node) is ast.Call and node.lineno == line and node.col_offset == offset \
                    and type(node.func) is ast.Attribute:
                key = id(function)
                if key not in self._scopes:
                    self._scopes[key] = Scope(function if function is not None else self.tree)
                return self._scopes[key].flow_of(node.func.value)
            inner = node if type(node) in (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda) else function
            for child in ast.iter_child_nodes(node):
                end = getattr(child, "end_lineno", None)
                if end is None or (child.lineno <= line <= end):
                    pending.append((child, inner))
        return None
