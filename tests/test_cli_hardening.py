"""Bad input at the command line: odd file names, unreadable and missing paths, empty selections, wrong config
types, file errors under --diff/--fix-only, and what `--fix` says it fixed. Each test failed before its fix."""

from __future__ import annotations

import builtins
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import amplint.source
from amplint.config import KEYS, ConfigError, load_settings, settings_from_table
from amplint.output import FORMAT_NAMES, Report, render
from test_output_formats import validate_sarif
from samples import FLAGGED, as_nobody, invoke_in

# One safe fix (moving backward and step out of the region) takes away two findings, AMP001 and AMP002.
TWO_IN_ONE = textwrap.dedent("""\
    import torch

    def train(model, x):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        with torch.autocast("cuda"):
            loss = model(x).sum()
            loss.backward()
            optimizer.step()
""")
# AMP012 (a half model trained with a GradScaler) has no fix: it remains after --fix.
HALF = textwrap.dedent("""\
    import torch

    def train(model, loader):
        model.half()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        scaler = torch.amp.GradScaler("cuda")
        for x, y in loader:
            with torch.autocast("cuda"):
                loss = torch.nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
""")
UNDECODABLE = b"import torch  # autocast\nx = '\xff\xfe'\n"
NOT_PYTHON = "import torch  # autocast\ndef f(:\n    pass\n"


def run(args, cwd: Path):
    return invoke_in(cwd, ["check", "--no-cache", *args])


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "flagged.py").write_text(FLAGGED)
    return tmp_path


def non_utf8_name(folder: Path) -> Path:
    """A file whose name is the latin-1 bytes `café.py`, where the file system allows such a name."""
    try:
        path = Path(os.fsdecode(os.path.join(os.fsencode(folder), b"caf\xe9.py")))
        path.write_text(FLAGGED)
    except (OSError, UnicodeError) as error:
        pytest.skip(f"this file system refuses names that are not UTF-8: {error}")
    return path


# --- item 10: names that are not UTF-8, in every format -------------------------------------------------------


def assert_valid(format_name: str, text: str) -> None:
    """The report is valid for its format, and encodable as UTF-8 (a lone surrogate is not)."""
    text.encode("utf-8")
    if format_name in ("json", "gitlab", "sarif"):
        log = json.loads(text)
        if format_name == "sarif":
            validate_sarif(log)
    elif format_name == "json-lines":
        for line in text.splitlines():
            json.loads(line)
    elif format_name == "junit":
        ET.fromstring(text.encode("utf-8"))


@pytest.mark.parametrize("format_name", FORMAT_NAMES)
def test_every_format_carries_a_file_name_that_is_not_utf8(project, format_name):
    non_utf8_name(project)
    result = run(["--output-format", format_name, "--output-file", "report.out", "."], project)
    assert result.exit_code == 1, result.output
    text = (project / "report.out").read_text(encoding="utf-8")
    assert_valid(format_name, text)
    if format_name == "sarif":
        uris = [r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
                for r in json.loads(text)["runs"][0]["results"]]
        assert "caf%E9.py" in uris  # the name's exact bytes, percent-encoded
    elif format_name in ("json", "json-lines", "gitlab"):
        assert "caf\\\\xe9.py" in text  # the JSON string `caf\xe9.py`: the byte as an escape
    else:
        assert "caf\\xe9.py" in text
    assert "flagged.py" in text  # and the other file's finding is there too


def test_fingerprints_and_messages_with_names_that_are_not_utf8():
    from amplint.engine import IO_ERROR, error_diagnostic

    name = os.fsdecode(b"caf\xe9.py")
    diagnostic = error_diagnostic(IO_ERROR, name, "cannot read: Permission denied")
    report = Report([diagnostic], messages=[f"{name}: fixes not written: read-only"])
    for format_name in FORMAT_NAMES:
        assert_valid(format_name, render(format_name, report))


# --- item 18 (names): control characters in file names never print raw ----------------------------------------


