"""ModuleFacts: the AMP model of one module, computed once and shared by every rule.

It answers the questions rules ask: which autocast region does this code run in (lexically, or through
the function that calls it), is this name a GradScaler or an optimizer, which training-step events happen
in this function and in what order, is this code under no_grad/inference_mode.
"""

from __future__ import annotations

import os
import re
from functools import cached_property
from typing import TYPE_CHECKING

from amplint.lazy import libcst as cst
from amplint.lazy import visitor_class

from amplint import calls
from amplint import vocabulary as vocab
from amplint.facts import names as api
from amplint.facts.collect import Collector, target_names
from amplint.facts.walk import walk
from amplint.facts.model import (
    EVENT_KINDS,
    Assignment,
    Call,
    Event,
    Frame,
    FrameKind,
    FunctionInfo,
    Region,
    RegionState,
)
from amplint.facts.names import code_words, dotted_name
from amplint.facts.shapes import call_shape
from amplint.index.project import MAX_DEPTH
from amplint.vocabulary import Effect

if TYPE_CHECKING:
    from amplint.facts.locate import Point

_HANDED_OPTIMIZER = (Effect.SCALER_STEP, Effect.UNSCALE)  # a scaler's calls handed the optimizer they act on
NULL_CONTEXT = object()  # sentinel: an expression known to be a no-op context (nullcontext())
# How many levels of calls a region is followed through: one depth for calls within a module and across modules
# (the project index's), so that where a helper lives never changes a finding.
MAX_CALL_DEPTH = MAX_DEPTH


def literal_bool(node: cst.BaseExpression | None) -> bool | None:
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    return None


def literal_string(node: cst.BaseExpression | None) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def call_argument(call: cst.Call | list[cst.Arg], position: int | None, keyword: str) -> cst.BaseExpression | None:
    """The argument passed as `keyword=` or at `position` (positional only), else None. `call` may also be
    a plain list of arguments (a partial's arguments followed by the call's)."""
    args = call.args if isinstance(call, cst.Call) else call
    for arg in args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg.value
    positional = [arg for arg in args if arg.keyword is None and not arg.star]
    if position is not None and position < len(positional):
        return positional[position].value
    return None


def _grad_openers(frame: Frame | None):
    """The with-items and decorators around `frame` that may set the gradient mode, innermost first, up to the
    function it runs in (its decorators included)."""
    for current in frame.ancestors() if frame is not None else ():
        if current.kind is FrameKind.WITH:
            for item in reversed(current.node.items):
                yield item.item
        elif current.kind is FrameKind.FUNCTION:
            if isinstance(current.node, cst.FunctionDef):
                for decorator in reversed(current.node.decorators):
                    yield decorator.decorator
            return


