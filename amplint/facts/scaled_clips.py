"""Clips that may see gradients still scaled by a GradScaler (no `unscale_` since its last `update()`), and where
an `unscale_` would belong: the questions AMP003 asks of a module, answered from the clips' facts
(amplint/facts/clips.py), where the module's calls reach (reach.py), each function's events (timeline.py) and
whether the gradients may already be unscaled (unscaling.py, whose `ClipQueries` holds the lookups, built once).

- A clip after a scaled backward of its own function and before the scaler's step, with no `unscale_` before
  it (`ScaledClip`), and the `unscale_` after it, if any, that comes too late;
- a clip followed by the scaler's step in its function, the scaled backward having run elsewhere: a caller, a
  method of its class, another module (`ClipBeforeStep`);
- a call, after a scaled backward, of a helper that clips and then returns before the scaler's step or steps
  the scaler itself (`ClipThroughCall`);
- a gradient hook that clamps, registered on each parameter where a scaled backward runs (`clamping_hooks`);
- where an `unscale_` inserted before a clip goes (`unscale_site`), and what moving a late `unscale_` before
  the clip makes see unscaled gradients (`ScaledClips.unscale_move`, `reads_gradients`).

What the analysis cannot place (an `unscale_` taken without a call, a scaler handed to code it cannot read)
counts as an `unscale_` that may have run: no clip is answered then."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.vocabulary import Effect
from amplint.facts.changes import Changes
from amplint.facts.model import Call, Event
from amplint.facts.module import ModuleFacts, loops_within, may_follow
from amplint.facts.clips import clamps, clips_stored_elsewhere, first_measured, iterates_parameters, \
    scaled_backward_around, scaled_backward_elsewhere
from amplint.facts.reach import HELPER_DEPTH, CallReach, clips_then_steps
from amplint.facts.timeline import FunctionEvents
from amplint.facts.unscaling import ClipQueries, tied_optimizer, unread_call_of_the_scalers_module

# What a helper must not do for its clip to be reported at the call: a backward of its own (the gradients it
# clips may be its own), an `unscale_` anywhere (it may unscale first: an `unscale_` in any callee counts), a
# plain `optimizer.step()` (not the scaler's recipe: other rules' concern).
HELPER_SILENCERS = (Effect.UNSCALE, Effect.BACKWARD, Effect.STEP)
# Events that must keep their order against an `unscale_`: gradients added, zeroed or consumed, the scaler's
# record of what it unscaled. A clip is not among them: a clip between the two sees scaled gradients too, and
# unscaling first is its fix as well.
REORDERED_EVENTS = frozenset({Effect.BACKWARD, Effect.OPTIMIZER_STEP, Effect.SCALER_STEP,
                              Effect.SCALER_UPDATE, Effect.UNSCALE, Effect.SCALER_SCALE})


@dataclass(frozen=True)
class ScaledClip:
    """A clip after a scaled backward of its own function and before the scaler's step, with no `unscale_` before
    it: of the optimizer tied to the clipped parameters or, when none is tied, of any optimizer stepped after it."""

    clip: Event
    scaler: str
    candidates: list[str]  # the optimizers the scaler steps after the clip, before its next `update()`, in order
    tied: str | None  # the one that owns the clipped parameters (`tied_optimizer`)
    late_unscale: Event | None  # an `unscale_` (of those counted) after the clip and before the step
    insert_step: Event | None  # the tied optimizer's step, when an `unscale_` may go before the clip: none since
    # the last `update()`, none through the function's calls
    unseen: str | None  # with `insert_step`: a call run first that may unscale, of the scaler's module, unread


@dataclass(frozen=True)
class ClipBeforeStep:
    """A clip followed in its function by the scaler's step, with no backward and no `unscale_` before it there,
    whose scaled backward ran elsewhere (`scaled_backward_elsewhere`)."""

    clip: Event
    scaler: str
    where: str | None  # the function running the scaled backward ("`train()`, line 9"), when the index names it
    tied: str | None
    tied_step: Event | None  # the tied optimizer's step after the clip


@dataclass(frozen=True)
class ClipThroughCall:
    """A call, after a scaled backward and no `unscale_`, of a helper that clips: and then steps the scaler
    itself (`steps`), or returns before this function's `scaler.step`."""

    clip: Event  # the call, placed as the clip
    scaler: str
    where: str  # the function that clips ("`engine.clip_all()`, line 12")
    steps: bool
    tied: str | None  # the only optimizer the scaler steps after the call, when it steps no other
    insert_step: Event | None  # the tied optimizer's step, when an `unscale_` may go before the call


