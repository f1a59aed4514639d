"""Edge cases of input and fixes: extended attributes kept by `--fix`, a configuration file
with a BOM or broken TOML, form feeds in indentation, NFKC identifiers, long `elif` chains, large files, fixes
that would remove a binding another fix reads. Each test failed before its fix."""

from __future__ import annotations

import os
import re
import textwrap
from pathlib import Path

import pytest

from amplint.engine import lint_text
from amplint.fixer import fix_text
from amplint.rules import ALL_RULES
from samples import FLAGGED, invoke_in


def rules():
    return [rule() for rule in ALL_RULES]


def check(args, cwd: Path):
    return invoke_in(cwd, ["check", "--no-cache", *args])


# Extended attributes --------------------------------------------------------------------------------------------

def test_fix_keeps_extended_attributes(tmp_path):
    path = tmp_path / "flagged.py"
    path.write_text(FLAGGED)
    if not hasattr(os, "setxattr"):
        pytest.skip("no extended attributes on this platform")
    try:
        os.setxattr(path, "user.amplint-test", b"kept")
        os.setxattr(path, "user.second", b"\x00\xff")
    except OSError as error:
        pytest.skip(f"the file system under tmp_path refuses user.* attributes: {error}")
    inode = os.stat(path).st_ino
    result = check(["--fix", "flagged.py"], tmp_path)
    assert result.exit_code == 0, result.output
    assert path.read_text() != FLAGGED
    assert os.getxattr(path, "user.amplint-test") == b"kept"
    assert os.getxattr(path, "user.second") == b"\x00\xff"
    assert not list(tmp_path.glob(".amplint-*"))


def test_extended_attributes_that_cannot_be_copied_make_an_in_place_write(tmp_path, monkeypatch):
    """Where the temporary file refuses an attribute, the file is written through its own inode."""
    import amplint.source

    path = tmp_path / "flagged.py"
    path.write_text(FLAGGED)
    try:
        os.setxattr(path, "user.amplint-test", b"kept")
    except (OSError, AttributeError) as error:
        pytest.skip(f"the file system under tmp_path refuses user.* attributes: {error}")
    inode = os.stat(path).st_ino

    def refuse(*args, **kwargs):
        raise PermissionError(1, "refused")

    monkeypatch.setattr(amplint.source.os, "setxattr", refuse)
    result = check(["--fix", "flagged.py"], tmp_path)
    assert result.exit_code == 0, result.output
    assert path.read_text() != FLAGGED
    assert os.stat(path).st_ino == inode
    assert os.getxattr(path, "user.amplint-test") == b"kept"
    assert not list(tmp_path.glob(".amplint-*"))


# Configuration files --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["pyproject.toml", "amplint.toml"])
def test_a_configuration_file_with_a_bom_is_read(tmp_path, name):
    (tmp_path / "flagged.py").write_text(FLAGGED)
    table = "[tool.amplint]\n" if name == "pyproject.toml" else ""
    (tmp_path / name).write_bytes(b"\xef\xbb\xbf" + f'{table}select = ["AMP002"]\n'.encode())
    result = check(["--output-format", "concise", "flagged.py"], tmp_path)
    assert "invalid TOML" not in result.stderr and "skipped" not in result.stderr
    assert result.exit_code == 0, result.output  # the file's AMP001 is not selected
    assert "AMP001" not in result.stdout


def test_invalid_toml_in_a_pyproject_with_an_amplint_table_is_an_error_naming_line_and_column(tmp_path):
    (tmp_path / "flagged.py").write_text(FLAGGED)
    (tmp_path / "pyproject.toml").write_bytes(b"\xef\xbb\xbf[tool.amplint]\nselect = [\"AMP002\"\nx = = 1\n")
    result = check(["flagged.py"], tmp_path)
    assert result.exit_code == 2
    assert "pyproject.toml" in result.stderr and "line 3" in result.stderr and "column" in result.stderr
    assert "Traceback" not in result.output


# Form feeds and NFKC identifiers, as CPython's tokenizer reads them -------------------------------------------

REGION = textwrap.dedent("""\
    import torch

    def train(model, x, optimizer):
        with torch.autocast("cuda"):
            loss = model(x).sum()
            loss.backward()
        optimizer.step()
""")


