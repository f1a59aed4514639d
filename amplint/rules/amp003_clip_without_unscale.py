"""AMP003 clip-without-unscale."""

from __future__ import annotations

from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.vocabulary import Effect
from amplint.facts import Event, ModuleFacts, frameworks
from amplint.facts.clips import base_stores_clip
from amplint.facts.scaled_clips import ClipBeforeStep, ClipThroughCall, ScaledClip, ScaledClips, reads_gradients, \
    unscale_site
from amplint.diagnostics import Applicability
from amplint.facts.across import reaches_from_module
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.screen import Ask, AskProject, Summary
from amplint.rules.scopes import UpdatePhase, snippet


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
        clips = ScaledClips(facts)
        for found in clips.in_functions():
            yield self._after_backward(facts, clips, found) if isinstance(found, ScaledClip) \
                else self._before_step(facts, found)
        for found in clips.through_calls():
            yield self._through_call(facts, found)
        for call, where in clips.clamping_hooks():
            hooked = snippet(facts, call.node.func, 32)
            message = _bounded(f"`{hooked}(...)` clamps gradients still scaled by the loss scale", where,
                               "scaled backward:")
            yield Finding(call.node, message, help=f"A gradient hook runs during the scaled backward ({where}), "
                                                   f"before any `unscale_`: clip after `scaler.unscale_(optimizer)`")
        yield from self._framework_contracts(facts)

    def _after_backward(self, facts: ModuleFacts, clips: ScaledClips, found: ScaledClip) -> Finding:
        """A clip after the scaled backward of its function: the `unscale_` moved before it, or inserted."""
        clip, scaler, tied, candidates = found.clip, found.scaler, found.tied, found.candidates
        clipped = snippet(facts, clip.node.func, 32)
        if found.late_unscale is not None:
            message = (f"`{clipped}(...)` clips gradients still scaled by `{scaler}`: the `unscale_` at line "
                       f"{facts.line_of(found.late_unscale.node)} comes later")
            fix = self._move_unscale(facts, clips, clip, found.late_unscale)
            return Finding(clip.node, message, fix, help=None if fix else "Unscale before clipping")
        message = f"`{clipped}(...)` clips gradients still scaled by `{scaler}` (no `unscale_` before it)"
        advice = f"Call `{scaler}.unscale_({tied or '...'})` before the clip"
        if tied is None:  # an undetermined tie: the optimizers it may be
            advice += ", for the optimizer of these parameters" + (
                f" (one of {', '.join(f'`{c}`' for c in candidates)})" if len(candidates) > 1 else "")
        fix = None
        if found.insert_step is not None:
            fix = self._insert_unscale(facts, clip, found.insert_step, scaler, tied)
            if fix is not None and found.unseen is not None:  # it may unscale: a second `unscale_` would raise
                fix = FixPlan(f"{fix.message} (`{found.unseen}(...)` runs first, unread)", fix.rewrite,
                              Applicability.UNSAFE)
        return Finding(clip.node, message, fix, help=None if fix else advice)

    def _before_step(self, facts: ModuleFacts, found: ClipBeforeStep) -> Finding:
        """A clip before the scaler's step, its scaled backward elsewhere: an inserted `unscale_` is unsafe (one run
        out of sight before the function is called would make it raise)."""
        clip, scaler, where, tied = found.clip, found.scaler, found.where, found.tied
        clipped = snippet(facts, clip.node.func, 32)
        message = (f"`{clipped}(...)` clips gradients still scaled by `{scaler}` (`{scaler}.step` follows, "
                   f"no `unscale_`)")
        if where:
            message = _bounded(f"`{clipped}(...)` clips gradients still scaled by `{scaler}`", where,
                               "scaled backward:")
        fix = None
        if found.tied_step is not None:
            fix = self._insert_unscale(facts, clip, found.tied_step, scaler, tied)
            if fix is not None:
                title = f"{fix.message} (scaled backward: {where})" if where else fix.message
                fix = FixPlan(title, fix.rewrite, Applicability.UNSAFE)
        advice = f"Call `{scaler}.unscale_({tied or '...'})` before the clip" + (
            f" (scaled backward: {where})" if where else "")
        return Finding(clip.node, message, fix, help=None if fix else advice)

    def _through_call(self, facts: ModuleFacts, found: ClipThroughCall) -> Finding:
        """A helper's clip, reported at its call."""
        call, scaler, where, tied = found.clip.call, found.scaler, found.where, found.tied
        callee = snippet(facts, call.node.func, 32)
        if found.steps:
            message = _bounded(f"`{callee}(...)` clips and steps gradients still scaled by `{scaler}`", where, "in")
            return Finding(call.node, message, help=f"Unscale before the clip in {where}: `scaler.unscale_(optimizer)`")
        message = _bounded(f"`{callee}(...)` clips gradients still scaled by `{scaler}`", where)
        fix = None
        if found.insert_step is not None:
            fix = self._insert_unscale(facts, found.clip, found.insert_step, scaler, tied,
                                       before=f"`{callee}(...)`")
        advice = f"Call `{scaler}.unscale_({tied or '...'})` before `{callee}(...)` (the clip: {where})"
        return Finding(call.node, message, fix, help=None if fix else advice)

    def _framework_contracts(self, facts: ModuleFacts) -> Iterator[Finding]:
        """Clips where a framework's gradients are still scaled, or unscaled twice (amplint/facts/frameworks.py)."""
        for found in frameworks.framework_clips(facts):
            message, advice = FRAMEWORK_WORDS[found.kind]
            words = {"clipped": snippet(facts, found.call.node.func, 40), "shown": found.shown.where,
                     "method": found.method, "hook": vocab.LIGHTNING_UNSCALED_HOOK, "clip": vocab.CLIP_GRAD_NORM_}
            yield Finding(found.call.node, message.format(**words), help=advice.format(**words))

    def _insert_unscale(self, facts, clip: Event, step: Event, scaler: str, optimizer: str,
                        before: str = "the clip") -> FixPlan | None:
        statement = unscale_site(facts, clip, step)
        if statement is None:
            return None

        def rebuild():
            unscale = cst.parse_statement(f"{scaler}.unscale_({optimizer})\n")
            unscale = unscale.with_changes(leading_lines=statement.leading_lines)
            moved = statement.with_changes(leading_lines=())
            return replace_nodes(facts.module, {statement: cst.FlattenSentinel([unscale, moved])})

        return FixPlan(f"Insert `{scaler}.unscale_({optimizer})` before {before}", rebuild)

    def _move_unscale(self, facts, clips: ScaledClips, clip: Event, unscale: Event) -> FixPlan | None:
        """Move the `unscale_` before the clip: no fix when the move is wrong (`ScaledClips.unscale_move`: it
        reorders gradient work or moves over a rebinding of what the `unscale_` names); safe when each statement
        moved over is of the update phase (AMP001's allow-list) and reads no gradient (an EMA or a gradient log
        may read them: unsafe)."""
        move = clips.unscale_move(clip, unscale)
        if move is None:
            return None
        phase = UpdatePhase(facts)
        applicability = Applicability.SAFE if all(phase.statement(statement) and not reads_gradients(
            facts, statement, clip.frame) for statement in move.between) else Applicability.UNSAFE
        clip_statement, unscale_statement = move.clip_statement, move.unscale_statement

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



