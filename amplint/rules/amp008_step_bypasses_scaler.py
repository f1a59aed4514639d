"""AMP008 step-bypasses-scaler."""

from __future__ import annotations

import os
from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.vocabulary import Effect
from amplint.diagnostics import Applicability
from amplint.facts import Event, ModuleFacts
from amplint.facts.bypass import (Bypass, ScaledInCallee, bypass, last_backward, may_update_elsewhere,
                                  scaled_backward_alone, scaled_in_a_callee)
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.facts.across import calls_beside_a_step
from amplint.rules.screen import Ask, AskProject, Summary
from amplint.rules.scopes import MESSAGE_SNIPPET, snippet


def scaled_backward_beside_a_step(view) -> bool:
    """The screen's question across modules: does a function of this file that calls `.step()` (or module-level
    code beside one) call a function that runs a scaled backward, alone (`scaled_backward_alone`), through the
    project index?"""
    for qualname, call in calls_beside_a_step(view):
        target = view.resolve(qualname, call.callee)
        if target is not None and scaled_backward_alone(view, target):
            return True
    return False


class StepBypassesScaler(Rule):
    """## What it does
    Checks for `optimizer.step()` called directly after `scaler.scale(loss).backward()` in the same function,
    when that optimizer is never stepped through `scaler.step(optimizer)` there.

    Applies to every torch version with `GradScaler` (torch >= 1.6).

    ## Why is this bad?
    `scaler.scale(loss).backward()` leaves every gradient multiplied by the loss scale (65536 at first).
    `scaler.step(optimizer)` divides them back and skips the step when they overflowed; `optimizer.step()`
    does neither. Measured on CPU with torch 2.13: with SGD the first update is 65536x too large (2562.0
    instead of 0.0391); with Adam the scale cancels out, but overflowing float16 gradients are not skipped:
    after 3 plain steps the parameters are inf/NaN, where `scaler.step` skipped those steps and backed the scale
    off to 8192. A later `scaler.update()` raises `AssertionError: No inf checks were recorded prior to update.`

    ## Example
    ```python
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda"):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    optimizer.step()
    ```

    ## Use instead
    ```python
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda"):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    Sometimes safe. The fix replaces `optimizer.step()` with `scaler.step(optimizer)`, and adds `scaler.update()` on
    the next line when the function never calls it: the step is then unscaled and skipped on overflow, which is
    what the scaled backward asked for.

    - `scaler.step(x)` reads `x.param_groups`, so anything but an optimizer raises (a scheduler:
      `AttributeError: 'StepLR' object has no attribute 'param_groups'`). The fix is safe when the stepped object is
      known to be an optimizer: passed to `scaler.step`/`scaler.unscale_` elsewhere in the module, or built from a
      known optimizer class (`torch.optim.SGD(...)`). Known only by its other uses (`x.zero_grad()`,
      `x.param_groups`), the fix is unsafe; known by its name alone (`lr_scheduler`, unpacked from
      `get_optimizer_and_scheduler(...)`), nothing is reported.
    - No fix when `scaler.update()` runs, but not after the step in every pass of its loop (only after the loop):
      two `scaler.step` calls without an update between them raise
      `RuntimeError: step() has already been called since the last update().`
    - `scaler.update()` is not added when the scaler may be updated elsewhere (an `.update()` on a scaler of that
      name in another function, or the scaler handed to a call): a second update per iteration raises
      `No inf checks were recorded prior to update.`
    - No fix for `optimizer.step(closure)`: GradScaler does not support closures.

    The scaled backward may run in a helper or another object's method called before the step in the same
    function (`model.scaled_backward(loss, trainer)` doing `trainer.scaler.scale(loss).backward()`), found through
    the project index a few calls deep: reported at the step, without a fix (the scaler is the helper's).

    ## Limits
    Only objects known to be optimizers by what the code does with them count: built from a torch.optim class
    (or a known optimizer package), passed to `scaler.step`/`scaler.unscale_`, given `.zero_grad()` or read for
    `.param_groups`. A name alone says nothing (`lr_scheduler`, unpacked from a factory, is not an optimizer).
    Silent when the backward and the step sit on different code paths (`if use_amp: scaler.scale(loss).backward()
    else: loss.backward()`, then `if use_amp: scaler.step(opt) else: opt.step()`), when the step is guarded by a
    test on the scaler or the AMP flag (its code, not a comment in it), when another backward comes between them,
    when the scaler is built with `enabled=False`, and for apex (`amp.scale_loss`), accelerate
    (`accelerator.backward`) and Lightning (`manual_backward`), which unscale by themselves.
    """

    code = "AMP008"
    name = "step-bypasses-scaler"
    words = (vocab.SCALE,)
    requires = (Ask(Summary.scaler_possible) & Ask(Summary.calls_method, vocab.STEP)
                & Ask(Summary.calls_method, vocab.SCALE))
    # a plain step after a call, in the same function, reaching a scaled backward in another module
    requires_across = Ask(Summary.calls_method, vocab.STEP) & AskProject(scaled_backward_beside_a_step)
    min_torch = "1.6"
    fix = "sometimes"

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        for step in facts.events:
            if step.kind != Effect.OPTIMIZER_STEP or step.optimizer is None:
                continue
            events = facts.events_in(step.frame.function())
            backward = last_backward(facts, events, step)
            if backward is None:
                if (callee := scaled_in_a_callee(facts, events, step)) is not None:
                    yield _behind_a_call(facts, step, callee)
            elif (bypassing := bypass(facts, events, step, backward)) is not None:
                yield _bypass(facts, step, bypassing)


