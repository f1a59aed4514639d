"""AMP012 half-model-with-scaler."""

from __future__ import annotations

from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.facts import ModuleFacts
from amplint.facts.halves import caller_steps_a_half_factory, half_models_stepped
from amplint.rules.base import Finding, Rule
from amplint.rules.screen import Ask, AskProject, Summary
from amplint.rules.scopes import MESSAGE_SNIPPET, snippet

CONVERTERS = sorted(vocab.HALF_CONVERTERS)  # `.half()`, `.to(...)`, `.type(...)`


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
        for found in half_models_stepped(facts):
            if found.use is not None:
                use = found.use
                where = f"`{snippet(facts, use.node, MESSAGE_SNIPPET)}` at line {facts.line_of(use.node)} raises"
            else:
                caller, module, line = found.caller
                where = f"`{caller}()` steps its optimizer via a GradScaler (`{module}`, line {line})"
            message = f"`{_tail(facts, found.half.node, 32)}` makes `{found.model}` float16: {where}"
            yield Finding(found.half.node, message, help=(
                f"Keep `{found.model}` float32 and run the forward pass under "
                f"`torch.autocast(..., dtype=torch.float16)`"))


def _tail(facts: ModuleFacts, node: cst.CSTNode, limit: int = 60) -> str:
    """The end of a long method chain (`...cuda().half()`), which is the part that matters here."""
    text = " ".join(facts.code(node).split())
    return text if len(text) <= limit else "..." + text[3 - limit:]
