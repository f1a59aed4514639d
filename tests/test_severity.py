"""Severities: each rule's default level, the configuration that changes it, and the exit code policy.

An error changes what training computes or makes it raise; a warning is harmless where it stands (a deprecated
spelling, needless work). Errors exit 1; warnings alone exit 0 unless `--exit-non-zero-on-warning` or
`exit-non-zero-on-warning = true`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from amplint import rules as registry
from amplint.cache import Cache, decode, encode, entry_bytes, entry_diagnostics, is_valid_diagnostic
from amplint.cli import main
from amplint.config import ConfigError, Settings, load_settings, resolve_severity
from amplint.diagnostics import Severity
from amplint.rules.base import Rule
from amplint.outcome import Mode
from amplint.pipeline import process_file
from amplint.selection import rules_for
from samples import CLIP

WARNINGS = {"AMP007", "AMP013", "AMP015"}  # a deprecated spelling; a scaler that only adds work; the opt-in island contract

DEPRECATED = "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n"  # AMP007 only


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "old.py").write_text(DEPRECATED)
    (tmp_path / "clip.py").write_text(CLIP)
    return tmp_path


def check(*args: str):
    return CliRunner().invoke(main, ["check", "--no-cache", "--output-format", "concise", *args])


# --- defaults -------------------------------------------------------------------------------------------------


def test_every_rule_declares_its_level():
    levels = {rule.code: rule.severity for rule in registry.ALL_RULES}
    assert all(type(level) is Severity for level in levels.values())
    assert {code for code, level in levels.items() if level is Severity.WARNING} == WARNINGS


def test_a_misspelt_level_fails_when_the_rule_is_defined():
    with pytest.raises(ValueError):
        type("Misspelt", (Rule,), {"code": "AMP999", "name": "misspelt", "severity": "warn"})


def test_findings_carry_their_rules_level(project):
    [deprecated] = process_file("old.py", rules_for("old.py", list(registry.ALL_RULES), Settings()), Mode()).diagnostics
    [clip] = process_file("clip.py", rules_for("clip.py", list(registry.ALL_RULES), Settings()), Mode()).diagnostics
    assert (deprecated.code, deprecated.severity, clip.code, clip.severity) == (
        "AMP007", Severity.WARNING, "AMP003", Severity.ERROR)
    assert deprecated.to_dict()["severity"] == "warning"


def test_files_that_cannot_be_analysed_are_errors(project):
    (project / "broken.py").write_text(DEPRECATED + "def f(:\n    pass\n")  # a warning's words, no parse
    result = check("broken.py")
    assert result.exit_code == 1 and "AMP900" in result.output and "Found 1 error." in result.output


# --- exit code policy -----------------------------------------------------------------------------------------


def test_warnings_alone_exit_0_and_are_counted(project):
    result = check("old.py")
    assert result.exit_code == 0, result.output
    assert "old.py:3:10: AMP007" in result.output and "Found 1 warning." in result.output


def test_errors_exit_1_and_both_levels_are_counted(project):
    result = check("old.py", "clip.py")
    assert result.exit_code == 1 and "Found 1 error and 1 warning." in result.output


def test_exit_non_zero_on_warning_flag_and_key(project):
    assert check("old.py", "--exit-non-zero-on-warning").exit_code == 1
    assert check("old.py", "--exit-non-zero-on-warning", "--exit-zero").exit_code == 0  # --exit-zero wins
    (project / "pyproject.toml").write_text("[tool.amplint]\nexit-non-zero-on-warning = true\n")
    assert check("old.py").exit_code == 1
    (project / "pyproject.toml").write_text("[tool.amplint]\nexit-non-zero-on-warning = false\n")
    assert check("old.py").exit_code == 0
    assert check("old.py", "--exit-non-zero-on-warning").exit_code == 1  # the flag turns it on for one run


def test_exit_non_zero_on_warning_must_be_a_boolean(project):
    (project / "pyproject.toml").write_text('[tool.amplint]\nexit-non-zero-on-warning = "yes"\n')
    result = check("old.py")
    assert result.exit_code == 2
    assert "pyproject.toml" in result.output and "`exit-non-zero-on-warning` must be true or false" in result.output


def test_stdin_follows_the_same_policy(project):
    runner = CliRunner()
    assert runner.invoke(main, ["check", "-", "--stdin-filename", "old.py"], input=DEPRECATED).exit_code == 0
    strict = runner.invoke(main, ["check", "-", "--exit-non-zero-on-warning"], input=DEPRECATED)
    assert strict.exit_code == 1


def test_the_installed_command_exits_0_on_warnings(project):
    result = subprocess.run([sys.executable, "-m", "amplint", "check", "--no-cache", "old.py"], cwd=project,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and "Found 1 warning." in result.stdout, result.stdout + result.stderr


# --- configuration --------------------------------------------------------------------------------------------


def test_configuration_raises_a_warning_to_an_error(project):
    (project / "pyproject.toml").write_text('[tool.amplint.severity]\nAMP007 = "error"\n')
    result = check("old.py")
    assert result.exit_code == 1 and "Found 1 error." in result.output


def test_configuration_lowers_an_error_to_a_warning(project):
    (project / "amplint.toml").write_text('[severity]\nclip-without-unscale = "warning"\n')  # by name
    result = check("clip.py", "--output-format", "json")
    assert result.exit_code == 0
    assert [item["severity"] for item in json.loads(result.output)] == ["warning"]


def test_the_narrowest_selector_decides_whatever_the_order():
    everything_but_clip = {code: Severity.WARNING for code in registry.RULES_BY_CODE if code not in WARNINGS}
    del everything_but_clip["AMP003"]
    assert resolve_severity({"AMP003": "error", "ALL": "warning"}) == everything_but_clip
    assert resolve_severity({"ALL": "warning", "AMP003": "error"}) == everything_but_clip
    assert resolve_severity({"AMP00": "warning", "AMP007": "error"}) == {
        f"AMP00{n}": Severity.WARNING for n in range(1, 10) if n != 7} | {"AMP007": Severity.ERROR}
    assert resolve_severity({"AMP007": "warning"}) == {}  # the default: nothing to change


@pytest.mark.parametrize("table, words", [
    ('AMP007 = "warn"', '`severity.AMP007` must be "error" or "warning", not a string "warn"'),
    ("AMP007 = 1", '`severity` must be a table of rule = "error" or "warning", not a table'),
    ('AMP999 = "error"', "unknown rule code or name in `severity`: 'AMP999'"),
    ('AMP900 = "warning"', "AMP900 reports a file amplint could not analyse; it is always an error"),
    ('AMP003 = "warning"\nclip-without-unscale = "error"', "sets AMP003 to both 'warning'"),
])
def test_a_bad_severity_table_names_the_entry_and_the_file(project, table, words):
    (project / "pyproject.toml").write_text(f"[tool.amplint.severity]\n{table}\n")
    with pytest.raises(ConfigError, match="pyproject.toml") as error:
        load_settings(start=project)
    assert words in str(error.value)
    result = check("old.py")
    assert result.exit_code == 2 and words in result.output and "Traceback" not in result.output


def test_severity_must_be_a_table(project):
    (project / "pyproject.toml").write_text('[tool.amplint]\nseverity = "warning"\n')
    result = check("old.py")
    assert result.exit_code == 2 and "`severity` must be a table" in result.output and "pyproject.toml" in result.output


def test_configured_levels_apply_after_the_cache(project):
    """The cache holds the rules' defaults; the configured level is applied to a warm run's results as well."""
    def run(*args):
        return CliRunner().invoke(main, ["check", "--output-format", "json", "old.py", *args])

    assert [d["severity"] for d in json.loads(run().output)] == ["warning"]  # cold: stored
    (project / "pyproject.toml").write_text('[tool.amplint.severity]\nAMP007 = "error"\n')
    warm = run()
    assert warm.exit_code == 1 and [d["severity"] for d in json.loads(warm.output)] == ["error"]


def test_cache_entries_keep_the_level_and_refuse_a_bad_one(project):
    diagnostics = process_file("old.py", rules_for("old.py", list(registry.ALL_RULES), Settings()), Mode()).diagnostics
    back = decode(json.loads(json.dumps(encode(diagnostics))))
    assert back == diagnostics and back[0].severity is Severity.WARNING
    [stored] = entry_diagnostics("k" * 40, entry_bytes("k" * 40, diagnostics))  # stored without the file name
    assert stored.severity is Severity.WARNING
    forged = json.loads(json.dumps(encode(diagnostics)))
    forged[0]["fields"]["severity"] = "warning"  # a plain string, not the enum
    assert not is_valid_diagnostic(decode(forged)[0])
    cache = Cache.open(project / "cache")
    cache.store("k" * 40, diagnostics)
    assert cache.load("k" * 40, "old.py")[0].severity is Severity.WARNING


def test_the_diagnostic_schema_names_the_field():
    from amplint.cache import _schema

    assert "severity:Severity" in _schema()  # so entries written before the field existed are not read


# --- what the user reads --------------------------------------------------------------------------------------


def test_statistics_show_each_rules_level(project):
    result = check("old.py", "clip.py", "--statistics")
    rows = sorted(line.split("\t")[1:3] for line in result.output.splitlines() if "\t" in line)
    assert rows == [["AMP003", "error"], ["AMP007", "warning"]]


def test_rule_documentation_states_the_default_level():
    warning = CliRunner().invoke(main, ["rule", "AMP007"])
    assert "Default severity: warning" in warning.output and "--exit-non-zero-on-warning" in warning.output
    assert "Default severity: error" in CliRunner().invoke(main, ["rule", "AMP003"]).output


def test_github_format_through_the_command_line(project):
    (project / "pyproject.toml").write_text('[tool.amplint.severity]\nAMP003 = "warning"\n')
    result = check("old.py", "clip.py", "--output-format", "github")
    assert result.exit_code == 0
    assert [line.split(" ", 1)[0] for line in result.output.splitlines()] == ["::warning", "::warning"]


def test_editor_diagnostics_follow_the_configuration(project):
    from amplint.server import lint_document  # pygls is imported only when the server runs

    (project / "pyproject.toml").write_text('[tool.amplint.severity]\nAMP003 = "warning"\n')
    [clip] = lint_document(CLIP, str(project / "clip.py"))
    [deprecated] = lint_document(DEPRECATED, str(project / "old.py"))
    assert (clip.severity, deprecated.severity) == (Severity.WARNING, Severity.WARNING)
