"""Worker processes: the same output, in the same order, as a serial run; the progress bar only on a terminal."""

from __future__ import annotations

import faulthandler
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from amplint import parallel
from amplint.config import Settings
from amplint.discovery import discover
from amplint.parallel import Progress, check_path, lint_paths
from amplint.rules import ALL_RULES
from amplint.outcome import Mode
from samples import amplint_process

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
# The rules' fixtures (single files, projects across modules) and the notebooks: the pool is compared with a serial
# run on them (the safety corpus's generated programs add time, not cases).
TREES = [str(path.relative_to(REPO)) for path in sorted(FIXTURES.glob("AMP*-*"))] + ["fixtures/notebooks"]


def _amplint(*args: str) -> subprocess.CompletedProcess:
    return amplint_process(*args, cwd=REPO)


def test_jobs_1_and_jobs_2_print_the_same():
    """JSON holds every field of every finding (the other formats render the same outcomes: compared with their
    source lines in-process below)."""
    serial = _amplint("check", *TREES, "--no-cache", "--jobs", "1", "--output-format", "json")
    pooled = _amplint("check", *TREES, "--no-cache", "--jobs", "2", "--output-format", "json")
    assert serial.returncode == pooled.returncode
    assert serial.stdout == pooled.stdout
    assert serial.stdout.strip()


def test_pool_outcomes_are_those_of_a_serial_run_in_order():
    settings = Settings(root=REPO)
    files = list(discover([str(REPO / tree) for tree in TREES], settings))
    assert len(files) >= parallel.SERIAL_BELOW
    serial = lint_paths(files, ALL_RULES, settings, Mode(), jobs=1)
    pooled = lint_paths(files, ALL_RULES, settings, Mode(), jobs=2)
    assert [o.path for o in pooled] == files
    assert [(o.path, o.diagnostics, [d.source_line for d in o.diagnostics], o.internal_error) for o in pooled] == \
        [(o.path, o.diagnostics, [d.source_line for d in o.diagnostics], o.internal_error) for o in serial]


def test_few_files_stay_in_this_process(monkeypatch):
    def no_pool(*args, **kwargs):
        raise AssertionError("a pool was started")

    monkeypatch.setattr(parallel, "ProcessPoolExecutor", no_pool)
    files = sorted(str(p) for p in (FIXTURES).rglob("*.py"))[: parallel.SERIAL_BELOW - 1]
    outcomes = lint_paths(files, ALL_RULES, Settings(root=REPO), Mode(), jobs=4)
    assert [o.path for o in outcomes] == files


_PARENT = os.getpid()


def _dying_chunk(paths):
    """A worker that dies (as if killed) on the chunk holding f07.py."""
    if any(path.endswith("f07.py") for path in paths) and os.getpid() != _PARENT:
        os._exit(3)
    return _dying_chunk.__wrapped__(paths)


def test_a_dead_worker_does_not_lose_files(tmp_path, monkeypatch):
    if "fork" not in __import__("multiprocessing").get_all_start_methods():
        pytest.skip("needs fork to inject the failure into the workers")
    files = []
    for index in range(20):
        path = tmp_path / f"f{index:02}.py"
        path.write_text("import torch\nwith torch.autocast('cuda'):\n    loss.backward()\n")
        files.append(str(path))
    monkeypatch.setattr(_dying_chunk, "__wrapped__", parallel._run_chunk, raising=False)
    monkeypatch.setattr(parallel, "_run_chunk", _dying_chunk)
    outcomes = lint_paths(files, ALL_RULES, Settings(root=tmp_path), Mode(), jobs=2)
    assert [o.path for o in outcomes] == files
    assert all([d.code for d in o.diagnostics] == ["AMP001"] for o in outcomes)


