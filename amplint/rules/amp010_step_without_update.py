"""AMP010 step-without-update."""

from __future__ import annotations

from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.facts import ModuleFacts
from amplint.facts.module import scaler_enabled
from amplint.facts.updates import ScalerUpdates, called_in_a_loop, calls_unknown_methods, iteration_loop, \
    update_only_after_loop, update_place
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.screen import Ask, Summary
from amplint.rules.scopes import MESSAGE_SNIPPET, snippet


class StepWithoutUpdate(Rule):
    """## What it does
    Checks for `scaler.step(optimizer)` run every iteration of a loop (directly, or in a function called from a
    loop, of the same module or of another) when the module never calls `scaler.update()` (nor, for a caller in
    another module, any module of the project on a scaler of that name).

    Also checks for a `scaler.step(optimizer)` run every iteration of a loop whose `scaler.update()` only runs
    outside the loop (after it): measured on CPU, the second iteration raises the same `RuntimeError`.

    Applies to every torch version with `GradScaler` (torch >= 1.6).

    ## Why is this bad?
    `update()` is what ends an iteration for a GradScaler: it adapts the scale (backs off after an overflow,
    grows after `growth_interval` clean steps) and resets the per-optimizer bookkeeping. Without it the second
    iteration's `scaler.step(optimizer)` raises (measured on CPU, torch 2.13, float16 and bfloat16):
    `RuntimeError: step() has already been called since the last update().` Even where a step runs, the scale
    it uses never adapts to overflows.

    ## Example
    ```python
    import torch

    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        optimizer.zero_grad()
    ```

    ## Use instead
    ```python
    import torch

    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    ```

    ## Fix safety
    Safe. The fix inserts `scaler.update()` right after the last `scaler.step(...)` of the iteration (after a
    `for opt in optimizers: scaler.step(opt)` loop as a whole), only when the module never updates the scaler. Such
    a program raises at its second step: the update changes nothing up to there (the first step ran with the
    initial scale) and makes every later step legal. A loop that runs once ends with the same parameters; only the
    scaler's own state (`get_scale()`, its state_dict) has adapted.

    No fix when the steps sit in different branches (no single place runs after every step), nor for an update
    only after the loop: moving it into the loop changes when the scale adapts relative to code after the loop,
    and keeping both makes the later update raise (`No inf checks were recorded prior to update.`).

    ## Limits
    Silent when `.update()` is called on a scaler of the same name in another function of the module (or on
    another spelling of it in this one), on another name bound to it (`s = scaler`), when the module takes the
    scaler's `update` without calling it there (`update = scaler.update`, `functools.partial(scaler.update)`,
    `for fn in (scaler.update,)`, a dict of hooks holding it, `getattr(scaler, name)`: whatever calls it may
    update), for an update after the loop when the loop can end after one pass
    (`break`, `return`, `raise`), the step is conditional or steps a name the loop rebinds, when the scaler
    is passed to another function (which may update it), when the loop calls methods of the scaler's owner that
    are not defined in this module, when a method of a class of this module that calls `self.update()` (a
    GradScaler subclass's own) is called on it, when the scaler comes from another module whose functions this
    module calls (`from state import scaler`, then `state.after_step()`: that code may update it), and for a
    scaler built with `enabled=False`.
    """

    code = "AMP010"
    name = "step-without-update"
    words = (vocab.STEP,)
    requires = Ask(Summary.scaler_possible) & Ask(Summary.calls_method, vocab.STEP)
    min_torch = "1.6"
    fix = "safe"

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        updates = ScalerUpdates(facts)
        for (scaler, _), steps in updates.steps.items():
            last = steps[-1]
            function = last.frame.function()
            if updates.elsewhere(scaler, function) or scaler_enabled(facts, scaler, last.frame) is False:
                continue
            if facts.no_grad_opener(last.frame) is not None:
                continue  # AMP005's business
            if facts.scaler_handed_over(scaler, function):
                continue
            iteration = iteration_loop(last)
            local_updates = updates.in_function(scaler, function)
            if local_updates:
                update = update_only_after_loop(facts, scaler, steps, iteration, local_updates)
                if update is not None:
                    message = (f"`{snippet(facts, last.node, MESSAGE_SNIPPET)}` runs every iteration of the loop at "
                               f"line {facts.line_of(iteration.node)}, `{scaler}.update()` only after it (line "
                               f"{facts.line_of(update.node)})")
                    yield Finding(last.node, message, None, help=(
                        f"Call `{scaler}.update()` after the last `{scaler}.step(...)` of each iteration instead"))
                continue
            if iteration is not None:
                if calls_unknown_methods(facts, scaler, iteration):
                    continue
                where = f"every iteration of the loop at line {facts.line_of(iteration.node)}"
            elif (caller := called_in_a_loop(facts, last.frame, scaler)) is not None:
                name, module, line = caller
                where = f"in `{name}()` (called in a loop " + (f"in `{module}`, line" if module else "at line") + \
                    f" {line})"
            else:
                continue
            message = f"`{snippet(facts, last.node, MESSAGE_SNIPPET)}` runs {where} with no `{scaler}.update()`"
            fix = self._fix(facts, scaler, update_place(steps, iteration))
            yield Finding(last.node, message, fix, help=None if fix else (
                f"Call `{scaler}.update()` after the last `{scaler}.step(...)` of each iteration"))

    @staticmethod
    def _fix(facts: ModuleFacts, scaler: str, anchor: cst.CSTNode | None) -> FixPlan | None:
        if anchor is None:
            return None

        def rebuild() -> cst.Module:
            update = cst.SimpleStatementLine(body=[cst.Expr(cst.parse_expression(f"{scaler}.update()"))])
            return replace_nodes(facts.module, {anchor: lambda updated: cst.FlattenSentinel([updated, update])})

        return FixPlan(f"Add `{scaler}.update()` after the last `{scaler}.step(...)` of the iteration", rebuild)