@pytest.mark.parametrize("text, row, column", [
    (REGION.replace("    with", "\x0c    with"), 6, 9),  # a form feed opening a block's first line
    (REGION.replace("    with", "  \x0c    with"), 6, 9),  # spaces before it do not count (CPython resets)
    (REGION.replace("        loss.backward", "\x0c        loss.backward"), 6, 10),
    (REGION.replace("\ndef", "\x0c\ndef"), 6, 9),  # a page break on a line of its own
])
def test_form_feeds_in_indentation_are_read_as_cpython_reads_them(text, row, column):
    compile(text, "ff.py", "exec")
    found = lint_text(text, "ff.py", rules()).diagnostics
    assert [(d.code, d.location.row, d.location.column) for d in found] == [("AMP001", row, column)]
    assert found[0].source_line == re.split(r"\r\n|\r|\n", text)[row - 1]  # (str.splitlines splits at \x0c)
    fixed = fix_text(text, "ff.py", rules())
    compile(fixed.text, "ff.py", "exec")
    assert "\x0c" in fixed.text  # a fix never drops the page break


@pytest.mark.parametrize("text, codes", [
    (REGION.replace("with torch.autocast", "with \uff54\uff4f\uff52\uff43\uff48.autocast"), ["AMP001"]),  # full-width
    (REGION.replace("loss.backward", "\uff4c\uff4f\uff53\uff53.backward"), ["AMP001"]),
    (REGION.replace("with torch.autocast", "with torch.\U0001d41a\U0001d42e\U0001d42d\U0001d428cast"), ["AMP001"]),
    (REGION.replace("with torch.autocast", "with t\u043erch.autocast"), []),  # Cyrillic o: another name to Python
    (REGION.replace("with torch.autocast", "with torch.aut\u043ecast"), []),
])
def test_identifiers_are_compared_as_python_reads_them(text, codes):
    compile(text, "nfkc.py", "exec")  # every case is valid Python
    found = lint_text(text, "nfkc.py", rules()).diagnostics
    assert [d.code for d in found] == codes


def test_a_full_width_region_is_found_from_the_command_line(tmp_path):
    (tmp_path / "wide.py").write_text(REGION.replace("torch.autocast", "\uff54\uff4f\uff52\uff43\uff48.autocast"))
    result = check(["--output-format", "concise", "wide.py"], tmp_path)
    assert result.exit_code == 1 and "AMP001" in result.stdout


# Long elif chains -----------------------------------------------------------------------------------------------

def elif_chain(branches: int) -> str:
    lines = ["import torch", "", "def train(model, x, k):", "    if k == 0:", "        pass"]
    for number in range(1, branches):
        lines += [f"    elif k == {number}:", "        pass"]
    return "\n".join([*lines, "    else:", "        with torch.autocast('cuda'):", "            loss = model(x).sum()",
                      "            loss.backward()", ""])


def test_a_600_branch_elif_chain_is_analysed_and_fixed():
    text = elif_chain(600)
    compile(text, "chain.py", "exec")
    [finding] = lint_text(text, "chain.py", rules()).diagnostics
    assert (finding.code, finding.location.row) == ("AMP001", 2 * 600 + 7)
    fixed = fix_text(text, "chain.py", rules())
    assert fixed.applied and not fixed.remaining
    compile(fixed.text, "chain.py", "exec")


def test_the_nesting_guard_counts_elif_chains():
    """What libcst's parser recurses on: a chain of 2,500 `elif`s (a native crash with a 1 MB stack from about
    1,000) is refused as too deep (AMP901), never a crash or an internal error."""
    from amplint.parsing import MAX_NESTING, nesting

    assert nesting(elif_chain(2500)).depth > MAX_NESTING >= nesting(elif_chain(1000)).depth >= 999
    [refused] = lint_text(elif_chain(2500), "chain.py", rules()).diagnostics
    assert refused.code == "AMP901" and "too deeply nested" in refused.message


# Fix rounds verify the program they write -----------------------------------------------------------------------

