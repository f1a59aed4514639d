"""AMP006 disabled-autocast-without-cast."""

from __future__ import annotations

import ast
import weakref
from dataclasses import dataclass
from typing import Iterator

from amplint.lazy import libcst as cst
from amplint.facts.walk import walk
from amplint.lazy import visitor_class

from amplint.facts import ModuleFacts, Region, RegionState
from amplint.facts.module import exclusive
from amplint.diagnostics import Applicability
from amplint.facts.dtypes import (FLOAT_PRESERVING, MODULE_PLACEMENT, UncastUses, floating_names, is_float32_cast,
                                  is_low_precision, is_scalar, low_precision_names, lowering, tensor_module)
from amplint.facts.model import Call, Frame, FunctionInfo
from amplint.index.project import MAX_DEPTH, CallerSite, Target
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.scopes import dtype_words


class DisabledAutocastWithoutCast(Rule):
    """## What it does
    Checks for tensors that are low precision where an `autocast(enabled=False)` block (or a function decorated
    with one) uses them without a float32 cast (`.float()`, `.to(torch.float32)`, `.to(dtype=torch.float32)`,
    `.double()`, `.type(torch.float32)`):
    - produced in an enclosing active autocast region, or in an earlier, sibling one of the same function (closing
      a region casts nothing back);
    - computed before the block by a submodule, a user function, a linear/conv/matmul op, in a function (an
      `nn.Module.forward`, a helper) that a caller runs under autocast: a call in an active region of this
      module, a `forward` reached through an instance of its class (`self.block = Block()` then
      `self.block(h)`; `net = Net()` then `net(x)`), or such a call in another module of the project;
    - a parameter to which such a call passes a low-precision value (`self.block(self.proj(x))`).

    ## Why is this bad?
    `autocast(enabled=False)` only stops autocast from casting; it does not cast anything back. PyTorch's docs:
    "you should cast them to float32 before use in the disabled region". A bfloat16/float16 tensor stays low
    precision inside, so the float32 computation the block was written for does not happen: an fp32
    `nn.Linear` raises `RuntimeError: mat1 and mat2 must have the same dtype, but got BFloat16 and Float`,
    reductions lose precision (measured relative error 1.7e-3 in bfloat16 vs 1e-8 after `.float()`), and in
    float16 `h.pow(2).sum()` overflows to `inf`. The same holds in a submodule's island: under the caller's
    autocast its `self.proj(x)` is bfloat16/float16 (measured), so the island's fp32 layer raises the same error.

    ## Example
    ```python
    fp32_head = torch.nn.Linear(512, 10)
    with torch.autocast("cuda"):
        h = model(x)
        with torch.autocast("cuda", enabled=False):
            out = fp32_head(h)
    ```

    ## Use instead
    ```python
    fp32_head = torch.nn.Linear(512, 10)
    with torch.autocast("cuda"):
        h = model(x)
        with torch.autocast("cuda", enabled=False):
            out = fp32_head(h.float())
    ```

    ## Fix safety
    Safe means: the fix cannot change what a correct program computes and cannot make a running program raise;
    a fix that rests on a guess is unsafe or not offered. The fix casts each uncast use inside the disabled
    block with `.float()`, leaving the outer name's dtype unchanged after the block. It is safe only on a value
    known to be a floating-point tensor: the result of a torch op that returns one (`F.linear`, `torch.mm` of a
    floating tensor, dtype-preserving ops and arithmetic on one) or of a torch.nn module known to return one
    tensor (`nn.Linear`, `nn.Sequential` of such modules), where `.float()` only does the cast the disabled
    region was written for. On anything else (a user module or function, which may return a dict, a tuple or
    a number, or a parameter, whose callers are not all known) it is unsafe:
    `.float()` on a dict or an int raises `AttributeError`. Values known to be integer or bool (`.long()`,
    `.bool()`, comparisons, `argmax`, sizes, their indexing) are not low precision and are not reported.

    ## Limits
    Only names are followed, not attributes or containers. A value whose type is not known (the output of a user
    module or function: perhaps a dict of heads) counts only where it is computed with (a method call on it, an
    operand, an argument of a torch function or of a torch.nn module), not when handed to a user function, which
    may cast it itself. Values that are float32 anyway (casts, tensor
    factories, ops CUDA autocast runs in float32 such as softmax, norms and losses) are not reported, and a
    name assigned from something amplint cannot see into is not either.

    A parameter is reported only where this module shows the argument low precision: autocast casts the
    outputs of ops, never a module's inputs, so a model's raw float32 batch is still float32 in its forward
    (measured), and a call from another module says nothing of its arguments. Parameters annotated `int`,
    `bool`, `str` or `float`, or with a number, bool or string default, are no tensors. A caller is known
    through calls the project index resolves (plain functions, methods, objects of the project's classes held
    by a name or an attribute, `Net(...).to(device)` in this module); models kept in containers
    (`nn.ModuleList`, `nn.Sequential`) or passed as arguments are not followed, and a caller in another module
    counts only when the index holds that module. A function that no known caller runs under autocast is not
    reported, though code outside the project may call it so (a library's module): there its inputs' dtypes
    cannot be known, and a false report costs more than a miss.
    """

    code = "AMP006"
    name = "disabled-autocast-without-cast"
    fix = "sometimes"
    # A disabled region is `autocast(..., enabled=False)` or `False` passed positionally (legacy
    # `autocast(False)`, `torch.autocast("cuda", None, False)`), also through `partial`.
    words = ("autocast",)

    @classmethod
    def maybe_applies(cls, summary) -> bool:
        # A disabled region nested in an active one (lexically, in one function), a function decorated with a
        # disabled autocast called from an active region, or a disabled region beside a second region of the
        # module (an earlier sibling, or a caller's).
        return (summary.regions_possible() and disabled_region_possible(summary)
                and (region_in_region_possible(summary) or second_region_possible(summary)))

    @classmethod
    def maybe_applies_across(cls, summary, view) -> bool:
        # A disabled region whose function a caller in another module runs under autocast: the project holds
        # another indexed module (the exact question, `index_evidence`, is the rule's).
        return summary.regions_possible() and disabled_region_possible(summary) and any(
            path != view.path for path in view.project.indexed)

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        for frame in facts.with_frames.values():
            region = facts.region_of(frame)
            if region is None or region.state is not RegionState.OFF or region.frame is not frame:
                continue
            outer = facts.region_of(frame.parent)
            function = frame.function()
            assigned = facts.assignments_in(function)
            if outer is None:
                # Not nested: values that arrive low precision from a sibling region or from the callers' autocast.
                yield from self._arriving(facts, frame, region)
                continue
            if not outer.active or outer.frame is None:
                continue
            low = low_precision_names(assigned, outer.frame, frame.start_index, function)
            floats = floating_names(assigned, outer.frame, frame.start_index, function, facts)
            sources = {name: Source(f"`{{name}}` is {dtype_words(outer)} from the autocast region at line "
                                    f"{facts.line_of(outer.opener)} and used uncast with autocast off (line "
                                    f"{facts.line_of(region.opener)})") for name in low}
            yield from self._report(facts, frame.node.body, sources, floats, frame)
        for info in facts.functions:
            region = facts.region_of(info.frame)
            if region is None or region.state is not RegionState.OFF or region.via != "decorator":
                continue
            yield from self._report(facts, info.node.body, fed_parameters(facts, info), set(), info.frame)

    def _arriving(self, facts: ModuleFacts, frame, region: Region) -> Iterator[Finding]:
        function = frame.function()
        info = facts.function_info(frame)
        caller = caller_evidence(facts, info) if info is not None else None
        parameters = fed_parameters(facts, info) if info is not None else {}
        sources = arriving_names(facts, info, function, frame.start_index, caller, region, parameters)
        scope = function if function is not None else list(frame.ancestors())[-1]
        floats = floating_names(facts.assignments_in(function), scope, frame.start_index, function, facts)
        yield from self._report(facts, frame.node.body, sources, floats, frame)

    def _report(self, facts: ModuleFacts, body: cst.BaseSuite, sources: dict[str, Source], floats: set[str],
                frame) -> Iterator[Finding]:
        """One finding per watched name used uncast in `body`; its `.float()` fix is safe only for a name in
        `floats` (surely a floating tensor), unsafe otherwise (a dict, a tuple or a number would raise)."""
        if not sources:
            return
        visitor = visitor_class(UncastUses)(set(sources), set(floats),
                                            lambda func: tensor_module(facts, func, frame))
        walk(body, visitor)
        visitor.uses.sort(key=lambda node: (facts.position(node)[0].line, facts.position(node)[0].column))
        first_use: dict[str, cst.Name] = {}
        for use in visitor.uses:
            first_use.setdefault(use.value, use)
        for name, use in first_use.items():
            uses = [u for u in visitor.uses if u.value == name]

            def rebuild(uses=uses):
                return replace_nodes(facts.module, {
                    u: cst.Call(func=cst.Attribute(value=u, attr=cst.Name("float"))) for u in uses
                })

            safe = name in floats and not sources[name].parameter
            applicability = Applicability.SAFE if safe else Applicability.UNSAFE
            yield Finding(use, sources[name].text(name),
                          FixPlan(f"Cast `{name}` with `.float()` inside the disabled region", rebuild,
                                  applicability))


