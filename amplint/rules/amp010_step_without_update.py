"""AMP010 step-without-update."""

from __future__ import annotations

from typing import Iterator

from amplint.lazy import libcst as cst
from amplint.lazy import visitor_class

from amplint import vocabulary as vocab
from amplint.facts import Event, Frame, FrameKind, ModuleFacts
from amplint.facts.collect import target_names
from amplint.facts.module import scaler_enabled
from amplint.facts.walk import walk
from amplint.index.summary import Summary
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.screen import Ask
from amplint.rules.scopes import MESSAGE_SNIPPET, snippet
from amplint.vocabulary import Effect


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
        steps_by_scaler: dict[tuple[str, int], list[Event]] = {}
        for event in facts.events:
            if event.kind == Effect.SCALER_STEP and event.scaler:
                key = (event.scaler, id(event.frame.function()))
                steps_by_scaler.setdefault(key, []).append(event)
        updates = _update_calls(facts)
        for (scaler, _), steps in steps_by_scaler.items():
            last = steps[-1]
            function = last.frame.function()
            local_updates, updated_elsewhere = self._updates(facts, updates, scaler, function)
            if updated_elsewhere or scaler_enabled(facts, scaler, last.frame) is False \
                    or _updated_under_another_spelling(facts, updates, scaler):
                continue
            if facts.no_grad_opener(last.frame) is not None:
                continue  # AMP005's business
            if facts.scaler_handed_over(scaler, function):
                continue
            iteration = self._iteration_loop(last)
            if local_updates:
                finding = self._update_after_loop(facts, scaler, steps, iteration, local_updates)
                if finding is not None:
                    yield finding
                continue
            caller = None
            where = None
            if iteration is None:
                caller = facts.calling_loop(last.frame)
                if caller is None:
                    where = _called_in_a_loop_elsewhere(facts, last.frame, scaler)
                    if where is None:
                        continue
            elif self._unknown_methods(facts, scaler, iteration):
                continue
            if where is None:
                where = (f"every iteration of the loop at line {facts.line_of(iteration.node)}"
                         if iteration is not None
                         else f"in `{function.name}()` (called in the loop at line {facts.line_of(caller.node)})")
            message = f"`{snippet(facts, last.node, MESSAGE_SNIPPET)}` runs {where} with no `{scaler}.update()`"
            fix = self._fix(facts, scaler, steps, iteration)
            yield Finding(last.node, message, fix, help=None if fix else (
                f"Call `{scaler}.update()` after the last `{scaler}.step(...)` of each iteration"))

    @staticmethod
    def _updates(facts: ModuleFacts, updates: dict, scaler: str, function: Frame | None) -> tuple[list, bool]:
        """(`.update()` calls on this scaler in the steps' own function, whether any other function of the
        module calls `.update()` on a scaler of that name: a helper that may run every iteration)."""
        local = updates.get((scaler, id(function)), [])
        return local, facts.updated_elsewhere(scaler, function)

    def _update_after_loop(self, facts: ModuleFacts, scaler: str, steps: list[Event], iteration: Frame | None,
                           updates: list) -> Finding | None:
        """A step every iteration of a loop whose only `update()` comes outside it (after the loop): the second
        iteration's step raises. Only for a step on one plain optimizer name not rebound in the loop, in a loop
        that no `break`/`return` can end after one pass."""
        if iteration is None or any(update.frame.is_within(iteration) for update in updates):
            return None
        last = steps[-1]
        if last.optimizer is None or any(last.optimizer in a.targets and a.frame.is_within(iteration)
                                         for a in facts.assignments):
            return None
        if isinstance(iteration.node, cst.For) and last.optimizer in target_names(iteration.node.target):
            return None
        if self._unknown_methods(facts, scaler, iteration) or _can_leave_early(iteration.node):
            return None
        if not all(step.frame is last.frame for step in steps if step.frame.is_within(iteration)):
            return None  # steps on several paths: each pass may step once
        if last.frame.kind is not FrameKind.LOOP or last.frame is not iteration:
            return None  # a conditional step (accumulation boundary) may run once per loop
        update = updates[0]
        message = (f"`{snippet(facts, last.node, MESSAGE_SNIPPET)}` runs every iteration of the loop at line "
                   f"{facts.line_of(iteration.node)}, `{scaler}.update()` only after it (line "
                   f"{facts.line_of(update.node)})")
        return Finding(last.node, message, None, help=(
            f"Call `{scaler}.update()` after the last `{scaler}.step(...)` of each iteration instead"))

    @staticmethod
    def _iteration_loop(step: Event) -> Frame | None:
        """The loop whose iterations are training iterations: the innermost one around the step, or the next one
        out when the innermost iterates over optimizers (`for opt in optimizers: scaler.step(opt)`)."""
        loops = step.frame.loops_up_to_function()
        if loops and isinstance(loops[0].node, cst.For) and step.optimizer in target_names(loops[0].node.target):
            loops = loops[1:]
        return loops[0] if loops else None

    @staticmethod
    def _unknown_methods(facts: ModuleFacts, scaler: str, loop: Frame) -> bool:
        """For `self.scaler`: does the loop call `self.<method>()` that this module does not define (an inherited
        hook may update the scaler)? Calls of attributes (`self.model(x)`) do not count."""
        if not scaler.startswith("self."):
            return False
        function = loop.function()
        defined = {info.qualname.rsplit(".", 1)[-1] for info in facts.functions
                   if function is not None and info.qualname.startswith(f"{function.class_name}.")}
        attributes = {target.split(".", 1)[1] for a in facts.assignments for target in a.targets
                      if target.startswith("self.") and target.count(".") == 1}
        return any(call.receiver == "self" and call.method not in defined | attributes and call.frame.is_within(loop)
                   for call in facts.calls)

    @staticmethod
    def _fix(facts: ModuleFacts, scaler: str, steps: list[Event], iteration: Frame | None) -> FixPlan | None:
        last = steps[-1]
        loops = last.frame.loops_up_to_function()
        per_optimizer = loops and (iteration is None or loops[0] is not iteration) and isinstance(
            loops[0].node, cst.For) and last.optimizer in target_names(loops[0].node.target)
        if per_optimizer:
            anchor_frame = loops[0]
            anchor = anchor_frame.node
            container = anchor_frame.parent
        else:
            anchor = last.call.statement
            container = last.frame
            if not (isinstance(anchor, cst.SimpleStatementLine) and len(anchor.body) == 1
                    and isinstance(anchor.body[0], cst.Expr) and anchor.body[0].value is last.node):
                return None
        scope = iteration if iteration is not None else last.frame.function()
        for step in steps:
            in_scope = scope is None or step.frame.is_within(scope)
            if in_scope and not (step.frame is container or (per_optimizer and step.frame.is_within(anchor_frame))):
                return None  # steps in several branches: no single place for the update

        def rebuild() -> cst.Module:
            update = cst.SimpleStatementLine(body=[cst.Expr(cst.parse_expression(f"{scaler}.update()"))])
            return replace_nodes(facts.module, {anchor: lambda updated: cst.FlattenSentinel([updated, update])})

        return FixPlan(f"Add `{scaler}.update()` after the last `{scaler}.step(...)` of the iteration", rebuild)


