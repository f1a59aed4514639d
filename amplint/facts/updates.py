"""A scaler's steps and its update: the `scaler.step(optimizer)` calls of each function, the loop whose
iterations they run in, whether `scaler.update()` runs for them (in the same function, only after the loop, in
another function of the module, under another spelling of the scaler, in code of the module the scaler comes
from, in another module that calls the function in a loop), and the one place after the steps where an update
runs after every one of them. Read by AMP010."""

from __future__ import annotations

from amplint.lazy import libcst as cst
from amplint.lazy import visitor_class

from amplint import vocabulary as vocab
from amplint.facts.collect import target_names
from amplint.facts.model import Call, Event, Frame, FrameKind
from amplint.facts.module import ModuleFacts
from amplint.facts.unscaling import alone_in_statement, modules_imported_as
from amplint.facts.walk import walk
from amplint.vocabulary import Effect


class ScalerUpdates:
    """The module's steps and `.update()` calls, indexed once: a module of N functions that each step a scaler
    costs N lookups, not N scans of every call."""

    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self.steps: dict[tuple[str, int], list[Event]] = {}  # (scaler, id of its function) -> its steps, in order
        for event in facts.events:
            if event.kind == Effect.SCALER_STEP and event.scaler:
                self.steps.setdefault((event.scaler, id(event.frame.function())), []).append(event)
        self._calls: dict[tuple[str, int], list[Call]] = {}  # (receiver, id of its function) -> `.update()` calls
        for call in facts.calls:
            if call.method == vocab.UPDATE and call.receiver:
                self._calls.setdefault((call.receiver, id(call.frame.function())), []).append(call)

    def in_function(self, scaler: str, function: Frame | None) -> list[Call]:
        """The `scaler.update()` calls of `function`, in source order."""
        return self._calls.get((scaler, id(function)), [])

    def elsewhere(self, scaler: str, function: Frame | None) -> bool:
        """May code other than `function`'s own `scaler.update()` calls update the scaler: any other function of
        the module that calls `.update()` on a scaler of that name (a helper that may run every iteration), or
        code that does not spell `scaler.update()` (`_under_another_spelling`)?"""
        return self.facts.updated_elsewhere(scaler, function) or self._under_another_spelling(scaler)

    def _under_another_spelling(self, scaler: str) -> bool:
        """May the scaler be updated by code that does not spell `scaler.update()`: an `update()` on another name
        of it (`s = scaler`), or its `update` taken without a call (`update = scaler.update`,
        `functools.partial(scaler.update)`, `for fn in (scaler.update,)`, a dict of hooks holding it,
        `getattr(scaler, name)`), which whatever calls it runs?"""
        facts = self.facts
        names = facts.same_object_names(scaler)
        if any(receiver in names - {scaler} for receiver, _ in self._calls):
            return True
        # a method of a class of this module that calls `self.update()` (a GradScaler subclass's own `finish()`),
        # called on the scaler: it updates where no `scaler.update()` is written
        updating = {call.frame.function().name for (receiver, _), calls in self._calls.items() if receiver == "self"
                    for call in calls if call.frame.function() is not None}
        if updating and any(call.receiver in names and call.method in updating for call in facts.calls):
            return True
        # a scaler that comes from another module (`from state import scaler`, `scaler = state.scaler`), whose
        # functions this module calls (`state.after_step()`): that code holds the scaler and may update it
        modules = modules_imported_as(facts, names)
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


def iteration_loop(step: Event) -> Frame | None:
    """The loop whose iterations are training iterations: the innermost one around the step, or the next one
    out when the innermost iterates over optimizers (`for opt in optimizers: scaler.step(opt)`)."""
    loops = step.frame.loops_up_to_function()
    if loops and isinstance(loops[0].node, cst.For) and step.optimizer in target_names(loops[0].node.target):
        loops = loops[1:]
    return loops[0] if loops else None


def calls_unknown_methods(facts: ModuleFacts, scaler: str, loop: Frame) -> bool:
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


def update_only_after_loop(facts: ModuleFacts, scaler: str, steps: list[Event], iteration: Frame | None,
                           updates: list[Call]) -> Call | None:
    """The update that comes only outside (after) the loop whose every iteration steps: the second iteration's
    step raises. Only for a step on one plain optimizer name not rebound in the loop, in a loop that no
    `break`/`return` can end after one pass."""
    if iteration is None or any(update.frame.is_within(iteration) for update in updates):
        return None
    last = steps[-1]
    if last.optimizer is None or any(last.optimizer in a.targets and a.frame.is_within(iteration)
                                     for a in facts.assignments):
        return None
    if isinstance(iteration.node, cst.For) and last.optimizer in target_names(iteration.node.target):
        return None
    if calls_unknown_methods(facts, scaler, iteration) or _can_leave_early(iteration.node):
        return None
    if not all(step.frame is last.frame for step in steps if step.frame.is_within(iteration)):
        return None  # steps on several paths: each pass may step once
    if last.frame.kind is not FrameKind.LOOP or last.frame is not iteration:
        return None  # a conditional step (accumulation boundary) may run once per loop
    return updates[0]


def called_in_a_loop(facts: ModuleFacts, frame: Frame, scaler: str) -> tuple[str, str | None, int] | None:
    """Where the function that runs `frame` is called in a loop's body, one caller up, in this module or another
    (the project index's `called_per_iteration`), when no other module calls `.update()` on a scaler of that name
    either: (the function's name, the caller's module or None for this one, the call's line)."""
    view = facts.project
    info = facts.function_info(frame)
    if view is None or info is None:
        return None
    from amplint.index.project import Target

    target = Target(view.path, info.qualname)
    chain = view.called_per_iteration(target, depth=1)
    if chain is None:
        return None
    site = chain[-1]
    if site.caller.module == view.path:  # its own module's loop: what this module does with the scaler is read here
        return info.qualname.rsplit(".", 1)[-1], None, site.call.line
    summary = view.function(target)
    handed_in = summary is not None and "." not in scaler and scaler in summary.params
    if any(other.caller.module != view.path and (not handed_in or other.caller.module == site.caller.module)
           for other in view.method_calls(vocab.UPDATE, scaler.rsplit(".", 1)[-1])):
        return None  # another module that may hold the scaler (its caller's, or any for a shared one) updates one
    return info.qualname.rsplit(".", 1)[-1], view.project.names.get(site.caller.module, "?"), site.call.line


def update_place(steps: list[Event], iteration: Frame | None) -> cst.CSTNode | None:
    """The statement after which `scaler.update()` runs after every step of the iteration: the last step's own
    statement (a call alone), or a `for opt in optimizers: scaler.step(opt)` loop as a whole. None when the
    steps sit in different branches (no single place runs after every step)."""
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
        if not alone_in_statement(anchor, last.node):
            return None
    scope = iteration if iteration is not None else last.frame.function()
    for step in steps:
        in_scope = scope is None or step.frame.is_within(scope)
        if in_scope and not (step.frame is container or (per_optimizer and step.frame.is_within(anchor_frame))):
            return None  # steps in several branches: no single place for the update
    return anchor


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
