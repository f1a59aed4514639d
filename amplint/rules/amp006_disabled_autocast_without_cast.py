"""AMP006 disabled-autocast-without-cast."""

from __future__ import annotations

import ast
from typing import Iterator

from amplint.lazy import libcst as cst
from amplint.facts.walk import walk
from amplint.lazy import visitor_class

from amplint.facts import ModuleFacts, Region, RegionState
from amplint.diagnostics import Applicability
from amplint.facts.dtypes import UncastUses, floating_names, is_low_precision, low_precision_names, tensor_module
from amplint.facts.model import Call
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.scopes import dtype_words


class DisabledAutocastWithoutCast(Rule):
    """## What it does
    Checks for tensors produced in an active autocast region and used inside a nested `autocast(enabled=False)`
    block without a float32 cast (`.float()`, `.to(torch.float32)`, `.to(dtype=torch.float32)`, `.double()`,
    `.type(torch.float32)`), and for functions decorated with an `enabled=False` autocast whose parameters are
    used without a cast when a call from an active autocast region of the same module passes them a
    low-precision tensor.

    ## Why is this bad?
    `autocast(enabled=False)` only stops autocast from casting; it does not cast anything back. PyTorch's docs:
    "you should cast them to float32 before use in the disabled region". A bfloat16/float16 tensor stays low
    precision inside, so the float32 computation the block was written for does not happen: an fp32
    `nn.Linear` raises `RuntimeError: mat1 and mat2 must have the same dtype, but got BFloat16 and Float`,
    reductions lose precision (measured relative error 1.7e-3 in bfloat16 vs 1e-8 after `.float()`), and in
    float16 `h.pow(2).sum()` overflows to `inf`.

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
    a number, or a parameter of a decorated function, whose callers are not all known) it is unsafe:
    `.float()` on a dict or an int raises `AttributeError`. Values known to be integer or bool (`.long()`,
    `.bool()`, comparisons, `argmax`, sizes, their indexing) are not low precision and are not reported.

    ## Limits
    Only names are followed, not attributes or containers. A value whose type is not known (the output of a user
    module or function: perhaps a dict of heads) counts only where it is computed with (a method call on it, an
    operand, an argument of a torch function or of a torch.nn module), not when handed to a user function, which
    may cast it itself. Values that are float32 anyway (casts, tensor
    factories, ops CUDA autocast runs in float32 such as softmax, norms and losses) are not reported, and a
    name assigned from something amplint cannot see into is not either.
    """

    code = "AMP006"
    name = "disabled-autocast-without-cast"
    fix = "sometimes"
    # A disabled region is `autocast(..., enabled=False)` or `False` passed positionally (legacy
    # `autocast(False)`, `torch.autocast("cuda", None, False)`), also through `partial`.
    words = ("autocast",)

    @classmethod
    def maybe_applies(cls, summary) -> bool:
        # A disabled region nested in an active one (lexically, in one function), or a function decorated with
        # a disabled autocast called from an active region.
        return (summary.regions_possible() and disabled_region_possible(summary)
                and region_in_region_possible(summary))

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        for frame in facts.with_frames.values():
            region = facts.region_of(frame)
            if region is None or region.state is not RegionState.OFF or region.frame is not frame:
                continue
            outer = facts.region_of(frame.parent)
            if outer is None or not outer.active or outer.frame is None:
                continue
            function = frame.function()
            assigned = facts.assignments_in(function)
            low = low_precision_names(assigned, outer.frame, frame.start_index, function)
            floats = floating_names(assigned, outer.frame, frame.start_index, function, facts)
            yield from self._report(facts, frame.node.body, low, outer, region, parameters=False, floats=floats,
                                    frame=frame)
        for info in facts.functions:
            region = facts.region_of(info.frame)
            if region is None or region.state is not RegionState.OFF or region.via != "decorator":
                continue
            parameters = self._parameters_fed_low_precision(facts, info)
            yield from self._report(facts, info.node.body, parameters, None, region, parameters=True,
                                    frame=info.frame)

    @staticmethod
    def _parameters_fed_low_precision(facts: ModuleFacts, info) -> dict[str, Call]:
        """Parameters that some call from an active autocast region of this module passes a low-precision value."""
        fed: dict[str, Call] = {}
        for site in facts.call_sites.get(info.qualname, []):
            outer, chain = facts.effective_region(site.frame)
            if outer is None or not outer.active or chain or outer.frame is None:
                continue
            function = site.frame.function()
            low = set(low_precision_names(facts.assignments_in(function), outer.frame, site.index, function))
            for name, argument in bind_arguments(info.node, site.node, skip_self="." in info.qualname).items():
                if is_low_precision(argument, low):
                    fed.setdefault(name, site)
        return fed

    def _report(self, facts: ModuleFacts, body: cst.BaseSuite, low: dict, outer: Region | None,
                region: Region, parameters: bool, floats: set[str] = frozenset(),
                frame=None) -> Iterator[Finding]:
        """One finding per watched name used uncast in `body`; its `.float()` fix is safe only for a name in
        `floats` (surely a floating tensor), unsafe otherwise (a dict, a tuple or a number would raise)."""
        visitor = visitor_class(UncastUses)(set(low), set(floats),
                                            lambda func: tensor_module(facts, func, frame))
        walk(body, visitor)
        visitor.uses.sort(key=lambda node: (facts.position(node)[0].line, facts.position(node)[0].column))
        first_use: dict[str, cst.Name] = {}
        for use in visitor.uses:
            first_use.setdefault(use.value, use)
        for name, use in first_use.items():
            uses = [u for u in visitor.uses if u.value == name]
            if parameters:
                site = low[name]
                message = (f"parameter `{name}` gets a low-precision tensor from the autocast call at line "
                           f"{facts.line_of(site.node)} and is used uncast with autocast off")
            else:
                message = (f"`{name}` is {dtype_words(outer)} from the autocast region at line "
                           f"{facts.line_of(outer.opener)} and used uncast with autocast off (line "
                           f"{facts.line_of(region.opener)})")

            def rebuild(uses=uses):
                return replace_nodes(facts.module, {
                    u: cst.Call(func=cst.Attribute(value=u, attr=cst.Name("float"))) for u in uses
                })

            applicability = Applicability.SAFE if name in floats else Applicability.UNSAFE
            yield Finding(use, message, FixPlan(f"Cast `{name}` with `.float()` inside the disabled region",
                                                rebuild, applicability))



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
