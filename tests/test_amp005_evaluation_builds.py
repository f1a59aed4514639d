"""AMP005 on GradScalers built in evaluation code: what counts as evaluation code (facts of what the code does; a
name only adds to the fact of a module without backward), which constructions stay silent because the scaler
leaves the function, when the removal fix is offered (and safe), and a backward behind a call in another module
seen through the project index."""

from __future__ import annotations

import keyword
import textwrap
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from amplint.diagnostics import Applicability
from amplint.engine import lint_text
from amplint.fixer import fix_text
from amplint.index.build import build_index
from amplint.prefilter import Verdict, prefilter_for
from amplint.rules.amp005_scaler_in_inference import ScalerInInference

RULE = ScalerInInference()

BRIEF = '''\
import torch


def run_validation(net, data):
    amp_scaler = torch.amp.GradScaler("cuda")
    net.eval()
    with torch.inference_mode():
        return [net(x) for x in data]
'''
TRAINING = '''

def train_step(model, x, optimizer, scaler):
    with torch.autocast("cuda"):
        loss = model(x).mean()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
'''


def findings(text: str, project=None, path: str = "t.py") -> list:
    return [d for d in lint_text(text, path, [RULE], project=project).diagnostics if d.code == "AMP005"]


def evaluation(body: str, name: str = "evaluate", params: str = "model, x") -> str:
    """A module defining `name(params)` with this body (indented here)."""
    return f"import torch\n\n\ndef {name}({params}):\n" + textwrap.indent(textwrap.dedent(body), "    ")


# --- what counts as evaluation code ------------------------------------------------------------------------------

def test_the_issue_example_is_flagged_with_a_safe_removal():
    [finding] = findings(BRIEF)
    assert (finding.location.row, finding.location.column) == (5, 18)
    assert "`amp_scaler`" in finding.message and "`run_validation()` calls `.eval()`" in finding.message
    assert finding.message.endswith("dead code") and len(finding.message) <= 120
    assert finding.fix is not None and finding.fix.applicability is Applicability.SAFE
    fixed = fix_text(BRIEF, "t.py", rules=[RULE], unsafe=False).text
    assert fixed == BRIEF.replace('    amp_scaler = torch.amp.GradScaler("cuda")\n', "")


@pytest.mark.parametrize("body", [
    # opens inference_mode after the construction (no .eval())
    'scaler = torch.amp.GradScaler("cuda")\nwith torch.inference_mode():\n    return model(x)\n',
    # set_grad_enabled(False) counts as no_grad
    'scaler = torch.amp.GradScaler("cuda")\nwith torch.set_grad_enabled(False):\n    return model(x)\n',
    # calls .eval() and nothing else
    'model.eval()\nscaler = torch.amp.GradScaler("cuda")\nreturn model(x)\n',
])
def test_what_the_code_does_is_evidence_under_any_name(body):
    text = evaluation(body, name="step_once") + TRAINING
    assert [d.location.row for d in findings(text)] == [6 if body.startswith("model") else 5]


def test_a_name_alone_is_no_evidence_where_the_module_trains():
    body = 'scaler = torch.amp.GradScaler("cuda")\nreturn model(x)\n'
    assert findings(evaluation(body, name="validate") + TRAINING) == []
    # ... nor where the module runs no backward at all: a name is never evidence, what the code does is
    assert findings(evaluation(body, name="validate")) == []
    assert findings(evaluation(body, name="build")) == []
    assert [d.location.row for d in findings(evaluation("model.eval()\n" + body, name="build"))] == [6]


def test_eval_call_or_no_grad_in_a_nested_function_is_not_the_outer_functions():
    body = '''\
    scaler = torch.amp.GradScaler("cuda")

    def report(m):
        m.eval()
        with torch.no_grad():
            return m(x)

    return report
    '''
    assert findings(evaluation(body, name="make_reporter")) == []


# --- silent: a backward runs, or the scaler leaves the function ------------------------------------------------------

