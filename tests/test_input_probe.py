"""A probe of odd paths, odd files and odd bytes, run through the command line: no input is lost, no run hangs
or stops on one file, no traceback, and each run exits with a defined code (0, 1 or 2).

Families: a report file that names an input (under odd names and spellings), `--diff` of oddly named files
applied with `patch`, declaration and configuration files that are not regular files, are huge or nest deeper
than a parser recurses, notebooks holding integers too long for `int()`, and one cache shared by projects in
which the same file's imports resolve differently. Runs that could block (FIFOs, devices, standard input) are
separate processes: their timeout only guards the suite against a hang, it asserts nothing about speed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from amplint.cli import main

FLAGGED = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"  # AMP007 (a warning), a safe fix
FINDING = 'import torch\nwith torch.autocast("cuda"):\n    loss.backward()\n'  # AMP001 (an error)
PATCH = shutil.which("patch")
HAS_LINKS = hasattr(os, "symlink")
HAS_FIFOS = hasattr(os, "mkfifo")


def _invoke(args: list[str], folder: Path, monkeypatch):
    monkeypatch.chdir(folder)
    result = CliRunner().invoke(main, args)
    assert result.exit_code in (0, 1, 2), result.output
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    return result


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file() and not path.is_symlink()}


# 1. A report file that names an input, under odd names ---------------------------------------------------------

NAMES = ["t.py", "my file.py", "caf\u00e9.py", "-dash.py", "new\nline.py", "tab\tname.py", "quote\"d.py",
         "stub.pyi", "deep/a/b/c.py", "\u00fcn\u00ef c\u00f6d\u00e9.ipynb"]


def _notebook_text(source: str) -> str:
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
    return json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n"


def _input(root: Path, name: str) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(_notebook_text(FLAGGED) if name.endswith(".ipynb") else FLAGGED, encoding="utf-8")
    return path


@pytest.mark.parametrize("spelling", ["as named", "absolute", "through a symlink"])
@pytest.mark.parametrize("name", NAMES)
def test_a_report_over_an_oddly_named_input_is_refused(tmp_path, monkeypatch, name, spelling):
    if spelling == "through a symlink" and not HAS_LINKS:
        pytest.skip("no symlinks")
    root = tmp_path / "project"
    path = _input(root, name)
    output = {"as named": name, "absolute": str(path), "through a symlink": "report-link"}[spelling]
    if spelling == "through a symlink":
        (root / "report-link").symlink_to(path)
    before = _tree(root)
    result = _invoke(["check", "--fix", "--output-file", output, "--", name], root, monkeypatch)
    assert result.exit_code == 2 and "an input of this run" in result.stderr
    assert _tree(root) == before


@pytest.mark.parametrize("output", ["report.txt", "reports/new/report.json", "a dangling link"])
def test_a_report_beside_the_inputs_is_written_and_the_inputs_kept(tmp_path, monkeypatch, output):
    root = tmp_path / "project"
    _input(root, "t.py")
    if output == "a dangling link":
        if not HAS_LINKS:
            pytest.skip("no symlinks")
        (root / output).symlink_to("written-through-the-link.txt")
    result = _invoke(["check", ".", "--no-cache", "--output-file", output], root, monkeypatch)
    assert result.exit_code == 0
    assert (root / "t.py").read_text() == FLAGGED
    assert "AMP007" in (root / output).read_text()


@pytest.mark.skipif(PATCH is None, reason="no `patch` on this system")
@pytest.mark.parametrize("name", [name for name in NAMES if not name.endswith(".ipynb")])
def test_the_diff_of_an_oddly_named_file_applies(tmp_path, monkeypatch, name):
    root = tmp_path / "project"
    path = _input(root, name)
    result = _invoke(["check", "--diff", "--no-cache", "-q", "--", name], root, monkeypatch)
    assert result.exit_code == 1
    done = subprocess.run([PATCH, "-p1", "--no-backup-if-mismatch", "-F0", "-s"], cwd=root, input=result.stdout_bytes,
                          capture_output=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert path.read_text() == FLAGGED.replace("torch.cuda.amp.GradScaler()", 'torch.amp.GradScaler("cuda")')


# 2. Declaration and configuration files that one run must not stop on ---------------------------------------------

DEEP = "[" * 3000 + "]" * 3000
DEEP_TABLE = "{a = " * 3000 + "1" + "}" * 3000


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _link(target: str):
    def make(path: Path) -> None:
        path.symlink_to(target)
    return make


def _text(content: str | bytes):
    def make(path: Path) -> None:
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return make


def _chain(path: Path) -> None:
    for index in range(100):
        (path.parent / f"req{index}.txt").write_text(f"-r req{index + 1}.txt\n")
    (path.parent / "req100.txt").write_text("torch>=2.1\n")
    path.write_text("-r req0.txt\n")


# name -> (file, how it is made, needs, the run's exit code, the torch floor it infers or None)
FILES = {
    "-r a FIFO": ("requirements.txt", _text("-r pipe.txt\ntorch>=2.2\n"), "fifo", 1, "2.2"),
    "-r /dev/zero": ("requirements.txt", _text("-r /dev/zero\ntorch>=2.2\n"), "/dev/zero", 1, "2.2"),
    "-r /dev/urandom": ("requirements.txt", _text("-r /dev/urandom\ntorch>=2.2\n"), "/dev/urandom", 1, "2.2"),
    "-r /dev/stdin": ("requirements.txt", _text("-r /dev/stdin\n"), "/dev/stdin", 1, None),
    "-r a folder": ("requirements.txt", _text("-r sub\ntorch>=2.2\n"), "", 1, "2.2"),
    "-r itself": ("requirements.txt", _text("-r requirements.txt\ntorch>=2.2\n"), "", 1, "2.2"),
    "-r a missing file": ("requirements.txt", _text("-r nowhere.txt\ntorch>=2.2\n"), "", 1, "2.2"),
    "-r a chain of 100": ("requirements.txt", _chain, "", 1, None),  # includes stop at 64 files
    "-r a file over 1 MB": ("requirements.txt", _text("-r big.txt\ntorch>=2.2\n"), "big", 1, "2.2"),
    "requirements.txt is a FIFO": ("requirements.txt", _fifo, "fifo", 1, None),
    "requirements.txt links to /dev/zero": ("requirements.txt", _link("/dev/zero"), "/dev/zero", 1, None),
    "requirements.txt holds NUL bytes": ("requirements.txt", _text(b"torch>=2.2\n\x00\xff\xfe\n"), "", 1, "2.2"),
    "requirements/ holds a FIFO": ("requirements/dev.txt", _fifo, "fifo", 1, None),
    "pyproject: a foreign array 3,000 deep": ("pyproject.toml", _text(f"[tool.other]\nx = {DEEP}\n"), "", 1, None),
    "pyproject: a foreign table 3,000 deep": ("pyproject.toml", _text(f"[tool.other]\nx = {DEEP_TABLE}\n"), "", 1,
                                              None),
    "pyproject: deep in [project]": ("pyproject.toml", _text(f'[project]\ndependencies = ["torch>=2.2"]\nx = {DEEP}\n'),
                                     "", 1, None),
    "pyproject is a FIFO": ("pyproject.toml", _fifo, "fifo", 1, None),
    "pyproject links to /dev/zero": ("pyproject.toml", _link("/dev/zero"), "/dev/zero", 1, None),
    "pyproject over 1 MB": ("pyproject.toml", _text('[project]\ndependencies = ["torch>=2.2"]\n' + "#" * 1_100_000),
                            "", 1, None),
    "pyproject is not UTF-8": ("pyproject.toml", _text(b'[project]\nname = "\xff"\n'), "", 1, None),
    "amplint.toml 3,000 deep": ("amplint.toml", _text(f"x = {DEEP}\n"), "", 2, None),
    "amplint.toml is a FIFO": ("amplint.toml", _fifo, "fifo", 1, None),
    "[tool.amplint] beside a deep table": ("pyproject.toml", _text(f'[tool.amplint]\nselect = ["AMP001"]\n'
                                                                    f"[tool.other]\nx = {DEEP}\n"), "", 2, None),
    "setup.py nested 3,000 deep": ("setup.py", _text(f"from setuptools import setup\nx = {DEEP}\n"
                                                     "setup(install_requires=['torch>=2.2'])\n"), "", 1, None),
    "setup.cfg is a FIFO": ("setup.cfg", _fifo, "fifo", 1, None),
    "environment.yml links to /dev/zero": ("environment.yml", _link("/dev/zero"), "/dev/zero", 1, None),
    "Pipfile 3,000 deep": ("Pipfile", _text(f'[packages]\ntorch = ">=2.2"\nx = {DEEP}\n'), "", 1, None),
}


@pytest.mark.parametrize("case", list(FILES))
def test_one_odd_declaration_or_configuration_file_does_not_stop_the_run(tmp_path, case):
    name, make, needs, code, floor = FILES[case]
    if needs == "fifo" and not HAS_FIFOS:
        pytest.skip("no FIFOs")
    if needs.startswith("/dev/") and (not os.path.exists(needs) or not HAS_LINKS):
        pytest.skip(f"no {needs}")
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    (root / "train.py").write_text(FINDING)
    (root / "sub").mkdir()
    (root / "big.txt").write_text("torch>=1.0\n" + "#" * 1_100_000 + "\n")
    if needs == "fifo":
        os.mkfifo(root / "pipe.txt")
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    make(root / name)
    before = _tree(root)
    command = [sys.executable, "-m", "amplint", "check", "train.py", "--no-cache", "--output-format", "concise"]
    done = subprocess.run(command, cwd=root, input=b"torch>=9.9\n", capture_output=True, timeout=600)
    output = (done.stdout + done.stderr).decode("utf-8", "replace")
    assert done.returncode == code, output
    assert "Traceback" not in output and "internal error" not in output, output
    if code == 2:
        assert "amplint: error:" in output and "nested too deeply" in output
    else:
        assert "train.py:3:5: AMP001" in output
    settings = subprocess.run([*command[:4], "--show-settings"], cwd=root, input=b"torch>=9.9\n",
                              capture_output=True, timeout=600)
    if code != 2:
        shown = settings.stdout.decode()
        assert "9.9" not in shown  # standard input is never read as a requirements file
        if floor is not None:
            assert f'target-torch-version = "{floor}"' in shown
    assert _tree(root) == before


# 3. Notebooks holding integers too long for int() ---------------------------------------------------------------

DIGITS = "7" * 5000


def _long_notebook(where: str) -> str:
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": FLAGGED}
    data = {"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    text = json.dumps(data, indent=1)
    if where == "notebook metadata":
        return text.replace('"metadata": {},\n "nbformat"', f'"metadata": {{"n": {DIGITS}}},\n "nbformat"')
    if where == "cell metadata":
        return text.replace('"metadata": {},\n   "outputs"', f'"metadata": {{"n": {DIGITS}}},\n   "outputs"')
    if where == "execution count":
        return text.replace('"execution_count": null', f'"execution_count": {DIGITS}')
    if where == "negative, in a list":
        return text.replace('"outputs": []', f'"outputs": [], "x": [1, -{DIGITS}, 2]')
    if where == "100,000 digits":
        return text.replace('"execution_count": null', f'"execution_count": {"9" * 100_000}')
    if where == "a long float":
        return text.replace('"execution_count": null', f'"execution_count": {DIGITS}.5e-3')
    raise AssertionError(where)


@pytest.mark.parametrize("where", ["notebook metadata", "cell metadata", "execution count", "negative, in a list",
                                   "100,000 digits", "a long float"])
def test_a_notebook_with_an_integer_too_long_for_int_is_linted_and_fixed(tmp_path, monkeypatch, where):
    text = _long_notebook(where)
    path = tmp_path / "n.ipynb"
    path.write_text(text, encoding="utf-8")
    result = _invoke(["check", "--no-cache", "--output-format", "concise", "n.ipynb"], tmp_path, monkeypatch)
    assert "AMP902" not in result.output and "n.ipynb:cell 1:2:10: AMP007" in result.output
    _invoke(["check", "--fix", "--no-cache", "n.ipynb"], tmp_path, monkeypatch)
    assert path.read_text(encoding="utf-8") == text.replace("torch.cuda.amp.GradScaler()",
                                                            'torch.amp.GradScaler(\\"cuda\\")')


# 4. One cache, projects whose imports resolve differently -------------------------------------------------------

TRAIN = """\
import torch

