"""benchmarks/bench.py runs end to end (on a small tree, with a stand-in for ruff: what is checked here is the
script, not the timings) and its parse floor counts the files with findings."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLAGGED = sorted((REPO / "fixtures" / "AMP001-backward-in-autocast" / "flagged").glob("*.py"))[:2]


def test_bench_runs_on_a_small_tree(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    for path in FLAGGED:
        shutil.copyfile(path, tree / path.name)
    (tree / "plain.py").write_text("x = 1\n")
    tools = tmp_path / "bin"
    tools.mkdir()
    ruff = tools / "ruff"
    ruff.write_text("#!/bin/sh\nexit 0\n")
    ruff.chmod(0o755)
    results = tmp_path / "results.json"
    environment = {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', '')}"}
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench.py"), str(tree), "--rounds", "1",
                          "--no-scaling", "--torchfix-share", "1", "--json", str(results)],
                         capture_output=True, text=True, env=environment, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "amplint, cold (--no-cache)" in run.stdout and "targets:" in run.stdout
    assert "one file with findings (the shipped example) <= 0.25s" in run.stdout and "python -c pass" in run.stdout
    assert "where a cold run's time goes" in run.stdout and "\nscreen " in run.stdout
    singles = json.loads(results.read_text())["single_files"]
    assert set(singles) == {"python -c pass", "amplint, one file with findings", "amplint, one clean file"}
    assert all(seconds > 0 for seconds in singles.values())
    floor = json.loads(results.read_text())["parse_floor"]
    assert floor["files"] == 2  # the two flagged files; plain.py has no finding
    assert floor["floor"] >= floor["largest"] > 0
    assert floor["floor"] >= floor["total"] / (os.cpu_count() or 1) - 1e-9
    assert "libcst parse of the 2 files with findings" in run.stdout


def test_phases_account_for_the_run_and_name_what_exists(tmp_path):
    """Every phase's functions still exist (a moved phase would be reported, its time left in `other`), the
    phases and `other` add up to the run, and the analysis phases saw the flagged files."""
    tree = tmp_path / "tree"
    tree.mkdir()
    for path in FLAGGED:
        shutil.copyfile(path, tree / path.name)
    (tree / "plain.py").write_text("x = 1\n")
    run = subprocess.run([sys.executable, str(REPO / "benchmarks" / "phases.py"), str(tree), "--json"],
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["missing"] == []
    assert abs(sum(result["phases"].values()) + result["other"] - result["total"]) < 1e-6
    assert min(result["phases"].values()) >= 0 and result["other"] >= 0
    for phase in ("read", "screen", "parse", "facts", "rules", "locate", "output", "imports"):
        assert result["calls"][phase] > 0, phase
