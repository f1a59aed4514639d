"""An `ast` call as the neutral `CallShape` (amplint/calls.py), whose classifier says what it does.

The libcst facts build the same shape from a libcst call (amplint/facts/shapes.py); the two must agree on every
call (tests/test_calls.py parses the same code with both). The callee and dotted arguments are qualified as the
screen's `Summary.resolves` does: every import of the head counts.
"""

from __future__ import annotations

import ast

from amplint.calls import STARRED, UNKNOWN_VALUE, CallShape, Value
from amplint.index.summary import Summary, dotted


def call_shape(expr: ast.AST, summary: Summary | None = None) -> CallShape:
    """The shape of a call, or of a callee named without a call (`@torch.no_grad`); `summary` (its imports)
    qualifies the callee and the arguments' dotted names (none without it)."""
    called = type(expr) is ast.Call
    func = expr.func if called else expr
    method = receiver = None
    if type(func) is ast.Attribute:
        method = func.attr
        receiver = dotted(func.value)
    name = dotted(func)
    args = tuple(STARRED if type(arg) is ast.Starred else value_of(arg, summary) for arg in expr.args) \
        if called else ()
    keywords = tuple((keyword.arg, value_of(keyword.value, summary) if keyword.arg is not None else STARRED)
                     for keyword in expr.keywords) if called else ()
    return CallShape(name, qualified(name, summary), method, receiver, args, keywords, called)


def value_of(node: ast.AST, summary: Summary | None = None) -> Value:
    """What the classifier reads of an argument: a literal's value, a string, or a dotted name (qualified through
    the summary's imports)."""
    kind = type(node)
    if kind is ast.Constant:
        return Value(literal=node.value, string=isinstance(node.value, (str, bytes)))
    if kind is ast.JoinedStr:
        return Value(string=True)
    if kind is ast.Name or kind is ast.Attribute:
        name = dotted(node)
        return Value(name, qualified(name, summary)) if name is not None else UNKNOWN_VALUE
    return UNKNOWN_VALUE


def qualified(name: str | None, summary: Summary | None) -> tuple[str, ...]:
    """Every qualified name the dotted `name` may stand for through the file's imports (`Summary.resolves`)."""
    if name is None or summary is None:
        return ()
    head, _, rest = name.partition(".")
    return tuple(sorted(f"{target}.{rest}" if rest else target
                        for target in summary.qualified_imports.get(head, ())))
