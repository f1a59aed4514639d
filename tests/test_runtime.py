"""The runtime harness: every rule's harm, and its removal by amplint's own fix, measured with real torch.

The `runtime` tests run each fixture program and its fixed twin in subprocesses (a few seconds each);
deselect them with `-m "not runtime"`.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from amplint import harness
from amplint.rules import ALL_RULES

PROGRAMS = harness.discover()


def _cases():
    for program in PROGRAMS:
        for device in ("cpu", "cuda"):
            for dtype in program.dtypes_for(device):
                marks = [pytest.mark.runtime] + ([pytest.mark.cuda] if device == "cuda" else [])
                yield pytest.param(program, device, dtype, id=f"{program.name}-{device}-{dtype}", marks=marks)


@pytest.mark.parametrize(("program", "device", "dtype"), list(_cases()))
def test_flagged_shows_harm_and_fix_removes_it(program: harness.Program, device: str, dtype: str) -> None:
    if device == "cuda" and not harness.cuda_available():
        pytest.skip("CUDA not available")
    row = harness.check(program, device, dtype)
    assert row.confirmed, (
        f"{program.name} on {device}/{dtype}: " + "; ".join(row.problems)
        + f"\nflagged: {harness.summarize(program, row.flagged_run)}"
        + f"\nfixed:   {harness.summarize(program, row.fixed_run)}"
    )


def test_every_registered_rule_has_a_runtime_program() -> None:
    covered = {program.rule for program in PROGRAMS}
    missing = sorted(rule.code for rule in ALL_RULES if rule.code not in covered)
    assert not missing, f"rules without a fixtures/<CODE>-<name>/runtime/ program: {', '.join(missing)}"


def test_every_program_belongs_to_a_registered_rule() -> None:
    codes = {rule.code for rule in ALL_RULES}
    assert [p.name for p in PROGRAMS if p.rule not in codes] == []


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_fixer_rewrites_the_program(program: harness.Program) -> None:
    fixed = harness.fix_program(program)
    if not program.fix:  # a rule without a fix: flagged, and nothing applied
        assert program.rule in fixed.flagged_codes and program.rule not in fixed.applied_codes, fixed.problems
        return
    assert fixed.text is not None, fixed.problems
    assert fixed.text != program.text, "the fixed program must differ from the flagged one"
    assert program.rule in fixed.flagged_codes
    assert program.rule not in fixed.remaining_codes
    assert fixed.problems == ()
    compile(fixed.text, str(program.path), "exec")


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_safe_fixes_alone_suffice_unless_spec_says_unsafe(program: harness.Program) -> None:
    """A spec that does not ask for unsafe fixes is proven with safe fixes only; one that does needs them."""
    from amplint.fixer import fix_text

    safe = fix_text(program.text, str(program.path), unsafe=False)
    if not program.fix:
        assert program.rule not in {d.code for d in fix_text(program.text, str(program.path), unsafe=True).applied}
    elif program.unsafe:
        assert program.rule not in {d.code for d in safe.applied}, "the fix is safe: drop \"unsafe\" from the spec"
    else:
        assert safe.text != program.text


def test_specs_are_complete() -> None:
    assert PROGRAMS, "no runtime programs found"
    for program in PROGRAMS:
        assert program.observable and program.note, program.name
        assert program.path.parent.parent.name.startswith(program.rule + "-")


def test_missing_spec_is_an_error(tmp_path) -> None:
    runtime = tmp_path / "AMP999-example" / "runtime"
    runtime.mkdir(parents=True)
    (runtime / "prog.py").write_text("print('{}')\n")
    with pytest.raises(harness.HarnessError, match="expect.json"):
        harness.discover(tmp_path)
    (runtime / "prog.expect.json").write_text(json.dumps({"rule": "AMP998", "observable": "x", "bad": "True",
                                                          "good": "True", "dtypes": ["float16"]}))
    with pytest.raises(harness.HarnessError, match="does not match its folder"):
        harness.discover(tmp_path)


def test_evaluate_and_table() -> None:
    assert harness.evaluate("r['x'] > 1 and dtype == 'float16'", {"x": 2}, "cpu", "float16") == (True, None)
    ok, error = harness.evaluate("r['missing']", {}, "cpu", "float16")
    assert not ok and "KeyError" in error
    assert harness.evaluate("math.isinf(r['v'])", {"v": float("inf")}, "cpu", "bfloat16") == (True, None)
    program = PROGRAMS[0]
    row = harness.Row(program, "cpu", "bfloat16", harness.FixedProgram("x"),
                      harness.RunResult({"a": 1.0}), harness.RunResult(None, "exit code 1: boom"))
    harness._judge(row)
    text = harness.table([row])
    assert text.splitlines()[0] == ("| rule | program | device | dtype | observable | flagged run | fixed run "
                                    "| confirmed |")
    assert "failed: exit code 1: boom" in text and "NO: " in text


def test_run_file_reports_crashes_and_missing_json(tmp_path) -> None:
    crash = tmp_path / "crash.py"
    crash.write_text("raise SystemExit('boom')\n")
    result = harness.run_file(crash, "cpu", "float16", timeout=30)
    assert result.data is None and "boom" in result.error
    silent = tmp_path / "silent.py"
    silent.write_text("print('hello')\n")
    assert "not JSON" in harness.run_file(silent, "cpu", "float16", timeout=30).error
    env = tmp_path / "env.py"
    env.write_text("import json, os\nprint(json.dumps({k: os.environ[k] for k in ('AMPLINT_DEVICE', 'AMPLINT_DTYPE')}))\n")
    assert harness.run_file(env, "cuda", "bfloat16").data == {"AMPLINT_DEVICE": "cuda", "AMPLINT_DTYPE": "bfloat16"}


def test_harness_never_imports_torch() -> None:
    code = ("import sys, amplint.harness as h; h.discover(); [h.fix_program(p) for p in h.discover()]; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
