"""`walk` (amplint/facts/walk.py) calls a visitor's hooks exactly as libcst's own `visit` does."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from amplint.facts.walk import _trivia_types, walk
from amplint.lazy import visitor_class

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SOURCES = sorted(FIXTURES.glob("AMP*/*/*.py"))
EXTRA = [
    "x = a() if b() else c()\nf = lambda y=d(): e(y)\n",
    "@deco(1)\nclass C(Base, metaclass=M):\n    @staticmethod\n    def f(a: int = g(), *b, c, **d) -> h():\n        return [i for i in j() if k(i)]\n",
    "async def f():\n    async with a() as b, c():\n        async for d in e():\n            await f(*g, **h)\n",
    "match x:\n    case [1, *rest] if rest:\n        pass\n    case {'k': v, **kw}:\n        pass\n    case P(a=1) | None:\n        pass\n",
    "try:\n    pass\nexcept* E as e:\n    raise X from e\nfinally:\n    del a[b:c:d], e.f\n",
    "global g\nx: int\ny = z = (w := 1)\nprint(f'{x!r:>{w}}', *[1], **{})\nassert a, b\n",
]


class Recorder:
    """Logs every hook call; skips the children of lambdas (on_visit returns False there)."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple] = []

    def on_visit(self, node) -> bool:
        self.log.append(("visit", id(node), type(node).__name__))
        return not isinstance(node, cst.Lambda)

    def on_leave(self, original_node) -> None:
        self.log.append(("leave", id(original_node)))

    def on_visit_attribute(self, node, attribute) -> None:
        self.log.append(("field", id(node), attribute))

    def on_leave_attribute(self, original_node, attribute) -> None:
        self.log.append(("end", id(original_node), attribute))


def test_only_the_known_types_visit_fields_conditionally():
    """A node type whose `_visit_and_replace_children` decides at run time which fields it visits cannot have
    its field order learnt once: walk must leave it to libcst (CONDITIONAL_TYPES). `ImportFrom` visits `names`
    in both branches of its condition."""
    import ast
    import inspect
    import textwrap

    from amplint.facts.walk import CONDITIONAL_TYPES

    conditional = set()
    for name in dir(cst):
        kind = getattr(cst, name)
        if isinstance(kind, type) and issubclass(kind, cst.CSTNode) and "_visit_and_replace_children" in vars(kind):
            tree = ast.parse(textwrap.dedent(inspect.getsource(kind._visit_and_replace_children)))
            if any(isinstance(node, (ast.If, ast.IfExp)) for node in ast.walk(tree)):
                conditional.add(name)
    assert conditional - {"ImportFrom", "LazyImportFrom"} <= CONDITIONAL_TYPES


class FieldHooks:
    """Named field hooks only (the dispatching visitor's own attribute hooks): walk calls just these."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple] = []

    def on_visit(self, node) -> bool:
        self.log.append(("visit", id(node)))
        return super().on_visit(node)

    def on_leave(self, original_node) -> None:
        super().on_leave(original_node)
        self.log.append(("leave", id(original_node)))


def add_logging_hooks(visitor: type, names: list[str]) -> None:
    """Give the class `visit_<name>` and `leave_<name>` methods that log their calls."""
    for name in names:
        for when in ("visit", "leave"):
            tag = f"{when}_{name}"
            setattr(visitor, tag, lambda self, node, tag=tag: self.log.append((tag, id(node))))


add_logging_hooks(FieldHooks, ["FunctionDef_body", "FunctionDef_decorators", "With_body", "If_orelse", "Call_args",
                               "ClassDef_body", "Lambda_body", "For_body", "While_body", "Attribute_value"])


class NamedHooks:
    """A hook for every node type that is not trivia, and no on_visit/on_leave of its own: walk skips the trivia
    (whitespace, comments, punctuation), and must make every other call libcst's visit makes."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple] = []


add_logging_hooks(NamedHooks, [kind.__name__ for kind in vars(cst).values() if isinstance(kind, type)
                               and issubclass(kind, cst.CSTNode) and kind not in _trivia_types()]
                  + ["FunctionDef_body", "Call_args", "With_body", "Lambda_body"])


