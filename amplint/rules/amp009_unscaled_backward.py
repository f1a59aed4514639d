"""AMP009 unscaled-backward."""

from __future__ import annotations

from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.facts import Event, ModuleFacts
from amplint.facts.scaled_losses import ScaledLosses
from amplint.diagnostics import Applicability
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.screen import Ask, Summary
from amplint.rules.scopes import MESSAGE_SNIPPET, snippet


class UnscaledBackward(Rule):
    """## What it does
    Checks for `loss.backward()` on a loss that was not passed through `scaler.scale(...)`, when the gradients
    are then stepped with `scaler.step(optimizer)` in the same function.

    Applies to every torch version with `GradScaler` (torch >= 1.6).

    ## Why is this bad?
    `scaler.step(optimizer)` divides every gradient by the loss scale before stepping, assuming
    `scaler.scale(loss).backward()` multiplied them. Without the scaling, two things happen (measured on CPU with
    torch 2.13): when nothing was scaled yet, the first `scaler.step` raises
    `AssertionError: Attempted step but _scale is None.  This may indicate your script did not use
    scaler.scale(loss or outputs) earlier in the iteration.`; when something else was scaled (another loss,
    `scaled = scaler.scale(loss)` computed but not used), the gradients of this loss are divided by 65536 and
    the SGD update shrinks to 1.5e-5 of its size. With float16 the small gradients also underflow: the loss
    scale exists to prevent exactly that.

    ## Example
    ```python
    import torch

    scaler = torch.amp.GradScaler("cuda")
    loss = loss_fn(model(x), y)
    scaled = scaler.scale(loss)
    loss.backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Use instead
    ```python
    import torch

    scaler = torch.amp.GradScaler("cuda")
    loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    A loss the function is handed (`def _backward(self, loss)`) is whatever its callers pass: it is reported
    only when every call site the project index sees, in this module or another, hands over a loss computed
    unscaled (and at least one is seen); a caller that scales it first
    (`loss = self.scaler.scale(loss) if self.scaler else loss; self._backward(loss)`) makes it correct.

    ## Fix safety
    Sometimes safe. Safe for a loss the function computes itself: the fix rewrites `loss.backward(...)` as
    `scaler.scale(loss).backward(...)` with the scaler of the `scaler.step(...)` that follows, keeping the
    backward's arguments. Unsafe for a loss handed in: a caller the index cannot see (a callback, another
    project) may pass it scaled already, and scaling it twice multiplies the update by the loss scale.

    ## Limits
    Silent when the unscaled backward is the non-AMP code path (`if use_amp: scaler.scale(loss).backward() else:
    loss.backward()`), when an `optimizer.step()` consumes its gradients first, when the scaler is built with
    `enabled=False`, and for `accelerator.backward(loss)`, `fabric.backward(loss)`, `model_engine.backward(loss)`,
    Lightning's `manual_backward` and apex's `amp.scale_loss(...)` losses, which are scaled by their framework.
    Also silent when another backward of the same function is scaled, since the unscaled one may belong to a
    separate graph (a reference model), unless that scaled backward passes `retain_graph=True` for it.
    Silent when the loss's origin is not in view: a parameter with no caller in the project or a caller passing
    something not known, an attribute set in another method (`self.loss`), a loop or `with` target, a global.
    A loss whose code says `scale` (a name like `scaled_loss`, a helper like `compute_scaled_loss()`) is
    taken as scaled: silent.
    """

    code = "AMP009"
    name = "unscaled-backward"
    words = (vocab.BACKWARD,)
    requires = (Ask(Summary.scaler_possible) & Ask(Summary.calls_method, vocab.BACKWARD)
                & Ask(Summary.calls_method, vocab.STEP))
    min_torch = "1.6"
    fix = "sometimes"

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        losses = ScaledLosses(facts)
        for backward in facts.events:
            unscaled = losses.unscaled(backward)
            if unscaled is None:
                continue
            step, callers = unscaled.step, unscaled.callers
            scaler = step.scaler
            known = "" if callers is None else f" by all {callers} call{'s' if callers > 1 else ''} seen"
            receiver = backward.node.func.value
            loss = snippet(facts, receiver)
            optimizer = step.optimizer or "optimizer"
            message = (f"`{snippet(facts, receiver, MESSAGE_SNIPPET)}` is backpropagated unscaled{known}, but "
                       f"`{scaler}.step({optimizer})` at line {facts.line_of(step.node)} unscales")
            fix = _fix(facts, backward, scaler, Applicability.SAFE if callers is None else Applicability.UNSAFE)
            yield Finding(backward.node, message, fix,
                          help=None if fix else f"Use `{scaler}.scale({loss}).backward()`")


def _fix(facts: ModuleFacts, backward: Event, scaler: str, applicability: Applicability) -> FixPlan | None:
    """`loss.backward(...)` -> `scaler.scale(loss).backward(...)`, with the scaler of the step that follows."""
    receiver = backward.node.func.value
    bare = receiver.with_changes(lpar=[], rpar=[]) if hasattr(receiver, "lpar") else receiver
    scale = cst.parse_expression(f"{scaler}.scale(_)")
    scale = scale.with_changes(args=[cst.Arg(bare)])
    new = backward.node.with_changes(func=backward.node.func.with_changes(value=scale))
    return FixPlan(f"Scale the loss: `{scaler}.scale(...).backward()`",
                   lambda: replace_nodes(facts.module, {backward.node: new}), applicability)
