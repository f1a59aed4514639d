"""AMP006 across calls: a disabled region fed values that the callers' autocast made low precision.

The fixtures hold the patterns (fixtures/AMP006-*/flagged, clean, projects); these tests hold what fixtures
cannot: a cached result follows the callers in other modules, and the small pieces the rule rests on."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import libcst
import pytest
from click.testing import CliRunner

from amplint.cli import main
from amplint.facts import ModuleFacts
from amplint.facts.dtypes import is_scalar, module_output
from amplint.index.functions import FunctionRecord, returned_items
from amplint.facts.islands import scalar_parameters

REPO = Path(__file__).resolve().parents[1]
CASE = REPO / "fixtures" / "AMP006-disabled-autocast-without-cast" / "projects" / "forward_called_from_train"


def _amp006(folder: Path) -> list[tuple[str, int]]:
    result = CliRunner().invoke(main, ["check", str(folder), "--select", "AMP006", "--output-format", "json",
                                       "--cache-dir", str(folder.parent / "cache")], catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    return sorted((Path(d["filename"]).name, d["location"]["row"]) for d in json.loads(result.output))


def test_finding_does_not_depend_on_where_the_caller_runs_it(tmp_path):
    """model.py's island is its own evidence: moving train.py's call out of its region (model.py unchanged, its
    cached result at hand) leaves the finding as it is, and moving it back too."""
    folder = tmp_path / "project"
    shutil.copytree(CASE, folder)
    assert _amp006(folder) == [("model.py", 17)]
    train = folder / "train.py"
    text = train.read_text()
    outside = text.replace("        with torch.autocast(\"cuda\", dtype=torch.float16):\n            out = net(x)\n",
                           "        out = net(x)\n        with torch.autocast(\"cuda\", dtype=torch.float16):\n")
    assert outside != text
    train.write_text(outside)
    assert _amp006(folder) == [("model.py", 17)]
    train.write_text(text)
    assert _amp006(folder) == [("model.py", 17)]


def _function(source: str) -> libcst.FunctionDef:
    return libcst.parse_module(source).body[0]


def test_scalar_parameters_are_known_by_annotation_or_default():
    function = _function("def f(x, k: int, flag: bool = False, eps=1e-6, name='a', mask=None, n=-1, t: float = 2): pass")
    assert scalar_parameters(function) == {"k", "flag", "eps", "name", "n", "t"}


@pytest.mark.parametrize(("text", "expected"), [
    ("x.shape[1]", True), ("x.size(0)", True), ("len(x)", True), ("n * 2 + 1", True), ("x.ndim", True),
    ("x", False), ("x[0]", False), ("x.sum()", False), ("size(x)", False), ("n * x", False),
])
def test_is_scalar(text, expected):
    assert is_scalar(libcst.parse_expression(text), {"n"}) is expected


@pytest.mark.parametrize(("construction", "expected"), [
    ("nn.Linear(4, 4)", "low"), ("nn.Linear(4, 4).to(device)", "low"), ("nn.Embedding(10, 4)", "keep"),
    ("nn.LayerNorm(4)", "float32"), ("nn.Sequential(nn.Linear(4, 4), nn.ReLU())", "low"),
    ("nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), nn.Dropout())", "float32"),
    ("nn.Sequential(nn.Dropout(), Custom())", None), ("Custom()", None),
])
def test_module_output(construction, expected):
    source = f"from torch import nn\nm = {construction}\nm(x)\n"
    facts = ModuleFacts(libcst.parse_module(source))
    call = libcst.parse_expression("m")
    assert module_output(facts, call, None) == expected


def test_long_names_get_a_shorter_message():
    """The message keeps within 120 characters: long names drop the cast's spelling, then the reason."""
    from amplint.facts.islands import Source

    source = Source("`{name}` enters the fp32 region at line 12 without `.float()`: {dtype} under the callers' "
                    "autocast")
    assert source.text("h") == ("`h` enters the fp32 region at line 12 without `.float()`: bfloat16/float16 under "
                                "the callers' autocast")
    for name in ("hidden_states_after_the_attention", "x" * 60):
        text = source.text(name)
        assert f"`{name}` enters the fp32 region at line 12" in text and (len(text) <= 120 or len(name) > 40)


@pytest.mark.parametrize(("source", "expected"), [
    # an entry built integer, and one taken from a helper's tuple then only moved (`transpose`), or cast
    ("def f(x):\n    n = (x > 0).sum(-1).long()\n    return {'n': n, 'h': x}\n", {"k:n": ()}),
    ("def f(self, x):\n    d = None\n    if x is not None:\n        d, s = self.align(x)\n        d = d.transpose(0, 1)\n"
     "    out = {'m': x.float()}\n    out['d'] = d\n    return out\n",
     {"k:d": (("self.align", "p:0"),), "k:m": ()}),
    # a dict handed to a call may change there; a `**` entry may be anything: nothing is known
    ("def f(x):\n    out = {'n': x.int()}\n    fill(out)\n    return out\n", {}),
    ("def f(x, extra):\n    return {'n': x.int(), **extra}\n", {}),
    # a tuple: by position; a name bound once to a float op is not known
    ("def f(x):\n    n = None\n    if x is not None:\n        n = x.sum()\n    return n.int(), n\n", {"p:0": ()}),
    ("def f(x):\n    return {'n': x.int()} if x else None\n", {}),
])
def test_returned_items_are_known_only_when_every_binding_says_so(source, expected):
    function = ast.parse(source).body[0]
    params = tuple(a.arg for a in function.args.args)
    assert returned_items(function, params) == expected
    summary = FunctionRecord("f", 1, params, items=expected)
    assert FunctionRecord.from_json(json.loads(json.dumps(summary.to_json()))).items == expected
