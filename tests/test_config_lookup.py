"""One configuration for one file, whoever asks: the command line, the editor server and the flake8 plugin read the
configuration closest to the file (its folder, then each folder above), with one lookup (`settings_for`), and infer
one torch range from the same project files."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from samples import FLAGGED, invoke_in

from amplint.flake8_plugin import AmplintChecker
from amplint.server import lint_document

# AMP007 twice: one spelling per line, both deprecated since torch 2.4.
LEGACY = """\
import torch

scaler = torch.cuda.amp.GradScaler()
with torch.cuda.amp.autocast():
    pass
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def cli_codes(folder: Path, *args: str) -> list[str]:
    result = invoke_in(folder, ["check", "--no-cache", "--output-format", "json", *args])
    assert result.exit_code in (0, 1), result.output
    return sorted(d["code"] for d in json.loads(result.stdout))


def plugin_codes(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    checker = AmplintChecker(ast.parse(text), str(path), text.splitlines(keepends=True))
    return sorted(message.split(" ", 1)[0] for _, _, message, _ in checker.run())


def server_codes(path: Path, root: Path | None = None) -> list[str]:
    return sorted(d.code for d in lint_document(path.read_text(encoding="utf-8"), str(path), str(root or path.parent)))


def test_the_command_line_reads_the_configuration_closest_to_the_file(tmp_path):
    """Run from a folder with no configuration, on a file of a project that ignores AMP001: the project's."""
    (tmp_path / ".git").mkdir()
    project = tmp_path / "project"
    write(project / "pyproject.toml", '[tool.amplint]\nignore = ["AMP001"]\n')
    flagged = write(project / "src" / "flagged.py", FLAGGED)
    assert cli_codes(tmp_path, "project/src/flagged.py") == []
    assert cli_codes(tmp_path, "project") == []
    assert server_codes(flagged, root=tmp_path) == plugin_codes(flagged) == []
    # the working directory's configuration does not apply to a file outside its folder
    write(tmp_path / "elsewhere" / "amplint.toml", 'select = ["AMP003"]\n')
    assert cli_codes(tmp_path / "elsewhere", str(flagged)) == []
    assert cli_codes(tmp_path, "--config", "elsewhere/amplint.toml", "project") == []  # --config: for every file


def test_paths_under_different_configurations_are_each_linted_with_their_own(tmp_path):
    """Named paths under different configurations: each file with the configuration closest to it (they were
    refused before, exit 2), as the server and the plugin read them."""
    (tmp_path / ".git").mkdir()
    write(tmp_path / "a" / "amplint.toml", 'ignore = ["AMP001"]\n')
    write(tmp_path / "a" / "flagged.py", FLAGGED)
    other = write(tmp_path / "b" / "flagged.py", FLAGGED)
    result = invoke_in(tmp_path, ["check", "--no-cache", "--output-format", "json", "a/flagged.py", "b/flagged.py"])
    assert result.exit_code == 1, result.output
    found = json.loads(result.stdout)
    assert {Path(d["filename"]).parent.name for d in found} == {"b"} and [d["code"] for d in found] == ["AMP001"]
    assert server_codes(tmp_path / "a" / "flagged.py") == plugin_codes(tmp_path / "a" / "flagged.py") == []
    assert server_codes(other) == ["AMP001"]


def test_a_nested_configuration_applies_to_the_files_below_it(tmp_path):
    """A subfolder's own configuration applies to its files when the run starts above it: its ignore, its
    severities and its excludes (a named file is linted, as ruff); the parent's to the others."""
    (tmp_path / ".git").mkdir()
    write(tmp_path / "pyproject.toml", '[tool.amplint]\nselect = ["AMP001"]\n')
    write(tmp_path / "top.py", FLAGGED)
    write(tmp_path / "sub" / "amplint.toml", 'ignore = ["AMP001"]\n')
    write(tmp_path / "sub" / "flagged.py", FLAGGED)
    write(tmp_path / "sub" / "deeper" / "flagged.py", FLAGGED)
    result = invoke_in(tmp_path, ["check", "--no-cache", "--output-format", "json", "."])
    assert [Path(d["filename"]).name for d in json.loads(result.stdout)] == ["top.py"], result.output
    assert "sub/amplint.toml" not in result.stderr  # nothing to warn about: it is used
    assert cli_codes(tmp_path / "sub", ".") == [] == server_codes(tmp_path / "sub" / "flagged.py")
    # its severities and excludes too
    write(tmp_path / "sub" / "amplint.toml", 'extend-exclude = ["gen"]\n[severity]\nAMP001 = "warning"\n')
    write(tmp_path / "sub" / "gen" / "flagged.py", FLAGGED)
    result = invoke_in(tmp_path, ["check", "--no-cache", "--output-format", "json", "."])
    levels = {d["filename"]: d["severity"] for d in json.loads(result.stdout)}
    assert levels == {"top.py": "error", "sub/flagged.py": "warning", "sub/deeper/flagged.py": "warning"}, levels
    assert cli_codes(tmp_path, "sub/gen/flagged.py") == ["AMP001"]  # named: linted
    # --config names one configuration for every file (as ruff)
    assert cli_codes(tmp_path, "--config", "pyproject.toml", "sub") == ["AMP001", "AMP001", "AMP001"]


def test_a_nested_configuration_takes_the_command_lines_rule_options(tmp_path):
    (tmp_path / ".git").mkdir()
    write(tmp_path / "amplint.toml", 'select = ["AMP001"]\n')
    write(tmp_path / "sub" / "amplint.toml", 'select = ["AMP003"]\n')
    write(tmp_path / "sub" / "flagged.py", FLAGGED)
    assert cli_codes(tmp_path, ".") == []
    assert cli_codes(tmp_path, "--extend-select", "AMP001", ".") == ["AMP001"]
    assert cli_codes(tmp_path, "--select", "AMP001", ".") == ["AMP001"]
    # a broken nested configuration is a configuration error naming it, before anything is linted
    write(tmp_path / "sub" / "amplint.toml", 'select = "AMP001"\n')
    result = invoke_in(tmp_path, ["check", "--no-cache", "."])
    assert result.exit_code == 2 and "sub/amplint.toml" in result.output and "Traceback" not in result.output


def test_amplint_toml_wins_over_pyproject_and_says_so_once(tmp_path):
    (tmp_path / ".git").mkdir()
    write(tmp_path / "amplint.toml", 'ignore = ["AMP001"]\n')
    write(tmp_path / "pyproject.toml", '[tool.amplint]\nselect = ["AMP001"]\n')
    write(tmp_path / "flagged.py", FLAGGED)
    write(tmp_path / "pkg" / "flagged.py", FLAGGED)
    result = invoke_in(tmp_path, ["check", "--no-cache", "."])
    assert result.exit_code == 0
    said = [line for line in result.stderr.splitlines() if "amplint.toml" in line and "pyproject.toml" in line]
    assert len(said) == 1 and "warning" in said[0], result.stderr
    from amplint.config import settings_for

    settings = settings_for(str(tmp_path / "pkg" / "flagged.py"))
    assert settings.source == tmp_path / "amplint.toml"
    assert any("[tool.amplint]" in warning and "ignored" in warning for warning in settings.warnings)
    # a pyproject.toml without the table is no rival: nothing to say
    write(tmp_path / "pyproject.toml", '[project]\nname = "x"\n')
    assert "pyproject.toml" not in invoke_in(tmp_path, ["check", "--no-cache", "."]).stderr


def test_one_torch_range_for_the_command_line_the_plugin_and_the_server(tmp_path):
    """`torch>=1.13,<2`: no supported torch warns, so no AMP007, whoever lints the file."""
    (tmp_path / ".git").mkdir()
    write(tmp_path / "requirements.txt", "torch>=1.13,<2\n")
    legacy = write(tmp_path / "src" / "legacy.py", LEGACY)
    assert cli_codes(tmp_path, "src/legacy.py") == plugin_codes(legacy) == server_codes(legacy) == []
    write(tmp_path / "requirements.txt", "torch>=1.13\n")  # torch 2.4 and later are supported: they warn
    assert cli_codes(tmp_path, "src/legacy.py") == plugin_codes(legacy) == server_codes(legacy) == ["AMP007"] * 2


def test_each_repository_of_a_run_is_linted_for_the_torch_its_requirements_declare(tmp_path):
    """A folder of repositories linted as one run: each file for the torch range of its own project (the nearest
    declaration above it), as when its repository is linted alone; no range comes from the folder named."""
    for name, requirement in (("pinned_old", "torch==1.13.1\n"), ("recent", "torch>=2.4\n")):
        (tmp_path / name / ".git").mkdir(parents=True)
        write(tmp_path / name / "requirements.txt", requirement)
        write(tmp_path / name / "train" / "legacy.py", LEGACY)
    alone = {name: cli_codes(tmp_path / name, ".") for name in ("pinned_old", "recent")}
    assert alone == {"pinned_old": [], "recent": ["AMP007"] * 2}
    together = invoke_in(tmp_path, ["check", "--no-cache", "--output-format", "json", "."])
    found = sorted((Path(d["filename"]).parts[-3], d["code"]) for d in json.loads(together.stdout))
    assert found == [("recent", "AMP007")] * 2
    legacy = tmp_path / "pinned_old" / "train" / "legacy.py"
    assert plugin_codes(legacy) == server_codes(legacy, root=tmp_path) == []


def test_the_plugin_follows_the_configuration(tmp_path):
    (tmp_path / ".git").mkdir()
    write(tmp_path / "pyproject.toml", '[tool.amplint]\nignore = ["AMP001"]\n')
    flagged = write(tmp_path / "flagged.py", FLAGGED)
    assert plugin_codes(flagged) == cli_codes(tmp_path, "flagged.py") == []
    write(tmp_path / "pyproject.toml", '[tool.amplint]\nselekt = ["AMP001"]\n')  # broken: said, not ignored
    text = flagged.read_text(encoding="utf-8")
    [(row, column, message, _)] = AmplintChecker(ast.parse(text), str(flagged), text.splitlines(True)).run()
    assert (row, column) == (1, 0) and message.startswith("AMP902") and "selekt" in message


def test_the_documented_sample_is_safe_to_copy_whole(tmp_path):
    """Copied whole, docs/configuration.md's sample keeps the default excludes, ignores no rule and links nowhere."""
    import re
    import tomllib

    from amplint.config import DEFAULT_EXCLUDE, settings_from_table

    text = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text(encoding="utf-8")
    sample = re.search(r"```toml\n(.*?)```", text, re.S).group(1)
    settings = settings_from_table(tomllib.loads(sample)["tool"]["amplint"], tmp_path / "pyproject.toml")
    assert settings.exclude == list(DEFAULT_EXCLUDE) and settings.ignore == [] and settings.docs_url is None