def training_program(dtype: str, backward: str, clip: bool, step: str, inside: bool) -> str:
    """A CPU training loop with a GradScaler; the switches make it raise AMP013 (bfloat16: a needless scaler),
    AMP009 (an unscaled backward with a scaler's step), AMP008 (a step bypassing the scaler), AMP003 (a clip
    before unscaling) and AMP001 (the backward in the region), alone or together."""
    backward_line = "loss.backward()" if backward == "plain" else "scaler.scale(loss).backward()"
    body = ['    scaler = torch.amp.GradScaler("cpu")', "    for x in data:", "        optimizer.zero_grad()",
            f'        with torch.autocast("cpu", dtype=torch.{dtype}):', "            loss = model(x).sum()",
            ("            " if inside else "        ") + backward_line]
    if clip:
        body.append("        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)")
    body += ["        " + ("optimizer.step()" if step == "plain" else "scaler.step(optimizer)"), "        scaler.update()"]
    return ("import torch\n\n\ndef train(model, optimizer, data):\n" + "\n".join(body) + "\n\n\n"
            "model = torch.nn.Linear(4, 1)\n"
            "train(model, torch.optim.SGD(model.parameters(), lr=0.1), [torch.randn(2, 4) for _ in range(2)])\n")


def test_fixes_of_two_and_three_rules_together_write_programs_that_run(tmp_path):
    """Every combination, fixed with and without unsafe fixes, compiles and runs with CPU torch as far as the
    original did (one child process runs them all), never a NameError; the combinations cover two and three rules'
    fixes on one program."""
    import itertools
    import json
    import subprocess
    import sys

    programs, sizes = {}, set()
    for number, switches in enumerate(itertools.product(["bfloat16", "float16"], ["plain", "scaled"], [False, True],
                                                         ["plain", "scaler"], [False, True])):
        text = training_program(*switches)
        found = {d.code for d in lint_text(text, "train.py", rules()).diagnostics if d.fix is not None}
        for unsafe in (False, True):
            fixed = fix_text(text, "train.py", rules(), unsafe=unsafe)
            compile(fixed.text, "train.py", "exec")
            if fixed.applied:
                sizes.add(len({d.code for d in fixed.applied} | (found if unsafe else set())))
                programs[f"{number}-{unsafe}"] = fixed.text
                programs[f"{number}-original"] = text
    assert {2, 3} <= sizes  # two and three rules' fixes on one program
    (tmp_path / "programs.json").write_text(json.dumps(programs))
    runner = ("import json, sys, traceback\n"
              "failed = {}\n"
              "for name, text in json.load(open(sys.argv[1])).items():\n"
              "    try:\n"
              "        exec(compile(text, name, 'exec'), {'__name__': '__main__'})\n"
              "    except Exception:\n"
              "        failed[name] = traceback.format_exc(limit=1).splitlines()[-1]\n"
              "print(json.dumps(failed))\n")
    pytest.importorskip("torch")
    done = subprocess.run([sys.executable, "-c", runner, str(tmp_path / "programs.json")], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    failed = json.loads(done.stdout.splitlines()[-1])
    assert not [error for error in failed.values() if error.startswith(("NameError", "UnboundLocalError"))], failed
    broken = [name for name in failed if not name.endswith("original") and name.split("-")[0] + "-original" not in failed]
    assert not broken, failed  # a program that ran before its fixes runs after them


def test_a_fix_that_reads_a_binding_another_fix_removes_is_dropped_naming_both():
    text = training_program("bfloat16", "plain", False, "scaler", False)
    fixed = fix_text(text, "train.py", rules(), unsafe=True)
    assert "scaler" not in fixed.text.split("def train", 1)[1]
    assert "AMP009" in fixed.error and "AMP013" in fixed.error and "`scaler`" in fixed.error
    assert not fixed.remaining


def test_the_scope_check_guards_safe_fixes(monkeypatch):
    """A safe fix whose edit removes a binding the program still reads is refused, whatever the rule built."""
    from amplint import fixer

    text = "def f(loader):\n    n = 1\n    for x in loader:\n        pass\n    return n\n"
    assert fixer.unbound_names(text) == set()
    removed = text.replace("    n = 1\n", "")
    assert fixer.unbound_names(removed) == {("top.f", "n")}
    judge = fixer._Judge(text, "f.py")
    assert judge.lost_bindings(removed) == ["n"] and judge.lost_bindings(text) == []


def test_many_short_elif_chains_are_not_one_long_one():
    """Separate `if`/`elif` statements do not add up: a module of 3,000 functions with one `elif` each nests no
    deeper than one of them (it was refused as too deeply nested), while chains inside an `elif`'s body add to the
    chain around them (in an `else:` body too), and an `elif` in a string counts for nothing."""
    from amplint.parsing import MAX_NESTING, nesting

    function = "def f{0}(k):\n    if k == 1:\n        return 1\n    elif k == 2:\n        return 2\n    return {0}\n\n"
    many = "import torch\n\n" + "".join(function.format(number) for number in range(3000))
    compile(many, "many.py", "exec")
    assert nesting(many).depth < 10
    inner = "    if c:\n        pass\n" + "".join(f"    elif c == {n}:\n        pass\n" for n in range(7))
    nested = "if a:\n    pass\n" + "".join(f"elif a == {n}:\n    pass\n" for n in range(6)) + "else:\n" + inner
    nested_in_elif = nested.replace("else:\n", "elif b:\n")
    compile(nested_in_elif, "nested.py", "exec")
    assert nesting(nested).depth == 13 and nesting(nested_in_elif).depth == 14
    assert nesting('x = """\n' + "elif\n" * 3000 + '"""\n').depth < 10
    assert MAX_NESTING < nesting(elif_chain(2500)).depth


# Large files ----------------------------------------------------------------------------------------------------

def helpers(count: int) -> str:
    return "".join(f"def helper_{n}(values):\n    return [v * {n} for v in values if v]\n\n\n" for n in range(count))


def test_a_file_too_large_to_parse_is_amp901_with_the_reason_and_never_parsed(monkeypatch):
    """Past `MAX_PARSED_CHARS` (lowered here) the text is not parsed, by libcst or by `ast`: the engine reports
    AMP901 saying why, the index leaves the file out; below it the same code is analysed as ever."""
    import ast as stdlib_ast

    from amplint import parsing
    from amplint.index.functions import index_text
    from amplint.pipeline import process_text

    text = FLAGGED + helpers(400)
    assert [d.code for d in lint_text(text, "big.py", rules()).diagnostics] == ["AMP001"]
    assert index_text(text) is not None
    monkeypatch.setattr(parsing, "MAX_PARSED_CHARS", len(text) - 1)

    def refusing(parse):
        def parse_unless_this_text(source, *args, **kwargs):
            if isinstance(source, str) and source.startswith(FLAGGED) and len(source) > 10 * len(FLAGGED):
                raise AssertionError("a text over the size bound was parsed")
            return parse(source, *args, **kwargs)
        return parse_unless_this_text

    monkeypatch.setattr(stdlib_ast, "parse", refusing(stdlib_ast.parse))
    monkeypatch.setattr(parsing.cst, "parse_module", refusing(parsing.cst.parse_module))
    [finding] = lint_text(text, "big.py", rules()).diagnostics
    assert finding.code == "AMP901" and "too large to analyse" in finding.message
    assert f"{len(text):,} characters" in finding.message and f"{len(text) - 1:,}" in finding.message
    assert index_text(text) is None
    assert [d.code for d in process_text(text, "big.py", rules()).diagnostics] == ["AMP901"]
    assert process_text(helpers(400), "plain.py", rules()).diagnostics == []  # no AMP word: skipped, not parsed
    fixed = fix_text(text, "big.py", rules())
    assert fixed.text == text and not fixed.applied


def test_a_file_over_the_real_bound_is_refused_from_the_command_line(tmp_path):
    """A file past 2 MiB with `max-file-size` raised: AMP901 naming the size, the run goes on with the others."""
    from amplint.parsing import MAX_PARSED_CHARS

    text = FLAGGED + helpers(MAX_PARSED_CHARS // 60 + 1)
    assert len(text) > MAX_PARSED_CHARS
    (tmp_path / "big.py").write_text(text)
    (tmp_path / "small.py").write_text(FLAGGED)
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\nmax-file-size = 100000000\n")
    result = check(["--output-format", "concise", "."], tmp_path)
    assert result.exit_code == 1, result.output
    assert "big.py:1:1: AMP901 too large to analyse" in result.stdout and "small.py:6:9: AMP001" in result.stdout
