"""A long module parsed in pieces (amplint/parsing.py) gives the same code and tree as libcst's whole parse."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from amplint import parsing

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SOURCES = sorted(FIXTURES.glob("AMP*/*/*.py"))
# Layouts between and after top-level statements that a cut must respect.
LAYOUTS = {
    "comments-and-blanks": "import torch\n\n\n# about f\n\n# more\ndef f():\n    return 1\n\n\nx = f()\n# tail\n",
    "indented-trailing-comment": "def f():\n    x = 1\n    # still f\n\n# about g\ndef g():\n    pass\n",
    "spaces-only-lines": "def f():\n    return 1\n\n   \n\ndef g():\n    return 2\n    \n\ny = g()\n",
    "crlf": "import os\r\n\r\ndef f():\r\n    return 1\r\n\r\n\r\nclass A:\r\n    x = 1\r\n",
    "decorators": "import functools\n\n@functools.cache\n@other\ndef f():\n    pass\n\n@dataclass\nclass C:\n    a: int\n",
    "one-liners": "if x: y = 1\nwhile y: y -= 1\nclass E(Exception): pass\nz = 1; w = 2\n",
    "tabs": "def f():\n\treturn 1\n\ndef g():\n\tif x:\n\t\treturn 2\n",
    "different-indents": "def f():\n  return 1\n\ndef g():\n    return 2\n\ndef h():\n        return 3\n",
    "strings-at-column-0": 'DOC = """\ndef fake():\n    pass\n"""\n\ndef real():\n    return DOC\n',
    "continuation": "total = 1 + \\\n    2\n\ndef f():\n    return total\n",
    "no-final-newline": "def f():\n    return 1\n\ndef g():\n    return 2",
    "syntax-error": "def f():\n    return 1\n\ndef g(:\n    pass\n",
}


@pytest.fixture
def tiny_pieces(monkeypatch):
    """Pieces of a few lines, so that small texts are cut at almost every top-level statement."""
    monkeypatch.setattr(parsing, "CHUNK_LINES", 2)


def ids():
    return [str(path.relative_to(FIXTURES)) for path in SOURCES] + list(LAYOUTS)


@pytest.mark.parametrize("text", [p.read_text() for p in SOURCES] + list(LAYOUTS.values()), ids=ids())
def test_pieces_join_into_the_whole_parse(tiny_pieces, text):
    try:
        whole = cst.parse_module(text)
    except cst.ParserSyntaxError:
        with pytest.raises(cst.ParserSyntaxError):
            parsing.parse_module(text)
        return
    joined = parsing.parse_module(text)
    assert joined.code == text
    assert joined.deep_equals(whole)
    assert (joined.default_indent, joined.default_newline, joined.has_trailing_newline) == (
        whole.default_indent, whole.default_newline, whole.has_trailing_newline)


def test_long_texts_are_cut(tiny_pieces, monkeypatch):
    text = LAYOUTS["comments-and-blanks"] * 3
    parsed = []
    real = cst.parse_module
    monkeypatch.setattr(parsing.cst, "parse_module", lambda piece: parsed.append(piece) or real(piece))
    module = parsing.parse_module(text)
    assert len(parsed) > 1 and "".join(parsed) == text
    assert module.deep_equals(real(text))


def test_short_texts_are_parsed_whole(monkeypatch):
    parsed = []
    real = cst.parse_module
    monkeypatch.setattr(parsing.cst, "parse_module", lambda piece: parsed.append(piece) or real(piece))
    parsing.parse_module(LAYOUTS["decorators"])
    assert parsed == [LAYOUTS["decorators"]]


# Nesting: the guard before libcst ------------------------------------------------------------------------------
# One construct per entry, `n` levels deep, as amplint/parsing.py's measurements of libcst write them.
DEEP = {
    "binary operators": lambda n: "x = " + " + ".join(["a"] * (n + 1)) + "\n",
    "and": lambda n: "x = " + " and ".join(["a"] * (n + 1)) + "\n",
    "adjacent strings": lambda n: "x = " + " ".join(['"a"'] * n) + "\n",
    "brackets": lambda n: "x = " + "(" * n + "a" + ")" * n + "\n",
    "calls": lambda n: "x = " + "f(" * n + "a" + ")" * n + "\n",
    "subscripts": lambda n: "x = " + "a[" * n + "a" + "]" * n + "\n",
    "attributes": lambda n: "x = a" + ".b" * n + "\n",
    "method calls": lambda n: "x = a" + ".b()" * n + "\n",
    "subscript chains": lambda n: "x = a" + "[0]" * n + "\n",
    "prefixes": lambda n: "x = " + "not " * n + "a\n",
    "conditional expressions": lambda n: "x = " + "a if b else " * n + "a\n",
    "lambdas": lambda n: "x = " + "lambda: " * n + "a\n",
}


@pytest.mark.parametrize("construct", list(DEEP))
def test_nesting_grows_with_every_deep_construct(construct):
    """Each construct that makes libcst's tree deeper counts at least one level per level (so that the guard
    sees it), and no construct counts more than 7 (so that what CPython accepts stays well under the limit)."""
    make = DEEP[construct]
    for levels in (10, 100):
        depth = parsing.nesting(make(levels)).depth
        assert levels <= depth <= 7 * levels + 7, (construct, levels, depth)


@pytest.mark.parametrize("text", [
    "x = a < b < c < d < e < f < g < h\n",  # comparisons are flat in libcst
    'x = "((((((((((+++++++++" # (((((((((( and and and\n',  # strings and comments hold no code
    "x = '''\n((((((((((\n''' + 1\n",
    "x = [\n    1,\n    2,\n    3,\n" + "    4,\n" * 5000 + "]\n",  # a long literal is wide, not deep
    "a = 1\n" * 5000,
])
def test_nesting_ignores_what_does_not_deepen_the_tree(text):
    assert parsing.nesting(text).depth < 10


def test_products_in_a_long_sum_are_operands_side_by_side():
    """Generated polynomials (sympy ships a 4,000-operator one): a run of `+` nests, the products between them
    do not add up (an upper bound counting every operator would refuse such a file, which CPython compiles)."""
    terms = [f"{k}*s1**{k % 5}*s2*s3**2" for k in range(1, 301)]
    depth = parsing.nesting("x = (" + " + ".join(terms) + ")\n").depth
    assert 299 <= depth < 320


def test_nesting_points_at_the_deepest_logical_line():
    text = "import torch\n\ny = (\n  1 +\n  2)\nx = " + " + ".join(["a"] * 50) + "\nz = 1\n"
    measured = parsing.nesting(text)
    assert measured.depth == 49 and text[measured.offset:].startswith("x = a + a")


@pytest.mark.parametrize("path", SOURCES, ids=[str(path.relative_to(FIXTURES)) for path in SOURCES])
def test_real_code_is_far_below_the_limit(path):
    """Every fixture (real training code) nests far below MAX_NESTING, and below the depth at which the
    recursion limit is raised at all."""
    assert parsing.nesting(path.read_text()).depth < parsing._ROOMY


def _tree_depth(module: cst.CSTNode) -> int:
    """The depth of a libcst tree in nodes, found without recursion."""
    deepest, stack = 0, [(module, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack += [(child, depth + 1) for child in node.children]
    return deepest


LEAVES = ["a", "1", '"s"', "f()", "a.b", "x[0]"]
# Ways to make an expression `e` deeper, with a leaf `l`.
# Each yields valid code whatever `e` is (parentheses are no node of their own in libcst's tree): an expression
# that did not parse would be an example lost.
WRAPS = ["{e} + {l}", "{l} * {e}", "{e} ** {l}", "{e} and {l}", "{l} or {e}", "{e} < {l}", "({e})", "[{e}, 1]",
         "f({e}, k=1)", "({e}).b", "x[{e}]", "(not {e})", "-{e}", "(lambda: {e})", "({e} if {l} else 1)",
         "('p' 's', {e})", "{{{l}: {e}}}", "({e}).c()"]


def _expression():
    """Expressions built by wrapping a leaf in random ways, up to 40 deep (generated cheaply)."""
    from hypothesis import strategies as st

    steps = st.lists(st.tuples(st.sampled_from(WRAPS), st.sampled_from(LEAVES)), max_size=40)

    def build(leaf_and_steps):
        expression = leaf_and_steps[0]
        for wrap, leaf in leaf_and_steps[1]:
            expression = wrap.format(e=expression, l=leaf)
        return expression

    return st.tuples(st.sampled_from(LEAVES), steps).map(build)


def test_nesting_bounds_the_depth_of_libcsts_tree():
    """For generated expressions, `nesting` bounds the depth of the expression's tree in libcst's nodes (with
    the whitespace and operator nodes at its leaves), within a factor of 2: the guard sees every deep tree."""
    from hypothesis import given, settings

    @settings(max_examples=50, deadline=None)
    @given(_expression())
    def check(expression):
        text = f"x = {expression}\n"
        module = cst.parse_module(text)  # every generated expression parses: none is skipped
        expression_depth = _tree_depth(module.body[0].body[0].value)
        assert expression_depth <= 2 * parsing.nesting(text).depth + 4

    check()


def test_a_text_nested_too_deeply_is_refused_before_libcst(monkeypatch):
    """libcst is not called at all: it would crash the process (see the measurements in amplint/parsing.py)."""
    monkeypatch.setattr(cst, "parse_module", lambda text: pytest.fail("libcst was called"))
    with pytest.raises(parsing.TooDeeplyNested, match=r"too deeply nested to analyse \(depth 2,500, limit 2,000\)"):
        parsing.parse_module("import torch\n" + DEEP["binary operators"](2500))