from gan.helpers import backward_and_step


def train(model, optimizer, loader, scaler):
    for inputs, targets in loader:
        with torch.autocast("cuda"):
            loss = model(inputs)
            backward_and_step(loss, scaler, optimizer)
"""
HELPERS = {
    "runs a backward": "def backward_and_step(loss, scaler, optimizer):\n    scaler.scale(loss).backward()\n",
    "runs nothing": "def backward_and_step(loss, scaler, optimizer):\n    return loss\n",
    "absent": None,
}
ORDERS = [["runs a backward", "runs nothing", "absent"], ["absent", "runs a backward", "runs nothing"],
          ["runs nothing", "absent", "runs a backward"], ["absent", "runs nothing", "runs a backward"],
          ["runs nothing", "runs a backward", "absent"], ["runs a backward", "absent", "runs nothing"]]


@pytest.mark.parametrize("order", ORDERS, ids=[" > ".join(order) for order in ORDERS])
def test_a_shared_cache_gives_each_project_its_own_answer(tmp_path, monkeypatch, order):
    roots = {}
    for index, (name, helper) in enumerate(HELPERS.items()):
        root = roots[name] = tmp_path / f"project{index}"
        (root / ".git").mkdir(parents=True)
        (root / "train.py").write_text(TRAIN)
        if helper is not None:
            (root / "gan").mkdir()  # a namespace package: no __init__.py
            (root / "gan" / "helpers.py").write_text(helper)

    def codes(name: str, *cache: str) -> list[str]:
        result = _invoke(["check", ".", "--output-format", "concise", "-q", *cache], roots[name], monkeypatch)
        return sorted(line.split()[1] for line in result.stdout.splitlines() if line.strip())

    expected = {name: codes(name, "--no-cache") for name in HELPERS}
    assert expected["runs a backward"] == ["AMP001"] and expected["runs nothing"] == expected["absent"] == []
    shared = str(tmp_path / "cache")
    for name in order + order:
        assert codes(name, "--cache-dir", shared) == expected[name], name


# A requirements file's `-r` includes are inputs too: a report over one is refused before anything is written.

@pytest.mark.parametrize("include", ["extra.txt", "sub/extra.txt", "sub/deeper/chain.txt", "absent.txt"])
def test_a_report_over_a_requirements_include_is_refused(tmp_path, monkeypatch, include):
    root = tmp_path / "project"
    _input(root, "t.py")
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "requirements.txt").write_text("torch>=2.4\n-r extra.txt\n--requirement sub/extra.txt\n-r absent.txt\n")
    (root / "extra.txt").write_text("numpy\n")
    (root / "sub" / "extra.txt").write_text("-r deeper/chain.txt\n")
    (root / "sub" / "deeper" / "chain.txt").write_text("scipy\n")
    before = _tree(root)
    result = _invoke(["check", "--fix", "--output-file", include, "t.py"], root, monkeypatch)
    assert result.exit_code == 2 and "an input of this run" in result.stderr, result.output
    assert _tree(root) == before  # nothing fixed, no report, no include created