def _bypass(facts: ModuleFacts, step: Event, bypassing: Bypass) -> Finding:
    """The step bypasses the scaler of the scaled backward before it; replaced with `scaler.step(optimizer)` (and
    `scaler.update()` added where none runs) when an update follows it in every iteration and none is added where
    the scaler may be updated elsewhere; unsafe when the stepped object is not known to be an optimizer."""
    scaler, optimizer, has_update = bypassing.scaler, step.optimizer, bypassing.has_update
    message = (f"`{snippet(facts, step.node, MESSAGE_SNIPPET)}` bypasses `{scaler}`: it steps on gradients "
               f"still scaled by the loss scale (line {facts.line_of(bypassing.backward.node)})")
    advice = (f"Use `{scaler}.step({optimizer})`" + ("" if has_update else f" and `{scaler}.update()`")
              + ("" if bypassing.per_step else f", with `{scaler}.update()` after it in every iteration"))
    fix = None
    if bypassing.per_step and (has_update or not may_update_elsewhere(facts, scaler, step)):
        fix = _fix(facts, step, scaler, has_update)
    if fix is not None and not facts.optimizer_known(step.optimizer, step.frame):
        fix.applicability = Applicability.UNSAFE
    return Finding(step.node, message, fix, help=advice)


def _fix(facts: ModuleFacts, step: Event, scaler: str, has_update: bool) -> FixPlan | None:
    """`optimizer.step()` -> `scaler.step(optimizer)`, and `scaler.update()` on the next line when the function
    calls none; none for `optimizer.step(closure)` (GradScaler does not support closures)."""
    if step.node.args:
        return None
    statement = step.call.statement
    replacement = cst.parse_expression(f"{scaler}.step({step.optimizer})")
    if has_update:
        return FixPlan(f"Replace with `{scaler}.step({step.optimizer})`",
                       lambda: replace_nodes(facts.module, {step.node: replacement}))
    if not (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr) and statement.body[0].value is step.node):
        return None

    def rebuild() -> cst.Module:
        stepped = statement.with_changes(body=[cst.Expr(replacement)])
        update = cst.SimpleStatementLine(body=[cst.Expr(cst.parse_expression(f"{scaler}.update()"))])
        return replace_nodes(facts.module, {statement: cst.FlattenSentinel([stepped, update])})

    return FixPlan(f"Replace with `{scaler}.step({step.optimizer})` and add `{scaler}.update()`", rebuild)


def _behind_a_call(facts: ModuleFacts, step: Event, callee: ScaledInCallee) -> Finding:
    """The step bypasses the GradScaler of a scaled backward run behind a call before it: reported at the step,
    with the helper's scaling as a note, without a fix (the scaler is the helper's)."""
    doer, line = callee.doer, callee.line
    where = f"`{doer.qualname}()` at " + (f"{os.path.basename(callee.module)}:{line}" if callee.module
                                         else f"line {line}")
    message = (f"`{snippet(facts, step.node, MESSAGE_SNIPPET)}` bypasses the GradScaler of the scaled backward "
               f"in `{snippet(facts, callee.call.node.func, 32)}(...)`")
    note = ((callee.module, line, callee.column), f"`{doer.qualname}()` scales the loss here")
    return Finding(step.node, message, notes=(note,),
                   help=f"Step through the scaler that scaled the loss ({where}): "
                        f"`scaler.step({step.optimizer})` then `scaler.update()`")