class ModuleFacts:
    def __init__(self, module: cst.Module, source: str | None = None, project=None) -> None:
        """`source`: the text `module` was parsed from, when the caller has it (else it is regenerated).
        `project`: the project index seen from this module (`amplint.index.ModuleView`), which answers for
        calls that leave it; None for a module analysed alone (`project` then indexes this module only)."""
        self.module = module
        self._source = source
        self._project = project
        collector = visitor_class(Collector)()
        walk(module, collector)
        self.imports = collector.imports
        self.calls: list[Call] = collector.calls
        self.assignments: list[Assignment] = collector.assignments
        self.functions: list[FunctionInfo] = collector.functions
        self.with_frames = collector.with_frames
        self.function_frames = collector.function_frames
        if project is not None and "*" in (source or ""):
            self._star_bindings()
        for call in self.calls:
            call.qualified = self.imports.qualify(call.node.func)
        self._region_cache: dict[int, Region | None] = {}
        self._context_cache: dict[int, object] = {}
        self._scaler_cache: dict[tuple[str, int], bool] = {}
        self._scaled_cache: dict[tuple[str, int], str | None] = {}  # (name, id of its function) -> `_scaled_by`
        self._shapes: dict[int, tuple[cst.CSTNode, calls.CallShape]] = {}  # id -> (node kept alive, its shape)
        self._spans: dict[int, tuple[cst.CSTNode, tuple[Point, Point]]] = {}  # id -> (node kept alive, span)
        self._asked_one = False  # has `position` run a pass of its own yet
        self._everything = None  # a pass that located every node, once positions are asked for one by one

    def _star_bindings(self) -> None:
        """`from common import *` of a project module: the names that module imports (`import torch`, `from torch
        import autocast`) are bound here too, as Python's star import binds them (no `__all__` in that module, a
        name not starting with `_`); a name this module imports itself keeps its own import."""
        view = self._project
        try:
            record = view.record(view.path)
            stars = record.star_imports if record is not None else ()
            for module, level in stars:
                if not level and module in api.STAR_EXPORTS:
                    continue
                path = view._find(view.project.absolute(view.path, module, level), view.path)
                other = view.record(path) if path is not None and path != view.path else None
                if other is None or "__all__" in other.globals:
                    continue
                for local, (imported, name, relative) in other.imports.items():
                    if not relative and not local.startswith("_") and local not in self.imports.bindings:
                        self.imports.bindings[local] = imported if name is None else f"{imported}.{name}"
        except Exception:  # noqa: BLE001 - an index question that fails binds nothing
            return

    @property
    def project(self):
        """The project index seen from this module; for a module analysed alone, an index of this module only
        (built on first use), so that questions about its own functions have one answer everywhere."""
        if self._project is None:
            from amplint.index.project import standalone_view

            self._project = standalone_view(self.source)
        return self._project

    @property
    def source(self) -> str:
        if self._source is None:
            self._source = self.module.code
        return self._source

    # positions --------------------------------------------------------------------------------------
    def locate(self, nodes, extra=()):
        """Find the positions of these nodes in one code generation pass (amplint/facts/locate.py); asking
        for the positions of several nodes at once is cheaper than one by one. `extra`: nodes to find in the
        same pass with the nodes around them (a fix's replaced nodes); then the pass is returned."""
        missing = [node for node in nodes if id(node) not in self._spans]
        extra = list(extra)
        if not missing and not extra:
            return None
        from amplint.facts.locate import locate  # imports libcst's code generator state

        locations = locate(self.module, missing + extra, with_ancestors=bool(extra), source=self._source)
        for node in missing:
            if node in locations:
                self._spans[id(node)] = (node, locations.span(node))
        return locations

    def position(self, node: cst.CSTNode) -> tuple[Point, Point]:
        """(start, end) of a node's syntactic range: 1-based lines, 0-based columns (libcst's PositionProvider
        meaning). KeyError for a node that is not in the module.

        The first question is answered by a pass that stops early (most files ask one); from the second on, one
        pass locates every node of the module, so that a file with many findings costs two passes, not one per
        finding."""
        if id(node) in self._spans:
            return self._spans[id(node)][1]
        if self._everything is not None:
            return self._everything.span(node)
        if not self._asked_one:
            self._asked_one = True
            self.locate([node])
            return self._spans[id(node)][1]
        from amplint.facts.locate import locate_all

        self._everything = locate_all(self.module)
        return self._everything.span(node)

    def line_of(self, node: cst.CSTNode) -> int:
        return self.position(node)[0].line

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    # bindings ---------------------------------------------------------------------------------------
    def bindings(self, key: str, frame: Frame | None) -> list[Assignment]:
        """Assignments to `key` visible from `frame`: the function's own, else the class's (`self.x`),
        else the module's."""
        if key not in self._assignments_by_target:
            return []
        by_function, by_class = self._assignments_by_scope
        function = frame.function() if frame is not None else None
        if key.startswith("self.") and function is not None and function.class_name:
            return list(by_class.get((key, function.class_name), ()))
        local = by_function.get((key, id(function)))
        if local:
            return list(local)
        return list(by_function.get((key, id(None)), ()))

    # autocast regions -------------------------------------------------------------------------------
    def classify_context(self, expr: cst.BaseExpression, frame: Frame | None, depth: int = 0):
        """What entering `expr` does: a Region, NULL_CONTEXT, or None when it is not AMP-related."""
        key = id(expr)
        if key in self._context_cache:
            return self._context_cache[key]
        self._context_cache[key] = None  # guards against binding cycles
        result = self._classify_context(expr, frame, depth)
        self._context_cache[key] = result
        return result

    def _classify_context(self, expr, frame, depth):
        if depth > 4:
            return None
        if isinstance(expr, cst.Call):
            return self._classify_call(expr, frame, depth)
        if isinstance(expr, cst.IfExp):
            return self._combine(
                expr,
                self.classify_context(expr.body, frame, depth + 1),
                self.classify_context(expr.orelse, frame, depth + 1),
            )
        key = dotted_name(expr)
        if key is not None:
            values = [self.classify_context(a.value, a.frame, depth + 1) for a in self.bindings(key, frame)]
            regions = [v for v in values if isinstance(v, Region)]
            if regions and all(v is not None for v in values):
                state = regions[0].state
                if len(regions) != len(values) or any(r.state is not state for r in regions):
                    state = RegionState.MAYBE
                first = regions[0]
                return Region(expr, state, first.spelling, first.device, first.dtype, factory=first.factory,
                              factory_plain=first.factory_plain)
        return None

    def _combine(self, expr, left, right):
        regions = [r for r in (left, right) if isinstance(r, Region)]
        if not regions:
            return NULL_CONTEXT if left is NULL_CONTEXT and right is NULL_CONTEXT else None
        state = regions[0].state
        if len(regions) == 1 or regions[0].state is not regions[1].state:
            state = RegionState.MAYBE
        return Region(expr, state, regions[0].spelling, regions[0].device, regions[0].dtype,
                      factory=regions[0].factory, factory_plain=regions[0].factory_plain)

    def _classify_call(self, call: cst.Call, frame, depth):
        qualified = self.imports.qualify(call.func)
        if qualified in api.NULL_CONTEXTS:
            return NULL_CONTEXT
        if qualified in api.AUTOCAST_NEW or qualified in api.AUTOCAST_LEGACY:
            return self._autocast_region(call, qualified, self.shape(call))
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == vocab.AUTOCAST:
            receiver = dotted_name(call.func.value) or ""
            if receiver.rsplit(".", 1)[-1].lower().endswith(api.ACCELERATOR_NAMES):
                return Region(call, RegionState.MAYBE, self.code(call))
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == api.AUTOCAST_METHOD \
                and self.is_accelerator(dotted_name(call.func.value), frame):
            return Region(call, RegionState.MAYBE, self.code(call))
        # A factory: `amp_autocast = functools.partial(torch.autocast, "cuda")` or an alias of the class.
        key = dotted_name(call.func)
        if key is not None and depth < 4:
            for assignment in self.bindings(key, frame):
                value = assignment.value
                bound_method = self._accelerator_autocast(value, assignment.frame)
                if bound_method is not None:
                    # `ctx = self.accelerator.autocast if amp else nullcontext`, then `with ctx():`
                    return Region(call, RegionState.MAYBE, self.code(call))
                if isinstance(value, cst.Call) and self.imports.qualify(value.func) in api.PARTIAL and value.args:
                    target = self.imports.qualify(value.args[0].value)
                    if target in api.AUTOCAST_NEW or target in api.AUTOCAST_LEGACY:
                        return self._autocast_region(call, target, calls.bound(self.shape(value), self.shape(call)))
                target = self.imports.qualify(value)
                if target in api.AUTOCAST_NEW or target in api.AUTOCAST_LEGACY:
                    return self._autocast_region(call, target, self.shape(call))
                if isinstance(value, cst.IfExp):
                    # `ctx_class = torch.autocast if use_amp else contextlib.suppress`, then `ctx_class(...)`.
                    for branch in (value.body, value.orelse):
                        target = self.imports.qualify(branch)
                        if target in api.AUTOCAST_NEW or target in api.AUTOCAST_LEGACY:
                            region = self._autocast_region(call, target, self.shape(call))
                            if region.state is RegionState.ON:
                                region.state = RegionState.MAYBE
                            return region
        if key is not None and depth < 4:
            region = self._factory_region(call, key, frame, depth)
            if region is not None:
                return region
            for assignment in self.bindings(key, frame):
                # `ctx = amp_context`, `ctx = amp_context if amp else nullcontext`, then `with ctx():`
                value = assignment.value
                branches = (value.body, value.orelse) if isinstance(value, cst.IfExp) else (value,)
                for branch in branches:
                    name = dotted_name(branch)
                    region = self._factory_region(call, name, assignment.frame, depth + 1) if name else None
                    if region is not None:
                        if len(branches) > 1 and region.state is RegionState.ON:
                            region.state = RegionState.MAYBE
                        return region
        return None

    # regions made by a function of the project ------------------------------------------------------
    def _factory_region(self, call: cst.Call, key: str, frame: Frame | None, depth: int) -> Region | None:
        """`make_ctx()`, `self.autocast()`, `utils.amp_context()`: a call of a project function the index knows
        returns (or, a `@contextmanager`, yields inside) an autocast region (`returns_autocast`). A function of
        this module is read here (its returns' regions: state, device, dtype); one of another module opens a
        region maybe enabled, of unknown device and dtype (the index keeps only the fact)."""
        parts = key.split(".")
        if len(parts) > 2 and parts[0] not in ("self", "cls"):
            return None
        if (self.imports.qualify(call.func) or "").split(".", 1)[0] in ("torch", "contextlib", "functools"):
            return None
        view = self.project
        info = self.function_info(frame)
        try:
            target = view.resolve(info.qualname if info is not None else None, key)
            summary = view.function(target) if target is not None else None
        except Exception:  # noqa: BLE001 - an index question that fails knows nothing
            return None
        if summary is None or vocab.Effect.RETURNS_AUTOCAST not in summary.does:
            return None
        line = summary.lines.get(vocab.Effect.RETURNS_AUTOCAST, summary.line)
        if target.module == view.path:
            own = self._functions_by_qualname.get(target.qualname)
            found = self._returned_region(own, depth) if own is not None else None
            if found is not None:
                region, plain = found
                return Region(call, region.state, self.code(call), region.device, region.dtype,
                              factory=f"`{_short(key)}()`, line {line}", factory_plain=plain)
            return None
        where = f"{os.path.basename(target.module)}:{line}"
        return Region(call, RegionState.MAYBE, self.code(call), factory=f"`{_short(key)}()`, {where}")

    @cached_property
    def _functions_by_qualname(self) -> dict[str, FunctionInfo]:
        found: dict[str, FunctionInfo] = {}
        for info in self.functions:
            found.setdefault(info.qualname, info)
        return found

    def _returned_region(self, info: FunctionInfo, depth: int) -> tuple[Region, bool] | None:
        """The region entering the result of a call of this function opens, and whether the function is plain
        (it only returns torch's autocast or nullcontext objects: no generator): None when none is known."""
        key = ("factory", id(info.node))
        if key in self._context_cache:
            return self._context_cache[key]
        self._context_cache[key] = None  # guards against recursion
        returns, yields = _returns_and_yields(info.node)
        results = []
        if yields:
            for with_node in yields:
                frame = self.with_frames.get(with_node) if with_node is not None else info.frame
                results.append(self.region_of(frame))
        else:
            results = [self.classify_context(value, info.frame, depth + 1) for value in returns]
        regions = [result for result in results if isinstance(result, Region)]
        found = None
        if regions:
            states = {region.state for region in regions}
            state = states.pop() if len(states) == 1 and len(regions) == len(results) else RegionState.MAYBE
            if state is RegionState.MAYBE and all(region.state is RegionState.OFF for region in regions):
                state = RegionState.OFF
            first = next((region for region in regions if region.active), regions[0])
            plain = not yields and all(result is NULL_CONTEXT or (
                isinstance(result, Region) and result.factory is None and _plain_opener(self, result.opener))
                for result in results)
            found = (Region(first.opener, state, first.spelling, first.device, first.dtype), plain)
        self._context_cache[key] = found
        return found

    def _exit_stack_region(self, frame: Frame) -> Region | None:
        """`with ExitStack() as stack:` whose leading statements enter a region (`stack.enter_context(
        torch.autocast(...))`, maybe under an `if`: then maybe enabled): the region of the rest of the block."""
        node = frame.node
        stacks = {dotted_name(item.asname.name) for item in node.items if item.asname is not None
                  and isinstance(item.item, cst.Call) and self.imports.qualify(item.item.func) in api.EXIT_STACKS}
        stacks.discard(None)
        if not stacks or not isinstance(node.body, cst.IndentedBlock):
            return None
        found = None
        for call in self._enter_context_calls:
            if call.receiver not in stacks or not call.node.args or not any(
                    statement is node for statement in call.statements):
                continue
            position = call.statements.index(node) + 1
            statement = call.statements[position] if position < len(call.statements) else None
            body = list(node.body.body)
            if statement not in body or not all(self._enters_only(s) for s in body[:body.index(statement) + 1]):
                continue  # entered after other code ran in the block: not known here
            region = self.classify_context(call.node.args[0].value, call.frame)
            if isinstance(region, Region):
                state = region.state
                if call.frame is not frame and state is RegionState.ON:
                    state = RegionState.MAYBE  # under an `if` of the block
                found = Region(region.opener, state, region.spelling, region.device, region.dtype, via="exitstack",
                               frame=frame, factory=region.factory)
        return found

    @cached_property
    def _enter_context_calls(self) -> list[Call]:
        return [call for call in self.calls if call.method == api.ENTER_CONTEXT]

    def _enters_only(self, statement: cst.CSTNode) -> bool:
        """A statement of a block's head that only enters contexts (`stack.enter_context(...)`, also under an
        `if` whose test is a name or an attribute)."""
        if isinstance(statement, cst.If):
            return statement.orelse is None and dotted_name(statement.test) is not None and isinstance(
                statement.body, cst.IndentedBlock) and all(self._enters_only(s) for s in statement.body.body)
        if isinstance(statement, cst.SimpleStatementLine):
            return all(isinstance(small, cst.Expr) and isinstance(small.value, cst.Call)
                       and isinstance(small.value.func, cst.Attribute)
                       and small.value.func.attr.value == api.ENTER_CONTEXT for small in statement.body)
        return False

    def is_accelerator(self, key: str | None, frame: Frame | None) -> bool:
        """Is `key` an accelerate `Accelerator` or a Lightning `Fabric`: built from the class (`Accelerator(...)`,
        under any import spelling), or named so (`self.accelerator`, `fabric`: the convention the facts layer
        reads for an object handed in)?"""
        if not key:
            return False
        if key.rsplit(".", 1)[-1].lower().endswith(api.ACCELERATOR_NAMES):
            return True
        return any(isinstance(a.value, cst.Call) and self.imports.qualify(a.value.func) in api.ACCELERATOR_CLASSES
                   for a in self.bindings(key, frame))

    def _accelerator_autocast(self, value, frame: Frame | None):
        """`accelerator.autocast` (the bound method, not called) in a value or one branch of a conditional
        value: what calling the name bound to it opens."""
        for branch in ((value.body, value.orelse) if isinstance(value, cst.IfExp) else (value,)):
            if isinstance(branch, cst.Attribute) and branch.attr.value == api.AUTOCAST_METHOD \
                    and self.is_accelerator(dotted_name(branch.value), frame):
                return branch
        return None

    def _autocast_region(self, call: cst.Call, qualified: str, shape: calls.CallShape) -> Region:
        """The region a call of torch's autocast (`qualified`) opens, its arguments as `shape` holds them (a
        partial's first): `calls.autocast_call`."""
        opened = calls.autocast_call(shape, qualified)
        state = RegionState.MAYBE if opened.enabled is None else RegionState.ON if opened.enabled else RegionState.OFF
        return Region(call, state, self.code(call), opened.device, opened.low)

    def _decorator_region(self, function: cst.FunctionDef | cst.Lambda) -> Region | None:
        if not isinstance(function, cst.FunctionDef):
            return None
        for decorator in reversed(function.decorators):
            expr = decorator.decorator
            if isinstance(expr, cst.Call):
                qualified = self.imports.qualify(expr.func) or ""
                if qualified.endswith(vocab.CUSTOM_FWD) and call_argument(expr, None, vocab.CAST_INPUTS) is not None:
                    # custom_fwd(cast_inputs=...) runs forward with autocast off, inputs already cast.
                    return Region(expr, RegionState.OFF, self.code(expr), via=vocab.CUSTOM_FWD)
                region = self.classify_context(expr, None)
                if isinstance(region, Region):
                    return Region(region.opener, region.state, region.spelling, region.device, region.dtype,
                                  via="decorator")
        return None

    def region_of(self, frame: Frame | None) -> Region | None:
        """The innermost autocast region the code of `frame` runs in, within its own function."""
        if frame is None:
            return None
        key = id(frame)
        if key not in self._region_cache:
            self._region_cache[key] = self._region_of(frame)
        return self._region_cache[key]

    def _region_of(self, frame: Frame) -> Region | None:
        for current in frame.ancestors():
            if current.kind is FrameKind.WITH:
                for item in reversed(current.node.items):
                    region = self.classify_context(item.item, current.parent)
                    if isinstance(region, Region):
                        return Region(region.opener, region.state, region.spelling, region.device,
                                      region.dtype, via="with", frame=current, with_item=item,
                                      factory=region.factory, factory_plain=region.factory_plain)
                region = self._exit_stack_region(current)
                if region is not None:
                    return region
            elif current.kind is FrameKind.FUNCTION:
                region = self._decorator_region(current.node)
                if region is not None:
                    region.frame = current
                return region
        return None

    @cached_property
    def call_sites(self) -> dict[str, list[Call]]:
        """Calls to functions of this module, by the function's qualname: each call resolved as the project index
        resolves calls across modules (`ModuleView.resolve`: `f(...)`, `self.m(...)`, an object the code builds
        and calls, `h = Helper(); h.run()`, `self.runner()` for its `__call__`), so that what a call runs within a
        module and across modules has one answer. torch's own API is not the project's."""
        view = self.project
        qualnames = {f.qualname for f in self.functions}
        sites: dict[str, list[Call]] = {}
        for call in self.calls:
            if call.dotted is None or (call.qualified or "").split(".")[0] == "torch":
                continue
            info = self.function_info(call.frame)
            target = view.resolve(info.qualname if info else None, call.dotted)
            if target is not None and target.module == view.path and target.qualname in qualnames:
                sites.setdefault(target.qualname, []).append(call)
        return sites

    def function_info(self, frame: Frame | None) -> FunctionInfo | None:
        function = frame.function() if frame is not None else None
        if function is None:
            return None
        return self._function_infos.get(id(function))

    @cached_property
    def _function_infos(self) -> dict[int, FunctionInfo]:
        infos: dict[int, FunctionInfo] = {}
        for info in self.functions:
            infos.setdefault(id(info.frame), info)  # the first, as a search in order would find
        return infos

    def project_function(self, func: cst.BaseExpression, frame: Frame | None):
        """(target, what the index records of it) for the project function a call of `func` in `frame` runs, in
        this module or another, as the project index resolves it; (None, None) when it is not known."""
        view = self.project
        callee = dotted_name(func)
        if view is None or callee is None:
            return None, None
        info = self.function_info(frame)
        target = view.resolve(info.qualname if info else None, callee)
        return target, (view.function(target) if target is not None else None)

    def effective_region(self, frame: Frame, depth: int = MAX_CALL_DEPTH) -> tuple[Region | None, list[Call]]:
        """The region code runs in, following same-module callers when the function opens none itself.

        Returns the region and the chain of calls through which it is reached (empty when lexical).
        An enabled region is preferred over a possibly-enabled one.
        """
        region = self.region_of(frame)
        if region is not None or depth == 0:
            return region, []
        info = self.function_info(frame)
        if info is None:
            return None, []
        best: tuple[Region | None, list[Call]] = (None, [])
        for site in self.call_sites.get(info.qualname, []):
            if site.frame.function() is frame.function():
                continue  # recursion
            outer, chain = self.effective_region(site.frame, depth - 1)
            if outer is not None and outer.active:
                if best[0] is None or (best[0].state is RegionState.MAYBE and outer.state is RegionState.ON):
                    best = (outer, [site, *chain])
        return best

    # what calls do ----------------------------------------------------------------------------------
    def shape(self, node: cst.BaseExpression) -> calls.CallShape:
        """The neutral shape of a call, or of a callee named without one, qualified through this module's imports
        (amplint/facts/shapes.py): what the classifier (amplint/calls.py) reads. Built once per node."""
        key = id(node)
        if key not in self._shapes:
            self._shapes[key] = (node, call_shape(node, self.imports))
        return self._shapes[key][1]

    # grad mode --------------------------------------------------------------------------------------
    def no_grad_opener(self, frame: Frame | None) -> cst.CSTNode | None:
        """The `with torch.no_grad()`/`inference_mode()`/`set_grad_enabled(False)` item or decorator the code runs
        under, if any: the innermost one setting a known mode decides (`calls.innermost_grad_mode`; `enable_grad()`
        inside `no_grad()` turns gradients back on)."""
        openers = list(_grad_openers(frame))
        decided = calls.innermost_grad_mode(self.shape(opener) for opener in openers)
        return openers[decided[0]] if decided is not None and decided[1] is False else None

    # scalers and optimizers -------------------------------------------------------------------------
    def is_scaler_construction(self, value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.Call):
            return self.imports.qualify(value.func) in api.GRAD_SCALERS
        if isinstance(value, cst.IfExp):
            return self.is_scaler_construction(value.body) or self.is_scaler_construction(value.orelse)
        return False

    def scaler_disabled(self, key: str | None) -> bool:
        """Is every GradScaler bound to `key` built with a literal `enabled=False`? Such a scaler's scale()
        returns its input unchanged and step() is a plain optimizer step."""
        return key is not None and scaler_enabled(self, key) is False

    @cached_property
    def _scaler_usage_keys(self) -> set[str]:
        """Names used the way only a GradScaler is: `x.scale(loss).backward()`, `x.unscale_(opt)`, all of
        `x.scale(...)`, `x.step(...)` and `x.update()`, or `x.step(...)` and `x.update()` in one function."""
        keys = set()
        scales, steps, updates = set(), set(), set()
        stepped_in, updated_in = set(), set()  # (receiver, id of the function) of `x.step(arg)`, `x.update()`
        for call in self.calls:
            function = id(call.frame.function()) if call.frame else 0
            if call.method == vocab.UNSCALE and call.receiver:
                keys.add(call.receiver)
            if call.method == vocab.SCALE and len(call.node.args) == 1:
                scales.add(call.receiver)
            if call.method == vocab.STEP and call.node.args:
                steps.add(call.receiver)
                stepped_in.add((call.receiver, function))
            if call.method == vocab.UPDATE and not call.node.args:
                updates.add(call.receiver)
                updated_in.add((call.receiver, function))
            if call.method == vocab.BACKWARD and isinstance(call.node.func, cst.Attribute):
                inner = call.node.func.value
                if isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute) \
                        and inner.func.attr.value == vocab.SCALE:
                    receiver = dotted_name(inner.func.value)
                    if receiver:
                        keys.add(receiver)
        # `x.scale(loss)`, `x.step(optimizer)` and `x.update()` together: only a GradScaler has all three; and
        # `x.step(optimizer)` with `x.update()` in one function is a scaler handed in (an optimizer's step takes
        # no argument but a closure, and is not updated), as the index's `Summary.scaler_names`.
        keys.update(key for key in scales & steps & updates if key)
        keys.update(key for key, _ in stepped_in & updated_in if key)
        return keys

    def _imported_scaler(self, key: str, frame: Frame | None) -> bool:
        """A name imported from a project module that builds a GradScaler under it at module level, or read and
        never bound here while the modules importing this one build one under it (`ModuleView.module_binding`):
        the same object as in one module (`scaler = GradScaler()` beside the functions using it). A parameter of
        the function (or of one enclosing it) of that name is another object."""
        if key not in self.source:
            return False
        current = frame.function() if frame is not None else None
        while current is not None:
            info = self._function_infos.get(id(current))
            parameters = info.node.params if info is not None else None
            if parameters is not None and key in {p.name.value for p in (
                    *parameters.posonly_params, *parameters.params, *parameters.kwonly_params,
                    *(x for x in (parameters.star_arg, parameters.star_kwarg) if isinstance(x, cst.Param)))}:
                return False
            current = current.parent.function() if getattr(current, "parent", None) is not None else None
        return self.project.module_binding(key) in api.GRAD_SCALERS

    def is_scaler(self, key: str | None, frame: Frame | None) -> bool:
        """Is `key` (as seen from `frame`) a torch GradScaler? Unknown objects are not."""
        if not key:
            return False
        cache_key = (key, id(frame.function() if frame else None))
        if cache_key not in self._scaler_cache:
            bound = self.bindings(key, frame)
            self._scaler_cache[cache_key] = (
                any(self.is_scaler_construction(a.value) for a in bound) or key in self._scaler_usage_keys
                or (not bound and "." not in key and self._imported_scaler(key, frame))
            )
        return self._scaler_cache[cache_key]

    @cached_property
    def _optimizer_argument_sites(self) -> dict[str, set[int]]:
        """Names passed to a GradScaler's `step`/`unscale_` -> ids of the functions that pass them."""
        sites: dict[str, set[int]] = {}
        for call in self.calls:
            if call.method in (vocab.STEP, vocab.UNSCALE) and call.node.args and call.receiver is not None and \
                    calls.effect(self.shape(call.node), self.is_scaler(call.receiver, call.frame)) in _HANDED_OPTIMIZER:
                key = dotted_name(call.node.args[0].value)
                if key:
                    sites.setdefault(key, set()).add(id(call.frame.function()))
        return sites

    def _passed_to_scaler(self, key: str, frame: Frame | None) -> bool:
        """Is this object (not only this spelling) passed to a scaler's step/unscale_: an attribute (`self.opt`)
        anywhere, a plain name in the same function?"""
        functions = self._optimizer_argument_sites.get(key)
        if not functions:
            return False
        return "." in key or id(frame.function() if frame is not None else None) in functions

    @cached_property
    def _zero_grad_keys(self) -> set[str]:
        """Names whose `.zero_grad()` is called: with a `.step()`, only an optimizer has both."""
        return {call.receiver for call in self.calls if call.method == vocab.ZERO_GRAD and call.receiver
                and calls.effect(self.shape(call.node)) == Effect.ZERO_GRAD}

    @cached_property
    def _param_groups_keys(self) -> set[str]:
        """Names whose `.param_groups` is read (one walk, only for a module that spells the word)."""
        if vocab.PARAM_GROUPS not in self.source:
            return set()
        groups = visitor_class(_ParamGroups)()
        walk(self.module, groups)
        return groups.owners

    def optimizer_constructed(self, key: str | None, frame: Frame | None) -> bool:
        """Is every binding of `key` seen from `frame` a call of a known optimizer class (torch.optim...)?"""
        bound = self.bindings(key, frame) if key else []
        return bool(bound) and all(
            isinstance(a.value, cst.Call) and len(a.targets) == 1
            and api.is_known_optimizer_class(self.imports.qualify(a.value.func)) for a in bound)

    def element_key(self, expr: cst.BaseExpression) -> str | None:
        """`self.optimizer[0]`: an element of a dotted container by a literal index or key, as one name."""
        if not isinstance(expr, cst.Subscript) or len(expr.slice) != 1 or not isinstance(expr.slice[0].slice, cst.Index):
            return None
        base, index = dotted_name(expr.value), expr.slice[0].slice.value
        if base is None or not isinstance(index, (cst.Integer, cst.SimpleString)):
            return None
        return f"{base}[{index.value}]"

    @cached_property
    def _element_zero_grads(self) -> set[str]:
        """Elements (`opts[0]`) whose `.zero_grad()` is called."""
        return {key for call in self.calls if call.method == vocab.ZERO_GRAD and call.receiver is None
                for key in [self.element_key(call.node.func.value)] if key}  # no module: `receiver` is None

    def element_optimizer(self, key: str, frame: Frame | None) -> bool:
        """Is the element `key` (`self.optimizer[0]`) an optimizer by what the code does: its `.zero_grad()`
        called, or the container bound only to lists or tuples of known optimizer constructions?"""
        if key in self._element_zero_grads:
            return True
        bound = self.bindings(key.split("[", 1)[0], frame)
        return bool(bound) and all(
            isinstance(a.value, (cst.List, cst.Tuple)) and len(a.targets) == 1 and a.value.elements and all(
                isinstance(e.value, cst.Call) and api.is_known_optimizer_class(self.imports.qualify(e.value.func))
                for e in a.value.elements) for a in bound)

    def optimizer_known(self, key: str | None, frame: Frame | None) -> bool:
        """Is `key` surely an optimizer: passed to a GradScaler's `step`/`unscale_` (a plain name in the same
        function: another function's `optimizer` may be another object), or built from a known optimizer class?
        What a safe fix that hands the object to `scaler.step` may rest on."""
        return bool(key) and (self._passed_to_scaler(key, frame) or self.optimizer_constructed(key, frame))

    def is_optimizer(self, key: str | None, frame: Frame | None) -> bool:
        """Is `key` an optimizer by what the code does with it (`optimizer_known`, `x.zero_grad()`,
        `x.param_groups`)? Never by its spelling: `lr_scheduler`, unpacked from a factory named
        `get_optimizer_and_scheduler`, is not one."""
        if not key:
            return False
        if "[" in key:
            return self.element_optimizer(key, frame)
        return (key in self._zero_grad_keys or key in self._optimizer_argument_sites
                or self.optimizer_constructed(key, frame) or key in self._param_groups_keys)

    def with_as_names(self, function: Frame | None) -> set[str]:
        """The names `with ... as name` binds in the code of `function` (None: module level)."""
        return self._with_as_names.get(id(function), set())

    @cached_property
    def _with_as_names(self) -> dict[int, set[str]]:
        names: dict[int, set[str]] = {}
        for with_node, frame in self.with_frames.items():
            for item in with_node.items:
                name = dotted_name(item.asname.name) if item.asname is not None else None
                if name is not None:
                    names.setdefault(id(frame.function()), set()).add(name)
        return names

    # training-step events ---------------------------------------------------------------------------
    @cached_property
    def events(self) -> list[Event]:
        events = []
        for call in self.calls:
            event = self._event(call)
            if event is not None:
                events.append(event)
        return events

    def _scaled_by(self, expr: cst.BaseExpression, frame: Frame) -> str | None:
        """The scaler whose `.scale(...)` produced `expr` (directly, or through a local name)."""
        if isinstance(expr, cst.Call):
            shape = self.shape(expr)
            return shape.receiver if calls.scale_call(shape) and self.is_scaler(shape.receiver, frame) else None
        key = dotted_name(expr)
        if key is None:
            return None
        # A name's bindings depend on its function only: asked once per name and function, not once per use (a
        # function computing and backpropagating `loss` N times would cost N x N).
        cache_key = (key, id(frame.function() if frame is not None else None))
        if cache_key not in self._scaled_cache:
            self._scaled_cache[cache_key] = None
            for assignment in self.bindings(key, frame):
                if isinstance(assignment.value, cst.Call):
                    scaler = self._scaled_by(assignment.value, assignment.frame)
                    if scaler:
                        self._scaled_cache[cache_key] = scaler
                        break
        return self._scaled_cache[cache_key]

    def _event(self, call: Call) -> Event | None:
        """The call as a training-step event: what it is (`calls.effect`), given what this module knows of its
        names (is the callee bound to a clip, the receiver a GradScaler or an optimizer); None for any other call.
        A scaler's event names its scaler: one called on no dotted name (`get_scaler().step(opt)`) is none."""
        node, method, receiver, frame = call.node, call.method, call.receiver, call.frame
        clip = call.qualified not in api.CLIP_FUNCTIONS and self._stored_clip(call)
        if not clip and not calls.may_have_effect(method, (call.qualified,) if call.qualified else ()):
            return None
        scaler = method in calls.SCALER_METHOD_EFFECTS and self.is_scaler(receiver, frame)
        optimizer = None  # the optimizer a step is called on, as this module knows one
        if method == vocab.STEP and not scaler:
            if receiver is not None:
                optimizer = receiver if self.is_optimizer(receiver, frame) else None
            elif not node.args:
                element = self.element_key(node.func.value)  # `self.optimizer[0].step()`
                optimizer = element if element is not None and self.element_optimizer(element, frame) else None
        kind = calls.effect(self.shape(node), scaler, optimizer is not None, clip)
        if kind not in EVENT_KINDS:
            return None
        if kind == Effect.CLIP:
            return Event(kind, call)
        if kind == Effect.BUILDS_SCALER:
            bound = None
            for assignment in self.assignments:
                if assignment.statement is call.statement and len(assignment.targets) == 1:
                    bound = assignment.targets[0]
            return Event(kind, call, bound_to=bound)
        if kind == Effect.BACKWARD:  # scaled: the loss it runs on is a scaler's `scale(...)`
            if call.qualified in api.AUTOGRAD_BACKWARD:
                loss = call_argument(node, *vocab.AUTOGRAD_ROOTS[call.qualified])
            else:
                loss = node.func.value
            scaler_name = self._scaled_by(loss, frame) if loss is not None else None
            return Event(kind, call, scaler=scaler_name, scaled=scaler_name is not None)
        if kind == Effect.OPTIMIZER_STEP:
            return Event(kind, call, optimizer=optimizer)
        if receiver is None:
            return None
        first_arg = dotted_name(node.args[0].value) if node.args else None
        return Event(kind, call, scaler=receiver,
                     optimizer=first_arg if kind in (Effect.SCALER_STEP, Effect.UNSCALE) else None)

    def is_clip_function(self, value: cst.BaseExpression | None, frame: Frame | None, depth: int = 0) -> bool:
        """Does `value` evaluate to torch's clip function: the function itself under any spelling,
        `functools.partial(clip_grad_norm_, max_norm=1.0)`, a name bound only to such values, or a lookup in a
        dict literal whose values all are?"""
        if value is None or depth > 3:
            return False
        if self.imports.qualify(value) in api.CLIP_FUNCTIONS:
            return True
        if isinstance(value, cst.Call):
            return self.imports.qualify(value.func) in api.PARTIAL and bool(value.args) \
                and value.args[0].keyword is None and self.imports.qualify(value.args[0].value) in api.CLIP_FUNCTIONS
        if isinstance(value, cst.Subscript):
            return self.is_clip_function(value.value, frame, depth + 1)
        if isinstance(value, cst.IfExp):  # `partial(clip_grad_norm_, ...) if max_norm else None`
            branches = [b for b in (value.body, value.orelse) if not _is_none(b)]
            return bool(branches) and all(self.is_clip_function(b, frame, depth + 1) for b in branches)
        if isinstance(value, cst.Dict):
            values = [e.value for e in value.elements if isinstance(e, cst.DictElement)]
            return bool(values) and len(values) == len(value.elements) and all(
                self.is_clip_function(v, frame, depth + 1) for v in values)
        key = dotted_name(value)
        if key is None:
            return False
        # `self.clip_fn = None` until a clip is configured: a call of the name runs one of the other values
        bound = [a for a in self.bindings(key, frame) if not _is_none(a.value)]
        return bool(bound) and all(len(a.targets) == 1 and self.is_clip_function(a.value, a.frame, depth + 1)
                                   for a in bound)

    def _stored_clip(self, call: Call) -> bool:
        """A call of a clip kept under a name (`self.clip_fn = partial(clip_grad_norm_, max_norm=1)`, then
        `self.clip_fn(params)`) or looked up in a registry (`CLIPPERS[mode](params, value)`)."""
        func = call.node.func
        if not isinstance(func, (cst.Name, cst.Attribute, cst.Subscript)) or call.qualified is not None \
                and call.qualified.startswith("torch."):
            return False
        if isinstance(func, (cst.Name, cst.Attribute)) and (dotted_name(func) is None
                                                            or dotted_name(func) not in self._assignments_by_target):
            return False
        return self.is_clip_function(func, call.frame)

    def events_in(self, function: Frame | None) -> list[Event]:
        """Events whose code belongs to `function` (None: module level), in source order."""
        return list(self._events_by_function.get(id(function), ()))

    @cached_property
    def _calls_by_function(self) -> dict[int, list[Call]]:
        """Calls grouped by the function their code belongs to (an index: rules ask per scaler and function)."""
        grouped: dict[int, list[Call]] = {}
        for call in self.calls:
            grouped.setdefault(id(call.frame.function()), []).append(call)
        return grouped

    @cached_property
    def updates_by_last_name(self) -> dict[str, int]:
        """Last part of a receiver -> how many `.update()` calls the module makes on a receiver ending so."""
        counts: dict[str, int] = {}
        for call in self.calls:
            if call.method == vocab.UPDATE and call.receiver:
                last = call.receiver.rsplit(".", 1)[-1]
                counts[last] = counts.get(last, 0) + 1
        return counts

    def updated_elsewhere(self, scaler: str, function: Frame | None) -> bool:
        """Does code outside `function` call `.update()` on a receiver ending like `scaler`'s last name, which may
        be the same object? Not an update on another function's own local scaler (`scaler = GradScaler()` there,
        never handed to a call, stored, aliased or returned): that one is another object."""
        return any(other is not function for other in self._shared_updates.get(scaler.rsplit(".", 1)[-1], ()))

    @cached_property
    def _shared_updates(self) -> dict[str, list[Frame | None]]:
        """Last part of a receiver -> the functions calling `.update()` on a receiver ending so that may be shared
        (not their own local scaler): the index `updated_elsewhere` reads, built once (asked per function, a scan
        of every call each time was N x N)."""
        found: dict[str, list[Frame | None]] = {}
        for call in self.calls:
            if call.method == vocab.UPDATE and call.receiver:
                other = call.frame.function()
                if not self.own_local_scaler(call.receiver, other):
                    found.setdefault(call.receiver.rsplit(".", 1)[-1], []).append(other)
        return found

    def own_local_scaler(self, name: str, function: Frame | None) -> bool:
        """Is `name` a local of `function` bound only to GradScaler constructions there and never handed on (passed
        to a call other than its own methods, assigned to another name, returned or yielded)?"""
        if function is None or "." in name:
            return False
        bound = [a for a in self.assignments_in(function) if name in a.targets]
        if not bound or not all(len(a.targets) == 1 and self.is_scaler_construction(a.value) for a in bound):
            return False
        if self.scaler_handed_over(name, function) or any(
                dotted_name(a.value) == name for a in self.assignments_in(function)):
            return False
        returns, _ = _returns_and_yields(function.node) if isinstance(function.node, cst.FunctionDef) else ([], [])
        return not any(name in code_words(value) for value in returns)

    def block_of(self, statement: cst.CSTNode) -> tuple[tuple, int, bool] | None:
        """(the statements of the indented block or module body that holds `statement`, its position there,
        whether that is the module body); None for a node that is no statement of a block."""
        return self._blocks.get(id(statement))

    @cached_property
    def _blocks(self) -> dict[int, tuple[tuple, int, bool]]:
        """The index `block_of` reads: one walk of the module, for the rules that move or remove statements."""
        body = tuple(self.module.body)
        visitor = visitor_class(_Blocks)()
        walk(self.module, visitor)
        blocks = visitor.blocks
        for position, statement in enumerate(body):
            blocks[id(statement)] = (body, position, True)
        return blocks

    def scaler_handed_over(self, scaler: str, function: Frame | None) -> bool:
        """Is the scaler (or its owner, for `self.scaler`) passed by `function`'s code to a call other than the
        scaler's own step/scale/unscale_? The callee may update it: a rule that adds or asks for an `update()`
        could then make a second one per iteration."""
        owner = scaler.split(".", 1)[0] if "." in scaler else None
        for call in self._calls_by_function.get(id(function), ()):
            if call.method in (vocab.STEP, vocab.SCALE, vocab.UNSCALE):
                continue
            for arg in call.node.args:
                name = dotted_name(arg.value)
                if name is not None and (name == scaler or (owner is not None and name == owner)):
                    return True
        return False

    # a scaler's methods through other spellings --------------------------------------------------------
    def methods_taken(self, key: str) -> set[str | None]:
        """The methods of `key` (a GradScaler's: `vocab.SCALER_METHODS`) the module's code takes without calling
        them there: `un = scaler.unscale_`, `map(scaler.unscale_, ...)`, `partial(scaler.update)`,
        `{"update": scaler.update}`, `for fn in (scaler.update,)`, `getattr(scaler, "update")`. Whatever then
        calls them, under whatever name, may run them. None among them: a method looked up by a computed name
        (`getattr(scaler, name)`), any of them."""
        return self._methods_taken.get(key, set())

    @cached_property
    def _methods_taken(self) -> dict[str, set[str | None]]:
        taken: dict[str, set[str | None]] = {}
        for call in self.calls:
            if call.dotted == "getattr" and len(call.node.args) >= 2:
                receiver = dotted_name(call.node.args[0].value)
                if receiver is not None:
                    name = literal_string(call.node.args[1].value)
                    taken.setdefault(receiver, set()).add(name if name is None or name in vocab.SCALER_METHODS
                                                          else "")
        if _TAKEN_METHOD.search(self.source):  # a cheap screen before a walk of the module
            visitor = visitor_class(_TakenMethods)()
            walk(self.module, visitor)
            for receiver, methods in visitor.found.items():
                taken.setdefault(receiver, set()).update(methods)
        for methods in taken.values():
            methods.discard("")
        return taken

    def same_object_names(self, key: str) -> set[str]:
        """`key` and the names the module binds to it or it to them, as plain names (`s = scaler`,
        `scaler = self.scaler`), two steps out: the same object under other spellings."""
        names, frontier = {key}, [key]
        for _ in range(2):
            following = []
            for current in frontier:
                for assignment in self._assignments_by_target.get(current, ()):
                    value = dotted_name(assignment.value)
                    if value is not None and value not in names and len(assignment.targets) == 1:
                        names.add(value)
                        following.append(value)
                for other in self._bound_to_names.get(current, ()):
                    if other not in names:
                        names.add(other)
                        following.append(other)
            frontier = following
        return names

    @cached_property
    def _bound_to_names(self) -> dict[str, set[str]]:
        """A dotted value -> the single targets assigned exactly it (`s = scaler`: "scaler" -> {"s"})."""
        bound: dict[str, set[str]] = {}
        for assignment in self.assignments:
            value = dotted_name(assignment.value)
            if value is not None and len(assignment.targets) == 1:
                bound.setdefault(value, set()).add(assignment.targets[0])
        return bound

    def loop_values(self, name: str | None, frame: Frame | None) -> list[str | None] | None:
        """What `name` takes, when it is the target of a `for` around `frame` in its function: the dotted
        elements of a tuple, list or set literal it iterates (also through a name bound once to one); [None] for
        anything else (`for opt in self.optimizers`, `enumerate(...)`: unknown values). None when `name` is
        no such target."""
        if not name or frame is None:
            return None
        for loop in frame.loops_up_to_function():
            node = loop.node
            if not isinstance(node, cst.For) or name not in target_names(node.target):
                continue
            if dotted_name(node.target) != name:
                return [None]
            iterated = node.iter
            key = dotted_name(iterated)
            if key is not None:
                bound = self.bindings(key, loop.parent)
                iterated = bound[0].value if len(bound) == 1 and len(bound[0].targets) == 1 else None
            if isinstance(iterated, (cst.Tuple, cst.List, cst.Set)) and iterated.elements:
                values = [dotted_name(e.value) if not isinstance(e, cst.StarredElement) else None
                          for e in iterated.elements]
                return values
            return [None]
        return None

    def assignments_in(self, function: Frame | None) -> list[Assignment]:
        """The assignments whose code belongs to `function` (None: module level), in source order."""
        return self._assignments_by_function.get(id(function), [])

    @cached_property
    def _assignments_by_function(self) -> dict[int, list[Assignment]]:
        grouped: dict[int, list[Assignment]] = {}
        for assignment in self.assignments:
            grouped.setdefault(id(assignment.frame.function()), []).append(assignment)
        return grouped

    @cached_property
    def _events_by_function(self) -> dict[int, list[Event]]:
        """Events grouped by the function their code belongs to (an index: rules ask per event)."""
        grouped: dict[int, list[Event]] = {}
        for event in self.events:
            grouped.setdefault(id(event.frame.function()), []).append(event)
        return grouped

    @cached_property
    def scaler_builds(self) -> dict[str | None, list[Event]]:
        """SCALER_BUILD events by the name they are bound to (None: not bound), in source order."""
        builds: dict[str | None, list[Event]] = {}
        for event in self.events:
            if event.kind == Effect.BUILDS_SCALER:
                builds.setdefault(event.bound_to, []).append(event)
        return builds

    @cached_property
    def scaler_builds_by_function(self) -> dict[tuple[str | None, int], list[Event]]:
        """SCALER_BUILD events by (the name they are bound to, id of the function they run in: None for module
        level), in source order (an index: rules ask per scaler event)."""
        builds: dict[tuple[str | None, int], list[Event]] = {}
        for event in self.events:
            if event.kind == Effect.BUILDS_SCALER:
                builds.setdefault((event.bound_to, id(event.frame.function())), []).append(event)
        return builds

    @cached_property
    def _assignments_by_scope(self) -> tuple[dict, dict]:
        """Assignments by (target, id of the function they run in) and by (target, class of that method), in
        source order (an index for `bindings`)."""
        by_function: dict[tuple[str, int], list[Assignment]] = {}
        by_class: dict[tuple[str, str], list[Assignment]] = {}
        for assignment in self.assignments:
            function = assignment.frame.function()
            for target in dict.fromkeys(assignment.targets):
                by_function.setdefault((target, id(function)), []).append(assignment)
                if function is not None and function.class_name:
                    by_class.setdefault((target, function.class_name), []).append(assignment)
        return by_function, by_class

    @cached_property
    def _assignments_by_target(self) -> dict[str, list[Assignment]]:
        """Assignments by each dotted name they bind, in source order (an index for `bindings`)."""
        index: dict[str, list[Assignment]] = {}
        for assignment in self.assignments:
            for target in dict.fromkeys(assignment.targets):
                index.setdefault(target, []).append(assignment)
        return index

    @cached_property
    def module_has_backward(self) -> bool:
        return any(e.kind == Effect.BACKWARD for e in self.events) or any(
            c.method in (vocab.MANUAL_BACKWARD, vocab.BACKWARD) for c in self.calls)

    def has_backward(self, function: Frame | None) -> bool:
        return id(function) in self._functions_with_backward

    @cached_property
    def _functions_with_backward(self) -> set[int]:
        """ids of the functions (None: module level) whose code runs a backward (an index: rules ask per event)."""
        return {id(e.frame.function()) for e in self.events if e.kind == Effect.BACKWARD} | {
            id(c.frame.function()) for c in self.calls if c.method in (vocab.MANUAL_BACKWARD, vocab.BACKWARD)}


