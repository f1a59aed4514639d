"""A third probe of bad and unusual inputs: no input is lost, no run hangs, no run stops on one input.

Families (each case a parameter; in-process where the front end allows, a subprocess only for what must run as
a program): newer syntax, `--fix` convergence and `--diff` against `--fix`, notebooks, configuration, the
command line, the cache, the editor server, the flake8 plugin and pre-commit, and the run-time watch.
What every case asks: no internal error (AMP902, a traceback), a defined exit code, bytes kept where nothing is
fixed, a fix that parses and is final, a diff that `patch` applies to give the `--fix` result byte for byte.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from amplint import pipeline
from amplint.cli import main
from amplint.fixer import parse_error
from amplint.outcome import Mode
from amplint.selection import all_rules

RULES = all_rules()
PATCH = shutil.which("patch")
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
INTERNAL = "AMP902"

STEP = """\
import torch

def train(model, x, optimizer, scaler):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(x).sum()
        scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""  # AMP001: a safe fix moves the backward out of the region
LEGACY = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"  # AMP007 (a warning), a safe fix


def run_text(text: str, path: str = "t.py", mode: Mode = Mode()):
    outcome = pipeline.process_text(text, path, RULES, mode)
    codes = [d.code for d in outcome.diagnostics]
    assert INTERNAL not in codes and not outcome.internal_error, [d.message for d in outcome.diagnostics]
    return outcome


def fixed_is_final(text: str, path: str = "t.py", unsafe: bool = False) -> str:
    """Fix, check the result parses when the input did, and that fixing it again changes nothing."""
    outcome = run_text(text, path, Mode(fix=True, unsafe=unsafe))
    fixed = outcome.fixed_text if outcome.fixed_text is not None else text
    if not path.endswith(".ipynb") and parse_error(text) is None:
        assert parse_error(fixed) is None, fixed
    again = run_text(fixed, path, Mode(fix=True, unsafe=unsafe))
    assert (again.fixed_text if again.fixed_text is not None else fixed) == fixed, "a second --fix changed it again"
    return fixed


def invoke(folder: Path, args: list[str], monkeypatch, stdin: bytes | None = None):
    monkeypatch.chdir(folder)
    result = CliRunner().invoke(main, args, input=stdin)
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    return result


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.is_symlink() and ".amplint_cache" not in p.parts}


# 1. Newer syntax around AMP code: no crash, the fix parses and is final ---------------------------------------------

def _region(body: str, indent: str = "    ") -> str:
    return textwrap.indent(textwrap.dedent("""\
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).sum()
            scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        """), indent) if not body else body


