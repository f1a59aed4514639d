"""The GitHub Action (action.yml), run as a runner would run it, as far as that is possible offline.

The manifest is read with PyYAML; each step's `run:` script is run with bash the way GitHub runs a `shell: bash`
step (`bash --noprofile --norc -eo pipefail`), with its `env:` expressions (`${{ inputs.paths }}`, ...) evaluated
from the inputs given and their defaults, and `GITHUB_OUTPUT` a file read back for the next step. The amplint
step runs this checkout's amplint against a small workspace; the install step runs with a stand-in Python that
records what it would install (the real install, with pip, is the integration test at the end).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from samples import FLAGGED

yaml = pytest.importorskip("yaml", reason="PyYAML comes with pre-commit (the `test` extra)")

ROOT = Path(__file__).resolve().parents[1]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
STEPS = {step["id"]: step for step in ACTION["runs"]["steps"]}
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="the action's steps are bash scripts")

DEPRECATED = textwrap.dedent("""\
    import torch

    def predict(model, x):
        with torch.cuda.amp.autocast():
            return model(x)
""")


def context(inputs: dict[str, str], outputs: dict[str, dict[str, str]] | None = None,
            repository: str = "") -> dict[str, str]:
    """What the expressions of action.yml may name: the inputs (given, else their defaults), the action's
    checkout and repository, and the outputs of earlier steps."""
    unknown = set(inputs) - set(ACTION["inputs"])
    assert not unknown, f"action.yml has no input {unknown}"
    values = {f"inputs.{name}": str(inputs.get(name, spec.get("default", "")))
              for name, spec in ACTION["inputs"].items()}
    values.update({"github.action_path": str(ROOT), "github.action_repository": repository,
                   "github.server_url": "https://github.com"})
    for step, named in (outputs or {}).items():
        values.update({f"steps.{step}.outputs.{name}": value for name, value in named.items()})
    return values


def expand(text: str, values: dict[str, str]) -> str:
    def value(match: re.Match) -> str:
        assert match.group(1) in values, f"action.yml uses ${{{{ {match.group(1)} }}}}, which this test cannot give"
        return values[match.group(1)]

    return EXPRESSION.sub(value, text)


def run_step(step_id: str, values: dict[str, str], workspace: Path, path: str | None = None):
    """Run one step's script in the workspace as GitHub does; its status, output, and the outputs it set."""
    step = STEPS[step_id]
    assert step["shell"] == "bash"
    outputs_file = workspace.parent / f"{step_id}-outputs"
    outputs_file.write_text("")
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("GITHUB_", "AMPLINT"))}
    environment.update({key: expand(str(value), values) for key, value in step.get("env", {}).items()})
    environment.update(GITHUB_OUTPUT=str(outputs_file), RUNNER_TEMP=str(workspace.parent / "runner-temp"))
    environment.pop("PYTHONPATH", None)
    if path is not None:
        environment["PATH"] = path
    script = workspace.parent / f"{step_id}.sh"
    script.write_text(step["run"])
    result = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=workspace,
                            env=environment, capture_output=True, text=True, timeout=300)
    outputs = dict(line.split("=", 1) for line in outputs_file.read_text().splitlines() if line)
    return result, outputs


@pytest.fixture
def workspace(tmp_path):
    folder = tmp_path / "workspace"
    folder.mkdir()
    (tmp_path / "runner-temp").mkdir()
    return folder


@pytest.fixture
def amplint(tmp_path) -> str:
    """This checkout's amplint as the install step's `amplint` output would give it: an executable path."""
    shim = tmp_path / "bin" / "amplint"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec "{sys.executable}" -m amplint "$@"\n')
    shim.chmod(0o755)
    return str(shim)


def check(workspace: Path, amplint: str, **inputs: str):
    return run_step("check", context(inputs, {"install": {"amplint": amplint}}), workspace)


# --- the manifest ------------------------------------------------------------------------------------------------