@pytest.mark.parametrize("format_name", ["full", "concise", "grouped", "github"])
def test_control_characters_in_file_names_are_escaped(project, format_name):
    try:
        (project / "a\nb.py").write_text(FLAGGED)
        (project / "c\x1b[31md.py").write_text(FLAGGED)
    except OSError as error:
        pytest.skip(f"this file system refuses such names: {error}")
    (project / "flagged.py").unlink()
    result = run(["--output-format", format_name, "."], project)
    assert result.exit_code == 1
    assert "\x1b" not in result.stdout
    if format_name == "github":
        lines = result.stdout.splitlines()
        assert len(lines) == 2 and all(line.startswith("::error file=") for line in lines)
        assert "file=a%0Ab.py," in result.stdout  # GitHub decodes %0A back into the real name
        assert "file=c\\x1b[31md.py," in result.stdout
    else:
        assert "a\\nb.py" in result.stdout and "c\\x1b[31md.py" in result.stdout
        assert not any(line in ("a", "b.py:") or line.startswith("b.py") for line in result.stdout.splitlines())


# --- item 14: --diff and --fix-only report the files they could not analyse -----------------------------------


@pytest.fixture
def broken(project: Path) -> Path:
    (project / "undecodable.py").write_bytes(UNDECODABLE)
    (project / "syntax.py").write_text(NOT_PYTHON)
    return project


def test_diff_reports_files_it_could_not_analyse_on_stderr_and_exits_1(broken):
    (broken / "flagged.py").unlink()  # nothing to fix: only the two files that cannot be analysed
    result = run(["--diff", "."], broken)
    assert result.exit_code == 1
    assert result.stdout == ""  # stdout stays a patch
    assert "undecodable.py:1:1: AMP901" in result.stderr
    assert "syntax.py:2:7: AMP900" in result.stderr


def test_diff_with_a_diff_still_names_the_broken_files(broken):
    result = run(["--diff", "."], broken)
    assert result.exit_code == 1
    assert result.stdout.startswith("--- a/flagged.py")
    assert "AMP901" not in result.stdout and "undecodable.py:1:1: AMP901" in result.stderr


def test_fix_only_reports_files_it_could_not_analyse_and_exits_1(broken):
    result = run(["--fix-only", "."], broken)
    assert result.exit_code == 1
    assert "undecodable.py:1:1: AMP901" in result.stderr and "syntax.py:2:7: AMP900" in result.stderr
    assert "Fixed 1 problem." in result.stdout  # flagged.py's AMP001
    assert (broken / "undecodable.py").read_bytes() == UNDECODABLE


def test_fix_only_exits_0_when_every_file_was_analysed(project):
    (project / "half.py").write_text(HALF)  # a finding with no fix remains: --fix-only does not count it
    result = run(["--fix-only", "."], project)
    assert result.exit_code == 0 and result.stderr == ""


