"""AMP004 scaler-per-iteration."""

from __future__ import annotations

import os
import re
from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.vocabulary import Effect
from amplint.diagnostics import Applicability
from amplint.facts import Event, EventKind, Frame, FrameKind, ModuleFacts
from amplint.facts.names import GRAD_SCALERS, code_words, dotted_name
from amplint.facts.loops import frames_between
from amplint.facts.reach import handed_to_caller_of, hands_an_optimizer, loop_trains
from amplint.index.project import Target
from amplint.index.summary import Summary
from amplint.rules.across import called_per_iteration, stepping_callees
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.screen import Ask, AskProject
from amplint.rules.scopes import Changes, snippet

USES = (EventKind.SCALER_STEP, EventKind.SCALER_UPDATE)


def builder_called_per_iteration(view) -> bool:
    """The screen's question across modules: is a function of this file that builds a scaler called in a loop
    somewhere in the project, or (looping nowhere itself) called by no function of the project?"""
    from amplint.index.project import functions_doing

    return any(view.called_per_iteration(target) or (Effect.LOOP not in view.function(target).does
                                                      and not any(view.callers(target)))
               for target in functions_doing(view, Effect.BUILDS_SCALER))


def scaler_wrapper_known(view) -> bool:
    """The cheap question before `wrapper_built_in_loop`: does the project define a class whose `__init__` builds
    a GradScaler? (A file of its own that defines one builds a GradScaler itself.) Asked without building this
    file's record, which most files never need."""
    return bool(view.scaler_wrapper_names())


