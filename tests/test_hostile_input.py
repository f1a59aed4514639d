"""Hostile input: special files, oversized files, expressions nested deeper than a parser or a walk can follow.
Each such file gets a diagnostic of its own (AMP901, AMP900) and every other file its results; nothing hangs,
nothing crashes the run (issue "Never lose data, never hang, never crash the run", items 6-8)."""

from __future__ import annotations

import os
import re
import threading

import pytest

from amplint.config import ConfigError, Settings, settings_from_table
from amplint.parallel import lint_paths
from amplint.rules import ALL_RULES
from amplint.outcome import Mode
from amplint import source
from amplint.source import SourceError, read_bytes

# A real finding (AMP001: backward inside an enabled autocast region), on line 3.
FINDING = 'import torch\nwith torch.autocast("cuda"):\n    loss.backward()\n'


def lint(paths, settings: Settings | None = None) -> dict[str, list[tuple[str, str]]]:
    """path -> [(code, message)] of a serial run (the run the LSP and pre-commit's single files make)."""
    outcomes = lint_paths([str(path) for path in paths], ALL_RULES, settings or Settings(), Mode(), jobs=1)
    return {outcome.path: [(d.code, d.message) for d in outcome.diagnostics] for outcome in outcomes}


# Special files (item 8) ----------------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_named_like_a_source_is_refused_without_blocking(tmp_path):
    """A FIFO named `x.py` (nothing writes to it): reading it would block the run forever. It is AMP901 "not a
    regular file" and the file beside it gets its finding. (The join's timeout only detects the hang: on a
    reader that opens the FIFO, the test then unblocks it by opening the FIFO's other end.)"""
    fifo = tmp_path / "x.py"
    os.mkfifo(fifo)
    real = tmp_path / "real.py"
    real.write_text(FINDING)
    found: dict = {}
    worker = threading.Thread(target=lambda: found.update(lint([fifo, real], Settings(root=tmp_path))), daemon=True)
    worker.start()
    worker.join(timeout=600)  # a guard against the hang, generous for a loaded machine
    if worker.is_alive():  # blocked reading the FIFO: release it, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(timeout=30)
        pytest.fail("reading a FIFO blocked the run")
    assert found[str(fifo)] == [("AMP901", "not a regular file (a FIFO); not read")]
    assert [code for code, _ in found[str(real)]] == ["AMP001"]


@pytest.mark.skipif(not os.path.exists("/dev/null") or not hasattr(os, "symlink"), reason="no /dev/null")
def test_a_link_to_a_device_is_refused(tmp_path):
    """`z.py` -> /dev/zero would be read until memory runs out; any device is refused before it is read (the
    test uses /dev/null, which ends: read, it would be an empty, clean file)."""
    link = tmp_path / "z.py"
    link.symlink_to("/dev/null")
    notebook = tmp_path / "z.ipynb"  # notebooks are read the same way
    notebook.symlink_to("/dev/null")
    refused = [("AMP901", "not a regular file (a character device); not read")]
    assert lint([link, notebook], Settings(root=tmp_path)) == {str(link): refused, str(notebook): refused}


def test_read_bytes_refuses_what_is_not_a_regular_file(tmp_path):
    with pytest.raises(SourceError, match=r"not a regular file \(a folder\)"):
        read_bytes(str(tmp_path))
    with pytest.raises(SourceError, match="cannot read"):
        read_bytes(str(tmp_path / "missing.py"))


# Size cap (item 8) ---------------------------------------------------------------------------------------------


def test_a_file_over_max_file_size_is_refused_and_the_others_are_linted(tmp_path):
    big = tmp_path / "big.py"
    big.write_text("x = 1\n" * 20)  # 120 bytes
    exact = tmp_path / "exact.py"
    exact.write_text(FINDING + " " * (100 - len(FINDING) - 1) + "\n")  # 100 bytes: at the cap, read
    settings = settings_from_table({"max-file-size": 100}, tmp_path / "amplint.toml")
    found = lint([big, exact], settings)
    assert found[str(big)] == [("AMP901", "larger than `max-file-size` (100 bytes); not read "
                                          "(raise `max-file-size` to lint it)")]
    assert [code for code, _ in found[str(exact)]] == ["AMP001"]