def test_the_manifest_is_a_composite_action_with_the_documented_inputs():
    assert ACTION["runs"]["using"] == "composite"
    assert set(ACTION["inputs"]) == {"paths", "args", "version", "sarif-file"}
    assert all(spec.get("description") for spec in ACTION["inputs"].values())
    assert [step["id"] for step in ACTION["runs"]["steps"]] == ["install", "check"]
    assert ACTION["outputs"]["sarif-file"]["value"] == "${{ steps.check.outputs.sarif-file }}"


def test_no_input_is_pasted_into_a_script():
    """Inputs reach the scripts through `env:` only: an expression inside `run:` would be pasted into the shell
    code before it runs, so a crafted input could run commands."""
    for step in ACTION["runs"]["steps"]:
        assert "${{" not in step["run"], step["name"]


def test_every_expression_names_something_the_runner_gives():
    values = context({}, {"install": {"amplint": "amplint"}, "check": {"sarif-file": ""}})
    for step in ACTION["runs"]["steps"]:
        for value in step.get("env", {}).values():
            expand(str(value), values)
    expand(ACTION["outputs"]["sarif-file"]["value"], values)


# --- the amplint step --------------------------------------------------------------------------------------------


def test_findings_become_error_annotations_and_fail_the_step(workspace, amplint):
    (workspace / "train.py").write_text(FLAGGED)
    result, outputs = check(workspace, amplint)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "::error file=train.py,line=6,col=9," in result.stdout
    assert "title=AMP001 backward-in-autocast::" in result.stdout
    assert outputs == {}


def test_a_clean_workspace_passes_silently(workspace, amplint):
    (workspace / "ok.py").write_text("import torch\n")
    result, _ = check(workspace, amplint)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "::" not in result.stdout


def test_warnings_alone_are_warning_annotations_and_pass(workspace, amplint):
    (workspace / "predict.py").write_text(DEPRECATED)
    result, _ = check(workspace, amplint)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "::warning file=predict.py,line=4," in result.stdout and "AMP007" in result.stdout
    strict, _ = check(workspace, amplint, args="--exit-non-zero-on-warning")
    assert strict.returncode == 1


def test_paths_and_args_are_passed_on(workspace, amplint):
    for name in ("a", "b", "c"):
        (workspace / name).mkdir()
        (workspace / name / "train.py").write_text(FLAGGED)
    result, _ = check(workspace, amplint, paths="a  c", args="--output-format concise --select AMP001")
    assert result.returncode == 1
    lines = [line for line in result.stdout.splitlines() if ": AMP" in line]
    assert [line.split(":")[0] for line in lines] == ["a/train.py", "c/train.py"]
    assert "::error" not in result.stdout  # the format given in args replaced the default


def test_args_can_turn_findings_off(workspace, amplint):
    (workspace / "train.py").write_text(FLAGGED)
    result, _ = check(workspace, amplint, args="--ignore AMP001")
    assert result.returncode == 0 and "::error" not in result.stdout


def test_sarif_file_is_written_for_code_scanning_as_well(workspace, amplint):
    (workspace / "train.py").write_text(FLAGGED)
    result, outputs = check(workspace, amplint, **{"sarif-file": "reports/amplint.sarif"})
    assert result.returncode == 1, result.stdout + result.stderr
    assert "::error file=train.py,line=6,col=9," in result.stdout  # the annotations too
    assert outputs == {"sarif-file": "reports/amplint.sarif"}
    log = json.loads((workspace / "reports" / "amplint.sarif").read_text(encoding="utf-8"))
    assert log["version"] == "2.1.0"
    assert [r["ruleId"] for r in log["runs"][0]["results"]] == ["AMP001"]