@dataclass
class Source:
    """Why a name is low precision where the disabled region uses it: the finding's message, `{name}` standing
    for the name reported (a rebinding `g = h.view(...)` keeps `h`'s reason)."""

    message: str
    parameter: bool = False
    shorter: tuple[str, ...] = ()  # the same said shorter, for names that make `message` too long

    def text(self, name: str) -> str:
        """The message for `name`: the first wording that keeps it within `MAX_MESSAGE` characters."""
        wordings = [template.replace("{name}", name) for template in (self.message, *self.shorter)]
        return next((text for text in wordings if len(text) <= MAX_MESSAGE), wordings[-1])


MAX_MESSAGE = 120


@dataclass
class Caller:
    """A call that runs a function under an enabled autocast region: who calls it, in which module, at what line;
    `under`: when the caller opens no region itself, the call further up that runs it in one."""

    qualname: str
    line: int
    module: str | None = None  # None: this module
    under: Caller | None = None

    def describe(self, short: bool = False) -> str:
        """"`train` (line 12) runs this under autocast", "`Net.forward` (line 27) runs this under the autocast of
        `train` (in `train`, line 13)"."""
        if self.under is None:
            return f"{self._site()} runs this under autocast"
        root = self.under
        while root.under is not None:
            root = root.under
        if short:  # the caller whose region it is, not the ones between
            return f"it runs under the autocast of {root._site()}"
        return f"{self._site()} runs this under the autocast of {root._site()}"

    def _site(self) -> str:
        where = f"in `{self.module}`, " if self.module else ""
        who = "module-level code" if self.qualname == "<module>" else f"`{self.qualname}`"
        return f"{who} ({where}line {self.line})"