def test_read_bytes_reads_at_most_one_byte_past_the_cap(tmp_path, monkeypatch):
    """A file that grows past the cap after its size was checked is refused too, and no more than cap + 1 bytes
    of it are read (the size checks are skipped here, as if the file grew after them)."""
    path = tmp_path / "grown.py"
    path.write_bytes(b"#" * 1000)
    monkeypatch.setattr(source, "_check_regular", lambda info, max_size: None)
    read = []
    real_read = os.read

    def watched_read(descriptor: int, size: int) -> bytes:
        data = real_read(descriptor, size)
        read.append(len(data))
        return data

    monkeypatch.setattr(os, "read", watched_read)
    with pytest.raises(SourceError, match=r"larger than `max-file-size` \(100 bytes\)"):
        read_bytes(str(path), 100)
    assert sum(read) == 101


@pytest.mark.parametrize("value", [0, -1, True, "10MB", 1.5])
def test_max_file_size_must_be_a_positive_integer(tmp_path, value):
    with pytest.raises(ConfigError, match="`max-file-size` must be a positive integer"):
        settings_from_table({"max-file-size": value}, tmp_path / "amplint.toml")


def test_max_file_size_has_a_default():
    assert Settings().max_file_size == 10 * 1024 * 1024


# Deep expressions (items 6 and 7) ------------------------------------------------------------------------------

# In a child process: on a text this deep libcst's native parser overflows its stack and the process dies.
_DEEP_RUN = r"""
import json, sys
from amplint.engine import lint_text
from amplint.parallel import lint_paths
from amplint.config import Settings
from amplint.rules import ALL_RULES
from amplint.outcome import Mode
rules = [rule() for rule in ALL_RULES]
texts = {"parens": "x = " + "(" * 2000 + "a" + ")" * 2000 + "\n",  # libcst dies at 1,500
         "sum": "import torch\n" + "x = " + "+".join(["a"] * 8000) + "\n"}  # libcst dies at 8,000
found = {name: [(d.code, d.message, d.location.row) for d in lint_text(text, name, rules).diagnostics]
         for name, text in texts.items()}
outcomes = lint_paths(sys.argv[1:], ALL_RULES, Settings(), Mode(), jobs=1)
found["run"] = {o.path: [(d.code, d.message, d.location.row) for d in o.diagnostics] for o in outcomes}
print(json.dumps(found))
"""


def test_a_file_nested_deeper_than_libcst_survives_is_refused_and_the_run_goes_on(tmp_path):
    """The engine (as a serial run and the LSP call it) never hands libcst a text it would die on: such a file is
    AMP901 "too deeply nested to analyse", at the deep statement, and the other files get their results."""
    import json
    import subprocess
    import sys

    deep = tmp_path / "deep.py"
    deep.write_text(FINDING + "x = " + "f(" * 2000 + "a" + ")" * 2000 + "\n")  # AMP code: not screened out
    real = tmp_path / "real.py"
    real.write_text(FINDING)
    child = subprocess.run([sys.executable, "-c", _DEEP_RUN, str(deep), str(real)], capture_output=True, text=True)
    assert child.returncode == 0, f"the process died ({child.returncode}): {child.stderr[-2000:]}"
    found = json.loads(child.stdout)
    assert found["parens"] == [["AMP901", "too deeply nested to analyse (depth 14,000, limit 2,000)", 1]]
    assert found["sum"] == [["AMP901", "too deeply nested to analyse (depth 7,999, limit 2,000)", 2]]
    assert found["run"][str(deep)] == [["AMP901", "too deeply nested to analyse (depth 14,000, limit 2,000)", 4]]
    assert [code for code, _, _ in found["run"][str(real)]] == ["AMP001"]


DEEP_BESIDE_A_FINDING = {  # item 7: each beyond Python's default recursion limit for a recursive walk
    "500-term sum": "x = " + " + ".join(["a"] * 500) + "\n",
    "2,000 adjacent strings": "x = " + " ".join(['"a"'] * 2000) + "\n",
    "1,000 and-terms": "x = " + " and ".join(["a"] * 1000) + "\n",
    "a 600-deep method chain": "x = a" + ".b()" * 600 + "\n",
}