def test_an_unexpected_error_is_an_internal_error_of_that_file(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(parallel, "process_file", broken)
    outcome = check_path("x.py", ALL_RULES, Settings(), Mode())
    assert outcome.internal_error and [d.code for d in outcome.diagnostics] == ["AMP902"]
    assert "RuntimeError: boom" in outcome.diagnostics[0].message


def test_chunks_cover_every_file_once_largest_first(tmp_path):
    paths = []
    for index, size in enumerate([10, 500_000, 20, 30_000, 5] + [100] * 300):
        path = tmp_path / f"f{index:03}.py"
        path.write_text("x" * size)
        paths.append(str(path))
    paths.append(str(tmp_path / "missing.py"))
    chunks = parallel.plan_chunks(paths, 2)
    assert sorted(i for chunk in chunks for i in chunk) == list(range(len(paths)))
    assert chunks[0] == [1]  # the largest file alone, first
    assert all(len(chunk) <= parallel.MAX_CHUNK for chunk in chunks)
    assert len(chunks) < len(paths) / 4  # small files travel together


def test_default_jobs_is_the_number_of_cores():
    assert parallel.default_jobs() >= 1


# Progress -----------------------------------------------------------------------------------------------------
class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def test_no_bar_when_stderr_is_not_a_terminal(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert Progress.for_run(5000, machine_format=False, stream=io.StringIO()) is None
    assert Progress.for_run(5000, machine_format=True, stream=FakeTerminal()) is None
    assert Progress.for_run(10, machine_format=False, stream=FakeTerminal()) is None
    monkeypatch.setenv("CI", "true")
    assert Progress.for_run(5000, machine_format=False, stream=FakeTerminal()) is None


def test_bar_on_a_terminal_for_long_runs_is_erased_at_the_end(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    stream = FakeTerminal()
    assert Progress.for_run(5000, machine_format=False, stream=stream) is not None
    now = [0.0]
    bar = Progress(1000, stream, delay=0.5, rate=10, clock=lambda: now[0])
    bar.advance(100)
    assert stream.getvalue() == ""  # too early
    now[0] = 1.0
    bar.advance(400)
    assert "500/1000 files" in stream.getvalue()
    bar.advance(1)  # too soon after the last draw
    assert "501/1000" not in stream.getvalue()
    bar.close()
    assert stream.getvalue().endswith("\r\x1b[K")


def test_short_runs_never_draw():
    stream = FakeTerminal()
    bar = Progress(1000, stream, delay=10.0)
    bar.advance(1000)
    bar.close()
    assert stream.getvalue() == ""


def test_cli_prints_no_bar_when_stderr_is_captured():
    result = _amplint("check", TREES[0], "--no-cache", "--output-format", "concise", "--exit-zero")
    assert "\r" not in result.stderr and "files" not in result.stderr


# Containment: workers are capped, die with the run, and a crash costs one file -----------------------------
def _tree(folder: Path, count: int, crash: str | None = None) -> list[str]:
    files = []
    for index in range(count):
        path = folder / (crash if crash and index == count // 2 else f"f{index:02}.py")
        path.write_text("import torch\nwith torch.autocast('cuda'):\n    loss.backward()\n")
        files.append(str(path))
    return files


def _needs_fork():
    if parallel._context().get_start_method() != "fork":
        pytest.skip("needs fork to inject the failure into the workers")


def test_workers_are_capped_at_the_cores_and_the_files(tmp_path, monkeypatch):
    started = []
    real = parallel.ProcessPoolExecutor

    def recording(*args, **kwargs):
        started.append(kwargs["max_workers"])
        return real(*args, **kwargs)

    monkeypatch.setattr(parallel, "ProcessPoolExecutor", recording)
    monkeypatch.setattr(parallel, "default_jobs", lambda: 2)
    files = _tree(tmp_path, 12)
    outcomes = lint_paths(files, ALL_RULES, Settings(root=tmp_path), Mode(), jobs=1000)
    assert started == [2, 2] and [o.path for o in outcomes] == files  # phase 1 (the index), then phase 2
    assert parallel.worker_count(1000, 12) == 2 and parallel.worker_count(None, 1) == 1
    assert parallel.worker_count(1, 12) == 1


def _crashing(path, *args, **kwargs):
    """process_file, except that crash.py kills the process analysing it (never the test's own)."""
    if path.endswith("crash.py") and os.getpid() != _PARENT:
        faulthandler.disable()  # pytest's handler would print this process's stack
        os.kill(os.getpid(), signal.SIGSEGV)
    return _crashing.__wrapped__(path, *args, **kwargs)


def test_a_native_crash_costs_that_file_only(tmp_path, monkeypatch):
    _needs_fork()
    files = _tree(tmp_path, 20, crash="crash.py")
    monkeypatch.setattr(_crashing, "__wrapped__", parallel.process_file, raising=False)
    monkeypatch.setattr(parallel, "process_file", _crashing)
    outcomes = lint_paths(files, ALL_RULES, Settings(root=tmp_path), Mode(), jobs=2)
    assert [o.path for o in outcomes] == files
    for outcome in outcomes:
        if outcome.path.endswith("crash.py"):
            [diagnostic] = outcome.diagnostics
            assert outcome.internal_error and diagnostic.code == "AMP902"
            assert f"crashed (signal {int(signal.SIGSEGV)} SIGSEGV) on this file" in diagnostic.message
        else:
            assert [d.code for d in outcome.diagnostics] == ["AMP001"] and not outcome.internal_error


_SLOW_RUN = """
import os, sys, time
from amplint import parallel

marks, tree = sys.argv[1], sys.argv[2]

def busy(path, *args, **kwargs):
    # a file that takes forever (bounded, in case the test itself dies); it waits rather than spins, so that a
    # loaded machine still runs the test's own steps promptly
    open(os.path.join(marks, str(os.getpid())), "w").close()
    started = time.monotonic()
    while not os.path.exists(os.path.join(marks, "stop")) and time.monotonic() - started < 1800:
        time.sleep(0.01)
    raise RuntimeError("stopped")

parallel.process_file = busy
sys.argv = ["amplint", "check", "--no-cache", "--jobs", "2", tree]
from amplint.cli import entry
entry()
"""


def _wait_for(condition, what: str) -> None:
    """Poll `condition` until it holds; the bound only keeps a broken run from hanging the suite (generous: a
    loaded machine may take long to start the run's workers)."""
    deadline = time.monotonic() + 600
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.mark.parametrize("name, exit_codes", [
    # Ctrl-C: click says "Aborted!" and exits 1
    ("SIGTERM", {143, -15}), ("SIGINT", {130, 1}), ("SIGKILL", {-9})])
def test_workers_die_with_the_run(tmp_path, name, exit_codes):
    if "fork" not in __import__("multiprocessing").get_all_start_methods() or not Path("/proc").is_dir():
        pytest.skip("needs fork (to inject the slow file) and /proc")
    signum = getattr(signal, name)
    marks = tmp_path / "marks"
    marks.mkdir()
    tree = tmp_path / "tree"
    tree.mkdir()
    _tree(tree, 12)
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    # A run started in the background by a shell without job control inherits SIGINT ignored (and Python then
    # installs no handler): the run is given Ctrl-C's default, as a terminal gives it.
    run = subprocess.Popen([sys.executable, "-c", _SLOW_RUN, str(marks), str(tree)], env=environment,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    workers: list[int] = []
    try:
        _wait_for(lambda: any(marks.iterdir()), "no worker started")
        workers = [int(p.name) for p in marks.iterdir()]
        assert run.pid not in workers
        run.send_signal(signum)
        _, stderr = run.communicate(timeout=600)
        assert run.returncode in exit_codes, stderr
        assert b"Traceback" not in stderr
        _wait_for(lambda: not any(parallel.process_runs(pid) for pid in workers), "a worker outlived the run")
    finally:
        (marks / "stop").touch()
        if run.poll() is None:
            run.kill()
            run.wait()