SYNTAX = {
    "match statement": "import torch\ndef f(model, x, optimizer, scaler, mode):\n    match mode:\n"
                       "        case 'train':\n"
                       + _region("", " " * 12) + "        case _:\n            pass\n",
    "match class patterns": "import torch\ndef f(model, x, optimizer, scaler, batch):\n    match batch:\n"
                            "        case {'x': x, **rest} if rest:\n" + _region("", " " * 12),
    "walrus in the region": "import torch\ndef f(model, x, optimizer, scaler):\n"
                            "    with torch.autocast('cuda', dtype=torch.float16):\n"
                            "        if (loss := model(x).sum()) is not None:\n"
                            "            scaler.scale(loss).backward()\n    scaler.step(optimizer)\n",
    "async with and for": "import torch\nasync def f(model, loader, optimizer, scaler, lock):\n    async with lock:\n"
                          "        async for x in loader:\n" + _region("", " " * 12),
    "except star": "import torch\ndef f(model, x, optimizer, scaler):\n    try:\n" + _region("", " " * 8)
                   + "    except* ValueError:\n        pass\n",
    "positional-only and keyword-only": "import torch\ndef f(model, x, /, optimizer, *, scaler):\n" + _region(""),
    "decorator expressions": "import torch\n@(lambda f: f)\n@torch.no_grad() if False else (lambda f: f)\n"
                             "def f(model, x, optimizer, scaler):\n" + _region(""),
    "parenthesized context managers": "import torch, contextlib\ndef f(model, x, optimizer, scaler):\n"
                                      "    with (contextlib.nullcontext(),\n"
                                      "          torch.autocast('cuda', dtype=torch.float16)):\n"
                                      "        loss = model(x).sum()\n        scaler.scale(loss).backward()\n"
                                      "    scaler.step(optimizer)\n    scaler.update()\n",
    "unicode identifiers": "import torch\ndef f(modèle, x, optimiseur, échelle):\n"
                           "    with torch.autocast('cuda', dtype=torch.float16):\n        perte = modèle(x).sum()\n"
                           "        échelle.scale(perte).backward()\n    échelle.step(optimiseur)\n",
    "global and nonlocal": "import torch\nscaler = None\ndef f(model, x, optimizer):\n    global scaler\n"
                           "    def g():\n        nonlocal optimizer\n" + _region("", " " * 8) + "    g()\n",
    "lambda default capturing": "import torch\ndef f(model, x, optimizer, scaler, k=lambda s=None: s):\n"
                                + _region(""),
    "star expressions": "import torch\ndef f(model, xs, optimizer, scaler):\n    first, *rest = xs\n"
                        "    with torch.autocast('cuda', dtype=torch.float16):\n        loss = model(*rest).sum()\n"
                        "        scaler.scale(loss).backward()\n    scaler.step(optimizer)\n    scaler.update()\n",
    "f-string with nested quotes": "import torch\ndef f(model, x, optimizer, scaler, d):\n"
                                   "    with torch.autocast('cuda', dtype=torch.float16):\n"
                                   "        loss = model(x).sum()\n        print(f\"{d['k']!r:>10}\")\n"
                                   "        scaler.scale(loss).backward()\n    scaler.step(optimizer)\n",
    "type hints everywhere": "import torch\nfrom typing import Callable\n"
                             "def f(model: Callable[..., torch.Tensor], x: torch.Tensor, optimizer: 'torch.optim.SGD',"
                             " scaler: torch.amp.GradScaler) -> None:\n" + _region(""),
    "class body region": "import torch\nclass T:\n    model = optimizer = scaler = x = None\n"
                         "    with torch.autocast('cuda', dtype=torch.float16):\n        loss = model(x).sum()\n"
                         "        scaler.scale(loss).backward()\n",
    "deep nesting": "import torch\ndef f(model, x, optimizer, scaler):\n" + "".join(
        "    " * (i + 1) + f"for i{i} in range(1):\n" for i in range(30)) + _region("", "    " * 31),
    "long line": "import torch\ndef f(model, x, optimizer, scaler):\n    y = [" + ", ".join(["1"] * 3000) + "]\n"
                 + _region(""),
    "semicolons": "import torch\ndef f(model, x, optimizer, scaler):\n"
                  "    with torch.autocast('cuda', dtype=torch.float16):\n"
                  "        loss = model(x).sum(); scaler.scale(loss).backward(); y = 1\n"
                  "    scaler.step(optimizer); scaler.update()\n",
    "backslash continuation": "import torch\ndef f(model, x, optimizer, scaler):\n"
                              "    with torch.autocast('cuda', \\\n            dtype=torch.float16):\n"
                              "        loss = model(x) \\\n            .sum()\n        scaler.scale(loss) \\\n"
                              "            .backward()\n    scaler.step(optimizer)\n",
    "tabs for indentation": "import torch\ndef f(model, x, optimizer, scaler):\n"
                            "\twith torch.autocast('cuda', dtype=torch.float16):\n\t\tloss = model(x).sum()\n"
                            "\t\tscaler.scale(loss).backward()\n\tscaler.step(optimizer)\n",
    "comment-only region tail": "import torch\ndef f(model, x, optimizer, scaler):\n"
                                "    with torch.autocast('cuda', dtype=torch.float16):\n        loss = model(x).sum()\n"
                                "        scaler.scale(loss).backward()  # here\n        # trailing\n"
                                "    scaler.step(optimizer)\n",
    "region in a generator": "import torch\ndef f(model, xs, optimizer, scaler):\n    for x in xs:\n"
                             "        with torch.autocast('cuda', dtype=torch.float16):\n"
                             "            loss = model(x).sum()\n            scaler.scale(loss).backward()\n"
                             "            yield loss\n        scaler.step(optimizer)\n",
    "conditional expression region": "import torch, contextlib\ndef f(model, x, optimizer, scaler, amp):\n"
                                     "    ctx = torch.autocast('cuda') if amp else contextlib.nullcontext()\n"
                                     "    with ctx:\n        loss = model(x).sum()\n"
                                     "        scaler.scale(loss).backward()\n    scaler.step(optimizer)\n",
}
# Syntax this Python's own parser may not take (3.12-3.14): the engine reads it (libcst) or reports AMP900.
NEWER = {
    "PEP 695 generic function": "import torch\ndef f[T](model: T, x, optimizer, scaler):\n" + _region(""),
    "PEP 695 type alias": "import torch\ntype Batch = list[torch.Tensor]\ndef f(model, x, optimizer, scaler):\n"
                          + _region(""),
    "PEP 695 generic class": "import torch\nclass Trainer[T]:\n    def step(self, model, x, optimizer, scaler):\n"
                             + _region("", " " * 8),
    "PEP 696 type parameter default": "import torch\ndef f[T = int](model, x, optimizer, scaler):\n" + _region(""),
    "PEP 701 nested f-string quotes": "import torch\ndef f(model, x, optimizer, scaler, d):\n"
                                      "    print(f\"{d[\"k\"]}\")\n" + _region(""),
    "PEP 701 multiline f-string expression": "import torch\ndef f(model, x, optimizer, scaler):\n"
                                             "    s = f\"{\n        1 + 1\n    }\"\n" + _region(""),
    "PEP 750 t-string": "import torch\ndef f(model, x, optimizer, scaler, name):\n    msg = t\"hello {name}\"\n"
                        + _region(""),
    "PEP 758 except without parentheses": "import torch\ndef f(model, x, optimizer, scaler):\n    try:\n"
                                          + _region("", " " * 8) + "    except ValueError, TypeError:\n"
                                          "        pass\n",
}


@pytest.mark.parametrize("text", list(SYNTAX.values()), ids=list(SYNTAX))
def test_syntax_around_amp_code_is_linted_and_fixed_to_a_final_text(text):
    assert parse_error(text) is None, "the probe's own program must parse"
    fixed_is_final(text)
    fixed_is_final(text, unsafe=True)


@pytest.mark.parametrize("text", list(NEWER.values()), ids=list(NEWER))
def test_newer_syntax_is_read_or_a_syntax_error_never_a_crash(text):
    outcome = run_text(text)
    if parse_error(text) is not None:
        assert [d.code for d in outcome.diagnostics] == ["AMP900"]
    else:
        fixed_is_final(text, unsafe=True)


# 2. --fix is final and --diff applied with `patch` gives the --fix result, byte for byte -----------------------------

