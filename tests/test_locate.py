"""Positions and fix texts built the cheap way (amplint/facts/locate.py, amplint/rules/base.py) against
libcst's own: PositionProvider's range for every node, and the whole module transformed and regenerated for
every fix any rule offers on the fixtures."""

from __future__ import annotations

import functools
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from amplint.diagnostics import Applicability
from amplint.facts import ModuleFacts
from amplint.facts.locate import Point, locate, locate_all
from amplint.facts.walk import trivia_types
from amplint.rules import ALL_RULES
from amplint.rules.base import replace_nodes
from amplint.rules.rewrite import Rewritten, rewritten_spans

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SOURCES = sorted(FIXTURES.glob("AMP*/*/*.py"))
# Layouts the fixtures may not hold: CRLF and lone CR line ends, tabs, a file without a final newline,
# one-line blocks, nested blocks, decorators, comments everywhere.
LAYOUTS = {
    "crlf": "import torch\r\nwith torch.autocast('cpu'):\r\n    y = f(x)\r\n    y.backward()\r\n",
    "cr": "import torch\rwith torch.autocast('cpu'):\r    y = f(x)\r    y.backward()\r",
    "tabs": "class A:\n\tdef f(self):\n\t\tif x:\n\t\t\ty = (1 +\n\t\t\t     2)\n\t\treturn y\n",
    "no-final-newline": "def f():\n    return g(\n        1, 2)",
    "one-liners": "if x: y = 1; z = 2\nwhile y: pass\nclass C: pass\n",
    "comments": "# head\n\n@deco(1)  # d\ndef f(a,  # a\n      b):\n    # inside\n    return (a  # x\n            + b)\n# tail\n",
}
# Statements whose text occurs more than once (the statement around them is found instead, or the whole pass).
REPEATS = [
    "for x in a:\n    step(x)\n    step(x)\nfor x in a:\n    step(x)\n    step(x)\n",
    "def f():\n    if x:\n        g()\n    if x:\n        g()\n\ndef f():\n    if x:\n        g()\n    if x:\n        g()\n",
    "class A:\n    def f(self):\n        return 1\nclass B:\n    def f(self):\n        return 1\n",
    "g()\ng()",
    "match x:\n    case 1:\n        g()\n    case 2:\n        g()\n",
]


def source_ids():
    return [str(path.relative_to(FIXTURES)) for path in SOURCES]


@pytest.mark.parametrize("text", [*(p.read_text() for p in SOURCES[::2]), *LAYOUTS.values()],
                         ids=[*source_ids()[::2], *LAYOUTS])
def test_every_node_is_where_position_provider_puts_it(text):
    """Every 2nd fixture (the other half is compared with the same provider's ranges statement by statement below,
    `test_statements_located_alone_give_position_providers_ranges`)."""
    module = cst.parse_module(text)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    nodes = list(expected)
    locations = locate(module, nodes)
    assert locations.text == module.code
    for node in nodes:
        start, end = locations.span(node)
        want = expected[node]
        assert (start.line, start.column, end.line, end.column) == (
            want.start.line, want.start.column, want.end.line, want.end.column), type(node).__name__


def _subtree(node: cst.CSTNode) -> list[cst.CSTNode]:
    nodes, stack = [], [node]
    while stack:
        current = stack.pop()
        nodes.append(current)
        stack.extend(current.children)
    return nodes


@pytest.mark.parametrize("text", [*(p.read_text() for p in SOURCES[::2]), *LAYOUTS.values()],
                         ids=[*source_ids()[::2], *LAYOUTS])
def test_a_pass_stopped_early_finds_what_the_whole_pass_finds(text):
    """With the source given, the pass stops after the module-body statement holding the last wanted node:
    everything it found (ranges, the nodes around, the indentation) is what a whole pass finds."""
    module = cst.parse_module(text)
    for statement in module.body:
        for with_ancestors in (False, True):
            wanted = _subtree(statement)
            whole = locate(module, wanted, with_ancestors=with_ancestors)
            early = locate(module, wanted, with_ancestors=with_ancestors, source=text)
            assert (early.text, whole.text) == (text, module.code)  # the same but for libcst 1.0's final lone CR
            assert set(early.found) == set(whole.found)
            for node in wanted:
                assert early.span(node) == whole.span(node)
                got, want = early.get(node), whole.get(node)
                assert (got.outer_start, got.outer_end, got.ancestors, got.indent) == (
                    want.outer_start, want.outer_end, want.ancestors, want.indent)
                assert early.offset(got.outer_end) == whole.offset(want.outer_end)


@pytest.mark.parametrize("text", [*(p.read_text() for p in SOURCES[1::2]), *LAYOUTS.values(), *REPEATS],
                         ids=[*source_ids()[1::2], *LAYOUTS, *(f"repeats-{n}" for n in range(len(REPEATS)))])
def test_statements_located_alone_give_position_providers_ranges(text):
    """With the source given and no ancestors asked for, only the statements around the wanted nodes are
    generated (found in the source by their text); `locate_all` then does the same node by node."""
    module = cst.parse_module(text)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    skipped = trivia_types()
    nodes = [node for node in expected if type(node) not in skipped]

    def check(locations, node):
        start, end = locations.span(node)
        want = expected[node]
        assert (start.line, start.column, end.line, end.column) == (
            want.start.line, want.start.column, want.end.line, want.end.column), type(node).__name__

    together = locate(module, nodes, source=text)
    for node in nodes:
        check(together, node)
    for node in nodes[::5]:
        check(locate(module, [node], source=text), node)
    locate(module, nodes[:1], source=text)  # the module's source is known from here on
    everything = locate_all(module)
    for node in nodes[::-1]:
        check(everything, node)


