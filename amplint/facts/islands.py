"""What comes into an fp32 island (an `autocast(enabled=False)` region, or a function decorated with one) and is
computed with there without a cast: for each such name, where it comes from (`Source`: a value computed under
the enclosing autocast, a parameter and what the project's callers pass it, a container, a library call's
output), what is shown of its dtype (low precision, float32, or not shown) and whether a use in the island
computes in it (an op that runs in its dtype or raises on mixed dtypes) rather than only handing it to a
function or module of the user's whose definition says what it does. AMP006 reports the inputs shown low
precision and computed with; the opt-in AMP015 the rest of the contract (`IslandInput.known`)."""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, replace
from typing import Iterator

from amplint.lazy import libcst as cst
from amplint import vocabulary as vocab
from amplint.vocabulary import Effect
from amplint.facts.walk import walk
from amplint.lazy import visitor_class

from amplint.facts.model import Region, RegionState
from amplint.facts.module import ModuleFacts, exclusive
from amplint.facts.dtypes import (FLOAT_PRESERVING, LOW, UNKNOWN, Lowering, UncastUses, conversion, deliberately_low,
                                  floating_names, is_scalar, low_state, lowering, module_output,
                                  tensor_module, tree_of, LibraryArguments, ast_function, ast_calls_at, ast_low_origin,
                                  _ast_binding)
from amplint.calls import is_float32_cast
from amplint.facts.model import Frame
from amplint.facts.shapes import call_shape
from amplint.index.functions import ITEM_KEY
from amplint.index.project import MAX_DEPTH, Target
from amplint.index.shapes import call_shape as ast_call_shape


def dtype_words(region: Region) -> str:
    """The region's low-precision dtype in words: as written, else the device's default (CUDA float16, CPU
    bfloat16), else "bfloat16/float16"."""
    dtype = region.dtype or {"cuda": vocab.FLOAT16, "cpu": vocab.BFLOAT16}.get(region.device or "")
    return {vocab.BFLOAT16: vocab.BFLOAT16, vocab.FLOAT16: vocab.FLOAT16}.get(dtype or "", "bfloat16/float16")


@dataclass
class IslandInput:
    """A name that comes into an fp32 region and is computed with there uncast (`uses`, in order), with what is
    known of it: `known` (shown low precision and met by an op that computes in it or raises on mixed dtypes:
    AMP006) or not (AMP015, the contract taken literally)."""

    name: str
    uses: list
    at: cst.Name  # the use reported
    source: Source
    known: bool
    floating: bool  # surely a floating tensor: `.float()` keeps its meaning
    starred: bool  # unpacked into a call (`kernel(*feats)`): no `.float()` on it
    in_place: bool  # an in-place op writes into it in the region: `.float()` would write into a copy


def island_inputs(facts: ModuleFacts) -> list[IslandInput]:
    """Every name coming into an fp32 region of the module and computed with there uncast (AMP006's and AMP015's
    findings, told apart by `IslandInput.known`); computed once per module."""
    found = getattr(facts, "_island_inputs", None)
    if found is None:
        found = facts._island_reports = list(_island_inputs(facts))
    return found


def _island_inputs(facts: ModuleFacts) -> Iterator[IslandInput]:
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
        yield from _inputs(facts, frame.node.body, sources, floats, frame)
    for info in facts.functions:
        region = facts.region_of(info.frame)
        if region is None or region.state is not RegionState.OFF or region.via != "decorator":
            continue
        line = info.node.name
        sources = parameter_sources(facts, info.frame, info.node, facts.line_of(line), bool(info.frame.class_name),
                                    decorated=True)
        yield from _inputs(facts, info.node.body, sources, set(), info.frame)


