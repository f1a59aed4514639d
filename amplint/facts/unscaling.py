"""Where a scaler's gradients may already be unscaled, and which optimizer a clip's parameters belong to: the
questions asked at each gradient clip, answered once per module (`ClipQueries`) from the facts layer, the
function's event timeline and what its calls reach. What the analysis cannot place (an `unscale_` taken without
a call, a scaler handed to code it cannot read, a closure, a subclass's own method) counts as "may unscale": a
finding or an inserted `unscale_` must not rest on the absence of a call the analysis cannot see."""

from __future__ import annotations

from functools import cached_property

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.facts.model import Call, Event
from amplint.facts.module import ModuleFacts, call_argument
from amplint.facts.clips import covers, parameter_owners
from amplint.facts.names import dotted_name
from amplint.facts.reach import CallReach
from amplint.facts.timeline import FunctionEvents

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
    modules = set()
    for name in {scaler} | facts.same_object_names(scaler):
        origin = facts.imports.bindings.get(name.split(".", 1)[0])
        if origin is not None:  # `from state import scaler`: `state`; `import state`, `state.scaler`: `state`
            modules.add(origin if "." in name else origin.rsplit(".", 1)[0])
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