def wrapper_built_in_loop(view) -> bool:
    """The screen's question across modules: does this file build, in a loop, a user class whose `__init__`
    builds a GradScaler (`_wrappers_per_iteration`)? A file that calls no such class (under any name the project
    imports it as) in a loop does not, and its record is not built to say so."""
    names = view.scaler_wrapper_names()
    return (view.calls_in_loop(names) and _builds_wrapper_in_loop(view, names)) \
        or _builds_wrapper_in_loop(view, names, per_call=True)


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
    # `for`/`while`: a loop may build a user class that builds one (`_wrappers_per_iteration`)
    # `def`: a per-step function may build such a class outside any loop of its file (`_wrappers_per_iteration`)
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
        yield from self._wrappers_per_iteration(facts)
        for build in facts.events:
            if build.kind is not EventKind.SCALER_BUILD or build.bound_to is None:
                continue
            key = build.bound_to
            same_function = facts.events_in(build.frame.function())
            uses = [e for e in same_function if e.kind in USES and e.scaler == key]
            if not uses and not self._guarded_or_restored(facts, build, same_function) \
                    and not facts.scaler_disabled(key):
                handed = self._handed_per_iteration(facts, build) or _handed_per_call(facts, build)
                if handed is not None:
                    yield handed
                continue
            if not uses or self._guarded_or_restored(facts, build, same_function) \
                    or facts.scaler_disabled(key):
                continue
            loops = build.frame.loops_up_to_function()
            using_loops = [loop for loop in loops if any(use.frame.is_within(loop) for use in uses)]
            if using_loops:
                loop = using_loops[-1]  # outermost loop that both builds and uses it
                changes = Changes.of(loop.node, facts.imports.bindings)
                if self._fresh_run_per_iteration(facts, uses, loop) or _per_object(uses, changes) \
                        or _built_when(facts, build, loop, changes):
                    continue
                message = (f"`{key}` is a new GradScaler every iteration of the loop at line "
                           f"{facts.line_of(loop.node)}, so its loss scale never adapts")
                fix = self._hoist(facts, build, loop)
                yield Finding(build.node, message, fix, help=None if fix else "Construct it once, before the loop")
                continue
            if loops or "." in key:
                continue
            per_step = not any(use.frame.loops_up_to_function() for use in uses)
            caller_loop = facts.calling_loop(build.frame) if per_step else None
            if caller_loop is not None:
                function = build.frame.function()
                message = (f"`{key}` is a new GradScaler on every call of `{function.name}()` from the loop at "
                           f"line {facts.line_of(caller_loop.node)}, so its loss scale never adapts")
                yield Finding(build.node, message, help="Build the scaler once outside and pass it in")
                continue
            finding = self._called_per_iteration(facts, build, uses, per_step)
            if finding is not None:
                yield finding

    @staticmethod
    def _called_per_iteration(facts: ModuleFacts, build: Event, uses: list[Event], per_step: bool
                              ) -> Finding | None:
        """The function that builds and uses the scaler runs once per iteration of a loop in a caller (in this
        module or another, a few callers up: the project index's `called_per_iteration`): per epoch, per batch.
        A per-step function (it steps the scaler once per call, no loop of its own) with no caller in the project
        is reported too: whoever calls it (a framework, an RL loop) does so once per step. Silent when the
        function builds the optimizer it steps too (a fresh run per call: folds, trials), hands the scaler on
        (returns, stores or passes it: the index's `keeps_scaler`), when its callers in the project call it
        outside loops, and for a pytest test function (collected by its `test` name, run once)."""
        view = facts.project
        info = facts.function_info(build.frame)
        if view is None or info is None:
            return None
        from amplint.index.project import Target

        target = Target(view.path, info.qualname)
        summary = view.function(target)
        if summary is None or Effect.KEEPS_SCALER in summary.does or facts.scaler_handed_over(build.bound_to, build.frame.function()):
            return None
        stepped = {use.optimizer for use in uses if use.optimizer}
        if any(stepped.intersection(a.targets) for a in facts.assignments_in(build.frame.function())):
            return None  # a fresh optimizer each call: a new run, a new scaler is right
        chain = view.called_per_iteration(target)
        if chain is None:
            alone = per_step and not loop_trains(facts, build.frame) \
                and any(use.kind is EventKind.SCALER_STEP for use in uses)
            if not alone or any(view.callers(target)) or _pytest_test(info.qualname):
                return None
            message = (f"`{build.bound_to}` is built and stepped once per call of `{info.qualname}()`: it never "
                       f"lives longer than one step")
            return Finding(build.node, message, help="Build it once, where the training loop is, and pass it in: "
                                                     "its scale restarts at 65536 on every call and never adapts")
        site = chain[-1]
        caller = site.caller.qualname if site.caller.module == view.path else \
            f"{view.project.names.get(site.caller.module, '?')}.{site.caller.qualname}"
        message = (f"`{build.bound_to}` is a new GradScaler per call of `{info.qualname}()`, which `{caller}()` "
                   f"calls in a loop (line {site.call.line})")
        through = "".join(f" via `{s.caller.qualname}()`" for s in chain[:-1])
        return Finding(build.node, message, help=f"Build it once where the loop is and pass it in{through}: its scale "
                                                 "restarts at 65536 on every call and never adapts")

    def _handed_per_iteration(self, facts: ModuleFacts, build: Event) -> Finding | None:
        """A scaler built in a loop and handed, in that loop, to a callee that steps or updates it
        (`apply_update(scaler, loss, optimizer)`, `self.optimize_fn(loss, scaler=scaler)`): a new scaler per
        iteration all the same. Reported when the callee (through the project index, a few calls deep) steps or
        updates a scaler and either runs no loop of its own (a per-step function) or is handed an optimizer the
        loop does not build; silent when the loop builds an optimizer (a fresh run per iteration: folds,
        trials)."""
        key = build.bound_to
        loops = build.frame.loops_up_to_function()
        if not loops or "." in key:
            return None
        loop = loops[-1]
        function = build.frame.function()
        if any(a.frame.is_within(loop) and len(a.targets) == 1 and facts.optimizer_constructed(a.targets[0], a.frame)
               for a in facts.assignments_in(function)):
            return None
        view = facts.project
        info = facts.function_info(build.frame)
        for call in facts.calls:
            if call.index <= build.index or call.frame.function() is not function or not call.frame.is_within(loop) \
                    or call.dotted is None or (call.qualified or "").startswith("torch."):
                continue
            passed = [dotted_name(arg.value) for arg in call.node.args]
            if key not in passed:
                continue
            target = view.resolve(info.qualname if info else None, call.dotted)
            reached = view.reaches(target, (Effect.SCALER_STEP, Effect.SCALER_UPDATE)) if target is not None else None
            if reached is None:
                continue
            chain = reached[0]
            per_step = not any(Effect.LOOP in (view.function(t).does if view.function(t) else ()) for t in chain)
            optimizer = hands_an_optimizer(facts, call, key, loop)
            if not per_step and not optimizer:
                continue
            callee = snippet(facts, call.node.func, 32)
            message = (f"`{key}` is a new GradScaler every iteration of the loop at line {facts.line_of(loop.node)}, "
                       f"stepped by `{callee}()`")
            fix = self._hoist(facts, build, loop)
            return Finding(build.node, message, fix, help="Construct it once, before the loop: a scaler built per "
                                                          "iteration never adapts its loss scale")
        return None

    @staticmethod
    def _wrappers_per_iteration(facts: ModuleFacts) -> Iterator[Finding]:
        """A user class whose `__init__` builds a GradScaler (`NativeScaler`, an AMP helper), built in a loop and
        used there: called or a method called (its `__call__`/method steps or updates the scaler, through the
        project index), or handed to a function that calls it. A new scaler every iteration all the same."""
        view = facts.project
        for assignment in facts.assignments:
            value = assignment.value
            if len(assignment.targets) != 1 or "." in assignment.targets[0] or not isinstance(value, cst.Call):
                continue
            written = dotted_name(value.func)
            loops = assignment.frame.loops_up_to_function()
            if written is None or written.startswith("torch."):
                continue
            located = view.class_at(view.path, written)
            init = view.function(Target(located[0], f"{located[1]}.__init__")) if located else None
            if init is None or Effect.BUILDS_SCALER not in init.does:
                continue
            info = facts.function_info(assignment.frame)
            caller = info.qualname if info else None
            # Built in a loop, or once per call of a function a caller runs per iteration (a per-step function).
            per_call = called_per_iteration(view, Target(view.path, caller)) if not loops and caller else None
            if not loops and not per_call:
                continue
            key, function = assignment.targets[0], assignment.frame.function()
            loop = loops[-1] if loops else function
            if any(frame.kind is FrameKind.IF and key in code_words(frame.node.test)
                   for frame in frames_between(assignment.frame, loop)):
                continue  # built lazily (`if wrapper is None:`)
            if any(a.frame.is_within(loop) and len(a.targets) == 1
                   and facts.optimizer_constructed(a.targets[0], a.frame) for a in facts.assignments_in(function)):
                continue  # a fresh run per iteration
            for call in facts.calls:
                if call.index <= assignment.index or call.frame.function() is not function \
                        or not call.frame.is_within(loop) or call.dotted is None:
                    continue
                if call.dotted == key or call.dotted.startswith(key + "."):
                    if call.method == vocab.LOAD_STATE_DICT:
                        break  # restored: a resume, not a fresh scaler
                    target = view.resolve(caller, call.dotted)
                    reached = view.reaches(target, (Effect.SCALER_STEP, Effect.SCALER_UPDATE)) if target is not None else None
                    # a method that loops itself (`trainer.fit()`) is a whole run: a fresh one per iteration
                    used = reached is not None and not _loops(view, reached[0])
                else:
                    reached = view.reaches(Target(located[0], f"{located[1]}.__call__"),
                                           (Effect.SCALER_STEP, Effect.SCALER_UPDATE)) if located is not None else None
                    handed = reached is not None and not _loops(view, reached[0]) \
                        and handed_to_caller_of(facts, call, key)
                    # handed to a function that calls it: once per step there; per step of a run when the loop
                    # hands it the optimizer the loop does not build (per epoch), or the function has no loop
                    target = view.resolve(caller, call.dotted) if handed else None
                    used = handed and target is not None and (not _loops(view, [target])
                                                              or hands_an_optimizer(facts, call, key, loop))
                if used:
                    if loops:
                        message = (f"`{key}` is a new `{written}`, whose `__init__` builds a GradScaler, every "
                                   f"iteration of the loop at line {facts.line_of(loop.node)}")
                    else:
                        message = (f"`{key}` is a new `{written}` (its `__init__` builds a GradScaler) per call of "
                                   f"`{caller.rsplit('.', 1)[-1]}()`, called in a loop")
                    where = "before the loop" if loops else "where the loop is, and pass it in"
                    yield Finding(value, message, help=f"Construct it once, {where}: its GradScaler's loss "
                                                       "scale never adapts")
                    break

    @staticmethod
    def _guarded_or_restored(facts: ModuleFacts, build: Event, events: list[Event]) -> bool:
        """Lazy `if scaler is None:` construction (or `scaler = scaler or GradScaler()`, a value reading the
        scaler's own earlier one), or a rebuild followed by `load_state_dict`."""
        statement = build.call.statement
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 \
                and isinstance(statement.body[0], (cst.Assign, cst.AnnAssign)) \
                and statement.body[0].value is not build.node and _reads(statement.body[0].value, build.bound_to):
            return True
        for frame in build.frame.ancestors():
            if frame.kind is FrameKind.FUNCTION:
                break
            if frame.kind is FrameKind.IF:
                test = " ".join(code_words(frame.node.test))  # the test's code: a comment says nothing
                if build.bound_to in test and (re.search(r"\bNone\b|hasattr", test) or _negates(frame.node.test)):
                    return True
        return any(e.kind is EventKind.SCALER_LOAD and e.scaler == build.bound_to and e.index > build.index
                   for e in events)

    @staticmethod
    def _fresh_run_per_iteration(facts: ModuleFacts, uses: list[Event], loop: Frame) -> bool:
        """A loop over independent runs (k-fold, sweeps) builds the optimizer afresh too: a new scaler is right."""
        stepped = {use.optimizer for use in uses if use.optimizer}
        return any(a.frame.is_within(loop) and stepped.intersection(a.targets) for a in facts.assignments)

    @staticmethod
    def _hoist(facts: ModuleFacts, build: Event, loop: Frame) -> FixPlan | None:
        """Move the construction before `loop`, when that cannot change what it builds (see Fix safety)."""
        statement = build.call.statement
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1 \
                or not isinstance(statement.body[0], cst.Assign) or statement.body[0].value is not build.node:
            return None
        changes = Changes.of(loop.node, facts.imports.bindings, skip=statement)
        assign = statement.body[0]
        stored = {name for target in assign.targets for name in _names(target.target)}  # `scaler`, `self`
        read = set(_names(build.node))
        if (read | stored) & changes.bound or read & changes.mutated or build.bound_to in changes.stored:
            return None
        if read & _declared_global(facts.module):
            return None  # a function of the module may rebind it (`global init` in `bump()`, called in the loop)
        modules = {name for name in read
                   if facts.imports.bindings.get(name, vocab.TORCH).split(".")[0] != vocab.TORCH}
        if modules and any(call.frame.is_within(loop) and (call.dotted or "").split(".")[0] in modules
                           for call in facts.calls):
            return None  # `cfg.bump()` in the loop may rebind `cfg.init`, which the construction reads
        # Between the loop and the statement only blocks that always run their body (`with`, `try`, inner loops:
        # the construction ran at least once before any use); under an `if` it may never have run.
        around = build.call.statements[build.call.statements.index(loop.node) + 1:-1]
        if around and _alone_in_block(around[-1], statement):
            return None  # the block would be left empty
        conditional = any(not isinstance(node, (cst.With, cst.For, cst.While, cst.Try)) for node in around)
        # A call among the arguments would run once instead of at every iteration.
        calls = _has_call(build.node.args)
        # One scaler for what every iteration steps: the same object only when no name it is read through may
        # be rebound or changed in the loop (`self.optimizer` after `self.setup(k)` may be another model's).
        # A plain name is another object only when rebound; an attribute's owner may be changed by a method call.
        steady = True
        for use in build_uses(facts, build):
            for arg in use.node.args:
                key = dotted_name(arg.value)
                names = set(_names(arg.value))
                if names & changes.bound or key is None or ("." in key and (names & changes.mutated
                                                                            or key in changes.stored)):
                    steady = False
        safe = not conditional and not calls and steady

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


