"""What shows that code evaluates rather than trains, from what it does (never from its names): a function
calls `.eval()` or opens no_grad / inference_mode, runs no backward (itself, in nested code, or behind a call a
few calls deep, of this module or, through the project index, another), or is called by a script that calls
`.eval()`; and how a function's names are read (a scaler only built and called, never handed on; a scaled value
read only as data that reaches no backward: sampled into integer token ids, printed, returned to nobody). From
these: is a GradScaler built or used where no backward can run, and what shows it (`Evaluates`)? And the screen's
questions about functions without backward, read from the file's `Summary`."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from enum import Enum, auto
from functools import cached_property
from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import calls
from amplint import vocabulary as vocab
from amplint.vocabulary import Effect
from amplint.facts.model import Event, Frame, FrameKind
from amplint.facts.module import ModuleFacts
from amplint.index.summary import FUNCTIONS

# A function's name is never evidence (what the code does is): the screen asks about functions by what they call.
NO_NAME = re.compile(r"(?!)")  # in `in_function_without_backward`: no name counts, only what the function calls
ANY_NAME = re.compile("")
# Builtins that read a function's local names without naming them: a scaler they may hand on is not left alone.
READS_EVERY_LOCAL = frozenset({"locals", "vars", "dir", vocab.EVAL, "exec"})  # `dir()`: the local names
MAX_CALLEES = 4  # how many same-module calls deep a backward behind a call is looked for
# Calls whose result is integer (indices, counts, booleans) whatever the loss scale of their input: a scaled value
# read only on its way to one of them reaches no backward.
INTEGER_RESULTS = vocab.INTEGER_OPS | {"multinomial"}


def module_without_backward(summary) -> bool:
    """The screen's question: no method call `.backward()`/`.manual_backward()` anywhere (from the text alone:
    always True)."""
    return summary.ask(True, lambda: not summary.functions_calling_backward())


def in_function_without_backward(summary, names, pattern, calling=(), on_scaler: bool = False) -> bool:
    """The screen's question: a call to one of the names in the body of a `def` that calls no method
    `backward`/`manual_backward` and whose name `pattern` finds or that calls one of `calling`."""
    def exact() -> bool:
        with_backward = summary.functions_calling_backward()  # ids of functions (0: module level)
        calling_functions = {id(function) for function, _ in summary.sites(calling)} if calling else set()
        return any(type(function) in FUNCTIONS and id(function) not in with_backward
                   and (pattern.search(function.name) or id(function) in calling_functions)
                   for function, _ in summary.sites(names, on_scaler))

    return summary.ask(summary.written_call(names) and (summary.defines_function(pattern)
                                                        or summary.written_call(calling)), exact)


class How(Enum):
    """What shows that code evaluates (see `Evaluates`)."""

    UNDER = auto()  # it runs under a no_grad/inference_mode/set_grad_enabled(False): the `opener`
    CALLS_EVAL = auto()  # its function calls `.eval()`
    OPENS = auto()  # its function opens the `opener` somewhere in its code (a construction may come before it)
    DATA = auto()  # its scaled value is read only as data that reaches no backward (`only_data`)
    SCRIPT = auto()  # its function is called by a script that calls `.eval()` (`evaluation_script`)
    NO_BACKWARD = auto()  # it is module-level code of a module that runs no backward


@dataclass(frozen=True)
class Evaluates:
    """What shows that the code of a scaler event evaluates: `how`, in `function` (None: module-level code), with
    the no_grad/inference_mode/set_grad_enabled(False) it is about (`opener`: for `UNDER` and `OPENS`)."""

    how: How
    function: Frame | None
    opener: cst.CSTNode | None = None


@dataclass
class Kept:
    """A construction whose scaler stays where it is built: `name` (None for a bare `GradScaler()` statement) is
    read only to call its methods (`unread`: not at all); `removable`: the statement is `name = GradScaler(...)`
    (or the bare call) with arguments whose evaluation does nothing, and the name is never read."""

    name: str | None
    unread: bool
    removable: bool


class EvaluationQueries:
    """What is asked about the function of each scaler event, read once per module or per function: which
    functions call `.eval()` or open no_grad, which run a backward (themselves, in nested code, or behind a call),
    and how the names of a function's code are read (the scaler constructions of each function are
    `ModuleFacts.scaler_builds_by_function`). So N scaler events cost N lookups, not N scans of the module or of
    their function."""

    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self._names: dict[int, Counter[str]] = {}
        self._reads: dict[int, _Reads] = {}
        self._statements: dict[int, tuple[dict[str, list[cst.CSTNode]], set[str]]] = {}
        self._backward: dict[int, bool] = {}
        self._module_backward: dict[str | None, bool] = {}

    @cached_property
    def _calling_eval(self) -> set[int]:
        return {id(c.frame.function()) for c in self.facts.calls
                if c.method == vocab.EVAL and calls.effect(self.facts.shape(c.node)) == Effect.EVAL}

    def calls_eval(self, function: Frame | None) -> bool:
        """Does the function's own code (None: the module's) call `x.eval()`?"""
        return id(function) in self._calling_eval

    @cached_property
    def _withs_by_function(self) -> dict[int, list[Frame]]:
        grouped: dict[int, list[Frame]] = {}
        for frame in self.facts.with_frames.values():
            grouped.setdefault(id(frame.function()), []).append(frame)
        return grouped

    def grad_off_opener(self, function: Frame | None) -> cst.CSTNode | None:
        """The first no_grad/inference_mode/set_grad_enabled(False) the function (None: module-level code) opens:
        its decorator, or a with-statement anywhere in its own code."""
        if function is not None:
            opener = self.facts.no_grad_opener(function)
            if opener is not None:
                return opener
        for frame in self._withs_by_function.get(id(function), ()):
            opener = self.facts.no_grad_opener(frame)
            if opener is not None and any(opener is item.item for item in frame.node.items):
                return opener
        return None

    # evidence ------------------------------------------------------------------------------------------------
    def built_for_nothing(self, event: Event) -> tuple[Kept, Evaluates] | None:
        """A GradScaler construction where no backward runs and that stays where it is built (`kept_here`), with
        what shows that the code building it evaluates; None otherwise (a class attribute: every instance may
        read it; a construction in a lambda).

        Facts of what the code does decide: it runs under no_grad/inference_mode, its function calls `.eval()` or
        opens no_grad/inference_mode anywhere (the construction may come before the block), or a script calling
        `.eval()` calls it. At module level, the module and the functions reading the scaler run no backward."""
        function = event.frame.function()
        if function is None and any(frame.kind is FrameKind.CLASS for frame in event.frame.ancestors()):
            return None
        if function is not None and not isinstance(function.node, cst.FunctionDef):
            return None
        kept = self.kept_here(event)
        if kept is None:
            return None
        if function is None:
            if self.facts.module_has_backward or self.module_runs_backward(kept.name):
                return None
        elif self.runs_backward(function):
            return None
        opener = self.facts.no_grad_opener(event.frame)
        if opener is not None:
            return kept, Evaluates(How.UNDER, function, opener)
        if self.calls_eval(function):
            return kept, Evaluates(How.CALLS_EVAL, function)
        opener = self.grad_off_opener(function)
        if opener is not None:
            return kept, Evaluates(How.OPENS, function, opener)
        if self.evaluation_script(function):
            return kept, Evaluates(How.SCRIPT, function)
        return None

    def evaluates(self, event: Event) -> Evaluates | None:
        """What shows that a scaler's `scale`, `step`, `update` or `unscale_` runs where no backward can; None
        when nothing does.

        Under no_grad/inference_mode (`step`/`update`/`unscale_` there only in a module without backward: after a
        backward elsewhere they are gradient surgery, not inference); in the module-level code of a module that
        runs none; in a function that runs none and calls `.eval()`, reads the scaled value only as data that
        reaches no backward (scaled logits sampled into token ids in `generate()`), or is called by a script
        calling `.eval()`. What the function does decides, never its name: a function returning or handing on a
        scaled loss is a training helper (the backward elsewhere)."""
        module_has_backward = self.facts.module_has_backward
        opener = self.facts.no_grad_opener(event.frame)
        function = event.frame.function()
        if opener is not None and (event.kind == Effect.SCALER_SCALE or not module_has_backward):
            return Evaluates(How.UNDER, function, opener)
        if function is None:
            if module_has_backward or self.module_runs_backward(None):
                return None
            return Evaluates(How.NO_BACKWARD, None)
        if not isinstance(function.node, cst.FunctionDef) or self.runs_backward(function):
            return None
        if self.calls_eval(function):
            return Evaluates(How.CALLS_EVAL, function)
        if event.kind == Effect.SCALER_SCALE and only_data(self.facts, function, event, self):
            return Evaluates(How.DATA, function)
        if self.evaluation_script(function):
            return Evaluates(How.SCRIPT, function)
        return None

    # backward ------------------------------------------------------------------------------------------------
    @cached_property
    def _within(self) -> dict[int, list]:
        """id of each function frame -> the calls of its code and of the functions nested in it."""
        grouped: dict[int, list] = {}
        for call in self.facts.calls:
            for frame in call.frame.ancestors():
                if frame.kind is FrameKind.FUNCTION:
                    grouped.setdefault(id(frame), []).append(call)
        return grouped

    @cached_property
    def _backward_calls(self) -> set[int]:
        """ids of the calls that run a backward (events, and every method `backward`/`manual_backward`)."""
        found = {id(e.call) for e in self.facts.events if e.kind == Effect.BACKWARD}
        return found | {id(c) for c in self.facts.calls if c.method in (vocab.BACKWARD, vocab.MANUAL_BACKWARD)}

    @cached_property
    def _callees(self) -> dict[int, Frame]:
        """id of each call to a function of this module (`f()`, `self.f()`) -> that function's frame."""
        frames = {}
        for info in self.facts.functions:
            frames.setdefault(info.qualname, info.frame)
        return {id(call): frames[qualname] for qualname, calls in self.facts.call_sites.items()
                if qualname in frames for call in calls}

    def runs_backward(self, function: Frame) -> bool:
        """Does the function run a backward: in its own code, in a function nested in it, or in a function it
        calls (in this module, `MAX_CALLEES` calls deep; in any module of the project, through the index)?"""
        key = id(function)
        if key not in self._backward:
            self._backward[key] = self._reaches_backward([function], self._within.get(key, []))
        return self._backward[key]

    def module_runs_backward(self, name: str | None) -> bool:
        """Does module-level code, or a function that reads the module-level scaler `name`, run a backward
        behind a call (the module itself runs none)?"""
        if name not in self._module_backward:
            calls = [call for call in self.facts.calls if call.frame.function() is None]
            readers = [info.frame for info in self.facts.functions
                       if name is not None and self.reads(info.frame).receivers[name]]
            self._module_backward[name] = self._reaches_backward(readers, calls) or any(
                self.runs_backward(frame) for frame in readers)
        return self._module_backward[name]

    def _reaches_backward(self, functions: list[Frame], calls: list) -> bool:
        """Breadth first through same-module calls from these calls (the code of `functions`), then each call
        asked to the project index."""
        seen = {id(frame) for frame in functions}
        frontier = list(calls)
        examined = []
        for _ in range(MAX_CALLEES + 1):
            following = []
            for call in frontier:
                if id(call) in self._backward_calls:
                    return True
                examined.append(call)
                callee = self._callees.get(id(call))
                if callee is not None and id(callee) not in seen:
                    seen.add(id(callee))
                    following.extend(self._within.get(id(callee), []))
            frontier = following
            if not frontier:
                break
        return self._index_reaches_backward(examined)

    def _index_reaches_backward(self, calls: list) -> bool:
        """Does one of these calls run, through the project index, a function (of any module) that runs a
        backward itself or a few calls deep?"""
        view = self.facts.project
        if view is None:
            return False
        for call in calls:
            if call.dotted is None or (call.qualified or "").startswith("torch."):
                continue
            target = view.resolve(_qualname(self.facts, call.frame), call.dotted)
            if target is not None and view.reaches(target, (Effect.BACKWARD,)) is not None:
                return True
        return False

    # names ---------------------------------------------------------------------------------------------------
    def reads(self, function: Frame | None) -> _Reads:
        """How the names of the function's code (None: the whole module) are read."""
        key = id(function)
        if key not in self._reads:
            self._reads[key] = _read_names(function.node if function is not None else self.facts.module)
        return self._reads[key]

    def kept_here(self, event: Event) -> Kept | None:
        """The construction as a `Kept` when the scaler stays where it is built: the statement is
        `name = GradScaler(...)` (or `GradScaler(...) if flag else None`), or the bare call; the name is a plain
        one, read only as the receiver of its methods (never returned, passed, stored, compared, declared
        global, or read by `locals()`). None otherwise: the scaler may serve training elsewhere."""
        statement = event.call.statement
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return None
        small = statement.body[0]
        node = event.node
        function = event.frame.function()
        if isinstance(small, cst.Expr) and small.value is node:
            return Kept(None, True, _inert_arguments(node))
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            target = small.targets[0].target
        elif isinstance(small, cst.AnnAssign) and small.value is not None:
            target = small.target
        else:
            return None
        value = small.value
        if not isinstance(target, cst.Name) or not (value is node or (
                isinstance(value, cst.IfExp) and node in (value.body, value.orelse))):
            return None
        name = target.value
        reads = self.reads(function)
        if self._builtin_readers(READS_EVERY_LOCAL & reads.names.keys(), function):
            return None
        bindings = sum(1 for a in self.facts.assignments_in(function)
                       if a.targets == (name,) and self.facts.is_scaler_construction(a.value))
        if reads.names[name] - reads.receivers[name] - bindings > 0:
            return None
        unread = reads.receivers[name] == 0
        return Kept(name, unread, unread and value is node and _inert_arguments(node))

    def _builtin_readers(self, names: set[str], function: Frame | None) -> set[str]:
        """The names of `READS_EVERY_LOCAL` the code reads that are Python's builtins: a name the module binds
        (a `def eval(...)` of its own, an import, an assignment) is another function."""
        defined = {info.qualname for info in self.facts.functions}
        return {name for name in names if name not in defined and name not in self.facts.imports.bindings
                and not self.facts.bindings(name, function)}

    def evaluation_script(self, function: Frame | None) -> bool:
        """Is the function evaluation code of a script: module-level code calls `.eval()` and runs no backward
        (nor does the module, nor any call of module-level code), and the function is called by module-level
        code, itself or through a function of the module so called?"""
        if function is None or not self.calls_eval(None) or self.facts.module_has_backward \
                or self.module_runs_backward(None):
            return False
        info = self.facts.function_info(function)
        if info is None:
            return False
        callers = [info.qualname]
        for _ in range(2):
            sites = [site for name in callers for site in self.facts.call_sites.get(name, ())]
            if any(site.frame.function() is None for site in sites):
                return True
            callers = [caller.qualname for caller in (self.facts.function_info(site.frame) for site in sites)
                       if caller is not None]
        return False

    def construction(self, function: Frame, name: str) -> cst.SimpleStatementLine | None:
        """The statement of the function's first `name = GradScaler(...)` that is a statement of its own line."""
        for build in self.facts.scaler_builds_by_function.get((name, id(function)), ()):
            statement = build.call.statement
            if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
                return statement
        return None

    def only_use_construction(self, event: Event) -> cst.SimpleStatementLine | None:
        """`scaler = GradScaler(...)` in the same function when this `scaler.scale(...)` is the scaler's only
        other mention there (the name appears exactly twice in the function's code; comments do not count)."""
        function = event.frame.function()
        if function is None or event.scaler is None or "." in event.scaler:
            return None
        statement = self.construction(function, event.scaler)
        if statement is None:
            return None
        return statement if self.mentions(function, event.scaler) == 2 else None

    def statements_reading(self, function: Frame) -> tuple[dict[str, list[cst.CSTNode]], set[str]]:
        """(name -> the small statements of the function's code reading it, in order; the names its nested
        functions, classes and lambdas read), for `only_data`: built once per function."""
        key = id(function)
        if key not in self._statements:
            readers: dict[str, list[cst.CSTNode]] = {}
            for node in _simple_statements(function.node.body):
                for name in dict.fromkeys(_name_values(node)):
                    readers.setdefault(name, []).append(node)
            nested = {name for node in _nested_definitions(function.node.body) for name in _name_values(node)}
            self._statements[key] = (readers, nested)
        return self._statements[key]

    def mentions(self, function: Frame, name: str) -> int:
        """How many times `name` appears as a name in the function's code (never in comments or strings)."""
        if id(function) not in self._names:
            self._names[id(function)] = _names(function.node)
        return self._names[id(function)][name]


