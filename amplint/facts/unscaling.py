"""Where a scaler's gradients may already be unscaled, and which optimizer a clip's parameters belong to: the
questions asked at each gradient clip, answered once per module (`ClipQueries`) from the facts layer, the
function's event timeline and what its calls reach. What the analysis cannot place (an `unscale_` taken without
a call, a scaler handed to code it cannot read, a closure, a subclass's own method) counts as "may unscale": a
finding or an inserted `unscale_` must not rest on the absence of a call the analysis cannot see.

And where an `unscale_` runs again on the same optimizer before `update()` (`UnscaleQueries`, read by AMP011): an
earlier `unscale_` or `step` of it that reaches this one with no update between, or a loop that repeats it while
not every iteration reaches an update; and, for such a loop, the place at the step boundary the `unscale_` (with
its clips, or the `if` holding only them) can move to."""

from __future__ import annotations

import ast
import bisect
from collections import Counter
from functools import cached_property
from typing import NamedTuple

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.facts.collect import target_names
from amplint.facts.model import Call, Event, Frame, FrameKind
from amplint.facts.module import ModuleFacts, branch_condition, call_argument, may_follow
from amplint.facts.clips import covers, parameter_owners
from amplint.facts.loops import Stores, always_reached, block_of_frame, conjuncts, continue_between, frames_between, \
    same_every_iteration
from amplint.facts.names import dotted_name
from amplint.facts.reach import CallReach
from amplint.facts.timeline import FunctionEvents
from amplint.index.summary import names_in
from amplint.vocabulary import Effect


def tied_optimizer(facts: ModuleFacts, clip: Event, candidates: list[str], events: FunctionEvents,
                   scaler: str, index: ClipQueries) -> str | None:
    """The optimizer whose parameters the clip clips, or None when that is not known.

    Known when the clip's parameters (`gen.parameters()`, or a name bound to them) are among those one
    optimizer was built with (`opt_g = torch.optim.Adam(gen.parameters())`), or when only one optimizer is
    stepped after the clip and no other optimizer of the function is known to own the clipped parameters (its
    construction, when seen, must cover them). Never a guess from the order of the steps."""
    clipped = parameter_owners(facts, call_argument(clip.node, 0, "parameters"), clip.frame)
    known = events.optimizers(scaler)
    owners = {name: index.optimizer_owners(name, clip.frame) for name in known | set(candidates)}
    covering = [name for name, built_on in owners.items()
                if clipped is not None and built_on is not None and covers(built_on, clipped)]
    if len(covering) == 1:
        return covering[0] if covering[0] in candidates else None
    if len(candidates) != 1 or covering:
        return None
    only = candidates[0]
    if owners.get(only) is not None and clipped is not None:
        return None  # both sides known, and they do not match: the clip is of another optimizer's parameters
    return only


def _closure_of_this_module(facts: ModuleFacts, call: Call) -> bool:
    """Is the call's callee a plain name this module binds to a function the analysis does not follow: a
    lambda (`unscale = lambda: scaler.unscale_(opt)`) or a function nested in another (`def unscale(): ...`
    inside `train()`)? Its code may reach the scaler through its closure, without being handed it: it may
    unscale (an `unscale_` inserted after it would raise `unscale_() has already been called`)."""
    func = call.node.func
    if not isinstance(func, cst.Name):
        return False
    if any(isinstance(binding.value, cst.Lambda) for binding in facts.bindings(func.value, call.frame)):
        return True

    class Nested(cst.CSTVisitor):
        def __init__(self) -> None:
            super().__init__()
            self.depth, self.found = 0, False

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            self.found = self.found or bool(self.depth) and node.name.value == func.value
            self.depth += 1
            return not self.found

        def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
            self.depth -= 1

    visitor = Nested()
    facts.module.visit(visitor)
    return visitor.found


# The scaler's own methods that never unscale (`step` and `update` are events of their own).
_NOT_UNSCALING = frozenset({vocab.SCALE, vocab.GET_SCALE, vocab.IS_ENABLED, vocab.LOAD_STATE_DICT})