def _handed_per_call(facts: ModuleFacts, build: Event) -> Finding | None:
    """A scaler built once per call of a function (not in its loop) and handed only to project functions that step
    it (`self.optimize_fn(scaler, loss)` per batch), never returned, stored or handed elsewhere, when that function
    runs once per iteration of a caller's loop (per epoch: the project index's `called_per_iteration`). Silent
    when the function builds an optimizer (a fresh run per call). No fix."""
    key, function = build.bound_to, build.frame.function()
    if "." in key or build.frame.loops_up_to_function() or function is None or _returned(function.node, key):
        return None
    if any(len(a.targets) == 1 and facts.optimizer_constructed(a.targets[0], a.frame)
           for a in facts.assignments_in(function)):
        return None
    callees = stepping_callees(facts, key, function)
    info = facts.function_info(build.frame)
    if not callees or info is None or _pytest_test(info.qualname):
        return None
    view = facts.project
    chain = called_per_iteration(view, Target(view.path, info.qualname))
    if not chain:
        return None
    site = chain[-1]
    caller = site.caller.qualname if site.caller.module == view.path else \
        f"{os.path.basename(site.caller.module)}:{site.caller.qualname}"
    message = (f"`{key}` is a new GradScaler per call of `{info.qualname.rsplit('.', 1)[-1]}()`, which "
               f"`{caller.rsplit('.', 1)[-1]}()` calls in a loop (line {site.call.line})")
    return Finding(build.node, message, help=f"Build it once where the loop is and pass it in: "
                                             f"`{snippet(facts, callees[0].node.func, 24)}()` steps it, and its scale "
                                             "restarts at every call")