def _qualname(facts: ModuleFacts, frame: Frame) -> str | None:
    """The qualname the project index knows the code of `frame` by: its outermost function's (a nested
    function's calls resolve as its enclosing method's); None at module level."""
    outer = None
    for current in frame.ancestors():
        if current.kind is FrameKind.FUNCTION:
            outer = current
    info = facts.function_info(outer) if outer is not None else None
    return info.qualname if info is not None else None


def scaled_argument(event: Event) -> cst.BaseExpression | None:
    """The `x` of `scaler.scale(x)` when it is the call's one argument, positional and not starred."""
    args = event.node.args
    return args[0].value if len(args) == 1 and args[0].keyword is None and not args[0].star else None


def self_assignment(event: Event, argument: cst.BaseExpression) -> cst.SimpleStatementLine | None:
    """The statement of `x = scaler.scale(x)` (alone on its line) when the call rebinds its argument's own name:
    without the scaling it does nothing."""
    statement = event.call.statement
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        small = statement.body[0]
        if isinstance(small, cst.Assign) and small.value is event.node and len(small.targets) == 1 \
                and isinstance(argument, cst.Name) and isinstance(small.targets[0].target, cst.Name) \
                and small.targets[0].target.value == argument.value:
            return statement
    return None


def only_data(facts: ModuleFacts, function: Frame, event: Event, functions: EvaluationQueries) -> bool:
    """Is `name = scaler.scale(...)` read, in its function, only by tensor methods, torch functions and operators
    whose results are in turn read the same way, ending in integer results (`multinomial`, `argmax`) or nowhere:
    never returned, stored, handed to another call or backwarded? Then the scaled value reaches no backward."""
    statement = event.call.statement
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    small = statement.body[0]
    if not (isinstance(small, cst.Assign) and small.value is event.node and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Name)):
        return False
    tainted = {small.targets[0].target.value}
    # A statement's answer depends only on the tainted names it reads: each is checked again when one of its names
    # becomes tainted (the statements reading a name are indexed once per function: N scales cost N, not N x N).
    readers, nested_names = functions.statements_reading(function)
    pending = list(tainted)
    while pending:
        for node in readers.get(pending.pop(), ()):
            if node is small:
                continue
            flows = _Flow(facts, tainted)
            if not flows.statement(node):
                return False
            pending.extend(flows.bound - tainted)
            tainted |= flows.bound
    return not tainted & nested_names  # a closure reading one may hand it anywhere