def _unknown_scaler_method(call: Call, names: set[str]) -> bool:
    """`scaler.prepare(opt)`: a method of the scaler that is none of GradScaler's known ones (a subclass's own,
    which may call `self.unscale_`)."""
    return call.receiver in names and call.method is not None and call.method not in _NOT_UNSCALING


def _unfollowed_unscale(facts: ModuleFacts) -> bool:
    """Does the module hold an `unscale_` in code the analysis does not follow as a function: a lambda
    (`self.hooks = {"pre_clip": lambda: scaler.unscale_(opt)}`) or a function nested in another? A call it cannot
    resolve may then run it."""

    class Unfollowed(cst.CSTVisitor):
        def __init__(self) -> None:
            super().__init__()
            self.functions, self.lambdas, self.found = 0, 0, False

        def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
            self.functions += 1

        def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
            self.functions -= 1

        def visit_Lambda(self, node: cst.Lambda) -> None:
            self.lambdas += 1

        def leave_Lambda(self, original_node: cst.Lambda) -> None:
            self.lambdas -= 1

        def visit_Attribute(self, node: cst.Attribute) -> None:
            if node.attr.value == vocab.UNSCALE and (self.lambdas or self.functions > 1):
                self.found = True

    visitor = Unfollowed()
    facts.module.visit(visitor)
    return visitor.found


def unread_call_of_the_scalers_module(facts: ModuleFacts, index, scaler: str, function, start: int,
                                       end: int) -> str | None:
    """A call between `start` and `end` of a function the analysis cannot read (neither this module's nor, through
    the project index, another's) imported from the module the scaler itself comes from (`from state import
    scaler, unscale_model`, `scaler = state.scaler`): its code holds the scaler and may unscale it. Its name."""
    modules = modules_imported_as(facts, {scaler} | facts.same_object_names(scaler))
    for binding in [*facts.bindings(scaler, function), *facts.bindings(scaler, None)]:
        origin = facts.imports.qualify(binding.value)  # `scaler = state.scaler`
        if origin is not None and "." in origin:
            modules.add(origin.rsplit(".", 1)[0])
    for call in index.helpers.calls_in(function, start, end) if modules else ():
        if call.qualified and any(call.qualified == module or call.qualified.startswith(module + ".")
                                  for module in modules) \
                and not index.helpers.is_event(call) and index.helpers.unscales(call) is None:
            return dotted_name(call.node.func) or call.qualified
    return None


def modules_imported_as(facts: ModuleFacts, names: set[str]) -> set[str]:
    """The modules that names of this module come from through its imports (`from state import scaler`:
    `state`; `import state`, then `state.scaler`: `state`)."""
    modules = set()
    for name in names:
        origin = facts.imports.bindings.get(name.split(".", 1)[0])
        if origin is not None:
            modules.add(origin if "." in name else origin.rsplit(".", 1)[0])
    return modules


def _hands_over(call: cst.Call, names: set[str]) -> bool:
    """Is one of `names` (or a bound method of one) among the call's arguments, also inside a container, a
    starred argument or a lambda? A value one of its methods returns (`scaler.get_scale()`) is not the scaler."""
    found = []

    def named(node) -> bool:
        key = dotted_name(node)
        return key is not None and any(key == name or key.startswith(name + ".") for name in names)

    class Mentions(cst.CSTVisitor):
        def __init__(self, in_lambda: bool = False) -> None:
            super().__init__()
            self.in_lambda = in_lambda

        def visit_Lambda(self, node: cst.Lambda) -> bool:
            node.body.visit(Mentions(in_lambda=True))
            return False

        def visit_Call(self, node: cst.Call) -> bool:
            if not self.in_lambda and isinstance(node.func, cst.Attribute) and named(node.func.value):
                for arg in node.args:  # `scaler.get_scale()`: its result is handed over, not the scaler
                    arg.value.visit(self)
                return False
            return True

        def visit_Name(self, node: cst.Name) -> bool:
            if node.value in names:
                found.append(node)
            return False

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            if named(node):
                found.append(node)
                return False
            return True

    for arg in call.args:
        arg.value.visit(Mentions())
    return bool(found)