def _returned(function: cst.CSTNode, key: str) -> bool:
    """Does the function return or yield something reading `key`?"""
    found = []

    class Returns(cst.CSTVisitor):
        def visit_Return(self, node: cst.Return) -> None:
            found.append(node.value)

        def visit_Yield(self, node: cst.Yield) -> None:
            found.append(node.value)

    function.visit(Returns())
    return any(value is not None and key in code_words(value) for value in found)


def build_uses(facts: ModuleFacts, build: Event) -> list[Event]:
    """The `step`/`update` events of the scaler a build binds, in its function."""
    return [e for e in facts.events_in(build.frame.function()) if e.kind in USES and e.scaler == build.bound_to]


def _per_object(uses: list[Event], changes: Changes) -> bool:
    """Is every optimizer the scaler steps read through a name the loop binds (`opts[k]` in `for k in models`,
    `optim` in `for member, optim in zip(members, optims)`)? Then each iteration may train another model with
    its own optimizer, and a scaler per iteration is one per model: its state belongs to that model's run."""
    steps = [use for use in uses if use.kind is EventKind.SCALER_STEP]
    return bool(steps) and all(use.node.args and set(_names(use.node.args[0].value)) & changes.bound
                               for use in steps)


def _built_when(facts: ModuleFacts, build: Event, loop: Frame, changes: Changes) -> bool:
    """Is the construction under an `if` in the loop whose test may differ between iterations (it reads a name
    the loop binds or changes, or calls something: `if i == 0:`)? Then it may run once, not per iteration."""
    for frame in frames_between(build.frame, loop):
        if frame.kind is FrameKind.IF:
            test = frame.node.test
            if _has_call([test]) or set(_names(test)) & (changes.bound | changes.mutated):
                return True
    return False