def _short(name: str, limit: int = 24) -> str:
    return name if len(name) <= limit else "..." + name[-(limit - 3):]


def _returns_and_yields(function: cst.FunctionDef) -> tuple[list[cst.BaseExpression], list[cst.With | None]]:
    """The values the function returns, and for each yield the innermost `with` around it (None: none), not
    those of a function, class or lambda defined in it."""
    returns: list[cst.BaseExpression] = []
    yields: list[cst.With | None] = []
    pending: list[tuple[cst.CSTNode, cst.With | None]] = [(child, None) for child in function.body.children]
    while pending:
        node, inside = pending.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(node, cst.Return) and node.value is not None:
            returns.append(node.value)
        elif isinstance(node, cst.Yield):
            yields.append(inside)
        if isinstance(node, cst.With):
            pending.extend((child, node) for child in node.body.children)
            pending.extend((item, inside) for item in node.items)
            continue
        pending.extend((child, inside) for child in node.children)
    return returns, yields


def _plain_opener(facts: ModuleFacts, opener: cst.CSTNode) -> bool:
    """A torch autocast (or a null context) constructed right there, or either of two such (`a if c else b`); not
    through a name or a partial."""
    if isinstance(opener, cst.IfExp):
        return _plain_opener(facts, opener.body) and _plain_opener(facts, opener.orelse)
    qualified = facts.imports.qualify(opener.func) if isinstance(opener, cst.Call) else None
    return qualified in api.AUTOCAST_NEW or qualified in api.AUTOCAST_LEGACY or qualified in api.NULL_CONTEXTS


