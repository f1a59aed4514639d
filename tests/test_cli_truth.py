"""A command line that tells the truth: what it linted, what it skipped and why, the totals, and the resolved
configuration with where each value came from (`--show-settings`)."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from amplint.cli import main
from amplint.config import DEFAULT_EXCLUDE, KEYS, Settings, settings_from_table
from amplint.discovery import discover
from samples import FLAGGED, amplint_process

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "gen.py").write_text(FLAGGED)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "clean.py").write_text("x = 1\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def check(*args: str):
    return CliRunner().invoke(main, ["check", "--no-cache", *args], catch_exceptions=False)


# --- a folder named on the command line -------------------------------------------------------------------------


def test_a_folder_named_explicitly_is_linted_even_when_the_excludes_name_it(project):
    """As ruff does: excludes prune what a walk meets, not what the user names (`build` is a default exclude)."""
    assert "build" in DEFAULT_EXCLUDE
    result = check("build")
    assert result.exit_code == 1, result.output
    assert "build/gen.py:6:9: AMP001" in result.output
    assert "All checks passed!" not in result.output


def test_a_folder_below_an_excluded_one_is_linted_when_named(project):
    (project / "build" / "lib").mkdir()
    (project / "build" / "lib" / "deep.py").write_text(FLAGGED)
    result = check("build/lib", "--output-format", "concise")
    assert result.exit_code == 1
    assert result.output.startswith("build/lib/deep.py:6:9: AMP001")


def test_walking_the_project_still_skips_excluded_folders(project):
    result = check()
    assert result.exit_code == 0, result.output
    assert "build" not in result.output


def test_excluded_folders_inside_a_named_folder_are_still_skipped(project):
    (project / "build" / "__pycache__").mkdir()
    (project / "build" / "__pycache__" / "cached.py").write_text(FLAGGED)
    (project / "build" / "dist").mkdir()
    (project / "build" / "dist" / "copy.py").write_text(FLAGGED)
    assert list(discover(["build"], Settings(root=project))) == [os.path.join("build", "gen.py")]


def test_a_configured_path_pattern_with_a_trailing_slash_prunes_the_folder(project):
    (project / "src" / "legacy").mkdir()
    (project / "src" / "legacy" / "old.py").write_text(FLAGGED)
    settings = Settings(root=project, extend_exclude=["src/legacy/"])
    assert list(discover(["."], settings)) == [os.path.join("src", "clean.py")]
    settings.force_exclude = True
    assert list(discover(["src/legacy", "src/legacy/old.py"], settings)) == []


def test_force_exclude_skips_a_named_folder_and_says_so(project):
    result = check("--force-exclude", "build")
    assert result.exit_code == 0
    assert "amplint: build is not linted: `build` (the default `exclude`) excludes it, and --force-exclude" \
        in result.stderr
    assert "turn force-exclude off or remove the pattern" in result.stderr
    assert "amplint: warning: no files to lint (.py, .pyi, .ipynb) in build" in result.stderr
    assert "AMP001" not in result.stdout


def test_force_exclude_from_the_configuration_names_its_file(project):
    (project / "pyproject.toml").write_text('[tool.amplint]\nforce-exclude = true\nextend-exclude = ["src/*.py"]\n')
    result = check("src/clean.py", "build/gen.py")
    assert f"`src/*.py` ({project / 'pyproject.toml'}: [tool.amplint] extend-exclude) excludes it" in result.stderr
    assert f"force-exclude = true ({project / 'pyproject.toml'}: [tool.amplint] force-exclude)" in result.stderr
    assert result.stderr.count("is not linted") == 2


def test_force_exclude_notes_only_the_paths_it_skips(project):
    result = check("--force-exclude", "build/gen.py", "src/clean.py")
    assert result.exit_code == 0
    assert "build/gen.py is not linted" in result.stderr
    assert "src/clean.py" not in result.stderr
    assert "no files to lint" not in result.stderr


def test_quiet_keeps_stderr_for_errors_only(project):
    result = check("--force-exclude", "--quiet", "build")
    assert result.exit_code == 0 and result.stderr == ""


def test_a_folder_with_no_python_file_says_nothing_was_linted(project):
    (project / "docs").mkdir()
    (project / "docs" / "index.md").write_text("# docs\n")
    result = check("docs")
    assert result.exit_code == 0
    assert "amplint: warning: no files to lint (.py, .pyi, .ipynb) in docs" in result.stderr


# --- the two items already in place: a missing path, and what `Fixed` counts ---------------------------------------


def test_a_missing_path_is_a_finding_and_exit_2(project):
    result = check("src", "no_such_dir")
    assert result.exit_code == 2
    assert "no_such_dir:1:1: AMP901 no such file or directory" in result.stdout


def test_fix_counts_the_findings_removed(project):
    (project / "train.py").write_text(FLAGGED)
    result = check("--fix", "train.py")
    assert result.exit_code == 0, result.output
    assert "Found 1 problem (1 fixed, 0 remaining)." in result.output


# --- --statistics ------------------------------------------------------------------------------------------------


def test_statistics_end_with_the_total(project):
    (project / "a.py").write_text(FLAGGED)
    (project / "b.py").write_text(FLAGGED)
    result = check("--statistics", "a.py", "b.py")
    assert result.exit_code == 1
    assert result.output.splitlines() == ["    2\tAMP001\terror\t[*] backward-in-autocast", "Found 2 errors.",
                                          "[*] 2 fixable with `amplint check --fix`."]


def test_the_fix_command_named_keeps_unsafe_fixes_when_they_count(project):
    """A finding whose fix is unsafe counts as fixable under `--unsafe-fixes`; the command that applies it says so
    (a plain `--fix` would leave it)."""
    scaled = (REPO / "fixtures" / "AMP005-scaler-in-inference" / "flagged" / "no_grad_evaluate_scale.py").read_text()
    (project / "a.py").write_text(scaled)
    (project / "b.py").write_text(FLAGGED)  # a safe fix
    unsafe = check("--unsafe-fixes", "--output-format", "concise", "a.py", "b.py").output.splitlines()
    assert unsafe[-1] == "[*] 2 fixable with `amplint check --fix --unsafe-fixes`."
    safe = check("--output-format", "concise", "a.py", "b.py").output.splitlines()
    assert safe[-2:] == ["[*] 1 fixable with `amplint check --fix`.",
                         "1 hidden fix can be enabled with `--unsafe-fixes`."]


def test_statistics_say_when_nothing_was_found(project):
    result = check("--statistics", "src")
    assert result.exit_code == 0
    assert result.output == "All checks passed!\n"


def test_quiet_statistics_are_the_table_alone(project):
    result = check("--statistics", "--quiet", "build")
    assert result.output == "    1\tAMP001\terror\t[*] backward-in-autocast\n"


# --- --show-settings ---------------------------------------------------------------------------------------------


def settings_lines(result) -> dict[str, str]:
    """Each `key = value  # origin` line of --show-settings by key (a key not set is `# key is not set: ...`)."""
    shown = {}
    for line in result.output.splitlines():
        if line.startswith("# ") and " is not set: " in line:
            shown[line[2:].split(" ")[0]] = line
        elif " = " in line and not line.startswith("#"):
            shown[line.split(" = ")[0]] = line
    return shown


def test_show_settings_lists_every_key_of_the_table(project):
    result = check("--show-settings")
    assert result.exit_code == 0, result.output
    assert list(settings_lines(result)) == list(KEYS)
    assert "# configuration file: none found, so the defaults apply" in result.output
    assert "AMP001" not in result.output.split("# rules enabled")[0]  # nothing was linted


def test_show_settings_names_the_origin_of_each_value(project):
    config = project / "pyproject.toml"
    config.write_text('[project]\nname = "p"\ndependencies = [\n  "torch>=1.13,<2",\n]\n\n'
                      '[tool.amplint]\nextend-exclude = ["gen"]\nignore = ["AMP007"]\n'
                      '[tool.amplint.severity]\nAMP003 = "warning"\n')
    result = check("--show-settings", "--ignore", "AMP013", "--jobs", "3", "--select", "AMP0")
    assert result.exit_code == 0, result.output
    shown = settings_lines(result)
    assert shown["extend-exclude"] == f'extend-exclude = ["gen"]  # {config}: [tool.amplint] extend-exclude'
    assert shown["ignore"] == f'ignore = ["AMP007", "AMP013"]  # {config}: [tool.amplint] ignore, and --ignore'
    assert shown["select"] == 'select = ["AMP0"]  # --select'
    assert shown["jobs"] == "jobs = 3  # --jobs"
    assert shown["severity"] == f'severity = {{"AMP003" = "warning"}}  # {config}: [tool.amplint] severity'
    assert shown["exclude"].endswith("# default")
    assert shown["target-torch-version"] == \
        'target-torch-version = "1.13"  # inferred from torch>=1.13,<2 (pyproject.toml:4)'
    assert "# the project's requirements exclude torch 2.0 and later (inferred)" in result.output
    assert "#   AMP003 clip-without-unscale: warning (error by default)" in result.output
    assert "AMP007 deprecated" not in result.output and "AMP013 scaler" not in result.output


def test_show_settings_from_amplint_toml_and_the_command_line(project):
    (project / "amplint.toml").write_text('target-torch-version = "2.1"\nforce-exclude = true\n')
    result = check("--show-settings", "--target-torch-version", "2.4", "--output-format", "json")
    shown = settings_lines(result)
    assert shown["target-torch-version"] == 'target-torch-version = "2.4"  # --target-torch-version'
    assert shown["output-format"] == 'output-format = "json"  # --output-format'
    assert shown["force-exclude"] == f"force-exclude = true  # {project / 'amplint.toml'}: force-exclude"


def test_show_settings_without_a_torch_requirement_says_what_that_means(project):
    shown = settings_lines(check("--show-settings"))
    assert shown["target-torch-version"] == ("# target-torch-version is not set: no torch requirement with a lower "
                                             "bound was found, so every spelling is allowed")
    assert shown["select"] == 'select = ["ALL"]  # default: every rule'


def test_the_settings_shown_are_a_configuration_that_gives_the_same_settings(project):
    """What --show-settings prints is TOML that `[tool.amplint]` accepts, and reading it back gives the same
    values: the output is the configuration, not a description that may drift from it."""
    (project / "amplint.toml").write_text('extend-exclude = ["a b", "q\\"uote"]\nmax-file-size = 1000\n'
                                          '[per-file-ignores]\n"tests/*" = ["AMP001", "AMP002"]\n')
    result = check("--show-settings", "--exit-non-zero-on-warning")
    table = tomllib.loads(result.output)
    assert set(table) == set(KEYS) - {"target-torch-version", "docs-url"}  # unset by default: comments
    again = settings_from_table(table, project / "amplint.toml")
    assert again.extend_exclude == ["a b", 'q"uote']
    assert again.per_file_ignores == {"tests/*": ["AMP001", "AMP002"]}
    assert again.max_file_size == 1000 and again.exit_non_zero_on_warning is True


def test_show_settings_with_an_old_torch_turns_no_rule_off(project):
    """The torch floor gates what needs a version (a deprecation finding, a fix's spelling), never a bug rule."""
    result = check("--show-settings", "--target-torch-version", "1.9")
    assert "#   AMP013 scaler-with-bfloat16: warning\n" in result.output
    assert "#   AMP001 backward-in-autocast: error\n" in result.output
    assert "off: it needs torch" not in result.output


def test_show_settings_with_a_broken_configuration_is_a_usage_error(project):
    (project / "amplint.toml").write_text("jobs = 0\n")
    result = check("--show-settings")
    assert result.exit_code == 2
    assert "`jobs` must be a positive integer" in result.output


def test_show_settings_through_the_installed_command(project):
    """The same through a real process (the console entry point): exit 0, the table on stdout, nothing else."""
    result = amplint_process("check", "--show-settings", "--ignore", "AMP001", cwd=project)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert 'ignore = ["AMP001"]  # --ignore' in result.stdout


def test_a_named_excluded_folder_through_the_installed_command(project):
    """A real process: the folder is linted without --force-exclude, skipped and explained with it."""
    def amplint(*args: str) -> subprocess.CompletedProcess:
        return amplint_process("check", "--no-cache", "--output-format", "concise", *args, cwd=project)

    linted = amplint("build")
    assert linted.returncode == 1 and linted.stdout.startswith("build/gen.py:6:9: AMP001")
    skipped = amplint("--force-exclude", "build")
    assert skipped.returncode == 0
    assert skipped.stderr.splitlines()[0].startswith("amplint: build is not linted: `build` (the default `exclude`)")


def test_quiet_keeps_a_finding_whose_file_name_starts_like_the_summary(project):
    (project / "Found it.py").write_text(FLAGGED)
    result = check("--quiet", "--output-format", "concise", "Found it.py")
    assert result.exit_code == 1
    assert result.output.startswith("Found it.py:") and "AMP001" in result.output
