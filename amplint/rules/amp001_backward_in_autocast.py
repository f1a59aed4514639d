"""AMP001 backward-in-autocast."""

from __future__ import annotations

from typing import Iterator

from amplint import vocabulary as vocab
from amplint.vocabulary import Effect
from amplint.facts import ModuleFacts, frameworks
from amplint.facts.across import (calls_in_regions_reaching, opens_through_project, reaches_from_module,
                                  reaches_from_region)
from amplint.rules.base import Finding, Rule
from amplint.rules.screen import Ask, AskProject, Summary
from amplint.rules.scopes import MESSAGE_SNIPPET, describe_region, region_fix, snippet


BACKWARDS = (Effect.BACKWARD,)  # the index's fact for a function that runs a backward itself
# Lightning manual optimization: `self.manual_backward(...)` and `self.automatic_optimization = False`
LIGHTNING_MANUAL = Ask(Summary.calls_method, vocab.MANUAL_BACKWARD) & Ask(Summary.mentions,
                                                                          vocab.LIGHTNING_MANUAL_SWITCH)


class BackwardInAutocast(Rule):
    """## What it does
    Checks for `.backward()`, `torch.autograd.backward(...)` and `torch.autograd.grad(...)` executed inside an
    enabled (or possibly enabled) autocast region. Regions are found in every form: a `with torch.autocast(...)`
    block, a function decorated with `@torch.autocast(...)`, a context reached through a name
    (`ctx = torch.autocast(...)`, `functools.partial(torch.autocast, ...)`, `nullcontext() if ... else
    autocast()`), `accelerator.autocast()`, or a region opened by the caller of a function defined in the same
    module (followed two calls deep). A region made by a function of the project is one too: a factory
    returning `torch.autocast(...)` entered as `with make_ctx():` or through a name, a method (`with
    self.autocast():`, also a base class's in another module), a `@contextmanager` that yields inside autocast,
    `nullcontext() if ... else make_ctx()` (maybe enabled), and `stack.enter_context(torch.autocast(...))` at
    the head of a `with ExitStack() as stack:` block. A call under autocast of a function or an object's
    method that runs a backward (`self.model.optimize(batch, self)`, the class found through `self.model =
    Model()`, an annotation or a project base class) is reported at the call, naming the file and line of the
    backward, with a note there.

    Lightning's manual optimization: with `self.automatic_optimization = False`, `self.manual_backward(loss)` and
    `opt.step()` in `training_step` run under the autocast the Trainer opens around it. Manual optimization is
    Lightning's documented pattern, so it is reported (at `self.manual_backward(...)`) only where its harm is
    shown: the LightningModule computes an fp32 island (an `autocast(enabled=False)` block that is not the one
    around the backward, or a function decorated with one) in its module, or calls a function of another module
    of the project that does; and the code shows a precision with which the Trainer autocasts
    (`Trainer(precision="bf16-mixed")` or `"16-mixed"`, a literal keyword, in the module or in a module of the
    project importing it).

    ## Why is this bad?
    PyTorch's AMP recipe runs only the forward pass and the loss under autocast; "backward passes under autocast
    are not recommended". Backward ops already run in the dtype their forward ops chose, so for a plain model the
    gradients do not change. But anything that runs Python in backward sees autocast still switched on: a custom
    `torch.autograd.Function` without `custom_bwd`, or backward through an `autocast(enabled=False)` island, then
    computes in bfloat16/float16 what was meant to be float32. Measured with torch 2.13 on CPU: inside such a
    backward `torch.is_autocast_enabled()` is True, an fp32 `torch.mm` returns bfloat16, and the gradient's
    relative error grows from 3e-7 to 2.4e-3 (bfloat16) or 3.0e-4 (float16).
    The same under Lightning's autocast: a `manual_backward` in `training_step` (pytorch-lightning 2.6.6,
    bf16-mixed on CPU) computed an fp32 island's weight gradient with error 3.6e-3 instead of 3e-7; wrapped in
    `torch.autocast(device_type, enabled=False)` it measured clean (tests/test_watch_frameworks.py,
    `test_lightning_manual_optimization_runs_backward_and_step_under_the_trainers_autocast`).

    ## Example
    ```python
    import torch

    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
        loss.backward()
    optimizer.step()
    ```

    ## Use instead
    ```python
    import torch

    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
    ```

    ## Fix safety
    Sometimes safe. The fix moves the backward call, and the update phase after it, out of the `with` block; forward
    code that follows goes into a reopened block with the same item. Moved statements take their comments along.

    - Only statements that provably do no forward computation move (an allow-list): update calls with plain
      arguments (`loss.backward()`, `scaler.scale(loss).backward()`, `optimizer.step()`, `scaler.step(optimizer)`,
      `scaler.update()`, `unscale_`, clipping, `zero_grad()`, `step()` of a `torch.optim.lr_scheduler` object built in
      this code), reading and logging (`.item()`, `print(...)`, `writer.add_scalar(...)`), and assignments and `if`s
      made of those, names, literals and the arithmetic no autocast op list holds (`+ - * %`, not `/`, `**` or `@`).
    - Everything else stays in the region: a call into a model, `y = x @ w`, a `yield` (the caller of a
      `@contextmanager` step would leave the region), a notebook magic, `step()` on an object of unknown kind, and
      `optimizer.step(closure)` (the closure is the forward pass).
    - Unsafe when the reopened item is a context object of unknown kind (maybe a one-shot generator), not a fresh
      `torch.autocast(...)` call with plain arguments or a name bound only to `torch.autocast`/`nullcontext`
      objects; and when the backward statement computes more than the allow-list (`(loss / n).backward()`: `/` is
      an autocast op when the left side is a number).
    - No fix when the autocast item is not the last of its `with` (`with a, torch.autocast(...) as ac, b(ac):`:
      items are never reordered); when it is the last, `with a, ac:` is `with a:` around `with ac:` and only the
      inner block is split. No fix for regions opened by a decorator or by a caller, nor through an ExitStack.
    - No fix for Lightning's manual optimization: where the optimizer steps end is not known; wrap
      `self.manual_backward(...)` and the steps in `with torch.autocast(device_type=..., enabled=False):`.
    - A region made by a function: safe only for a function of this module that only returns torch's autocast
      (or a null context) object and when the block need not be reopened; unsafe for a `@contextmanager` (its
      code after the yield would run before the moved statements), a function of another module, or a reopened
      block (the function would run again).

    ## Limits
    Regions entered through objects amplint cannot see (a context manager passed in as an argument, a
    framework's implicit autocast such as Lightning's precision plugin) are not known, so nothing is reported;
    except Lightning's manual optimization where an fp32 island and the Trainer's precision are shown (above).
    There the island is looked for anywhere in the LightningModule's module (not only on its forward path), and
    in another module only through the calls of the class's methods that the project index resolves (a function,
    a submodule's `forward` through `self.head = Head()`), a few calls deep; manual optimization switched on other
    than by `self.automatic_optimization = False` in a method of the class itself (a base class, a property) is
    not seen; a Trainer built elsewhere than in the module or a module importing it, or with a precision that is
    not a literal, leaves it unknown: nothing is reported.
    A region made by a function of another module is known only as maybe enabled, of unknown device and dtype.
    An ExitStack's region is known only when `enter_context` comes first in its `with` block (alone, or under an
    `if` on a name: maybe enabled); a stack entered without `with`, or later in the block, is not followed.
    A parameter annotated with a class (`model: Model`) is only a hint, read to find the method a call on it
    runs and nothing else (an annotation may be wrong at run time).

    `torch.compile`: a compiled region's backward graph is traced when its forward runs, and whether it computes
    under autocast is fixed by `torch._functorch.config.backward_pass_autocast`, not by where `.backward()` is
    written. With the default, `"same_as_forward"`, it runs under the forward's autocast state even when
    `.backward()` comes after the block; with `"off"` it runs under none, wherever `.backward()` is. So for a
    compiled region this finding, and its fix, change nothing: set the option to `"off"` before the region is
    compiled to get the backward of the recipe. Measured with torch 2.13 on CPU (bfloat16, a custom Function
    without `custom_bwd`, `aot_eager` backend): gradient error 2.4e-3 with the default whether `.backward()` is
    inside or after the block, 1.4e-7 with `"off"` (eager after the block: 1.4e-7). amplint cannot know which
    code is compiled, so it reports by where `.backward()` is written, and stays silent on a backward after the
    block that a compiled region still runs under autocast.
    """

    code = "AMP001"
    name = "backward-in-autocast"
    fix = "sometimes"
    # Every autocast region is opened by a name `autocast` (import, attribute, alias), or entered by a `with` (a
    # function of the project making one: `with make_ctx():`); Lightning's manual optimization is named by
    # `manual_backward` (its island computed in another module: no region written here).
    words = (vocab.AUTOCAST, "with", vocab.MANUAL_BACKWARD)
    requires = Ask(Summary.regions_possible) & (Ask(Summary.calls_in_region, vocab.BACKWARD, vocab.GRAD)
                                                | LIGHTNING_MANUAL)
    requires_across = (Ask(Summary.regions_possible) & AskProject(reaches_from_region, BACKWARDS)
                       | Ask(Summary.calls_method, vocab.BACKWARD, vocab.GRAD) & AskProject(opens_through_project)
                       | LIGHTNING_MANUAL & AskProject(reaches_from_module, frameworks.ISLANDS))

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        yield from self._backward_events(facts)
        yield from self._manual_backward(facts)
        for reached in calls_in_regions_reaching(facts, BACKWARDS):
            if reached.call.method == vocab.BACKWARD:
                continue  # `x.backward()` is a backward event, reported above
            message = (f"{reached.describe(facts, 'a backward')} "
                       f"in {describe_region(facts, reached.region, reached.region_chain)}")
            yield Finding(reached.call.node, message, notes=(reached.note(facts),),
                          help=f"Call it after the autocast block (the backward is reached through {reached.path()})")

    def _manual_backward(self, facts: ModuleFacts) -> Iterator[Finding]:
        """Lightning manual optimization under the Trainer's autocast, where an fp32 island shows its harm
        (amplint/facts/frameworks.py)."""
        for found in frameworks.manual_backward_under_autocast(facts):
            precision = found.shown.keywords[0].get(vocab.LIGHTNING.precision)
            precision = {"16": "16-mixed", 16: "16-mixed", "bf16": "bf16-mixed"}.get(precision, precision)  # legacy
            island = found.island
            message = (f"`{snippet(facts, found.call.node, 32)}` runs under Lightning's {precision} autocast, "
                       f"through the fp32 island at {island.where()}")
            advice = (f"The Trainer ({found.shown.where}) autocasts `{vocab.LIGHTNING_TRAINING_STEP}`: wrap "
                      f"`self.{vocab.MANUAL_BACKWARD}(...)` and the optimizer steps in `with "
                      f"torch.autocast(device_type=..., enabled=False):`")
            text = facts.source if island.module is None else facts.project.text(island.module)
            lines = text.splitlines() if text else []
            line = lines[island.line - 1] if 0 < island.line <= len(lines) else ""
            note = ((island.module, island.line, len(line) - len(line.lstrip()) + 1),
                    f"the fp32 island (`{island.code}`): its backward computes in low precision under autocast")
            yield Finding(found.call.node, message, help=advice, notes=(note,))

    def _backward_events(self, facts: ModuleFacts) -> Iterator[Finding]:
        for event in facts.events:
            if event.kind != Effect.BACKWARD:
                continue
            region, chain = facts.effective_region(event.frame)
            if region is None or not region.active:
                continue
            message = (f"`{snippet(facts, event.node, MESSAGE_SNIPPET)}` runs in "
                       f"{describe_region(facts, region, chain)}")
            fix = region_fix(facts, region, chain, event)
            yield Finding(event.node, message, fix, help=None if fix else "Call it after the autocast block")