class _Blocks:  # a libcst visitor once made one with amplint.lazy.visitor_class
    """id of each statement of an indented block -> (that block's statements, the statement's position there,
    False)."""

    walks_trivia = False

    def __init__(self) -> None:
        self.blocks: dict[int, tuple[tuple, int, bool]] = {}

    def visit_IndentedBlock(self, block: cst.IndentedBlock) -> None:
        statements = tuple(block.body)
        for position, statement in enumerate(statements):
            self.blocks.setdefault(id(statement), (statements, position, False))


_TAKEN_METHOD = re.compile(r"\.\s*(?:" + "|".join(map(re.escape, vocab.SCALER_METHODS)) + r")\b(?!\s*\()")


class _TakenMethods:  # a libcst visitor once made one with amplint.lazy.visitor_class
    """receiver -> the scaler methods (`vocab.SCALER_METHODS`) of it read without being called there."""

    walks_trivia = False

    def __init__(self) -> None:
        self.called: set[int] = set()
        self.found: dict[str, set[str]] = {}

    def visit_Call(self, node: cst.Call) -> None:
        self.called.add(id(node.func))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value in vocab.SCALER_METHODS and id(node) not in self.called:
            receiver = dotted_name(node.value)
            if receiver is not None:
                self.found.setdefault(receiver, set()).add(node.attr.value)


