"""A libcst call as the neutral `CallShape` (amplint/calls.py), whose classifier says what it does.

The project index builds the same shape from an `ast` call (amplint/index/shapes.py); the two must agree on every
call (tests/test_calls.py parses the same code with both).
"""

from __future__ import annotations

from amplint.lazy import libcst as cst

from amplint.calls import NOT_LITERAL, STARRED, UNKNOWN_VALUE, CallShape, Value
from amplint.facts.names import ImportMap, dotted_name

_CONSTANTS = {"True": True, "False": False, "None": None}


def call_shape(expr: cst.BaseExpression, imports: ImportMap | None = None) -> CallShape:
    """The shape of a call, or of a callee named without a call (`@torch.no_grad`); `imports` qualifies the callee
    and the arguments' dotted names (none without it)."""
    called = isinstance(expr, cst.Call)
    func = expr.func if called else expr
    method = receiver = None
    if isinstance(func, cst.Attribute):
        method = func.attr.value
        receiver = dotted_name(func.value)
    qualified = imports.qualify(func) if imports is not None else None
    args: list[Value] = []
    keywords: list[tuple[str | None, Value]] = []
    for arg in expr.args if called else ():
        if arg.keyword is not None:
            keywords.append((arg.keyword.value, value_of(arg.value, imports)))
        elif arg.star == "**":
            keywords.append((None, STARRED))
        else:
            args.append(STARRED if arg.star else value_of(arg.value, imports))
    return CallShape(dotted_name(func), (qualified,) if qualified else (), method, receiver, tuple(args),
                     tuple(keywords), called)


def value_of(node: cst.BaseExpression, imports: ImportMap | None = None) -> Value:
    """What the classifier reads of an argument: a literal's value, a string, or a dotted name (qualified through
    `imports`)."""
    if isinstance(node, cst.Name) and node.value in _CONSTANTS:
        return Value(literal=_CONSTANTS[node.value])
    if isinstance(node, (cst.Name, cst.Attribute)):
        dotted = dotted_name(node)
        if dotted is None:
            return UNKNOWN_VALUE
        qualified = imports.qualify(node) if imports is not None else None
        return Value(dotted, (qualified,) if qualified else ())
    if isinstance(node, (cst.SimpleString, cst.ConcatenatedString)):
        value = node.evaluated_value
        return Value(literal=value if value is not None else NOT_LITERAL, string=True)
    if isinstance(node, cst.FormattedString):
        return Value(string=True)
    if isinstance(node, (cst.Integer, cst.Float)):
        return Value(literal=node.evaluated_value)
    return UNKNOWN_VALUE
