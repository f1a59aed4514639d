"""Walking a libcst tree with a visitor, without rebuilding it.

`node.visit(visitor)` rebuilds every node it passes (libcst's visit is shared with transformers), which is
about half of a visitor's walk over a large module. `walk` makes the same calls on the visitor, in the same
order (on_visit, then on_visit_attribute / the field's children / on_leave_attribute for each field, then
on_leave), and skips the children of a node whose on_visit returns False, but only reads the tree.

The order of a node type's fields is libcst's own: the first time a type is met, one of its nodes is asked to
visit its children with a recorder that stops at each child (tests/test_walk.py compares whole walks). The few
types that visit a field only when it is set are walked by libcst itself.
"""

from __future__ import annotations

import functools

from amplint.lazy import dispatching_visitor, field_hooks_of, hook
from amplint.lazy import libcst as cst

_FIELD_ORDER: dict[type, tuple[str, ...]] = {}
# Types whose `_visit_and_replace_children` skips a field when it is None (an f-string's `{x:spec}` without a
# spec): their fields' order cannot be learnt from one node, so libcst walks them (tests/test_walk.py checks
# libcst's sources for such conditions).
CONDITIONAL_TYPES = frozenset({"FormattedStringExpression", "TemplatedStringExpression"})


class _FieldRecorder:
    """Notes the fields a node's `_visit_and_replace_children` visits, without going into the children."""

    def __init__(self) -> None:
        self.fields: list[str] = []

    def on_visit(self, node) -> bool:
        return False

    def on_leave(self, original_node, updated_node=None):
        return updated_node if updated_node is not None else original_node

    def on_visit_attribute(self, node, attribute: str) -> None:
        self.fields.append(attribute)

    def on_leave_attribute(self, original_node, attribute: str) -> None:
        pass


def _field_order(node: cst.CSTNode) -> tuple[str, ...]:
    kind = type(node)
    order = _FIELD_ORDER.get(kind)
    if order is None:
        recorder = _FieldRecorder()
        node._visit_and_replace_children(recorder)
        order = _FIELD_ORDER[kind] = tuple(dict.fromkeys(recorder.fields))
    return order


def walk(node: cst.CSTNode, visitor) -> None:
    """Call `visitor`'s hooks over the tree under `node` as `node.visit(visitor)` would (a CSTVisitor)."""
    # A visitor made by amplint.lazy.visitor_class (attribute hooks not overridden) names its field hooks: the
    # fields without one need no call at all.
    field_hooks = field_hooks_of(visitor)
    if field_hooks is None:
        _walk_every_hook(node, visitor)
        return
    conditional = _conditional_types()
    is_node = _NODE_TYPES
    # Whitespace, comments and punctuation: a dispatching visitor with no hook for them would only be called
    # to do nothing there, on about half the nodes of a tree.
    skipped = _trivia_types() if _ignores_trivia(type(visitor)) else frozenset()
    # With the dispatching on_visit/on_leave, the node hooks are looked up once per node type and called directly
    # (none at all for a type without one); a visitor's own on_visit/on_leave is called at every node.
    base = dispatching_visitor()
    own_visit = type(visitor).on_visit is not base.on_visit
    own_leave = type(visitor).on_leave is not base.on_leave
    on_visit, on_leave = visitor.on_visit, visitor.on_leave
    plans: dict[type, tuple] = {}

    # Iterative, so that no depth of nesting reaches Python's recursion limit (a 2,000-term `a + a + ...` is
    # 2,000 levels deep): `stack` holds what is left to do, last first: nodes to visit, and the hook calls due
    # after their children, as (hook, argument) or (hook, argument, argument).
    stack: list = [node]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        item = pop()
        kind = type(item)
        if kind is tuple:
            if len(item) == 2:
                item[0](item[1])
            else:
                item[0](item[1], item[2])
            continue
        if kind in skipped:
            continue
        if kind in conditional:
            item.visit(visitor)
            continue
        plan = plans.get(kind)
        if plan is None:
            plan = plans[kind] = _plan(type(visitor), kind, item, field_hooks)
        visit, leave, fields = plan
        if own_leave:
            push((on_leave, item))
        elif leave is not None:
            push((leave, visitor, item))
        if own_visit:
            if not on_visit(item):
                continue
        elif visit is not None and visit(visitor, item) is False:
            continue
        todo: list = []  # in the order of the calls; reversed onto the stack
        add = todo.append
        for field, before, after in fields:
            if before is not None:
                add((before, visitor, item))
            value = getattr(item, field)
            value_type = type(value)
            if value_type in is_node or (value_type not in _NOT_NODE_TYPES and _is_node(value_type)):
                add(value)
            elif value_type is tuple or value_type is list:
                for child in value:
                    child_type = type(child)
                    if child_type in is_node or (child_type not in _NOT_NODE_TYPES and _is_node(child_type)):
                        add(child)
            if after is not None:
                add((after, visitor, item))
        if todo:
            todo.reverse()
            extend(todo)


_NODE_TYPES: set[type] = set()  # the node types met so far (a set lookup instead of an abstract isinstance)
_NOT_NODE_TYPES: set[type] = {type(None), str, tuple, list}


