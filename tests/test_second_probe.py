"""What a second probe of bad input broke (issue 28): extended attributes kept by `--fix`, a configuration file
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