class _ParamGroups:  # a libcst visitor once made one with amplint.lazy.visitor_class
    """The dotted owners of every `x.param_groups` in a module."""

    walks_trivia = False

    def __init__(self) -> None:
        self.owners: set[str] = set()

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value == vocab.PARAM_GROUPS:
            owner = dotted_name(node.value)
            if owner:
                self.owners.add(owner)


# control flow between two pieces of code of one function ------------------------------------------------------
def if_frames(frame: Frame) -> list[Frame]:
    """The `if` branches enclosing `frame` inside its own function, innermost first."""
    found = []
    for current in frame.ancestors():
        if current.kind is FrameKind.FUNCTION:
            break
        if current.kind is FrameKind.IF:
            found.append(current)
    return found


def branch_condition(facts: ModuleFacts, frame: Frame) -> tuple[str, bool]:
    """(test text without `not`/`is not`/`!=`, polarity) of an IF frame: `if not amp:` == else-branch of `if amp:`."""
    test, positive = frame.node.test, not frame.in_else
    while True:
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, positive = test.expression, not positive
        elif isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(
                test.comparisons[0].operator, (cst.IsNot, cst.NotEqual)):
            target = test.comparisons[0]
            operator = cst.Is() if isinstance(target.operator, cst.IsNot) else cst.Equal()
            test = test.with_changes(comparisons=[target.with_changes(operator=operator)])
            positive = not positive
        else:
            break
    text = facts.code(test) if test is frame.node.test else cst.Module(body=[]).code_for_node(test)
    return "".join(text.split()), positive


