"""When a GradScaler construction runs, against how long its scaler is used. For each `GradScaler(...)` bound to a
name, not built lazily (`if scaler is None:`, `scaler = scaler or GradScaler()`), restored (`load_state_dict`) or
disabled (`enabled=False`): whether it runs once per iteration of a loop whose iterations use the scaler
(`per_iteration`, how in `Runs`): in the loop whose iterations step or update it, in a loop that hands it to a
project function stepping it, or once per call of a function that a loop calls (of this module, of another module
or a few callers up, through the project index) or that no project code calls while it steps the scaler once per
call. The same for a user class whose `__init__` builds a GradScaler (`NativeScaler`), constructed per iteration
and used there (`wrappers_per_iteration`), and the screen's questions of both across the project. For a
construction in a loop: whether the loop is a fresh run or one model per iteration, whether a test that may change
between iterations guards it, and whether it moves before the loop building the same scaler (`hoist_safety`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.vocabulary import Effect
from amplint.facts.changes import Changes
from amplint.facts.loops import frames_between
from amplint.facts.model import Call, Event, Frame, FrameKind
from amplint.facts.module import ModuleFacts
from amplint.facts.names import code_words, dotted_name
from amplint.facts.reach import handed_to_caller_of, hands_an_optimizer, loop_trains
from amplint.index.project import CallerSite, Target, functions_doing

USES = (Effect.SCALER_STEP, Effect.SCALER_UPDATE)


class Runs(Enum):
    """How a construction runs once per iteration of a loop using its scaler."""

    IN_LOOP = "in the loop whose iterations step or update it"
    HANDED_IN_LOOP = "in a loop handing it to a project function that steps or updates it"
    CALLERS_LOOP = "once per call of its function from a loop a few callers up (the project index)"
    UNCALLED = "once per call of a per-step function no project code calls: once per step"
    HANDED_PER_CALL = "once per call of a function run per iteration, handed to project functions stepping it"


@dataclass
class PerIteration:
    """A GradScaler construction (`build`) that runs once per iteration of a loop using its scaler (`runs`)."""

    build: Event
    runs: Runs
    uses: list[Event] = field(default_factory=list)  # the scaler's step/update events in its function
    loop: Frame | None = None  # IN_LOOP, HANDED_IN_LOOP: the loop building it
    chain: list[CallerSite] | None = None  # CALLERS_LOOP, HANDED_PER_CALL: the calls running it per iteration
    stepper: Call | None = None  # HANDED_IN_LOOP, HANDED_PER_CALL: a call handing it to a function stepping it
    qualname: str | None = None  # CALLERS_LOOP, UNCALLED, HANDED_PER_CALL: the function building it


@dataclass
class WrapperPerIteration:
    """A user class whose `__init__` builds a GradScaler, constructed (`node`, bound to `key`, the class as
    `written`) in `loop`, or (`loop` None) once per call of `caller`, which a caller runs per iteration."""

    node: cst.Call
    key: str
    written: str
    loop: Frame | None
    caller: str | None


def per_iteration(facts: ModuleFacts) -> Iterator[PerIteration]:
    """The GradScaler constructions of the module bound to a name that run once per iteration of a loop using the
    scaler. One built in the loop that uses it is left out when the loop builds the optimizer it steps too (a fresh
    run per iteration: folds, sweeps), when the loop may train another model each iteration (`one_per_model`), or
    builds it only when a test that may change holds (`built_when`): it may run once per model, or once."""
    for build in facts.events:
        if build.kind != Effect.BUILDS_SCALER or build.bound_to is None:
            continue
        same_function = facts.events_in(build.frame.function())
        uses = [e for e in same_function if e.kind in USES and e.scaler == build.bound_to]
        if _guarded_or_restored(build, same_function) or facts.scaler_disabled(build.bound_to):
            continue
        found = _when(facts, build, uses)
        if found is not None:
            yield found


def _when(facts: ModuleFacts, build: Event, uses: list[Event]) -> PerIteration | None:
    if not uses:
        return _handed_in_loop(facts, build) or _handed_per_call(facts, build)
    loops = build.frame.loops_up_to_function()
    using_loops = [loop for loop in loops if any(use.frame.is_within(loop) for use in uses)]
    if using_loops:
        loop = using_loops[-1]  # outermost loop that both builds and uses it
        if _fresh_run_per_iteration(facts, uses, loop):
            return None
        changes = Changes.of(loop.node, facts.imports.bindings)
        if one_per_model(uses, changes) or built_when(build, loop, changes):
            return None  # a scaler per model's run, or built when a test that may change holds: maybe once
        return PerIteration(build, Runs.IN_LOOP, uses, loop=loop)
    if loops or "." in build.bound_to:
        return None
    per_step = not any(use.frame.loops_up_to_function() for use in uses)
    return _called_per_iteration(facts, build, uses, per_step)


def _called_per_iteration(facts: ModuleFacts, build: Event, uses: list[Event], per_step: bool) -> PerIteration | None:
    """The function that builds and uses the scaler runs once per iteration of a loop in a caller (in this
    module or another, a few callers up: the project index's `called_per_iteration`): per epoch, per batch.
    A per-step function (it steps the scaler once per call, no loop of its own) with no caller in the project
    counts too: whoever calls it (a framework, an RL loop) does so once per step. Not when the function builds
    the optimizer it steps too (a fresh run per call: folds, trials), hands the scaler on (returns, stores or
    passes it: the index's `keeps_scaler`), when its callers in the project call it outside loops, nor for a
    pytest test function (collected by its `test` name, run once)."""
    view = facts.project
    info = facts.function_info(build.frame)
    if view is None or info is None:
        return None
    target = Target(view.path, info.qualname)
    summary = view.function(target)
    if summary is None or Effect.KEEPS_SCALER in summary.does \
            or facts.scaler_handed_over(build.bound_to, build.frame.function()):
        return None
    stepped = {use.optimizer for use in uses if use.optimizer}
    if any(stepped.intersection(a.targets) for a in facts.assignments_in(build.frame.function())):
        return None  # a fresh optimizer each call: a new run, a new scaler is right
    chain = called_per_iteration(view, target)
    if chain is None:
        alone = per_step and not loop_trains(facts, build.frame) \
            and any(use.kind == Effect.SCALER_STEP for use in uses)
        if not alone or any(view.callers(target)) or _pytest_test(info.qualname):
            return None
        return PerIteration(build, Runs.UNCALLED, uses, qualname=info.qualname)
    return PerIteration(build, Runs.CALLERS_LOOP, uses, chain=chain, qualname=info.qualname)


def _handed_in_loop(facts: ModuleFacts, build: Event) -> PerIteration | None:
    """A scaler built in a loop and handed, in that loop, to a callee that steps or updates it
    (`apply_update(scaler, loss, optimizer)`, `self.optimize_fn(loss, scaler=scaler)`): a new scaler per
    iteration all the same. When the callee (through the project index, a few calls deep) steps or updates a
    scaler and either runs no loop of its own (a per-step function) or is handed an optimizer the loop does not
    build; not when the loop builds an optimizer (a fresh run per iteration: folds, trials)."""
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
        reached = view.reaches(target, USES) if target is not None else None
        if reached is None:
            continue
        per_step = not _loops(view, reached[0])
        if not hands_an_optimizer(facts, call, key, loop) and not per_step:
            continue
        return PerIteration(build, Runs.HANDED_IN_LOOP, loop=loop, stepper=call)
    return None


def _handed_per_call(facts: ModuleFacts, build: Event) -> PerIteration | None:
    """A scaler built once per call of a function (not in its loop) and handed only to project functions that step
    it (`self.optimize_fn(scaler, loss)` per batch), never returned, stored or handed elsewhere, when that function
    runs once per iteration of a caller's loop (per epoch: `called_per_iteration`). Not when the function builds
    an optimizer (a fresh run per call)."""
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
    return PerIteration(build, Runs.HANDED_PER_CALL, chain=chain, stepper=callees[0], qualname=info.qualname)


def stepping_callees(facts: ModuleFacts, key: str, function) -> list[Call] | None:
    """The calls of `function`'s code that hand the local object `key` (a scaler) to a project function stepping
    or updating a scaler (itself or a few calls deep, the index's `scaler_step`/`scaler_update`); None when the
    object is handed anywhere else too (a call the index does not show stepping it, an assignment to another
    name: it may be kept), or when none steps it."""
    view = facts.project
    info = facts.function_info(function) if function is not None else None
    found = []
    for call in facts.calls:
        if call.frame.function() is not function or call.receiver == key:
            continue
        if not any(dotted_name(arg.value) == key for arg in call.node.args):
            continue
        target = view.resolve(info.qualname if info else None, call.dotted) if call.dotted else None
        if target is None or view.reaches(target, (Effect.SCALER_STEP, Effect.SCALER_UPDATE)) is None:
            return None
        found.append(call)
    if any(dotted_name(a.value) == key for a in facts.assignments_in(function)):
        return None
    return found or None


def called_per_iteration(view, target) -> list | None:
    """`ModuleView.called_per_iteration`, else a call in a loop of the view's own file or of a module importing it
    (files the index did not take up front, read on demand): the chain of call sites through which `target` runs
    once per iteration of a loop, or None."""
    chain = view.called_per_iteration(target)
    if chain:
        return chain
    last = target.qualname.rsplit(".", 1)[-1]
    if target.module == view.path:
        view.asked_importers.add(view.path)
        paths = [view.path, *view.project.importers(view.path)]  # the modules importing it: read on demand
    else:
        paths = [view.path]
    for path in paths:
        record = view.record(path)
        if record is None:
            continue
        sites = [(qualname, call) for qualname, summary in record.functions.items() for call in summary.calls]
        for qualname, call in sites + [(None, call) for call in record.module_calls]:
            if call.in_loop and call.callee.rsplit(".", 1)[-1] == last \
                    and view.resolve(qualname, call.callee, path) == target:
                return [CallerSite(Target(path, qualname or "<module>"), call)]
    return None


# a construction in a loop ---------------------------------------------------------------------------------------
def _guarded_or_restored(build: Event, events: list[Event]) -> bool:
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
    return any(e.kind == Effect.SCALER_LOAD and e.scaler == build.bound_to and e.index > build.index
               for e in events)


def _fresh_run_per_iteration(facts: ModuleFacts, uses: list[Event], loop: Frame) -> bool:
    """A loop over independent runs (k-fold, sweeps) builds the optimizer afresh too: a new scaler is right."""
    stepped = {use.optimizer for use in uses if use.optimizer}
    return any(a.frame.is_within(loop) and stepped.intersection(a.targets) for a in facts.assignments)


def one_per_model(uses: list[Event], changes) -> bool:
    """Is every optimizer the scaler steps read through a name the loop binds (`opts[k]` in `for k in models`,
    `optim` in `for member, optim in zip(members, optims)`)? Then each iteration may train another model with
    its own optimizer, and a scaler per iteration is one per model: its state belongs to that model's run.
    `changes`: what the loop may rebind (`bound`) or change in place (`mutated`)."""
    steps = [use for use in uses if use.kind == Effect.SCALER_STEP]
    return bool(steps) and all(use.node.args and set(_names(use.node.args[0].value)) & changes.bound
                               for use in steps)


def built_when(build: Event, loop: Frame, changes) -> bool:
    """Is the construction under an `if` in the loop whose test may differ between iterations (it reads a name
    the loop binds or changes, or calls something: `if i == 0:`)? Then it may run once, not per iteration."""
    for frame in frames_between(build.frame, loop):
        if frame.kind is FrameKind.IF:
            test = frame.node.test
            if _has_call([test]) or set(_names(test)) & (changes.bound | changes.mutated):
                return True
    return False


def hoisted_statement(build: Event) -> cst.SimpleStatementLine | None:
    """The statement that moves with the construction: `x = GradScaler(...)` alone on its line; else None."""
    statement = build.call.statement
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1 \
            or not isinstance(statement.body[0], cst.Assign) or statement.body[0].value is not build.node:
        return None
    return statement


def hoist_safety(facts: ModuleFacts, found: PerIteration) -> bool | None:
    """Does the construction (its `hoisted_statement`) build the same scaler before its loop? None when it may
    not: a name it reads or assigns may be rebound or changed in the loop, declared `global`/`nonlocal` by a
    function of the module, or be a module's attribute while the loop calls that module; or its block would be
    left empty. False when it may have run in no iteration (under an `if`), its arguments call something, or an
    optimizer it steps is read through a name the loop may rebind or change (one scaler would serve optimizers
    that may differ). What the loop may change is read with the statement itself left out."""
    build, loop = found.build, found.loop
    statement = build.call.statement
    changes = Changes.of(loop.node, facts.imports.bindings, skip=hoisted_statement(build))
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
    for use in found.uses:
        for arg in use.node.args:
            key = dotted_name(arg.value)
            names = set(_names(arg.value))
            if names & changes.bound or key is None or ("." in key and (names & changes.mutated
                                                                        or key in changes.stored)):
                steady = False
    return not conditional and not calls and steady


# user classes building a GradScaler -----------------------------------------------------------------------------
def wrappers_per_iteration(facts: ModuleFacts) -> Iterator[WrapperPerIteration]:
    """A user class whose `__init__` builds a GradScaler (`NativeScaler`, an AMP helper), built in a loop (or once
    per call of a function a caller runs per iteration) and used there: called or a method called (its
    `__call__`/method steps or updates the scaler, through the project index), or handed to a function that calls
    it. A new scaler every iteration all the same. Not when built lazily (`if wrapper is None:`), restored
    (`load_state_dict`), or when the loop builds an optimizer (a fresh run per iteration)."""
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
                reached = view.reaches(target, USES) if target is not None else None
                # a method that loops itself (`trainer.fit()`) is a whole run: a fresh one per iteration
                used = reached is not None and not _loops(view, reached[0])
            else:
                reached = view.reaches(Target(located[0], f"{located[1]}.__call__"), USES) \
                    if located is not None else None
                handed = reached is not None and not _loops(view, reached[0]) \
                    and handed_to_caller_of(facts, call, key)
                # handed to a function that calls it: once per step there; per step of a run when the loop
                # hands it the optimizer the loop does not build (per epoch), or the function has no loop
                target = view.resolve(caller, call.dotted) if handed else None
                used = handed and target is not None and (not _loops(view, [target])
                                                          or hands_an_optimizer(facts, call, key, loop))
            if used:
                yield WrapperPerIteration(value, key, written, loops[-1] if loops else None, caller)
                break


# the screen's questions across modules --------------------------------------------------------------------------
def builder_called_per_iteration(view) -> bool:
    """Is a function of this file that builds a scaler called in a loop somewhere in the project, or (looping
    nowhere itself) called by no function of the project?"""
    return any(called_per_iteration(view, target) or (Effect.LOOP not in view.function(target).does
                                                      and not any(view.callers(target)))
               for target in functions_doing(view, Effect.BUILDS_SCALER))


def scaler_wrapper_known(view) -> bool:
    """The cheap question before `wrapper_built_in_loop`: does the project define a class whose `__init__` builds
    a GradScaler? (A file of its own that defines one builds a GradScaler itself.) Asked without building this
    file's record, which most files never need."""
    return bool(view.scaler_wrapper_names())


def wrapper_built_in_loop(view) -> bool:
    """Does this file build, in a loop, a user class whose `__init__` builds a GradScaler
    (`wrappers_per_iteration`)? A file that calls no such class (under any name the project imports it as) in a
    loop does not, and its record is not built to say so."""
    names = view.scaler_wrapper_names()
    return (view.calls_in_loop(names) and _builds_wrapper_in_loop(view, names)) \
        or _builds_wrapper_in_loop(view, names, per_call=True)


def _builds_wrapper_in_loop(view, names, per_call: bool = False) -> bool:
    """Does a loop of the view's file construct a class whose `__init__` builds a GradScaler (written as one of
    `names`, `ProjectIndex.scaler_wrapper_names`)? With `per_call`: does a function of the file construct one
    outside its loops, the function called per iteration?"""
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


# what the code reads ----------------------------------------------------------------------------------------------
def _loops(view, chain) -> bool:
    """Does a function of the chain (project index targets) run a loop?"""
    return any(Effect.LOOP in (view.function(target).does if view.function(target) else ()) for target in chain)


def _pytest_test(qualname: str) -> bool:
    """A function pytest collects (`test_*`, or a `Test*` class's `test_*` method): run once per test."""
    parts = qualname.split(".")
    return parts[-1].startswith("test") and (len(parts) == 1 or parts[0].startswith("Test"))


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
    """Does one of the nodes hold a call?"""
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
