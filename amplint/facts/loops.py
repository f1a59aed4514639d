"""What each pass of a loop does: whether every iteration reaches a statement (unconditionally, or in both
sides of an `if`), whether a `continue` between two statements can skip the second, whether an `if`'s test is the
same in every iteration (a flag or a threshold, never an accumulation boundary), and what the module's code binds
(`Stores`, one pass over the module). Facts of control flow, read by the rules that ask whether something
repeats before an update (AMP011) or is built per iteration (AMP004)."""

from __future__ import annotations

from amplint.lazy import libcst as cst

from amplint.facts.collect import target_names
from amplint.facts.model import Event, Frame, FrameKind
from amplint.facts.module import ModuleFacts
from amplint.facts.names import dotted_name


def continue_between(loop: Frame, unscale: Event, update: Event) -> bool:
    """Can an iteration that ran the `unscale_` skip the update with a `continue` of this loop, written in a
    statement of the loop's body between the two (`if (i + 1) % accum != 0: continue`, `if not finite: continue`)?"""
    body = block_of_frame(loop)
    if body is None:
        return False
    positions = {id(statement): position for position, statement in enumerate(body)}
    start = next((positions[id(s)] for s in unscale.call.statements if id(s) in positions), None)
    end = next((positions[id(s)] for s in update.call.statements if id(s) in positions), None)
    if start is None or end is None or start == end:
        return False  # one statement holds both: a `continue` before it skips both (one inside it: not seen)
    between = body[start + 1:end] if start < end else [*body[start + 1:], *body[:end]]
    return any(_continues(statement) for statement in between)


def _continues(statement: cst.CSTNode) -> bool:
    """Does the statement hold a `continue` of the loop around it (not of a loop or function inside it)?"""
    found = []

    class Continues(cst.CSTVisitor):
        def visit_Continue(self, node: cst.Continue) -> None:
            found.append(node)

        def visit_For(self, node) -> bool:
            return False

        def visit_While(self, node) -> bool:
            return False

        def visit_FunctionDef(self, node) -> bool:
            return False

        def visit_ClassDef(self, node) -> bool:
            return False

    statement.visit(Continues())
    return bool(found)


def always_reached(updates: list[Event], loop: Frame) -> bool:
    """Does every iteration of `loop` reach one of `updates`? (unconditionally, or in both branches of an `if`,
    each branch reaching one in every pass: a test nested in one side, `if accum > 1: if (i + 1) % accum == 0:
    update` against `else: update`, leaves a path without one)"""
    paths = [[f for f in reversed(frames_between(update.frame, loop)) if f.kind is FrameKind.IF]
             for update in updates]  # the `if`s around each update, outermost first

    def covered(paths: list[list[Frame]]) -> bool:
        if any(not path for path in paths):
            return True
        sides: dict[int, dict[bool, list[list[Frame]]]] = {}
        for path in paths:
            sides.setdefault(id(path[0].node), {}).setdefault(path[0].in_else, []).append(path[1:])
        return any(len(both) == 2 and all(covered(rest) for rest in both.values()) for both in sides.values())

    return covered(paths)


def conjuncts(frame: Frame) -> set[tuple[str, bool]]:
    """The tests an `if` side requires, as (code without `not`/`!=`/`is not` and spaces, polarity): each operand
    of an `and` on its true side, the whole test otherwise (its false side of an `and` requires none of them)."""
    test = frame.node.test
    if frame.in_else:
        return {_atom(test, False)}
    found, pending = set(), [test]
    while pending:
        node = pending.pop()
        if isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.And):
            pending += [node.left, node.right]
        else:
            found.add(_atom(node, True))
    return found


def _atom(test: cst.BaseExpression, positive: bool) -> tuple[str, bool]:
    while True:
        if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, positive = test.expression, not positive
        elif isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and isinstance(
                test.comparisons[0].operator, (cst.IsNot, cst.NotEqual)):
            target = test.comparisons[0]
            operator = cst.Is() if isinstance(target.operator, cst.IsNot) else cst.Equal()
            test = test.with_changes(comparisons=[target.with_changes(operator=operator)])
            positive = not positive
        else:
            break
    text = cst.Module(body=[]).code_for_node(test.with_changes(lpar=[], rpar=[]) if hasattr(test, "lpar") else test)
    return "".join(text.split()), positive


def same_every_iteration(facts: ModuleFacts, branch: Frame, loop: Frame, stores: Stores) -> bool:
    """Is the test of the `if` the same in every iteration of `loop`? Only when it calls nothing, subscripts only
    with literals, and reads no name the loop binds (its target, an assignment, a `with ... as`, a `:=`) and no
    attribute chain (`self.clip`) that any code of the module other than an `__init__` assigns: such a test
    (a flag, a threshold) cannot be the accumulation boundary."""
    test = branch.node.test
    read, opaque = _test_reads(test)
    if opaque:
        return False
    stored = stores.within(loop.node)
    if isinstance(loop.node, cst.For):
        stored = stored | set(target_names(loop.node.target))
    for name in read:
        parts = name.split(".")
        prefixes = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
        if prefixes & stored:
            return False
        if len(parts) > 1 and prefixes & stores.attributes_outside_init():
            return False
    return True


