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
