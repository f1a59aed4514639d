"""amplint.runtime: the run-time watcher sees each code's mistake as it happens, and stays silent on the correct
twin; `amplint watch SCRIPT` and the pytest plugin report what it sees. CPU autocast in bfloat16 and float16
(torch supports both on CPU); the CUDA variants skip without a GPU."""

from __future__ import annotations

import functools
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from amplint.runtime import AmpRuntimeError, AmpRuntimeWarning, watch


class _Torch:
    """torch, imported at a test's first use of it, not when the tests are collected (importing torch takes two
    seconds); a test skips where torch is not installed."""

    def __getattr__(self, name: str):
        return getattr(pytest.importorskip("torch"), name)


torch = _Torch()

ROOT = Path(__file__).resolve().parent.parent
HERE = __file__
DTYPES = ["bfloat16", "float16"]  # torch's names (`torch.bfloat16`)
DEVICES = [pytest.param("cpu"), pytest.param("cuda", marks=pytest.mark.cuda)]


def _device(device: str) -> str:
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("CUDA not available: the CUDA variant needs a GPU")
    return device


def _watched(body, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AmpRuntimeWarning)
        with watch(**options) as report:
            body()
    return report


def codes(report) -> list[str]:
    return [finding.code for finding in report.findings]


def _line_of(marker: str) -> int:
    for number, line in enumerate(Path(HERE).read_text().splitlines(), 1):
        if marker in line and "_line_of" not in line:
            return number
    raise AssertionError(marker)


def _model(device="cpu"):
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1)).to(device)


def _loss(model, device="cpu"):
    return model(torch.randn(4, 8, device=device)).pow(2).mean()


# --- the "done when" program: autocast from a passed-in context, the fp32 island in a submodule --------------

@functools.cache
def _net_class():
    """The model of the "done when" program: a projection, then an fp32 island in a submodule (classes built at
    first use, torch being imported then)."""

    class Island(torch.nn.Module):
        def __init__(self, cast: bool):
            super().__init__()
            self.cast = cast

        def forward(self, x):
            with torch.autocast(x.device.type, enabled=False):
                if self.cast:
                    x = x.float()
                return torch.softmax(x, dim=-1)  # island-op

    class Net(torch.nn.Module):
        def __init__(self, cast: bool):
            super().__init__()
            self.proj = torch.nn.Linear(8, 8)
            self.island = Island(cast)

        def forward(self, x):
            return self.island(self.proj(x)).sum(dim=-1)

    return Net


def _net(cast: bool):
    return _net_class()(cast)


def train_step(ctx, model, optimizer, correct: bool, device="cpu"):
    optimizer.zero_grad()
    with ctx:
        loss = model(torch.randn(4, 8, device=device)).pow(2).mean()
        if not correct:
            loss.backward()  # backward-in-ctx
    if correct:
        loss.backward()
    optimizer.step()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_passed_in_context_and_submodule_island_report_amp001_and_amp006(device, dtype):
    device = _device(device)
    model = _net(cast=False).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    report = _watched(lambda: train_step(torch.autocast(device, dtype=getattr(torch, dtype)), model, optimizer,
                                         False, device))
    assert sorted(codes(report)) == ["AMP001", "AMP006"]
    sites = {finding.code: (finding.filename, finding.line) for finding in report.findings}
    assert sites["AMP001"] == (HERE, _line_of("# backward-in-ctx"))
    assert sites["AMP006"] == (HERE, _line_of("# island-op"))
    assert "softmax" in next(f.message for f in report.findings if f.code == "AMP006")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("device", DEVICES)
def test_passed_in_context_correct_twin_is_silent(device, dtype):
    device = _device(device)
    model = _net(cast=True).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    assert codes(_watched(lambda: train_step(torch.autocast(device, dtype=getattr(torch, dtype)), model, optimizer,
                                             True, device))) == []


# --- each code, flagged and clean -------------------------------------------------------------------------------

@pytest.mark.parametrize("flagged", [True, False], ids=["flagged", "clean"])
def test_amp001_autograd_backward_and_grad(flagged):
    model = _model()

    def body():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = _loss(model)
            if flagged:
                torch.autograd.grad(loss, list(model.parameters()), retain_graph=True)
                torch.autograd.backward(loss)
        if not flagged:
            torch.autograd.grad(loss, list(model.parameters()), retain_graph=True)
            torch.autograd.backward(loss)

    assert codes(_watched(body)) == (["AMP001", "AMP001"] if flagged else [])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("flagged", [True, False], ids=["flagged", "clean"])