def _inputs(facts: ModuleFacts, body: cst.BaseSuite, sources: dict[str, Source], floats: set[str],
             frame) -> Iterator[IslandInput]:
    """One report per incoming name used uncast in `body`: AMP006's when the name is known low precision and a
    use computes in it (not only handed to a function or module of the user's, whose definition says what it
    does), outside a path the code keeps low precision on purpose (a branch on the value's own dtype, weights
    cast to its dtype, the other branch of a float32 cast)."""
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
    deliberate = deliberate_paths(facts, body)
    by_name: dict[str, list[cst.Name]] = {}
    listed = {id(use) for use in visitor.uses}
    followed = [use for use in visitor.handed_parameters  # a parameter known low, handed whole to a method here
                if id(use) not in listed and sources[use.value].state == LOW
                and computes_with(facts, *visitor.handed_at[id(use)], frame) is not None]
    for use in sorted([*visitor.uses, *followed], key=lambda node: (facts.position(node)[0].line,
                                                      facts.position(node)[0].column)):
        line = facts.line_of(use)
        if any(start <= line <= end for start, end in deliberate.get(use.value, ())):
            continue
        by_name.setdefault(use.value, []).append(use)
    for name, uses in by_name.items():
        source = sources[name]
        harmful = [use for use in uses if id(use) not in visitor.handed]
        if source.state == LOW and not harmful:  # handed whole to methods of this module: what do they do with it?
            harmful = [use for use in uses if id(use) in visitor.handed_at
                       and computes_with(facts, *visitor.handed_at[id(use)], frame) is not None]
            for use in harmful[:1]:
                where, callee, param = computes_with(facts, *visitor.handed_at[id(use)], frame)
                source = replace(source, notes=(*source.notes, (where, f"`{name}` is computed with here as "
                                                                       f"`{param}` of `{callee}()`, uncast")))
        known = source.state == LOW and bool(harmful)
        yield IslandInput(name, uses, harmful[0] if known else uses[0], source, known, name in floats,
                     any(id(use) in visitor.starred for use in uses), any(id(use) in visitor.in_place for use in uses))


HANDED_DEPTH = MAX_DEPTH  # methods of the module followed from a use in an fp32 region (`forward` -> `_forward_impl` -> ...)


def computes_with(facts: ModuleFacts, call: cst.Call, position: int | None, keyword: str | None, frame,
                  depth: int = HANDED_DEPTH) -> tuple | None:
    """((None, line, column), function, parameter) where the function of this module that `call` runs (`self._forward_impl(h)`, `project(h)`) uses
    the parameter receiving the argument as a floating tensor, uncast (an fp32 `nn.Linear`, `F.linear`, a
    reduction, arithmetic), itself or in a method of the module it hands the parameter on to (`depth` calls
    deep); None when it does not, or when the callee is not a function of this module. The callee runs where the
    call is: in the fp32 region, autocast off."""
    record = _call_records(facts).get(id(call))
    info = _functions_by_qualname(facts).get(record) if record is not None else None
    if info is None or depth <= 0:
        return None
    params = info.node.params
    names = [p.name.value for p in (*params.posonly_params, *params.params)]
    if info.frame.class_name and names and names[0] in ("self", "cls"):
        names = names[1:]
    kwonly = {p.name.value for p in params.kwonly_params}
    name = keyword if keyword in (*names, *kwonly) else (names[position] if position is not None and
                                                         position < len(names) else None)
    if name is None or name in scalar_parameters(info.node) or name in deliberate_paths(facts, info.node.body):
        return None  # a number, or kept low on purpose there (`w.to(x.dtype)`, a branch on `x.dtype`)
    callee = info.frame
    visitor = visitor_class(UncastUses)(set(), set(), lambda func: tensor_module(facts, func, callee), {name},
                                        lambda func: module_output(facts, func, callee) in ("low", vocab.FLOAT32),
                                        callee_casts(facts, callee))
    walk(info.node.body, visitor)
    for use in visitor.uses:
        if use.value != name:
            continue
        if id(use) not in visitor.handed:
            start = facts.position(use)[0]
            return (None, start.line, start.column + 1), info.node.name.value, name
        if id(use) in visitor.handed_at:
            deeper = computes_with(facts, *visitor.handed_at[id(use)], callee, depth - 1)
            if deeper is not None:
                return deeper
    return None


def _call_records(facts: ModuleFacts) -> dict[int, str]:
    """id of each call node to a function of this module -> that function's qualified name."""
    found = facts.__dict__.get("_amp006_call_records")
    if found is None:
        found = facts.__dict__["_amp006_call_records"] = {
            id(call.node): qualname for qualname, calls in facts.call_sites.items() for call in calls}
    return found


