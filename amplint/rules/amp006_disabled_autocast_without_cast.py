"""AMP006 disabled-autocast-without-cast."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterator

from amplint.lazy import libcst as cst
from amplint import vocabulary as vocab
from amplint.vocabulary import Effect
from amplint.facts.walk import walk
from amplint.lazy import visitor_class

from amplint.facts import ModuleFacts, Region, RegionState
from amplint.facts.module import exclusive
from amplint.diagnostics import Applicability
from amplint.facts.dtypes import (FLOAT_PRESERVING, Lowering, UncastUses, deliberately_low, floating_names, is_float32_cast,
                                  is_low_precision, is_scalar, lowering, module_output, tensor_module)
from amplint.facts.model import EventKind, Frame
from amplint.facts.names import dotted_name
from amplint.index.functions import ITEM_KEY
from amplint.index.summary import Summary
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.screen import Ask
from amplint.rules.scopes import dtype_words


def disabled_region_possible(summary) -> bool:
    """The screen's question: a call that can open a disabled region, one passing a literal `False` (positionally
    or as `enabled=False`) to something that can open a region, or to a `partial`."""
    return summary.ask(summary.has_token("False"), lambda: any(
        summary.callee_can_open(call.func) or (type(call.func) is ast.Attribute and call.func.attr == "partial")
        or (type(call.func) is ast.Name and (call.func.id == "partial"
                                             or "partial" in summary.import_bound.get(call.func.id, ())))
        for call in summary.false_calls))


class DisabledAutocastWithoutCast(Rule):
    """## What it does
    Checks for values that come into an `autocast(enabled=False)` region (or a function decorated with one)
    from outside it and are computed with there without a float32 cast (`.float()`, `.to(torch.float32)`,
    `.double()`, `.type(torch.float32)`). A value comes in when it is computed before the region in its
    function (in the enclosing autocast region, in an earlier sibling region, or, in a function that opens no
    autocast region of its own, anywhere before it: the region says its callers run it under autocast), or
    when it is a parameter of that function (or of a decorated one) used there as a floating tensor. Computed
    with means: an operand, a method call on it, an argument of a torch op, of a torch.nn module, or of a
    function, module or callable of the user's (`criterion(outputs, targets)`).

    ## Why is this bad?
    `autocast(enabled=False)` only stops autocast from casting; it does not cast anything back. PyTorch's docs:
    "you should cast them to float32 before use in the disabled region". Nobody writes a disabled region except
    to leave an enclosing autocast, and autocast state is dynamic: what its function computed before it, and
    what its callers pass in, is bfloat16/float16 there. The float32 computation the region was written for does
    not happen: an fp32 `nn.Linear` raises `RuntimeError: mat1 and mat2 must have the same dtype, but got
    BFloat16 and Float`, reductions lose precision (measured relative error 1.7e-3 in bfloat16 vs 1e-8 after
    `.float()`), and in float16 `h.pow(2).sum()` overflows to `inf`. Where no caller runs it under autocast,
    `.float()` on a float32 tensor does nothing.

    ## Example
    ```python
    import torch

    def score(encoder, sensitive_op, inputs):
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            features = encoder(inputs)
            with torch.autocast(device_type="cuda", enabled=False):
                return sensitive_op(features)
    ```

    ## Use instead
    ```python
    import torch

    def score(encoder, sensitive_op, inputs):
        with torch.autocast(device_type="cuda", dtype=torch.float16):
            features = encoder(inputs)
            with torch.autocast(device_type="cuda", enabled=False):
                return sensitive_op(features.float())
    ```

    ## Fix safety
    The fix adds `.float()` at each use inside the region. It is safe only on a value known to be a floating
    tensor (the result of a torch op or torch.nn module that returns one, or of dtype-preserving ops on one):
    there `.float()` does the cast the region was written for. It is unsafe on a user module's or function's
    output (perhaps a dict, a tuple or a number: `.float()` raises `AttributeError`) and on a parameter (its
    callers are not all known). A container handed on whole (`criterion(outputs, targets)` with `outputs` a
    dict of heads) is reported with no fix: the tensors it holds are what to cast.

    ## Limits
    Names are followed, not attributes; an item of a container as said below. Not reported, as surely float32 or
    not floating:
    values after a float32 cast (also through dtype-preserving methods after it), tensor factories, outputs of
    ops that autocast runs in float32 (softmax, norms, losses), integer and bool values (`.long()`, `argmax`,
    comparisons, sizes), metadata reads (`.shape`, `.dtype`, `.device`), values cast on purpose to the autocast
    dtype (`torch.get_autocast_dtype(...)`, also by a project helper), results of a project function that runs no op
    autocast lowers (and, with no autocast region in view, of a library's function) when its inputs are not low,
    complex arithmetic, an argument list a wrapper hands on by star-unpacking (`kernel(*args)`; computed under
    a region in view, it is reported without a fix), and a parameter used only in ways an integer, a bool mask or an
    object is used too (indexing, a mask, handed to a user function). A value used only as something handed on
    (`outputs.append(h)`, `log(h)` whose result is dropped) is not computed with. A region whose body only runs
    autograd (`torch.autograd.grad`, `.backward()`) keeps autograd out of autocast and is not an fp32 region. In
    a function that opens its own autocast region, values computed outside it are taken as float32.

    An item taken by a string key out of the dict a call returned (`outputs["durations"]`) has that entry's
    dtype, not the call's: an entry the project function builds integer, bool or float32 (`.int()`, a
    comparison, `.float()`, also taken from an element of another project function's result, whatever module
    holds it) is not reported. Where the callee is not known at all (built from a configuration by a registry,
    a parameter, a library's) and no autocast region is in view, the entry is not taken as low precision
    either: a returned mapping holds labels, masks and float32 targets beside outputs, and nothing in view says
    which this entry is. Likewise, a value low only by the callers' autocast is not reported where it is handed
    to a callable picked out of a container (`criterion[idx](h)`, `self.losses[k](h)`): the callables the rule
    counts are those the code names (`criterion(h)`, `self.loss_cls(h)`), whose definition, when the project
    holds it, says whether it casts first thing; an item picked at run time has no definition to read, and
    both what it does with `h` and `h`'s dtype would be guesses. Under an autocast region in view, both are
    reported: the region shows the value low, whatever takes it.
    """

    code = "AMP006"
    name = "disabled-autocast-without-cast"
    fix = "sometimes"
    # A disabled region is `autocast(..., enabled=False)` or `False` passed positionally (legacy
    # `autocast(False)`, `torch.autocast("cuda", None, False)`), also through `partial`.
    words = (vocab.AUTOCAST,)
    # A disabled region (a with-statement or a decorator): the region itself says its code runs under an
    # enclosing autocast, whoever opens it.
    requires = Ask(Summary.regions_possible) & Ask(disabled_region_possible)

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        for frame in facts.with_frames.values():
            region = facts.region_of(frame)
            if region is None or region.state is not RegionState.OFF or region.frame is not frame:
                continue
            outer = facts.region_of(frame.parent)
            if (outer is not None and (not outer.active or outer.frame is None)) or only_autograd(facts, frame):
                continue
            function = frame.function()
            implied = function is not None and not opens_region(facts, function) and not switched_off(facts, frame,
                                                                                                      region)
            sources = arriving(facts, function, frame, region, implied)
            scope = function if function is not None else list(frame.ancestors())[-1]
            floats = floating_names(facts.assignments_in(function), scope, frame.start_index, function, facts)
            yield from self._report(facts, frame.node.body, sources, floats, frame)
        for info in facts.functions:
            region = facts.region_of(info.frame)
            if region is None or region.state is not RegionState.OFF or region.via != "decorator":
                continue
            sources = parameter_sources(info.node, f"parameter `{{name}}` of fp32 function `{info.node.name.value}` "
                                                   f"is used without `.float()`: {{dtype}} under the callers' autocast",
                                        bool(info.frame.class_name))
            yield from self._report(facts, info.node.body, sources, set(), info.frame)

    def _report(self, facts: ModuleFacts, body: cst.BaseSuite, sources: dict[str, Source], floats: set[str],
                frame) -> Iterator[Finding]:
        """One finding per incoming name used uncast in `body`; its `.float()` fix is safe only for a name in
        `floats` (surely a floating tensor), unsafe otherwise, none for a container handed on whole."""
        if not sources:
            return
        params = {name for name, source in sources.items() if source.parameter}
        visitor = visitor_class(UncastUses)(set(sources) - params, set(floats),
                                            lambda func: tensor_module(facts, func, frame), params,
                                            lambda func: module_output(facts, func, frame) in ("low", vocab.FLOAT32),
                                            callee_casts(facts, frame),
                                            {name for name, source in sources.items() if source.handed_on},
                                            {name for name, source in sources.items() if source.handed_on})
        walk(body, visitor)
        by_name: dict[str, list[cst.Name]] = {}
        for use in sorted(visitor.uses, key=lambda node: (facts.position(node)[0].line,
                                                          facts.position(node)[0].column)):
            by_name.setdefault(use.value, []).append(use)
        for name, uses in by_name.items():
            source = sources[name]
            if source.container or any(id(use) in visitor.starred for use in uses):
                yield Finding(uses[0], source.text(name), help=f"Cast the tensors `{name}` holds with `.float()` "
                                                               f"before the fp32 region")
                continue

            def rebuild(uses=uses):
                return replace_nodes(facts.module, {
                    u: cst.Call(func=cst.Attribute(value=u, attr=cst.Name("float"))) for u in uses
                })

            safe = name in floats and not source.parameter
            applicability = Applicability.SAFE if safe else Applicability.UNSAFE
            yield Finding(uses[0], source.text(name),
                          FixPlan(f"Cast `{name}` with `.float()` inside the fp32 region", rebuild, applicability))


def returns_float32(facts: ModuleFacts, module_output, frame: Frame):
    """`module_output`, and "float32" for a project function whose every return is computed with autocast off
    (the index's `returns_float32`: `return self.head(tok.float())` in its own fp32 region)."""
    view = facts.project
    info = facts.function_info(frame)

    def output(func: cst.BaseExpression) -> str | None:
        kind = module_output(func)
        if kind is not None or view is None:
            return kind
        callee = dotted_name(func)
        target = view.resolve(info.qualname if info else None, callee) if callee else None
        summary = view.function(target) if target is not None else None
        return vocab.FLOAT32 if summary is not None and Effect.RETURNS_FLOAT32 in summary.does else None

    return output


def returns_autocast_dtype(facts: ModuleFacts, frame: Frame):
    """Is a value the result of a project function that casts what it returns to the autocast dtype on purpose
    (the index's `returns_autocast_dtype`: `downcast_x = cast_if_autocast_enabled(x)` for a fused kernel)?"""
    view = facts.project
    info = facts.function_info(frame)

    def cast(value: cst.BaseExpression) -> bool:
        callee = dotted_name(value.func) if isinstance(value, cst.Call) and view is not None else None
        target = view.resolve(info.qualname if info else None, callee) if callee else None
        summary = view.function(target) if target is not None else None
        return summary is not None and Effect.RETURNS_AUTOCAST_DTYPE in summary.does

    return cast


def dtype_keeping(facts: ModuleFacts, frame: Frame, libraries: bool):
    """The arguments of a call whose dtype its result carries under autocast, for a project function that runs no
    op autocast lowers (the index's `lowers_nothing`, the arguments bound to its `keeps`) or, with `libraries`
    (no autocast region in view), a library's function, imported from a module the project does not hold
    (`import k2`: all its arguments). None for any other call, and without the project's index."""
    view = facts.project
    info = facts.function_info(frame)

    def carried(call: cst.Call) -> list[cst.BaseExpression] | None:
        if view is None:
            return None
        qualified = facts.imports.qualify(call.func)
        if libraries and qualified is not None and qualified.split(".")[0] != "torch" and view.outside(qualified):
            return [arg.value for arg in call.args]
        callee = dotted_name(call.func)
        target = view.resolve(info.qualname if info else None, callee) if callee else None
        summary = view.function(target) if target is not None else None
        if summary is None or Effect.LOWERS_NOTHING not in summary.does:
            return None
        params = list(summary.params)
        if "." in target.qualname and params and params[0] in ("self", "cls"):
            params = params[1:]
        found, position = [], 0
        for arg in call.args:
            if arg.star:
                return [a.value for a in call.args]  # unpacked: which parameter each binds is unknown
            name = arg.keyword.value if arg.keyword is not None else (
                params[position] if position < len(params) else None)
            position += arg.keyword is None
            if name is None or name in summary.keeps:
                found.append(arg.value)
        return found

    return carried


def mapping_entry(facts: ModuleFacts, frame: Frame):
    """What the index says of the entry `key` of the dict a call in `frame` returns (`outputs = self.forward(x)`
    then `outputs["durations"]`): True when the project function it runs builds that entry integer, bool or
    float32 (the index's `items`, followed through the functions it takes the entry from), False when the
    function is followed and that is not shown, None when the callee is not known at all (built from a
    configuration by a registry, a parameter, a library's)."""
    view = facts.project
    info = facts.function_info(frame)

    def entry(call: cst.Call, key: str) -> bool | None:
        callee = dotted_name(call.func)
        target = view.resolve(info.qualname if info else None, callee) if view is not None and callee else None
        if target is None:
            return None
        return view.plain_item(target, f"{ITEM_KEY}{key}")

    return entry


def item_key(value: cst.BaseExpression) -> tuple[str, str] | None:
    """(name, key) for an item of a mapping taken by a string key (`outputs["durations"]`)."""
    if not isinstance(value, cst.Subscript) or not isinstance(value.value, cst.Name) or len(value.slice) != 1:
        return None
    element = value.slice[0].slice
    if not isinstance(element, cst.Index) or not isinstance(element.value, cst.SimpleString):
        return None
    key = element.value.evaluated_value
    return (value.value.value, key) if isinstance(key, str) else None


def callee_casts(facts: ModuleFacts, frame: Frame):
    """Does the project function a call in `frame` runs cast the parameter an argument is bound to (by position
    or keyword) to float32 first thing (the index's `casts`, in this module or another)?"""
    view = facts.project
    info = facts.function_info(frame)

    def casts(call: cst.Call, position: int | None, keyword: str | None) -> bool:
        callee = dotted_name(call.func)
        target = view.resolve(info.qualname if info else None, callee) if view is not None and callee else None
        summary = view.function(target) if target is not None else None
        if summary is None or not summary.casts:
            return False
        params = list(summary.params)
        if "." in target.qualname and params and params[0] in ("self", "cls"):
            params = params[1:]
        name = keyword if keyword is not None else (params[position] if position is not None and
                                                    position < len(params) else None)
        return name in summary.casts

    return casts


@dataclass
class Source:
    """Why a name is low precision where the disabled region uses it: the finding's message, `{name}` standing
    for the name reported (a rebinding `g = h.view(...)` keeps `h`'s reason) and `{dtype}` for its dtype."""

    message: str
    dtype: str = "bfloat16/float16"
    parameter: bool = False  # reported only where used as a floating tensor; never a safe fix
    container: bool = False  # a dict, list or tuple of tensors: no `.float()` fix
    # Known low only by the callers' autocast (a parameter, or computed from what the function was handed): its
    # star-unpacking into a call (`kernel(*args)`) hands an argument list on as it came, not a use.
    handed_on: bool = False

    def text(self, name: str) -> str:
        """The message for `name`, said shorter while it passes `MAX_MESSAGE` characters (long names)."""
        text = self.message.replace("{name}", name).replace("{dtype}", self.dtype)
        if len(text) > MAX_MESSAGE:
            text = text.replace(" without `.float()`", " uncast").replace(" is used uncast", " used uncast")
        if len(text) > MAX_MESSAGE:
            text = text.replace(" under the callers' autocast", "").replace(" from the autocast region at", " at")
        return text


MAX_MESSAGE = 120


def opens_region(facts: ModuleFacts, function: Frame) -> bool:
    """Does the function open an autocast region that can be enabled (a with-statement in it, or its decorator)?
    Then it manages autocast itself: what it computes outside its regions is float32."""
    region = facts.region_of(function)
    if region is not None and region.active:
        return True
    return any(frame.function() is function and (region := facts.region_of(frame)) is not None and region.active
               and region.frame is frame for frame in facts.with_frames.values())


def switched_off(facts: ModuleFacts, frame: Frame, region: Region) -> bool:
    """Is the region mixed precision switched off rather than an fp32 island: written with a low-precision dtype
    (`autocast("cuda", dtype=torch.float16, enabled=False)`), or running a training step's backward? Then it
    says nothing of its callers' autocast."""
    return region.dtype is not None or any(event.kind is EventKind.BACKWARD and event.frame.is_within(frame)
                                           for event in facts.events)


def only_autograd(facts: ModuleFacts, frame: Frame) -> bool:
    """Does the region only run autograd (`torch.autograd.grad(...)`, `loss.backward()`), to keep it out of
    autocast? Every call in it is a backward or inside one's arguments."""
    backwards = [event.node for event in facts.events if event.kind is EventKind.BACKWARD
                 and event.frame.is_within(frame)]
    if not backwards:
        return False
    spans = [facts.position(node) for node in backwards]
    for call in facts.calls:
        if not call.frame.is_within(frame):
            continue
        start, end = facts.position(call.node)
        if not any((s.line, s.column) <= (start.line, start.column) and (end.line, end.column) <= (e.line, e.column)
                   for s, e in spans):
            return False
    return True


SCALAR_ANNOTATIONS = frozenset({"int", "bool", "str", "float", "complex", "bytes"})


def scalar_parameters(function: cst.FunctionDef) -> set[str]:
    """Parameters that are surely not tensors: annotated `int`, `bool`, `str`, `float` (a Python number), or
    with a number, bool or string default. A `None` default says nothing (`mask=None` is often a tensor)."""
    params = function.params
    found: set[str] = set()
    for param in (*params.posonly_params, *params.params, *params.kwonly_params):
        annotation = param.annotation.annotation if param.annotation is not None else None
        default = param.default
        if isinstance(default, cst.UnaryOperation):
            default = default.expression
        if (isinstance(annotation, cst.Name) and annotation.value in SCALAR_ANNOTATIONS) or isinstance(
                default, (cst.Integer, cst.Float, cst.SimpleString, cst.ConcatenatedString)) or (
                isinstance(default, cst.Name) and default.value in ("True", "False")):
            found.add(param.name.value)
    return found


def parameter_sources(function: cst.FunctionDef, message: str, method: bool) -> dict[str, Source]:
    """The function's parameters that may hold tensors (not `self`/`cls` of a method, not scalars): reported
    only where the region uses them as floating tensors."""
    params = function.params
    names = [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)]
    if method and names and names[0] in ("self", "cls"):
        names = names[1:]
    scalars = scalar_parameters(function)
    return {name: Source(message, parameter=True, handed_on=True) for name in names if name not in scalars}


def arriving(facts: ModuleFacts, function: Frame | None, island: Frame, region: Region,
             implied: bool) -> dict[str, Source]:
    """Names that come into the disabled region low precision, at its start: assigned in an enabled region of
    the function before it (the enclosing one, or an earlier sibling), or, when the function opens no region of
    its own (`implied`: the region says its callers run it under autocast), computed anywhere before it or
    passed in as parameters. Kept through dtype-preserving rebindings, dropped by any other; an assignment in a
    branch that excludes the region's (`if amp: ... else: ...`) never reaches it. Known torch.nn modules count
    for what autocast makes of their output (`nn.Embedding` of token ids: float32); a user module or function
    counts when handed something that may be a tensor (not sizes: `scalars`)."""
    line = facts.line_of(region.opener)
    low: dict[str, Source] = {}
    definition = function.node if function is not None and isinstance(function.node, cst.FunctionDef) else None
    if implied and definition is not None:
        low.update(parameter_sources(definition, f"parameter `{{name}}` enters the fp32 region at line {line} "
                                                 f"without `.float()`: {{dtype}} under the callers' autocast",
                                     bool(function.class_name)))
    scalars = scalar_parameters(definition) if definition is not None else set()
    relevant = [a for a in facts.assignments_in(function) if a.index < island.start_index
                and a.frame.function() is function and not exclusive(facts, a.frame, island)]
    where_low: dict[str, Frame] = {}  # the frame of the assignment that made each name in `low` low
    # The calls each name may hold the result of (one per branch of an `if`), None when it may hold anything else.
    producers: dict[str, list[cst.Call] | None] = {}
    where_produced: dict[str, Frame] = {}
    for assignment in sorted(relevant, key=lambda a: a.index):
        where = facts.region_of(assignment.frame)
        computed = {name for name, source in low.items() if not source.parameter}
        how = lowering(facts, assignment.frame, scalars)
        how.module_output = returns_float32(facts, how.module_output, assignment.frame)
        how.library = dtype_keeping(facts, assignment.frame, False)
        cast_on_purpose = returns_autocast_dtype(facts, assignment.frame)
        implied_how = Lowering(how.module_output, how.scalars, dtype_keeping(facts, assignment.frame, True))

        entry = mapping_entry(facts, assignment.frame)

        def source_of(value: cst.BaseExpression) -> Source | None:
            if deliberately_low(value) or cast_on_purpose(value):
                return None  # cast on purpose to the autocast dtype, for a mixed-precision kernel
            item = item_key(value)
            calls = producers.get(item[0]) if item is not None else None
            if calls:  # an entry of the dict a call returned: that entry's dtype, not the call's
                verdicts = [entry(call, item[1]) for call in calls]
                if all(verdicts):
                    return None  # built integer, bool or float32 by the function that returns it
                if where is None and implied and all(verdict is not False for verdict in verdicts):
                    return None  # low only by the callers' autocast, from a mapping whose maker is unknown
            if where is not None and where.active and where.via in ("with", "decorator"):
                if not is_low_precision(value, computed, how):
                    return None
                return Source(f"`{{name}}` enters the fp32 region at line {line} without `.float()`: {{dtype}} "
                              f"from the autocast region at line {facts.line_of(where.opener)}",
                              dtype=dtype_words(where), container=container(value))
            if where is None and implied:
                if not is_low_precision(value, computed, implied_how):
                    return None
                return Source(f"`{{name}}` enters the fp32 region at line {line} without `.float()`: {{dtype}} "
                              f"under the callers' autocast", container=container(value), handed_on=True)
            kept = kept_low(value, low)
            if kept is not None and isinstance(value, cst.Subscript):
                return Source(kept.message, kept.dtype, kept.parameter, handed_on=kept.handed_on)  # an item
            return kept

        value = assignment.value
        targets = list(assignment.targets)
        if len(targets) > 1 and isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(targets) \
                and not any(isinstance(e, cst.StarredElement) for e in value.elements):
            pairs = [(name, element.value) for name, element in zip(targets, value.elements)]  # a, b = f(x), g(y)
        else:
            whole = source_of(value) if len(targets) == 1 or isinstance(value, (cst.Call, cst.Name)) else None
            if whole is not None and len(targets) > 1:  # a, b = outputs: each an item, not the container
                whole = Source(whole.message, whole.dtype, whole.parameter, handed_on=whole.handed_on)
            pairs = [(name, None) for name in targets]
        for name, element in pairs:
            if "." in name:
                continue
            produced = [value] if len(targets) == 1 and isinstance(value, cst.Call) else None
            earlier_frame = where_produced.get(name)
            if earlier_frame is not None and not earlier_frame.is_within(assignment.frame):
                # bound in a branch the earlier binding is not in: either may reach
                earlier = producers[name]
                produced = earlier + produced if earlier is not None and produced is not None else None
            producers[name] = produced
            where_produced[name] = assignment.frame
            part = element if element is not None else value
            if is_scalar(part, scalars):
                scalars.add(name)
            else:
                scalars.discard(name)
            source = source_of(element) if element is not None else whole
            if source is not None:
                low[name] = source
                where_low[name] = assignment.frame
            elif name in where_low and exclusive(facts, where_low[name], assignment.frame):
                pass  # the other branch of an `if` (`outs = self._cache` after `outs = model(x)`): either reaches
            else:
                low.pop(name, None)
                where_low.pop(name, None)
    return low


def container(value: cst.BaseExpression) -> bool:
    """A dict, list, tuple or set built whole (`{"logits": h}`, `[a, b]`, a comprehension): no `.float()` on it."""
    return isinstance(value, (cst.Dict, cst.List, cst.Tuple, cst.Set, cst.ListComp, cst.DictComp, cst.SetComp))


def kept_low(value: cst.BaseExpression, low: dict[str, Source]) -> Source | None:
    """Outside autocast, the source of a low-precision name that `value` keeps the dtype of (`h`, `h[0]`,
    `h.view(...)`); None for anything else (an op mixing it with a float32 tensor may promote it)."""
    if isinstance(value, cst.Subscript):
        return kept_low(value.value, low)
    if isinstance(value, cst.Name):
        return low.get(value.value)
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and not is_float32_cast(value) \
            and value.func.attr.value in FLOAT_PRESERVING:
        return kept_low(value.func.value, low)
    return None