def _name_values(node: cst.CSTNode) -> Iterator[str]:
    """Every `Name` in the node (as `_Flow._reads` sees them: attribute names too)."""
    pending = [node]
    while pending:
        current = pending.pop()
        if isinstance(current, cst.Name):
            yield current.value
        pending.extend(current.children)


def _nested_definitions(block: cst.CSTNode) -> list[cst.CSTNode]:
    found, pending = [], [block]
    while pending:
        node = pending.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            found.append(node)
            continue
        pending.extend(node.children)
    return found


def _simple_statements(block: cst.CSTNode) -> list[cst.CSTNode]:
    """The small statements of a function's code (nested functions and classes left out) and the expressions its
    compound statements test or iterate (`if`, `while`, `for ... in`, `with` items)."""
    found: list[cst.CSTNode] = []
    pending = [block]
    while pending:
        node = pending.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(node, cst.BaseSmallStatement):
            found.append(node)
            continue
        if isinstance(node, (cst.If, cst.While)):
            found.append(cst.Expr(node.test))
        elif isinstance(node, cst.For):
            found.append(cst.Assign(targets=[cst.AssignTarget(node.target)], value=node.iter))
        elif isinstance(node, cst.With):
            found.extend(cst.Expr(item.item) for item in node.items)
        elif isinstance(node, cst.BaseExpression):
            continue
        pending.extend(child for child in node.children if not isinstance(child, cst.BaseExpression))
    return found


