"""Shared wording and scope rewriting for the rules about work done inside an autocast region.

AMP001 (backward) and AMP002 (optimizer/scaler step) both fix by moving the update phase of a training
step out of the `with autocast(...)` block, splitting the block when forward code follows. Both rules
build the same rewrite for the same block, so their fixes agree. What may leave a region is an allow-list
(`UpdatePhase`): only statements that provably do no forward computation.

What a piece of code may change (`Changes`) is a fact, in amplint/facts/changes.py.
"""

from __future__ import annotations

import weakref

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.diagnostics import Applicability
from amplint.facts import Event, ModuleFacts, Region, RegionState
from amplint.facts.model import Call
from amplint.facts.names import AUTOCAST_LEGACY, AUTOCAST_NEW, dotted_name
from amplint.rules.base import FixPlan, replace_nodes
from amplint.vocabulary import Effect

# The events that must not run under autocast; their presence marks the update phase of a step.
UPDATE_EVENTS = (Effect.BACKWARD, Effect.OPTIMIZER_STEP, Effect.SCALER_STEP, Effect.SCALER_UPDATE)
# Events of the update phase that compute nothing of the forward pass (given inert arguments).
PHASE_EVENTS = (*UPDATE_EVENTS, Effect.SCALER_SCALE, Effect.UNSCALE, Effect.CLIP)
# Methods that read a value or record it, on any receiver: no autocast op, no call into a model.
READING_METHODS = frozenset({
    vocab.ZERO_GRAD, "item", "tolist", "detach", "cpu", "float", vocab.GET_SCALE, "get_last_lr", "state_dict", "append",
    *vocab.PARAMETER_READING_METHODS, "format", "info", "debug", "warning", "add_scalar", "set_postfix",
    "set_description",
})
# Methods that read or record only when called on an imported module (`wandb.log({...})`; `x.log()` is an op).
MODULE_READING_METHODS = frozenset({"log"})
READING_BUILTINS = frozenset({"print", "len", "float", "int", "str", "round", "isinstance"})
# Binary operators no autocast op list holds (`/` is `__rtruediv__` for a number over a tensor, `**` is pow,
# `@` is matmul: those are autocast ops on CUDA).
INERT_OPERATORS = ("Add", "Subtract", "Multiply", "Modulo", "FloorDivide", "BitAnd", "BitOr", "BitXor",
                   "LeftShift", "RightShift")
MAX_SNIPPET = 60
MESSAGE_SNIPPET = 40  # a finding's message names the code in about 100 characters


