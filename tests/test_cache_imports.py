"""A cached result holds what its analysis resolved across modules: the same file in two projects, whose
`from gan.helpers import ...` resolves in one (a namespace package beside it) and not in the other, gets each
project's answer, in either order; and the same project run again is still a hit."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from amplint import pipeline
from amplint.cli import main

HELPER = """\
def backward_and_step(loss, scaler, optimizer):
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""
TRAIN = """\
import torch

from {module} import backward_and_step


def train(model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda")
    for inputs, targets in loader:
        optimizer.zero_grad()
        with torch.autocast("cuda"):
            loss = torch.nn.functional.cross_entropy(model(inputs), targets)
            backward_and_step(loss, scaler, optimizer)
"""


def _project(root: Path, module: str, helper: str | None) -> Path:
    (root / ".git").mkdir(parents=True)
    (root / "train.py").write_text(TRAIN.format(module=module))
    if helper is not None:
        (root / helper).parent.mkdir(parents=True, exist_ok=True)
        (root / helper).write_text(HELPER)
    return root


def _codes(root: Path, cache: Path, monkeypatch) -> list[str]:
    monkeypatch.chdir(root)
    result = CliRunner().invoke(main, ["check", ".", "--cache-dir", str(cache), "--output-format", "concise", "-q"])
    assert result.exit_code in (0, 1), result.output
    return sorted(line.split()[1] for line in result.stdout.splitlines() if line.strip())


LAYOUTS = {  # the module as imported, and where the project that has it holds it
    "namespace package": ("gan.helpers", "gan/helpers.py"),
    "regular package": ("gan.helpers", "gan/__init__.py"),
    "module beside": ("helpers", "helpers.py"),
    "nested namespace": ("gan.sub.helpers", "gan/sub/helpers.py"),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("first", ["without", "with"])
def test_the_same_file_in_two_projects_gets_each_projects_answer(tmp_path, monkeypatch, layout, first):
    module, helper = LAYOUTS[layout]
    if layout == "regular package":
        helper = "gan/helpers.py"
        (tmp_path / "with" / "gan").mkdir(parents=True)
        (tmp_path / "with" / "gan" / "__init__.py").write_text("")
    with_helper = _project(tmp_path / "with", module, helper)
    without = _project(tmp_path / "without", module, None)
    cache = tmp_path / "cache"
    expected = {"with": ["AMP001", "AMP002"], "without": []}
    uncached = {name: _codes(root, tmp_path / f"fresh-{name}", monkeypatch)
                for name, root in (("with", with_helper), ("without", without))}
    assert uncached == expected
    order = [first, "with" if first == "without" else "without"]
    roots = {"with": with_helper, "without": without}
    for name in order + order:  # each project twice, sharing one cache
        assert _codes(roots[name], cache, monkeypatch) == expected[name], name


def test_a_project_run_again_is_still_a_hit(tmp_path, monkeypatch):
    calls = []
    real = pipeline.lint_text
    monkeypatch.setattr(pipeline, "lint_text", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    root = _project(tmp_path / "p", "gan.helpers", None)
    (root / "other.py").write_text("import torch\n")
    cache = tmp_path / "cache"
    assert _codes(root, cache, monkeypatch) == []
    analysed = len(calls)
    (root / "other.py").write_text("import torch  # touched: the run record no longer answers\n")
    assert _codes(root, cache, monkeypatch) == []
    assert [path for path in calls[analysed:] if path.endswith("train.py")] == []  # its entry still holds