def same_module_sites(facts: ModuleFacts, info: FunctionInfo) -> list[Call]:
    """Calls of this module that run the function: `f(...)`, `self.m(...)`, and for a `forward`, calls of an
    instance of its class held by a name or an attribute (`self.block = Block(...)` then `self.block(h)`)."""
    sites = list(facts.call_sites.get(info.qualname, []))
    parts = info.qualname.split(".")
    if len(parts) == 2 and parts[1] == "forward":
        sites += instance_sites(facts, parts[0])
    return sites


def instance_sites(facts: ModuleFacts, class_name: str) -> list[Call]:
    """Calls of an object built from the module's class `class_name` (its `__call__` runs `forward`)."""
    holders: list[tuple[str, Frame | None, str]] = []  # (name as called, its function or None, class of a self.)
    for assignment in facts.assignments:
        value = assignment.value
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and \
                value.func.attr.value in MODULE_PLACEMENT:
            value = value.func.value  # Block(w).to(device), Block(w).cuda()
        if len(assignment.targets) != 1 or not isinstance(value, cst.Call) or not isinstance(value.func, cst.Name) \
                or value.func.value != class_name:
            continue
        target = assignment.targets[0]
        function = assignment.frame.function()
        if target.startswith("self.") and target.count(".") == 1 and function is not None:
            holders.append((target, None, function.class_name))
        elif "." not in target:
            holders.append((target, function, ""))
    sites = []
    for call in facts.calls:
        for name, function, owner in holders:
            if call.dotted != name:
                continue
            caller = call.frame.function()
            if (owner and caller is not None and caller.class_name == owner) or (not owner and caller is function):
                sites.append(call)
                break
    return sites


