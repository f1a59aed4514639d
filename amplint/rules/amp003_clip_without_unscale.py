"""AMP003 clip-without-unscale."""

from __future__ import annotations

from typing import Iterator

from amplint.lazy import libcst as cst

from amplint.facts import Event, EventKind, ModuleFacts
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.scopes import snippet


class ClipWithoutUnscale(Rule):
    """## What it does
    Checks for gradient clipping (`torch.nn.utils.clip_grad_norm_`, `clip_grad_value_`, under any import spelling)
    between `scaler.scale(loss).backward()` and `scaler.step(optimizer)` with no `scaler.unscale_(optimizer)`
    before it, and for `scaler.unscale_(...)` placed after the clip.

    ## Why is this bad?
    After `scaler.scale(loss).backward()` every gradient is multiplied by the loss scale (65536 by default, then
    whatever the scaler has grown or backed off to). Clipping those gradients measures a norm that is the scale
    times too large, so a `max_norm` meant for real gradients clips almost everything away: measured on CPU,
    `clip_grad_norm_` returned 55772.77 for a true norm of 0.8510 and the update shrank from 8.5e-2 to 1.5e-6.
    `scaler.step()` then unscales the already-clipped gradients, so the damage is not undone.

    ## Example
    ```python
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Use instead
    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    Safe. The fix inserts `scaler.unscale_(optimizer)` just before the clip, with the scaler and the optimizer
    of the `scaler.step(...)` that follows; when `unscale_` already comes after the clip, it moves it before.
    No fix is offered when the step does not run every time the clip does (for example the clip runs every
    micro-batch but the step only at the accumulation boundary), because unscaling twice before `update()`
    raises.

    ## Limits
    Silent when no GradScaler is involved (bfloat16 training), for `accelerator.clip_grad_norm_` (accelerate
    unscales first), for apex `amp.master_params` (apex unscales on leaving `amp.scale_loss`), and when the
    scaled backward or the step happen in another function.
    """

    code = "AMP003"
    name = "clip-without-unscale"
    fix = "safe"
    words = ("clip_grad",)

    @classmethod
    def maybe_applies(cls, summary) -> bool:
        return (summary.uses_api("clip_grad_norm_", "clip_grad_norm", "clip_grad_value_")
                and summary.calls_method("step") and summary.backward_possible() and summary.scaler_possible())

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        for clip in facts.events:
            if clip.kind is not EventKind.CLIP:
                continue
            events = facts.events_in(clip.frame.function())
            before = [e for e in events if e.index < clip.index]
            after = [e for e in events if e.index > clip.index]
            backward = next((e for e in reversed(before) if e.kind is EventKind.BACKWARD and e.scaled), None)
            if backward is None:
                continue
            scaler = backward.scaler
            if facts.scaler_disabled(scaler):
                continue  # GradScaler(enabled=False) scales nothing
            step = next((e for e in after if e.kind is EventKind.SCALER_STEP and e.scaler == scaler), None)
            if step is None:
                continue

            def unscales_stepped(event) -> bool:
                return (event.kind is EventKind.SCALER_UNSCALE and event.scaler == scaler
                        and (step.optimizer is None or event.optimizer in (None, step.optimizer)))

            if any(unscales_stepped(e) and e.index > backward.index for e in before):
                continue
            late_unscale = next((e for e in after if unscales_stepped(e) and e.index < step.index), None)
            optimizer = step.optimizer or "optimizer"
            clipped = snippet(facts, clip.node.func)
            if late_unscale is not None:
                message = (
                    f"`{clipped}(...)` clips gradients still multiplied by the loss scale: "
                    f"`{snippet(facts, late_unscale.node)}` at line {facts.line_of(late_unscale.node)} comes after "
                    f"the clip, so the clip sees a norm ~65536x too large (65536 is the default scale) and shrinks "
                    f"the update by that factor; unscale before clipping"
                )
                fix = self._move_unscale(facts, clip, late_unscale, step)
            else:
                message = (
                    f"`{clipped}(...)` clips gradients that `{scaler}` scaled by the loss scale (65536 by default) "
                    f"with no `{scaler}.unscale_({optimizer})` before it: the clip measures a norm ~65536x too "
                    f"large (measured: 55772.77 for a true 0.8510), so the update shrinks by that factor; "
                    f"call `{scaler}.unscale_({optimizer})` first"
                )
                fix = self._insert_unscale(facts, clip, step, scaler, optimizer)
            yield Finding(clip.node, message, fix)

    @staticmethod
    def _step_follows_every_clip(clip: Event, step: Event) -> bool:
        return clip.frame.is_within(step.frame)

    def _insert_unscale(self, facts, clip: Event, step: Event, scaler: str, optimizer: str) -> FixPlan | None:
        statement = clip.call.statement
        if step.optimizer is None or not self._step_follows_every_clip(clip, step):
            return None
        if not isinstance(statement, cst.SimpleStatementLine) and not isinstance(statement, cst.BaseCompoundStatement):
            return None

        def rebuild():
            unscale = cst.parse_statement(f"{scaler}.unscale_({optimizer})\n")
            unscale = unscale.with_changes(leading_lines=statement.leading_lines)
            moved = statement.with_changes(leading_lines=())
            return replace_nodes(facts.module, {statement: cst.FlattenSentinel([unscale, moved])})

        return FixPlan(f"Insert `{scaler}.unscale_({optimizer})` before the clip", rebuild)

    def _move_unscale(self, facts, clip: Event, unscale: Event, step: Event) -> FixPlan | None:
        clip_statement, unscale_statement = clip.call.statement, unscale.call.statement
        if not isinstance(unscale_statement, cst.SimpleStatementLine) or len(unscale_statement.body) != 1:
            return None
        if clip.call.statements[:-1] != unscale.call.statements[:-1] or clip.frame is not unscale.frame:
            return None

        def rebuild():
            moved = unscale_statement.with_changes(leading_lines=clip_statement.leading_lines)
            return replace_nodes(facts.module, {
                unscale_statement: cst.RemoveFromParent(),
                clip_statement: cst.FlattenSentinel([moved, clip_statement.with_changes(leading_lines=())]),
            })

        return FixPlan(f"Move `{snippet(facts, unscale.node)}` before the clip", rebuild)