def _declared_global(module: cst.Module) -> set[str]:
    """The names some function of the module declares `global` or `nonlocal`: any call may rebind them."""
    found: set[str] = set()

    class Declared(cst.CSTVisitor):
        def visit_Global(self, node: cst.Global) -> None:
            found.update(item.name.value for item in node.names)

        def visit_Nonlocal(self, node: cst.Nonlocal) -> None:
            found.update(item.name.value for item in node.names)

    module.visit(Declared())
    return found


def _reads(value: cst.CSTNode, key: str | None) -> bool:
    """Does the expression read `key` (a name or a dotted name: `scaler`, `self.scaler`)?"""
    found: list[bool] = []

    class Reads(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            if node.value == key:
                found.append(True)

        def visit_Attribute(self, node: cst.Attribute) -> None:
            if dotted_name(node) == key:
                found.append(True)

    if key:
        value.visit(Reads())
    return bool(found)


def _builds_wrapper_in_loop(view, names, per_call: bool = False) -> bool:
    """The screen's question for `_wrappers_per_iteration`: does a loop of the view's file construct a class
    whose `__init__` builds a GradScaler (written as one of `names`, `ProjectIndex.scaler_wrapper_names`)? With
    `per_call`: does a function of the file construct one outside its loops, the function called per iteration?"""
    if per_call and (not names or view.summary is not None and not view.summary.has_token(*names, kind="call")):
        return False
    record = view.record(view.path)
    if record is None:
        return False
    calls = [(qualname, call) for qualname, summary in record.functions.items() for call in summary.calls]
    if not per_call:
        calls += [(None, call) for call in record.module_calls]
    for qualname, call in calls:
        if call.callee.rsplit(".", 1)[-1] not in names or call.in_loop is per_call:
            continue
        if per_call and not called_per_iteration(view, Target(view.path, qualname)):
            continue
        located = view.class_at(view.path, call.callee)
        init = view.function(Target(located[0], f"{located[1]}.__init__")) if located else None
        if init is not None and Effect.BUILDS_SCALER in init.does:
            return True
    return False


def _loops(view, chain) -> bool:
    """Does a function of the chain (project index targets) run a loop?"""
    return any(Effect.LOOP in (view.function(target).does if view.function(target) else ()) for target in chain)


def _pytest_test(qualname: str) -> bool:
    """A function pytest collects (`test_*`, or a `Test*` class's `test_*` method): run once per test."""
    parts = qualname.split(".")
    return parts[-1].startswith("test") and (len(parts) == 1 or parts[0].startswith("Test"))


def _names(node: cst.CSTNode) -> list[str]:
    """The names an expression reads (the base of each attribute chain, every name in calls and subscripts)."""
    found: list[str] = []

    class Names(cst.CSTVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            found.append(name.value)

        def visit_Attribute(self, attribute: cst.Attribute) -> bool:
            attribute.value.visit(self)
            return False

        def visit_Arg(self, arg: cst.Arg) -> bool:
            arg.value.visit(self)  # not the keyword's name
            return False

    node.visit(Names())
    return found


def _alone_in_block(compound: cst.CSTNode, statement: cst.CSTNode) -> bool:
    """Is `statement` the only statement of one of `compound`'s blocks (a body, an else, a handler)?"""
    blocks = [getattr(compound, "body", None), getattr(getattr(compound, "orelse", None), "body", None),
              *(getattr(h, "body", None) for h in getattr(compound, "handlers", ())),
              getattr(getattr(compound, "finalbody", None), "body", None)]
    return any(isinstance(b, cst.IndentedBlock) and len(b.body) == 1 and b.body[0] is statement for b in blocks)


def _has_call(args) -> bool:
    found: list[cst.Call] = []

    class Calls(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            found.append(node)

    for arg in args:
        arg.visit(Calls())
    return bool(found)


def _negates(test: cst.BaseExpression) -> bool:
    """Does a test hold `not`, `is not` or `not in`?"""
    pending = [test]
    while pending:
        node = pending.pop()
        if isinstance(node, (cst.Not, cst.IsNot, cst.NotIn)):
            return True
        pending.extend(node.children)
    return False