_EVIDENCE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # facts -> {qualname: Caller | None}


def caller_evidence(facts: ModuleFacts, info: FunctionInfo) -> Caller | None:
    """A call that runs the function under an enabled autocast region (`_find_caller`), asked once per function
    of a module."""
    known = _EVIDENCE.setdefault(facts, {})
    if info.qualname not in known:
        known[info.qualname] = _find_caller(facts, info)
    return known[info.qualname]


def _find_caller(facts: ModuleFacts, info: FunctionInfo, depth: int = MAX_DEPTH,
                 seen: frozenset = frozenset()) -> Caller | None:
    """A call that runs the function under an enabled autocast region: in this module (lexically in the
    region, or from a function itself so called, `depth` callers up), else in the project index."""
    if info.qualname in seen:
        return None
    seen = seen | {info.qualname}
    for site in same_module_sites(facts, info):
        region = facts.region_of(site.frame)
        caller = facts.function_info(site.frame)
        if region is not None:
            if region.active:
                return Caller(caller.qualname if caller else "<module>", facts.line_of(site.node))
            continue
        found = _find_caller(facts, caller, depth - 1, seen) if caller is not None and depth > 0 else None
        if found is not None:
            return Caller(caller.qualname, facts.line_of(site.node), under=found)
    view = facts.project
    if view is None:
        return None
    return index_evidence(view, Target(view.path, info.qualname))


def index_evidence(view, target: Target, depth: int = MAX_DEPTH) -> Caller | None:
    """A call in another module, in an enabled region (as the project index records it), that runs `target`
    directly or through its callers (`depth` up)."""
    frontier: list[tuple[Target, Caller | None]] = [(target, None)]
    seen = {target}
    for _ in range(depth + 1):
        following = []
        for current, below in frontier:
            for site in project_callers(view, current):
                module = view.project.names.get(site.caller.module, "?") if site.caller.module != view.path else None
                here = Caller(site.caller.qualname, site.call.line, module)
                if site.call.in_region and (below is not None or site.caller.module != view.path):
                    return chained(below, here)
                if site.caller not in seen and site.caller.qualname != "<module>":
                    seen.add(site.caller)
                    following.append((site.caller, chained(below, here)))
        frontier = following
    return None


def chained(first: Caller | None, last: Caller) -> Caller:
    """`first`'s chain of callers extended by `last` (a copy: a chain may be shared by several searches)."""
    if first is None:
        return last
    return Caller(first.qualname, first.line, first.module, chained(first.under, last))


def project_callers(view, target: Target) -> Iterator[CallerSite]:
    """The project's call sites of `target`; for a `forward`, also calls of objects of its class held by a name
    or an attribute (`self.block = Block()` then `self.block(h)`; `net = Net()` then `net(x)`)."""
    yield from view.callers(target)
    class_name, _, method = target.qualname.rpartition(".")
    if method != "forward" or not class_name or "." in class_name:
        return
    view.asked_calls.add("*")
    for path in sorted(view.project.indexed | {view.path}):
        record = view.record(path)
        if record is None:
            continue
        for key, constructor in record.instances.items():
            if constructor.rsplit(".", 1)[-1] != class_name or \
                    view.class_at(path, constructor) != (target.module, class_name):
                continue
            if ":" in key:
                scope, name = key.split(":", 1)
                callee, owns = name, (lambda qualname, scope=scope: qualname == scope)
            else:
                owner, attribute = key.split(".", 1)
                callee, owns = f"self.{attribute}", (lambda qualname, owner=owner: qualname.startswith(owner + "."))
            for qualname, summary in record.functions.items():
                if owns(qualname):
                    for call in summary.calls:
                        if call.callee == callee:
                            yield CallerSite(Target(path, qualname), call)