class ClipQueries:
    """What is looked up for each clip, built once per module as it is first asked for: each function's
    events, each optimizer's owners and the events in each statement (the block around each statement is
    `ModuleFacts.block_of`'s). So N clips cost N lookups, not N scans of the module."""

    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self._functions: dict[int, FunctionEvents] = {}
        self._owners: dict[tuple[str, int], set[str] | None] = {}
        self._disabled: dict[str | None, bool] = {}

    def function(self, function) -> FunctionEvents:
        if id(function) not in self._functions:
            self._functions[id(function)] = FunctionEvents(self.facts.events_in(function), self.facts)
        return self._functions[id(function)]

    @cached_property
    def helpers(self) -> CallReach:
        return CallReach(self.facts)

    def unscale_taken(self, scaler: str | None) -> bool:
        """Does the module take the scaler's `unscale_` without calling it there (`un = scaler.unscale_`,
        `map(scaler.unscale_, ...)`, `getattr(scaler, name)`), under any name of the scaler? Whatever calls it
        then may unscale at any point: what the analysis cannot place, it does not judge."""
        if scaler is None:
            return False
        return any(vocab.UNSCALE in taken or None in taken
                   for name in self.facts.same_object_names(scaler) for taken in [self.facts.methods_taken(name)])

    def may_unscale_through_calls(self, scaler: str | None, function, start: int, end: int,
                                  skip: Call | None = None) -> bool:
        """May code of `function` between `start` and `end` (source order) unscale the scaler's gradients other
        than by a `scaler.unscale_(...)` event: an `unscale_` on another name of the scaler (`s = scaler`), a
        call of a function (this module's or, through the project index, another's) that reaches an
        `unscale_`, or a call the analysis cannot follow that is handed the scaler or one of its bound methods
        (it may unscale)?"""
        if scaler is None:
            return False
        names = self.facts.same_object_names(scaler)
        others = names - {scaler}  # `scaler`'s own `unscale_` calls are events, counted per optimizer
        helpers = self.helpers
        for call in helpers.calls_in(function, start, end):
            if call is skip:
                continue
            if call.method == vocab.UNSCALE and call.receiver in others:
                return True
            if helpers.is_event(call):
                continue
            unscales = helpers.unscales(call)
            if unscales or unscales is None and (_hands_over(call.node, names)
                                                 or _closure_of_this_module(self.facts, call)
                                                 or _unknown_scaler_method(call, names)
                                                 or call.qualified is None and self.unfollowed_unscale):
                return True
        return False

    @cached_property
    def unfollowed_unscale(self) -> bool:
        """`_unfollowed_unscale`, once per module (it walks the module)."""
        return _unfollowed_unscale(self.facts)

    def scaler_disabled(self, scaler: str | None) -> bool:
        """`ModuleFacts.scaler_disabled`, once per scaler (it reads every construction of the name)."""
        if scaler not in self._disabled:
            self._disabled[scaler] = self.facts.scaler_disabled(scaler)
        return self._disabled[scaler]

    def optimizer_owners(self, name: str, frame) -> set[str] | None:
        """`optimizer_owners_of`, once per name and function (what it reads depends on the function only)."""
        key = (name, id(frame.function()))
        if key not in self._owners:
            self._owners[key] = optimizer_owners_of(self.facts, name, frame, self)
        return self._owners[key]

    def block_around(self, statements: tuple) -> tuple[tuple | None, int]:
        """The statements of the block (or module body) that holds the innermost of `statements`, and its
        position there."""
        found = self.facts.block_of(statements[-1])
        if found is None or (not found[2] and len(statements) < 2):
            return None, -1
        return found[0], found[1]

    def position_in(self, block: tuple, statement: cst.CSTNode) -> int | None:
        found = self.facts.block_of(statement)
        return found[1] if found is not None and found[0] is block else None

    @cached_property
    def _by_statement(self) -> dict[int, list[Event]]:
        by_statement: dict[int, list[Event]] = {}
        for event in self.facts.events:
            for statement in event.call.statements:
                by_statement.setdefault(id(statement), []).append(event)
        return by_statement

    def events_within(self, statement: cst.CSTNode) -> list[Event]:
        """The events whose code is in `statement`."""
        return self._by_statement.get(id(statement), [])


