"""AMP012 half-model-with-scaler."""

from __future__ import annotations

from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.facts import EventKind, ModuleFacts
from amplint.facts.model import Assignment, Call
from amplint.calls import converts_to_half
from amplint.facts.module import scaler_enabled
from amplint.facts.names import code_words, dotted_name
from amplint.index.summary import Summary
from amplint.vocabulary import Effect
from amplint.rules.base import Finding, Rule
from amplint.rules.screen import Ask, AskProject
from amplint.rules.scopes import MESSAGE_SNIPPET, snippet

CONVERTERS = sorted(vocab.HALF_CONVERTERS)  # `.half()`, `.to(...)`, `.type(...)`
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


STEPPED = frozenset({Effect.SCALER_STEP, Effect.UNSCALE})


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


class HalfModelWithScaler(Rule):
    """## What it does
    Checks for a model converted to float16 (`model.half()`, `model.to(torch.float16)`,
    `model = Net().to(device).half()`) whose parameters are given to an optimizer that is stepped through a
    GradScaler (`scaler.step(optimizer)` or `scaler.unscale_(optimizer)`) in the same module, or, when a factory
    function makes the model half and returns the optimizer it builds, by a caller of it in another module.

    Applies to every torch version with `GradScaler` (torch >= 1.6).

    ## Why is this bad?
    Mixed precision keeps the parameters (and so their gradients and the optimizer state) in float32 and lets
    autocast run the ops in float16. With float16 parameters the gradients are float16 too, and GradScaler
    refuses to unscale them: the first `scaler.step(optimizer)` raises (measured on CPU, torch 2.13)
    `ValueError: Attempting to unscale FP16 gradients.` Even without the scaler, float16 parameters lose small
    updates: measured, a float16 weight of 1.0 plus 4.8e-4 is still 1.0.

    ## Example
    ```python
    import torch

    model = Net().cuda().half()
    optimizer = torch.optim.AdamW(model.parameters())
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        loss = loss_fn(model(x.cuda().half()), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```

    ## Use instead
    ```python
    import torch

    model = Net().cuda()  # float32 parameters
    optimizer = torch.optim.AdamW(model.parameters())
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn(model(x.cuda()), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```

    ## Fix safety
    No fix: removing `.half()` changes memory use and the dtype the rest of the code sees (inputs cast with
    `.half()` must go too, autocast must be added around the forward pass).

    ## Limits
    The model, the optimizer and the scaler are matched by name within one module; the optimizer is known by
    what the code does with it (the scaler steps or unscales it), never by how it is spelled. Silent when the model is
    converted back with `.float()` before the step, when the conversion comes after the last step of the same
    function (export after training), for bfloat16 (`model.bfloat16()`, which GradScaler accepts), and when the
    optimizer is built over separate float32 master parameters.
    """

    code = "AMP012"
    name = "half-model-with-scaler"
    words = (vocab.HALF, vocab.FLOAT16)
    requires = Ask(Summary.scaler_possible) & Ask(Summary.calls_method, *CONVERTERS)
    requires_across = Ask(Summary.calls_method, *CONVERTERS) & AskProject(caller_steps_a_half_factory)
    min_torch = "1.6"
    fix = "none"

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        uses = [e for e in facts.events if e.kind in (EventKind.SCALER_STEP, EventKind.SCALER_UNSCALE)
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
            model = self._model_key(facts, call)
            if model is None:
                continue
            if model not in optimizers:
                optimizers[model] = self._optimizers_over(facts, model)
            for optimizer, built in optimizers[model]:
                use = next((e for e in uses if e.optimizer == optimizer and self._related(call, built, e)), None)
                if self._converted_back(facts, conversions.get(model, ()), call):
                    continue
                if use is not None:
                    where = f"`{snippet(facts, use.node, MESSAGE_SNIPPET)}` at line {facts.line_of(use.node)} raises"
                else:
                    where = _stepped_by_a_caller(facts, call, optimizer, built)
                    if where is None:
                        continue
                message = f"`{_tail(facts, call.node, 32)}` makes `{model}` float16: {where}"
                yield Finding(call.node, message, help=(
                    f"Keep `{model}` float32 and run the forward pass under "
                    f"`torch.autocast(..., dtype=torch.float16)`"))
                break

    @staticmethod
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

    @staticmethod
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

    @staticmethod
    def _related(half: Call, built: Assignment, use) -> bool:
        """The conversion runs before the step: same function and earlier, or in the function that builds the
        optimizer (or at module level) when the step is elsewhere."""
        half_function = half.frame.function()
        if half_function is use.frame.function():
            return half.index < use.index
        return half_function is built.frame.function() or half_function is None

    @staticmethod
    def _converted_back(facts: ModuleFacts, conversions, half: Call) -> bool:
        """Is the model converted back to float32 after `half` (`conversions`: its `.float()`/`.to()`/`.type()`
        calls)?"""
        return any(call is not half and call.index > half.index and not _to_half(facts, call)
                   and (call.method == "float" or any(vocab.FLOAT32 in word for word in code_words(call.node)))
                   for call in conversions)


def _stepped_by_a_caller(facts: ModuleFacts, half: Call, optimizer: str, built: Assignment) -> str | None:
    """For a function that makes the model half and builds its optimizer (a factory), and returns the optimizer:
    a caller in another module that steps or unscales through a GradScaler (the project index's `scaler_step`,
    `unscale`), as a step in this module is matched by the optimizer's name. "`train()` (in `loop`, line 7) steps
    it through a GradScaler, which raises"."""
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
            module = view.project.names.get(site.caller.module, "?")
            return f"`{site.caller.qualname}()` steps its optimizer via a GradScaler (`{module}`, line {site.call.line})"
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


def _tail(facts: ModuleFacts, node: cst.CSTNode, limit: int = 60) -> str:
    """The end of a long method chain (`...cuda().half()`), which is the part that matters here."""
    text = " ".join(facts.code(node).split())
    return text if len(text) <= limit else "..." + text[3 - limit:]


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