def fed_parameters(facts: ModuleFacts, info: FunctionInfo) -> dict[str, Source]:
    """Parameters that a call of this module, running under an enabled autocast region, passes a low-precision
    value (a parameter's dtype is the argument's: a caller's raw float32 input stays float32)."""
    fed: dict[str, Source] = {}
    scalars = scalar_parameters(info.node)
    for site in same_module_sites(facts, info):
        function = site.frame.function()
        region = facts.region_of(site.frame)
        if region is not None:
            if not region.active or region.frame is None:
                continue
            scope = region.frame
        else:
            caller = facts.function_info(site.frame)
            if caller is None or function is None or caller is info or caller_evidence(facts, caller) is None:
                continue
            scope = function
        low = set(low_precision_names(facts.assignments_in(function), scope, site.index, function))
        where = "the autocast call at line {}" if scope is not function else "the call at line {} (run under autocast)"
        for name, argument in bind_arguments(info.node, site.node, skip_self="." in info.qualname).items():
            if name not in fed and name not in scalars and is_low_precision(argument, low,
                                                                            lowering(facts, site.frame)):
                line = facts.line_of(site.node)
                fed[name] = Source(f"parameter `{{name}}` gets a low-precision tensor from {where.format(line)}, used "
                                   f"uncast with autocast off", parameter=True,
                                   shorter=(f"parameter `{{name}}` is low precision (call at line {line}), used uncast",))
    return fed


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


def arriving_names(facts: ModuleFacts, info: FunctionInfo | None, function: Frame | None, before: int,
                   caller: Caller | None, island: Region, parameters: dict[str, Source]) -> dict[str, Source]:
    """Names low precision at index `before` of the function, for a disabled region not nested in an enabled
    one: the `parameters` fed low precision, names assigned in an earlier enabled region of the function (a
    sibling), or computed outside any region while the function runs under its caller's autocast (`caller`),
    kept through dtype-preserving rebindings and dropped by any other; an assignment in a branch that excludes
    the region's (`if amp: ... else: ...`) never reaches it. Known torch.nn modules count for what
    autocast makes of their output (`nn.Embedding` of token ids: float32); under a caller's autocast, a user
    module or function counts only when handed something that may be a tensor (not sizes: `scalars`)."""
    low: dict[str, Source] = dict(parameters)
    scalars = scalar_parameters(info.node) if info is not None else set()
    relevant = [a for a in facts.assignments_in(function) if a.index < before and a.frame.function() is function
                and not exclusive(facts, a.frame, island.frame)]
    for assignment in sorted(relevant, key=lambda a: a.index):
        region = facts.region_of(assignment.frame)
        scalar = is_scalar(assignment.value, scalars)
        if region is not None and region.active and region.via == "with":
            produces = is_low_precision(assignment.value, set(low), lowering(facts, assignment.frame))
            source = Source(f"`{{name}}` is {dtype_words(region)} from the autocast region at line "
                            f"{facts.line_of(region.opener)} and used uncast with autocast off (line "
                            f"{facts.line_of(island.opener)})") if produces else None
        elif region is None and caller is not None:
            produces = is_low_precision(assignment.value, set(low), lowering(facts, assignment.frame, scalars))
            source = Source(f"`{{name}}` arrives low precision: {caller.describe()}",
                            shorter=(f"`{{name}}` arrives low precision: {caller.describe(short=True)}",
                                     "`{name}` arrives low precision: a caller runs this under "
                                     "autocast")) if produces else None
        else:
            source = kept_low(assignment.value, low)
            produces = source is not None
        for name in assignment.targets:
            if "." in name:
                continue
            if scalar:
                scalars.add(name)
            else:
                scalars.discard(name)
            if produces and (len(assignment.targets) == 1 or isinstance(assignment.value, cst.Call)):
                low[name] = source
            else:
                low.pop(name, None)
    return low


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