def test_amp002_optimizer_step_in_autocast(flagged, dtype):
    dtype = getattr(torch, dtype)
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters())

    def body():
        with torch.autocast("cpu", dtype=dtype):
            loss = _loss(model)
        loss.backward()
        with torch.autocast("cpu", dtype=dtype, enabled=flagged):
            optimizer.step()

    assert codes(_watched(body)) == (["AMP002"] if flagged else [])


@pytest.mark.parametrize("flagged", [True, False], ids=["flagged", "clean"])
def test_amp002_scaler_step_and_update_in_autocast(flagged):
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")

    def body():
        with torch.autocast("cpu", dtype=torch.float16):
            loss = _loss(model)
        scaler.scale(loss).backward()
        with torch.autocast("cpu", dtype=torch.float16, enabled=flagged):
            scaler.step(optimizer)
            scaler.update()

    report = _watched(body)
    assert codes(report) == (["AMP002", "AMP002"] if flagged else [])
    if flagged:
        assert "scaler.step()" in report.findings[0].message and "scaler.update()" in report.findings[1].message


@pytest.mark.parametrize("clip", ["clip_grad_norm_", "clip_grad_value_"])
@pytest.mark.parametrize("flagged", [True, False], ids=["flagged", "clean"])
def test_amp003_clip_between_scaled_backward_and_step(flagged, clip):
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    argument = 1.0

    def body():
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.float16):
                loss = _loss(model)
            scaler.scale(loss).backward()
            if not flagged:
                scaler.unscale_(optimizer)
            getattr(torch.nn.utils, clip)(model.parameters(), argument)  # the-clip: looked up at call time
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()

    report = _watched(body)
    assert codes(report) == (["AMP003"] if flagged else [])  # once per site, though both iterations clip
    if flagged:
        assert report.findings[0].line == _line_of("# the-clip") and clip in report.findings[0].message


def test_amp003_the_clip_module_namespace_and_a_clip_without_scaler_is_fine():
    import torch.nn.utils.clip_grad as clip_grad

    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")

    def body():
        loss = _loss(model)
        loss.backward()
        clip_grad.clip_grad_norm_(model.parameters(), 1.0)  # no scaler involved: fine
        optimizer.step()
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = _loss(model)
        scaler.scale(loss).backward()
        clip_grad.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()

    assert codes(_watched(body)) == ["AMP003"]