def _is_node(kind: type) -> bool:
    if issubclass(kind, cst.CSTNode):
        _NODE_TYPES.add(kind)
        return True
    _NOT_NODE_TYPES.add(kind)
    return False


def _plan(visitor_type: type, kind: type, node: cst.CSTNode, field_hooks) -> tuple:
    """(visit_<Node> or None, leave_<Node> or None, (field, its visit hook or None, its leave hook or None) for
    each field in libcst's order): what walking a node of this type calls on a dispatching visitor."""
    return (hook(visitor_type, f"visit_{kind.__name__}"), hook(visitor_type, f"leave_{kind.__name__}"),
            field_hooks(kind, _FIELD_ORDER.get(kind) or _field_order(node)))


def _walk_every_hook(node: cst.CSTNode, visitor) -> None:
    """`walk` for a visitor whose attribute hooks are its own: every on_visit_attribute/on_leave_attribute."""
    node_type = cst.CSTNode
    on_visit, on_leave = visitor.on_visit, visitor.on_leave
    on_visit_attribute, on_leave_attribute = visitor.on_visit_attribute, visitor.on_leave_attribute
    conditional = _conditional_types()
    stack: list = [node]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        item = pop()
        if type(item) is tuple:
            if len(item) == 2:
                item[0](item[1])
            else:
                item[0](item[1], item[2])
            continue
        kind = type(item)
        if kind in conditional:
            item.visit(visitor)
            continue
        push((on_leave, item))
        if not on_visit(item):
            continue
        order = _FIELD_ORDER.get(kind) or _field_order(item)
        todo: list = []
        add = todo.append
        for field in order:
            add((on_visit_attribute, item, field))
            _children(getattr(item, field), add, node_type)
            add((on_leave_attribute, item, field))
        if todo:
            todo.reverse()
            extend(todo)


def children_of(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The node's children in the order libcst visits them (`node.children`, read from the fields directly)."""
    kind = type(node)
    if kind in _conditional_types():
        return list(node.children)
    found: list = []
    add, node_type = found.append, cst.CSTNode
    for field in _FIELD_ORDER.get(kind) or _field_order(node):
        _children(getattr(node, field), add, node_type)
    return found


def significant_children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """`children_of` less the trivia (whitespace, comments, punctuation; see `_trivia_types`)."""
    kind = type(node)
    trivia = _trivia_types()
    if kind in _conditional_types():
        return [child for child in node.children if type(child) not in trivia]
    found: list = []
    add, is_node, not_node = found.append, _NODE_TYPES, _NOT_NODE_TYPES
    for field in _FIELD_ORDER.get(kind) or _field_order(node):
        value = getattr(node, field)
        value_type = type(value)
        if value_type in is_node or (value_type not in not_node and _is_node(value_type)):
            if value_type not in trivia:
                add(value)
        elif value_type is tuple or value_type is list:
            for child in value:
                child_type = type(child)
                if (child_type in is_node or (child_type not in not_node and _is_node(child_type))) \
                        and child_type not in trivia:
                    add(child)
    return found


def trivia_types() -> frozenset[type]:
    """Types holding only whitespace, comments and fixed tokens (see `_trivia_types`)."""
    return _trivia_types()


def _children(value, add, node_type) -> None:
    """The nodes of one field's value, in order."""
    if isinstance(value, node_type):
        add(value)
    elif type(value) in (list, tuple):
        for child in value:
            if isinstance(child, node_type):
                add(child)


@functools.lru_cache(maxsize=None)
def _trivia_types() -> frozenset[type]:
    """Node types holding nothing but whitespace, comments and fixed tokens, and only such nodes below them
    (tests/test_walk.py checks both on every fixture): the whitespace nodes, the operators and punctuation
    (`,` `.` `:` `=` `+` `==` `not`...), and brackets."""
    from libcst._nodes import op, whitespace

    kinds = {kind for module in (op, whitespace) for kind in vars(module).values()
             if isinstance(kind, type) and issubclass(kind, cst.CSTNode) and kind.__module__ == module.__name__}
    kinds |= {cst.LeftParen, cst.RightParen, cst.LeftSquareBracket, cst.RightSquareBracket, cst.LeftCurlyBrace,
              cst.RightCurlyBrace}
    return frozenset(kinds)


@functools.lru_cache(maxsize=None)
def _ignores_trivia(visitor_type: type) -> bool:
    """A dispatching visitor class that has no hook (visit_, leave_, or a field hook) for a trivia type, and
    either keeps the dispatching `on_visit`/`on_leave` or says that its own ignore trivia (`walks_trivia = False`):
    calling it on trivia would do nothing."""
    names = {kind.__name__ for kind in _trivia_types()}
    if any(attribute.startswith(("visit_", "leave_")) and attribute.split("_")[1] in names
           and hook(visitor_type, attribute) is not None for attribute in dir(visitor_type)):
        return False
    base = dispatching_visitor()
    return getattr(visitor_type, "walks_trivia", True) is False or (
        visitor_type.on_visit is base.on_visit and visitor_type.on_leave is base.on_leave)


@functools.lru_cache(maxsize=None)
def _conditional_types() -> frozenset[type]:
    return frozenset(getattr(cst, name) for name in CONDITIONAL_TYPES if hasattr(cst, name))