def optimizer_owners_of(facts: ModuleFacts, name: str, frame, index: ClipQueries) -> set[str] | None:
    """The modules whose parameters optimizer `name` was built with, when its construction is seen."""
    bound = facts.bindings(name, frame)
    if len(bound) != 1 or not facts.optimizer_constructed(name, frame):
        return None
    value = bound[0].value
    owners = parameter_owners(facts, call_argument(value, 0, "params"), bound[0].frame)
    if owners is None:
        return None
    # `self.model = model` next to `self.opt = Adam(model.parameters())`: the same module under both names.
    function = bound[0].frame.function()
    for assignment in facts.assignments_in(function):
        if dotted_name(assignment.value) in owners:
            owners = owners | set(assignment.targets)
    return owners


def can_run_again(summary, *names: str) -> bool:
    """The screen's question for AMP011: a method call to one of the names that can run twice with nothing
    between: in a loop's body (in its function) other than only `for x in ...` loops over its first argument, or
    with another method call to one of the names, or to `step`, in the same function."""
    def exact() -> bool:
        sites = [site for name in names for site in summary.call_sites_by_name.get(name, ()) if site[2] is not None]
        calls_by_function: dict[int, set[int]] = {}  # id(function) -> ids of its calls to the names or `step`
        for site in sites + [site for site in summary.call_sites_by_name.get(vocab.STEP, ()) if site[2] is not None]:
            calls_by_function.setdefault(id(site[0]), set()).add(id(site[4]))
        for function, _, _, loops, call in sites:
            argument = call.args[0] if call.args else None
            argument = argument.id if type(argument) is ast.Name else None
            if any(not (type(loop) in (ast.For, ast.AsyncFor) and argument is not None
                        and argument in names_in(loop.target)) for loop in loops):
                return True
            if len(calls_by_function[id(function)]) > 1:  # another call besides this one
                return True
        return False

    return summary.ask(summary.has_token(*names, kind="method"), exact)


class Move(NamedTuple):
    """Where a repeated `unscale_` goes: `moved` (the `unscale_` statement and the clips right after it, or the
    `if` holding only them) to just before `target`, the statement of `step`."""

    step: Event
    target: cst.SimpleStatementLine
    moved: list