def _called_in_a_loop_elsewhere(facts: ModuleFacts, frame: Frame, scaler: str) -> str | None:
    """Where the function that runs `frame` is called in a loop's body of another module (the project index's
    `called_per_iteration`, one caller up as `calling_loop` within the module), when no other module calls
    `.update()` on a scaler of that name either: "in `train_step()` (called in a loop in `train`, line 5)"."""
    view = facts.project
    info = facts.function_info(frame)
    if view is None or info is None:
        return None
    from amplint.index.project import Target

    target = Target(view.path, info.qualname)
    chain = view.called_per_iteration(target, depth=1)
    if chain is None or chain[-1].caller.module == view.path:
        return None
    summary = view.function(target)
    handed_in = summary is not None and "." not in scaler and scaler in summary.params
    callers = {site.caller.module for site in chain}
    if any(site.caller.module != view.path and (not handed_in or site.caller.module in callers)
           for site in view.method_calls(vocab.UPDATE, scaler.rsplit(".", 1)[-1])):
        return None  # another module that may hold the scaler (its caller's, or any for a shared one) updates one
    site = chain[-1]
    module = view.project.names.get(site.caller.module, "?")
    return f"in `{info.qualname.rsplit('.', 1)[-1]}()` (called in a loop in `{module}`, line {site.call.line})"