# What each framework contract's finding says (amplint/facts/frameworks.py's kinds): the message, then the help.
FRAMEWORK_WORDS = {
    frameworks.LIGHTNING_HOOK: (
        "`{clipped}(...)` in `{method}` clips gradients Lightning has not unscaled yet",
        "Lightning unscales after `{method}` (16-mixed: {shown}): clip in `{hook}`, or with "
        "`Trainer(gradient_clip_val=...)`"),
    frameworks.LIGHTNING_MANUAL: (
        "`{clipped}(...)` after `self.{method}(...)` clips gradients Lightning has not unscaled",
        "In manual optimization Lightning unscales inside `opt.step()` (16-mixed: {shown}): clip in `{hook}`, "
        "which runs after the unscale"),
    frameworks.ACCELERATE_BACKWARD: (
        "`{clipped}(...)` clips gradients still scaled by `{method}.backward(...)` (fp16)",
        "Accelerate scales the loss with mixed_precision=\"fp16\" ({shown}): use `{method}.{clip}(...)`, which "
        "unscales first"),
    frameworks.HF_UNSCALE: (
        "`{clipped}(...)` in `{method}` unscales; the Trainer unscales again after it",
        "The Trainer unscales and clips after `{method}` returns (fp16: {shown}), and a second `unscale_` raises: "
        "clip with `TrainingArguments(max_grad_norm=...)`"),
    frameworks.HF_CLIP: (
        "`{clipped}(...)` in `{method}` clips gradients the Trainer has not unscaled yet",
        "The Trainer unscales only after `{method}` returns (fp16: {shown}): clip with "
        "`TrainingArguments(max_grad_norm=...)`"),
}

MAX_MESSAGE = 120


def _bounded(message: str, where: str, label: str = "the clip:") -> str:
    """The message with where the clip is ("(the clip: `engine.clip()`, line 5)") when that fits in
    `MAX_MESSAGE` characters; the help line names it too, so a long path loses nothing."""
    longer = f"{message} ({label} {where})"
    return longer if len(longer) <= MAX_MESSAGE else message