class UnscaleQueries:
    """What is looked up at each `unscale_`, built once per module as it is first asked for: each function's
    events and their source indexes, and what the module's code binds (`Stores`). So N `unscale_` calls cost N
    lookups, not N scans of their functions."""

    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self.stores = Stores(facts.module)  # what the module binds, collected on the first question
        self._functions: dict[int, tuple[list[Event], list[int]]] = {}  # id of function -> (events, their indexes)

    def _events(self, unscale: Event) -> tuple[list[Event], list[int]]:
        function = unscale.frame.function()
        if id(function) not in self._functions:  # once per function, not once per unscale_ in it
            function_events = self.facts.events_in(function)
            self._functions[id(function)] = (function_events, [e.index for e in function_events])
        return self._functions[id(function)]

    def earlier(self, unscale: Event) -> Event | None:
        """An earlier `unscale_`/`step` of the same optimizer that reaches this one with no update between (the
        search starts at this unscale_'s place and goes back)."""
        events, indexes = self._events(unscale)
        scaler, optimizer = unscale.scaler, unscale.optimizer
        for position in range(bisect.bisect_left(indexes, unscale.index) - 1, -1, -1):
            event = events[position]
            if not may_follow(self.facts, event.frame, unscale.frame):
                continue
            if event.kind == Effect.SCALER_UPDATE and event.scaler == scaler:
                return None
            if event.kind in (Effect.UNSCALE, Effect.SCALER_STEP) and event.scaler == scaler \
                    and event.optimizer == optimizer:
                # An update between them that is only conditional still leaves a path: flag only when the
                # earlier call is not inside a loop the second one is outside of (handled as a loop case).
                if event.frame.loops_up_to_function() == unscale.frame.loops_up_to_function():
                    return event
                return None
        return None

    def repeating_loop(self, unscale: Event) -> Frame | None:
        """The innermost loop (not over optimizers) that runs this unscale_ every iteration while not every
        iteration reaches an update of the scaler.

        An `unscale_` under `if` in the loop counts only when every test on the way is the same in every
        iteration (`if clip_grad:`, `if args.max_norm > 0:`): it then runs every micro-batch whenever it runs at
        all. A test that can change between iterations (`if (i + 1) % accum == 0`, `if i == last`, a call) may
        be the accumulation boundary: silent. An update under the same tests as the unscale_ (the boundary
        written twice) is reached whenever the unscale_ is: silent too."""
        facts = self.facts
        events, _ = self._events(unscale)
        loop, ifs = None, []
        for frame in unscale.frame.ancestors():
            if frame.kind is FrameKind.FUNCTION:
                return None
            if frame.kind is FrameKind.IF:
                ifs.append(frame)
            if frame.kind is FrameKind.LOOP:
                if isinstance(frame.node, cst.For) and unscale.optimizer in target_names(frame.node.target):
                    continue  # one unscale per optimizer
                loop = frame
                break
        if loop is None:
            return None
        if ifs and not all(same_every_iteration(facts, frame, loop, self.stores) for frame in ifs):
            return None
        updates = [e for e in events if e.kind == Effect.SCALER_UPDATE and e.scaler == unscale.scaler
                   and e.frame.is_within(loop) and not continue_between(loop, unscale, e)]
        if always_reached(updates, loop):
            return None
        if ifs:
            tests = {branch_condition(facts, frame) for frame in ifs}
            if any({branch_condition(facts, frame) for frame in frames_between(update.frame, loop)
                    if frame.kind is FrameKind.IF} <= tests for update in updates):
                return None  # the update runs under the unscale_'s own tests: whenever it does
            # the same tests written two ways: `if fp16: if mode == "torch":` and `if fp16 and mode == "torch":`
            atoms = set().union(*(conjuncts(frame) for frame in ifs))
            if any(set().union(*(conjuncts(frame) for frame in frames_between(update.frame, loop)
                                 if frame.kind is FrameKind.IF)) <= atoms for update in updates):
                return None
        if not updates and not any(e.kind == Effect.SCALER_UPDATE and e.scaler == unscale.scaler for e in events):
            return None  # no update in this function at all: the update lives elsewhere, stay silent
        return loop

    @staticmethod
    def removable(unscale: Event) -> cst.CSTNode | None:
        """The statement of a second `unscale_` that can go: the call alone in it, in a block that keeps another
        statement."""
        statement = unscale.call.statement
        body = block_of_frame(unscale.frame)
        if not alone_in_statement(statement, unscale.node) or body is None or len(body) < 2:
            return None
        return statement

    def move(self, unscale: Event, loop: Frame) -> Move | None:
        """Where the `unscale_` that `loop` repeats can move: just before the one `scaler.step(optimizer)` after
        it, with the clips right after it (an `if` holding only the `unscale_` and its clips moves as a whole),
        when nothing the moved statements read is assigned on the way and a clip's kept result is not read later
        in the loop."""
        facts = self.facts
        events, _ = self._events(unscale)
        step = next((e for e in events if e.kind == Effect.SCALER_STEP and e.index > unscale.index
                     and e.scaler == unscale.scaler and e.optimizer == unscale.optimizer), None)
        statement = unscale.call.statement
        if step is None or not alone_in_statement(statement, unscale.node):
            return None
        if sum(1 for e in events if e.kind == Effect.SCALER_STEP and e.index > unscale.index
               and e.scaler == unscale.scaler and e.optimizer == unscale.optimizer) > 1:
            return None  # a step on each side of an `if`: moving it before one would leave the other unclipped
        target = step.call.statement
        if not isinstance(target, cst.SimpleStatementLine) or len(target.body) != 1:
            return None
        clips = {id(e.call.statement) for e in events if e.kind == Effect.CLIP}
        if unscale.frame.kind is FrameKind.IF:
            # `if clip_grad:` holding only the unscale_ and its clips: the whole `if` moves (its test is the same
            # in every iteration, `repeating_loop` checked), so the clip runs under the same flag, at the boundary.
            guard = _guard_to_move(unscale.frame, statement, clips)
            if guard is None or sum(f.kind is FrameKind.IF for f in frames_between(unscale.frame, loop)) != 1:
                return None
            body, moved, clip_lines = block_of_frame(unscale.frame.parent), [guard], list(guard.body.body[1:])
            if body is None or not any(s is guard for s in body):
                return None
        else:
            body = block_of_frame(unscale.frame)
            if body is None or not any(s is statement for s in body):
                return None
            moved = [statement]
            for following in body[[id(s) for s in body].index(id(statement)) + 1:]:
                if id(following) not in clips or not isinstance(following, cst.SimpleStatementLine):
                    break
                moved.append(following)
            clip_lines = moved[1:]
        if len(moved) == len(body):
            return None  # the block would be empty
        # Nothing the moved statements read may be assigned between here and the step (or by the loop).
        used = {name for s in moved for name in _references(s)}
        assigned = set()
        if isinstance(loop.node, cst.For) and not step.frame.is_within(loop):
            assigned.update(name.split(".")[0] for name in target_names(loop.node.target))
        for assignment in facts.assignments:
            if unscale.index < assignment.index < step.index or (
                    not step.frame.is_within(loop) and assignment.frame.is_within(loop)):
                if not any(assignment.statement is s for s in moved):
                    assigned.update(name.split(".")[0] for name in assignment.targets)
        if used & assigned:
            return None
        # A clip whose result is kept (`norm = clip_grad_norm_(...)`) must not be read later in the loop.
        stored = {name for s in clip_lines for a in facts.assignments if a.statement is s for name in a.targets}
        in_loop = _references(loop.node)
        if any(in_loop[name] > 1 for name in stored):
            return None
        return Move(step, target, moved)