@pytest.mark.parametrize("construct", list(DEEP_BESIDE_A_FINDING))
@pytest.mark.parametrize("before", [True, False], ids=["deep-first", "finding-first"])
def test_a_deep_expression_does_not_hide_the_files_finding(construct, before):
    """No recursion limit in amplint's walks, and room enough for libcst's recursive code generation: the file
    gets its real finding, and its fix, as if the deep expression were not there."""
    from amplint.engine import lint_text
    from amplint.fixer import fix_text

    deep = DEEP_BESIDE_A_FINDING[construct]
    text = deep + FINDING if before else FINDING + deep
    rules = [rule() for rule in ALL_RULES]
    found = lint_text(text, "deep.py", rules).diagnostics
    assert [(d.code, d.location.row) for d in found] == [("AMP001", 4 if before else 3)]
    fixed = fix_text(text, "deep.py", rules)
    assert len(fixed.applied) == 1 and not fixed.remaining and deep in fixed.text
    assert "loss.backward()\n" in fixed.text and "    loss.backward()" not in fixed.text


def test_the_walk_does_not_recurse():
    """amplint's walk visits a tree thousands of levels deep under Python's default recursion limit (libcst's
    own `visit` would need three frames a level)."""
    import sys

    import libcst as cst

    from amplint.facts.walk import walk

    module = cst.parse_module("x = " + " + ".join(["a"] * 1500) + "\n")

    class Counter(cst.CSTVisitor):
        names = 0

        def visit_Name(self, node) -> None:
            Counter.names += 1

    assert sys.getrecursionlimit() <= 1000 * 2
    walk(module, Counter())
    assert Counter.names == 1501


# Mixed newlines (item 18) --------------------------------------------------------------------------------------

MIXED = 'import torch\r\nwith torch.autocast("cuda"):\r    x = 1\n    loss.backward()\r\n'


def test_mixed_newlines_are_lines_of_their_own():
    """`\\r`, `\\r\\n` and `\\n` each end a line, for the finding's line and its `# noqa` as for Python."""
    from amplint.engine import lint_text

    rules = [rule() for rule in ALL_RULES]
    [finding] = lint_text(MIXED, "mixed.py", rules).diagnostics
    assert (finding.code, finding.location.row, finding.location.column) == ("AMP001", 4, 5)
    assert finding.source_line == "    loss.backward()"
    assert [(edit.location.row, edit.end_location.row) for edit in finding.fix.edits] == [(4, 5)]  # Python's too
    quiet = MIXED.replace("loss.backward()", "loss.backward()  # noqa: AMP001")
    assert lint_text(quiet, "mixed.py", rules).diagnostics == []


def test_mixed_newlines_fix_keeps_every_newline_byte():
    from amplint.fixer import fix_text

    fixed = fix_text(MIXED, "mixed.py", [rule() for rule in ALL_RULES])
    assert fixed.text == 'import torch\r\nwith torch.autocast("cuda"):\r    x = 1\nloss.backward()\r\n'


def test_mixed_newlines_that_libcst_refuses_are_analysed(monkeypatch):
    """libcst 1.0 refuses some files with mixed newlines that CPython compiles ("Found newline ... but it's not
    EOL"; simulated here): they are analysed with uniform newlines (rows and columns are the same), never reported
    as a syntax error, and their fixes are offered, mapped back with each line keeping its own line break."""
    import libcst as cst

    from amplint import engine

    real_parse = engine.parse

    def old_libcst(text):
        if len(set(re.findall(r"\r\n|\r|\n", text))) > 1:
            cst.parse_module("(")  # raises libcst's ParserSyntaxError
        return real_parse(text)

    monkeypatch.setattr(engine, "parse", old_libcst)
    [finding] = engine.lint_text(MIXED, "mixed.py", [rule() for rule in ALL_RULES]).diagnostics
    assert (finding.code, finding.location.row, finding.source_line) == ("AMP001", 4, "    loss.backward()")
    assert finding.fix is not None
    from amplint.fixer import fix_text

    fixed = fix_text(MIXED, "mixed.py", [rule() for rule in ALL_RULES])
    assert fixed.text == 'import torch\r\nwith torch.autocast("cuda"):\r    x = 1\nloss.backward()\r\n'
    longer = 'import torch\r\nwith torch.autocast("cuda"):\r    x = 1\n    loss.backward()\r    y = 2\n'
    fixed = fix_text(longer, "mixed.py", [rule() for rule in ALL_RULES])
    assert fixed.text == 'import torch\r\nwith torch.autocast("cuda"):\r    x = 1\nloss.backward()\ry = 2\n'
    broken = MIXED.replace("x = 1", "x = (")
    assert [d.code for d in engine.lint_text(broken, "mixed.py", []).diagnostics] == ["AMP900"]