def _fixture_sample() -> list[Path]:
    files = sorted(FIXTURES.glob("AMP0*/flagged/*.py"))
    return files[::max(len(files) // 12, 1)][:12]


BYTE_VARIANTS = {
    "no final newline": STEP.rstrip("\n"),
    "CRLF": STEP.replace("\n", "\r\n"),
    "CR only": STEP.replace("\n", "\r"),
    "mixed endings": STEP.replace("\n", "\r\n", 3),
    "BOM": "\ufeff" + STEP,
    "form feed line": "\f\n" + STEP,
    "form feed in indentation": STEP.replace("        loss", "\f        loss"),
    "vertical tab in a comment": STEP.replace("import torch", "import torch  # a\vb"),
    "U+2028 in a string": STEP.replace("loss = model(x).sum()", "loss = model(x).sum(); s = 'a\u2028b'"),
    "NEL in a comment": STEP.replace("import torch", "import torch  # a\x85b"),
    "file separator in a string": STEP.replace("loss = model(x).sum()", "loss = model(x).sum(); s = 'a\x1cb'"),
    "trailing whitespace": STEP.replace("\n", "   \n"),
    "blank lines at the end": STEP + "\n\n\n",
    "only the region": "import torch\nwith torch.autocast('cuda'):\n    loss.backward()",
    "latin-1 cookie": "# -*- coding: latin-1 -*-\n" + STEP.replace("import torch", "import torch  # caf\u00e9"),
}


def _diff_then_patch(tmp_path: Path, name: str, data: bytes, monkeypatch) -> None:
    diffed, fixed = tmp_path / "diffed", tmp_path / "fixed"
    for folder in (diffed, fixed):
        folder.mkdir()
        (folder / name).write_bytes(data)
    result = invoke(diffed, ["check", "--diff", "--no-cache", "-q", name], monkeypatch)
    fix = invoke(fixed, ["check", "--fix", "--no-cache", "-q", "--exit-zero", name], monkeypatch)
    assert fix.exit_code == 0
    if result.stdout_bytes:
        done = subprocess.run([PATCH, "-p1", "--no-backup-if-mismatch", "-F0", "-s", "--binary"], cwd=diffed,
                              input=result.stdout_bytes, capture_output=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
    assert (diffed / name).read_bytes() == (fixed / name).read_bytes()
    again = invoke(fixed, ["check", "--diff", "--no-cache", "-q", name], monkeypatch)
    assert again.stdout_bytes == b"", "a second --fix would change the fixed file again"


@pytest.mark.skipif(PATCH is None, reason="no `patch` on this system")
@pytest.mark.parametrize("path", _fixture_sample(), ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_diff_applied_is_the_fix_for_flagged_fixtures(tmp_path, monkeypatch, path):
    _diff_then_patch(tmp_path, path.name, path.read_bytes(), monkeypatch)


@pytest.mark.skipif(PATCH is None, reason="no `patch` on this system")
@pytest.mark.parametrize("text", list(BYTE_VARIANTS.values()), ids=list(BYTE_VARIANTS))
def test_diff_applied_is_the_fix_for_odd_bytes(tmp_path, monkeypatch, text):
    encoding = "latin-1" if "latin-1" in text else "utf-8"
    _diff_then_patch(tmp_path, "t.py", text.encode(encoding), monkeypatch)


# 3. Notebooks --------------------------------------------------------------------------------------------------------

def _nb(*cells, **top) -> str:
    data = {"cells": list(cells), "metadata": top.pop("metadata", {}), "nbformat": top.pop("nbformat", 4),
            "nbformat_minor": 5, **top}
    return json.dumps(data, indent=1) + "\n"


def _code(source, **extra):
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source, **extra}


NOTEBOOKS = {
    "no cells": _nb(),
    "markdown only": _nb({"cell_type": "markdown", "metadata": {}, "source": "loss.backward() in autocast"}),
    "raw cell with code": _nb({"cell_type": "raw", "metadata": {}, "source": STEP}),
    "source as one string": _nb(_code(STEP)),
    "source as a list of lines": _nb(_code(STEP.splitlines(keepends=True))),
    "empty source list": _nb(_code([])),
    "magics and shell": _nb(_code("%matplotlib inline\n!pip install torch\n" + STEP)),
    "cell magic": _nb(_code("%%time\n" + STEP)),
    "region split across cells": _nb(_code("import torch\nctx = torch.autocast('cuda')\n"),
                                     _code("with ctx:\n    loss = model(x).sum()\n    loss.backward()\n")),
    "a syntax error cell": _nb(_code("def (:\n"), _code(STEP)),
    "CRLF in sources": _nb(_code(STEP.replace("\n", "\r\n"))),
    "non-python kernel": _nb(_code(STEP), metadata={"kernelspec": {"language": "R", "name": "ir"}}),
    "nbformat 3": json.dumps({"worksheets": [{"cells": [{"cell_type": "code", "input": STEP}]}], "nbformat": 3}),
    "top-level array": "[1, 2, 3]\n",
    "not JSON": "{not json",
    "empty file": "",
    "huge integer": '{"cells": [], "metadata": {"n": ' + "9" * 5000 + '}, "nbformat": 4, "nbformat_minor": 5}',
    "NaN literal": '{"cells": [], "metadata": {"x": NaN}, "nbformat": 4, "nbformat_minor": 5}',
    "duplicate keys": '{"cells": [], "cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}',
    "cells is not a list": '{"cells": {"a": 1}, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}',
    "cell without source": _nb({"cell_type": "code", "metadata": {}, "outputs": []}),
    "source of numbers": _nb(_code([1, 2, 3])),
    "deeply nested metadata": '{"cells": [], "metadata": ' + "[" * 3000 + "]" * 3000 + ', "nbformat": 4}',
    "BOM before JSON": "\ufeff" + _nb(_code(LEGACY)),
    "unicode escapes kept": json.dumps(json.loads(_nb(_code(LEGACY + "# caf\u00e9\n"))), ensure_ascii=True),
}


@pytest.mark.parametrize("text", list(NOTEBOOKS.values()), ids=list(NOTEBOOKS))
def test_a_notebook_is_linted_and_fixed_without_damage(text):
    run_text(text, "n.ipynb")
    fixed = fixed_is_final(text, "n.ipynb")
    if fixed != text:
        json.loads(fixed)  # a notebook the fix changed is still JSON
        before, after = json.loads(text.lstrip("\ufeff")), json.loads(fixed.lstrip("\ufeff"))
        assert len(before["cells"]) == len(after["cells"]) and before.get("metadata") == after.get("metadata")


# 4. Configuration --------------------------------------------------------------------------------------------------

CONFIGS = {
    "empty amplint.toml": ("amplint.toml", ""),
    "BOM and CRLF": ("amplint.toml", "\ufeffselect = [\"AMP007\"]\r\n"),
    "unknown key": ("amplint.toml", "selcet = [\"AMP007\"]\n"),
    "select of the wrong type": ("amplint.toml", "select = \"AMP007\"\n"),
    "select empty": ("amplint.toml", "select = []\n"),
    "unknown code": ("amplint.toml", "select = [\"AMP999\"]\n"),
    "severity unknown level": ("amplint.toml", "[severity]\nAMP007 = \"fatal\"\n"),
    "severity of the wrong type": ("amplint.toml", "severity = 3\n"),
    "per-file-ignores odd pattern": ("amplint.toml", "[per-file-ignores]\n\"[\" = [\"AMP007\"]\n"),
    "per-file-ignores not a list": ("amplint.toml", "[per-file-ignores]\n\"*.py\" = \"AMP007\"\n"),
    "target torch garbage": ("amplint.toml", "target-torch-version = \"banana\"\n"),
    "target torch old": ("amplint.toml", "target-torch-version = \"1.0\"\n"),
    "max file size zero": ("amplint.toml", "max-file-size = 0\n"),
    "jobs negative": ("amplint.toml", "jobs = -3\n"),
    "exclude everything": ("amplint.toml", "exclude = [\"*\"]\n"),
    "invalid TOML": ("amplint.toml", "select = [\n"),
    "not UTF-8": ("amplint.toml", b"select = [\"\xff\xfe\"]\n"),
    "NUL bytes": ("amplint.toml", b"select = [\"AMP007\"]\x00\n"),
    "deep arrays in another tool": ("pyproject.toml", "[tool.other]\nx = " + "[" * 3000 + "]" * 3000 + "\n"
                                    "[tool.amplint]\nselect = [\"AMP007\"]\n"),
    "pyproject tool not a table": ("pyproject.toml", "tool = 3\n"),
    "pyproject amplint not a table": ("pyproject.toml", "[tool]\namplint = 3\n"),
    "pyproject broken, not amplint's": ("pyproject.toml", "[project\nname = 'x'\n"),
    "pyproject broken, amplint's": ("pyproject.toml", "[tool.amplint]\nselect = [\n"),
    "dotted keys": ("pyproject.toml", "tool.amplint.select = [\"AMP007\"]\n"),
    "huge config": ("amplint.toml", "# x\n" * 400_000),
    "requirements include loop": ("requirements.txt", "-r requirements.txt\ntorch>=2.4\n"),
    "requirements include of a folder": ("requirements.txt", "-r .\ntorch>=2.4\n"),
    "requirements with odd bytes": ("requirements.txt", b"torch>=2.4\xff\x00\n"),
}


@pytest.mark.parametrize(("name", "content"), list(CONFIGS.values()), ids=list(CONFIGS))
def test_a_configuration_file_is_read_or_refused_by_name_never_a_crash(tmp_path, monkeypatch, name, content):
    (tmp_path / ".git").mkdir()
    (tmp_path / "t.py").write_text(LEGACY)
    data = content if isinstance(content, bytes) else content.encode("utf-8")
    (tmp_path / name).write_bytes(data)
    before = tree(tmp_path)
    result = invoke(tmp_path, ["check", "--no-cache", "t.py"], monkeypatch)
    if result.exit_code == 2:
        assert name in result.stderr or "no rule is selected" in result.stderr, result.stderr
    fix = invoke(tmp_path, ["check", "--no-cache", "--fix", "t.py"], monkeypatch)
    assert (tmp_path / name).read_bytes() == before[name]  # a configuration is never written
    if fix.exit_code == 2:
        assert (tmp_path / "t.py").read_bytes() == before["t.py"]  # refused: nothing fixed


@pytest.mark.parametrize("kind", ["folder", "symlink loop", "dangling symlink"])
@pytest.mark.parametrize("name", ["amplint.toml", "pyproject.toml", "requirements.txt"])
def test_a_configuration_name_that_is_no_file_is_passed_over(tmp_path, monkeypatch, kind, name):
    (tmp_path / ".git").mkdir()
    (tmp_path / "t.py").write_text(LEGACY)
    target = tmp_path / name
    if kind == "folder":
        target.mkdir()
    elif kind == "symlink loop":
        target.symlink_to(target)
    else:
        target.symlink_to(tmp_path / "nowhere")
    result = invoke(tmp_path, ["check", "--no-cache", "--output-format", "json", "t.py"], monkeypatch)
    assert result.exit_code in (0, 2)
    if result.exit_code == 0:
        assert [d["code"] for d in json.loads(result.stdout)] == ["AMP007"]


# 5. The command line ----------------------------------------------------------------------------------------------

CLI = {
    "diff and fix": ["--diff", "--fix"],
    "fix-only and diff": ["--fix-only", "--diff"],
    "statistics json": ["--statistics", "--output-format", "json"],
    "quiet concise": ["-q", "--output-format", "concise"],
    "quiet grouped": ["-q", "--output-format", "grouped"],
    "sarif": ["--output-format", "sarif"],
    "junit": ["--output-format", "junit"],
    "github": ["--output-format", "github"],
    "gitlab": ["--output-format", "gitlab"],
    "json-lines": ["--output-format", "json-lines"],
    "exit zero": ["--exit-zero"],
    "warnings fail": ["--exit-non-zero-on-warning"],
    "select nothing": ["--select", ""],
    "select commas": ["--select", ",,AMP007,,"],
    "select by name": ["--select", "deprecated-amp-api"],
    "select unknown": ["--select", "AMP999"],
    "ignore everything": ["--ignore", "AMP"],
    "extend-select opt-in": ["--extend-select", "AMP015"],
    "target torch flag": ["--target-torch-version", "1.13"],
    "target torch bad": ["--target-torch-version", "x.y"],
    "show settings": ["--show-settings"],
    "show fixes": ["--show-fixes"],
    "unsafe without fix": ["--unsafe-fixes"],
    "jobs one": ["-j", "1"],
    "jobs zero": ["-j", "0"],
    "unknown option": ["--frobnicate"],
    "docs url": ["--docs-url", "https://example.invalid/docs"],
    "no-respect-gitignore": ["--no-respect-gitignore"],
    "force exclude": ["--force-exclude"],
    "config missing": ["--config", "nowhere.toml"],
    "cache dir is a file": ["--cache-dir", "t.py"],
}


@pytest.mark.parametrize("options", list(CLI.values()), ids=list(CLI))
def test_an_option_combination_exits_with_a_defined_code_and_keeps_the_input(tmp_path, monkeypatch, options):
    (tmp_path / ".git").mkdir()
    (tmp_path / "t.py").write_text(LEGACY)
    result = invoke(tmp_path, ["check", *options, "t.py"], monkeypatch)
    if "--fix" not in options and "--fix-only" not in options or "--diff" in options or result.exit_code == 2:
        assert (tmp_path / "t.py").read_text() == LEGACY


PATHS = {
    "missing file": ["nope.py"],
    "missing and present": ["nope.py", "t.py"],
    "same file twice": ["t.py", "t.py", "./t.py"],
    "a folder and its file": [".", "t.py"],
    "no python files": ["empty"],
    "a stub": ["s.pyi"],
    "a text file named": ["notes.txt"],
    "a dash-named file after --": ["--", "-d.py"],
    "a binary .py": ["bin.py"],
    "a NUL in the source": ["nul.py"],
}


@pytest.mark.parametrize("paths", list(PATHS.values()), ids=list(PATHS))
def test_odd_paths_are_each_reported_and_the_rest_linted(tmp_path, monkeypatch, paths):
    (tmp_path / ".git").mkdir()
    (tmp_path / "t.py").write_text(LEGACY)
    (tmp_path / "empty").mkdir()
    (tmp_path / "s.pyi").write_text(LEGACY)
    (tmp_path / "notes.txt").write_text("scaler.scale(loss).backward()\n")
    (tmp_path / "-d.py").write_text(LEGACY)
    (tmp_path / "bin.py").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "nul.py").write_bytes(LEGACY.encode() + b"\x00\n")
    before = tree(tmp_path)
    invoke(tmp_path, ["check", "--no-cache", *paths], monkeypatch)
    invoke(tmp_path, ["check", "--no-cache", "--diff", *paths], monkeypatch)
    assert tree(tmp_path) == before


STDIN = {
    "empty": b"",
    "only a BOM": b"\xef\xbb\xbf",
    "latin-1 bytes": "x = 'caf\u00e9'\n".encode("latin-1"),
    "a NUL": b"import torch\x00\n",
    "a notebook": _nb(_code(LEGACY)).encode(),
    "a broken notebook": b"{",
    "CRLF source": LEGACY.replace("\n", "\r\n").encode(),
}


@pytest.mark.parametrize("data", list(STDIN.values()), ids=list(STDIN))
@pytest.mark.parametrize("name", ["x.py", "x.ipynb"])
def test_standard_input_is_echoed_or_fixed_never_lost(tmp_path, monkeypatch, data, name):
    result = invoke(tmp_path, ["check", "-", "--stdin-filename", name, "--fix"], monkeypatch, stdin=data)
    if result.exit_code != 2 and b"scaler" not in data:
        assert result.stdout_bytes == data  # nothing to fix: the input, byte for byte


# 6. The cache -----------------------------------------------------------------------------------------------------

def _cache_files(root: Path) -> list[Path]:
    return [p for p in (root / ".amplint_cache").rglob("*") if p.is_file()]


DAMAGE = {
    "truncate": lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
    "empty": lambda p: p.write_bytes(b""),
    "garbage": lambda p: p.write_bytes(os.urandom(64)),
    "a folder instead": lambda p: (p.unlink(), p.mkdir()),
    "JSON of the wrong shape": lambda p: p.write_text("[]"),
    "read-only": lambda p: p.chmod(0o400),
}


@pytest.mark.parametrize("damage", list(DAMAGE.values()), ids=list(DAMAGE))
def test_a_damaged_cache_never_hides_a_finding(tmp_path, monkeypatch, damage):
    (tmp_path / ".git").mkdir()
    (tmp_path / "t.py").write_text(STEP)
    first = invoke(tmp_path, ["check", "--output-format", "json", "t.py"], monkeypatch)
    for path in _cache_files(tmp_path):
        try:
            damage(path)
        except OSError:
            pass
    second = invoke(tmp_path, ["check", "--output-format", "json", "t.py"], monkeypatch)
    assert json.loads(second.stdout) == json.loads(first.stdout)


def test_an_edit_after_a_cached_run_is_seen(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()
    (tmp_path / "t.py").write_text(STEP)
    assert invoke(tmp_path, ["check", "t.py"], monkeypatch).exit_code == 1
    (tmp_path / "t.py").write_text("x = 1\n")
    assert invoke(tmp_path, ["check", "t.py"], monkeypatch).exit_code == 0
    (tmp_path / "t.py").write_text(STEP)
    assert invoke(tmp_path, ["check", "t.py"], monkeypatch).exit_code == 1


@pytest.mark.parametrize("config", ['ignore = ["AMP001"]\n', 'select = ["AMP001"]\n'])
def test_the_cache_follows_a_configuration_change(tmp_path, monkeypatch, config):
    (tmp_path / ".git").mkdir()
    (tmp_path / "t.py").write_text(STEP)
    first = invoke(tmp_path, ["check", "t.py"], monkeypatch).exit_code
    (tmp_path / "amplint.toml").write_text(config)
    second = invoke(tmp_path, ["check", "t.py"], monkeypatch).exit_code
    assert (first, second) == (1, 0 if "ignore" in config else 1)


def test_the_cache_follows_a_nested_configuration(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "t.py").write_text(STEP)
    assert invoke(tmp_path, ["check", "."], monkeypatch).exit_code == 1
    (tmp_path / "sub" / "amplint.toml").write_text('ignore = ["AMP001"]\n')
    assert invoke(tmp_path, ["check", "."], monkeypatch).exit_code == 0
    (tmp_path / "sub" / "amplint.toml").unlink()
    assert invoke(tmp_path, ["check", "."], monkeypatch).exit_code == 1


# 7. The editor server --------------------------------------------------------------------------------------------

DOCUMENTS = {
    "empty": "",
    "only whitespace": "   \n\t\n",
    "syntax error": "def (:\n",
    "NUL": "x = 1\x00\n",
    "lone surrogate": "x = '\udcff'\n",
    "CR only": STEP.replace("\n", "\r"),
    "long line": "x = " + "1 + " * 20000 + "1\n",
    "deep parentheses": "x = " + "(" * 500 + "1" + ")" * 500 + "\n",
    "flagged": STEP,
    "legacy": LEGACY,
}


@pytest.mark.parametrize("text", list(DOCUMENTS.values()), ids=list(DOCUMENTS))
@pytest.mark.parametrize("path", ["t.py", None, "n.ipynb"])
def test_the_server_lints_and_fixes_any_document(tmp_path, text, path):
    from amplint.server import fix_all, lint_document

    where = str(tmp_path / path) if path else None
    found = lint_document(text, where, str(tmp_path))  # raises where the server would say "internal error"
    assert all(d.code != INTERNAL for d in found)
    fixed = fix_all(text, where, str(tmp_path))
    assert isinstance(fixed, str)
    if path == "t.py" and "\udcff" not in text and parse_error(text) is None:
        assert parse_error(fixed) is None
    if "\udcff" in text:
        assert fixed == text
        if path != "n.ipynb":
            assert [d.code for d in found] == ["AMP900"]


@pytest.mark.parametrize("frames", [
    b"", b"Content-Length: 5\r\n\r\n{}", b"Content-Length: x\r\n\r\n{}", b"garbage\r\n\r\n",
    b"Content-Length: 2\r\n\r\n{}{}", b'Content-Length: 40\r\n\r\n{"jsonrpc": "2.0", "id": 1}',
])
def test_the_server_reads_broken_frames_without_stopping(frames):
    import io

    from amplint.server import FrameReader

    reader = FrameReader(io.BytesIO(frames), log=io.StringIO())
    for _ in range(8):
        if not reader.readline():
            break


# 8. Integrations: the flake8 plugin and pre-commit -----------------------------------------------------------------

@pytest.mark.parametrize("text", [STEP, LEGACY, "", "x = 1", "# amplint: noqa\n" + STEP, STEP + "  # noqa: AMP001\n",
                                  "\ufeff" + LEGACY, LEGACY.replace("\n", "\r\n")],
                         ids=["flagged", "legacy", "empty", "no newline", "file noqa", "line noqa", "BOM", "CRLF"])
def test_the_flake8_plugin_reports_without_raising(tmp_path, text):
    from amplint.flake8_plugin import AmplintChecker

    path = tmp_path / "t.py"
    path.write_text(text, encoding="utf-8")
    try:
        tree_ = ast.parse(text.lstrip("\ufeff"))
    except SyntaxError:
        pytest.skip("flake8 does not run plugins on a file Python cannot parse")
    found = list(AmplintChecker(tree_, str(path), text.splitlines(keepends=True)).run())
    assert all(isinstance(row, int) and message.startswith("AMP") for row, _, message, _ in found)


def test_the_pre_commit_hooks_name_existing_entry_points():
    import tomllib

    manifest = (FIXTURES.parent / ".pre-commit-hooks.yaml").read_text(encoding="utf-8")
    scripts = tomllib.loads((FIXTURES.parent / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    entries = [line.split(":", 1)[1].strip().split()[0] for line in manifest.splitlines()
               if line.strip().startswith("entry:")]
    assert entries and all(entry in scripts for entry in entries), (entries, scripts)


# 9. The run-time watch --------------------------------------------------------------------------------------------

SCRIPTS = {
    "syntax error": ("def (:\n", 2),
    "raises": ("raise ValueError('boom')\n", 1),
    "exit code 3": ("import sys\nsys.exit(3)\n", 3),
    "exit with a message": ("import sys\nsys.exit('bye')\n", 1),
    "empty script": ("", 0),
    "not UTF-8": (b"x = '\xff'\n", 2),
}


@pytest.mark.parametrize(("script", "code"), list(SCRIPTS.values()), ids=list(SCRIPTS))
def test_amplint_watch_returns_the_scripts_status_without_a_traceback_of_its_own(tmp_path, script, code):
    path = tmp_path / "s.py"
    path.write_bytes(script if isinstance(script, bytes) else script.encode())
    from amplint.runtime.script import ScriptProblem, run_script

    pytest.importorskip("torch")
    try:
        outcome = run_script(str(path), [])
    except ScriptProblem:  # cannot run: a one-line error, exit 2 (amplint watch)
        status = 2
    else:
        status = outcome.status or 0
    assert status == code


def test_watch_leaves_threads_and_nested_watches_alone():
    torch = pytest.importorskip("torch")
    import threading
    import warnings

    from amplint.runtime import AmpRuntimeWarning, watch

    results = []

    def island():  # an fp32 island whose input is cast: the watch must not change what it computes
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = torch.nn.functional.linear(torch.ones(2, 4), torch.ones(3, 4))
            with torch.autocast("cpu", enabled=False):
                results.append((h.float() * 2).sum().item())

    island()
    expected = results.pop()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AmpRuntimeWarning)
        with watch():
            with watch():
                island()
            worker = threading.Thread(target=island)
            worker.start()
            worker.join()
    assert results == [expected, expected]


# 10. Found by this probe: a lone surrogate (`\udcff` in a notebook's JSON, an editor's buffer) and ignore files -------

SURROGATE_NOTEBOOK = _nb(_code("import torch\nx = '\udcff'\n"))
FORMATS = ["full", "concise", "grouped", "json", "json-lines", "junit", "sarif", "github", "gitlab"]


@pytest.mark.parametrize("to_file", [False, True], ids=["stdout", "output file"])
@pytest.mark.parametrize("output_format", FORMATS)
def test_a_lone_surrogate_is_a_syntax_error_in_every_report(tmp_path, monkeypatch, output_format, to_file):
    """It was an internal error (libcst cannot encode it), and a report file holding it was never written."""
    (tmp_path / "n.ipynb").write_text(SURROGATE_NOTEBOOK, encoding="utf-8")
    extra = ["--output-file", "report.out"] if to_file else []
    result = invoke(tmp_path, ["check", "--no-cache", "--output-format", output_format, *extra, "n.ipynb"],
                    monkeypatch)
    assert result.exit_code == 1, result.output
    report = (tmp_path / "report.out").read_bytes().decode("utf-8") if to_file else result.output
    assert "AMP900" in report or "syntax-error" in report or "lone surrogate" in report, report


@pytest.mark.parametrize(("ignore_file", "walked"), [(".gitignore", "."), (".ignore", "."), ("sub/.gitignore", "."),
                                                      (".gitignore", "sub"), (".git/info/exclude", "sub")])
def test_a_report_over_an_ignore_file_the_walk_reads_is_refused(tmp_path, monkeypatch, ignore_file, walked):
    (tmp_path / ".git" / "info").mkdir(parents=True)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "t.py").write_text(LEGACY)
    (tmp_path / ignore_file).write_text("build/\n")
    before = tree(tmp_path)
    result = invoke(tmp_path, ["check", "--no-cache", "--output-file", ignore_file, walked], monkeypatch)
    assert result.exit_code == 2 and "an input of this run" in result.stderr
    assert tree(tmp_path) == before


# 11. Nested configurations in every mode: each file's own configuration decides what is reported and fixed ----------

@pytest.mark.parametrize("mode", [["--fix"], ["--diff"], ["--statistics"], ["--fix-only"], ["--output-format", "json"]])
def test_each_file_is_fixed_and_reported_under_its_own_configuration(tmp_path, monkeypatch, mode):
    (tmp_path / ".git").mkdir()
    (tmp_path / "amplint.toml").write_text('select = ["AMP007"]\n')
    (tmp_path / "top.py").write_text(LEGACY)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "amplint.toml").write_text('ignore = ["AMP007"]\n')
    (tmp_path / "sub" / "inner.py").write_text(LEGACY)
    result = invoke(tmp_path, ["check", "--no-cache", *mode, "."], monkeypatch)
    assert (tmp_path / "sub" / "inner.py").read_text() == LEGACY  # its configuration ignores AMP007
    assert "inner.py" not in result.stdout
    if mode[0] in ("--fix", "--fix-only"):
        assert (tmp_path / "top.py").read_text() != LEGACY
    else:
        assert "top.py" in result.stdout or "AMP007" in result.stdout


# 12. A scaler that comes from a module the analysis cannot read, with a helper of that module before the clip -------

UNREAD_STATE = """\
import torch
from torch import nn
{imports}

model = nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    x, y = torch.randn(4, 8), torch.randn(4, 2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    {helper}(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
"""


@pytest.mark.parametrize(("imports", "helper"), [
    ("from shared_state import scaler, unscale_model", "unscale_model"),
    ("import shared_state\nscaler = shared_state.scaler", "shared_state.unscale_model"),
    ("import shared_state as st\nscaler = st.scaler", "st.unscale_model"),
])
def test_an_unread_helper_of_the_scalers_own_module_makes_the_unscale_unsafe(tmp_path, monkeypatch, imports, helper):
    """`shared_state.py` (not beside: an installed package) may unscale the scaler it holds; a second `unscale_`
    raises `unscale_() has already been called` (measured)."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "train.py").write_text(UNREAD_STATE.format(imports=imports, helper=helper))
    safe = invoke(tmp_path, ["check", "--no-cache", "--diff", "train.py"], monkeypatch)
    assert "unscale_(optimizer)" not in safe.stdout
    unsafe = invoke(tmp_path, ["check", "--no-cache", "--diff", "--unsafe-fixes", "train.py"], monkeypatch)
    assert "+    scaler.unscale_(optimizer)" in unsafe.stdout


UNREAD_UPDATE = """\
import torch
from torch import nn
{imports}

model = nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    x, y = torch.randn(4, 8), torch.randn(4, 2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    {helper}()
    optimizer.zero_grad()
"""
SHARED_STATE = 'import torch\nscaler = torch.amp.GradScaler("cpu")\n\n\ndef after_step():\n    scaler.update()\n'


@pytest.mark.parametrize("beside", [False, True], ids=["unread module", "module beside"])
@pytest.mark.parametrize(("imports", "helper"), [
    ("from shared_state import scaler, after_step", "after_step"),
    ("from shared_state import scaler, after_step as finish", "finish"),
    ("import shared_state\nscaler = shared_state.scaler", "shared_state.after_step"),
])
def test_a_scaler_updated_by_its_own_modules_helper_gets_no_second_update(tmp_path, monkeypatch, imports, helper,
                                                                          beside):
    """AMP010 added `scaler.update()` after `after_step()`, which updates: `No inf checks were recorded prior to
    update` (measured)."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "train.py").write_text(UNREAD_UPDATE.format(imports=imports, helper=helper))
    if beside:
        (tmp_path / "shared_state.py").write_text(SHARED_STATE)
    result = invoke(tmp_path, ["check", "--no-cache", "--diff", "--unsafe-fixes", "."], monkeypatch)
    assert "scaler.update()" not in result.stdout


# 13. An fp32 island that writes into the low value with `out=`: `.float()` there would write into a copy ------------

@pytest.mark.parametrize("write", ["torch.add(h, 1.0, out=h)", "torch.mul(h, 0.5, out=h)",
                                   "torch.clamp(h, -1.0, 1.0, out=h)"])
def test_an_out_argument_is_an_in_place_write_and_gets_no_cast(write):
    text = ("import torch\nfrom torch import nn\nlin = nn.Linear(8, 8)\nx = torch.randn(4, 8)\n"
            "with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):\n    h = lin(x)\n"
            f"    with torch.autocast('cpu', enabled=False):\n        {write}\n        total = h.sum()\n")
    fixed = fixed_is_final(text)
    assert "out=h.float()" not in fixed and fixed == text  # the finding stays, with the advice to cast before
    assert "AMP006" in [d.code for d in run_text(text).diagnostics]


# 14. `dir()` reads a function's local names as `locals()` does: AMP005 may not remove a scaler it lists ------------

def test_a_scaler_listed_by_dir_is_not_removed():
    text = ('import torch\nfrom torch import nn\nmodel = nn.Linear(8, 2)\n\n\n@torch.no_grad()\ndef evaluate(x):\n'
            '    scaler = torch.amp.GradScaler("cpu")\n    model.eval()\n    assert "scaler" in dir()\n'
            '    return model(x).sum().item()\n')
    assert fixed_is_final(text) == text  # the removal made the assertion fail (measured: AssertionError)


# 15. A name the scaler's construction reads that a function rebinds through `global`: no hoist -------------------

def test_a_construction_reading_a_global_a_called_function_rebinds_is_not_hoisted():
    text = ('import torch\ninit = 2.0**10\n\n\ndef bump():\n    global init\n    init *= 4\n\n\n'
            'def train(model, loader, optimizer):\n    for epoch in range(2):\n        bump()\n'
            '        scaler = torch.amp.GradScaler("cpu", init_scale=init)\n        for x in loader:\n'
            '            scaler.scale(model(x).sum()).backward()\n            scaler.step(optimizer)\n'
            '            scaler.update()\n')
    # hoisted, it read `init` before `bump()`: the scales measured were [1024, 1024] instead of [4096, 16384]
    assert fixed_is_final(text) == text


def test_a_construction_reading_a_module_attribute_the_loop_may_rebind_is_not_hoisted(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()
    (tmp_path / "cfg.py").write_text("init = 2.0**10\n\n\ndef bump():\n    global init\n    init *= 4\n")
    text = ('import torch\nimport cfg\n\n\ndef train(model, loader, optimizer):\n    for epoch in range(2):\n'
            '        cfg.bump()\n        scaler = torch.amp.GradScaler("cpu", init_scale=cfg.init)\n'
            '        for x in loader:\n            scaler.scale(model(x).sum()).backward()\n'
            '            scaler.step(optimizer)\n            scaler.update()\n')
    (tmp_path / "train.py").write_text(text)
    result = invoke(tmp_path, ["check", "--no-cache", "--diff", "."], monkeypatch)
    assert "GradScaler" not in result.stdout  # measured hoisted: [1024, 1024] instead of [4096, 16384]