def exclusive(facts: ModuleFacts, a: Frame, b: Frame) -> bool:
    """Can code in `a` and code in `b` never run in the same pass through their function?

    True for the two branches of one `if`, and for opposite branches of two `if`s with the same test (the
    `if use_amp: ... else: ...` written twice pattern), including `if amp:` against `if not amp:`.
    """
    a_ifs, b_ifs = if_frames(a), if_frames(b)
    shared = {id(f) for f in a_ifs} & {id(f) for f in b_ifs}
    a_only = [f for f in a_ifs if id(f) not in shared]
    b_only = [f for f in b_ifs if id(f) not in shared]
    for fa in a_only:
        for fb in b_only:
            if fa.node is fb.node and fa.in_else != fb.in_else:
                return True
            test_a, positive_a = branch_condition(facts, fa)
            test_b, positive_b = branch_condition(facts, fb)
            if test_a == test_b and positive_a != positive_b:
                return True
    return False


def _ends_with(block: cst.BaseSuite, kinds: tuple[type, ...]) -> bool:
    if not isinstance(block, cst.IndentedBlock) or not block.body:
        return isinstance(block, cst.SimpleStatementSuite) and bool(block.body) and isinstance(block.body[-1], kinds)
    last = block.body[-1]
    return isinstance(last, cst.SimpleStatementLine) and bool(last.body) and isinstance(last.body[-1], kinds)