def _updated_under_another_spelling(facts: ModuleFacts, updates: dict, scaler: str) -> bool:
    """May the scaler be updated by code that does not spell `scaler.update()`: an `update()` on another name
    of it (`s = scaler`), or its `update` taken without a call (`update = scaler.update`,
    `functools.partial(scaler.update)`, `for fn in (scaler.update,)`, a dict of hooks holding it,
    `getattr(scaler, name)`), which whatever calls it runs?"""
    names = facts.same_object_names(scaler)
    if any(receiver in names - {scaler} for receiver, _ in updates):
        return True
    # a method of a class of this module that calls `self.update()` (a GradScaler subclass's own `finish()`),
    # called on the scaler: it updates where no `scaler.update()` is written
    updating = {call.frame.function().name for (receiver, _), calls in updates.items() if receiver == "self"
                for call in calls if call.frame.function() is not None}
    if updating and any(call.receiver in names and call.method in updating for call in facts.calls):
        return True
    # a scaler that comes from another module (`from state import scaler`, `scaler = state.scaler`), whose
    # functions this module calls (`state.after_step()`): that code holds the scaler and may update it
    modules = set()
    for name in names:
        origin = facts.imports.bindings.get(name.split(".", 1)[0])
        if origin is not None:
            modules.add(origin if "." in name else origin.rsplit(".", 1)[0])
    for assignment in facts.assignments:
        if scaler in assignment.targets:
            origin = facts.imports.qualify(assignment.value)
            if origin is not None and "." in origin:
                modules.add(origin.rsplit(".", 1)[0])
    modules = {module for module in modules if module.split(".", 1)[0] != vocab.TORCH}
    if modules and any(call.qualified and call.receiver not in names  # the scaler's own methods: not that code
                       and any(call.qualified.startswith(module + ".") for module in modules)
                       for call in facts.calls):
        return True
    return any(vocab.UPDATE in taken or None in taken for name in names for taken in [facts.methods_taken(name)])


def _update_calls(facts: ModuleFacts) -> dict[tuple[str, int], list]:
    """(receiver, id of the function it runs in) -> its `.update()` calls, in source order: indexed once, so that
    a module of N functions that each step a scaler costs N lookups, not N scans of every call."""
    updates: dict[tuple[str, int], list] = {}
    for call in facts.calls:
        if call.method == vocab.UPDATE and call.receiver:
            updates.setdefault((call.receiver, id(call.frame.function())), []).append(call)
    return updates


class _EarlyExits:  # a libcst visitor once made one with amplint.lazy.visitor_class
    """Finds `break`/`return`/`raise`/`yield` that can end a loop's pass for good (not in nested loops or functions
    for `break`; not in nested functions for the others)."""

    walks_trivia = False

    def __init__(self) -> None:
        self.found = False
        self.depth = 0

    def visit_Break(self, node) -> None:
        if self.depth == 0:
            self.found = True

    def visit_Return(self, node) -> None:
        self.found = True

    def visit_Raise(self, node) -> None:
        self.found = True

    def visit_Yield(self, node) -> None:
        self.found = True

    def visit_For(self, node) -> None:
        self.depth += 1

    def leave_For(self, node) -> None:
        self.depth -= 1

    def visit_While(self, node) -> None:
        self.depth += 1

    def leave_While(self, node) -> None:
        self.depth -= 1

    def visit_FunctionDef(self, node) -> bool:
        return False

    def visit_Lambda(self, node) -> bool:
        return False


def _can_leave_early(loop: cst.For | cst.While) -> bool:
    """Can a pass through the loop's body end the loop (break, return, raise, yield)? Then it may run once."""
    visitor = visitor_class(_EarlyExits)()
    walk(loop.body, visitor)
    return visitor.found