@dataclass(frozen=True)
class UnscaleMove:
    """A late `unscale_` that may move to just before the clip, in the same block; the statements between them
    (which the move makes see unscaled gradients) neither backpropagate, step, update, scale, unscale nor zero
    gradients."""

    clip_statement: cst.CSTNode
    unscale_statement: cst.SimpleStatementLine
    between: list[cst.CSTNode]


class ScaledClips:
    """The clips of one module that may see scaled gradients (see the module's docstring), asked once per module."""

    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self.queries = ClipQueries(facts)

    def in_functions(self) -> Iterator[ScaledClip | ClipBeforeStep]:
        """The module's clips (those stored on the object by a base class of another module too) that see scaled
        gradients: after a scaled backward of their function, or before a step with the backward elsewhere."""
        facts = self.facts
        for clip in [*facts.events, *(Event(Effect.CLIP, call) for call in clips_stored_elsewhere(facts))]:
            if clip.kind != Effect.CLIP:
                continue
            events = self.queries.function(clip.frame.function())
            backward = events.last_scaled_backward(clip.index)
            found = self._before_step(clip) if backward is None else self._after_backward(clip, events, backward)
            if found is not None:
                yield found

    def _after_backward(self, clip: Event, events: FunctionEvents, backward: Event) -> ScaledClip | None:
        facts, index = self.facts, self.queries
        scaler = backward.scaler
        if index.scaler_disabled(scaler) or index.unscale_taken(scaler):
            return None  # GradScaler(enabled=False) scales nothing; an `unscale_` run under another name
        step = events.first_after(Effect.SCALER_STEP, scaler, clip.index)
        if step is None:
            return None
        candidates = events.stepped_after(clip, scaler)
        tied = tied_optimizer(facts, clip, candidates, events, scaler, index)
        # The unscale_ that counts: of the tied optimizer; when none is tied, of any optimizer stepped after
        # the clip (an undetermined tie stays silent rather than guess). None in `counted`: an unscale_ of
        # any optimizer counts.
        counted = ({tied, None} if tied is not None else set(candidates) | {None}) if candidates else None
        if events.unscale_between(scaler, counted, backward.index, clip.index) is not None \
                or index.may_unscale_through_calls(scaler, clip.frame.function(), backward.index, clip.index):
            return None
        late_unscale = events.unscale_between(scaler, counted, clip.index, step.index)
        insert_step = unseen = None
        if late_unscale is None and tied is not None:  # `unscale_(...)` needs the optimizer named: none is no fix
            tied_step = events.first_after(Effect.SCALER_STEP, scaler, clip.index, tied)
            since = events.last_update_before(scaler, clip.index)
            if tied_step is not None and not events.unscaled_before(scaler, tied, clip.index) \
                    and not index.may_unscale_through_calls(scaler, clip.frame.function(), since, clip.index):
                insert_step = tied_step
                # `from state import scaler, unscale_model`: code of a module the analysis cannot read, which
                # holds the scaler, may unscale it; a second `unscale_` would raise
                unseen = unread_call_of_the_scalers_module(facts, index, scaler, clip.frame.function(), since,
                                                            clip.index)
        return ScaledClip(clip, scaler, candidates, tied, late_unscale, insert_step, unseen)

    def _before_step(self, clip: Event) -> ClipBeforeStep | None:
        """A clip followed in its function by `scaler.step(optimizer)` with no `unscale_` before it, the scaled
        backward having run elsewhere (another method, a caller, another module): `scaler.step` unscales only
        after the clip, so the clip saw scaled gradients wherever the backward ran. Answered when no backward and
        no `unscale_` comes before the clip in its function (itself or through its calls), none of its callers
        (three calls up) reaches an `unscale_`, no method of its class unscales, and the scaler is known to scale
        a backward: built here from a GradScaler, or a caller or a method of the class runs a scaled backward."""
        facts, index = self.facts, self.queries
        function = clip.frame.function()
        if function is None:
            return None
        own = facts.events_in(function)
        if any(e.kind == Effect.BACKWARD and e.index < clip.index for e in own):
            return None
        step = None
        for event in own:
            if event.index <= clip.index:
                continue
            if event.kind == Effect.BACKWARD or event.kind == Effect.SCALER_UPDATE:
                return None
            if event.kind == Effect.SCALER_STEP:
                step = event
                break
        if step is None or step.scaler is None or index.scaler_disabled(step.scaler) \
                or index.unscale_taken(step.scaler):
            return None
        scaler = step.scaler
        if any(e.kind == Effect.UNSCALE and e.index < clip.index for e in own):
            return None
        helpers = index.helpers
        for call in helpers.calls_in(function):
            if call.index >= clip.index or helpers.is_event(call):
                continue
            does = helpers.does(call)
            if does and (Effect.UNSCALE in does or Effect.BACKWARD in does):
                return None
        if index.may_unscale_through_calls(scaler, function, -1, clip.index):
            return None
        info = facts.function_info(clip.frame)
        if info is None:
            return None
        evidence = scaled_backward_elsewhere(facts, info.qualname, HELPER_DEPTH)
        if evidence is None:
            return None
        where = evidence if isinstance(evidence, str) else None
        if not where and not any(facts.is_scaler_construction(b.value) for b in facts.bindings(scaler, clip.frame)
                                 if b.value is not None):
            return None
        events = index.function(function)
        candidates = events.stepped_after(clip, scaler)
        tied = tied_optimizer(facts, clip, candidates, events, scaler, index)
        tied_step = events.first_after(Effect.SCALER_STEP, scaler, clip.index, tied) if tied is not None else None
        return ClipBeforeStep(clip, scaler, where, tied, tied_step)

    def through_calls(self) -> Iterator[ClipThroughCall]:
        """Clips reached through a call: a helper (of this module or, with the project index, of another) called
        after the scaled backward, that clips and then either returns before this function's `scaler.step` or
        steps the scaler itself."""
        facts, index = self.facts, self.queries
        functions = {id(e.frame.function()): e.frame.function() for e in facts.events
                     if e.kind == Effect.BACKWARD and e.scaled}
        for function in functions.values():
            helpers = index.helpers
            events = index.function(function)
            for call in helpers.calls_in(function):
                found = self._through_call(events, helpers, call)
                if found is not None:
                    yield found

    def _through_call(self, events: FunctionEvents, helpers: CallReach, call: Call) -> ClipThroughCall | None:
        facts, index = self.facts, self.queries
        if call.dotted is None or helpers.is_event(call):
            return None
        backward = events.last_scaled_backward(call.index)
        if backward is None or call.statement is backward.call.statement \
                or not may_follow(facts, backward.frame, call.frame):
            return None
        scaler = backward.scaler
        if index.scaler_disabled(scaler) or index.unscale_taken(scaler) \
                or events.unscale_between(scaler, None, backward.index, call.index) \
                or index.may_unscale_through_calls(scaler, call.frame.function(), backward.index, call.index) \
                or events.first_after(Effect.SCALER_UPDATE, scaler, backward.index) is not None \
                and events.first_after(Effect.SCALER_UPDATE, scaler, backward.index).index < call.index:
            return None
        does = helpers.does(call)
        if not does or Effect.CLIP not in does or any(fact in does for fact in HELPER_SILENCERS):
            return None
        placed = Event(Effect.CLIP, call)
        where = does[Effect.CLIP].where()
        if clips_then_steps(does):
            return ClipThroughCall(placed, scaler, where, True, None, None)
        step = events.first_after(Effect.SCALER_STEP, scaler, call.index)
        if Effect.SCALER_STEP in does or Effect.SCALER_UPDATE in does or step is None \
                or not may_follow(facts, call.frame, step.frame):
            return None
        candidates = events.stepped_after(placed, scaler)
        tied = candidates[0] if len(candidates) == 1 and events.optimizers(scaler) <= set(candidates) else None
        insert_step = None
        if tied is not None:
            tied_step = events.first_after(Effect.SCALER_STEP, scaler, call.index, tied)
            function = call.frame.function()
            if tied_step is not None and not events.unscaled_before(scaler, tied, call.index) \
                    and events.unscale_between(scaler, None, call.index, tied_step.index) is None \
                    and not index.may_unscale_through_calls(scaler, function,
                                                            events.last_update_before(scaler, call.index),
                                                            call.index, skip=call) \
                    and not index.may_unscale_through_calls(scaler, function, call.index, tied_step.index):
                insert_step = tied_step
        return ClipThroughCall(placed, scaler, where, False, tied, insert_step)

    def clamping_hooks(self) -> Iterator[tuple[Call, str]]:
        """Gradient hooks that clip (`p.register_hook(lambda g: g.clamp(-c, c))` on each of `model.parameters()`)
        in a module whose backward is scaled, with where the scaled backward runs (the registering function or a
        caller, a few calls up): a hook runs during the backward, on gradients scaled by the loss scale, before
        any `unscale_` can run."""
        facts = self.facts
        if any(e.kind == Effect.BACKWARD and e.scaled and e.scaler and self.queries.scaler_disabled(e.scaler)
               for e in facts.events):
            return  # a scaler built with `enabled=False` here: its `scale()` multiplies nothing
        for call in facts.calls:
            if call.method != vocab.REGISTER_HOOK or len(call.node.args) != 1 or call.receiver is None:
                continue
            hook = call.node.args[0].value
            if not isinstance(hook, cst.Lambda) or not clamps(facts, hook.body):
                continue
            if not iterates_parameters(call.receiver, call.frame):
                continue
            info = facts.function_info(call.frame)
            where = scaled_backward_around(facts, info.qualname if info else None, HELPER_DEPTH)
            if where is not None:
                yield call, where

    def unscale_move(self, clip: Event, unscale: Event) -> UnscaleMove | None:
        """Moving `unscale_` from after the clip to just before it changes its order against the clip and every
        statement between them: those now see unscaled gradients. None when the move is wrong: the two are not
        statements of one block, the norm is measured before the clip's statement, or one of them (or the clip's
        statement) backpropagates, steps, updates, unscales, scales or zeroes gradients (the order matters to
        the result: a second scaled backward would add scaled gradients to unscaled ones), or rebinds the scaler
        or optimizer the `unscale_` names (`self.opt = ...`: the moved call would name another object)."""
        facts, index = self.facts, self.queries
        clip_statement, unscale_statement = clip.call.statement, unscale.call.statement
        if not isinstance(unscale_statement, cst.SimpleStatementLine) or len(unscale_statement.body) != 1:
            return None
        if clip.call.statements[:-1] != unscale.call.statements[:-1] or clip.frame is not unscale.frame \
                or first_measured(facts, clip.call) is not clip_statement:
            return None
        block, start = index.block_around(clip.call.statements)
        if block is None:
            return None
        end = index.position_in(block, unscale.call.statement)
        if end is None or start >= end:
            return None
        between = list(block[start + 1:end])
        if any(event is not unscale and event.kind in REORDERED_EVENTS for statement in [*between, clip_statement]
               for event in index.events_within(statement)):
            return None
        if any(_calls_method(statement, vocab.ZERO_GRAD) for statement in [*between, clip_statement]):
            return None
        bases = {key.split(".", 1)[0] for key in (unscale.scaler, unscale.optimizer) if key}
        keys = [key for key in (unscale.scaler, unscale.optimizer) if key]
        for statement in [*between, clip_statement]:  # moved over: may it rebind what the `unscale_` names?
            changes = Changes.of(statement, facts.imports.bindings)
            if changes.bound & bases or any(key == stored or key.startswith(stored + ".")
                                            for key in keys for stored in changes.stored):
                return None
        return UnscaleMove(clip_statement, unscale_statement, between)