class _Flow:
    """Where the tainted names' values go in one small statement: `statement` is False when one may leave as data
    a backward could use (returned, stored in an attribute or a subscript, handed to a call that is not a tensor
    method or a torch function, backwarded); `bound` collects the names assigned a tainted value."""

    def __init__(self, facts: ModuleFacts, tainted: set[str]) -> None:
        self.facts, self.tainted, self.bound = facts, tainted, set()

    def statement(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.Expr):
            return self.value(node.value) is not None
        if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
            carried = self.value(node.value) if node.value is not None else False
            if carried is None:
                return False
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            if carried:
                for target in targets:
                    names = [e.value for e in (target.elements if isinstance(target, (cst.Tuple, cst.List)) else [])]
                    if isinstance(target, cst.Name):
                        self.bound.add(target.value)
                    elif names and all(isinstance(n, cst.Name) for n in names):
                        self.bound.update(n.value for n in names)
                    else:
                        return False  # stored in an attribute or a subscript
            return True
        return not self._reads(node)  # return, yield, del, raise...: any read of a tainted value leaves

    def _reads(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.Name):
            return node.value in self.tainted
        return any(self._reads(child) for child in node.children)

    def value(self, node: cst.CSTNode) -> bool | None:
        """Does the expression's value carry a tainted value (None: a tainted value leaves through it)?"""
        if isinstance(node, cst.Name):
            return node.value in self.tainted
        if not self._reads(node):
            return False
        if isinstance(node, (cst.BinaryOperation, cst.UnaryOperation, cst.Subscript, cst.Tuple, cst.List,
                             cst.Element, cst.SubscriptElement, cst.Index, cst.Slice, cst.Arg)):
            parts = [self.value(child) for child in node.children if isinstance(child, cst.CSTNode)]
            return None if None in parts else any(parts)
        if isinstance(node, cst.Comparison):
            return False if all(self.value(c) is not None for c in node.children) else None
        if isinstance(node, cst.Call):
            func, args = node.func, [self.value(arg.value) for arg in node.args]
            if None in args:
                return None
            if isinstance(func, cst.Attribute) and not (self.facts.imports.qualify(func) or "").startswith("torch."):
                receiver = self.value(func.value)
                method = func.attr.value
                if receiver is None or method not in vocab.TENSOR_METHODS | INTEGER_RESULTS:
                    return None if receiver or any(args) else False
                return False if method in INTEGER_RESULTS else bool(receiver or any(args))
            qualified = self.facts.imports.qualify(func) or ""
            if not qualified.startswith("torch.") or qualified.split(".")[1:2] == [vocab.AUTOGRAD]:
                return None  # handed to a call that may run a backward
            return False if qualified.rsplit(".", 1)[-1] in INTEGER_RESULTS else any(args)
        return None