@pytest.mark.parametrize("flag", ["--diff", "--fix-only"])
def test_internal_error_under_diff_and_fix_only_is_exit_2(project, monkeypatch, flag):
    def explode(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("amplint.pipeline.fix_text", explode)
    result = run([flag, "flagged.py"], project)
    assert result.exit_code == 2
    assert "flagged.py:1:1: AMP902" in result.stderr and "boom" in result.stderr


# --- item 15: unreadable folders and files are AMP901, a missing path is a usage error ------------------------


def test_a_folder_that_cannot_be_listed_is_reported_and_the_run_goes_on(project, monkeypatch):
    (project / "locked").mkdir()
    (project / "locked" / "hidden.py").write_text(FLAGGED)
    real_scandir = os.scandir

    def scandir(path="."):
        if os.path.basename(os.path.normpath(path)) == "locked":
            raise PermissionError(13, "Permission denied", path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    result = run(["--output-format", "concise", "."], project)
    assert result.exit_code == 1
    assert "locked:1:1: AMP901 cannot list this folder: Permission denied" in result.stdout
    assert "flagged.py:6:9: AMP001" in result.stdout
    assert "hidden.py" not in result.stdout


def test_an_unreadable_file_named_on_the_command_line_is_amp901_and_the_run_goes_on(project, monkeypatch):
    (project / "locked.py").write_text(FLAGGED)
    real_open = builtins.open
    # What the permissions of a non-root user would do (the tests may run as root): click's check, then the read.
    monkeypatch.setattr(os, "access", lambda path, mode, **kwargs: not str(path).endswith("locked.py"))

    real_os_open = os.open

    def fake_open(path, *args, **kwargs):
        if str(path).endswith("locked.py"):
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, *args, **kwargs)

    def fake_os_open(path, *args, **kwargs):
        if str(path).endswith("locked.py"):
            raise PermissionError(13, "Permission denied", path)
        return real_os_open(path, *args, **kwargs)

    monkeypatch.setattr(amplint.source, "open", fake_open, raising=False)
    monkeypatch.setattr(os, "open", fake_os_open)  # files are opened with os.open (amplint/source.py read_bytes)
    result = run(["--output-format", "concise", "locked.py", "flagged.py"], project)
    assert result.exit_code == 1, result.output
    assert "locked.py:1:1: AMP901 cannot read: Permission denied" in result.stdout
    assert "flagged.py:6:9: AMP001" in result.stdout


@pytest.mark.skipif(not hasattr(os, "geteuid") or (os.geteuid() == 0 and not hasattr(os, "fork")),
                    reason="root reads every file and folder: it lints as another user in a forked child")
def test_real_permissions():
    import shutil

    project = Path(tempfile.mkdtemp(prefix="amplint-permissions-"))  # under /tmp: reachable by another user
    try:
        os.chmod(project, 0o755)
        (project / "flagged.py").write_text(FLAGGED)
        (project / "locked").mkdir()
        (project / "locked" / "hidden.py").write_text(FLAGGED)
        (project / "locked.py").write_text(FLAGGED)
        walk = ["--output-format", "concise", "."]
        name = ["--output-format", "concise", "locked.py", "flagged.py"]
        run(walk, project)  # loads every lazily imported module (as root: read, so no AMP901 yet)
        os.chmod(project / "locked", 0)
        os.chmod(project / "locked.py", 0)

        def lint_both():
            return [(result.exit_code, result.stdout) for result in (run(walk, project), run(name, project))]

        (walked, named) = as_nobody(lint_both) if os.geteuid() == 0 else lint_both()
    finally:
        os.chmod(project / "locked", 0o755)
        os.chmod(project / "locked.py", 0o644)
        shutil.rmtree(project)
    assert walked[0] == 1 and "locked:1:1: AMP901" in walked[1] and "locked.py:1:1: AMP901" in walked[1], walked
    assert named[0] == 1 and "locked.py:1:1: AMP901" in named[1] and "flagged.py:6:9" in named[1], named


def test_a_missing_path_is_reported_like_ruff_and_the_rest_is_linted(project):
    result = run(["nope.py", "flagged.py", "gone/", "--output-format", "concise"], project)
    assert result.exit_code == 2
    lines = result.stdout.splitlines()
    assert {"gone/:1:1: AMP901 no such file or directory", "nope.py:1:1: AMP901 no such file or directory"} <= set(lines)
    assert any(line.startswith("flagged.py:6:9: AMP001") for line in lines), lines  # the rest is linted
    assert result.stderr == ""
    only = run(["nope.py", "--output-format", "json"], project)
    assert only.exit_code == 2 and [d["filename"] for d in json.loads(only.stdout)] == ["nope.py"]
    assert run(["nope.py", "flagged.py", "--exit-zero"], project).exit_code == 2
    assert run(["nope.py", "flagged.py", "--diff"], project).exit_code == 2


# --- item 16: an empty selection is an error ------------------------------------------------------------------


@pytest.mark.parametrize("args", [["--select", ""], ["--select", ","], ["--select", " , "],
                                  ["--ignore", "AMP"], ["--select", "AMP001", "--ignore", "AMP001"]])
def test_a_command_line_that_selects_no_rule_is_a_usage_error(project, args):
    result = run([*args, "flagged.py"], project)
    assert result.exit_code == 2
    assert "no rule is selected" in result.stderr


def test_a_configuration_that_selects_no_rule_is_an_error(project):
    (project / "pyproject.toml").write_text("[tool.amplint]\nselect = []\n")
    result = run(["flagged.py"], project)
    assert result.exit_code == 2
    assert "pyproject.toml" in result.stderr and "`select` is empty" in result.stderr


# --- item 17: every key's type, broken files -----------------------------------------------------------------


@pytest.mark.parametrize("config, needle", [
    ('force-exclude = "false"', '`force-exclude` must be true or false, not a string "false"'),
    ("jobs = true", "`jobs` must be a positive integer, not a boolean true"),
    ("jobs = 0", "`jobs` must be a positive integer"),
    ('per-file-ignores = {"*.py" = [5]}', "`per-file-ignores` must be a table of glob = [codes]"),
    ('per-file-ignores = {"*.py" = "AMP001"}', "`per-file-ignores` must be a table of glob = [codes]"),
    ("output-format = 5", "`output-format` must be a string, not an integer 5"),
    ('select = "AMP001"', "`select` must be a list of strings"),
    ("exclude = [1]", "`exclude` must be a list of strings, not an array"),
    ("cache-dir = []", "`cache-dir` must be a string"),
])
def test_a_key_of_the_wrong_type_is_an_error_naming_key_and_file(project, config, needle):
    (project / "pyproject.toml").write_text(f"[tool.amplint]\n{config}\n")
    result = run(["flagged.py"], project)
    assert result.exit_code == 2
    assert needle in result.stderr and "pyproject.toml" in result.stderr
    assert "internal error" not in result.stderr


@pytest.mark.parametrize("table, path, needle", [
    ({"selct": ["AMP001"]}, "pyproject.toml", "unknown key in [tool.amplint]: selct (did you mean `select`?)"),
    ({"extend_select": ["AMP001"], "colour": 1}, "amplint.toml",
     "unknown keys: colour, extend_select (did you mean `extend-select`?) (known: "),
])
def test_an_unknown_key_is_named_with_the_known_key_it_resembles(tmp_path, table, path, needle):
    table_name = "[tool.amplint]" if path == "pyproject.toml" else ""
    with pytest.raises(ConfigError) as raised:
        settings_from_table(table, tmp_path / path, table_name)
    assert needle in str(raised.value)


@pytest.mark.parametrize("key", sorted(KEYS))
def test_every_known_key_checks_its_type(tmp_path, key):
    with pytest.raises(ConfigError, match=f"amplint.toml: `{key}` must be "):
        settings_from_table({key: 1.5}, tmp_path / "amplint.toml")


@pytest.mark.parametrize("text", [b"tool = 5\n", b"[tool]\namplint = 5\n",
                                  b"[tool.amplint]\nselect = ['AMP001']  # caf\xe9\n"])
def test_a_named_config_file_that_is_broken_is_a_configuration_error(project, text):
    (project / "pyproject.toml").write_bytes(text)
    result = run(["--config", "pyproject.toml", "flagged.py"], project)
    assert result.exit_code == 2
    assert "pyproject.toml" in result.stderr and "internal error" not in result.stderr


def test_a_found_pyproject_toml_with_an_amplint_table_that_is_broken_is_an_error(project):
    (project / "pyproject.toml").write_bytes(b"[tool.amplint]\nselect = ['AMP001']  # caf\xe9\n")
    result = run(["flagged.py"], project)
    assert result.exit_code == 2
    assert "not UTF-8" in result.stderr and "internal error" not in result.stderr


@pytest.mark.parametrize("text", [b"[project\nname = 'x'\n", b"tool = 5\n", b"name = 'caf\xe9'\n"])
def test_a_broken_pyproject_toml_that_is_not_amplints_is_skipped_with_a_warning(project, text):
    (project / "sub").mkdir()
    (project / "sub" / "pyproject.toml").write_bytes(text)
    (project / "sub" / "flagged.py").write_text(TWO_IN_ONE)
    (project / "amplint.toml").write_text('select = ["AMP002"]\n')  # the next file up still configures amplint
    result = run(["--output-format", "concise", "flagged.py"], project / "sub")
    assert result.exit_code == 1, result.output
    assert "amplint: warning:" in result.stderr and "pyproject.toml" in result.stderr
    assert "AMP002" in result.stdout and "AMP001" not in result.stdout
    assert load_settings(start=project / "sub").warnings


def test_a_good_configuration_has_no_warnings(project):
    (project / "pyproject.toml").write_text('[tool.amplint]\nforce-exclude = true\njobs = 2\n')
    settings = load_settings(start=project)
    assert settings.force_exclude is True and settings.jobs == 2 and settings.warnings == []


# --- issue 15 item 4: counts that add up ----------------------------------------------------------------------


def test_fix_counts_the_findings_removed_and_reports_what_remains(project):
    (project / "flagged.py").write_text(TWO_IN_ONE)  # one fix, two findings gone
    (project / "half.py").write_text(HALF)  # no fix: remains
    before = run(["--output-format", "concise", "."], project)
    assert "Found 3 errors." in before.stdout
    result = run(["--fix", "--output-format", "concise", "."], project)
    assert result.exit_code == 1
    assert "Found 3 problems (2 fixed, 1 error remaining)." in result.stdout
    assert "half.py:4:5: AMP012" in result.stdout


def test_fix_only_counts_the_findings_removed(project):
    (project / "flagged.py").write_text(TWO_IN_ONE)
    result = run(["--fix-only", "."], project)
    assert result.exit_code == 0 and result.stdout == "Fixed 2 problems.\n"


def test_fix_that_removes_everything_says_so(project):
    (project / "flagged.py").write_text(TWO_IN_ONE)
    result = run(["--fix", "--output-format", "full", "flagged.py"], project)
    assert result.exit_code == 0
    assert result.stdout.strip() == "Found 2 problems (2 fixed, 0 remaining)."


def test_diff_headers_quote_odd_names_as_git_does(project):
    non_utf8_name(project)
    (project / "a\nb.py").write_text(FLAGGED)
    (project / "flagged.py").unlink()
    # A strict UTF-8 stdout, as under a UTF-8 locale: a lone surrogate in a header would end the run.
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    result = subprocess.run([sys.executable, "-m", "amplint", "check", "--no-cache", "--diff", "."], cwd=project,
                            capture_output=True, env=env)
    assert result.returncode == 1, result.stderr
    assert b'--- "a/caf\\351.py"\n+++ "b/caf\\351.py"\n' in result.stdout
    assert b'--- "a/a\\nb.py"\n+++ "b/a\\nb.py"\n' in result.stdout


def test_diff_path_leaves_ordinary_names_alone():
    from amplint.output.common import diff_path

    assert diff_path("a/src/train.py") == "a/src/train.py"
    assert diff_path("a/caf\u00e9.py") == "a/caf\u00e9.py"  # UTF-8 is fine unquoted
    assert diff_path('a/say "hi".py') == '"a/say \\"hi\\".py"'
    assert diff_path("a/x\u202e.py") == '"a/x\\342\\200\\256.py"'  # a bidi override, as its UTF-8 bytes


def test_an_interrupted_run_exits_130_not_click_s_abort(tmp_path):
    """Ctrl-C during a run: "amplint: interrupted" and exit 130 (click's own handling would say "Aborted!", exit 1)."""
    import subprocess
    import sys

    (tmp_path / "t.py").write_text("import torch\n")
    script = ("import sys, amplint.cli as cli\n"
              "def interrupted(*args, **kwargs):\n"
              "    raise KeyboardInterrupt\n"
              "cli.lint_paths = interrupted\n"
              "sys.argv = ['amplint', 'check', sys.argv[1], '--no-cache']\n"
              "cli.entry()\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "t.py")], capture_output=True, text=True)
    assert done.returncode == 130, done.stderr
    assert "amplint: interrupted" in done.stderr and "Aborted" not in done.stderr


def test_an_interrupt_while_starting_exits_130_without_a_traceback(tmp_path):
    """Ctrl-C while amplint is still importing its command line (before `cli.entry`'s handler exists)."""
    import subprocess
    import sys

    script = ("import builtins, sys\n"
              "real = builtins.__import__\n"
              "def interrupting(name, *args, **kwargs):\n"
              "    if name == 'amplint.cli':\n"
              "        raise KeyboardInterrupt\n"
              "    return real(name, *args, **kwargs)\n"
              "builtins.__import__ = interrupting\n"
              "sys.argv = ['amplint', 'check', '.']\n"
              "from amplint.__main__ import entry\n"
              "entry()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 130, done.stderr
    assert done.stderr == "amplint: interrupted\n"
