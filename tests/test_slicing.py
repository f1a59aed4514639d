"""Sliced analysis (amplint/facts/slicing.py) equals whole-file analysis.

For every fixture program (flagged, clean, fixed, runtime, projects), as it is and padded with code no rule
needs (so that something is blanked), and for generated programs mixing training code with unrelated
functions, methods and the traps slicing must not fall into (aliases of the AMP API, attributes assigned in
unrelated methods, helpers called in a loop, quotes), the diagnostics (codes, positions, messages, source
lines, fixes' edits) and `fix_text`'s output are the same with `AMPLINT_SLICING=always` as with `off`.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amplint.cli import main
from amplint.engine import lint_text
from amplint.facts.slicing import ENVIRONMENT, Slice, slice_module, string_quotes, wordless_functions
from amplint.fixer import fix_text
from amplint.rules import ALL_RULES

from test_fixtures import FIXTURES, fixture_id

RULES = [rule() for rule in ALL_RULES]
# Every fixture where a finding or a fix is (flagged, fixed, runtime, projects), and every 2nd clean one (the
# clean folders hold many near twins of one shape; a slice that made a finding appears would show in either half).
_ALL_PROGRAMS = sorted(path for path in FIXTURES.glob("AMP*-*/**/*.py"))
PROGRAMS = [path for path in _ALL_PROGRAMS if path.parent.name != "clean"] + \
    [path for path in _ALL_PROGRAMS if path.parent.name == "clean"][::2]

# Code no rule needs, with what must survive blanking: a method whose class body blanking empties (`pass`),
# decorators, comments after a method's last line, f-strings with quotes, both quote styles.
PADDING = '''

def _unrelated_total(values, width=8):
    # a helper no rule reads
    total = 0
    for value in values:
        total += value * 2
    return f"{total!r:>{width}}" if values else 'none'


class _UnrelatedRecord:
    def __init__(self, name):
        self.name = name

    @staticmethod
    def describe(name):
        return "record %s" % name
        # a comment after the method's last line


class _UnrelatedEmpty:
    def only(self):
        return {'a': "b"}
'''


def _outcomes(text: str, monkeypatch, how: str, fix: bool) -> tuple:
    monkeypatch.setenv(ENVIRONMENT, how)
    diagnostics = lint_text(text, "program.py", RULES).diagnostics
    fixed = fix_text(text, "program.py", RULES, unsafe=True).text if fix else None
    return diagnostics, fixed


def assert_same(text: str, monkeypatch, fix: bool = True) -> Slice | None:
    """The sliced and the whole analysis of `text` agree; the slice (None: nothing to blank)."""
    sliced = slice_module(text, "always")
    if sliced is not None:
        assert len(sliced.text) == len(text)
        assert [i for i, c in enumerate(sliced.text) if c in "\r\n"] == [i for i, c in enumerate(text) if c in "\r\n"]
    whole = _outcomes(text, monkeypatch, "off", fix)
    assert _outcomes(text, monkeypatch, "always", fix) == whole
    return sliced


@pytest.mark.parametrize("path", PROGRAMS, ids=fixture_id)
def test_sliced_analysis_equals_whole_on_every_fixture(path: Path, monkeypatch) -> None:
    """The file as it is (its findings and their edits) and padded (also `fix_text`'s output for a flagged file:
    the padded text holds the file's own code, sliced as in the file alone, and blanked code around it)."""
    text = path.read_text(encoding="utf-8")
    flagged = "/flagged/" in path.as_posix()
    assert_same(text, monkeypatch, fix=False)
    padded = text + PADDING
    assert assert_same(padded, monkeypatch, fix=flagged) is not None  # the padding is blanked at least


def test_padding_is_blanked_and_findings_stay() -> None:
    program = (FIXTURES / "AMP007-deprecated-amp-api" / "flagged").glob("*.py")
    text = next(iter(sorted(program))).read_text(encoding="utf-8") + PADDING
    sliced = slice_module(text, "always")
    assert "_unrelated_total" not in sliced.text and "class _UnrelatedEmpty:" in sliced.text
    assert "    pass" in sliced.text.split("class _UnrelatedEmpty:")[1]  # the emptied class body
    compile(sliced.text, "sliced.py", "exec")


PROJECT_CASES = sorted(path for path in FIXTURES.glob("AMP*-*/projects/*") if path.is_dir())


@pytest.mark.parametrize("case", PROJECT_CASES, ids=fixture_id)
def test_sliced_analysis_equals_whole_on_project_fixtures(case: Path, tmp_path: Path, monkeypatch) -> None:
    """Each project case linted as a directory (the index asked about calls that leave a module), padded."""
    copy = tmp_path / case.name
    shutil.copytree(case, copy)
    for path in copy.rglob("*.py"):
        path.write_text(path.read_text(encoding="utf-8") + PADDING, encoding="utf-8")
    outputs = []
    for how in ("off", "always"):
        monkeypatch.setenv(ENVIRONMENT, how)
        result = CliRunner().invoke(main, ["check", "--no-cache", "--output-format", "json", str(copy)],
                                    catch_exceptions=False)
        outputs.append((result.exit_code, result.output))
    assert outputs[0] == outputs[1]


# one program per reason to keep a function (`TRAPS`): the comparison fails when slicing blanks it --------------
KEPT = {
    # kept code names it: without `log_metrics` the loop calls an unknown method that may update the scaler
    "named": """
import torch


class Trainer:
    def __init__(self):
        self.scaler = torch.cuda.amp.GradScaler()

    def fit(self, loader, opt):
        for x in loader:
            self.scaler.scale(x).backward()
            self.scaler.step(opt)
            self.log_metrics()

    def log_metrics(self):
        print("metrics")
""",
    # it calls a function that holds a word: `fit` calls the scaler-building step once per iteration
    "calls an active function": """
import torch


def run_batch(model, x, opt):
    scaler = torch.cuda.amp.GradScaler()
    scaler.scale(model(x).sum()).backward()
    scaler.step(opt)
    scaler.update()


def fit(model, loader, opt):
    for x in loader:
        run_batch(model, x, opt)
""",
    # it names an alias of the AMP API: the import is not moved while another use of `ac` remains
    "names an AMP name": """
import torch
from torch.cuda.amp import autocast as ac


def train(model, x):
    with ac():
        return model(x)


def other():
    return ac
""",
    # it rebinds `torch` (which ties no other code: every function names it): AMP007 leaves a reassigned name alone
    "binds torch": """
import torch


def train(model, x):
    with torch.cuda.amp.autocast():
        return model(x)


def rebinds(x):
    torch = x
    return torch
""",
    # it assigns an attribute kept code reads: `self.opt` is then not only a known optimizer class
    "assigns a named attribute": """
import torch


class Trainer:
    def __init__(self, model):
        self.opt = torch.optim.SGD(model.parameters(), lr=0.1)
        self.scaler = torch.cuda.amp.GradScaler()

    def reset(self, opt):
        self.opt = opt

    def train(self, model, x):
        loss = model(x).sum()
        self.scaler.scale(loss).backward()
        self.opt.step()
""",
    # its `zero_grad()` makes `opt` an optimizer, which a scaled backward's plain `opt.step()` then bypasses
    "ties a receiver": """
import torch


def train(model, x, opt):
    scaler = torch.cuda.amp.GradScaler()
    scaler.scale(model(x).sum()).backward()
    opt.step()


def reset(opt):
    opt.zero_grad()
""",
    # it converts the model made half precision back to float32
    "converts back": """
import torch


def train(model, x):
    model.half()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.cuda.amp.GradScaler()
    scaler.scale(model(x).sum()).backward()
    scaler.step(opt)
    scaler.update()


def restore(model):
    model.float()
""",
    # the model is made half precision at module level: an optimizer over it built anywhere is the one stepped
    "builds over a module-level half model": """
import torch

model = torch.nn.Linear(2, 2).half()


def train(x, opt):
    scaler = torch.cuda.amp.GradScaler()
    scaler.scale(model(x).sum()).backward()
    scaler.step(opt)
    scaler.update()


def build(make):
    opt = make(model.parameters())
    return opt
""",
    # the module's only backward: with it, a scaler's step under no_grad is gradient surgery, not inference
    "runs the backward": """
import torch

scaler = torch.cuda.amp.GradScaler()


def learn(loss):
    loss.backward()


def clip_step(opt):
    with torch.no_grad():
        scaler.step(opt)
        scaler.update()
""",
    # blanked at the end of the module: the fix of the partial stays (libcst keeps comment lines there)
    "blanked tail": """import torch
import functools
ctx = functools.partial(torch.cuda.amp.autocast, enabled=True)

def helper(values):
    return [v * 2 for v in values]
""",
    # the blanked strings decide the module's quote, which the migration writes
    "quotes": """
import torch


def train(model, x):
    with torch.cuda.amp.autocast():
        return model(x)


def names():
    return ['a', 'b', 'c']
""",
}


# the function of each case that must be kept (the last one where not named here)
TRAPS = {"runs the backward": "learn", "assigns a named attribute": "reset"}


def _without(text: str, name: str | None) -> str:
    """The program without the function `name` (None: the last one)."""
    functions = [node for node in ast.walk(ast.parse(text)) if isinstance(node, ast.FunctionDef)]
    trap = max(functions, key=lambda n: n.lineno) if name is None else next(f for f in functions if f.name == name)
    lines = text.splitlines(keepends=True)
    return "".join(lines[:trap.lineno - 1] + lines[trap.end_lineno:])


@pytest.mark.parametrize("case", sorted(KEPT))
def test_sliced_analysis_equals_whole_where_a_function_must_be_kept(case: str, monkeypatch) -> None:
    text = KEPT[case]
    if case != "blanked tail":  # the function matters: the analysis without it differs
        assert _outcomes(_without(text, TRAPS.get(case)), monkeypatch, "off", True)[0] != _outcomes(
            text, monkeypatch, "off", True)[0]
    assert_same(text, monkeypatch)


# generated programs ---------------------------------------------------------------------------------------------
HEADERS = [
    "import torch\n",
    "import torch\nfrom torch.cuda.amp import autocast, GradScaler\n",
    "import torch\nfrom torch.cuda.amp import autocast as ac, GradScaler as GS\n",
    "import torch\nfrom torch.cuda import amp\n",
    "import torch\nimport functools\nctx = functools.partial(torch.cuda.amp.autocast, enabled=True)\n",
]
TRAINING = [
    '''
def train(model, loader, optimizer):
    scaler = torch.cuda.amp.GradScaler()
    for x, y in loader:
        with torch.cuda.amp.autocast():
            loss = model(x).sum()
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
''',
    '''
def fit(model, loader, opt):
    for x in loader:
        sc = make_scaler()
        with torch.autocast("cuda"):
            loss = model(x)
        sc.scale(loss).backward()
        sc.step(opt)
        sc.update()
''',
    '''
def make_scaler():
    return torch.cuda.amp.GradScaler(init_scale=1024)
''',
    '''
class Trainer:
    def __init__(self, model):
        self.model = model
        self.opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = self.model(x).sum()
            loss.backward()
            self.opt.step()

    def run(self, loader):
        for x in loader:
            self.train_step(x)
''',
    '''
def aliased(model, x, opt):
    with ac():
        loss = model(x)
    s = GS()
    s.scale(loss).backward()
    s.step(opt)
    s.update()
''',
    '''
def deprecated_module(model, x):
    with amp.autocast():
        return model(x)
''',
    '''
def with_partial(model, x):
    with ctx():
        return model(x)
''',
    '''
def halves(model, opt, x):
    model.half()
    scaler = torch.cuda.amp.GradScaler()
    scaler.scale(model(x).sum()).backward()
    scaler.step(opt)
    scaler.update()
''',
]
UNRELATED = [
    '''
def helper(values):
    return [v * 2 for v in values]
''',
    '''
def loop_driver(loader):
    for batch in loader:
        make_scaler()
''',
    '''
def calls_partial_name(model, x):
    return ctx(model)
''',
    '''
def rebinds(x):
    ac = x
    return ac
''',
    '''
def uses_alias_module(x):
    return amp, GS, x
''',
    '''
def float_back(model):
    model.float()
''',
    '''
class Helper:
    def __init__(self):
        self.opt = None
        self.cache = {}

    def describe(self):
        return 'helper'
''',
    '''
class Other:
    @property
    def value(self):
        return "v"
        # trailing comment
''',
    '''
def quoted():
    return ['a', 'b', 'c', 'd', f"{'e'}"]
''',
    '''
def run_trainer(trainer, loader):
    for _ in range(3):
        trainer.run(loader)
''',
]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(header=st.sampled_from(HEADERS),
       blocks=st.lists(st.sampled_from(TRAINING + UNRELATED), min_size=1, max_size=6, unique=True),
       fix=st.booleans())
def test_sliced_analysis_equals_whole_on_generated_programs(header, blocks, fix, monkeypatch) -> None:
    assert_same(header + "".join(blocks), monkeypatch, fix=fix)


# the pieces -----------------------------------------------------------------------------------------------------
def test_string_quotes_count_libcst_simple_strings() -> None:
    text = '''x = 'a' "b" r'c' b"d" f"{'e'} {y!r:>{w}}" """f""" \'\'\'g\'\'\'  # 'comment'\nif"h": pass\n'''
    assert string_quotes(text) == (4, 4)


def test_small_or_unparsable_modules_are_not_sliced() -> None:
    assert slice_module("def f():\n    return 1\n", "auto") is None  # small
    assert slice_module("def f(:\n", "always") is None
    assert slice_module("def f():\r    return 1\n", "always") is None  # a lone CR
    assert slice_module(PADDING, "off") is None


def test_touches_borders_and_overlaps() -> None:
    piece = Slice("", "", ((10, 20), (30, 40)))
    assert piece.touches(20, 20) and piece.touches(5, 10) and piece.touches(15, 35)
    assert not piece.touches(21, 29) and not piece.touches(0, 9) and not piece.touches(41, 50)


def test_the_estimate_counts_functions_without_a_strong_word() -> None:
    helper = "@decorator\ndef helper(x):\n    return x\n"
    training = "def train(scaler, loss):\n    scaler.scale(loss).backward()\n"
    method = "class A:\n    def m(self):\n        return 1\n\n    def n(self):\n        return autocast\n"
    assert wordless_functions(helper + training) == len(helper)
    assert wordless_functions(training) == 0
    assert wordless_functions(method) == len("    def m(self):\n        return 1\n\n")
