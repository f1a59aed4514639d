"""AMP011's table of what a module binds (one pass) against a visitor over each loop and each class member."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from amplint.facts.collect import target_names
from amplint.facts.loops import Stores

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SOURCES = sorted(FIXTURES.glob("AMP*/*/*.py"))[::3]
LAYOUTS = [
    "for i in range(3):\n    with open(f) as (a, self.b):\n        del self.c, d\n    while (n := n - 1):\n        e.f += 1\n",
    "class A(B, metaclass=(m := M)):\n    x: int = 1\n    def __init__(self):\n        self.k = 1\n"
    "    @deco(z := 1)\n    def g(self):\n        for self.i in y:\n            self.j: int = 2\n",
    "class C: self.a = 1; b = 2\nself.d = 3\ndef f():\n    class D:\n        def __init__(self):\n            self.e = 1\n",
]


def reference(node: cst.CSTNode) -> set[str]:
    stored: set[str] = set()

    class Reference(cst.CSTVisitor):
        def visit_AssignTarget(self, target):
            stored.update(target_names(target.target))

        def visit_AugAssign(self, assign):
            stored.update(target_names(assign.target))

        def visit_AnnAssign(self, assign):
            stored.update(target_names(assign.target))

        def visit_For(self, loop):
            stored.update(target_names(loop.target))

        def visit_AsName(self, name):
            stored.update(target_names(name.name))

        def visit_NamedExpr(self, expr):
            stored.update(target_names(expr.target))

        def visit_Del(self, statement):
            stored.update(target_names(statement.target))

    node.visit(Reference())
    return stored


def outside_init(module: cst.Module) -> set[str]:
    stored: set[str] = set()
    for statement in module.body:
        if isinstance(statement, cst.ClassDef):
            for member in statement.body.body:
                if not (isinstance(member, cst.FunctionDef) and member.name.value == "__init__"):
                    stored |= reference(member)
        else:
            stored |= reference(statement)
    return {name for name in stored if "." in name}


@pytest.mark.parametrize("text", [*(p.read_text() for p in SOURCES), *LAYOUTS],
                         ids=[*(str(p.relative_to(FIXTURES)) for p in SOURCES), *map(str, range(len(LAYOUTS)))])
def test_the_table_binds_what_a_visitor_finds(text):
    module = cst.parse_module(text)
    loops = []

    class Loops(cst.CSTVisitor):
        def visit_For(self, node):
            loops.append(node)

        def visit_While(self, node):
            loops.append(node)

    module.visit(Loops())
    stores = Stores(module)
    for loop in loops:
        assert stores.within(loop) == reference(loop)
    assert stores.attributes_outside_init() == outside_init(module)


def test_the_layouts_bind_what_they_say():
    stores = Stores(cst.parse_module(LAYOUTS[1]))
    assert stores.attributes_outside_init() == {"self.i", "self.j"}
