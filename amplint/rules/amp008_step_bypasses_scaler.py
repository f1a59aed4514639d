"""AMP008 step-bypasses-scaler."""

from __future__ import annotations

import os
from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.vocabulary import Effect
from amplint.diagnostics import Applicability
from amplint.facts import Event, EventKind, ModuleFacts
from amplint.facts.module import loops_within, may_follow, scaler_enabled
from amplint.facts.switches import guarded_by_amp_test
from amplint.index.summary import Summary
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.across import calls_beside_a_step
from amplint.rules.screen import Ask, AskProject
from amplint.rules.scopes import MESSAGE_SNIPPET, snippet


STEPPING = (Effect.SCALER_STEP, Effect.SCALER_UPDATE, Effect.UNSCALE, Effect.OPTIMIZER_STEP)


def _scaled_backward_alone(view, target):
    """What the function `target` runs, through the project index: (the function running a scaled backward, its
    line) when it reaches one; False when it also steps, updates or unscales through a scaler or steps an
    optimizer, or runs a plain backward beside the scaled one (which one ran is not known): then a step after the
    call says nothing; None when it reaches no scaled backward."""
    reached = view.reaches(target, (Effect.SCALED_BACKWARD,))
    if reached is None:
        return None
    if view.reaches(target, STEPPING) is not None:
        return False
    doer = view.function(reached[0][-1])
    if doer is None or doer.lines.get(Effect.BACKWARD, 0) != doer.lines.get(Effect.SCALED_BACKWARD, 0):
        return False
    return reached[0][-1], doer.lines[Effect.SCALED_BACKWARD]


def scaled_backward_beside_a_step(view) -> bool:
    """The screen's question across modules: does a function of this file that calls `.step()` (or module-level
    code beside one) call a function that runs a scaled backward, alone (`_scaled_backward_alone`), through the
    project index?"""
    for qualname, call in calls_beside_a_step(view):
        target = view.resolve(qualname, call.callee)
        if target is not None and _scaled_backward_alone(view, target):
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
    # a plain step here after a call reaching a scaled backward in another module
    # a call reaching a scaled backward in another module, in a function that calls `.step()`
    requires_across = Ask(Summary.calls_method, vocab.STEP) & AskProject(scaled_backward_beside_a_step)
    min_torch = "1.6"
    fix = "sometimes"

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        for step in facts.events:
            if step.kind is not EventKind.OPTIMIZER_STEP or step.optimizer is None:
                continue
            events = facts.events_in(step.frame.function())
            backward = _last_backward(facts, events, step)
            if backward is None:
                finding = _scaled_in_a_callee(facts, events, step)
                if finding is not None:
                    yield finding
                continue
            if not backward.scaled or backward.scaler is None:
                continue
            scaler = backward.scaler
            if scaler_enabled(facts, scaler, step.frame) is False or guarded_by_amp_test(facts, step, backward, scaler):
                continue
            if facts.no_grad_opener(step.frame) is not None or facts.no_grad_opener(backward.frame) is not None:
                continue  # code under no_grad/inference_mode is AMP005's business
            if any(e.kind in (EventKind.SCALER_STEP, EventKind.SCALER_UNSCALE) and e.optimizer == step.optimizer
                   for e in events):
                continue  # this optimizer goes through the scaler elsewhere in the function: another code path
            updates = [e for e in events if e.kind is EventKind.SCALER_UPDATE and e.scaler == scaler]
            has_update = bool(updates)
            per_step = not updates or any(_updates_every_step(facts, step, update) for update in updates)
            optimizer = step.optimizer
            message = (f"`{snippet(facts, step.node, MESSAGE_SNIPPET)}` bypasses `{scaler}`: it steps on gradients "
                       f"still scaled by the loss scale (line {facts.line_of(backward.node)})")
            advice = (f"Use `{scaler}.step({optimizer})`" + ("" if has_update else f" and `{scaler}.update()`")
                      + ("" if per_step else f", with `{scaler}.update()` after it in every iteration"))
            fix = None
            if per_step and (has_update or not _may_update_elsewhere(facts, scaler, step)):
                fix = self._fix(facts, step, scaler, has_update)
            if fix is not None and not facts.optimizer_known(step.optimizer, step.frame):
                fix.applicability = Applicability.UNSAFE
            yield Finding(step.node, message, fix, help=advice)

    @staticmethod
    def _fix(facts: ModuleFacts, step: Event, scaler: str, has_update: bool) -> FixPlan | None:
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


