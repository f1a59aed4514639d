"""AMP004 scaler-per-iteration."""

from __future__ import annotations

from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.diagnostics import Applicability
from amplint.facts import ModuleFacts
from amplint.facts.construction import (PerIteration, Runs, builder_called_per_iteration, hoist_safety,
                                        hoisted_statement, per_iteration, scaler_wrapper_known, wrapper_built_in_loop,
                                        wrappers_per_iteration)
from amplint.facts.names import GRAD_SCALERS
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.screen import Ask, AskProject, Summary
from amplint.rules.scopes import snippet

ADAPTS = "its scale restarts at 65536 on every call and never adapts"


class ScalerPerIteration(Rule):
    """## What it does
    Checks for a `GradScaler(...)` constructed inside the loop whose iterations call its `step()`/`update()`
    (per batch or per epoch); for a function that builds and uses a local GradScaler and is called once per
    iteration of a loop, in this module or another, a few callers up (`train_one_epoch()` called per epoch from
    `main.py`); and for a function that builds a local GradScaler and steps it once per call with no loop of its
    own and no caller in the project (an agent's `learn()`, a loss-scaling object's `__call__`): whoever calls it
    does so once per step.

    ## Why is this bad?
    A GradScaler's value is its state: the current scale, backed off after every overflow and grown after
    `growth_interval` clean steps. Rebuilding it throws the state away. With float16 and gradients that
    overflow at the initial scale, a per-batch scaler starts at 65536 every step and skips every step: measured
    on CPU, 8 of 8 steps skipped and the scale stuck at 65536, while a scaler built once backs off to 2048 and
    training resumes. With bfloat16 the scale never grows (the growth tracker resets).

    ## Example
    ```python
    import torch

    for x, y in loader:
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
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```

    ## Fix safety
    Sometimes safe. The fix hoists the construction before the outermost loop that uses the scaler, so the scale
    carries over between iterations. A GradScaler's constructor only records its arguments (a loop that runs zero
    times just gains an unused scaler), so the construction must read the same values before the loop as inside
    it. The moved statement takes its comments along.

    - No fix when a name the statement reads or assigns is bound anywhere in the loop, in any form (assignment,
      augmented assignment, walrus, `import`, `for`/`with`/`except` targets, `global`/`nonlocal`, `del`, a nested
      `def`/`class`); when a name it reads may change in place there (an attribute or item assigned, a method
      called on it, the object passed to a call other than an imported module's function or a read-only builtin);
      when a function of the module declares a name it reads `global` or `nonlocal`, or the loop calls a function
      of a module whose attribute it reads (`cfg.bump()`, `cfg.init`): a call in the loop may rebind it; or when
      the scaler's attribute is assigned elsewhere in the loop. Hoisting would read other values, or names before
      they exist.
    - Unsafe when the construction sits under an `if` in the loop (it may never have run there), when its
      arguments call something (the call now runs once instead of every iteration), or when an optimizer it
      steps is read through a name the loop may rebind or change (`self.optimizer` after `self.setup(epoch)`):
      one scaler would then serve optimizers the analysis cannot tell are the same.
    - No fix for a scaler built in a per-step function.

    A scaler built in a loop and handed, in that loop, to a callee that steps or updates it (`apply_update(scaler,
    loss, optimizer)`, `self.optimize_fn(loss, scaler=scaler)`, through the project index) is reported too, when
    the callee is a per-step function (no loop of its own) or is handed an optimizer the loop does not build.
    A per-step function's own loop that trains nothing (returns, metrics) does not make it a training loop.
    A user class whose `__init__` builds a GradScaler (`NativeScaler`, an AMP helper), built in a loop (or once
    per call of a function a caller runs in a loop: a per-step function) and called there, or a method of it
    that steps or updates the scaler, or handed to a function that calls it, is a new scaler every iteration too
    (no fix). So is a scaler built once per call of a function run per iteration (per epoch) and handed only to
    project functions that step it (`self.optimize_fn(scaler, loss)` per batch; no fix).

    ## Limits
    Silent for a loop over models whose iterations step another optimizer (`for k in models:` around a training
    loop stepping `opts[k]`, `for member, optim in zip(members, optims)`): one scaler per model is right. Silent
    for a construction under an `if` whose test may change between iterations (`if i == 0:`): it may run once.
    Silent for lazy construction (`if self.scaler is None: self.scaler = GradScaler()`,
    `scaler = scaler or GradScaler()`), for a scaler rebuilt
    and then restored with `load_state_dict` (resuming), for a function that builds the optimizer it steps too
    (a fresh run per call: folds, trials, sweeps), for a scaler the function hands on (returned, stored on an
    object, passed to a call other than one of a project function that steps it), for a per-step function whose
    callers in the project call it outside loops, and
    for pytest test functions (`test_*`, collected by that name and run once). Callers are followed through the
    project index: module-level functions, methods through `self`, objects whose class is known; not functions
    passed as arguments. A scaler returned by a helper called in the loop is not followed.
    """

    code = "AMP004"
    name = "scaler-per-iteration"
    fix = "sometimes"
    # `for`/`while`: a loop may build a user class that builds one (`wrappers_per_iteration`)
    # `def`: a per-step function may build such a class outside any loop of its file (`wrappers_per_iteration`)
    words = (vocab.GRAD_SCALER, "for", "while", "def")
    # Built in a loop (and stepped/updated in the same function, or handed there to a callee that steps it); or
    # built and stepped in one function (a per-step function, whoever calls it).
    requires = Ask(Summary.imports_module, vocab.TORCH) & (
        Ask(Summary.calls_in_loop, *vocab.SCALER_CLASSES)
        | Ask(Summary.calls_in_same_function, (vocab.STEP,), vocab.SCALER_CLASSES, on_scaler=True))
    # a function of this file that builds a scaler is called in a loop somewhere in the project
    requires_across = (Ask(Summary.imports_module, vocab.TORCH) & Ask(Summary.calls_api, *GRAD_SCALERS)
                       & AskProject(builder_called_per_iteration)) | (
        (Ask(Summary.calls_api, *GRAD_SCALERS) | AskProject(scaler_wrapper_known))
        & AskProject(wrapper_built_in_loop))

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        for wrapper in wrappers_per_iteration(facts):
            if wrapper.loop is not None:
                message = (f"`{wrapper.key}` is a new `{wrapper.written}`, whose `__init__` builds a GradScaler, "
                           f"every iteration of the loop at line {facts.line_of(wrapper.loop.node)}")
            else:
                message = (f"`{wrapper.key}` is a new `{wrapper.written}` (its `__init__` builds a GradScaler) per "
                           f"call of `{wrapper.caller.rsplit('.', 1)[-1]}()`, called in a loop")
            where = "before the loop" if wrapper.loop is not None else "where the loop is, and pass it in"
            yield Finding(wrapper.node, message, help=f"Construct it once, {where}: its GradScaler's loss scale "
                                                      "never adapts")
        for found in per_iteration(facts):
            yield self._finding(facts, found)

    def _finding(self, facts: ModuleFacts, found: PerIteration) -> Finding:
        key, node, view = found.build.bound_to, found.build.node, facts.project
        if found.runs in (Runs.IN_LOOP, Runs.HANDED_IN_LOOP):
            message = (f"`{key}` is a new GradScaler every iteration of the loop at line "
                       f"{facts.line_of(found.loop.node)}")
            fix = self._hoist(facts, found)
            if found.runs is Runs.IN_LOOP:
                return Finding(node, f"{message}, so its loss scale never adapts", fix,
                               help=None if fix else "Construct it once, before the loop")
            return Finding(node, f"{message}, stepped by `{snippet(facts, found.stepper.node.func, 32)}()`", fix,
                           help="Construct it once, before the loop: a scaler built per iteration never adapts its "
                                "loss scale")
        if found.runs is Runs.UNCALLED:
            message = (f"`{key}` is built and stepped once per call of `{found.qualname}()`: it never lives longer "
                       f"than one step")
            return Finding(node, message, help=f"Build it once, where the training loop is, and pass it in: {ADAPTS}")
        site = found.chain[-1]
        elsewhere = f"{view.project.names.get(site.caller.module, '?')}.{site.caller.qualname}"  # module.function
        if found.runs is Runs.CALLERS_LOOP:
            caller = site.caller.qualname if site.caller.module == view.path else elsewhere
            message = (f"`{key}` is a new GradScaler per call of `{found.qualname}()`, which `{caller}()` calls in a "
                       f"loop (line {site.call.line})")
            through = "".join(f" via `{s.caller.qualname}()`" for s in found.chain[:-1])
            return Finding(node, message, help=f"Build it once where the loop is and pass it in{through}: {ADAPTS}")
        caller = site.caller.qualname.rsplit(".", 1)[-1] if site.caller.module == view.path else elsewhere
        message = (f"`{key}` is a new GradScaler per call of `{found.qualname.rsplit('.', 1)[-1]}()`, which "
                   f"`{caller}()` calls in a loop (line {site.call.line})")
        return Finding(node, message, help=f"Build it once where the loop is and pass it in: "
                                           f"`{snippet(facts, found.stepper.node.func, 24)}()` steps it, and its scale "
                                           "restarts at every call")

    @staticmethod
    def _hoist(facts: ModuleFacts, found: PerIteration) -> FixPlan | None:
        """Move the construction before its loop, when that cannot change what it builds (see Fix safety)."""
        statement, loop = hoisted_statement(found.build), found.loop
        if statement is None:
            return None
        safe = hoist_safety(facts, found)
        if safe is None:
            return None

        def rebuild():
            from amplint.rules.rewrite import MOVED, split_blank_lines  # libcst's code generator, when a fix is built

            # Blank lines above the loop go above the hoisted statement; comments stay with their statements.
            blank, comments = split_blank_lines(loop.node)
            hoisted = statement.with_changes(leading_lines=[*blank, *statement.leading_lines])
            return replace_nodes(facts.module, {
                statement: MOVED,
                loop.node: lambda updated: cst.FlattenSentinel([hoisted, updated.with_changes(leading_lines=comments)]),
            })

        return FixPlan("Construct the GradScaler once, before the loop", rebuild,
                       Applicability.SAFE if safe else Applicability.UNSAFE)