def leaves_before(earlier: Frame, later: Frame) -> bool:
    """Does a branch holding `earlier` (and not `later`) end in return/raise, or continue/break within a loop
    that also holds `later`, so that `later` never runs after `earlier` in the same pass?"""
    for frame in if_frames(earlier):
        if later.is_within(frame):
            continue
        if frame.in_else:
            orelse = frame.node.orelse
            block = orelse.body if isinstance(orelse, cst.Else) else None
        else:
            block = frame.node.body
        if block is None:
            continue
        if _ends_with(block, (cst.Return, cst.Raise)):
            return True
        loops = frame.loops_up_to_function()
        if loops and later.is_within(loops[0]) and _ends_with(block, (cst.Continue, cst.Break)):
            return True
    return False


def may_follow(facts: ModuleFacts, earlier: Frame, later: Frame) -> bool:
    """Can code in `later` run after code in `earlier` in the same pass through their function?"""
    return not exclusive(facts, earlier, later) and not leaves_before(earlier, later)


def loops_within(inner: Frame, outer: Frame) -> bool:
    """Is every loop enclosing `outer` (in its function) also enclosing `inner`? (`outer` does not repeat
    more often than `inner`.)"""
    return all(inner.is_within(loop) for loop in outer.loops_up_to_function())


def scaler_enabled(facts: ModuleFacts, key: str, frame: Frame | None = None) -> bool | None:
    """The `enabled=` of the GradScaler constructions bound to `key`: False only when every one says False,
    True when every one is enabled (no flag, or True), None when unknown (a flag, or no construction seen).

    With `frame`, a local name (`scaler`, not `self.scaler`) only looks at the constructions of that frame's
    function (else at the module-level ones)."""
    builds = facts.scaler_builds.get(key, [])
    if frame is not None and "." not in key:
        by_function = facts.scaler_builds_by_function
        builds = by_function.get((key, id(frame.function()))) or by_function.get((key, id(None)), [])
    flags = [calls.scaler_enabled(facts.shape(event.node)) for event in builds]
    if not flags or any(flag is None for flag in flags):
        return None
    if all(flag is False for flag in flags):
        return False
    return True if all(flags) else None


def _is_none(node: cst.BaseExpression | None) -> bool:
    """Is the expression the literal `None`?"""
    return isinstance(node, cst.Name) and node.value == "None"