def test_amp003_another_optimizers_parameters_are_not_this_steps_concern():
    first, second = _model(), _model()
    opt_first = torch.optim.SGD(first.parameters(), lr=0.1)
    opt_second = torch.optim.SGD(second.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")

    def body():
        with torch.autocast("cpu", dtype=torch.float16):
            loss = _loss(first) + _loss(second)
        scaler.scale(loss).backward()
        scaler.unscale_(opt_first)
        torch.nn.utils.clip_grad_norm_(first.parameters(), 1.0)  # unscaled: fine
        scaler.step(opt_first)
        scaler.step(opt_second)
        scaler.update()

    assert codes(_watched(body)) == []


@pytest.mark.parametrize("flagged", [True, False], ids=["flagged", "clean"])
def test_amp004_scaler_built_again_after_a_step(flagged):
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def body():
        scaler = None
        for _ in range(3):
            if flagged or scaler is None:
                scaler = torch.amp.GradScaler("cpu")  # the-build
            with torch.autocast("cpu", dtype=torch.float16):
                loss = _loss(model)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()

    report = _watched(body)
    assert codes(report) == (["AMP004"] if flagged else [])
    if flagged:
        assert report.findings[0].line == _line_of("# the-build")


def test_amp004_two_scalers_built_at_one_site_before_any_step_are_fine():
    assert codes(_watched(lambda: [torch.amp.GradScaler("cpu") for _ in range(2)])) == []


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
@pytest.mark.parametrize("flagged", [True, False], ids=["flagged", "clean"])
def test_amp005_scaler_built_or_scale_called_without_grad(flagged, mode):
    model = _model()
    context = getattr(torch, mode)

    def body():
        if flagged:
            with context():
                scaler = torch.amp.GradScaler("cpu")
                scaler.scale(_loss(model))
        else:
            scaler = torch.amp.GradScaler("cpu")
            with context():
                _loss(model)  # evaluation without the scaler
            scaler.scale(_loss(model))

    report = _watched(body)
    assert codes(report) == (["AMP005", "AMP005"] if flagged else [])
    assert all(mode in finding.message for finding in report.findings)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("flagged", [True, False], ids=["flagged", "clean"])
def test_amp006_half_tensor_in_disabled_region(flagged, dtype):
    name, dtype = dtype, getattr(torch, dtype)
    model = _model()

    def body():
        with torch.autocast("cpu", dtype=dtype):
            hidden = model[0](torch.randn(4, 8))
            with torch.autocast("cpu", enabled=False):
                if not flagged:
                    hidden = hidden.float()
                torch.exp(hidden).sum()

    report = _watched(body)
    assert codes(report) == (["AMP006"] if flagged else [])
    if flagged:
        assert name in report.findings[0].message


def test_amp006_a_disabled_region_outside_any_enabled_one_is_not_an_island():
    def body():
        half = torch.randn(4, device="cpu").to(torch.bfloat16)
        with torch.autocast("cpu", enabled=False):
            torch.exp(half)  # no enabled region around it: the user's own bfloat16 math

    assert codes(_watched(body)) == []


@pytest.mark.parametrize("flagged", [True, False], ids=["flagged", "clean"])
def test_amp013_scaler_with_bfloat16(flagged):
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    dtype = torch.bfloat16 if flagged else torch.float16

    def body():
        with torch.autocast("cpu", dtype=dtype):
            loss = _loss(model)
        scaler.scale(loss).backward()
        scaler.step(optimizer)  # the-step
        scaler.update()

    report = _watched(body)
    assert codes(report) == (["AMP013"] if flagged else [])
    if flagged:
        assert report.findings[0].line == _line_of("# the-step")


def test_amp013_a_disabled_scaler_is_fine():
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", enabled=False)

    def body():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = _loss(model)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    assert codes(_watched(body)) == []


@pytest.mark.cuda
@pytest.mark.parametrize("flagged", [True, False], ids=["flagged", "clean"])
def test_cuda_scaler_with_float16_and_bfloat16(flagged):
    _device("cuda")
    model = _model("cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    dtype = torch.bfloat16 if flagged else torch.float16

    def body():
        with torch.autocast("cuda", dtype=dtype):
            loss = _loss(model, "cuda")
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    assert codes(_watched(body)) == (["AMP013"] if flagged else [])


# --- the watcher itself -----------------------------------------------------------------------------------------

def _flagged_backward():
    model = _model()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _loss(model).backward()


def test_warnings_strict_ignore_and_once_per_site():
    with pytest.warns(AmpRuntimeWarning, match="AMP001"):
        with watch() as report:
            for _ in range(3):
                _flagged_backward()
    assert codes(report) == ["AMP001"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", AmpRuntimeWarning)  # -W error::amplint.runtime.AmpRuntimeWarning
        with pytest.raises(AmpRuntimeWarning), watch():
            _flagged_backward()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AmpRuntimeWarning)
        with pytest.raises(AmpRuntimeError, match="AMP001") as raised, watch(strict=True):
            _flagged_backward()
        assert [f.code for f in raised.value.findings] == ["AMP001"]
        with watch(strict=True, ignore=["amp001"]) as report:
            _flagged_backward()
        assert report.findings == []


def test_everything_is_restored_and_nesting_is_safe():
    import torch.nn.utils.clip_grad as clip_grad
    from torch.optim.optimizer import _global_optimizer_pre_hooks

    autocast = torch.amp.autocast_mode.autocast
    before = (torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad, torch.amp.GradScaler.__init__,
              torch.amp.GradScaler.scale, torch.amp.GradScaler.step, torch.amp.GradScaler.update,
              torch.amp.GradScaler.unscale_, torch.nn.utils.clip_grad_norm_, clip_grad.clip_grad_value_,
              autocast.__enter__, autocast.__exit__, len(_global_optimizer_pre_hooks))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AmpRuntimeWarning)
        with watch() as outer:
            with watch(ignore=["AMP001"]) as inner:
                _flagged_backward()
            assert torch.Tensor.backward is not before[0]  # the outer watch still watches
            _flagged_backward()
    assert codes(inner) == [] and codes(outer) == ["AMP001"]
    after = (torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad, torch.amp.GradScaler.__init__,
             torch.amp.GradScaler.scale, torch.amp.GradScaler.step, torch.amp.GradScaler.update,
             torch.amp.GradScaler.unscale_, torch.nn.utils.clip_grad_norm_, clip_grad.clip_grad_value_,
             autocast.__enter__, autocast.__exit__, len(_global_optimizer_pre_hooks))
    assert after == before
    assert not torch._C._is_torch_function_mode_enabled()


def test_an_exception_in_the_block_restores_and_propagates():
    with pytest.raises(KeyError), watch(strict=True):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with torch.autocast("cpu", enabled=False):  # an island left by the exception
                raise KeyError("x")
    assert not torch._C._is_torch_function_mode_enabled()
    assert not hasattr(torch.Tensor.backward, "__wrapped__")


# --- amplint watch SCRIPT, the pytest plugin, no torch in the linter ---------------------------------------------

SCRIPT = """\
import sys
import torch

model = torch.nn.Linear(4, 1)
with torch.autocast("cpu", dtype=torch.bfloat16):
    loss = model(torch.randn(2, 4)).sum()
    loss.backward()
assert sys.argv[1:] == ["--epochs", "1"], sys.argv
"""


def test_amplint_watch_reports_the_scripts_own_line(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from amplint.cli import main

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["watch", "--output-format", "concise", "train.py", "--epochs", "1"])
    assert result.exit_code == 1, result.output
    assert result.output.splitlines()[0].startswith("train.py:7:5: AMP001 backward() runs while autocast")
    json_result = CliRunner().invoke(main, ["watch", "--output-format", "json", "train.py", "--epochs", "1"])
    import json

    assert [(d["code"], d["location"]["row"]) for d in json.loads(json_result.output)] == [("AMP001", 7)]
    clean = tmp_path / "clean.py"
    clean.write_text(SCRIPT.replace("    loss.backward()\n", "loss.backward()\n"))
    result = CliRunner().invoke(main, ["watch", "clean.py", "--epochs", "1"])
    assert result.exit_code == 0, result.output
    ignored = CliRunner().invoke(main, ["watch", "--ignore", "AMP001", "train.py", "--epochs", "1"])
    assert ignored.exit_code == 0, ignored.output


def _watch_command(tmp_path, monkeypatch, source: str, *options: str):
    from click.testing import CliRunner

    from amplint.cli import main

    (tmp_path / "script.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    return CliRunner().invoke(main, ["watch", *options, "script.py"])


def test_amplint_watch_returns_the_scripts_own_exit_status_and_says_so(tmp_path, monkeypatch):
    result = _watch_command(tmp_path, monkeypatch, "raise SystemExit(3)\n")
    assert result.exit_code == 3, result.output
    assert "All checks passed" not in result.output
    assert result.stderr.strip() == ("amplint: script.py exited with status 3; no AMP mistake was seen in what ran "
                                     "before it ended")
    assert _watch_command(tmp_path, monkeypatch, "import sys\nsys.exit(0)\n").exit_code == 0


def test_amplint_watch_shows_the_scripts_error_as_python_does_with_the_findings_before_it(tmp_path, monkeypatch):
    result = _watch_command(tmp_path, monkeypatch, SCRIPT.replace("assert sys.argv[1:]", "raise KeyError(1)\n#"),
                            "--output-format", "concise")
    assert result.exit_code == 1, result.output  # as `python script.py` exits on an exception
    assert result.stdout.startswith("script.py:7:5: AMP001 ") and "All checks passed" not in result.stdout
    assert 'File "script.py", line 8, in <module>' in result.stderr and "KeyError: 1" in result.stderr
    assert "runpy" not in result.stderr and "amplint/runtime" not in result.stderr  # the script's frames only
    assert "script.py raised KeyError (status 1); the findings above are what ran before" in result.stderr


def test_amplint_watch_on_a_script_that_does_not_compile_is_a_one_line_error(tmp_path, monkeypatch):
    result = _watch_command(tmp_path, monkeypatch, "import torch\nx = (\n")
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "amplint: error: script.py:2:5: SyntaxError: '(' was never closed: the script cannot run, nothing was "
        "watched"]


def test_amplint_watch_without_torch_is_a_one_line_error(tmp_path):
    (tmp_path / "train.py").write_text("print('ran')\n")
    program = textwrap.dedent("""\
        import sys

        class NoTorch:  # as if torch were not installed
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, NoTorch())
        from amplint.cli import entry

        sys.argv = ["amplint", "watch", sys.argv[1]]
        entry()
        """)
    run = subprocess.run([sys.executable, "-c", program, str(tmp_path / "train.py")], capture_output=True,
                         text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=600)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stdout == "" and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert run.stderr.startswith("amplint: error: `amplint watch` runs the script with torch, which this Python")
    assert "install torch" in run.stderr and "internal error" not in run.stderr


def test_amplint_watch_puts_the_carets_under_the_call_not_the_comment(tmp_path, monkeypatch):
    result = _watch_command(tmp_path, monkeypatch,
                            SCRIPT.replace("    loss.backward()\n", "    loss.backward()  # a comment (x)\n"))
    lines = result.stdout.splitlines()
    source = next(i for i, line in enumerate(lines) if "loss.backward()  # a comment" in line)
    assert lines[source + 1] == "  |     ^^^^^^^^^^^^^^^ AMP001", result.stdout


def test_a_finding_without_a_recorded_span_underlines_the_code_of_its_line(tmp_path):
    from amplint.runtime import RuntimeFinding

    path = tmp_path / "t.py"
    path.write_text("x = f('#')  # a comment\n")
    diagnostic = RuntimeFinding("AMP001", "message", str(path), 1).to_diagnostic()
    assert (diagnostic.location.column, diagnostic.end_location.column) == (1, 11)


def test_pytest_plugin_fails_a_test_with_findings_and_imports_torch_only_when_asked(tmp_path):
    (tmp_path / "test_amp.py").write_text(textwrap.dedent("""\
        import torch

        def test_bad():
            model = torch.nn.Linear(3, 1)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                model(torch.randn(2, 3)).sum().backward()

        def test_good():
            model = torch.nn.Linear(3, 1)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(torch.randn(2, 3)).sum()
            loss.backward()
        """))
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # -p loads it
    command = [sys.executable, "-m", "pytest", "-q", "-p", "amplint.runtime.pytest_plugin", "-p", "no:cacheprovider",
               "-W", "ignore::amplint.runtime.AmpRuntimeWarning", str(tmp_path / "test_amp.py")]
    run = subprocess.run([*command, "--amplint-watch"], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 failed, 1 passed" in run.stdout and "AMP001" in run.stdout
    probe = ("import sys, amplint.runtime.pytest_plugin, amplint.runtime, amplint.cli, amplint.engine, "
             "amplint.rules; "
             "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", probe], check=True, env=env, timeout=600)


def test_pyproject_registers_the_plugin():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"amplint": "amplint.runtime.pytest_plugin"}