def _test_reads(test: cst.BaseExpression) -> tuple[set[str], bool]:
    """(the names and attribute chains a test reads, whether it does anything else: a call, a non-literal
    subscript, an await, a `:=`, a lambda or a comprehension)."""
    read: set[str] = set()
    opaque: list[cst.CSTNode] = []

    class Reads(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> bool:
            opaque.append(node)
            return False

        def visit_Subscript(self, node: cst.Subscript) -> bool:
            if not all(isinstance(e.slice, cst.Index) and isinstance(e.slice.value, (cst.SimpleString, cst.Integer))
                       for e in node.slice):
                opaque.append(node)
            return True

        def visit_Await(self, node) -> bool:
            opaque.append(node)
            return False

        def visit_NamedExpr(self, node) -> bool:
            opaque.append(node)
            return False

        def visit_Lambda(self, node) -> bool:
            opaque.append(node)
            return False

        def visit_GeneratorExp(self, node) -> bool:
            opaque.append(node)
            return False

        def visit_ListComp(self, node) -> bool:
            opaque.append(node)
            return False

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            name = dotted_name(node)
            if name is not None:
                read.add(name)
                return False
            return True

        def visit_Name(self, node: cst.Name) -> None:
            read.add(node.value)

    test.visit(Reads())
    return read, bool(opaque)


_STORE_TYPES = ("AssignTarget", "AugAssign", "AnnAssign", "For", "AsName", "NamedExpr", "Del")


class Stores:
    """The names and attribute chains the module's code binds (assignments, augmented and annotated too, `for`
    targets, `with ... as` names, `:=` targets and `del`), from one pass over the module made on the first
    question: in the order of the pass, with the span of that order each loop covers, so that a loop's stores are
    a slice of one list, not a walk of the loop per question."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self._names: list[tuple[str, ...]] | None = None  # the stores' names, in the order of the pass
        self._spans: dict[int, tuple[int, int]] = {}  # id of a loop -> (its first store, past its last)
        self._within: dict[int, frozenset[str]] = {}
        self._outside: list[bool] = []
        self._outside_init: set[str] | None = None

    def _collect(self) -> None:
        from amplint.facts.walk import children_of, trivia_types

        store_types = {getattr(cst, name) for name in _STORE_TYPES}
        loop_types = (cst.For, cst.While)
        skipped = trivia_types()
        names: list[tuple[str, ...]] = []
        outside: list[bool] = []  # for each store: is it outside an `__init__` (see `attributes_outside_init`)
        spans = self._spans
        # (node, whether its stores are outside an `__init__`), or (id of a loop, None) where the loop ends. Counted
        # outside: a module-level statement, a member of a module-level class but its `__init__`; not: a class's own
        # decorators, bases and keywords.
        stack: list = []
        for statement in reversed(self.module.body):
            if isinstance(statement, cst.ClassDef):
                body = statement.body
                stack.extend((member, not (isinstance(member, cst.FunctionDef) and member.name.value == "__init__"))
                             for member in reversed(body.body))
                stack.extend((child, False) for child in reversed(children_of(statement)) if child is not body)
            else:
                stack.append((statement, True))
        pop, push = stack.pop, stack.append
        while stack:
            item, counts = pop()
            if counts is None:  # the end of a loop
                spans[item] = (spans[item][0], len(names))
                continue
            kind = type(item)
            if kind in skipped:
                continue
            if kind in loop_types:
                spans[id(item)] = (len(names), -1)
                push((id(item), None))
            if kind in store_types:
                names.append(tuple(target_names(item.name if kind is cst.AsName else item.target)))
                outside.append(counts)
            for child in reversed(children_of(item)):
                push((child, counts))
        self._names = names
        self._outside = outside

    def within(self, node: cst.CSTNode) -> frozenset[str]:
        """What the code of a loop binds, its own target included."""
        if id(node) in self._within:
            return self._within[id(node)]
        if self._names is None:
            self._collect()
        span = self._spans.get(id(node))
        found = frozenset(name for names in self._names[span[0]:span[1]] for name in names) if span else frozenset()
        self._within[id(node)] = found
        return found

    def attributes_outside_init(self) -> set[str]:
        """Attribute chains (`self.clip`) assigned anywhere in the module outside an `__init__`."""
        if self._outside_init is None:
            if self._names is None:
                self._collect()
            self._outside_init = {name for names, counts in zip(self._names, self._outside) if counts
                                  for name in names if "." in name}
        return self._outside_init


def frames_between(frame: Frame | None, stop: Frame) -> list[Frame]:
    found = []
    while frame is not None and frame is not stop:
        found.append(frame)
        frame = frame.parent
    return found


def block_of_frame(frame: Frame) -> list | None:
    """The statements of the block that `frame` stands for."""
    node = frame.node
    if isinstance(node, cst.Module):
        return list(node.body)
    if frame.kind is FrameKind.IF and frame.in_else:
        orelse = node.orelse
        return list(orelse.body.body) if isinstance(orelse, cst.Else) and isinstance(
            orelse.body, cst.IndentedBlock) else None
    body = getattr(node, "body", None)
    return list(body.body) if isinstance(body, cst.IndentedBlock) else None
