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

from amplint.lazy import field_hooks_of
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
    node_type = cst.CSTNode
    on_visit, on_leave = visitor.on_visit, visitor.on_leave
    on_visit_attribute, on_leave_attribute = visitor.on_visit_attribute, visitor.on_leave_attribute
    # A visitor made by amplint.lazy.visitor_class (attribute hooks not overridden) names its field hooks: the
    # fields without one need no call at all.
    field_hooks = field_hooks_of(visitor)
    conditional = _conditional_types()

    def visit(node) -> None:
        kind = type(node)
        if kind in conditional:
            node.visit(visitor)
            return
        if on_visit(node):
            order = _FIELD_ORDER.get(kind) or _field_order(node)
            if field_hooks is not None:
                for field, before, after in field_hooks(kind, order):
                    if before is not None:
                        before(visitor, node)
                    _children(getattr(node, field))
                    if after is not None:
                        after(visitor, node)
            else:
                for field in order:
                    on_visit_attribute(node, field)
                    _children(getattr(node, field))
                    on_leave_attribute(node, field)
        on_leave(node)

    def _children(value) -> None:
        if isinstance(value, node_type):
            visit(value)
        elif type(value) in (list, tuple):
            for child in value:
                if isinstance(child, node_type):
                    visit(child)

    visit(node)


@functools.lru_cache(maxsize=None)
def _conditional_types() -> frozenset[type]:
    return frozenset(getattr(cst, name) for name in CONDITIONAL_TYPES if hasattr(cst, name))
