"""AMP011 unscale-twice."""

from __future__ import annotations

from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.facts import Event, ModuleFacts
from amplint.facts.module import scaler_enabled
from amplint.facts.unscaling import Move, UnscaleQueries, can_run_again
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.screen import Ask, Summary
from amplint.rules.scopes import MESSAGE_SNIPPET, snippet
from amplint.vocabulary import Effect


class UnscaleTwice(Rule):
    """## What it does
    Checks for `scaler.unscale_(optimizer)` called again on the same optimizer before `scaler.update()`. That
    is: twice in a row, after `scaler.step(optimizer)`, or once per iteration of a loop (typically every
    micro-batch under gradient accumulation) whose iterations do not all reach `scaler.update()`.

    Applies to every torch version with `GradScaler.unscale_` (torch >= 1.6).

    ## Why is this bad?
    `unscale_` divides the gradients in place and records that it did, so that `step()` does not divide again;
    the record is cleared only by `update()`. A second call raises, measured on CPU with torch 2.13:
    `RuntimeError: unscale_() has already been called on this optimizer since the last update().`
    (`RuntimeError: unscale_() is being called after step().` after a step). Under gradient accumulation the
    error comes at the second micro-batch; unscaling at the step boundary gives the same accumulated gradient
    as a run without a scaler.

    ## Example
    ```python
    import torch

    scaler = torch.amp.GradScaler("cuda")
    for x, y in micro_batches:
        scaler.scale(loss_fn(model(x), y)).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Use instead
    ```python
    import torch

    scaler = torch.amp.GradScaler("cuda")
    for x, y in micro_batches:
        scaler.scale(loss_fn(model(x), y)).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    An optional clip (`if clip_grad: scaler.unscale_(optimizer)`) in the micro-batch loop is the same mistake:
    its test is the same every micro-batch, so once on it unscales every micro-batch. Silent when a test on the
    way can change between iterations (it may be the accumulation boundary: `if (i + 1) % accum == 0`, a name
    the loop assigns, a call, an attribute another method sets), and when the update runs under the same tests.
    An update that a `continue` between the two can skip (`if (i + 1) % accum != 0: continue`, `if not
    finite: continue`) is not reached by every iteration that unscaled: the next `unscale_` raises.

    ## Fix safety
    Safe. In a loop, the fix moves the `unscale_` (with the gradient clipping right after it) to just before the
    `scaler.step(optimizer)` it belongs to, when nothing it uses is assigned on the way; a plain second call in
    the same block is removed. An `if` whose body is only the `unscale_` and its clips moves as a whole (the test
    is the same in every iteration, so the clip still runs exactly when the flag says); an `if` holding anything
    else, or nested in another test of the loop, gets no fix. Code that raised now runs. Moved statements take
    their own comments (the lines above them) along; a removed call leaves the comments above it in place.

    ## Limits
    Silent when the optimizer is not a plain name (`optimizers[i]`), for a loop over optimizers
    (`for opt in optimizers: scaler.unscale_(opt)`), when the `unscale_` is under a test that may change between
    iterations, and when the update is in another function.
    """

    code = "AMP011"
    name = "unscale-twice"
    words = (vocab.UNSCALE,)
    # A second unscale_ (or a step) before it in the same function, or a loop that repeats it.
    requires = Ask(Summary.calls_method, vocab.UNSCALE) & Ask(can_run_again, vocab.UNSCALE)
    min_torch = "1.6"
    fix = "safe"

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        unscales = UnscaleQueries(facts)
        for unscale in facts.events:
            if unscale.kind != Effect.UNSCALE or not unscale.optimizer or not unscale.scaler:
                continue
            if scaler_enabled(facts, unscale.scaler, unscale.frame) is False \
                    or facts.no_grad_opener(unscale.frame) is not None:
                continue
            scaler, optimizer = unscale.scaler, unscale.optimizer
            earlier = unscales.earlier(unscale)
            if earlier is not None:
                after_step = earlier.kind == Effect.SCALER_STEP
                earlier_call = f"`{scaler}.step(...)`" if after_step else "`unscale_`"
                message = (f"`{snippet(facts, unscale.node, MESSAGE_SNIPPET)}` raises: {earlier_call} at line "
                           f"{facts.line_of(earlier.node)} came first, with no `update()` between")
                fix = None if after_step else self._remove(facts, unscales.removable(unscale))
                yield Finding(unscale.node, message, fix, help=None if fix else (
                    "Unscale before the step" if after_step else "Remove the second call"))
                continue
            loop = unscales.repeating_loop(unscale)
            if loop is None:
                continue
            message = (f"`{snippet(facts, unscale.node, MESSAGE_SNIPPET)}` repeats in the loop at line "
                       f"{facts.line_of(loop.node)} with no `update()` between: the second call raises")
            fix = self._move(facts, unscale, unscales.move(unscale, loop))
            yield Finding(unscale.node, message, fix, help=None if fix else (
                f"Move it just before `{scaler}.step({optimizer})` (unscale once, at the step boundary)"))

    @staticmethod
    def _remove(facts: ModuleFacts, statement: cst.CSTNode | None) -> FixPlan | None:
        if statement is None:
            return None
        return FixPlan("Remove the second `unscale_`",
                       lambda: replace_nodes(facts.module, {statement: cst.RemoveFromParent()}))

    @staticmethod
    def _move(facts: ModuleFacts, unscale: Event, move: Move | None) -> FixPlan | None:
        if move is None:
            return None
        target, moved = move.target, move.moved

        def rebuild() -> cst.Module:
            from amplint.rules.rewrite import MOVED, split_blank_lines  # libcst's code generator, when a fix is built

            # The moved statements take their own comments along; the blank lines above the step go above them
            # and the step keeps its comments.
            blank, comments = split_blank_lines(target)
            first = moved[0].with_changes(leading_lines=[*blank, *moved[0].leading_lines])
            placed = [first, *moved[1:], target.with_changes(leading_lines=comments)]
            replacements: dict = {s: MOVED for s in moved}
            replacements[target] = cst.FlattenSentinel(placed)
            return replace_nodes(facts.module, replacements)

        what = f"the `if` around `{snippet(facts, unscale.node)}`" if moved[0] is not unscale.call.statement \
            else f"`{snippet(facts, unscale.node)}`"
        return FixPlan(f"Move {what} to just before `{snippet(facts, move.step.node)}`", rebuild)
