"""The pre-commit hooks, for real: `pre-commit try-repo` builds the hook environment from this checkout.

try-repo clones a repository's HEAD; when the work tree has changes it first commits the staged files and the
modified tracked files (`git add -u`) into a temporary clone, so new untracked files are left out and a
tracked module importing one of them breaks the hook. The test therefore gives try-repo a snapshot of the
work tree (tracked and untracked files, minus ignored ones), committed: what the rest of the suite imports.
Each try-repo call installs a fresh environment (into a temporary store) with pip from PyPI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from amplint.engine import lint_text
from amplint.rules import ALL_RULES

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_amp.py"
FILE_TYPES = ["python", "pyi", "jupyter"]  # what the hooks run on: Python files, stubs and notebooks
NOTEBOOK = {  # one code cell with an AMP001 (backward inside autocast), after a markdown cell
    "cells": [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Training\n"]},
        {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
         "source": ["import torch\n", "\n", "def train(model, x, optimizer):\n", "    with torch.autocast(\"cuda\"):\n",
                    "        loss = model(x).sum()\n", "        loss.backward()\n", "    optimizer.step()\n"]},
    ],
    "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
    "nbformat": 4, "nbformat_minor": 5,
}
TIMEOUT = 900  # seconds per try-repo call; a cold one (new virtualenv, pip from PyPI) takes about 20


def test_hook_manifest():
    yaml = pytest.importorskip("yaml", reason="PyYAML comes with pre-commit (the `test` extra)")
    hooks = {hook["id"]: hook for hook in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert set(hooks) == {"amplint", "amplint-fix"}
    for hook in hooks.values():
        assert hook["language"] == "python"
        assert hook["types_or"] == FILE_TYPES and "types" not in hook
        assert "Jupyter notebooks" in hook["description"]
        assert "--force-exclude" in hook["entry"]  # the config's excludes apply to the files pre-commit passes
    assert hooks["amplint"]["entry"].split()[:2] == ["amplint", "check"]
    assert "--fix" in hooks["amplint-fix"]["entry"].split()


def test_the_hooks_select_python_files_stubs_and_notebooks():
    """pre-commit passes a hook the files whose identify tags meet its `types_or`: a notebook is `jupyter`."""
    pytest.importorskip("identify", reason="identify comes with pre-commit (the `test` extra)")
    from identify.identify import tags_from_filename

    def selected(name: str) -> bool:
        return bool(tags_from_filename(name) & set(FILE_TYPES))

    assert selected("train.py") and selected("model.pyi") and selected("tutorial.ipynb")
    assert not selected("README.md") and not selected("data.json") and not selected("setup.cfg")


def test_the_docs_say_the_hooks_cover_notebooks():
    page = (ROOT / "docs" / "integrations.md").read_text(encoding="utf-8")
    section = page.split("\n## pre-commit\n", 1)[1].split("\n## ", 1)[0]
    assert f"`types_or: [{', '.join(FILE_TYPES)}]`" in section
    assert "Jupyter notebooks" in section


def test_hook_environment_needs_no_torch():
    """pre-commit installs the project's runtime dependencies into the hook environment: libcst, click and
    pathspec (for .gitignore), never torch."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = {dependency.split(">")[0].split("=")[0].split("<")[0].strip() for dependency in project["dependencies"]}
    assert names == {"libcst", "click", "pathspec"}


def clean_git_env(**extra: str) -> dict[str, str]:
    """The environment without GIT_* variables (set when pytest itself runs inside a git hook)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="test", GIT_AUTHOR_EMAIL="test@example.invalid", GIT_COMMITTER_NAME="test",
               GIT_COMMITTER_EMAIL="test@example.invalid", GIT_CONFIG_NOSYSTEM="1", PRE_COMMIT_COLOR="never")
    env.update(extra)
    return env


def git(*args: str, cwd: Path, env: dict[str, str]) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True,
                          timeout=600).stdout


def snapshot(destination: Path, env: dict[str, str]) -> Path:
    """A one-commit repository holding the work tree's tracked and untracked files (ignored ones excluded)."""
    listed = git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT, env=env)
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a tracked file may have been deleted in the work tree
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    git("init", "--quiet", ".", cwd=destination, env=env)
    git("add", "--all", cwd=destination, env=env)
    git("commit", "--quiet", "--no-verify", "--no-gpg-sign", "-m", "snapshot", cwd=destination, env=env)
    return destination


def try_repo(repo: Path, hook: str, project: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "pre_commit", "try-repo", str(repo), hook, "--files", "train_amp.py", "train.ipynb",
         "--color", "never"], cwd=project, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    return result, time.monotonic() - started


@pytest.mark.integration
def test_pre_commit_try_repo_runs_both_hooks(tmp_path):
    pytest.importorskip("pre_commit", reason="pre-commit is in the `test` extra")
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    if not (ROOT / ".git").exists():
        pytest.skip(f"{ROOT} is not a git checkout: its files to snapshot are listed with git")
    # Should the hook environment ever pull torch in, this unsatisfiable constraint makes its install fail.
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("torch<0\n")
    env = clean_git_env(PRE_COMMIT_HOME=str(tmp_path / "pre-commit-home"), PIP_CONSTRAINT=str(constraints))
    (tmp_path / "amplint").mkdir()
    hooks_repo = snapshot(tmp_path / "amplint", env)
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(EXAMPLE, project / "train_amp.py")
    notebook = json.dumps(NOTEBOOK, indent=1) + "\n"
    (project / "train.ipynb").write_text(notebook, encoding="utf-8")
    git("init", "--quiet", ".", cwd=project, env=env)
    git("add", "train_amp.py", "train.ipynb", cwd=project, env=env)  # pre-commit sees a hook's changes via `git diff`

    result, lint_seconds = try_repo(hooks_repo, "amplint", project, env)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "train_amp.py:16:13: AMP003" in output
    assert "train.ipynb:cell 2:6:9: AMP001" in output  # the notebook was passed to the hook and linted
    assert "Found 4 errors." in output
    assert (project / "train_amp.py").read_text(encoding="utf-8") == EXAMPLE.read_text(encoding="utf-8")
    assert (project / "train.ipynb").read_text(encoding="utf-8") == notebook

    result, fix_seconds = try_repo(hooks_repo, "amplint-fix", project, env)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output  # the hook changed a file, so pre-commit fails the commit
    assert "files were modified by this hook" in output
    fixed = (project / "train_amp.py").read_text(encoding="utf-8")
    unscale = fixed.index("scaler.unscale_(optimizer)")
    assert unscale < fixed.index("clip_grad_norm_(")
    assert lint_text(fixed, "train_amp.py", [rule() for rule in ALL_RULES]).diagnostics == []
    cells = json.loads((project / "train.ipynb").read_text(encoding="utf-8"))["cells"]
    assert cells[1]["source"][5] == "    loss.backward()\n"  # moved out of the autocast block
    print(f"pre-commit try-repo: amplint {lint_seconds:.1f}s, amplint-fix {fix_seconds:.1f}s")
