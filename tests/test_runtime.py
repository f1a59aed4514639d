"""The runtime harness: every rule's harm, and its removal by amplint's own fix, measured with real torch.

The `runtime` tests run each fixture program and its fixed twin in subprocesses (a few seconds each);
deselect them with `-m "not runtime"`.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from amplint import harness
from amplint.rules import ALL_RULES
from preloaded import Preloaded, is_program_run

PROGRAMS = harness.discover()
HARM = [program for program in PROGRAMS if not program.safety]  # the rest: safety programs (fixtures/safe-fixes)
# A program's run takes seconds; the bound only stops a hung one, and is generous for a loaded machine (the
# harness's own default is for a quiet one).
HANG_GUARD_S = 600.0
RUN_ONLY = ("cwd", "timeout")  # options of a run that a forked run takes as they are (the rest decide whether it is)


def _cases():
    for program in PROGRAMS:
        for device in ("cpu", "cuda"):
            for dtype in program.dtypes_for(device):
                marks = [pytest.mark.runtime] + ([pytest.mark.cuda] if device == "cuda" else [])
                yield pytest.param(program, device, dtype, id=f"{program.name}-{device}-{dtype}", marks=marks)


@pytest.fixture(scope="module")
def preloaded():
    """Program runs forked from an interpreter that imported torch once (tests/preloaded.py), started as the
    harness starts each run's interpreter."""
    runner = Preloaded(dict(os.environ, PYTHONHASHSEED="0", OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1"))
    yield runner
    runner.close()


@pytest.fixture
def forked_runs(preloaded, monkeypatch):
    """The harness's `subprocess.run` forks its program runs from the preloaded interpreter (the rest of its code
    runs as it is); the list says, for each program run, whether it was forked. Another command the harness starts
    runs as it is and is not listed: its CUDA probe (`harness.cuda_available`, `python -c ...`, made once per
    process by the first CUDA row, inside that row's test) is no program run."""
    calls = []

    def run(args, **options):
        if is_program_run(args):
            decisive = {key: value for key, value in options.items() if key not in RUN_ONLY}
            calls.append(preloaded.forks(args, **decisive))
        return preloaded.run(args, **options)

    monkeypatch.setattr(harness, "subprocess", types.SimpleNamespace(run=run, TimeoutExpired=subprocess.TimeoutExpired))
    return calls


@pytest.mark.parametrize(("program", "device", "dtype"), list(_cases()))
def test_flagged_shows_harm_and_fix_removes_it(program: harness.Program, device: str, dtype: str,
                                               forked_runs) -> None:
    if device == "cuda" and not harness.cuda_available():
        pytest.skip("CUDA not available")
    row = harness.check(program, device, dtype, timeout=HANG_GUARD_S)
    assert row.confirmed, (
        f"{program.name} on {device}/{dtype}: " + "; ".join(row.problems)
        + f"\nflagged: {harness.summarize(program, row.flagged_run)}"
        + f"\nfixed:   {harness.summarize(program, row.fixed_run)}"
    )
    # every program run forked from the preloaded interpreter (an unchanged safety program: none)
    assert all(forked_runs), forked_runs


# --- the causes of the first CUDA run's failures, each made on CPU ---------------------------------------------
# One H200, torch 2.11.0+cu130, 2026-12-04 (docs/evidence.md): 12 of the 53 CUDA rows of this file failed. 11 on
# `all(forked_runs)` with [False, True, True]: each xdist worker's first CUDA row made the harness's CUDA probe
# inside its test, and the probe was counted as a run that did not fork (the program runs did fork). One, AMP005
# predict_decorated on float16, on its expectation: the harm there is an overflow.

CHEAP = next(program for program in HARM
             if program.name == "AMP014-autocast-device-mismatch/torch_device_as_device_type")


@pytest.mark.runtime
def test_the_cuda_probe_inside_a_row_is_no_program_run(forked_runs) -> None:
    """The CUDA row's condition on a CPU machine: the probe (`harness.cuda_available`, cached per process) made in
    the row's test, as each worker's first CUDA row makes it; then the row's program runs. Only those count, and
    they fork."""
    harness.cuda_available.cache_clear()
    try:
        harness.cuda_available()
        row = harness.check(CHEAP, "cpu", "bfloat16", timeout=HANG_GUARD_S)
    finally:
        harness.cuda_available.cache_clear()  # asked again, outside any test's stand-in, where a row needs it
    assert row.confirmed, row.problems
    assert forked_runs == [True, True]


# The CUDA float16 numbers of predict_decorated (flagged: the scaled logits overflow float16; fixed: the model's own).
PREDICT_DECORATED_CUDA_FLOAT16 = (
    {"logit_ratio": float("inf"), "max_prob_diff": float("nan"), "min_confidence": float("nan")},
    {"logit_ratio": 1.0, "max_prob_diff": 0.0, "min_confidence": 0.5001},
)


def test_an_overflow_that_is_the_harm_confirms_the_row() -> None:
    """AMP005's scaled logits overflow float16 on CUDA (inf; softmax of inf: NaN probabilities): worse than the
    expectation's saturated softmax, and still the harm. The fixed run's numbers stay held to finite ones."""
    program = next(program for program in HARM if program.name == "AMP005-scaler-in-inference/predict_decorated")
    flagged, fixed = (harness.RunResult(json.loads(json.dumps(data))) for data in PREDICT_DECORATED_CUDA_FLOAT16)
    row = harness.Row(program, "cuda", "float16", harness.FixedProgram("x"), flagged, fixed)
    assert harness._judge(row).problems == []
    nan = float("nan")
    no_ratio = harness.RunResult({"logit_ratio": nan, "max_prob_diff": nan, "min_confidence": nan})
    row = harness.Row(program, "cuda", "float16", harness.FixedProgram("x"), no_ratio, fixed)
    assert harness._judge(row).problems == [f"flagged run: expected {program.bad}"]  # NaN logits show no scaling
    row = harness.Row(program, "cuda", "float16", harness.FixedProgram("x"), flagged, no_ratio)
    assert harness._judge(row).problems == [f"fixed run: expected {program.good}"]


@pytest.mark.runtime
def test_a_forked_run_is_a_fresh_interpreters_run(preloaded, tmp_path) -> None:
    """What the harness reads from a run forked from the preloaded interpreter is what a fresh interpreter gives:
    a spread of the programs' data (flagged and fixed, the same numbers), a crash's exit code and exception type,
    the folder, `sys.argv`, `sys.path[0]` and the environment a program sees."""
    dtype = "float16"
    crash = tmp_path / "crash.py"
    crash.write_text("import sys\nprint('partial')\nsys.stdout.flush()\nraise ValueError('boom')\n")
    exit_3 = tmp_path / "exit_3.py"
    exit_3.write_text("import json, os, sys\nprint(json.dumps({'cwd': os.getcwd(), 'path0': sys.path[0], "
                      "'argv': sys.argv, 'dtype': os.environ['AMPLINT_DTYPE']}))\nsys.exit(3)\n")
    paths = [crash, exit_3]
    for program in PROGRAMS[::24]:  # a spread: each is a fresh interpreter importing torch
        if dtype in program.dtypes_for("cpu"):
            paths.append(program.path)
            fixed = harness.fix_program(program).text
            if fixed is not None:
                paths.append(harness._write(tmp_path / program.path.parent.parent.name / program.path.name, fixed))
    fresh = [harness.run_file(path, "cpu", dtype, timeout=HANG_GUARD_S) for path in paths]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(harness, "subprocess",
                      types.SimpleNamespace(run=preloaded.run, TimeoutExpired=subprocess.TimeoutExpired))
        forked = [harness.run_file(path, "cpu", dtype, timeout=HANG_GUARD_S) for path in paths]
    for path, one, other in zip(paths, fresh, forked):
        assert (one.data, one.error, one.returncode, one.raised) == (
            other.data, other.error, other.returncode, other.raised), path
    assert fresh[0].raised == "ValueError" and fresh[1].returncode == 3


def test_every_registered_rule_has_a_runtime_program() -> None:
    covered = {program.rule for program in HARM}
    missing = sorted(rule.code for rule in ALL_RULES if rule.code not in covered)
    assert not missing, f"rules without a fixtures/<CODE>-<name>/runtime/ program: {', '.join(missing)}"


def test_every_program_belongs_to_a_registered_rule() -> None:
    codes = {rule.code for rule in ALL_RULES}
    assert [p.name for p in PROGRAMS if p.rule not in codes] == []


@pytest.mark.parametrize("program", HARM, ids=[p.name for p in HARM])
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


@pytest.mark.parametrize("program", HARM, ids=[p.name for p in HARM])
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
        folder = program.path.parent.parent.name
        assert folder.startswith(program.rule + "-") or (program.safety and folder == harness.SAFETY_FOLDER)
        assert program.rule in {rule.code for rule in ALL_RULES}, program.name


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
    result = harness.run_file(crash, "cpu", "float16", timeout=600)
    assert result.data is None and "boom" in result.error
    silent = tmp_path / "silent.py"
    silent.write_text("print('hello')\n")
    assert "not JSON" in harness.run_file(silent, "cpu", "float16", timeout=600).error
    env = tmp_path / "env.py"
    env.write_text("import json, os\nprint(json.dumps({k: os.environ[k] for k in ('AMPLINT_DEVICE', 'AMPLINT_DTYPE')}))\n")
    assert harness.run_file(env, "cuda", "bfloat16").data == {"AMPLINT_DEVICE": "cuda", "AMPLINT_DTYPE": "bfloat16"}


def test_harness_never_imports_torch() -> None:
    code = ("import sys, amplint.harness as h; h.discover(); [h.fix_program(p) for p in h.discover()]; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=600)


# --- nothing new breaks: exceptions of fixed runs, safety programs -----------------------------------------

def test_raised_by_reads_tracebacks_and_reported_errors(tmp_path) -> None:
    crash = tmp_path / "crash.py"
    crash.write_text("import json\nprint(json.dumps({}))\n{}.float()\n")
    run = harness.run_file(crash, "cpu", "float16", timeout=600)
    assert harness.raised_by(run) == "AttributeError"
    assert harness.raised_by(harness.RunResult({"error": None, "x": 1})) is None
    assert harness.raised_by(harness.RunResult({"error": "RuntimeError: mat1 and mat2 ..."})) == "RuntimeError"
    assert harness.raised_by(harness.RunResult(None, "timed out after 1 s", None, 1.0, "timeout")) == "timeout"


def _row(program, flagged, fixed, safe=None, fixed_program=None):
    row = harness.Row(program, "cpu", "float16", fixed_program or harness.FixedProgram("x"), flagged, fixed, safe)
    return harness._judge(row)


def test_a_fixed_run_that_raises_something_new_fails_the_row() -> None:
    """The harm is gone but the fixed program raises: the row fails (before, only `good` was asked, and a good
    expression that does not read the error would pass)."""
    program = harness.Program(Path("AMP011-x/runtime/p.py"), "AMP011", "o", "True", "True", ("float16",))
    same = harness.RunResult({"error": "RuntimeError: unscale_() has already been called"})
    assert _row(program, same, harness.RunResult({"error": "RuntimeError: again"})).problems == []
    assert _row(program, same, harness.RunResult({"error": None})).problems == []
    new = _row(program, harness.RunResult({"error": None}), harness.RunResult({"error": "AssertionError: x"}))
    assert new.problems == ["the fixed program raises AssertionError, the original did not"]
    crashed = harness.RunResult(None, "exit code 1: ...", 1, 0.1, "AttributeError")
    safe = _row(program, harness.RunResult({"error": None}), harness.RunResult({"error": None}), crashed)
    assert safe.problems == ["the safely fixed program raises AttributeError, the original did not"]


def test_safety_program_spec_and_judgement(tmp_path) -> None:
    runtime = tmp_path / harness.SAFETY_FOLDER / "runtime"
    runtime.mkdir(parents=True)
    (runtime / "p.py").write_text("print('{}')\n")
    (runtime / "p.expect.json").write_text(json.dumps({"rule": "AMP008", "observable": "loss", "same": ["loss"],
                                                       "dtypes": ["float16"], "note": "n"}))
    (program,) = harness.discover(tmp_path)
    assert program.safety and program.same == ("loss",)
    unchanged = _row(program, None, None, fixed_program=harness.FixedProgram(None))
    assert unchanged.confirmed and harness.summarize(program, None) == harness.UNCHANGED
    (line,) = harness.table([unchanged]).splitlines()[2:]
    assert line.endswith(f"| {harness.UNCHANGED} | no fixed version (identical to the original) | "
                         "yes: nothing to compare |"), line
    ok = harness.RunResult({"loss": 0.5, "error": None})
    assert _row(program, ok, harness.RunResult({"loss": 0.5, "error": None})).problems == []
    changed = _row(program, ok, harness.RunResult({"loss": 0.25, "error": None}))
    assert changed.problems == ["fixed run: loss = 0.25, the original gave 0.5"]
    broke = _row(program, ok, harness.RunResult(None, "exit code 1: AttributeError", 1, 0.1, "AttributeError"))
    assert "the fixed program raises AttributeError, the original did not" in broke.problems
    (runtime / "p.expect.json").write_text(json.dumps({"rule": "AMP008", "observable": "loss", "dtypes": ["float16"]}))
    with pytest.raises(harness.HarnessError, match="missing"):
        harness.discover(tmp_path)


def test_safety_program_is_run_only_when_the_fixer_changes_it(tmp_path, monkeypatch) -> None:
    """A safety program the fixer leaves alone costs nothing; a changed one runs both versions; a harm program with
    an unsafe spec also runs its safely fixed text when that is a third text."""
    ran = []

    def fake_run(path, device, dtype, timeout=harness.TIMEOUT_S):
        ran.append(Path(path).name)
        return harness.RunResult({"loss": 1.0, "error": None})

    monkeypatch.setattr(harness, "run_file", fake_run)
    safety = harness.Program(tmp_path / "safe-fixes/runtime/s.py", "AMP008", "o", "", "", ("float16",),
                             same=("loss",))
    harm = harness.Program(tmp_path / "AMP005-x/runtime/h.py", "AMP005", "o", "True", "True", ("float16",), unsafe=True)
    fixes = {safety.path: harness.FixedProgram(None), harm.path: harness.FixedProgram("fixed", safe_text="safe")}
    monkeypatch.setattr(harness, "fix_program", lambda program: fixes[program.path])
    rows = harness.run_rows([safety, harm], [("cpu", "float16")])
    assert sorted(ran) == ["h.py", "h.py", "h.safe.py"] and all(row.confirmed for row in rows)
    ran.clear()
    fixes[safety.path] = harness.FixedProgram("changed")
    rows = harness.run_rows([safety], [("cpu", "float16")])
    assert ran == ["s.py", "s.py"] and rows[0].confirmed


def test_the_harness_says_where_it_looked_for_programs(tmp_path, capsys) -> None:
    """Installed without its clone (`pip install .`), the default folder does not exist: the error names it and
    how to point the harness at the programs; a rule with no program is named."""
    assert harness.main(["--fixtures", str(tmp_path / "fixtures"), "--device", "cpu"]) == 2
    error = capsys.readouterr().err
    assert f"no runtime programs found (`{tmp_path / 'fixtures'}/*/runtime/*.py`)" in error
    assert "--fixtures PATH/TO/CLONE/fixtures" in error
    assert harness.main(["--rule", "AMP999", "--device", "cpu"]) == 2
    error = capsys.readouterr().err
    assert "rule AMP999" in error and "pip install -e" not in error


# --- the harness's command line: paths, progress, tables, pictures --------------------------------------------

def test_a_relative_fixtures_folder_is_the_working_folders(tmp_path, monkeypatch) -> None:
    """`--fixtures fixtures` from the clone: each program runs in its own folder, so a relative path must be made
    absolute first (it was looked for as `.../runtime/fixtures/...`, and no row was confirmed)."""
    runtime = tmp_path / "fixtures" / "AMP999-example" / "runtime"
    runtime.mkdir(parents=True)
    (runtime / "prog.py").write_text("import json, os\nprint(json.dumps({'cwd': os.getcwd()}))\n")
    (runtime / "prog.expect.json").write_text(json.dumps({"rule": "AMP999", "observable": "x", "bad": "True",
                                                          "good": "True", "dtypes": ["float16"]}))
    monkeypatch.chdir(tmp_path)
    (program,) = harness.discover(Path("fixtures"))
    assert program.path == runtime / "prog.py"
    run = harness.run_file(Path("fixtures/AMP999-example/runtime/prog.py"), "cpu", "float16", timeout=600)
    assert run.data == {"cwd": str(runtime)}, run.error


def _fake_rows(monkeypatch, tmp_path):
    monkeypatch.setattr(harness, "run_file", lambda path, device, dtype, timeout=harness.TIMEOUT_S:
                        harness.RunResult({"clip_norm": 35470.0, "error": None}))
    programs = [harness.Program(tmp_path / f"AMP003-x/runtime/p{n}.py", "AMP003", "the norm", "True", "True",
                                ("bfloat16", "float16")) for n in range(2)]
    monkeypatch.setattr(harness, "fix_program", lambda program: harness.FixedProgram("fixed"))
    return programs


def test_progress_tells_each_run_and_each_finished_row(tmp_path, monkeypatch) -> None:
    programs = _fake_rows(monkeypatch, tmp_path)
    events = []
    rows = harness.run_rows(programs, [("cpu", "bfloat16"), ("cpu", "float16")], workers=1,
                            progress=lambda event, row, run, done, total: events.append((event, run, done, total)))
    assert len(rows) == 4 and all(row.confirmed for row in rows)
    assert [done for event, _, done, _ in events if event == "done"] == [1, 2, 3, 4]
    assert {total for *_, total in events} == {4}
    assert sorted(run for event, run, *_ in events if event == "start") == ["fixed"] * 4 + ["flagged"] * 4
    stream = io.StringIO()
    shown = harness.ProgressOnStderr(stream)
    shown("start", rows[0], "flagged", 0, 4)
    shown("done", rows[0], "", 1, 4)
    assert stream.getvalue() == "[1/4 rows] AMP003-x/p0 (cpu, bfloat16): confirmed\n"  # not a terminal: a log


def test_the_terminal_table_fits_and_markdown_is_an_option(tmp_path, monkeypatch, capsys) -> None:
    programs = _fake_rows(monkeypatch, tmp_path)
    rows = harness.run_rows(programs, [("cpu", "float16")])
    rows[1].problems.append("flagged run: expected r['clip_norm'] > 1000")
    text = harness.compact(rows, width=80)
    table = text.split("\n\n")[0].splitlines()  # then why each failed row failed, as long as it takes
    assert len(table) == 3 and all(len(line) <= 80 for line in table), text
    assert table[1].split()[:5] == ["AMP003", "p0", "cpu", "float16", "yes"]
    assert "AMP003-x/p1 (cpu, float16) not confirmed: flagged run: expected r['clip_norm'] > 1000" in text
    monkeypatch.setattr(harness, "discover", lambda root: programs)
    monkeypatch.setattr(harness, "targets", lambda devices: [("cpu", "float16")])
    assert harness.main(["--device", "cpu", "-q"]) == 0
    assert capsys.readouterr().out.splitlines()[0].split() == ["rule", "program", "device", "dtype", "confirmed",
                                                                "flagged", "run", "fixed", "run"]
    assert harness.main(["--device", "cpu", "--format", "markdown"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("| rule | program | device | dtype | observable |")
    assert "2 programs, 2 rows (cpu float16)" in captured.err and "[2/2 rows]" in captured.err


def test_pictures_go_to_an_ignored_folder_unless_named(tmp_path, monkeypatch) -> None:
    from amplint import plots

    programs = _fake_rows(monkeypatch, tmp_path)
    monkeypatch.setattr(harness, "discover", lambda root: programs)
    monkeypatch.setattr(harness, "targets", lambda devices: [("cpu", "float16")])
    monkeypatch.setattr(plots, "require_matplotlib", lambda: None)
    drawn = []
    monkeypatch.setattr(plots, "draw", lambda rows, folder: drawn.append(folder) or [])
    assert harness.main(["--device", "cpu", "-q", "--plots"]) == 0
    assert harness.main(["--device", "cpu", "-q", "--plots", str(tmp_path / "mine")]) == 0
    assert drawn == [Path("plots"), tmp_path / "mine"]
    ignored = (Path(__file__).resolve().parents[1] / ".gitignore").read_text(encoding="utf-8").splitlines()
    assert "/plots/" in ignored