@pytest.mark.parametrize("hooks", [Recorder, FieldHooks, NamedHooks], ids=["all", "field-hooks", "named-hooks"])
@pytest.mark.parametrize("text", [p.read_text() for p in SOURCES] + EXTRA,
                         ids=[str(p.relative_to(FIXTURES)) for p in SOURCES] + [f"extra-{i}" for i in range(len(EXTRA))])
def test_walk_makes_the_calls_visit_makes(text, hooks):
    """Every hook logged (nothing skipped); field hooks with the visitor's own on_visit/on_leave (nothing
    skipped); or a hook for every type but the trivia and no on_visit/on_leave of its own (the trivia skipped):
    the same calls as libcst's visit."""
    module = cst.parse_module(text)
    by_libcst, by_walk = visitor_class(hooks)(), visitor_class(hooks)()
    module.visit(by_libcst)
    walk(module, by_walk)
    assert by_walk.log == by_libcst.log
    assert len(by_walk.log) > 10


def test_named_field_hooks_are_called():
    visitor = visitor_class(FieldHooks)()
    walk(cst.parse_module("def f(x):\n    with g():\n        return h(x.y)\n"), visitor)
    tags = [entry[0] for entry in visitor.log]
    assert tags.count("visit_FunctionDef_body") == 1 and tags.count("leave_With_body") == 1
    assert "visit_Call_args" in tags and "visit_Attribute_value" in tags


@pytest.mark.parametrize("text", [p.read_text() for p in SOURCES] + EXTRA,
                         ids=[str(p.relative_to(FIXTURES)) for p in SOURCES] + [f"extra-{i}" for i in range(len(EXTRA))])
def test_trivia_holds_only_trivia(text):
    """What walk skips under a trivia node can only be trivia: no name, call or statement hides there."""
    trivia = _trivia_types()
    stack, seen = [cst.parse_module(text)], 0
    while stack:
        node = stack.pop()
        if type(node) in trivia:
            seen += 1
            assert all(type(child) in trivia for child in node.children), type(node).__name__
        stack.extend(node.children)
    assert seen


def test_the_real_visitors_skip_trivia():
    from amplint.facts.collect import Collector
    from amplint.facts.dtypes import UncastUses
    from amplint.facts.walk import _ignores_trivia

    assert _ignores_trivia(visitor_class(Collector)) and _ignores_trivia(visitor_class(UncastUses))
    assert not _ignores_trivia(visitor_class(Recorder)) and not _ignores_trivia(visitor_class(FieldHooks))


def test_the_collector_opens_every_statement_type():
    from amplint.facts.collect import STATEMENT_TYPES
    from amplint.lazy import statement_types

    concrete = {kind.__name__ for kind in statement_types() if not kind.__name__.startswith("Base")}
    assert set(STATEMENT_TYPES) == concrete


@pytest.mark.parametrize("text", [p.read_text() for p in SOURCES[::4]] + EXTRA,
                         ids=[str(p.relative_to(FIXTURES)) for p in SOURCES[::4]] + [f"extra-{i}" for i in range(len(EXTRA))])
def test_the_collector_records_what_libcsts_visit_records(text):
    """The facts walk (node hooks called directly, trivia skipped) against libcst's own visit of the collector."""
    from amplint.facts.collect import Collector

    module = cst.parse_module(text)
    by_libcst, by_walk = visitor_class(Collector)(), visitor_class(Collector)()
    module.visit(by_libcst)
    walk(module, by_walk)

    def calls(collector):
        return [(id(c.node), id(c.frame.node), c.frame.kind, c.frame.in_else, id(c.statement), tuple(map(id, c.statements)),
                 c.index) for c in collector.calls]

    def assignments(collector):
        return [(a.targets, id(a.value), id(a.frame.node), id(a.statement), a.index) for a in collector.assignments]

    assert calls(by_walk) == calls(by_libcst)
    assert assignments(by_walk) == assignments(by_libcst)
    assert [(id(f.node), f.qualname) for f in by_walk.functions] == [(id(f.node), f.qualname) for f in by_libcst.functions]
    assert not by_walk.statements and not by_libcst.statements
