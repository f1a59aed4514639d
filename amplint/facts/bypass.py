"""An optimizer stepped directly while a scaler scales its loss: is a plain `optimizer.step()` taking gradients that
`scaler.scale(loss).backward()` left scaled, in the same function (`bypass`) or behind a call before the step that
runs a scaled backward in a helper or another object's method, found through the project index a few calls deep
(`scaled_in_a_callee`)? And what an added `scaler.step(optimizer)` must keep: an update after the step in every
pass of its loops, and no second update where the scaler may be updated elsewhere."""

from __future__ import annotations

from dataclasses import dataclass

from amplint.vocabulary import Effect
from amplint.facts.model import Call, Event
from amplint.facts.module import ModuleFacts, loops_within, may_follow, scaler_enabled
from amplint.facts.switches import guarded_by_amp_test
from amplint.index.project import Target

STEPPING = (Effect.SCALER_STEP, Effect.SCALER_UPDATE, Effect.UNSCALE, Effect.OPTIMIZER_STEP)


@dataclass(frozen=True)
class Bypass:
    """A plain `optimizer.step()` on the gradients of `backward`, a `scaler.scale(loss).backward()` of `scaler`.
    `has_update`: the function calls `scaler.update()`; `per_step`: it calls none, or one after the step in every
    pass of the loops around the step (`updates_every_step`)."""

    backward: Event
    scaler: str
    has_update: bool
    per_step: bool


@dataclass(frozen=True)
class ScaledInCallee:
    """A call before a plain step (`call`) that runs a scaled backward, alone, through the project index: done by
    `doer` at `line` and `column` (of its first code) of `module`, the doer's file (None: this module)."""

    call: Call
    doer: Target
    module: str | None
    line: int
    column: int


def last_backward(facts: ModuleFacts, events: list[Event], step: Event) -> Event | None:
    """The backward whose gradients this step uses: the last one before it on a path that can reach it, in a
    loop that does not repeat the step more often than the backward."""
    for event in reversed([e for e in events if e.index < step.index]):
        if event.kind == Effect.BACKWARD and may_follow(facts, event.frame, step.frame) \
                and loops_within(event.frame, step.frame):
            return event
    return None


def bypass(facts: ModuleFacts, events: list[Event], step: Event, backward: Event) -> Bypass | None:
    """The plain step's bypass of the scaler that scaled `backward`, its last backward (`last_backward`), among
    the function's `events`. None when that backward is not scaled, the scaler is built with `enabled=False`, the
    step is guarded by a test on the scaler or the AMP flag, either runs under no_grad/inference_mode (where the
    scaler itself is out of place), or the function steps or unscales this optimizer through the scaler (another
    code path)."""
    if not backward.scaled or backward.scaler is None:
        return None
    scaler = backward.scaler
    if scaler_enabled(facts, scaler, step.frame) is False or guarded_by_amp_test(facts, step, backward, scaler):
        return None
    if facts.no_grad_opener(step.frame) is not None or facts.no_grad_opener(backward.frame) is not None:
        return None
    if any(e.kind in (Effect.SCALER_STEP, Effect.UNSCALE) and e.optimizer == step.optimizer for e in events):
        return None
    updates = [e for e in events if e.kind == Effect.SCALER_UPDATE and e.scaler == scaler]
    per_step = not updates or any(updates_every_step(step, update) for update in updates)
    return Bypass(backward, scaler, bool(updates), per_step)


def updates_every_step(step: Event, update: Event) -> bool:
    """Does `update` run after `step` in every pass of the loops around the step (the same loops, later in
    the body)? An update only after the loop would leave two `scaler.step` calls without an update between
    them: `RuntimeError: step() has already been called since the last update().`"""
    return (update.index > step.index and step.frame.is_within(update.frame)
            and update.frame.loops_up_to_function() == step.frame.loops_up_to_function())


def may_update_elsewhere(facts: ModuleFacts, scaler: str, step: Event) -> bool:
    """Can the scaler be updated outside the step's function: an `.update()` on a scaler of that name anywhere in
    the module, or the scaler (or its owner) passed to a call of the function? Then an added `update()` may be
    a second one per iteration, which raises `No inf checks were recorded prior to update.`"""
    return (facts.updates_by_last_name.get(scaler.rsplit(".", 1)[-1], 0) > 0
            or facts.scaler_handed_over(scaler, step.frame.function()))


def scaled_backward_alone(view, target: Target) -> tuple[Target, int] | bool | None:
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


def scaled_in_a_callee(facts: ModuleFacts, events: list[Event], step: Event) -> ScaledInCallee | None:
    """A plain `optimizer.step()` after a call, in the same function, to a helper or another object's method that
    runs a scaled backward (`model.scaled_backward(loss, trainer)` doing `trainer.scaler.scale(loss).backward()`),
    through the project index, a few calls deep. None when the helper also steps, unscales or updates a scaler,
    or runs a plain backward first; when the function goes through a scaler itself (`scaler.step`,
    `scaler.unscale_` of any optimizer: another code path) or the step is guarded by an AMP test."""
    if any(e.kind in (Effect.SCALER_STEP, Effect.UNSCALE, Effect.SCALER_UPDATE) for e in events):
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
        reached = scaled_backward_alone(view, target) if target is not None else None
        if reached is None:
            continue
        if reached is False:
            return None
        found = (call, *reached)
    if found is None:
        return None
    call, doer, line = found
    if guarded_by_amp_test(facts, step, Event(Effect.BACKWARD, call), "scaler"):
        return None
    other = doer.module != view.path
    text = view.text(doer.module) if other else facts.source
    lines = text.splitlines() if text else []
    column = len(lines[line - 1]) - len(lines[line - 1].lstrip()) + 1 if 0 < line <= len(lines) else 1
    return ScaledInCallee(call, doer, doer.module if other else None, line, column)
