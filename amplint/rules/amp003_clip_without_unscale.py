"""AMP003 clip-without-unscale."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import cached_property
from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.vocabulary import Effect
from amplint.facts import Event, EventKind, ModuleFacts
from amplint.facts.model import Call, FunctionInfo
from amplint.facts.module import call_argument, loops_within, may_follow
from amplint.facts.clips import base_stores_clip, clamps, covers, first_measured, iterates_parameters, parameter_owners, \
    clips_stored_elsewhere, scaled_backward_around, scaled_backward_elsewhere
from amplint.facts import frameworks
from amplint.facts.names import dotted_name
from amplint.index.project import Target
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
        index = _Index(facts)
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
                    unseen = _unread_call_of_the_scalers_module(facts, index, scaler, clip.frame.function(),
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

    def _clamping_hooks(self, facts: ModuleFacts, index: _Index) -> Iterator[Finding]:
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
            where = scaled_backward_around(facts, info.qualname if info else None, _HELPER_DEPTH)
            if where is None:
                continue
            hooked = snippet(facts, call.node.func, 32)
            message = _bounded(f"`{hooked}(...)` clamps gradients still scaled by the loss scale", where,
                               "scaled backward:")
            yield Finding(call.node, message, help=f"A gradient hook runs during the scaled backward ({where}), "
                                                   f"before any `unscale_`: clip after `scaler.unscale_(optimizer)`")

    def _clip_before_step(self, facts: ModuleFacts, index: _Index, clip: Event) -> Finding | None:
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
        evidence = scaled_backward_elsewhere(facts, info.qualname, _HELPER_DEPTH)
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

    def _through_calls(self, facts: ModuleFacts, index: _Index) -> Iterator[Finding]:
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

    def _through_call(self, facts: ModuleFacts, index: _Index, events: _FunctionEvents, helpers: _Helpers,
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

    def _move_unscale(self, facts, clip: Event, unscale: Event, step: Event, index: _Index) -> FixPlan | None:
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


def _move_applicability(facts: ModuleFacts, clip: Event, unscale: Event, index: _Index) -> Applicability | None:
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
    if any(event is not unscale for statement in [*between, clip.call.statement]
           for event in index.reordered_in(statement)):
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


def tied_optimizer(facts: ModuleFacts, clip: Event, candidates: list[str], events: _FunctionEvents,
                   scaler: str, index: _Index) -> str | None:
    """The optimizer whose parameters the clip clips, or None when that is not known.

    Known when the clip's parameters (`gen.parameters()`, or a name bound to them) are among those one
    optimizer was built with (`opt_g = torch.optim.Adam(gen.parameters())`), or when only one optimizer is
    stepped after the clip and no other optimizer of the function is known to own the clipped parameters (its
    construction, when seen, must cover them). Never a guess from the order of the steps."""
    clipped = parameter_owners(facts, call_argument(clip.node, 0, "parameters"), clip.frame)
    known = events.optimizers(scaler)
    owners = {name: index.optimizer_owners(name, clip.frame) for name in known | set(candidates)}
    covering = [name for name, built_on in owners.items()
                if clipped is not None and built_on is not None and covers(built_on, clipped)]
    if len(covering) == 1:
        return covering[0] if covering[0] in candidates else None
    if len(candidates) != 1 or covering:
        return None
    only = candidates[0]
    if owners.get(only) is not None and clipped is not None:
        return None  # both sides known, and they do not match: the clip is of another optimizer's parameters
    return only


def _closure_of_this_module(facts: ModuleFacts, call: Call) -> bool:
    """Is the call's callee a plain name this module binds to a function the analysis does not follow: a
    lambda (`unscale = lambda: scaler.unscale_(opt)`) or a function nested in another (`def unscale(): ...`
    inside `train()`)? Its code may reach the scaler through its closure, without being handed it: it may
    unscale (an `unscale_` inserted after it would raise `unscale_() has already been called`)."""
    func = call.node.func
    if not isinstance(func, cst.Name):
        return False
    if any(isinstance(binding.value, cst.Lambda) for binding in facts.bindings(func.value, call.frame)):
        return True

    class Nested(cst.CSTVisitor):
        def __init__(self) -> None:
            super().__init__()
            self.depth, self.found = 0, False

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            self.found = self.found or bool(self.depth) and node.name.value == func.value
            self.depth += 1
            return not self.found

        def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
            self.depth -= 1

    visitor = Nested()
    facts.module.visit(visitor)
    return visitor.found


# The scaler's own methods that never unscale (`step` and `update` are events of their own).
_NOT_UNSCALING = frozenset({vocab.SCALE, vocab.GET_SCALE, vocab.IS_ENABLED, vocab.LOAD_STATE_DICT})


def _unknown_scaler_method(call: Call, names: set[str]) -> bool:
    """`scaler.prepare(opt)`: a method of the scaler that is none of GradScaler's known ones (a subclass's own,
    which may call `self.unscale_`)."""
    return call.receiver in names and call.method is not None and call.method not in _NOT_UNSCALING


_UNFOLLOWED: dict[int, tuple[object, bool]] = {}


def _unfollowed_unscale(facts: ModuleFacts) -> bool:
    """Does the module hold an `unscale_` in code the analysis does not follow as a function: a lambda
    (`self.hooks = {"pre_clip": lambda: scaler.unscale_(opt)}`) or a function nested in another? A call it cannot
    resolve may then run it."""
    module = facts.module
    found = _UNFOLLOWED.get(id(module))
    if found is not None and found[0] is module:
        return found[1]

    class Unfollowed(cst.CSTVisitor):
        def __init__(self) -> None:
            super().__init__()
            self.functions, self.lambdas, self.found = 0, 0, False

        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            self.functions += 1

        def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
            self.functions -= 1

        def visit_Lambda(self, node: cst.Lambda) -> None:
            self.lambdas += 1

        def leave_Lambda(self, original_node: cst.Lambda) -> None:
            self.lambdas -= 1

        def visit_Attribute(self, node: cst.Attribute) -> None:
            if node.attr.value == vocab.UNSCALE and (self.lambdas or self.functions > 1):
                self.found = True

    visitor = Unfollowed()
    module.visit(visitor)
    if len(_UNFOLLOWED) > 64:
        _UNFOLLOWED.clear()
    _UNFOLLOWED[id(module)] = (module, visitor.found)
    return visitor.found


def _unread_call_of_the_scalers_module(facts: ModuleFacts, index, scaler: str, function, start: int,
                                       end: int) -> str | None:
    """A call between `start` and `end` of a function the analysis cannot read (neither this module's nor, through
    the project index, another's) imported from the module the scaler itself comes from (`from state import
    scaler, unscale_model`, `scaler = state.scaler`): its code holds the scaler and may unscale it. Its name."""
    modules = set()
    for name in {scaler} | facts.same_object_names(scaler):
        origin = facts.imports.bindings.get(name.split(".", 1)[0])
        if origin is not None:  # `from state import scaler`: `state`; `import state`, `state.scaler`: `state`
            modules.add(origin if "." in name else origin.rsplit(".", 1)[0])
    for binding in [*facts.bindings(scaler, function), *facts.bindings(scaler, None)]:
        origin = facts.imports.qualify(binding.value)  # `scaler = state.scaler`
        if origin is not None and "." in origin:
            modules.add(origin.rsplit(".", 1)[0])
    for call in index.helpers.calls_in(function, start, end) if modules else ():
        if call.qualified and any(call.qualified == module or call.qualified.startswith(module + ".")
                                  for module in modules) \
                and not index.helpers.is_event(call) and index.helpers.unscales(call) is None:
            return dotted_name(call.node.func) or call.qualified
    return None


def _hands_over(call: cst.Call, names: set[str]) -> bool:
    """Is one of `names` (or a bound method of one) among the call's arguments, also inside a container, a
    starred argument or a lambda? A value one of its methods returns (`scaler.get_scale()`) is not the scaler."""
    found = []

    def named(node) -> bool:
        key = dotted_name(node)
        return key is not None and any(key == name or key.startswith(name + ".") for name in names)

    class Mentions(cst.CSTVisitor):
        def __init__(self, in_lambda: bool = False) -> None:
            super().__init__()
            self.in_lambda = in_lambda

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            node.body.visit(Mentions(in_lambda=True))
            return False

        def visit_Call(self, node: cst.Call) -> bool:
            if not self.in_lambda and isinstance(node.func, cst.Attribute) and named(node.func.value):
                for arg in node.args:  # `scaler.get_scale()`: its result is handed over, not the scaler
                    arg.value.visit(self)
                return False
            return True

        def visit_Name(self, node: cst.Name) -> bool:
            if node.value in names:
                found.append(node)
            return False

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            if named(node):
                found.append(node)
                return False
            return True

    for arg in call.args:
        arg.value.visit(Mentions())
    return bool(found)


class _Ordered:
    """Events in source order, searched by bisection of their indexes."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.indexes: list[int] = []

    def add(self, event: Event) -> None:
        self.events.append(event)
        self.indexes.append(event.index)

    def last_before(self, index: int) -> Event | None:
        position = bisect.bisect_left(self.indexes, index) - 1
        return self.events[position] if position >= 0 else None

    def first_after(self, index: int) -> Event | None:
        position = bisect.bisect_right(self.indexes, index)
        return self.events[position] if position < len(self.events) else None

    def after(self, index: int) -> Iterator[Event]:
        """The events after `index`, in order (read lazily: most searches end soon)."""
        for position in range(bisect.bisect_right(self.indexes, index), len(self.events)):
            yield self.events[position]


_EMPTY = _Ordered()


class _FunctionEvents:
    """One function's events as AMP003 asks about them for each of its clips: the last scaled backward before a
    place, a scaler's steps, updates and unscale_ calls after or before one (of an optimizer, or of any), the
    optimizers it steps or unscales. Built once per function, so that N clips cost N lookups, not N scans."""

    def __init__(self, events: list[Event], facts: ModuleFacts) -> None:
        self._backwards = _Ordered()
        self._by_key: dict[tuple, _Ordered] = {}  # (kind, scaler) and (kind, scaler, optimizer) -> events
        self._optimizers: dict[str | None, set[str]] = {}  # scaler -> the optimizers it steps or unscales
        for event in events:
            if event.kind is EventKind.BACKWARD and event.scaled:
                self._backwards.add(event)
            optimizers = [event.optimizer]
            if event.kind is EventKind.SCALER_UNSCALE:
                # `for opt in (opt_a, opt_b): scaler.unscale_(opt)` unscales each of them; over values not known
                # (`self.optimizers`), any optimizer (None)
                optimizers = facts.loop_values(event.optimizer, event.frame) or optimizers
            keys = [(event.kind, event.scaler)] + [(event.kind, event.scaler, o) for o in dict.fromkeys(optimizers)]
            for key in keys:
                self._by_key.setdefault(key, _Ordered()).add(event)
            if event.optimizer and event.kind in (EventKind.SCALER_STEP, EventKind.SCALER_UNSCALE):
                self._optimizers.setdefault(event.scaler, set()).add(event.optimizer)
        self._scaler_events: dict[str | None, _Ordered] = {}  # steps and updates of each scaler, in order
        for event in events:
            if event.kind in (EventKind.SCALER_STEP, EventKind.SCALER_UPDATE):
                self._scaler_events.setdefault(event.scaler, _Ordered()).add(event)

    def _of(self, kind: EventKind, scaler: str | None, *optimizer: str | None) -> _Ordered:
        return self._by_key.get((kind, scaler, *optimizer), _EMPTY)

    def last_scaled_backward(self, index: int) -> Event | None:
        return self._backwards.last_before(index)

    def first_after(self, kind: EventKind, scaler: str | None, index: int, *optimizer: str | None) -> Event | None:
        """The first event of `kind` of `scaler` after `index` (of that optimizer, when one is given)."""
        return self._of(kind, scaler, *optimizer).first_after(index)

    def optimizers(self, scaler: str | None) -> set[str]:
        """The optimizers `scaler` steps or unscales in the function."""
        return set(self._optimizers.get(scaler, ()))

    def stepped_after(self, clip: Event, scaler: str | None) -> list[str]:
        """The optimizers `scaler.step(...)` steps after the clip and before the scaler's next `update()`, in
        order: the only ones whose gradients the clip can still affect."""
        found: list[str] = []
        for event in self._scaler_events.get(scaler, _EMPTY).after(clip.index):
            if event.kind is EventKind.SCALER_UPDATE:
                break
            if event.optimizer and event.optimizer not in found:
                found.append(event.optimizer)
        return found

    def unscale_between(self, scaler: str | None, optimizers: set[str | None] | None, start: int,
                        end: int) -> Event | None:
        """The first `scaler.unscale_(...)` after `start` and before `end`, of one of `optimizers` (None among
        them: an unscale_ of no named optimizer; `optimizers` None: of any optimizer)."""
        if optimizers is None:
            found = self.first_after(EventKind.SCALER_UNSCALE, scaler, start)
        else:
            firsts = [self.first_after(EventKind.SCALER_UNSCALE, scaler, start, o) for o in optimizers]
            found = min((e for e in firsts if e is not None), key=lambda e: e.index, default=None)
        return found if found is not None and found.index < end else None

    def last_update_before(self, scaler: str | None, index: int) -> int:
        """The index of the scaler's last `update()` before `index` (-1: none in the function)."""
        update = self._of(EventKind.SCALER_UPDATE, scaler).last_before(index)
        return update.index if update is not None else -1

    def unscaled_before(self, scaler: str | None, optimizer: str | None, index: int) -> bool:
        """Is there an `unscale_` of this optimizer before `index` with no `update()` between it and `index`? A
        second `unscale_` would raise `unscale_() has already been called on this optimizer since the last
        update().`"""
        update = self._of(EventKind.SCALER_UPDATE, scaler).last_before(index)
        since = update.index if update is not None else -1
        return self.unscale_between(scaler, {optimizer, None}, since, index) is not None


class _Index:
    """What AMP003 looks up for each clip, built once per module as it is first asked for: each function's
    events, each optimizer's owners and the events in each statement (the block around each statement is
    `ModuleFacts.block_of`'s). So N clips cost N lookups, not N scans of the module."""

    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self._functions: dict[int, _FunctionEvents] = {}
        self._owners: dict[tuple[str, int], set[str] | None] = {}
        self._disabled: dict[str | None, bool] = {}

    def function(self, function) -> _FunctionEvents:
        if id(function) not in self._functions:
            self._functions[id(function)] = _FunctionEvents(self.facts.events_in(function), self.facts)
        return self._functions[id(function)]

    @cached_property
    def helpers(self) -> _Helpers:
        return _Helpers(self.facts)

    def unscale_taken(self, scaler: str | None) -> bool:
        """Does the module take the scaler's `unscale_` without calling it there (`un = scaler.unscale_`,
        `map(scaler.unscale_, ...)`, `getattr(scaler, name)`), under any name of the scaler? Whatever calls it
        then may unscale at any point: what the analysis cannot place, it does not judge."""
        if scaler is None:
            return False
        return any(vocab.UNSCALE in taken or None in taken
                   for name in self.facts.same_object_names(scaler) for taken in [self.facts.methods_taken(name)])

    def may_unscale_through_calls(self, scaler: str | None, function, start: int, end: int,
                                  skip: Call | None = None) -> bool:
        """May code of `function` between `start` and `end` (source order) unscale the scaler's gradients other
        than by a `scaler.unscale_(...)` event: an `unscale_` on another name of the scaler (`s = scaler`), a
        call of a function (this module's or, through the project index, another's) that reaches an
        `unscale_`, or a call the analysis cannot follow that is handed the scaler or one of its bound methods
        (it may unscale)?"""
        if scaler is None:
            return False
        names = self.facts.same_object_names(scaler)
        others = names - {scaler}  # `scaler`'s own `unscale_` calls are events, counted per optimizer
        helpers = self.helpers
        for call in helpers.calls_in(function, start, end):
            if call is skip:
                continue
            if call.method == vocab.UNSCALE and call.receiver in others:
                return True
            if helpers.is_event(call):
                continue
            unscales = helpers.unscales(call)
            if unscales or unscales is None and (_hands_over(call.node, names)
                                                 or _closure_of_this_module(self.facts, call)
                                                 or _unknown_scaler_method(call, names)
                                                 or call.qualified is None and _unfollowed_unscale(self.facts)):
                return True
        return False

    def scaler_disabled(self, scaler: str | None) -> bool:
        """`ModuleFacts.scaler_disabled`, once per scaler (it reads every construction of the name)."""
        if scaler not in self._disabled:
            self._disabled[scaler] = self.facts.scaler_disabled(scaler)
        return self._disabled[scaler]

    def optimizer_owners(self, name: str, frame) -> set[str] | None:
        """`_optimizer_owners`, once per name and function (what it reads depends on the function only)."""
        key = (name, id(frame.function()))
        if key not in self._owners:
            self._owners[key] = _optimizer_owners(self.facts, name, frame, self)
        return self._owners[key]

    def block_around(self, statements: tuple) -> tuple[tuple | None, int]:
        """The statements of the block (or module body) that holds the innermost of `statements`, and its
        position there."""
        found = self.facts.block_of(statements[-1])
        if found is None or (not found[2] and len(statements) < 2):
            return None, -1
        return found[0], found[1]

    def position_in(self, block: tuple, statement: cst.CSTNode) -> int | None:
        found = self.facts.block_of(statement)
        return found[1] if found is not None and found[0] is block else None

    @cached_property
    def _reordered(self) -> dict[int, list[Event]]:
        by_statement: dict[int, list[Event]] = {}
        for event in self.facts.events:
            if event.kind in REORDERED_EVENTS:
                for statement in event.call.statements:
                    by_statement.setdefault(id(statement), []).append(event)
        return by_statement

    def reordered_in(self, statement: cst.CSTNode) -> list[Event]:
        """The events of `REORDERED_EVENTS` whose code is in `statement`."""
        return self._reordered.get(id(statement), [])


def _optimizer_owners(facts: ModuleFacts, name: str, frame, index: _Index) -> set[str] | None:
    """The modules whose parameters optimizer `name` was built with, when its construction is seen."""
    bound = facts.bindings(name, frame)
    if len(bound) != 1 or not facts.optimizer_constructed(name, frame):
        return None
    value = bound[0].value
    owners = parameter_owners(facts, call_argument(value, 0, "params"), bound[0].frame)
    if owners is None:
        return None
    # `self.model = model` next to `self.opt = Adam(model.parameters())`: the same module under both names.
    function = bound[0].frame.function()
    for assignment in facts.assignments_in(function):
        if dotted_name(assignment.value) in owners:
            owners = owners | set(assignment.targets)
    return owners


# clipping reached through calls ------------------------------------------------------------------------------
# What a helper must not do for its clip to be reported at the call: a backward of its own (the gradients it
# clips may be its own), an `unscale_` anywhere (it may unscale first: an `unscale_` in any callee counts), a
# plain `optimizer.step()` (not the scaler's recipe: other rules' concern).
_HELPER_FACTS = (Effect.CLIP, Effect.UNSCALE, Effect.BACKWARD, Effect.SCALER_STEP, Effect.SCALER_UPDATE, Effect.STEP)
_HELPER_SILENCERS = (Effect.UNSCALE, Effect.BACKWARD, Effect.STEP)
_EVENT_FACTS = {EventKind.CLIP: Effect.CLIP, EventKind.SCALER_UNSCALE: Effect.UNSCALE, EventKind.BACKWARD: Effect.BACKWARD,
                EventKind.SCALER_STEP: Effect.SCALER_STEP, EventKind.SCALER_UPDATE: Effect.SCALER_UPDATE,
                EventKind.OPTIMIZER_STEP: Effect.STEP}
_HELPER_DEPTH = 3  # calls followed from the called helper, as the project index does (MAX_DEPTH)


@dataclass(frozen=True)
class _Doer:
    """Where a helper (or a function it calls) does a fact: the function, its module (None: this module) and
    the line; `order`: the fact's place in that function, to compare a clip with a step done by the same one."""

    qualname: str
    module: str | None
    line: int
    order: int
    target: Target | None = None  # the function, when it is another module's

    def where(self) -> str:
        """"`engine.clip_all()`, line 12" or "`Trainer._clip()`, line 12"."""
        name = f"{self.module}.{self.qualname}" if self.module else self.qualname
        return f"`{name}()`, line {self.line}"


class _Helpers:
    """What the calls of this module reach: a same-module function through the facts layer (its events, and its
    own calls followed `_HELPER_DEPTH` deep), another module's through the project index (`facts.project`)."""

    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self.view = facts.project
        self._infos = {info.qualname: info for info in reversed(facts.functions)}  # the first of a name wins
        self._targets: dict[int, str] = {}  # id of a call node -> the same-module function it calls
        for qualname, sites in facts.call_sites.items():
            for site in sites:
                self._targets[id(site.node)] = qualname
        self._calls: dict[int, list[Call]] = {}  # each function's calls, in source order
        for call in sorted(facts.calls, key=lambda call: call.index):
            self._calls.setdefault(id(call.frame.function()), []).append(call)
        self._indexes = {key: [call.index for call in calls] for key, calls in self._calls.items()}
        self._event_nodes = {id(event.node) for event in facts.events}
        self._done: dict[int, dict[str, _Doer] | None] = {}

    def calls_in(self, function, start: int = -1, end: int | None = None) -> list[Call]:
        """The function's calls, in source order; with `start`/`end`, those strictly between (found by bisection:
        a function asked once per clip would otherwise be read once per clip)."""
        calls = self._calls.get(id(function), [])
        if start < 0 and end is None:
            return calls
        indexes = self._indexes.get(id(function), [])
        low = bisect.bisect_right(indexes, start)
        high = len(indexes) if end is None else bisect.bisect_left(indexes, end)
        return calls[low:high]

    def is_event(self, call: Call) -> bool:
        return id(call.node) in self._event_nodes

    def does(self, call: Call) -> dict[str, _Doer] | None:
        """The facts of `_HELPER_FACTS` the function a call runs does, itself or through its callees (the first
        found breadth first for each); None when the call runs no function the module or the index knows."""
        if id(call.node) not in self._done:
            self._done[id(call.node)] = self._does(call)
        return self._done[id(call.node)]

    def unscales(self, call: Call) -> bool | None:
        """Does the function the call runs reach an `unscale_` (a call, or `unscale_` taken under another name),
        itself or through its callees? None when the call runs no function the module or the index knows."""
        same = self._targets.get(id(call.node))
        if same is not None:
            if Effect.UNSCALE in self.does(call):
                return True
            return self.view.reaches(Target(self.view.path, same), (Effect.UNSCALE,)) is not None
        target = self._other_module(self.facts.function_info(call.frame), call)
        if target is None:
            return None
        return self.view.reaches(target, (Effect.UNSCALE,)) is not None

    def _does(self, call: Call) -> dict[str, _Doer] | None:
        same = self._targets.get(id(call.node))
        if same is not None:
            found: dict[str, _Doer] = {}
            self._same_module(same, found)
            return found
        target = self._other_module(self.facts.function_info(call.frame), call)
        if target is None:
            return None
        found = {}
        self._across(target, found, need_clip=True)
        return found

    def _same_module(self, qualname: str, found: dict[str, _Doer]) -> None:
        frontier, seen = [qualname], {qualname}
        for _ in range(_HELPER_DEPTH + 1):
            following = []
            for current in frontier:
                info = self._infos.get(current)
                if info is None:
                    continue
                for event in self.facts.events_in(info.frame):
                    fact = _EVENT_FACTS.get(event.kind)
                    if fact is not None and fact not in found:
                        found[fact] = _Doer(current, None, self.facts.line_of(event.node), event.index)
                for inner in self.calls_in(info.frame):
                    # Any `x.unscale_()` or `x.backward()` counts, whatever the facts layer knows `x` to be.
                    fact = {vocab.UNSCALE: Effect.UNSCALE, vocab.BACKWARD: Effect.BACKWARD,
                            vocab.MANUAL_BACKWARD: Effect.BACKWARD}.get(inner.method or "")
                    if fact is not None and fact not in found:
                        found[fact] = _Doer(current, None, self.facts.line_of(inner.node), inner.index)
                    callee = self._targets.get(id(inner.node))
                    if callee is not None:
                        if callee not in seen:
                            seen.add(callee)
                            following.append(callee)
                        continue
                    target = self._other_module(info, inner)
                    if target is not None:
                        self._across(target, found)
            frontier = following

    def _other_module(self, info: FunctionInfo | None, call: Call):
        """The function of another module the call runs, through the project index; None when not known."""
        view = self.view
        if view is None or call.dotted is None or (call.qualified or "").startswith("torch."):
            return None
        target = view.resolve(info.qualname if info else None, call.dotted)
        return target if target is not None and target.module != view.path else None

    def _across(self, target, found: dict[str, _Doer], need_clip: bool = False) -> None:
        """What another module's function does, through the index (`need_clip`: nothing more is asked when it
        reaches no clip: the call is then not reported, whatever else it does)."""
        view = self.view
        names = view.project.names
        for fact in _HELPER_FACTS:  # "clip" first
            if fact in found:
                continue
            reached = view.reaches(target, (fact,))
            if reached is None and need_clip and fact == Effect.CLIP:
                return
            if reached is not None:
                doer = view.function(reached[0][-1])
                line = doer.lines.get(fact, doer.line)
                doing = reached[0][-1]
                found[fact] = _Doer(doing.qualname, names.get(doing.module, "?"), line, line, doing)
        step, scaler_step = found.get(Effect.STEP), found.get(Effect.SCALER_STEP)
        if step is not None and scaler_step is not None and step.target == scaler_step.target:
            # A scaler handed in is known by its step and update (the index's `scaler_step`); another `.step()`
            # in that function (a scheduler's) is then no plain optimizer step.
            del found[Effect.STEP]


MAX_MESSAGE = 120


def _bounded(message: str, where: str, label: str = "the clip:") -> str:
    """The message with where the clip is ("(the clip: `engine.clip()`, line 5)") when that fits in
    `MAX_MESSAGE` characters; the help line names it too, so a long path loses nothing."""
    longer = f"{message} ({label} {where})"
    return longer if len(longer) <= MAX_MESSAGE else message


def clips_then_steps(does: dict[str, _Doer]) -> bool:
    """Does the helper clip and then step the scaler, in one function, the clip first?"""
    clip, step = does.get(Effect.CLIP), does.get(Effect.SCALER_STEP)
    return clip is not None and step is not None and (clip.qualname, clip.module) == (step.qualname, step.module) \
        and clip.order < step.order