def test_the_command_line_warning_filter_turns_a_finding_into_an_exception():
    program = ("import torch, amplint.runtime\n"
               "model = torch.nn.Linear(2, 1)\n"
               "with amplint.runtime.watch():\n"
               "    with torch.autocast('cpu', dtype=torch.bfloat16):\n"
               "        model(torch.randn(1, 2)).sum().backward()\n")
    run = subprocess.run([sys.executable, "-W", "error::amplint.runtime.AmpRuntimeWarning", "-c", program],
                         capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                         timeout=600)
    assert run.returncode == 1 and "amplint.runtime.AmpRuntimeWarning: AMP001" in run.stderr, run.stderr


# --- what an fp32 island counts: an op's dtype= argument is a cast; autograd and the scaler are not island math --

@pytest.mark.parametrize("dtype", DTYPES)
def test_amp006_an_ops_float32_dtype_argument_is_a_cast(dtype):
    import torch.nn.functional as F

    dtype = getattr(torch, dtype)
    model = _model()

    def body(cast):
        with torch.autocast("cpu", dtype=dtype):
            hidden = model[0](torch.randn(4, 8))
            with torch.autocast("cpu", enabled=False):
                if cast:  # each op computes in float32 (or float64), as with hidden.float() first
                    F.log_softmax(hidden, dim=-1, dtype=torch.float32)
                    torch.sum(hidden, dtype=torch.float32)
                    hidden.cumsum(0, dtype=torch.float64)
                    torch.softmax(hidden, -1, torch.float32)  # the dtype argument given by position
                else:  # a dtype= argument that keeps the half precision is no cast to float32
                    F.log_softmax(hidden, dim=-1, dtype=dtype)  # kept-half

    assert codes(_watched(lambda: body(True))) == []
    report = _watched(lambda: body(False))
    assert [(f.code, f.line) for f in report.findings] == [("AMP006", _line_of("# kept-half"))]


