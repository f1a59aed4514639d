"""AMP002 step-in-autocast."""

from __future__ import annotations

from typing import Iterator

from amplint import vocabulary as vocab
from amplint.vocabulary import Effect
from amplint.facts import ModuleFacts
from amplint.facts.across import calls_in_regions_reaching, opens_through_project, reaches_from_region
from amplint.rules.base import Finding, Rule
from amplint.rules.screen import Ask, AskProject, Summary
from amplint.rules.scopes import MESSAGE_SNIPPET, describe_region, region_fix, snippet

STEP_EVENTS = (Effect.OPTIMIZER_STEP, Effect.SCALER_STEP, Effect.SCALER_UPDATE)
# The index's facts for a function that steps an optimizer (known by use, as the facts layer knows one) or steps
# or updates a GradScaler itself.
SCALER_UPDATES = (Effect.OPTIMIZER_STEP, Effect.SCALER_STEP, Effect.SCALER_UPDATE)


class StepInAutocast(Rule):
    """## What it does
    Checks for `optimizer.step()`, `scaler.step(optimizer)` and `scaler.update()` executed inside an enabled (or
    possibly enabled) autocast region, including regions opened by decorators, names, `functools.partial`
    factories and same-module callers. `.step()` is only reported on objects known to be an optimizer by what
    the code does with them (built by a `torch.optim` class or a known optimizer factory, passed to
    `scaler.step`/`scaler.unscale_`, given `.zero_grad()` or read for `.param_groups`), never by their name, or
    on a GradScaler; an RL `env.step(action)` or a scheduler is not.

    ## Why is this bad?
    The optimizer update is outside what autocast is for, and PyTorch's AMP examples step after the autocast
    block. Built-in SGD/Adam/AdamW (foreach and fused) are not affected, measured, because their kernels are not
    autocast ops. An optimizer that multiplies matrices in `step()` is: Shampoo-style preconditioners and
    Newton-Schulz orthogonalisation (Muon) then compute `X @ X.T` in bfloat16/float16. Measured with a
    Newton-Schulz optimizer on CPU (torch 2.13, bfloat16): parameters differ by 7.4e-5 after one step.

    ## Example
    ```python
    import torch

    scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda"):
        loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```

    ## Use instead
    ```python
    import torch

    scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda"):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix safety
    Sometimes safe: the rewrite of AMP001 (`amplint rule AMP001 --long`), with its allow-list.

    - Only statements that provably do no forward computation leave the region (update-phase calls, logging,
      plain arithmetic); forward code after them, even with no call (`y = x @ w`), stays in a reopened block.
    - Unsafe where AMP001's fix is: a moved statement that computes more than the allow-list, or a reopened
      context object of unknown kind.
    - No fix for a step that takes a closure (`optimizer.step(closure)`, L-BFGS, SAM): the closure runs the forward
      pass, which belongs in the region; open autocast inside the closure instead. No fix where with-items would be
      reordered, nor for regions opened by a decorator or a caller.

    Regions made by a function of the project count too (`with make_ctx():`, `with self.autocast():`, a
    `@contextmanager` yielding inside autocast, `stack.enter_context(torch.autocast(...))`), as for AMP001; so
    does a call under autocast of a function or an object's method that steps (`self.model.optimize(batch)`),
    named with the file and line where it steps.

    ## Limits
    Optimizers held in containers by a computed index (`optimizers[i].step()`) and objects of unknown type are
    not reported; an element by a literal index (`self.optimizer[0].step()`) is, when the code shows it is an
    optimizer (its `.zero_grad()` called, or the container a list of optimizer constructions). A parameter
    annotated with a class (`model: Model`) is only a hint: it is read to find the method a call on it runs,
    nothing else; an annotation may be wrong at run time.
    """

    code = "AMP002"
    name = "step-in-autocast"
    fix = "sometimes"
    # Every autocast region is opened by a name `autocast` (import, attribute, alias), or entered by a `with` (a
    # function of the project making one: `with make_ctx():`).
    words = (vocab.AUTOCAST, "with")
    # An optimizer's or a scaler's step, or a scaler's update, that can run in a region.
    requires = Ask(Summary.regions_possible) & (
        Ask(Summary.calls_in_region, vocab.STEP, on_stepper=True)
        | (Ask(Summary.scaler_possible) & Ask(Summary.calls_in_region, vocab.UPDATE, on_scaler=True)))
    requires_across = (Ask(Summary.regions_possible) & AskProject(reaches_from_region, SCALER_UPDATES)
                       | Ask(Summary.calls_method, vocab.STEP, vocab.UPDATE) & AskProject(opens_through_project))

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        yield from self._step_events(facts)
        for reached in calls_in_regions_reaching(facts, SCALER_UPDATES):
            if reached.call.method in (vocab.STEP, vocab.UPDATE):
                continue  # a step or update named as such is an event of its own (reported above, when known)
            what = {"scaler_update": "a scaler's update", "scaler_step": "a scaler's step"}.get(
                reached.fact, "an optimizer's step")
            message = f"{reached.describe(facts, what)} in {describe_region(facts, reached.region, reached.region_chain)}"
            yield Finding(reached.call.node, message, notes=(reached.note(facts),),
                          help=f"Call it after the autocast block (the step is reached through {reached.path()})")

    def _step_events(self, facts: ModuleFacts) -> Iterator[Finding]:
        for event in facts.events:
            if event.kind not in STEP_EVENTS:
                continue
            region, chain = facts.effective_region(event.frame)
            if region is None or not region.active:
                continue
            message = f"`{snippet(facts, event.node, MESSAGE_SNIPPET)}` runs in {describe_region(facts, region, chain)}"
            fix = region_fix(facts, region, chain, event)
            yield Finding(event.node, message, fix, help=self._advice(event) if fix is None else None)

    @staticmethod
    def _advice(event) -> str:
        if event.kind == Effect.OPTIMIZER_STEP and event.node.args:
            return "Its closure is the forward pass: open autocast inside the closure instead"
        return "Step after the autocast block"