def bind_arguments(function: cst.FunctionDef, call: cst.Call, skip_self: bool) -> dict[str, cst.BaseExpression]:
    """Which argument expression of `call` each parameter of `function` receives (plain cases only)."""
    params = [*function.params.posonly_params, *function.params.params]
    if skip_self and params:
        params = params[1:]
    names = [p.name.value for p in params] + [p.name.value for p in function.params.kwonly_params]
    bound: dict[str, cst.BaseExpression] = {}
    for position, arg in enumerate(call.args):
        if arg.star:
            break
        if arg.keyword is None and position < len(params):
            bound[params[position].name.value] = arg.value
        elif arg.keyword is not None and arg.keyword.value in names:
            bound[arg.keyword.value] = arg.value
    return bound


def disabled_region_possible(summary) -> bool:
    """The screen's question: a call that can open a disabled region, one passing a literal `False` (positionally
    or as `enabled=False`) to something that can open a region, or to a `partial`."""
    return summary.ask(summary.has_token("False"), lambda: any(
        summary.callee_can_open(call.func) or (type(call.func) is ast.Attribute and call.func.attr == "partial")
        or (type(call.func) is ast.Name and (call.func.id == "partial"
                                             or "partial" in summary.import_bound.get(call.func.id, ())))
        for call in summary.false_calls))


def second_region_possible(summary) -> bool:
    """A region written disabled beside a second opener that can reach it: another with-statement that can open
    a region in the same function (an earlier sibling), or, for a disabled region in (or decorating) a function
    that this module calls by its name or a `forward` (called through its module's objects), any other opener
    or decorator (a caller's region)."""
    def exact() -> bool:
        capable = [(node, function) for node, function, _ in summary.withs if summary.with_can_open(node)]
        decorators = sum(1 for decorators in summary.call_decorators.values() for d in decorators
                         if summary.can_open(d))
        if len(capable) + decorators < 2:
            return False
        for node, function in capable:
            if not any(written_disabled(item.context_expr) for item in node.items):
                continue
            if any(other is not node and owner is function for other, owner in capable):
                return True
            if called(getattr(function, "name", None)):
                return True
        return any(called(summary.function_names_by_id.get(function_id))
                   for function_id, decorators in summary.call_decorators.items()
                   if any(summary.can_open(d) and written_disabled(d) for d in decorators))

    def called(name: str | None) -> bool:
        return name is not None and (name == "forward" or name in summary.call_sites_by_name)

    return summary.ask(summary.has_token("with") or "@" in summary.text, exact)


def written_disabled(expr: ast.AST) -> bool:
    """An opener written disabled: a literal `enabled=False`, or a literal False passed positionally."""
    return type(expr) is ast.Call and (
        any(k.arg == "enabled" and type(k.value) is ast.Constant and k.value.value is False for k in expr.keywords)
        or any(type(a) is ast.Constant and a.value is False for a in expr.args))


def region_in_region_possible(summary) -> bool:
    """A region can open inside another in the same function: a with-statement that can open one inside a
    with-statement (or a function decorated with a call) that can; or a function decorated with a call that can
    open one, called (by its name) from code that runs in a region of its own function. The facts layer nests a
    region only these ways (`region_of`, lexical; a decorated function's call sites)."""
    def exact() -> bool:
        if any(summary.with_can_open(node) and summary.context_can_open(function, withs)
               for node, function, withs in summary.withs):
            return True
        for function_id, decorators in summary.call_decorators.items():
            if not any(summary.can_open(decorator) for decorator in decorators):
                continue
            name = summary.function_names_by_id[function_id]
            if any(summary.context_can_open(caller, withs)
                   for caller, withs, _, _, _ in summary.call_sites_by_name.get(name, ())):
                return True
        return False

    return summary.ask(summary.has_token("with") or "@" in summary.text, exact)