def _functions_by_qualname(facts: ModuleFacts) -> dict:
    found = facts.__dict__.get("_amp006_functions")
    if found is None:
        found = facts.__dict__["_amp006_functions"] = {}
        for info in facts.functions:
            found.setdefault(info.qualname, info)
    return found


def deliberate_paths(facts: ModuleFacts, body: cst.BaseSuite) -> dict[str, list[tuple[int, int]]]:
    """Lines of the region where a name is kept low precision on purpose: the whole region when an `if` in it
    tests the name's own dtype (`if x.dtype is torch.bfloat16:`, `if x.dtype in (torch.float16,
    torch.bfloat16):`: the code decides its precision itself, on both paths) or when it casts something to the
    name's dtype (`w.to(x.dtype)`, `w.type_as(x)`), and the `else` of an `if` whose body casts the name to float32
    (`if force_fp32: x = x.float() ... else: ...`)."""
    found: dict[str, list[tuple[int, int]]] = {}
    start, end = facts.position(body)
    for node in _descendants(body):
        if isinstance(node, cst.If):
            for name in _dtype_tested(node.test):  # the code decides the value's precision itself
                found.setdefault(name, []).append((start.line, end.line))
            if node.orelse is not None:
                other = facts.position(node.orelse)
                for name in _cast_names(node.body):
                    found.setdefault(name, []).append((other[0].line, other[1].line))
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.args:
            first = node.args[0].value
            if node.func.attr.value in vocab.CONVERT_METHODS and isinstance(first, cst.Attribute) \
                    and first.attr.value == vocab.DTYPE and isinstance(first.value, cst.Name):
                found.setdefault(first.value.value, []).append((start.line, end.line))
            elif node.func.attr.value == "type_as" and isinstance(first, cst.Name):
                found.setdefault(first.value, []).append((start.line, end.line))
    return found


