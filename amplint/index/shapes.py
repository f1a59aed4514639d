"""An `ast` call as the neutral `CallShape` (amplint/calls.py), whose classifier says what it does.

The libcst facts build the same shape from a libcst call (amplint/facts/shapes.py); the two must agree on every
call (tests/test_calls.py parses the same code with both). The callee and dotted arguments are qualified as the
screen's `Summary.resolves` does: every import of the head counts.
"""

from __future__ import annotations

import ast
import weakref

from amplint.calls import STARRED, UNKNOWN_VALUE, CallShape, Value
from amplint.index.summary import Summary, dotted
from amplint.vocabulary import STAR_EXPORTS


def call_shape(expr: ast.AST, summary: Summary | None = None) -> CallShape:
    """The shape of a call, or of a callee named without a call (`@torch.no_grad`); `summary` (its imports)
    qualifies the callee and the arguments' dotted names (none without it)."""
    return _shape(expr, summary, inner=True)


def _shape(expr: ast.AST, summary: Summary | None, inner: bool) -> CallShape:
    called = type(expr) is ast.Call
    func = expr.func if called else expr
    method = receiver = on = None
    if type(func) is ast.Attribute:
        method = func.attr
        receiver = dotted(func.value)
        if inner and type(func.value) is ast.Call:
            on = _shape(func.value, summary, inner=False)
    name = dotted(func)
    args = tuple(STARRED if type(arg) is ast.Starred else value_of(arg, summary) for arg in expr.args) \
        if called else ()
    keywords = tuple((keyword.arg, value_of(keyword.value, summary) if keyword.arg is not None else STARRED)
                     for keyword in expr.keywords) if called else ()
    on_module = receiver is not None and summary is not None and receiver in modules(summary)
    return CallShape(name, qualified(name, summary), method, receiver, args, keywords, called, on_module, on)


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


_MODULES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # summary -> `modules`


def modules(summary: Summary) -> frozenset[str]:
    """The dotted names that are modules an `import` statement binds (`hm` of `import helpers as hm`; `a`, `a.b`
    of `import a.b`), their head bound by no `from` import (as the facts layer's `ImportMap.is_module`)."""
    found = _MODULES.get(summary)
    if found is None:
        bound, taken = set(), set()
        for node in summary.import_nodes:
            if type(node) is ast.Import:
                for alias in node.names:
                    if alias.asname:
                        bound.add(alias.asname)
                    else:
                        parts = alias.name.split(".")
                        bound.update(".".join(parts[:end]) for end in range(1, len(parts) + 1))
            elif node.module and not node.level:  # a relative import binds nothing known (as the facts layer)
                for alias in node.names:
                    star = alias.name == "*"
                    taken.update(STAR_EXPORTS.get(node.module, ()) if star else (alias.asname or alias.name,))
        found = _MODULES[summary] = frozenset(name for name in bound if name.partition(".")[0] not in taken)
    return found