def unscale_site(facts: ModuleFacts, clip: Event, step: Event) -> cst.CSTNode | None:
    """The statement before which `scaler.unscale_(optimizer)` goes for the clip (`first_measured`: for a split
    clip, the statement computing its norm), when the step runs each time the clip does: not under a test the clip
    is outside of, and not outside a loop (micro-batches) that repeats the clip (a second `unscale_` before
    `update()` raises). None when no place is known."""
    statement = first_measured(facts, clip.call)
    if statement is None or not (clip.frame.is_within(step.frame) and loops_within(step.frame, clip.frame)):
        return None
    if not isinstance(statement, cst.SimpleStatementLine) and not isinstance(statement, cst.BaseCompoundStatement):
        return None
    return statement


def _calls_method(statement: cst.CSTNode, method: str) -> bool:
    found = []

    class Calls(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            if isinstance(call.func, cst.Attribute) and call.func.attr.value == method:
                found.append(call)

    statement.visit(Calls())
    return bool(found)


def reads_gradients(facts: ModuleFacts, statement: cst.CSTNode, frame) -> bool:
    """Does the statement read a tensor's `.grad` (whose values the move divides by the scale): directly, or
    through a name this function binds to an expression that reads one (`grads = [p.grad for p in params]`;
    `unscale_` divides those tensors in place)?"""
    grads, names = _grad_attributes(statement), set()

    class Names(cst.CSTVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            names.add(name.value)

    statement.visit(Names())
    return grads or any(_grad_attributes(bound.value) for name in names for bound in facts.bindings(name, frame)
                        if bound.value is not None)


def _grad_attributes(node: cst.CSTNode) -> bool:
    found = []

    class Grads(cst.CSTVisitor):
        def visit_Attribute(self, attribute: cst.Attribute) -> None:
            if attribute.attr.value == vocab.GRAD:
                found.append(attribute)

    node.visit(Grads())
    return bool(found)
