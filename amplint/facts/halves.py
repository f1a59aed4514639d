"""Models made half precision and what trains them with a GradScaler: a conversion to float16 (`model.half()`,
`model.to(torch.float16)`, `model = Net().to(device).half()`) of a model whose parameters an optimizer is built
over, and the `scaler.step(optimizer)` or `scaler.unscale_(optimizer)` that then meets float16 gradients (in the
module, or, for a factory that makes the model half and returns the optimizer it builds, in a caller of another
module, through the project index's `half_model` and `scaler_step`). A model converted back to float32 before the
step, or converted after it (export after training), is not trained half. Read by AMP012."""

from __future__ import annotations

from typing import Iterator, NamedTuple

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.calls import converts_to_half
from amplint.facts.model import Assignment, Call, Event
from amplint.facts.module import ModuleFacts, scaler_enabled
from amplint.facts.names import code_words, dotted_name
from amplint.vocabulary import Effect

STEPPED = frozenset({Effect.SCALER_STEP, Effect.UNSCALE})
CONVERSIONS = vocab.CONVERT_METHODS | {vocab.FLOAT}  # `.float()`, `.to(...)`, `.type(...)`: may undo a `.half()`


def caller_steps_a_half_factory(view) -> bool:
    """The screen's question across modules: does a function of this file make a model half, and a caller of it in
    another module step or unscale through a GradScaler (the project index's `half_model`, `scaler_step`)?"""
    from amplint.index.project import functions_doing

    if not _stepping_caller_possible(view):
        return False
    for target in functions_doing(view, Effect.HALF_MODEL):
        for site in view.callers(target):
            summary = view.function(site.caller)
            if site.caller.module != view.path and summary is not None and summary.does & STEPPED:
                return True
    return False


def _stepping_caller_possible(view) -> bool:
    """Does a function of another module that steps or unscales through a GradScaler call a function of this
    file? Asked by the names the file's functions can have, before its record is built (that parses it): a
    caller is found by the name it calls and its call resolved (as `ModuleView.callers`); this file's record is
    read only when a call resolves into it. What is read is what `callers` would read, so a cached answer is
    kept by the same facts."""
    names = view.function_names()
    if names is None:
        return True  # not known: the record decides
    if "__call__" in names:  # an object's call: every call site may reach it
        view.asked_calls.add("*")
        asked = [None]
    else:
        view.asked_calls.update(names)
        asked = sorted(names)
    for name in asked:
        paths, stepping = view.project.calls_named_in(name, STEPPED)
        view.read_modules.update(paths - {view.path})  # as reading each caller's record: its steps may change
        for path, caller, call in stepping:
            if path != view.path:  # a caller in this module: not asked
                target = view.resolve(caller, call.callee, path)
                if target is not None and target.module == view.path:
                    return True
    return False


class HalfModel(NamedTuple):
    """A conversion to float16 of a model an optimizer trains through a GradScaler."""

    half: Call  # the conversion
    model: str  # the model's name
    use: Event | None  # the step or `unscale_` of this module that meets float16 gradients
    caller: tuple[str, str, int] | None  # else a caller of another module that steps: (qualname, module, line)


def half_models_stepped(facts: ModuleFacts) -> Iterator[HalfModel]:
    """Each conversion to float16 of a model whose optimizer is stepped or unscaled through an enabled GradScaler
    after it (the first such optimizer), and where."""
    uses = [e for e in facts.events if e.kind in STEPPED
            and e.optimizer and e.scaler and scaler_enabled(facts, e.scaler, e.frame) is not False]
    if not uses and not any(_to_half(facts, call) for call in facts.calls):
        return
    # Asked for each conversion, answered once per model name: N conversions cost N lookups, not N scans.
    optimizers: dict[str, list[tuple[str, Assignment]]] = {}
    conversions: dict[str, list[Call]] = {}  # receiver -> its `.float()`/`.to()`/`.type()` calls, in order
    for call in facts.calls:
        if call.method in CONVERSIONS and call.receiver:
            conversions.setdefault(call.receiver, []).append(call)
    for call in facts.calls:
        if not _to_half(facts, call):
            continue
        model = _model_key(facts, call)
        if model is None:
            continue
        if model not in optimizers:
            optimizers[model] = _optimizers_over(facts, model)
        for optimizer, built in optimizers[model]:
            use = next((e for e in uses if e.optimizer == optimizer and _related(call, built, e)), None)
            if _converted_back(facts, conversions.get(model, ()), call):
                continue
            caller = None if use is not None else _stepped_by_a_caller(facts, call, optimizer, built)
            if use is None and caller is None:
                continue
            yield HalfModel(call, model, use, caller)
            break


