"""AMP003 clip-without-unscale."""

from __future__ import annotations

from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.vocabulary import Effect
from amplint.facts import Event, EventKind, ModuleFacts
from amplint.facts.model import Call
from amplint.facts.module import loops_within, may_follow
from amplint.facts.clips import base_stores_clip, clamps, first_measured, iterates_parameters, clips_stored_elsewhere, \
    scaled_backward_around, scaled_backward_elsewhere
from amplint.facts import frameworks
from amplint.facts.reach import HELPER_DEPTH, CallReach, clips_then_steps
from amplint.facts.timeline import FunctionEvents
from amplint.facts.unscaling import ClipQueries, tied_optimizer, unread_call_of_the_scalers_module
from amplint.diagnostics import Applicability
from amplint.rules.across import reaches_from_module
from amplint.index.summary import Summary
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.screen import Ask, AskProject
from amplint.rules.scopes import Changes, UpdatePhase, snippet


class ClipWithoutUnscale(Rule):
    """## What it does
    Checks for gradient clipping (`torch.nn.utils.clip_grad_norm_`, `clip_grad_value_`, under any import spelling)
    between `scaler.scale(loss).backward()` and `scaler.step(optimizer)` with no `scaler.unscale_(optimizer)`
    before it, and for `scaler.unscale_(...)` placed after the clip.

    The clip may sit in a helper: a function or another method of the class in this module, or (when a folder
    is linted, through the project index) a function, method or callable object of another module, a few calls
    deep. Reported at the call, when the call comes after the scaled backward and before `scaler.step`, or when
    the helper clips and then steps the scaler itself (`optimizer_step(scaler, optimizer)`); the message names
    the function that clips and its module. An `unscale_` anywhere on the helper's calls counts as unscaling.

    An `unscale_` counts however the code spells it: in a loop over optimizers (`for opt in (opt_a, opt_b):
    scaler.unscale_(opt)` unscales each of them; a loop over values the analysis cannot list, any), in a helper
    of this module or another (`unscale_all(scaler, optimizers)`, `self.unscale()`), on another name of the
    scaler (`s = scaler`), or taken without being called where it is written (`un = scaler.unscale_`,
    `functools.partial(scaler.unscale_, opt)`, `map(scaler.unscale_, opts)`, `getattr(scaler, "unscale_")`).

    A clip followed in its own function by `scaler.step(optimizer)`, with no `unscale_` before it, clips scaled
    gradients wherever the backward ran (another method, a caller, another module: `optimizer_step()`, an
    engine's `update()`): reported at the clip, naming the function that runs the scaled backward when the
    project index finds it, unless a caller (a few calls up) or a method of the class reaches an `unscale_`.

    A clip may be kept under a name (`self.clip_fn = partial(clip_grad_norm_, max_norm=1.0)`, then
    `self.clip_fn(params)`) or looked up in a dict of clip functions (`self.clippers[mode](params, value)`). And
    a gradient hook that clamps (`p.register_hook(lambda g: g.clamp(-c, c))` for each of `model.parameters()`)
    runs during the backward, before any `unscale_` can: reported when the function registering it, or a caller
    a few calls up, runs a scaled backward. torch 2.6's clip in two halves (`total = get_total_norm(grads)`, then
    `clip_grads_with_norm_(params, max_norm, total)`) is a clip: the norm was measured on scaled gradients.

    Where a framework scales and unscales (its contract is data in the vocabulary; no safe fix, the message says
    what to change), only when the code shows the precision that scales, in the module or a module importing it
    (`Trainer(precision="16-mixed")`, `Accelerator(mixed_precision="fp16")`, `TrainingArguments(fp16=True)`):
    a clip (torch's, or `self.clip_gradients`, which unscales nothing) in a LightningModule's `on_after_backward`
    (Lightning unscales after it), or in manual optimization after `self.manual_backward(loss)` and before
    `opt.step()` (Lightning unscales inside it): clip in `on_before_optimizer_step`; a torch clip after
    `accelerator.backward(loss)` (use `accelerator.clip_grad_norm_`, which unscales); in an HF `Trainer`
    subclass's `training_step`, `self.accelerator.clip_grad_norm_` (the Trainer unscales again after it returns,
    and the second `unscale_` raises) or a torch clip after the step's backward (scaled gradients).

    ## Why is this bad?
    After `scaler.scale(loss).backward()` every gradient is multiplied by the loss scale (65536 by default, then
    whatever the scaler has grown or backed off to). Clipping those gradients measures a norm that is the scale
    times too large, so a `max_norm` meant for real gradients clips almost everything away: measured on CPU,
    `clip_grad_norm_` returned 55772.77 for a true norm of 0.8510 and the update shrank from 8.5e-2 to 1.5e-6.
    `scaler.step()` then unscales the already-clipped gradients, so the damage is not undone.

    ## Example
    ```python
    import torch

    scaler = torch.amp.GradScaler("cuda")
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Use instead
    ```python
    import torch

    scaler = torch.amp.GradScaler("cuda")
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    Sometimes safe. The fix inserts `scaler.unscale_(optimizer)` just before the clip. `scaler.step` then finds the
    gradients unscaled and does not unscale again, so the only change is that the clip sees true gradients.

    - The optimizer is the one that owns the clipped parameters: the one built on them (`opt_g =
      torch.optim.Adam(gen.parameters())` for a clip of `gen.parameters()`, also through `list(...)`, param-group
      dicts and local names), or else the only optimizer the scaler steps after the clip. When several are stepped
      and none is known to own the parameters, no fix: a wrong guess silences the finding while the clip still
      sees scaled gradients.
    - When `unscale_` already comes after the clip in the same block, the fix moves it (with the comments above it)
      before the clip, and every statement between them then sees unscaled gradients. That is safe when each is of
      the update phase (AMP001's allow-list) and reads no gradient (no `.grad`, no name bound to one): logging the
      loss, counting steps, another clip. Anything else between them (an EMA update, a gradient log, a call into
      project code) makes the move unsafe.
    - No fix when a statement between them backpropagates, steps, updates, scales, unscales or zeroes gradients, or
      rebinds the scaler or the optimizer; when the owner's step does not run every time the clip does (a clip per
      micro-batch, a step at the accumulation boundary); or when that optimizer was already unscaled since the last
      `update()` (unscaling twice raises), or may have been: a call since the last `update()` that reaches an
      `unscale_` or is handed the scaler and cannot be read.
    - A clip in a helper: `unscale_` goes before the call, under the same conditions, only when the scaler steps
      exactly one optimizer after it and no `unscale_` follows before the step. A helper that also steps gets no
      fix: the `unscale_` belongs before its clip, in its own body.
    - A clip whose scaled backward runs in another function (a caller, another method or module): the insertion
      is unsafe, since an `unscale_` run out of sight before the function is called would make a second one raise.

    ## Limits
    Silent where the analysis cannot tell whether the gradients were unscaled: the scaler's `unscale_` taken
    without a call anywhere in the module (whatever calls it may run it before the clip), a method looked up by
    a computed name (`getattr(scaler, name)`), or the scaler or one of its bound methods handed, between the
    scaled backward and the clip, to a call whose function the analysis cannot read. Silent when no GradScaler
    is involved (bfloat16 training), for `accelerator.clip_grad_norm_` (accelerate
    unscales first), for Lightning's `self.clip_gradients(...)` where no 16-mixed precision is shown, for apex
    `amp.master_params` (apex unscales on leaving `amp.scale_loss`). A helper is followed only where its function
    is known: same-module calls by name and `self.method()`; other modules only when a folder is linted, through
    the imports and objects the project index resolves. Silent when the helper backpropagates, calls `.step()`
    on something that is not the scaler (an optimizer), or updates the scaler without stepping it, and when the
    scaled backward is more than one call away from the helper's call.
    """

    code = "AMP003"
    name = "clip-without-unscale"
    fix = "sometimes"
    # `clip_grad` for a clip of the file; `scale` for a scaled backward whose clip is in another module's helper.
    words = (vocab.CLIP_GRAD, vocab.SCALE, vocab.REGISTER_HOOK)
    # a clip followed by a scaler's step (wherever the scaled backward ran), or gradient hooks that clamp
    requires = (Ask(Summary.mentions, *vocab.CLIP_NAMES) & Ask(Summary.calls_method, vocab.STEP)
                & Ask(Summary.scaler_possible)) | (Ask(Summary.calls_method, vocab.REGISTER_HOOK)
                                                  & Ask(Summary.mentions, *vocab.CLAMP_METHODS)) \
        | (Ask(Summary.mentions, *vocab.CLIP_NAMES, *vocab.FRAMEWORK_CLIPS)
           & (Ask(Summary.mentions, *vocab.FRAMEWORK_WORDS) | Ask(Summary.contains, vocab.ACCELERATE.precision)))
    # a scaled backward here, and a call of this file reaching a clip in another module
    requires_across = (Ask(Summary.backward_possible) & Ask(Summary.scaler_possible)
                       & (AskProject(reaches_from_module, (Effect.CLIP,)) | AskProject(base_stores_clip)))

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        index = ClipQueries(facts)
        for clip in [*facts.events, *(Event(EventKind.CLIP, call) for call in clips_stored_elsewhere(facts))]:
            if clip.kind is not EventKind.CLIP:
                continue
            events = index.function(clip.frame.function())
            backward = events.last_scaled_backward(clip.index)
            if backward is None:
                local = self._clip_before_step(facts, index, clip)
                if local is not None:
                    yield local
                continue
            scaler = backward.scaler
            if index.scaler_disabled(scaler) or index.unscale_taken(scaler):
                continue  # GradScaler(enabled=False) scales nothing; an `unscale_` run under another name
            step = events.first_after(EventKind.SCALER_STEP, scaler, clip.index)
            if step is None:
                continue
            candidates = events.stepped_after(clip, scaler)
            tied = tied_optimizer(facts, clip, candidates, events, scaler, index)
            # The unscale_ that counts: of the tied optimizer; when none is tied, of any optimizer stepped after
            # the clip (an undetermined tie stays silent rather than guess). None in `counted`: an unscale_ of
            # any optimizer counts.
            counted = ({tied, None} if tied is not None else set(candidates) | {None}) if candidates else None
            if events.unscale_between(scaler, counted, backward.index, clip.index) is not None \
                    or index.may_unscale_through_calls(scaler, clip.frame.function(), backward.index, clip.index):
                continue
            late_unscale = events.unscale_between(scaler, counted, clip.index, step.index)
            clipped = snippet(facts, clip.node.func, 32)
            if late_unscale is not None:
                message = (f"`{clipped}(...)` clips gradients still scaled by `{scaler}`: the `unscale_` at line "
                           f"{facts.line_of(late_unscale.node)} comes later")
                fix = self._move_unscale(facts, clip, late_unscale, step, index)
                advice = "Unscale before clipping"
            else:
                message = f"`{clipped}(...)` clips gradients still scaled by `{scaler}` (no `unscale_` before it)"
                if tied is not None:
                    advice = f"Call `{scaler}.unscale_({tied})` before the clip"
                elif len(candidates) > 1:
                    advice = (f"Call `{scaler}.unscale_(...)` before the clip, for the optimizer of these parameters "
                              f"(one of {', '.join(f'`{c}`' for c in candidates)})")
                else:
                    advice = f"Call `{scaler}.unscale_(...)` before the clip, for the optimizer of these parameters"
                tied_step = events.first_after(EventKind.SCALER_STEP, scaler, clip.index, tied)
                fix = None
                if tied_step is not None and not events.unscaled_before(scaler, tied, clip.index) \
                        and not index.may_unscale_through_calls(scaler, clip.frame.function(),
                                                                events.last_update_before(scaler, clip.index),
                                                                clip.index):
                    fix = self._insert_unscale(facts, clip, tied_step, scaler, tied)
                    unseen = unread_call_of_the_scalers_module(facts, index, scaler, clip.frame.function(),
                                                                events.last_update_before(scaler, clip.index),
                                                                clip.index)
                    if fix is not None and unseen is not None:
                        # `from state import scaler, unscale_model`: code of a module the analysis cannot read,
                        # which holds the scaler, may unscale it; a second `unscale_` would raise
                        fix = FixPlan(f"{fix.message} (`{unseen}(...)` runs first, unread)", fix.rewrite,
                                      Applicability.UNSAFE)
            yield Finding(clip.node, message, fix, help=None if fix else advice)
        yield from self._through_calls(facts, index)
        yield from self._clamping_hooks(facts, index)
        yield from self._framework_contracts(facts)

    def _framework_contracts(self, facts: ModuleFacts) -> Iterator[Finding]:
        """Clips where a framework's gradients are still scaled, or unscaled twice (amplint/facts/frameworks.py)."""
        for found in frameworks.framework_clips(facts):
            clipped, shown = snippet(facts, found.call.node.func, 40), found.shown.where
            if found.kind == frameworks.LIGHTNING_HOOK:
                message = f"`{clipped}(...)` in `{found.method}` clips gradients Lightning has not unscaled yet"
                advice = (f"Lightning unscales after `{found.method}` (16-mixed: {shown}): clip in "
                          f"`{vocab.LIGHTNING_UNSCALED_HOOK}`, or with `Trainer(gradient_clip_val=...)`")
            elif found.kind == frameworks.LIGHTNING_MANUAL:
                message = f"`{clipped}(...)` after `self.{found.method}(...)` clips gradients Lightning has not unscaled"
                advice = (f"In manual optimization Lightning unscales inside `opt.step()` (16-mixed: {shown}): clip "
                          f"in `{vocab.LIGHTNING_UNSCALED_HOOK}`, which runs after the unscale")
            elif found.kind == frameworks.ACCELERATE_BACKWARD:
                message = f"`{clipped}(...)` clips gradients still scaled by `{found.method}.backward(...)` (fp16)"
                advice = (f"Accelerate scales the loss with mixed_precision=\"fp16\" ({shown}): use "
                          f"`{found.method}.{vocab.CLIP_GRAD_NORM_}(...)`, which unscales first")
            elif found.kind == frameworks.HF_UNSCALE:
                message = f"`{clipped}(...)` in `{found.method}` unscales; the Trainer unscales again after it"
                advice = (f"The Trainer unscales and clips after `{found.method}` returns (fp16: {shown}), and a "
                          f"second `unscale_` raises: clip with `TrainingArguments(max_grad_norm=...)`")
            else:
                message = f"`{clipped}(...)` in `{found.method}` clips gradients the Trainer has not unscaled yet"
                advice = (f"The Trainer unscales only after `{found.method}` returns (fp16: {shown}): clip with "
                          f"`TrainingArguments(max_grad_norm=...)`")
            yield Finding(found.call.node, message, help=advice)

    def _clamping_hooks(self, facts: ModuleFacts, index: ClipQueries) -> Iterator[Finding]:
        """Gradient hooks that clip (`p.register_hook(lambda g: g.clamp(-c, c))` on each of `model.parameters()`)
        in a module whose backward is scaled: a hook runs during the backward, on gradients scaled by the loss
        scale, before any `unscale_` can run."""
        if any(e.kind is EventKind.BACKWARD and e.scaled and e.scaler and index.scaler_disabled(e.scaler)
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
            if where is None:
                continue
            hooked = snippet(facts, call.node.func, 32)
            message = _bounded(f"`{hooked}(...)` clamps gradients still scaled by the loss scale", where,
                               "scaled backward:")
            yield Finding(call.node, message, help=f"A gradient hook runs during the scaled backward ({where}), "
                                                   f"before any `unscale_`: clip after `scaler.unscale_(optimizer)`")

    def _clip_before_step(self, facts: ModuleFacts, index: ClipQueries, clip: Event) -> Finding | None:
        """A clip followed in its function by `scaler.step(optimizer)` with no `unscale_` before it, the scaled
        backward having run elsewhere (another method, a caller, another module): `scaler.step` unscales only
        after the clip, so the clip saw scaled gradients wherever the backward ran. Reported when no backward and
        no `unscale_` comes before the clip in its function (itself or through its calls), none of its callers
        (three calls up) reaches an `unscale_`, no method of its class unscales, and the scaler is known to scale
        a backward: built here from a GradScaler, or a caller or a method of the class runs a scaled backward."""
        function = clip.frame.function()
        if function is None:
            return None
        own = facts.events_in(function)
        if any(e.kind is EventKind.BACKWARD and e.index < clip.index for e in own):
            return None
        step = None
        for event in own:
            if event.index <= clip.index:
                continue
            if event.kind is EventKind.BACKWARD or event.kind is EventKind.SCALER_UPDATE:
                return None
            if event.kind is EventKind.SCALER_STEP:
                step = event
                break
        if step is None or step.scaler is None or index.scaler_disabled(step.scaler) \
                or index.unscale_taken(step.scaler):
            return None
        scaler = step.scaler
        if any(e.kind is EventKind.SCALER_UNSCALE and e.index < clip.index for e in own):
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
        clipped = snippet(facts, clip.node.func, 32)
        message = (f"`{clipped}(...)` clips gradients still scaled by `{scaler}` (`{scaler}.step` follows, "
                   f"no `unscale_`)")
        if where:
            message = _bounded(f"`{clipped}(...)` clips gradients still scaled by `{scaler}`", where,
                               "scaled backward:")
        fix = None
        if tied is not None:
            tied_step = events.first_after(EventKind.SCALER_STEP, scaler, clip.index, tied)
            if tied_step is not None:
                fix = self._insert_unscale(facts, clip, tied_step, scaler, tied)
                if fix is not None:
                    # an `unscale_` run elsewhere before this function is called (out of sight) would make a
                    # second one raise
                    title = f"{fix.message} (scaled backward: {where})" if where else fix.message
                    fix = FixPlan(title, fix.rewrite, Applicability.UNSAFE)
        advice = f"Call `{scaler}.unscale_({tied or '...'})` before the clip" + (
            f" (scaled backward: {where})" if where else "")
        return Finding(clip.node, message, fix, help=None if fix else advice)

    def _through_calls(self, facts: ModuleFacts, index: ClipQueries) -> Iterator[Finding]:
        """Clips reached through a call: a helper (of this module or, with the project index, of another) called
        after the scaled backward, that clips and then either returns before this function's `scaler.step` or
        steps the scaler itself. Reported at the call."""
        helpers = None
        functions = {id(e.frame.function()): e.frame.function() for e in facts.events
                     if e.kind is EventKind.BACKWARD and e.scaled}
        for function in functions.values():
            helpers = helpers or index.helpers
            events = index.function(function)
            for call in helpers.calls_in(function):
                finding = self._through_call(facts, index, events, helpers, call)
                if finding is not None:
                    yield finding

    def _through_call(self, facts: ModuleFacts, index: ClipQueries, events: FunctionEvents, helpers: CallReach,
                      call: Call) -> Finding | None:
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
                or events.first_after(EventKind.SCALER_UPDATE, scaler, backward.index) is not None \
                and events.first_after(EventKind.SCALER_UPDATE, scaler, backward.index).index < call.index:
            return None
        does = helpers.does(call)
        if not does or Effect.CLIP not in does or any(fact in does for fact in _HELPER_SILENCERS):
            return None
        callee = snippet(facts, call.node.func, 32)
        where = does[Effect.CLIP].where()
        if clips_then_steps(does):
            message = _bounded(f"`{callee}(...)` clips and steps gradients still scaled by `{scaler}`", where, "in")
            return Finding(call.node, message, help=f"Unscale before the clip in {where}: "
                                                     f"`scaler.unscale_(optimizer)`")
        step = events.first_after(EventKind.SCALER_STEP, scaler, call.index)
        if Effect.SCALER_STEP in does or Effect.SCALER_UPDATE in does or step is None \
                or not may_follow(facts, call.frame, step.frame):
            return None
        message = _bounded(f"`{callee}(...)` clips gradients still scaled by `{scaler}`", where)
        placed = Event(EventKind.CLIP, call)
        candidates = events.stepped_after(placed, scaler)
        tied = candidates[0] if len(candidates) == 1 and events.optimizers(scaler) <= set(candidates) else None
        fix = None
        if tied is not None:
            tied_step = events.first_after(EventKind.SCALER_STEP, scaler, call.index, tied)
            function = call.frame.function()
            if tied_step is not None and not events.unscaled_before(scaler, tied, call.index) \
                    and events.unscale_between(scaler, None, call.index, tied_step.index) is None \
                    and not index.may_unscale_through_calls(scaler, function,
                                                            events.last_update_before(scaler, call.index),
                                                            call.index, skip=call) \
                    and not index.may_unscale_through_calls(scaler, function, call.index, tied_step.index):
                fix = self._insert_unscale(facts, placed, tied_step, scaler, tied, before=f"`{callee}(...)`")
        advice = f"Call `{scaler}.unscale_({tied or '...'})` before `{callee}(...)` (the clip: {where})"
        return Finding(call.node, message, fix, help=None if fix else advice)

    @staticmethod
    def _step_follows_every_clip(clip: Event, step: Event) -> bool:
        """Does the step run each time the clip does: not under a test the clip is outside of, and not outside a
        loop (micro-batches) that repeats the clip? A second `unscale_` before `update()` raises."""
        return clip.frame.is_within(step.frame) and loops_within(step.frame, clip.frame)

    def _insert_unscale(self, facts, clip: Event, step: Event, scaler: str, optimizer: str,
                        before: str = "the clip") -> FixPlan | None:
        statement = first_measured(facts, clip.call)  # a split clip's norm: unscale before it is computed
        if statement is None or not self._step_follows_every_clip(clip, step):
            return None
        if not isinstance(statement, cst.SimpleStatementLine) and not isinstance(statement, cst.BaseCompoundStatement):
            return None

        def rebuild():
            unscale = cst.parse_statement(f"{scaler}.unscale_({optimizer})\n")
            unscale = unscale.with_changes(leading_lines=statement.leading_lines)
            moved = statement.with_changes(leading_lines=())
            return replace_nodes(facts.module, {statement: cst.FlattenSentinel([unscale, moved])})

        return FixPlan(f"Insert `{scaler}.unscale_({optimizer})` before {before}", rebuild)

    def _move_unscale(self, facts, clip: Event, unscale: Event, step: Event, index: ClipQueries) -> FixPlan | None:
        clip_statement, unscale_statement = clip.call.statement, unscale.call.statement
        if not isinstance(unscale_statement, cst.SimpleStatementLine) or len(unscale_statement.body) != 1:
            return None
        if clip.call.statements[:-1] != unscale.call.statements[:-1] or clip.frame is not unscale.frame \
                or first_measured(facts, clip.call) is not clip_statement:
            return None
        applicability = _move_applicability(facts, clip, unscale, index)
        if applicability is None:
            return None

        def rebuild():
            from amplint.rules.rewrite import MOVED, split_blank_lines  # libcst's code generator, when a fix is built

            # The unscale_ takes its own comments along; the blank lines above the clip go above it and the clip
            # keeps its comments.
            blank, comments = split_blank_lines(clip_statement)
            moved = unscale_statement.with_changes(leading_lines=[*blank, *unscale_statement.leading_lines])
            return replace_nodes(facts.module, {
                unscale_statement: MOVED,
                clip_statement: cst.FlattenSentinel([moved, clip_statement.with_changes(leading_lines=comments)]),
            })

        return FixPlan(f"Move `{snippet(facts, unscale.node)}` before the clip", rebuild, applicability)


# Events that must keep their order against an `unscale_`: gradients added, zeroed or consumed, the scaler's
# record of what it unscaled. A clip is not among them: a clip between the two sees scaled gradients too, and
# unscaling first is its fix as well.
REORDERED_EVENTS = frozenset({EventKind.BACKWARD, EventKind.OPTIMIZER_STEP, EventKind.SCALER_STEP,
                              EventKind.SCALER_UPDATE, EventKind.SCALER_UNSCALE, EventKind.SCALER_SCALE})


def _move_applicability(facts: ModuleFacts, clip: Event, unscale: Event, index: ClipQueries) -> Applicability | None:
    """How safe moving `unscale_` from after the clip to just before it is, or None when the move is wrong.

    The move changes the order of the `unscale_` against the clip and every statement between them: those now
    see unscaled gradients. No fix when one of them backpropagates, steps, updates, unscales, scales or zeroes
    gradients (the order matters to the result: a second scaled backward would add scaled gradients to unscaled
    ones), or rebinds what the `unscale_` names. Safe only when every statement between them is of the update
    phase (`UpdatePhase`, the allow-list AMP001/AMP002 move by: nothing of a forward pass) and reads no gradient
    (no `.grad`, no name bound to one): printing the loss, counting steps, another clip. Anything else may compute
    something from the gradients (an EMA, a gradient log): unsafe."""
    block, start = index.block_around(clip.call.statements)
    if block is None:
        return None
    end = index.position_in(block, unscale.call.statement)
    if end is None or start >= end:
        return None
    between = list(block[start + 1:end])
    if any(event is not unscale and event.kind in REORDERED_EVENTS for statement in [*between, clip.call.statement]
           for event in index.events_within(statement)):
        return None
    touched = [*between, clip.call.statement]
    if any(_calls_method(statement, vocab.ZERO_GRAD) for statement in touched):
        return None
    bases = {key.split(".", 1)[0] for key in (unscale.scaler, unscale.optimizer) if key}
    keys = [key for key in (unscale.scaler, unscale.optimizer) if key]
    for statement in touched:
        changes = Changes.of(statement, facts.imports.bindings)
        if changes.bound & bases or any(key == stored or key.startswith(stored + ".")
                                        for key in keys for stored in changes.stored):
            return None
    phase = UpdatePhase(facts)
    if all(phase.statement(statement) and not _reads_gradients(facts, statement, clip.frame) for statement in between):
        return Applicability.SAFE
    return Applicability.UNSAFE


def _calls_method(statement: cst.CSTNode, method: str) -> bool:
    found = []

    class Calls(cst.CSTVisitor):
        def visit_Call(self, call: cst.Call) -> None:
            if isinstance(call.func, cst.Attribute) and call.func.attr.value == method:
                found.append(call)

    statement.visit(Calls())
    return bool(found)


def _reads_gradients(facts: ModuleFacts, statement: cst.CSTNode, frame) -> bool:
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


# What a helper must not do for its clip to be reported at the call: a backward of its own (the gradients it
# clips may be its own), an `unscale_` anywhere (it may unscale first: an `unscale_` in any callee counts), a
# plain `optimizer.step()` (not the scaler's recipe: other rules' concern).
_HELPER_SILENCERS = (Effect.UNSCALE, Effect.BACKWARD, Effect.STEP)
MAX_MESSAGE = 120


def _bounded(message: str, where: str, label: str = "the clip:") -> str:
    """The message with where the clip is ("(the clip: `engine.clip()`, line 5)") when that fits in
    `MAX_MESSAGE` characters; the help line names it too, so a long path loses nothing."""
    longer = f"{message} ({label} {where})"
    return longer if len(longer) <= MAX_MESSAGE else message