@pytest.mark.parametrize("body", [
    # the backward runs in this function (training and evaluation together)
    'scaler = torch.amp.GradScaler("cuda")\nmodel.eval()\nscaler.scale(model(x).sum()).backward()\n',
    # torch.autograd.grad is a backward
    'scaler = torch.amp.GradScaler("cuda")\nmodel.eval()\ntorch.autograd.grad(scaler.scale(model(x).sum()), [x])\n',
    # in a same-module helper, two calls deep
    'scaler = torch.amp.GradScaler("cuda")\nmodel.eval()\nouter(scaler.scale(model(x).sum()))\n',
])
def test_a_backward_here_or_behind_a_call_silences(body):
    helpers = "\n\ndef inner(loss):\n    loss.backward()\n\n\ndef outer(loss):\n    inner(loss)\n"
    assert findings(evaluation(body) + helpers) == []


@pytest.mark.parametrize("body", [
    'model.eval()\nscaler = torch.amp.GradScaler("cuda")\nreturn scaler\n',  # a factory
    'model.eval()\nscaler = torch.amp.GradScaler("cuda")\nreturn model, scaler\n',
    'model.eval()\nscaler = torch.amp.GradScaler("cuda")\nsetup(model, scaler=scaler)\n',  # passed on
    'model.eval()\nscaler = torch.amp.GradScaler("cuda")\nstate.scaler = scaler\n',  # stored
    'model.eval()\nscaler = torch.amp.GradScaler("cuda")\nif scaler is not None:\n    print(1)\n',  # compared
    'global scaler\nmodel.eval()\nscaler = torch.amp.GradScaler("cuda")\n',  # a module's scaler
    'model.eval()\nscaler = torch.amp.GradScaler("cuda")\nreturn locals()\n',  # every local handed on
    'model.eval()\nself.scaler = torch.amp.GradScaler("cuda")\n',
    'model.eval()\nreturn torch.amp.GradScaler("cuda")\n',
    'model.eval()\nscaler = wrap(torch.amp.GradScaler("cuda"))\n',
    'model.eval()\nscaler = torch.amp.GradScaler("cuda")\nhooks = [lambda: scaler]\n',
])
@pytest.mark.parametrize("under_no_grad", [False, True])
def test_a_scaler_that_leaves_the_function_stays_silent(body, under_no_grad):
    """Also when the construction runs under no_grad (reported before whatever became of the scaler)."""
    if under_no_grad:
        body = "with torch.no_grad():\n" + textwrap.indent(body, "    ")
    assert findings(evaluation(body, params="self, model, x, state")) == []


def test_a_scaler_passed_in_and_only_read_is_silent():
    body = '''\
    model.eval()
    with torch.no_grad():
        out = model(x)
    if scaler is not None and scaler.is_enabled():
        print(scaler.get_scale(), scaler.state_dict())
    return out
    '''
    assert findings(evaluation(body, params="model, x, scaler")) == []


def test_a_class_attribute_is_not_evaluation_code():
    text = "import torch\n\n\nclass Defaults:\n    scaler = torch.amp.GradScaler('cuda')\n\n\nmodel.eval()\n"
    assert findings(text) == []


# --- the fix ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("body", "fixable"), [
    ('model.eval()\nscaler = torch.amp.GradScaler("cuda", init_scale=2.0 ** 10, enabled=cfg.amp)\n', True),
    ('model.eval()\nscaler: torch.amp.GradScaler = torch.amp.GradScaler("cuda")\n', True),
    # the arguments do something: their effect would go with the statement
    ('model.eval()\nscaler = torch.amp.GradScaler("cuda", init_scale=initial_scale())\n', False),
    ('model.eval()\nscaler = torch.amp.GradScaler("cuda", enabled=(amp := cfg.amp))\n', False),
    # the name is read (a method call): removing the construction would break it
    ('model.eval()\nscaler = torch.amp.GradScaler("cuda")\nprint(scaler.get_scale())\n', False),
    # a conditional construction is reported without a fix
    ('model.eval()\nscaler = torch.amp.GradScaler("cuda") if cfg.amp else None\n', False),
])
def test_the_removal_is_offered_only_when_nothing_can_be_lost(body, fixable):
    [finding] = findings(evaluation(body, params="model, x, cfg"))
    assert (finding.fix is not None) is fixable
    if fixable:
        assert finding.fix.applicability is Applicability.SAFE