def _model_key(facts: ModuleFacts, call: Call) -> str | None:
    """`model` for `model.half()` as a statement, or for `model = <chain ending in .half()>`."""
    statement = call.statement
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        small = statement.body[0]
        if isinstance(small, cst.Expr) and small.value is call.node:
            return call.receiver
        if isinstance(small, (cst.Assign, cst.AnnAssign)):
            for assignment in facts.assignments:
                if assignment.statement is statement and len(assignment.targets) == 1 and _in_chain(
                        assignment.value, call.node):
                    return assignment.targets[0]
    return None


def _optimizers_over(facts: ModuleFacts, model: str) -> list[tuple[str, Assignment]]:
    """Names bound to a call over `model`'s parameters (directly, or through a name bound to them such as
    `decay = [p for ... in model.named_parameters()]`) that the code uses as an optimizer
    (`ModuleFacts.is_optimizer`: stepped by a scaler, `zero_grad()`, `param_groups`, a known optimizer
    class). What a name is spelled like says nothing: `solver` is one, `optimizer_groups` need not be."""
    found = []
    for assignment in facts.assignments:
        value = assignment.value
        if len(assignment.targets) != 1 or not isinstance(value, cst.Call):
            continue
        target = assignment.targets[0]
        if not facts.is_optimizer(target, assignment.frame):
            continue
        if _reads_parameters(value, model) or any(
                _reads_parameters(bound.value, model)
                for name in _names_in(value) for bound in facts.bindings(name, assignment.frame)
                if bound.index < assignment.index):
            found.append((target, assignment))
    return found


def _related(half: Call, built: Assignment, use) -> bool:
    """The conversion runs before the step: same function and earlier, or in the function that builds the
    optimizer (or at module level) when the step is elsewhere."""
    half_function = half.frame.function()
    if half_function is use.frame.function():
        return half.index < use.index
    return half_function is built.frame.function() or half_function is None


def _converted_back(facts: ModuleFacts, conversions, half: Call) -> bool:
    """Is the model converted back to float32 after `half` (`conversions`: its `.float()`/`.to()`/`.type()`
    calls)?"""
    return any(call is not half and call.index > half.index and not _to_half(facts, call)
               and (call.method == vocab.FLOAT or any(vocab.FLOAT32 in word for word in code_words(call.node)))
               for call in conversions)


def _stepped_by_a_caller(facts: ModuleFacts, half: Call, optimizer: str,
                         built: Assignment) -> tuple[str, str, int] | None:
    """For a function that makes the model half and builds its optimizer (a factory), and returns the optimizer:
    a caller in another module that steps or unscales through a GradScaler (the project index's `scaler_step`,
    `unscale`), as a step in this module is matched by the optimizer's name: (its qualname, its module, the
    line of its call)."""
    function = half.frame.function()
    if function is None or built.frame.function() is not function or not _returns_name(function.node, optimizer):
        return None
    view = facts.project
    info = facts.function_info(half.frame)
    if view is None or info is None:
        return None
    from amplint.index.project import Target

    for site in view.callers(Target(view.path, info.qualname)):
        if site.caller.module == view.path:
            continue  # a caller of this module: its step is matched by name above
        summary = view.function(site.caller)
        if summary is not None and summary.does & STEPPED:
            return site.caller.qualname, view.project.names.get(site.caller.module, "?"), site.call.line
    return None


def _returns_name(function: cst.CSTNode, name: str) -> bool:
    """Does a `return` of the function return the name (alone or in a tuple)?"""
    found = []

    class Returns(cst.CSTVisitor):
        def visit_Return(self, node: cst.Return) -> None:
            value = node.value
            values = [e.value for e in value.elements] if isinstance(value, cst.Tuple) else [value]
            if any(dotted_name(v) == name for v in values if v is not None):
                found.append(node)

    function.visit(Returns())
    return bool(found)


def _to_half(facts: ModuleFacts, call: Call) -> bool:
    """`x.half()`, `x.to(torch.float16)`, `x.to(device, torch.half)`, `x.to(dtype=torch.float16)`, `x.type(...)`."""
    return call.method in vocab.HALF_CONVERTERS and converts_to_half(facts.shape(call.node))


def _reads_parameters(node: cst.CSTNode, model: str) -> bool:
    """Does the expression call `model.parameters()` or `model.named_parameters()` (code, not comments or
    strings)?"""
    found = []

    class Parameters(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value in vocab.PARAMETER_READING_METHODS \
                    and not call.args and dotted_name(func.value) == model:
                found.append(call)

    node.visit(Parameters())
    return bool(found)


def _names_in(node: cst.CSTNode) -> set[str]:
    found: set[str] = set()

    class Names(cst.CSTVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            found.add(name.value)

    node.visit(Names())
    return found


def _in_chain(value: cst.BaseExpression, node: cst.Call) -> bool:
    """Is `node` the value itself or a call of its method chain (`Net().cuda().half().to(device)`)?"""
    while True:
        if value is node:
            return True
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
            value = value.func.value
        else:
            return False
