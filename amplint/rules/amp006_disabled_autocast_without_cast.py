"""AMP006 disabled-autocast-without-cast."""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from amplint.facts import ModuleFacts, Region, RegionState
from amplint.facts.dtypes import UncastUses, low_precision_names
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.scopes import dtype_words, snippet

NON_TENSOR_ANNOTATIONS = frozenset({"int", "float", "bool", "str", "bytes", "None", "dict", "list", "tuple"})


class DisabledAutocastWithoutCast(Rule):
    """## What it does
    Checks for tensors produced in an active autocast region and used inside a nested `autocast(enabled=False)`
    block without a float32 cast (`.float()`, `.to(torch.float32)`, `.to(dtype=torch.float32)`, `.double()`,
    `.type(torch.float32)`), and for functions decorated with an `enabled=False` autocast whose tensor parameters
    are used without a cast.

    ## Why is this bad?
    `autocast(enabled=False)` only stops autocast from casting; it does not cast anything back. PyTorch's docs:
    "you should cast them to float32 before use in the disabled region". A bfloat16/float16 tensor stays low
    precision inside, so the float32 computation the block was written for does not happen: an fp32
    `nn.Linear` raises `RuntimeError: mat1 and mat2 must have the same dtype, but got BFloat16 and Float`,
    reductions lose precision (measured relative error 1.7e-3 in bfloat16 vs 1e-8 after `.float()`), and in
    float16 `h.pow(2).sum()` overflows to `inf`.

    ## Example
    ```python
    with torch.autocast("cuda"):
        h = model(x)
        with torch.autocast("cuda", enabled=False):
            out = fp32_head(h)
    ```

    ## Use instead
    ```python
    with torch.autocast("cuda"):
        h = model(x)
        with torch.autocast("cuda", enabled=False):
            out = fp32_head(h.float())
    ```

    ## Fix safety
    Safe. The fix casts each uncast use inside the disabled block with `.float()`, leaving the outer name's
    dtype unchanged after the block.

    ## Limits
    Only names are followed, not attributes or containers. Values that are float32 anyway (casts, tensor
    factories, ops CUDA autocast runs in float32 such as softmax, norms and losses) are not reported, and a
    name assigned from something amplint cannot see into is not either.
    """

    code = "AMP006"
    name = "disabled-autocast-without-cast"
    fix = "safe"
    words = ("enabled=False", "enabled = False", "autocast(False", "enabled=0")

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        for frame in facts.with_frames.values():
            region = facts.region_of(frame)
            if region is None or region.state is not RegionState.OFF or region.frame is not frame:
                continue
            outer = facts.region_of(frame.parent)
            if outer is None or not outer.active or outer.frame is None:
                continue
            low = low_precision_names(facts.assignments, outer.frame, frame.start_index, frame.function())
            yield from self._report(facts, frame.node.body, low, outer, region, parameters=False)
        for info in facts.functions:
            region = facts.region_of(info.frame)
            if region is None or region.state is not RegionState.OFF or region.via != "decorator":
                continue
            parameters = {name: None for name in self._tensor_parameters(info.node)
                          if not facts.is_scaler(name, info.frame) and not facts.is_optimizer(name, info.frame)}
            yield from self._report(facts, info.node.body, parameters, None, region, parameters=True)

    @staticmethod
    def _tensor_parameters(function: cst.FunctionDef) -> dict[str, None]:
        found = {}
        params = function.params
        for param in [*params.posonly_params, *params.params, *params.kwonly_params]:
            name = param.name.value
            if name in ("self", "cls"):
                continue
            annotation = param.annotation
            if annotation is not None and _annotation(annotation) in NON_TENSOR_ANNOTATIONS:
                continue
            if param.default is not None and not (isinstance(param.default, cst.Name)
                                                  and param.default.value == "None"):
                continue
            found[name] = None
        return found

    def _report(self, facts: ModuleFacts, body: cst.BaseSuite, low: dict, outer: Region | None,
                region: Region, parameters: bool) -> Iterator[Finding]:
        visitor = UncastUses(set(low))
        body.visit(visitor)
        first_use: dict[str, cst.Name] = {}
        for use in visitor.uses:
            first_use.setdefault(use.value, use)
        for name, use in first_use.items():
            uses = [u for u in visitor.uses if u.value == name]
            if parameters:
                origin = (f"parameter `{name}` of a function decorated with `{snippet(facts, region.opener)}` "
                          f"(line {facts.line_of(region.opener)}) arrives as bfloat16/float16 when called "
                          f"from an autocast region")
            else:
                origin = (f"`{name}` comes from the autocast region at line {facts.line_of(outer.opener)} "
                          f"({dtype_words(outer)} there) and enters `{snippet(facts, region.opener)}`")
            message = (
                f"{origin} without a cast: autocast is off here but nothing converts it back, so the float32 "
                f"computation meant here runs in low precision (an fp32 nn.Linear raises `mat1 and mat2 must have "
                f"the same dtype`; reductions lose ~1.7e-3 in bfloat16, fp16 sums overflow to inf); use "
                f"`{name}.float()`"
            )

            def rebuild(uses=uses):
                return replace_nodes(facts.module, {
                    u: cst.Call(func=cst.Attribute(value=u, attr=cst.Name("float"))) for u in uses
                })

            yield Finding(use, message, FixPlan(f"Cast `{name}` with `.float()` inside the disabled region",
                                                rebuild))


def _annotation(annotation: cst.Annotation) -> str:
    node = annotation.annotation
    if isinstance(node, cst.Name):
        return node.value
    return ""