def test_a_module_level_construction_is_reported_without_a_fix():
    text = 'import torch\n\nscaler = torch.amp.GradScaler("cuda")\nmodel = torch.load("m.pt").eval()\n'
    [finding] = findings(text)
    assert finding.fix is None and "module code calls `.eval()`" in finding.message
    # another module may import a module-level scaler of a module that only defines things: silent
    assert findings('import torch\n\nscaler = torch.amp.GradScaler("cuda")\n') == []


def test_removing_the_only_statement_of_a_block_leaves_valid_code():
    text = evaluation('model.eval()\nif cfg.amp:\n    scaler = torch.amp.GradScaler("cuda")\nreturn model(x)\n',
                      params="model, x, cfg")
    fixed = fix_text(text, "t.py", rules=[RULE], unsafe=False).text
    compile(fixed, "t.py", "exec")
    assert "GradScaler" not in fixed and findings(fixed) == []


# --- across modules: a backward behind a call into another module --------------------------------------------------

HELPER = "import torch\n\n\ndef adapt(loss):\n    with torch.enable_grad():\n        loss.backward()\n"
CALLER = '''\
import torch

import tta


def evaluate(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")
    model.eval()
    for x in loader:
        tta.adapt(scaler.scale(model(x).mean()))
        scaler.step(optimizer)
        scaler.update()
'''


def test_a_backward_in_another_module_silences_only_with_the_index(tmp_path: Path):
    (tmp_path / "tta.py").write_text(HELPER)
    (tmp_path / "evaluate.py").write_text(CALLER)
    path = str(tmp_path / "evaluate.py")
    assert len(findings(CALLER, path=path)) == 4  # alone: the helper is unknown, assumed to run no backward
    project = build_index([str(tmp_path / "tta.py"), path], lambda p: Path(p).read_text())
    assert findings(CALLER, project=project.view(path), path=path) == []
    # the helper stops running a backward: the findings come back, the index says so
    (tmp_path / "tta.py").write_text(HELPER.replace("loss.backward()", "print(loss)"))
    project = build_index([str(tmp_path / "tta.py"), path], lambda p: Path(p).read_text())
    assert len(findings(CALLER, project=project.view(path), path=path)) == 4


# --- the screen and names --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    BRIEF,
    evaluation('scaler = torch.amp.GradScaler("cuda")\nwith torch.no_grad():\n    return model(x)\n', "run"),
    evaluation('scaler = torch.amp.GradScaler("cuda")\nmodel.eval()\nreturn model(x)\n', "predict"),
    'import torch\n\nscaler = torch.amp.GradScaler("cuda")\nmodel = torch.load("m.pt").eval()\n',
])
def test_the_screen_keeps_files_with_an_evaluation_construction(text):
    assert findings(text)
    assert prefilter_for([ScalerInInference]).decide(text) is Verdict.ANALYSE


IDENTIFIERS = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True).filter(
    lambda name: not keyword.iskeyword(name) and name not in ("torch", "model", "x", "print"))


@settings(max_examples=25, deadline=None)
@given(function=IDENTIFIERS, scaler=IDENTIFIERS)
def test_findings_follow_what_the_code_does_not_its_names(function, scaler):
    """With `.eval()` and no backward: one finding with a safe fix, whatever the names; with a backward added:
    none. A module that trains elsewhere: a name never makes a finding on its own."""
    assume(function != scaler)  # a function named like its scaler reads that name: the scaler is left alone
    body = f'model.eval()\n{scaler} = torch.amp.GradScaler("cuda")\nprint(model(x))\n'
    [finding] = findings(evaluation(body, name=function) + TRAINING.replace("def train_step", "def _train_step"))
    assert finding.fix is not None and finding.fix.applicability is Applicability.SAFE
    trains = body + "model(x).sum().backward()\n"
    assert findings(evaluation(trains, name=function)) == []
    unused = f'{scaler} = torch.amp.GradScaler("cuda")\nprint(model(x))\n'
    assert findings(evaluation(unused, name=function) + TRAINING.replace("def train_step", "def _train_step")) == []
    assert findings(evaluation(unused, name=function)) == []  # no `.eval()`, no no_grad: no evidence, any name