@pytest.mark.parametrize("dtype", DTYPES)
def test_amp006_a_half_tensor_promoted_by_a_float32_tensor_computes_in_float32(dtype):
    """torch promotes a half tensor combined with a float32 one (of at least as many dimensions) and computes in
    float32: the island's purpose is served, as after `.float()` (the static rule's reading: promotion is no
    harm). What keeps the half precision is still an island op: a 0-dim float32 tensor does not promote a
    dimensioned half one, an in-place op writes into the half tensor, a reduction returns it."""
    dtype = getattr(torch, dtype)
    model = _model()

    def body(promoted):
        with torch.autocast("cpu", dtype=dtype):
            hidden = model[0](torch.randn(4, 8))
            target, weight = torch.randn(4, 8), torch.randn(8)
            with torch.autocast("cpu", enabled=False):
                if promoted:  # each op returns float32: torch computed it in float32
                    assert (hidden - target).dtype == torch.float32
                    assert torch.nn.functional.mse_loss(hidden, target).dtype == torch.float32
                    assert (hidden * weight).dtype == torch.cat([hidden, target]).dtype == torch.float32
                    assert torch.zeros(4, 8).add_(hidden).dtype == torch.float32  # into a float32 tensor
                    assert (hidden[0, 0] + target.sum()).dtype == torch.float32  # both zero-dim
                else:
                    hidden * torch.tensor(2.0)  # zero-dim-float32
                    hidden.clone().add_(weight)  # in-place-into-half
                    torch.max(hidden, dim=0)  # reduction-kept-half

    assert codes(_watched(lambda: body(True))) == []
    report = _watched(lambda: body(False))
    assert [(f.code, f.line) for f in report.findings] == [
        ("AMP006", _line_of(f"# {marker}")) for marker in ("zero-dim-float32", "in-place-into-half",
                                                           "reduction-kept-half")]