def test_facts_positions_asked_one_by_one_or_together_agree():
    text = (FIXTURES / "AMP001-backward-in-autocast" / "flagged").glob("*.py").__next__().read_text()
    module = cst.parse_module(text)
    expected = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    calls = [node for node in expected if isinstance(node, cst.Call)]
    one_by_one = ModuleFacts(module)
    together = ModuleFacts(module)
    together.locate(calls)
    for call in calls:
        assert one_by_one.position(call) == together.position(call)
        assert one_by_one.position(call)[0].line == expected[call].start.line


@functools.cache
def fix_rewrites(path: Path) -> tuple[tuple[str, Rewritten], ...]:
    """(rule code, Rewritten) for every fix any rule offers on one fixture file; computed when a test first asks,
    never at collection."""
    facts = ModuleFacts(cst.parse_module(path.read_text()))
    found = []
    for rule in ALL_RULES:
        for finding in rule().check(facts):
            if finding.fix is None or finding.fix.applicability is Applicability.DISPLAY_ONLY:
                continue
            rewritten = finding.fix.rewrite()
            if rewritten is not None:
                found.append((rule.code, rewritten))
    return tuple(found)


def test_the_fixtures_exercise_many_fixes():
    count = 0
    for path in SOURCES:  # stops at the hundredth (the other fixtures' fixes are the splicing test's)
        count += len(fix_rewrites(path))
        if count >= 100:
            break
    assert count >= 100


@pytest.mark.parametrize("path", SOURCES, ids=source_ids())
def test_a_fix_spliced_into_the_text_equals_the_whole_module_regenerated(path):
    for code, rewritten in fix_rewrites(path):
        assert isinstance(rewritten, Rewritten), code
        assert rewritten.code == rewritten.full_code(), code


@pytest.mark.parametrize("path", SOURCES[::2], ids=source_ids()[::2])
def test_a_fix_located_from_its_statements_splices_what_the_whole_pass_splices(path):
    """The engine locates a fix's replaced nodes with the source given: only the statements around them are
    generated; the spans a fix changes are those found with a whole pass."""
    text = path.read_text()
    for code, rewritten in fix_rewrites(path):
        module, replacements = rewritten.module, rewritten.replacements
        local = locate(module, list(replacements), with_ancestors=True, source=text)
        whole = locate(module, list(replacements), with_ancestors=True)
        for node in replacements:
            if node in whole:
                got, want = local.get(node), whole.get(node)
                assert (got.ancestors, got.indent) == (want.ancestors, want.indent), code
                assert (local.offset(got.outer_start), local.offset(got.outer_end)) == (
                    whole.offset(want.outer_start), whole.offset(want.outer_end)), code
        assert rewritten_spans(module, replacements, local) == rewritten_spans(module, replacements, whole), code


@pytest.mark.parametrize("layout", LAYOUTS)
def test_splicing_on_every_layout(layout):
    """Replace each statement in turn: a line by itself with a comment line added, a small statement (`y = 1`
    in `if x: y = 1; z = 2`) by another; and each by nothing."""
    module = cst.parse_module(LAYOUTS[layout])
    statements = [node for node in MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
                  if isinstance(node, (cst.SimpleStatementLine, cst.BaseSmallStatement))]
    assert statements
    for statement in statements:
        if isinstance(statement, cst.SimpleStatementLine):
            changed = statement.with_changes(leading_lines=[*statement.leading_lines,
                                                            cst.EmptyLine(comment=cst.Comment("# added"))])
        else:
            changed = cst.Expr(cst.Name("changed"))
        for replacement in (changed, cst.RemoveFromParent()):
            try:
                rewritten = replace_nodes(module, {statement: replacement})
                reference = rewritten.full_code()
            except Exception:  # noqa: BLE001 - removing the only statement of a block: libcst refuses both ways
                continue
            assert rewritten.code == reference
    # Every line statement at once (disjoint and nested places), and every small statement of a line at once.
    lines = {node: node.with_changes(leading_lines=[*node.leading_lines, cst.EmptyLine(comment=cst.Comment("# all"))])
             for node in statements if isinstance(node, cst.SimpleStatementLine)}
    small = {node: cst.Expr(cst.Name("changed")) for node in statements if isinstance(node, cst.BaseSmallStatement)}
    for replacements in (lines, small, {**lines, **small}):
        if replacements:
            rewritten = replace_nodes(module, replacements)
            assert rewritten.code == rewritten.full_code()


def test_a_node_is_located_by_its_statement_alone():
    """The pass generates the statement around the node, not the text before it (one token stands for that)."""
    text = "import torch\n\n\ndef f(x):\n    y = g(x)\n    return y\n\n\ndef h():\n    with torch.autocast('cpu'):\n        k(1)\n"
    module = cst.parse_module(text)
    call = module.body[2].body.body[0].body.body[0].body[0].value
    locations = locate(module, [call], source=text)
    assert locations.tokens[0] == text[:text.index("        k(1)")]
    assert locations.span(call) == (Point(11, 8), Point(11, 12))
    assert "".join(locations.tokens) == text