def test_sarif_file_of_a_clean_workspace_has_no_results(workspace, amplint):
    (workspace / "ok.py").write_text("x = 1\n")
    result, _ = check(workspace, amplint, **{"sarif-file": "amplint.sarif"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads((workspace / "amplint.sarif").read_text())["runs"][0]["results"] == []


def test_a_usage_error_fails_the_step_with_exit_2(workspace, amplint):
    result, _ = check(workspace, amplint, paths="missing.py")
    assert result.returncode == 2
    assert "missing.py" in result.stdout and "no such file or directory" in result.stdout
    with_sarif, _ = check(workspace, amplint, paths="missing.py", **{"sarif-file": "out.sarif"})
    assert with_sarif.returncode == 2


def test_a_sarif_file_that_cannot_be_written_fails_the_step(workspace, amplint):
    (workspace / "ok.py").write_text("x = 1\n")
    (workspace / "taken").write_text("a file, not a folder")
    result, _ = check(workspace, amplint, **{"sarif-file": "taken/amplint.sarif"})
    assert result.returncode == 2
    assert "cannot write taken/amplint.sarif" in result.stderr


# --- the install step --------------------------------------------------------------------------------------------


@pytest.fixture
def recording_python(tmp_path) -> tuple[str, Path]:
    """A PATH whose python3 records what it is asked: `-m venv DIR` makes DIR/bin with this same recorder as its
    python and an amplint that prints a version; every other call is logged."""
    log = tmp_path / "python-calls.log"
    folder = tmp_path / "fake-bin"
    folder.mkdir()
    recorder = folder / "python3"
    recorder.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
          mkdir -p "$3/bin" && cp "$0" "$3/bin/python"
          printf '#!/bin/sh\\necho amplint 0.0.0\\n' > "$3/bin/amplint" && chmod +x "$3/bin/amplint"
          exit 0
        fi
        printf '%s|' "$@" >> "{log}"
        echo >> "{log}"
    """))
    recorder.chmod(0o755)
    return f"{folder}:/usr/bin:/bin", log


def test_install_takes_the_actions_own_checkout(workspace, recording_python):
    path, log = recording_python
    result, outputs = run_step("install", context({}), workspace, path=path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert log.read_text().splitlines() == [
        f"-m|pip|install|--quiet|--disable-pip-version-check|{ROOT}|"]
    venv = workspace.parent / "runner-temp" / "amplint-venv"
    assert outputs == {"amplint": f"{venv}/bin/amplint"}
    assert "amplint 0.0.0" in result.stdout


def test_install_takes_a_version_as_a_git_ref_of_the_actions_repository(workspace, recording_python):
    path, log = recording_python
    values = context({"version": "v0.2.0"}, repository="someone/amplint")
    result, outputs = run_step("install", values, workspace, path=path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert log.read_text().splitlines() == [
        "-m|pip|install|--quiet|--disable-pip-version-check|amplint @ git+https://github.com/someone/amplint@v0.2.0|"]


def test_a_version_without_the_actions_repository_is_an_error(workspace, recording_python):
    path, log = recording_python
    result, outputs = run_step("install", context({"version": "v0.2.0"}), workspace, path=path)
    assert result.returncode == 2
    assert "::error title=amplint::the version input needs the action used from its repository" in result.stdout
    assert not log.exists() and outputs == {}


@pytest.mark.integration
def test_the_action_installs_this_checkout_and_lints(tmp_path, workspace):
    """Both steps for real: a virtual environment, pip installing a copy of this checkout (pip builds in the
    source folder, so a copy keeps the work tree clean), then the amplint step with the executable it made."""
    checkout = tmp_path / "action"
    checkout.mkdir()
    for name in ("pyproject.toml", "README.md", "action.yml"):
        shutil.copy2(ROOT / name, checkout / name)
    shutil.copytree(ROOT / "amplint", checkout / "amplint", ignore=shutil.ignore_patterns("__pycache__"))
    python_folder = tmp_path / "python-bin"
    python_folder.mkdir()
    (python_folder / "python3").symlink_to(sys.executable)
    path = f"{python_folder}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    values = context({})
    values["github.action_path"] = str(checkout)
    result, outputs = run_step("install", values, workspace, path=path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert Path(outputs["amplint"]).is_file()
    (workspace / "train.py").write_text(FLAGGED)
    values = context({"sarif-file": "amplint.sarif"}, {"install": outputs})
    result, _ = run_step("check", values, workspace, path=path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "::error file=train.py,line=6,col=9," in result.stdout
    assert (workspace / "amplint.sarif").is_file()