def test_amp006_backward_and_the_scalers_multiply_inside_an_island_are_not_island_ops():
    """The measured fix for a backward started under a framework's autocast: an `autocast(enabled=False)` region
    around the backward and the step. The backward of a half loss and the scaler's multiply run there, and they
    are not computations the island meant to hold in float32."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")

    def body():
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.float16):  # the framework's region
                loss = _loss(model)
                with torch.autocast("cpu", enabled=False):  # the user's fix
                    scaler.scale(loss).backward()
                    torch.autograd.grad(_loss(model.float()).half(), [model[0].weight])
                    scaler.step(optimizer)
                    scaler.update()
                    optimizer.zero_grad()

    assert codes(_watched(body)) == []


# --- the watch leaves compiled code and other threads alone -------------------------------------------------------

@functools.cache
def _island_function():
    real = pytest.importorskip("torch")  # the module itself: TorchDynamo traces this function

    def island(linear, x):
        with real.autocast("cpu", dtype=real.bfloat16):
            hidden = linear(x)
            with real.autocast("cpu", enabled=False):
                return real.exp(hidden.float()).sum()

    return island


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_compiled_function_with_an_island_runs_under_the_watch_and_the_watch_says_it_stepped_aside(backend):
    torch._dynamo.reset()
    linear = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    compiled = torch.compile(_island_function(), backend=backend, fullgraph=True)
    expected = _island_function()(linear, x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AmpRuntimeWarning)
        with watch() as report:
            first, second = compiled(linear, x), compiled(linear, x)  # traced, then the compiled code run
            with torch.autocast("cpu", dtype=torch.bfloat16):  # an island of the user's own open around it
                with torch.autocast("cpu", enabled=False):
                    third = torch.compile(_island_function(), backend=backend)(linear, x)
    assert torch.equal(first, expected) and torch.equal(second, expected) and torch.equal(third, expected)
    assert codes(report) == []
    assert len(report.notes) == 1 and "torch.compile" in report.notes[0]
    assert not torch._C._is_torch_function_mode_enabled()


def test_an_island_on_another_thread_is_left_alone_and_the_watched_threads_island_is_seen():
    import threading

    model = _model()
    entered, main_done, errors = threading.Event(), threading.Event(), []

    def other_thread():
        try:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                hidden = model[0](torch.randn(4, 8))
                with torch.autocast("cpu", enabled=False):
                    entered.set()
                    main_done.wait()
                    torch.exp(hidden)  # not the watched thread's: not checked
        except BaseException as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)
        finally:
            entered.set()

    def body():
        thread = threading.Thread(target=other_thread)
        try:
            with torch.autocast("cpu", dtype=torch.bfloat16):  # opened before the other thread's regions
                thread.start()
                entered.wait()
                hidden = model[0](torch.randn(4, 8))
                with torch.autocast("cpu", enabled=False):
                    torch.exp(hidden)  # watched-island
        finally:
            main_done.set()
            if thread.is_alive():
                thread.join()

    report = _watched(body)
    assert errors == []
    assert [(f.code, f.line) for f in report.findings] == [("AMP006", _line_of("# watched-island"))]
    assert len(report.notes) == 1 and "thread" in report.notes[0]


@pytest.mark.parametrize("flagged", [True, False], ids=["flagged", "clean"])
def test_amp003_get_total_norm_then_clip_grads_with_norm_is_a_clip(flagged):
    utils = torch.nn.utils
    if not hasattr(utils, "clip_grads_with_norm_"):
        pytest.skip("torch < 2.6 has no clip_grads_with_norm_")
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")

    def body():
        with torch.autocast("cpu", dtype=torch.float16):
            loss = _loss(model)
        scaler.scale(loss).backward()
        if not flagged:
            scaler.unscale_(optimizer)
        norm = utils.get_total_norm([p.grad for p in model.parameters()])  # the-split-norm
        utils.clip_grads_with_norm_(model.parameters(), 1.0, norm)
        scaler.step(optimizer)
        scaler.update()

    report = _watched(body)
    # reported where the scaled gradients are measured: the line that unscale_ must come before
    assert [(f.code, f.line) for f in report.findings] == ([("AMP003", _line_of("# the-split-norm"))]
                                                          if flagged else [])


# --- the user's line: installed code (a framework) and the standard library are context, not the finding's place ---

FAKE_FRAMEWORK = '''
import contextlib

import torch


def fit(step, batches, dtype):
    for batch in batches:
        with torch.autocast("cpu", dtype=dtype):  # the framework's region, around the user's step
            step(batch)


def backward(loss):
    loss.backward()  # framework-backward


@contextlib.contextmanager
def autocast(dtype):  # a region the user opens through the framework
    with torch.autocast("cpu", dtype=dtype):
        yield


def make_scaler():
    return torch.amp.GradScaler("cpu")
'''


@pytest.fixture
def framework(tmp_path, monkeypatch):
    """A module installed in a site-packages folder (a stand-in for a trainer), imported fresh."""
    folder = tmp_path / "lib" / "site-packages" / "amplint_fake_framework"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(FAKE_FRAMEWORK)
    monkeypatch.syspath_prepend(str(folder.parent))
    monkeypatch.delitem(sys.modules, "amplint_fake_framework", raising=False)
    import amplint_fake_framework

    yield amplint_fake_framework
    sys.modules.pop("amplint_fake_framework", None)


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_mistake_in_installed_code_is_reported_at_the_users_line_with_the_framework_frame(framework, dtype):
    """The backward runs in the framework's code, under the region the framework opened around the user's step:
    the finding is the user's call, `via` the framework's line, and the fix named is a disabled region (the user
    cannot close the framework's)."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(batch):
        loss = model(batch).pow(2).mean()
        framework.backward(loss)  # user-calls-framework
        optimizer.step()  # user-steps-in-framework-region
        optimizer.zero_grad()

    report = _watched(lambda: framework.fit(step, [torch.randn(4, 8)] * 2, getattr(torch, dtype)))
    (backward, step_finding) = report.findings
    assert (backward.code, backward.filename, backward.line) == ("AMP001", HERE, _line_of("# user-calls-framework"))
    source = Path(framework.__file__).read_text().splitlines()
    assert backward.via_filename == framework.__file__
    assert "# framework-backward" in source[backward.via_line - 1] and backward.via_column == 5
    assert str(backward).endswith(f"(via amplint_fake_framework/__init__.py:{backward.via_line})")
    assert 'inside `with torch.autocast("cpu", enabled=False):`' in backward.message
    (note,) = backward.to_diagnostic().notes
    assert (note.filename, note.location.row, note.location.column) == (framework.__file__, backward.via_line, 5)
    assert (step_finding.code, step_finding.line, step_finding.via_filename) == (
        "AMP002", _line_of("# user-steps-in-framework-region"), None)
    assert 'run the step inside `with torch.autocast("cpu", enabled=False):`' in step_finding.message


def test_a_region_the_user_opens_through_a_framework_is_the_users_to_close(framework):
    model = _model()

    def body():
        with framework.autocast(torch.bfloat16):
            loss = _loss(model)
            framework.backward(loss)  # framework-region-of-the-user

    (finding,) = _watched(body).findings
    assert (finding.code, finding.line) == ("AMP001", _line_of("# framework-region-of-the-user"))
    assert finding.message.endswith("close the autocast region before it") and finding.via_line is not None


def test_the_standard_librarys_frames_are_not_the_users_line():
    """A backward that `contextlib.ExitStack` runs at the end of the user's `with`: reported at the user's line
    (before, at contextlib's), and the standard library is no framework to name."""
    import contextlib

    model = _model()

    def body():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = _loss(model)
            with contextlib.ExitStack() as stack:  # stdlib-runs-backward
                stack.callback(loss.backward)

    (finding,) = _watched(body).findings
    assert (finding.code, finding.filename, finding.line, finding.via) == (
        "AMP001", HERE, _line_of("# stdlib-runs-backward"), None)


def test_a_scaler_installed_code_builds_again_is_not_amp004(framework):
    """A framework builds a GradScaler for each run it is given (a trainer, an accelerator): whether two runs are
    one training's is not known, so a second one built by the same call is silent; the user's own is reported."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def body(build):
        for _ in range(2):
            scaler = build()
            scaler.scale(_loss(model)).backward()
            scaler.step(optimizer)
            scaler.update()

    def own():
        return torch.amp.GradScaler("cpu")  # user-builds

    assert codes(_watched(lambda: body(framework.make_scaler))) == []
    report = _watched(lambda: body(own))
    assert [(f.code, f.line) for f in report.findings] == [("AMP004", _line_of("# user-builds"))]


def test_owner_of_a_file():
    from amplint.runtime import watcher

    assert watcher._owner(watcher.torch.__file__) == "torch"
    assert watcher._owner(watcher.amplint.__file__) == "torch"
    assert watcher._owner(HERE) == "user"
    assert watcher._owner(contextlib_file()) == "stdlib"
    assert watcher._owner("/opt/env/lib/python3.12/site-packages/lightning/pytorch/core/module.py") == "installed"
    assert watcher._owner("/usr/lib/python3/dist-packages/accelerate/accelerator.py") == "installed"
    assert watcher._owner("<string>") == "user" and watcher._owner("<frozen runpy>") == "torch"


def contextlib_file() -> str:
    import contextlib

    return contextlib.__file__


@pytest.mark.parametrize("unscale", ["before-norm", "between", "none"])
def test_amp003_a_total_norm_measured_before_unscale_is_reported_at_its_line(unscale):
    """get_total_norm on scaled gradients, then unscale_, then clip_grads_with_norm_ with that norm: the clip
    coefficient is 1/65536 of the right one (every gradient shrunk), though the clip itself ran after unscale_.
    Reported at the norm's line; measured after unscale_, silent; without any unscale_, the norm's line too."""
    utils = torch.nn.utils
    if not hasattr(utils, "get_total_norm"):
        pytest.skip("torch < 2.6 has no get_total_norm")
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    norms = []

    def body():
        with torch.autocast("cpu", dtype=torch.float16):
            loss = model(torch.randn(4, 8)).float().pow(2).mean()  # (finite gradients at the scale 65536)
        scaler.scale(loss).backward()
        if unscale == "before-norm":
            scaler.unscale_(optimizer)
        norm = utils.get_total_norm([p.grad for p in model.parameters()])  # norm-of-scaled
        if unscale == "between":
            scaler.unscale_(optimizer)
        norms.append(float(norm))
        utils.clip_grads_with_norm_(model.parameters(), 1.0, norm)
        scaler.step(optimizer)
        scaler.update()

    report = _watched(body)
    if unscale == "before-norm":
        assert codes(report) == [] and norms[0] < 100
        return
    assert norms[0] > 1000  # the scaled gradients' norm
    assert [(f.code, f.line) for f in report.findings] == [("AMP003", _line_of("# norm-of-scaled"))]
    assert report.findings[0].message.startswith("get_total_norm measures gradients still multiplied")


@pytest.mark.parametrize("optimizer_class", ["SGD", "AdamW"])
def test_amp006_an_optimizers_own_update_inside_an_island_is_not_an_island_op(optimizer_class):
    """The step inside the island (the fix for a framework's region) updates a bfloat16 parameter and its state:
    the optimizer's ops, not the island's computations. The user's own op on that parameter there is one, also
    after a step that raised."""
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 1).to(torch.bfloat16))
    optimizer = getattr(torch.optim, optimizer_class)(model.parameters(), lr=0.1)

    class Failing(torch.optim.SGD):
        def step(self, closure=None):
            raise RuntimeError("a step that fails")

    failing = Failing(model.parameters(), lr=0.1)

    def body():
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(torch.randn(4, 8)).float().pow(2).mean()
                with torch.autocast("cpu", enabled=False):
                    loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
                    with pytest.raises(RuntimeError):
                        failing.step()
                    model[1].weight * 2  # users-half-op

    assert [(f.code, f.line) for f in _watched(body).findings] == [("AMP006", _line_of("# users-half-op"))]

    from amplint.runtime import watcher

    def raising_then_stepping():
        for _ in range(3):
            with pytest.raises(RuntimeError):
                failing.step()
        optimizer.step()
        assert watcher._local.steps == []  # the raising steps' frames were let go at the next step

    _watched(raising_then_stepping)


def test_amp006_an_island_in_a_closure_the_step_calls_is_the_users():
    """`optimizer.step(closure)` runs the user's forward (Lightning's automatic optimization does): an island op
    there is the user's computation, though a step is running further up."""
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def closure():
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            hidden = model[0](torch.randn(4, 8))
            with torch.autocast("cpu", enabled=False):
                loss = model[1](hidden).pow(2).mean()  # closure-island-op
        loss.backward()
        return loss

    def body():
        with pytest.raises(RuntimeError, match="dtype"):  # the uncast island's matmul raises, as it would plainly
            optimizer.step(closure)

    assert [(f.code, f.line) for f in _watched(body).findings] == [("AMP006", _line_of("# closure-island-op"))]