def _guard_to_move(branch: Frame, statement: cst.CSTNode, clips: set[int]) -> cst.If | None:
    """The `if` around an `unscale_` when it can move as a whole: no `else`, and its body is the `unscale_`
    followed only by clip statements."""
    guard = branch.node
    if branch.in_else or not isinstance(guard, cst.If) or guard.orelse is not None \
            or not isinstance(guard.body, cst.IndentedBlock):
        return None
    lines = list(guard.body.body)
    if not lines or lines[0] is not statement:
        return None
    if not all(id(line) in clips and isinstance(line, cst.SimpleStatementLine) for line in lines[1:]):
        return None
    return guard


def alone_in_statement(statement: cst.CSTNode, call: cst.Call) -> bool:
    """Is the call a statement of its own (`scaler.unscale_(opt)` alone on its line, its value unused)?"""
    return (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr) and statement.body[0].value is call)


def _references(node: cst.CSTNode) -> Counter[str]:
    """How often each name and each dotted chain (`self.norm`, and `self`) is read or written in the code of
    `node`: code only, never its comments or strings."""
    found: Counter[str] = Counter()

    class References(cst.CSTVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            found[name.value] += 1

        def visit_Attribute(self, attribute: cst.Attribute) -> None:
            dotted = dotted_name(attribute)
            if dotted is not None:
                found[dotted] += 1

    node.visit(References())
    return found
