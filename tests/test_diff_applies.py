"""`--diff` is a patch that `patch` and `git apply` apply, leaving each file byte for byte what `--fix` writes:
files without a final newline, with CRLF or lone CR line breaks, a BOM, a coding cookie, and characters that
`str.splitlines` takes for line breaks (`\\f`, `\\v`, `\\x1c`-`\\x1e`, `\\x85`, U+2028, U+2029) inside a line.
The same holds for a notebook cell's patch (applied to a file holding the cell's source) and for the rows of
`--show-fixes`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from amplint.cli import main

PATCH = shutil.which("patch")
GIT = shutil.which("git")

FLAG = b"scaler = torch.cuda.amp.GradScaler()"  # AMP007, a safe fix on this line
MOVE = b'with torch.autocast("cuda"):\n    loss = model(x)\n    loss.backward()'  # AMP001: the backward moves out

CASES = {
    "plain": b"import torch\n" + FLAG + b"\n",
    "no final newline": b"import torch\n" + FLAG,
    "crlf": b"import torch\r\n" + FLAG + b"\r\nx = 1\r\n",
    "crlf, no final newline": b"import torch\r\nx = 1\r\n" + FLAG,
    "lone cr": b"import torch\rx = 1\r" + FLAG + b"\ry = 2\r",
    "mixed line breaks": b"import torch\r\nx = 1\r" + FLAG + b"\ny = 2\r\n",
    "bom": b"\xef\xbb\xbfimport torch\n" + FLAG + b"\n",
    "bom, changed first line": b"\xef\xbb\xbf" + b"import torch; " + FLAG + b"\n",
    "bom, crlf, no final newline": b"\xef\xbb\xbfimport torch\r\n" + FLAG,
    "form feed": b"import torch\n\x0c\nx = 1 \x0c+ 2\n" + FLAG + b"\ny = 3\n",
    "vertical tab": b"import torch\n# a\x0bb\n" + FLAG + b"  # c\x0bd\n",
    "file separators": b'import torch\nnote = "a\x1cb\x1dc\x1ed"\n' + FLAG + b'\nafter = "\x1c"\n',
    "next line": b'import torch\nnote = "a\xc2\x85b"\n' + FLAG + b"\n",
    "line separator": b'import torch\nnote = "a\xe2\x80\xa8b"\n' + FLAG + b"\n",
    "paragraph separator": b"import torch\n# a\xe2\x80\xa9b\n" + FLAG + b"\n",
    "separators on the changed line": b'import torch\nscaler = torch.cuda.amp.GradScaler()  # \x0c\x1c\xc2\x85\xe2\x80\xa8\n',
    "separator on the last line, no newline": b"import torch\n" + FLAG + b'\nnote = "\xe2\x80\xa9"',
    "lone cr in a string": b'import torch\nnote = """a\rb\x0cc"""\n' + FLAG + b"\n",
    "latin-1 cookie": b"# -*- coding: latin-1 -*-\nimport torch\nname = '\xe9t\xe9'\n" + FLAG + b"\n",
    "latin-1 cookie, crlf, no final newline": b"# coding: latin-1\r\nimport torch\r\nname = '\xe9'\r\n" + FLAG,
    "blank lines at the end": b"import torch\n" + FLAG + b"\n\n\n",
    "only line, no newline": b"import torch; " + FLAG,
    "moved block with form feed": b"import torch\n" + MOVE.replace(b"model(x)", b"model(x) \x0c") + b"\n",
    "moved block, crlf, no final newline": b"import torch\r\n" + MOVE.replace(b"\n", b"\r\n"),
    "moved block, separators": b"import torch\n" + MOVE.replace(b"model(x)", b'model("\xe2\x80\xa8\x1d")') + b"\n",
}


def _run(args: list[str], folder: Path, monkeypatch) -> tuple[int, bytes]:
    monkeypatch.chdir(folder)
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.stdout_bytes


def _fixed_and_diff(raw: bytes, tmp_path: Path, monkeypatch, name: str = "x.py") -> tuple[bytes, bytes]:
    fixed_folder, diff_folder = tmp_path / "fixed", tmp_path / "diffed"
    for folder in (fixed_folder, diff_folder):
        folder.mkdir()
        (folder / name).write_bytes(raw)
    code, _ = _run(["check", "--fix", "--unsafe-fixes", "--no-cache", "-q", name], fixed_folder, monkeypatch)
    assert code in (0, 1)
    code, diff = _run(["check", "--diff", "--unsafe-fixes", "--no-cache", "-q", name], diff_folder, monkeypatch)
    assert code == 1 and (diff_folder / name).read_bytes() == raw  # --diff writes nothing
    fixed = (fixed_folder / name).read_bytes()
    assert fixed != raw, "the case must have something to fix"
    return fixed, diff


@pytest.mark.skipif(PATCH is None, reason="no `patch` on this system")
@pytest.mark.parametrize("case", list(CASES))
def test_patch_applies_the_diff_byte_for_byte(case, tmp_path, monkeypatch):
    raw = CASES[case]
    fixed, diff = _fixed_and_diff(raw, tmp_path, monkeypatch)
    target = tmp_path / "patched"
    target.mkdir()
    (target / "x.py").write_bytes(raw)
    done = subprocess.run([PATCH, "-p1", "--no-backup-if-mismatch", "-F0", "-s"], cwd=target, input=diff,
                          capture_output=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (target / "x.py").read_bytes() == fixed


@pytest.mark.skipif(GIT is None, reason="no git on this system")
@pytest.mark.parametrize("case", list(CASES))
def test_git_apply_applies_the_diff_byte_for_byte(case, tmp_path, monkeypatch):
    raw = CASES[case]
    fixed, diff = _fixed_and_diff(raw, tmp_path, monkeypatch)
    repository = tmp_path / "repository"
    repository.mkdir()
    subprocess.run([GIT, "init", "-q"], cwd=repository, check=True, timeout=600)
    (repository / "x.py").write_bytes(raw)
    (repository / "fix.patch").write_bytes(diff)
    for check in (["--check"], []):
        done = subprocess.run([GIT, "-c", "core.autocrlf=false", "apply", "--whitespace=nowarn", *check,
                               "fix.patch"], cwd=repository, capture_output=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
    assert (repository / "x.py").read_bytes() == fixed


def test_a_last_line_without_newline_is_marked():
    from amplint.sources.base import unified_diff

    diff = unified_diff("x.py", "a\nb", "a\nc")
    assert diff.endswith("-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n")
    assert "No newline" not in unified_diff("x.py", "a\nb\n", "a\nc\n")
    assert unified_diff("x.py", "a\nb", "a\nb\n").endswith("-b\n\\ No newline at end of file\n+b\n")


@pytest.mark.parametrize("separator", ["\x0c", "\x0b", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r"])
def test_a_diff_line_is_a_line_of_the_file(separator):
    from amplint.sources.base import unified_diff

    old = f"a = 1\nb = '{separator}'\nc = 2\n"
    new = old.replace("c = 2", "c = 3")
    diff = unified_diff("x.py", old, new)
    assert diff.splitlines(keepends=False)[2] == "@@ -1,3 +1,3 @@"
    assert diff.split("\n")[3:7] == [" a = 1", f" b = '{separator}'", "-c = 2", "+c = 3"]


# Notebooks: each changed cell's patch applies to that cell's source ---------------------------------------------


def _notebook(path: Path, sources: list[str]) -> None:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "# title"}]
    cells += [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
              for source in sources]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1)
                    + "\n", encoding="utf-8")


NOTEBOOK_CASES = {
    "lines ending in newlines": ["import torch\n", "x = 1\n" + FLAG.decode() + "\ny = 2\n"],
    "no final newline": ["import torch\n", "x = 1\n" + FLAG.decode()],
    "separators in the cell": ["import torch\n", 'a = "\x0c\x0b\x1c\x1d\x1e\x85\u2028\u2029"\n' + FLAG.decode()
                               + "\nb = 1\n"],
    "separator on the changed line": ["import torch", FLAG.decode() + '  # \u2028\x0c'],
}


@pytest.mark.skipif(PATCH is None, reason="no `patch` on this system")
@pytest.mark.parametrize("case", list(NOTEBOOK_CASES))
def test_a_cells_patch_applies_to_the_cells_source(case, tmp_path, monkeypatch):
    sources = NOTEBOOK_CASES[case]
    _notebook(tmp_path / "n.ipynb", sources)
    code, diff = _run(["check", "--diff", "--no-cache", "-q", "n.ipynb"], tmp_path, monkeypatch)
    assert code == 1
    headers = re.findall(rb"^--- a/(.*)$", diff, re.MULTILINE)
    assert headers == [b"n.ipynb:cell 3"]  # the markdown cell counts: findings say "cell 3" too
    cell = tmp_path / "cell.py"  # the header's name holds a space: the file is named to `patch`
    cell.write_text(sources[1], encoding="utf-8", newline="")
    done = subprocess.run([PATCH, "--no-backup-if-mismatch", "-F0", "-s", str(cell)], cwd=tmp_path, input=diff,
                          capture_output=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    _run(["check", "--fix", "--no-cache", "-q", "n.ipynb"], tmp_path, monkeypatch)
    fixed = json.loads((tmp_path / "n.ipynb").read_text(encoding="utf-8"))["cells"][2]["source"]
    assert cell.read_bytes().decode("utf-8") == fixed


# --show-fixes: rows as findings count them -----------------------------------------------------------------------


@pytest.mark.parametrize("separator", ["\x0c", "\x1c", "\u2028"])
def test_show_fixes_counts_rows_as_python_does(separator):
    from amplint.diagnostics import Edit, Location

    original = f"a = 1  # {separator}\nb = 4\n"
    edit = Edit(0, len(original), original.replace("4", "3"), Location(5, 1), Location(7, 1), original=original)
    assert edit.patch() == ["@@ -5,2 +5,2 @@", f" a = 1  # {separator}", "-b = 4", "+b = 3"]
    # a lone CR ends a row for Python (and for the finding's row), so it does here
    lone = "a = 1\rb = 4\n"
    edit = Edit(0, len(lone), lone.replace("4", "3"), Location(5, 1), Location(7, 1), original=lone)
    assert edit.patch() == ["@@ -5,2 +5,2 @@", " a = 1", "-b = 4", "+b = 3"]