def _scaled_in_a_callee(facts: ModuleFacts, events: list[Event], step: Event) -> Finding | None:
    """A plain `optimizer.step()` after a call, in the same function, to a helper or another object's method that
    runs a scaled backward (`model.scaled_backward(loss, trainer)` doing `trainer.scaler.scale(loss).backward()`),
    through the project index, a few calls deep. Silent when the helper also steps, unscales or updates a scaler,
    or runs a plain backward first; when the function goes through a scaler itself (`scaler.step`,
    `scaler.unscale_` of any optimizer: another code path) or the step is guarded by an AMP test."""
    if any(e.kind in (EventKind.SCALER_STEP, EventKind.SCALER_UNSCALE, EventKind.SCALER_UPDATE) for e in events):
        return None
    if facts.no_grad_opener(step.frame) is not None or not facts.optimizer_known(step.optimizer, step.frame) \
            and not facts.is_optimizer(step.optimizer, step.frame):
        return None
    view = facts.project
    info = facts.function_info(step.frame)
    function = step.frame.function()
    found = None
    event_nodes = {id(e.node) for e in facts.events}
    for call in facts.calls:
        if call.index >= step.index or call.frame.function() is not function or call.dotted is None \
                or (call.qualified or "").startswith("torch.") or id(call.node) in event_nodes:
            continue
        if not may_follow(facts, call.frame, step.frame) or not loops_within(call.frame, step.frame):
            continue
        target = view.resolve(info.qualname if info else None, call.dotted)
        reached = _scaled_backward_alone(view, target) if target is not None else None
        if reached is None:
            continue
        if reached is False:
            return None
        found = (call, *reached)
    if found is None:
        return None
    call, doing, line = found
    if guarded_by_amp_test(facts, step, Event(EventKind.BACKWARD, call), "scaler"):
        return None
    other = doing.module != view.path
    where = f"`{doing.qualname}()` at " + (f"{os.path.basename(doing.module)}:{line}" if other else f"line {line}")
    message = (f"`{snippet(facts, step.node, MESSAGE_SNIPPET)}` bypasses the GradScaler of the scaled backward "
               f"in `{snippet(facts, call.node.func, 32)}(...)`")
    text = view.text(doing.module) if other else facts.source
    lines = text.splitlines() if text else []
    column = len(lines[line - 1]) - len(lines[line - 1].lstrip()) + 1 if 0 < line <= len(lines) else 1
    note = ((doing.module if other else None, line, column), f"`{doing.qualname}()` scales the loss here")
    return Finding(step.node, message, notes=(note,),
                   help=f"Step through the scaler that scaled the loss ({where}): "
                        f"`scaler.step({step.optimizer})` then `scaler.update()`")


def _may_update_elsewhere(facts: ModuleFacts, scaler: str, step: Event) -> bool:
    """Can the scaler be updated outside the step's function: an `.update()` on a scaler of that name anywhere in
    the module, or the scaler (or its owner) passed to a call of the function? Then an added `update()` may be
    a second one per iteration, which raises `No inf checks were recorded prior to update.`"""
    return (facts.updates_by_last_name.get(scaler.rsplit(".", 1)[-1], 0) > 0
            or facts.scaler_handed_over(scaler, step.frame.function()))


def _updates_every_step(facts: ModuleFacts, step: Event, update: Event) -> bool:
    """Does `update` run after `step` in every pass of the loops around the step (the same loops, later in
    the body)? An update only after the loop would leave two `scaler.step` calls without an update between
    them: `RuntimeError: step() has already been called since the last update().`"""
    return (update.index > step.index and step.frame.is_within(update.frame)
            and update.frame.loops_up_to_function() == step.frame.loops_up_to_function())


def _last_backward(facts: ModuleFacts, events: list[Event], step: Event) -> Event | None:
    """The backward whose gradients this step uses: the last one before it on a path that can reach it, in a
    loop that does not repeat the step more often than the backward."""
    for event in reversed([e for e in events if e.index < step.index]):
        if event.kind is EventKind.BACKWARD and may_follow(facts, event.frame, step.frame) \
                and loops_within(event.frame, step.frame):
            return event
    return None