def _inert_arguments(call: cst.Call) -> bool:
    """Does evaluating the call's arguments do nothing a removal could lose: no call, await, yield or `:=` in
    them (names, attributes, subscripts, literals and operators only)?"""
    active = []

    class Active(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, (cst.Call, cst.Await, cst.Yield, cst.NamedExpr, cst.Lambda)):
                active.append(node)
                return False
            return True

    for argument in call.args:
        argument.value.visit(Active())
    return not active


@dataclass
class _Reads:
    names: Counter  # name -> how many times it appears as a name (attribute names and keywords of calls left out)
    receivers: Counter  # name -> how many of those are the object of an attribute (`name.method`, `name.x`)


def _read_names(node: cst.CSTNode) -> _Reads:
    """How each name appears in the code of `node`: in all, and as the object of an attribute. The attribute's
    own name (`x.scaler`) and a call's keyword (`f(scaler=...)`) are no uses of a variable."""
    reads = _Reads(Counter(), Counter())
    skip: set[int] = set()

    class Names(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> None:
            skip.add(id(node.attr))
            if isinstance(node.value, cst.Name):
                reads.receivers[node.value.value] += 1

        def visit_Arg(self, node: cst.Arg) -> None:
            if node.keyword is not None:
                skip.add(id(node.keyword))

        def visit_Name(self, node: cst.Name) -> None:
            if id(node) not in skip:
                reads.names[node.value] += 1

    node.visit(Names())
    return reads


def _names(node: cst.CSTNode) -> Counter[str]:
    """How many times each name appears as a name in the code of `node` (never in comments or strings)."""
    found: Counter[str] = Counter()

    class Names(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            found[node.value] += 1

    node.visit(Names())
    return found