# Configuration and declaration files -----------------------------------------------------------------------------
# One of them must neither block the run (a FIFO an `-r` names), nor exhaust its memory (`/dev/zero`), nor read its
# input (`/dev/stdin`), nor stop every run of its folder (a table nested deeper than tomllib recurses).

DEEP_TOML = "[tool.other]\nx = " + "[" * 3000 + "]" * 3000 + "\n"


def _floor(folder) -> str | None:
    from amplint.requirements import declared_torch

    floor = declared_torch(folder).floor
    return floor.text if floor is not None else None


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_requirements_include_naming_a_fifo_is_not_read(tmp_path):
    os.mkfifo(tmp_path / "pipe.txt")
    (tmp_path / "requirements.txt").write_text("-r pipe.txt\ntorch>=2.1\n")
    found: list = []
    worker = threading.Thread(target=lambda: found.append(_floor(tmp_path)), daemon=True)
    worker.start()
    worker.join(timeout=600)  # a guard against the hang only
    if worker.is_alive():
        os.close(os.open(tmp_path / "pipe.txt", os.O_WRONLY | os.O_NONBLOCK))
        worker.join(timeout=30)
        pytest.fail("an -r include naming a FIFO blocked the run")
    assert found == ["torch>=2.1"]


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/stdin", "/dev/null"])
def test_a_requirements_include_naming_a_device_is_not_read(tmp_path, device, monkeypatch):
    if not os.path.exists(device):
        pytest.skip(f"no {device}")
    read = []
    real = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: read.append(n) or real(fd, n))
    (tmp_path / "requirements.txt").write_text(f"-r {device}\ntorch>=2.2\n")
    assert _floor(tmp_path) == "torch>=2.2"
    assert len(read) <= 2  # the requirements file itself (and its end), never the device


def test_a_requirements_file_over_the_limit_is_not_read(tmp_path):
    from amplint.requirements import MAX_DECLARATION_BYTES

    (tmp_path / "requirements.txt").write_text("torch>=2.1\n" + "#" * MAX_DECLARATION_BYTES + "\n")
    (tmp_path / "requirements-dev.txt").write_text("torch>=2.3\n")
    assert _floor(tmp_path) == "torch>=2.3"


def test_a_deeply_nested_foreign_table_in_pyproject_is_skipped(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from amplint.cli import main

    (tmp_path / "pyproject.toml").write_text(DEEP_TOML + '[project]\ndependencies = ["torch>=2.1"]\n')
    (tmp_path / "train.py").write_text(FINDING)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["check", "train.py", "--output-format", "concise"])
    assert result.exit_code == 1, result.output
    assert "AMP001" in result.stdout and "internal error" not in result.output
    assert "nested too deeply" in result.stderr and "skipped" in result.stderr


def test_a_deeply_nested_table_beside_amplints_own_is_a_clear_error(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from amplint.cli import main

    (tmp_path / "pyproject.toml").write_text('[tool.amplint]\nselect = ["AMP001"]\n' + DEEP_TOML)
    (tmp_path / "train.py").write_text(FINDING)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["check", "train.py"])
    assert result.exit_code == 2
    assert "pyproject.toml: invalid TOML: arrays or inline tables nested too deeply" in result.stderr
    assert "internal error" not in result.output and "Traceback" not in result.output


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_configuration_that_is_not_a_regular_file_is_refused(tmp_path):
    from amplint.requirements import TomlProblem, read_toml

    os.mkfifo(tmp_path / "amplint.toml")
    with pytest.raises(TomlProblem, match="not a regular file"):
        read_toml(tmp_path / "amplint.toml")