def _descendants(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    pending = [node]
    while pending:
        current = pending.pop()
        yield current
        if isinstance(current, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            continue
        pending.extend(current.children)


def _dtype_tested(test: cst.BaseExpression) -> set[str]:
    """The names whose `.dtype` a test reads (`x.dtype is torch.bfloat16`, `x.dtype in LOW`, `not x.dtype == ...`)."""
    return {node.value.value for node in _descendants(test) if isinstance(node, cst.Attribute)
            and node.attr.value == vocab.DTYPE and isinstance(node.value, cst.Name)}


def _cast_names(block: cst.CSTNode) -> set[str]:
    """The names a block casts to float32 (`x = x.float()`, `x.float()` anywhere in it)."""
    return {node.func.value.value for node in _descendants(block) if isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute) and isinstance(node.func.value, cst.Name)
            and is_float32_cast(call_shape(node))}


def returns_float32(facts: ModuleFacts, module_output, frame: Frame):
    """`module_output`, and "float32" for a project function whose every return is computed with autocast off
    (the index's `returns_float32`: `return self.head(tok.float())` in its own fp32 region)."""

    def output(func: cst.BaseExpression) -> str | None:
        kind = module_output(func)
        if kind is not None:
            return kind
        summary = facts.project_function(func, frame)[1]
        return vocab.FLOAT32 if summary is not None and Effect.RETURNS_FLOAT32 in summary.does else None

    return output


def returns_autocast_dtype(facts: ModuleFacts, frame: Frame):
    """Is a value the result of a project function that casts what it returns to the autocast dtype on purpose
    (the index's `returns_autocast_dtype`: `downcast_x = cast_if_autocast_enabled(x)` for a fused kernel)?"""

    def cast(value: cst.BaseExpression) -> bool:
        summary = facts.project_function(value.func, frame)[1] if isinstance(value, cst.Call) else None
        return summary is not None and Effect.RETURNS_AUTOCAST_DTYPE in summary.does

    return cast


def _parameters(target: Target, summary) -> list[str]:
    """The parameters a call's arguments bind, by position: a method's first (`self`, `cls`) left out."""
    params = list(summary.params)
    return params[1:] if "." in target.qualname and params and params[0] in ("self", "cls") else params


def dtype_keeping(facts: ModuleFacts, frame: Frame, libraries: bool):
    """The arguments of a call whose dtype its result carries under autocast, for a project function that runs no
    op autocast lowers (the index's `lowers_nothing`, the arguments bound to its `keeps`) or, with `libraries`
    (no autocast region in view), a library's function, imported from a module the project does not hold
    (`import k2`: all its arguments). None for any other call, and without the project's index."""
    view = facts.project

    def carried(call: cst.Call) -> list[cst.BaseExpression] | None:
        if view is None:
            return None
        qualified = facts.imports.qualify(call.func)
        if libraries and qualified is not None and qualified.split(".")[0] != "torch" and view.outside(qualified):
            return LibraryArguments(arg.value for arg in call.args)  # what it returns is not shown
        target, summary = facts.project_function(call.func, frame)
        if summary is None or Effect.LOWERS_NOTHING not in summary.does:
            return None
        params = _parameters(target, summary)
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

    def entry(call: cst.Call, key: str) -> bool | None:
        target = facts.project_function(call.func, frame)[0]
        return facts.project.plain_item(target, f"{ITEM_KEY}{key}") if target is not None else None

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

    def casts(call: cst.Call, position: int | None, keyword: str | None) -> bool:
        target, summary = facts.project_function(call.func, frame)
        if summary is None or not summary.casts:
            return False
        params = _parameters(target, summary)
        name = keyword if keyword is not None else (params[position] if position is not None and
                                                    position < len(params) else None)
        return name in summary.casts

    return casts


@dataclass
class Source:
    """Why a name may be low precision where the disabled region uses it: the finding's message, `{name}` standing
    for the name reported (a rebinding `g = h.view(...)` keeps `h`'s reason) and `{dtype}` for its dtype; `state`
    LOW when the code shows it (an op autocast lowers, in an enabled region; a caller passing such a value),
    UNKNOWN when it does not (a user module's output, a parameter no caller shows low); `notes`: where it became
    low precision."""

    message: str
    dtype: str = "bfloat16/float16"
    parameter: bool = False  # reported only where used as a floating tensor; never a safe fix
    container: bool = False  # a dict, list or tuple of tensors: no `.float()` fix
    # Known low only by the callers' autocast (a parameter, or computed from what the function was handed): its
    # star-unpacking into a call (`kernel(*args)`) hands an argument list on as it came, not a use.
    handed_on: bool = False
    state: str = UNKNOWN
    notes: tuple = ()
    line: int = 0  # the fp32 region's line

    def text(self, name: str) -> str:
        """The message for `name`, said shorter while it passes `MAX_MESSAGE` characters (long names)."""
        text = self.message.replace("{name}", name).replace("{dtype}", self.dtype)
        if len(text) > MAX_MESSAGE:
            text = text.replace(" without `.float()`", " uncast").replace(" is used uncast", " used uncast")
        if len(text) > MAX_MESSAGE:
            text = text.replace(" under the callers' autocast", "").replace(" from the autocast region at", " at")
        return text

    def kept(self, **changes) -> Source:
        """The same reason, for a value derived from this one."""
        fields = dict(message=self.message, dtype=self.dtype, parameter=self.parameter, container=self.container,
                      handed_on=self.handed_on, state=self.state, notes=self.notes, line=self.line)
        fields.update(changes)
        return Source(**fields)


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
    return region.dtype is not None or any(event.kind == Effect.BACKWARD and event.frame.is_within(frame)
                                           for event in facts.events)


def only_autograd(facts: ModuleFacts, frame: Frame) -> bool:
    """Does the region only run autograd (`torch.autograd.grad(...)`, `loss.backward()`), to keep it out of
    autocast? Every call in it is a backward or inside one's arguments."""
    backwards = [event.node for event in facts.events if event.kind == Effect.BACKWARD
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


def parameter_sources(facts: ModuleFacts, frame: Frame, function: cst.FunctionDef, line: int, method: bool,
                      decorated: bool = False) -> dict[str, Source]:
    """The function's parameters that may hold tensors (not `self`/`cls` of a method, not scalars): reported only
    where the region uses them as floating tensors. A parameter is known low precision when a project caller of
    the function passes it a value known low (`caller_low`); else its dtype is unknown."""
    params = function.params
    names = [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)]
    if method and names and names[0] in ("self", "cls"):
        names = names[1:]
    scalars = scalar_parameters(function)
    where = f"of fp32 function `{function.name.value}` is used" if decorated else \
        f"enters the fp32 region at line {line}"
    found = {}
    for name in names:
        if name in scalars or callers_pass_float32(facts, frame, name):
            continue  # a number, or float32 from every project caller: known, not an unknown input
        passed = caller_low(facts, frame, name)
        if passed is not None:
            dtype, notes = passed
            found[name] = Source(f"parameter `{{name}}` {where} without `.float()`: {{dtype}} as its caller passes it",
                                 dtype=dtype, parameter=True, handed_on=True, state=LOW, notes=notes, line=line,
                                 container=isinstance(notes, ContainerNotes))
        else:
            found[name] = Source(f"parameter `{{name}}` {where}", parameter=True, handed_on=True, line=line)
    return found


def caller_low(facts: ModuleFacts, frame: Frame, param: str):
    """(dtype words, notes) when a project caller of the function passes `param` a value known low precision
    (every call site the index resolves to it, in this module or another: one such caller makes it low on that
    path); None when none is shown to (no caller seen: unknown)."""
    view = facts.project
    info = facts.function_info(frame)
    if view is None or info is None:
        return None
    found = _passed_low(facts, view, Target(view.path, info.qualname), param, CALLER_DEPTH, set())
    return ("bfloat16/float16", found) if found is not None else None


def callers_pass_float32(facts: ModuleFacts, frame: Frame, param: str) -> bool:
    """Does every project caller of the function the index resolves (one at least) pass `param` a value shown
    float32: a float32 cast (`x.float()`, `x.to(torch.float32)`), directly or through a name bound to one in the
    caller just before the call?"""
    view = facts.project
    info = facts.function_info(frame)
    if view is None or info is None:
        return False
    target = Target(view.path, info.qualname)
    summary = view.function(target)
    if summary is None or param not in summary.params:
        return False
    forward = target.qualname.rsplit(".", 1)[-1] in ("forward", "__call__")
    sites = list(view.callers(target, any_name=forward))
    if not sites:
        return False
    for site in sites:
        tree = tree_of(facts, view, site.caller.module)
        function = ast_function(tree, site.caller.qualname) if tree is not None else None
        if function is None:
            return False
        params = list(summary.params)
        if "." in target.qualname and params and params[0] in ("self", "cls") and _bound(site.call.callee, target):
            params = params[1:]
        calls = ast_calls_at(function, site.call.line, site.call.callee)
        if not calls:
            return False
        for node in calls:
            argument = _argument(node, params, param)
            if type(argument) is ast.Name:
                argument = _ast_binding(function, argument.id, node.lineno)
            if argument is None or not _ast_float32_cast(argument):
                return False
    return True


def _ast_float32_cast(node) -> bool:
    """`x.float()`, `x.double()`, `x.to(torch.float32)`, `x.type(torch.float32)` (the classifier's float32 casts)."""
    return type(node) is ast.Call and is_float32_cast(ast_call_shape(node))


CALLER_DEPTH = MAX_DEPTH  # callers followed up from the function (a caller's own parameter, a caller's region)


class ContainerNotes(tuple):
    """The notes of a caller passing a list or tuple of low-precision values (`head([f1, f2])`): the parameter is
    a container, which `.float()` does not cast."""


def _passed_low(facts: ModuleFacts, view, target: Target, param: str, depth: int, seen: set) -> tuple | None:
    """The notes of the first call site shown passing `param` of `target` a low-precision value, or None."""
    if depth <= 0 or (target, param) in seen:
        return None
    seen.add((target, param))
    summary = view.function(target)
    if summary is None or param not in summary.params:
        return None
    forward = target.qualname.rsplit(".", 1)[-1] in ("forward", "__call__")
    for site in list(view.callers(target, any_name=forward)):
        call = site.call
        tree = tree_of(facts, view, site.caller.module)
        caller_qualname = site.caller.qualname
        function = ast_function(tree, caller_qualname) if tree is not None else None
        if function is None:
            continue
        params = list(summary.params)
        if "." in target.qualname and params and params[0] in ("self", "cls") and _bound(call.callee, target):
            params = params[1:]
        class_name = caller_qualname.rsplit(".", 1)[0] if "." in caller_qualname else None
        for node in ast_calls_at(function, call.line, call.callee):
            argument = _argument(node, params, param)
            if argument is None:
                continue
            filename = None if site.caller.module == view.path else site.caller.module
            where = (filename, argument.lineno, argument.col_offset + 1)
            region = _region_on(view, site, depth)
            if region is not None:
                origin = ast_low_origin(argument, function, tree, class_name)
                if origin is not None:
                    opened = f"line {region.call.line}" if region.caller.module == view.path else \
                        f"{os.path.basename(region.caller.module)}:{region.call.line}"
                    under = f"under the autocast region around the call at {opened}" if region is not site \
                        else "under the autocast region around this call"
                    made = (filename, origin.lineno, origin.col_offset + 1)
                    passed = (where, f"`{_short(ast.unparse(argument))}` is passed as `{param}` here")
                    if type(origin) in (ast.List, ast.Tuple):
                        return ContainerNotes(((where, f"`{_short(ast.unparse(argument))}` is passed as `{param}` "
                                                       f"here, a {type(origin).__name__.lower()} of values low "
                                                       f"precision {under}"),))
                    if origin is argument:
                        return ((where, f"`{_short(ast.unparse(argument))}` is passed as `{param}` here, low "
                                        f"precision: an op autocast lowers, run {under}"),)
                    return ((made, f"`{_short(ast.unparse(origin))}` is low precision here: an op autocast "
                                   f"lowers, run {under}"), passed)
            if type(argument) is ast.Name and type(function) is not ast.Module and \
                    _ast_binding(function, argument.id, node.lineno) is None:
                inner = _passed_low(facts, view, site.caller, argument.id, depth - 1, seen)
                if inner is not None:
                    kind = ContainerNotes if isinstance(inner, ContainerNotes) else tuple
                    return kind((*inner, (where, f"passed on as `{param}` here")))
    return None


def _bound(callee: str, target: Target) -> bool:
    """Is the method called on an object (`self.f(x)`, `obj(x)`), its first parameter that object, rather than
    through its class (`Cls.f(obj, x)`)?"""
    owner = target.qualname.rsplit(".", 2)[-2]
    return callee.rpartition(".")[0].rsplit(".", 1)[-1] != owner


def _argument(call: ast.Call, params: list[str], param: str):
    """The argument a call binds to `param` (by keyword or position); None when not passed or unpacked."""
    for keyword in call.keywords:
        if keyword.arg == param:
            return keyword.value
    if param not in params:
        return None
    index = params.index(param)
    for position, argument in enumerate(call.args):
        if type(argument) is ast.Starred:
            return None
        if position == index:
            return argument
    return None


def _short(text: str, limit: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _region_on(view, site, depth: int):
    """The call site under an enabled autocast region that the site runs in: itself (a region around it, or its
    function's decorator), or a call of its function, `depth` callers up; None when none is seen."""
    frontier, seen = [site], set()
    for _ in range(depth):
        following = []
        for current in frontier:
            if current.call.in_region:
                return current
            caller = current.caller
            if caller.qualname == "<module>" or caller in seen:
                continue
            seen.add(caller)
            forward = caller.qualname.rsplit(".", 1)[-1] in ("forward", "__call__")
            following.extend(view.callers(caller, any_name=forward))
        frontier = following
    return None


def arriving(facts: ModuleFacts, function: Frame | None, island: Frame, region: Region,
             implied: bool) -> dict[str, Source]:
    """Names that come into the disabled region, at its start, with what is known of their dtype (`low_state`):
    assigned in an enabled region of the function before it (the enclosing one, or an earlier sibling), or, when
    the function opens no region of its own (`implied`: the region shows its callers run it under autocast),
    computed anywhere before it, or its parameters (known low only by what the callers pass). Kept through
    dtype-preserving rebindings, dropped by any other; an assignment in a branch that excludes the region's (`if
    amp: ... else: ...`) never reaches it. Known torch.nn modules count for what autocast makes of their output
    (`nn.Linear`: low; `nn.Embedding` of token ids: float32); a user module or function's output is unknown."""
    line = facts.line_of(region.opener)
    low: dict[str, Source] = {}
    definition = function.node if function is not None and isinstance(function.node, cst.FunctionDef) else None
    if implied and definition is not None:
        low.update(parameter_sources(facts, function, definition, line, bool(function.class_name)))
    scalars = scalar_parameters(definition) if definition is not None else set()
    relevant = [a for a in facts.assignments_in(function) if a.index < island.start_index
                and a.frame.function() is function and not exclusive(facts, a.frame, island)]
    where_low: dict[str, Frame] = {}  # the frame of the assignment that made each name in `low` low
    # The calls each name may hold the result of (one per branch of an `if`), None when it may hold anything else.
    producers: dict[str, list[cst.Call] | None] = {}
    where_produced: dict[str, Frame] = {}
    for assignment in sorted(relevant, key=lambda a: a.index):
        where = facts.region_of(assignment.frame)
        computed = {name: source.state for name, source in low.items() if not source.parameter}
        how = lowering(facts, assignment.frame, scalars)
        how.module_output = returns_float32(facts, how.module_output, assignment.frame)
        how.library = dtype_keeping(facts, assignment.frame, False)
        cast_on_purpose = returns_autocast_dtype(facts, assignment.frame)
        implied_how = Lowering(how.module_output, how.scalars, dtype_keeping(facts, assignment.frame, True))

        entry = mapping_entry(facts, assignment.frame)

        def origin(value: cst.BaseExpression, state: str | None, text: str) -> tuple:
            """The note saying where a value became low precision: the value's own op when it is one."""
            if state != LOW:
                return ()
            made = _root_name(value)
            if made is not None and made in low and low[made].state == LOW and low[made].notes:
                return low[made].notes  # derived from a value known low: where that one became low
            return ((value, f"`{_short(facts.code(value))}` is low precision here: {text}"),)

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
                state = low_state(value, computed, how)
                if state is None:
                    return None
                opened = facts.line_of(where.opener)
                return Source(f"`{{name}}` enters the fp32 region at line {line} without `.float()`: {{dtype}} "
                              f"from the autocast region at line {opened}",
                              dtype=dtype_words(where), container=container(value), state=state, line=line,
                              notes=origin(value, state, f"computed under the autocast region at line "
                                                         f"{opened}"))
            if where is None and implied:
                state = low_state(value, computed, implied_how)
                if state is None:
                    return None
                return Source(f"`{{name}}` enters the fp32 region at line {line} without `.float()`: {{dtype}} "
                              f"under the callers' autocast", container=container(value), handed_on=True,
                              state=state, line=line,
                              notes=origin(value, state, f"an op autocast lowers, run under the autocast "
                                                         f"the fp32 region at line {line} shows on"))
            kept = kept_low(value, low)
            if kept is not None and isinstance(value, cst.Subscript):
                return kept.kept(container=False)  # an item
            return kept

        value = assignment.value
        targets = list(assignment.targets)
        if len(targets) > 1 and isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(targets) \
                and not any(isinstance(e, cst.StarredElement) for e in value.elements):
            pairs = [(name, element.value) for name, element in zip(targets, value.elements)]  # a, b = f(x), g(y)
        else:
            whole = source_of(value) if len(targets) == 1 or isinstance(value, (cst.Call, cst.Name)) else None
            if whole is not None and len(targets) > 1:  # a, b = outputs: each an item, not the container
                whole = whole.kept(container=False)
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


def _root_name(value: cst.BaseExpression) -> str | None:
    """The name a chain of methods, indexing and views starts from (`h.view(...)[0].t()`: h)."""
    while True:
        if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
            value = value.func.value
        elif isinstance(value, (cst.Subscript, cst.Attribute)):
            value = value.value
        else:
            return value.value if isinstance(value, cst.Name) else None


def kept_low(value: cst.BaseExpression, low: dict[str, Source]) -> Source | None:
    """Outside autocast, the source of a low-precision name that `value` keeps the dtype of (`h`, `h[0]`,
    `h.view(...)`); None for anything else (an op mixing it with a float32 tensor may promote it)."""
    if isinstance(value, cst.Subscript):
        return kept_low(value.value, low)
    if isinstance(value, cst.Name):
        return low.get(value.value)
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and conversion(value) is None \
            and value.func.attr.value in FLOAT_PRESERVING:
        return kept_low(value.func.value, low)
    return None
