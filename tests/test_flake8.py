"""The flake8 plugin: flake8 itself, in a subprocess, reports amplint's findings at amplint's positions."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from amplint.engine import lint_text
from amplint.flake8_plugin import AmplintChecker
from amplint.rules import ALL_RULES

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_amp.py"

NOQA = """\
import torch


def train(model, optimizer, loader, scaler):
    for inputs, targets in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(inputs).sum()
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # noqa: AMP003
        torch.nn.utils.clip_grad_value_(model.parameters(), 1.0)  # noqa: E501
        scaler.step(optimizer)
        scaler.update()
"""


def run_plugin(text: str, filename: str = "t.py") -> list[tuple[int, int, str]]:
    checker = AmplintChecker(ast.parse(text), filename, text.splitlines(keepends=True))
    return [(row, column, message) for row, column, message, _ in checker.run()]


def test_plugin_yields_zero_based_columns_and_leaves_noqa_to_flake8():
    text = EXAMPLE.read_text(encoding="utf-8")
    expected = lint_text(text, "t.py", [rule() for rule in ALL_RULES]).diagnostics
    assert expected, "the example must have findings"
    assert run_plugin(text) == [(d.location.row, d.location.column - 1, f"{d.code} {d.message}") for d in expected]
    # amplint alone would drop the `# noqa: AMP003` line; the plugin reports it and lets flake8 decide.
    assert [(row, column, message[:6]) for row, column, message in run_plugin(NOQA)] == [
        (9, 8, "AMP003"), (10, 8, "AMP003")]


def test_plugin_keeps_the_file_level_opt_out():
    assert run_plugin("# amplint: noqa\n" + NOQA) == []


def test_entry_point_is_declared_in_pyproject():
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '[project.entry-points."flake8.extension"]\nAMP = "amplint.flake8_plugin:AmplintChecker"' in text


def flake8(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    pytest.importorskip("flake8", reason="flake8 is in the `test` extra")
    points = metadata.entry_points(group="flake8.extension")
    if not any(point.name == "AMP" and point.value == "amplint.flake8_plugin:AmplintChecker" for point in points):
        pytest.skip("amplint's flake8 entry point is not registered: install the checkout with `pip install -e .`")
    return subprocess.run([sys.executable, "-m", "flake8", "--isolated", "--jobs", "1", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.integration
def test_flake8_reports_amp_codes_at_amplints_positions(tmp_path):
    shutil.copy(EXAMPLE, tmp_path / "train_amp.py")
    result = flake8("--select", "AMP", "train_amp.py", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    found = [line.split(" ", 2)[:2] for line in result.stdout.splitlines()]
    text = EXAMPLE.read_text(encoding="utf-8")
    expected = lint_text(text, "train_amp.py", [rule() for rule in ALL_RULES]).diagnostics
    # flake8 prints 1-based columns, the same numbers amplint prints.
    assert found == [[f"train_amp.py:{d.location.row}:{d.location.column}:", d.code] for d in expected]
    assert [code for _, code in found] == ["AMP004", "AMP001", "AMP003"]


@pytest.mark.integration
def test_flake8_applies_its_own_noqa_and_selection(tmp_path):
    (tmp_path / "noqa_case.py").write_text(NOQA, encoding="utf-8")
    result = flake8("--select", "AMP", "noqa_case.py", cwd=tmp_path)
    # `# noqa: AMP003` hides line 9; `# noqa: E501` names another code, so line 10 stays.
    assert [line.split(" ")[0] for line in result.stdout.splitlines()] == ["noqa_case.py:10:9:"]
    result = flake8("--select", "AMP", "--disable-noqa", "noqa_case.py", cwd=tmp_path)
    assert [line.split(" ")[:2] for line in result.stdout.splitlines()] == [
        ["noqa_case.py:9:9:", "AMP003"], ["noqa_case.py:10:9:", "AMP003"]]
    result = flake8("--select", "AMP", "--extend-ignore", "AMP003", "noqa_case.py", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "")


def test_a_file_too_deeply_nested_to_analyse_is_reported_not_silent():
    """The plugin goes through the engine's one path: a file the nesting guard refuses is AMP901, never nothing."""
    from amplint.flake8_plugin import unsuppressed_diagnostics

    text = "import torch\nx = " + "+".join(["a"] * 2500) + "\nwith torch.autocast('cuda'):\n    loss.backward()\n"
    assert [d.code for d in unsuppressed_diagnostics(text, "deep.py")] == ["AMP901"]


def test_line_noqa_is_left_to_flake8():
    from amplint.flake8_plugin import unsuppressed_diagnostics

    text = "import torch\nwith torch.autocast('cuda'):\n    loss.backward()  # noqa: AMP001\n"
    assert [d.code for d in unsuppressed_diagnostics(text, "t.py")] == ["AMP001"]