def snippet(facts: ModuleFacts, node: cst.CSTNode, limit: int = MAX_SNIPPET) -> str:
    """Short source text of a node for messages."""
    text = " ".join(facts.code(node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_region(facts: ModuleFacts, region: Region, chain: list[Call]) -> str:
    """'the bfloat16 autocast region at line 12', naming the decorator, the caller and an unknown state."""
    dtype = f"{region.dtype} " if region.dtype in (vocab.BFLOAT16, vocab.FLOAT16) else ""
    text = f"the {dtype}autocast region at line {facts.line_of(region.opener)}"
    if region.via == "decorator":
        text = f"the {dtype}autocast decorator at line {facts.line_of(region.opener)}"
    if chain:
        call = chain[0]
        text += f" via `{snippet(facts, call.node.func, 20)}()` at line {facts.line_of(call.node)}"
    if region.factory is not None:  # "(`make_ctx()`, line 8; maybe enabled)": the function making the region
        maybe = "; maybe enabled" if region.state is RegionState.MAYBE else ""
        return f"{text} ({region.factory}{maybe})"
    if region.state is RegionState.MAYBE:
        text += " (maybe enabled)"
    return text


def update_events_in_block(facts: ModuleFacts, region: Region) -> list[Event]:
    """The update-phase events that run directly in this region's `with` block (not in nested defs)."""
    return list(_indexes(facts).by_region.get((id(region.frame), id(region.opener)), ()))


class _Indexes:
    """What the questions asked once per region or per fix look up, built once per module: N regions with a
    backward each cost N lookups, not N scans of every event."""

    def __init__(self, facts: ModuleFacts) -> None:
        self.by_region: dict[tuple[int, int], list[Event]] = {}  # (id of frame, id of opener) -> update events
        for event in facts.events:
            inner = facts.region_of(event.frame) if event.kind in UPDATE_EVENTS else None
            if inner is not None:
                self.by_region.setdefault((id(inner.frame), id(inner.opener)), []).append(event)
        self.phase_events = {id(event.node): event for event in facts.events if event.kind in PHASE_EVENTS}
        self.calls = {id(call.node): call for call in facts.calls}


_INDEXES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # facts -> _Indexes (lives as long as they do)


def _indexes(facts: ModuleFacts) -> _Indexes:
    if facts not in _INDEXES:
        _INDEXES[facts] = _Indexes(facts)
    return _INDEXES[facts]


def _contains(statement: cst.CSTNode, call: Call) -> bool:
    return any(s is statement for s in call.statements)


class UpdatePhase:
    """Which statements provably do no forward computation, so that moving them out of an autocast region
    cannot change what they compute.

    An allow-list, not a deny-list: the update-phase events with inert arguments (`scaler.scale(loss)
    .backward()`, `optimizer.step()` with no arguments, `scaler.step(optimizer)` with the optimizer only,
    `scaler.update()`, `scaler.unscale_(opt)`, clipping), reading and logging (`.item()`, `.zero_grad()`,
    `print(...)`, `writer.add_scalar(...)`) and plain assignments and `if`s built from those, names, attributes,
    literals and the arithmetic no autocast op list holds. Anything else (a call into a model or a closure,
    `x @ w`, `yield`, `pass` standing for a notebook magic, a loop) is not the update phase.
    """

    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        indexes = _indexes(facts)
        self.events = indexes.phase_events  # read only
        self.calls = indexes.calls

    def statement(self, statement: cst.CSTNode) -> bool:
        if isinstance(statement, cst.SimpleStatementLine):
            return all(self._small(small) for small in statement.body)
        if isinstance(statement, cst.If):
            orelse = statement.orelse
            return (self.inert(statement.test) and self._block(statement.body)
                    and (orelse is None or (self.statement(orelse) if isinstance(orelse, cst.If)
                                            else self._block(orelse.body))))
        return False

    def stays(self, statement: cst.CSTNode) -> bool:
        """Statements no fix moves out of a region, not even an unsafe one: a `yield` or `await` (the code that
        runs while it waits, a `@contextmanager`'s caller, would leave the region too), and a step that runs a
        closure (`optimizer.step(closure)`: the closure is the forward pass)."""
        found: list[cst.CSTNode] = []
        events = self.events

        class Stays(cst.CSTVisitor):
            def visit_Yield(self, node: cst.Yield) -> None:
                found.append(node)

            def visit_Await(self, node: cst.Await) -> None:
                found.append(node)

            def visit_Call(self, node: cst.Call) -> None:
                event = events.get(id(node))
                if event is not None and event.kind in (Effect.OPTIMIZER_STEP, Effect.SCALER_STEP) \
                        and len(node.args) > (event.kind == Effect.SCALER_STEP):
                    found.append(node)

        statement.visit(Stays())
        return bool(found)

    def _block(self, block: cst.BaseSuite) -> bool:
        if isinstance(block, cst.IndentedBlock):
            return all(self.statement(s) for s in block.body)
        return all(self._small(small) for small in block.body)

    def _small(self, small: cst.CSTNode) -> bool:
        if isinstance(small, cst.Expr):
            return self.inert(small.value)
        if isinstance(small, cst.Assign):
            return self.inert(small.value) and all(self.inert(t.target) for t in small.targets)
        if isinstance(small, cst.AugAssign):
            return (type(small.operator).__name__.replace("Assign", "") in INERT_OPERATORS
                    and self.inert(small.target) and self.inert(small.value))
        if isinstance(small, cst.AnnAssign):
            return small.value is not None and self.inert(small.value) and self.inert(small.target)
        return False

    def inert(self, node: cst.CSTNode) -> bool:
        """An expression that computes nothing autocast would change."""
        if isinstance(node, (cst.Name, cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.Ellipsis)):
            return True
        if isinstance(node, cst.Attribute):
            return self.inert(node.value)
        if isinstance(node, cst.Call):
            return self._call(node)
        if isinstance(node, cst.Subscript):
            return self.inert(node.value) and all(
                self.inert(part) for element in node.slice for part in _slice_parts(element.slice))
        if isinstance(node, (cst.Tuple, cst.List, cst.Set)):
            return all(self.inert(element.value) for element in node.elements)
        if isinstance(node, cst.Dict):
            return all(self.inert(element.value) and (not isinstance(element, cst.DictElement)
                                                      or self.inert(element.key)) for element in node.elements)
        if isinstance(node, cst.ConcatenatedString):
            return self.inert(node.left) and self.inert(node.right)
        if isinstance(node, cst.FormattedString):
            return all(self.inert(part.expression) for part in node.parts
                       if isinstance(part, cst.FormattedStringExpression))
        if isinstance(node, cst.Comparison):
            return self.inert(node.left) and all(self.inert(c.comparator) for c in node.comparisons)
        if isinstance(node, cst.BooleanOperation):
            return self.inert(node.left) and self.inert(node.right)
        if isinstance(node, cst.UnaryOperation):
            return isinstance(node.operator, cst.Not) and self.inert(node.expression)
        if isinstance(node, cst.BinaryOperation):
            return (type(node.operator).__name__ in INERT_OPERATORS and self.inert(node.left)
                    and self.inert(node.right))
        return False

    def _call(self, call: cst.Call) -> bool:
        if not all(self.inert(arg.value) for arg in call.args):
            return False
        event = self.events.get(id(call))
        func = call.func
        if event is not None:
            if event.kind == Effect.OPTIMIZER_STEP:
                return not call.args  # `step(closure)` runs the closure's forward
            if event.kind == Effect.SCALER_STEP:
                return len(call.args) == 1 and call.args[0].keyword is None and not call.args[0].star
            return not isinstance(func, cst.Attribute) or self.inert(func.value)
        if isinstance(func, cst.Name):
            return func.value in READING_BUILTINS and func.value not in self.facts.imports.bindings
        if not isinstance(func, cst.Attribute) or not self.inert(func.value):
            return False
        method = func.attr.value
        if method in READING_METHODS or (method == vocab.STEP and not call.args and self._scheduler(call)):
            return True
        return method in MODULE_READING_METHODS and isinstance(func.value, cst.Name) \
            and func.value.value in self.facts.imports.bindings


    def _scheduler(self, call: cst.Call) -> bool:
        """`receiver.step()` on an object every binding of which constructs a `torch.optim.lr_scheduler` class."""
        recorded = self.calls.get(id(call))
        if recorded is None or recorded.receiver is None:
            return False
        bindings = self.facts.bindings(recorded.receiver, recorded.frame)
        return bool(bindings) and all(
            isinstance(b.value, cst.Call) and (self.facts.imports.qualify(b.value.func) or "").startswith(
                "torch.optim.lr_scheduler.") for b in bindings)

    def reenterable(self, item: cst.BaseExpression, frame) -> bool:
        """Can a `with` enter this item again and get the same region? A fresh call with inert arguments, or a
        name every binding of which is a `torch.autocast` (or `nullcontext`) object: those can be entered again
        after they exit. A context object of unknown kind may not (a generator-based context manager)."""
        if isinstance(item, cst.Call):
            return all(self.inert(arg.value) for arg in item.args)
        key = dotted_name(item)
        bindings = self.facts.bindings(key, frame) if key else []
        return bool(bindings) and all(self._reusable_context(b.value) for b in bindings)

    def _reusable_context(self, value: cst.BaseExpression) -> bool:
        if isinstance(value, cst.IfExp):
            return self._reusable_context(value.body) and self._reusable_context(value.orelse)
        if not isinstance(value, cst.Call) or not all(self.inert(arg.value) for arg in value.args):
            return False
        qualified = self.facts.imports.qualify(value.func) or ""
        return qualified in AUTOCAST_NEW or qualified in AUTOCAST_LEGACY or qualified == "contextlib.nullcontext"


def _slice_parts(slice_: cst.CSTNode) -> list[cst.CSTNode]:
    if isinstance(slice_, cst.Index):
        return [slice_.value]
    return [part for part in (slice_.lower, slice_.upper, slice_.step) if part is not None]


def split_into_groups(phase: UpdatePhase, body: list[cst.BaseStatement], events: list[Event]):
    """Split a block's statements into runs that stay in the region ("in") and runs that leave it ("out").

    A run leaving the region starts at a statement holding an update event and goes on through the statements
    that provably belong to the update phase (zero_grad, clipping, logging); anything else after it starts a new
    run that stays.
    """
    groups: list[tuple[str, list[cst.BaseStatement]]] = []
    for statement in body:
        has_event = any(_contains(statement, e.call) for e in events) and not phase.stays(statement)
        leaving = groups and groups[-1][0] == "out"
        kind = "out" if has_event or (leaving and phase.statement(statement)) else "in"
        if groups and groups[-1][0] == kind:
            groups[-1][1].append(statement)
        else:
            groups.append((kind, [statement]))
    return groups


def move_out_of_region(facts: ModuleFacts, region: Region, event: Event | None = None) -> FixPlan | None:
    """Move the update phase out of the region's `with` block, reopening the block for forward code after.

    None when the region is not a plain `with` block with an indented body, when the statement to move is a loop
    that runs forward code too (the region wraps the whole training loop: the fix would take the forward out of
    autocast; rewrapping each forward is left to the user), when its autocast item is not the last of several items (closing it alone would reorder how they are entered and exited, and a later item may
    use its `as` name), when comments closing the block would have no block left to stay in, or when `event`'s
    statement would not move.
    """
    if region.via != "with" or region.frame is None or region.with_item is None:
        return None
    with_node: cst.With = region.frame.node
    if with_node.asynchronous is not None or not isinstance(with_node.body, cst.IndentedBlock):
        return None
    if with_node.items[-1] is not region.with_item:
        return None
    phase = UpdatePhase(facts)
    events = update_events_in_block(facts, region)
    groups = split_into_groups(phase, list(with_node.body.body), events)
    moved = [statement for kind, statements in groups if kind == "out" for statement in statements]
    if not moved or (event is not None and not any(_contains(s, event.call) for s in moved)):
        return None
    if any(isinstance(s, (cst.For, cst.While)) and not phase.statement(s) for s in moved):
        return None  # a loop holding forward code too (a region around the whole epoch): moving it drops autocast
    last_in = max((i for i, (kind, _) in enumerate(groups) if kind == "in"), default=None)
    footer = with_node.body.footer
    if last_in is None and any(line.comment for line in footer):
        return None
    reopened = any(kind == "in" for kind, _ in groups[1:])
    # Reopening evaluates the item again: a fresh `torch.autocast(...)` from inert arguments is the same region;
    # a context object held in a name may not be enterable twice (a generator-based context manager).
    reopen_safe = not reopened or phase.reenterable(region.with_item.item, region.frame)
    safe = reopen_safe and all(phase.statement(statement) for statement in moved)
    if region.factory is not None and (reopened or not region.factory_plain):
        # Made by a function: entering it again runs that function again, and a generator's code after its yield
        # would run before the moved statements instead of after them.
        safe = False
    item = region.with_item.with_changes(comma=cst.MaybeSentinel.DEFAULT)
    single = len(with_node.items) == 1

    def rebuild() -> cst.Module:
        new: list[cst.BaseStatement] = []
        first_in = next((index for index, (kind, _) in enumerate(groups) if kind == "in"), None)
        for index, (kind, statements) in enumerate(groups):
            if kind == "out":
                if index == 0 and single:
                    first = statements[0]
                    statements = [first.with_changes(leading_lines=[*with_node.leading_lines,
                                                                     *first.leading_lines]), *statements[1:]]
                new.extend(statements)
                continue
            # The `with` line's own comment stays on the block it opened; a reopened block starts bare.
            block = with_node.body.with_changes(body=statements, footer=footer if index == last_in else (),
                                                header=with_node.body.header if index == first_in
                                                else cst.TrailingWhitespace())
            if single:
                new.append(with_node.with_changes(body=block, leading_lines=with_node.leading_lines if index == 0
                                                  else ()))
            else:
                new.append(cst.With(items=[item], body=cst.IndentedBlock(body=statements)))
        if single:
            replacement: object = cst.FlattenSentinel(new)
        else:
            # The autocast item was the last one: `with a, b, ac:` is `with a, b:` around `with ac:`.
            others = list(with_node.items[:-1])
            others[-1] = others[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            replacement = with_node.with_changes(items=others, body=with_node.body.with_changes(body=new))
        return replace_nodes(facts.module, {with_node: replacement})

    verb = "reopening it for the forward code after" if reopened else "closing it before them"
    return FixPlan(
        message=f"Move the backward/step statements out of the autocast block, {verb}",
        rewrite=rebuild,
        applicability=Applicability.SAFE if safe else Applicability.UNSAFE,
    )


def advice_for_region(facts: ModuleFacts, region: Region, chain: list[Call]) -> FixPlan:
    """A display-only fix for regions amplint does not rewrite (a decorator, or a caller's region)."""
    if chain:
        where = f"the caller's autocast block (line {facts.line_of(region.opener)})"
    elif region.via == "exitstack":
        where = f"the `with` block entering the autocast region at line {facts.line_of(region.opener)}"
    else:
        where = f"the function decorated at line {facts.line_of(region.opener)}"
    return FixPlan(
        message=f"Move the backward/step out of {where} by hand (amplint does not rewrite it)",
        rewrite=lambda: None,
        applicability=Applicability.DISPLAY_ONLY,
    )


def region_fix(facts: ModuleFacts, region: Region, chain: list[Call], event: Event | None = None) -> FixPlan | None:
    """The fix for `event`, found inside `region`: rewrite a plain `with` block, advise otherwise."""
    if chain or region.via != "with":
        return advice_for_region(facts, region, chain)
    return move_out_of_region(facts, region, event)
