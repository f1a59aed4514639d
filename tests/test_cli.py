"""The command line: exit codes, selection, configuration, suppression, bad input, stdin, discovery."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from amplint import __version__
from samples import FLAGGED, amplint_process, invoke_in

REPO = Path(__file__).resolve().parents[1]

CLEAN = textwrap.dedent("""\
    import torch

    def train(model, x, optimizer):
        with torch.autocast("cuda"):
            loss = model(x).sum()
        loss.backward()
        optimizer.step()
""")
CLIP = textwrap.dedent("""\
    import torch

    scaler = torch.amp.GradScaler("cuda")

    def step(model, loss, optimizer):
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
""")


def run(args, cwd: Path, input: bytes | None = None):
    return invoke_in(cwd, args, input)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "flagged.py").write_text(FLAGGED)
    (tmp_path / "clean.py").write_text(CLEAN)
    return tmp_path


def test_exit_codes(project):
    assert run(["check", "clean.py"], project).exit_code == 0
    result = run(["check", "flagged.py"], project)
    assert result.exit_code == 1
    assert "flagged.py:6:9: AMP001" in result.output
    assert run(["check", "--select", "NOPE1", "flagged.py"], project).exit_code == 2
    assert run(["check", "--output-format", "xml", "flagged.py"], project).exit_code == 2
    assert run(["check", "--exit-zero", "flagged.py"], project).exit_code == 0


def test_bare_form_and_default_path(project):
    result = run(["flagged.py"], project)
    assert result.exit_code == 1 and "AMP001" in result.output
    result = run([], project)
    assert result.exit_code == 1 and "flagged.py" in result.output and "clean.py" not in result.output


def test_version_and_rule_docs(project):
    assert run(["--version"], project).output.strip() == f"amplint {__version__}"
    doc = run(["rule", "AMP003"], project)
    assert doc.exit_code == 0
    for section in ("## What it does", "## Why is this bad?", "## Example", "## Use instead"):
        assert section in doc.output
    assert "## Fix safety" not in doc.output and "`amplint rule AMP003 --long`" in doc.output
    long = run(["rule", "AMP003", "--long"], project)
    assert long.exit_code == 0 and long.output.index("## Use instead") < long.output.index("## Fix safety") < \
        long.output.index("## Limits")
    assert run(["rule", "clip-without-unscale"], project).exit_code == 0
    assert run(["rule", "AMP999"], project).exit_code == 2
    everything = run(["rule", "--all"], project)
    assert everything.exit_code == 0 and "AMP001" in everything.output and "AMP006" in everything.output


def test_output_is_sorted_with_one_based_columns(project):
    (project / "b.py").write_text(CLIP + FLAGGED.replace("import torch\n", ""))
    result = run(["check", "--output-format", "concise", "b.py", "flagged.py"], project)
    lines = [line for line in result.output.splitlines() if ": AMP" in line]
    keys = [(line.split(":")[0], int(line.split(":")[1]), int(line.split(":")[2])) for line in lines]
    assert keys == sorted(keys)
    assert "b.py:7:5: AMP003" in result.output


def test_full_format_shows_a_source_frame(project):
    result = run(["check", "flagged.py"], project)
    assert "6 |         loss.backward()" in result.output
    assert "^^^^^^^^^^^^^^^ AMP001" in result.output
    assert "Found 1 error." in result.output


def test_json_format(project):
    result = run(["check", "--output-format", "json", "flagged.py"], project)
    [item] = json.loads(result.output)
    assert item["code"] == "AMP001" and item["name"] == "backward-in-autocast"
    assert item["filename"] == "flagged.py"
    assert item["location"] == {"row": 6, "column": 9} and item["end_location"] == {"row": 6, "column": 24}
    assert item["url"] is None  # no `docs-url`: no link (tests/test_docs_url.py)
    assert item["fix"]["applicability"] == "safe" and item["fix"]["edits"]


@pytest.mark.parametrize("selector", ["AMP003", "AMP00", "clip-without-unscale", "AMP"])
def test_select_by_code_prefix_and_name(project, selector):
    (project / "both.py").write_text(CLIP + "\n" + FLAGGED.replace("import torch\n", ""))
    result = run(["check", "--output-format", "concise", "--select", selector, "both.py"], project)
    assert "AMP003" in result.output


def test_ignore_and_extend_select(project):
    (project / "both.py").write_text(CLIP + "\n" + FLAGGED.replace("import torch\n", ""))
    result = run(["check", "--output-format", "concise", "--ignore", "AMP003", "both.py"], project)
    assert "AMP003" not in result.output and "AMP001" in result.output
    result = run(["check", "--output-format", "concise", "--select", "AMP001", "--extend-select", "AMP003",
                  "both.py"], project)
    assert "AMP003" in result.output and "AMP001" in result.output


def test_statistics_and_quiet(project):
    result = run(["check", "--statistics", "flagged.py"], project)
    table, total = result.output.splitlines()[:2]
    assert table.split() == ["1", "AMP001", "error", "[*]", "backward-in-autocast"]
    assert total == "Found 1 error."
    quiet = run(["check", "--quiet", "--output-format", "concise", "flagged.py"], project)
    assert "Found" not in quiet.output and "AMP001" in quiet.output


def test_configuration_in_pyproject(project):
    (project / "pyproject.toml").write_text('[tool.amplint]\nignore = ["AMP001"]\n')
    assert run(["check", "flagged.py"], project).exit_code == 0
    sub = project / "pkg"
    sub.mkdir()
    (sub / "flagged.py").write_text(FLAGGED)
    assert run(["check", "flagged.py"], sub).exit_code == 0  # closest config found from a subfolder


def test_amplint_toml_and_explicit_config(project):
    (project / "amplint.toml").write_text('select = ["AMP003"]\n')
    assert run(["check", "flagged.py"], project).exit_code == 0
    other = project / "other.toml"
    other.write_text('[tool.amplint]\nselect = ["AMP001"]\n')
    assert run(["check", "--config", "other.toml", "flagged.py"], project).exit_code == 1


@pytest.mark.parametrize("config, needle", [
    ('[tool.amplint]\nselekt = ["AMP001"]\n', "selekt"),
    ('[tool.amplint]\nselect = ["AMP999"]\n', "AMP999"),
    ('[tool.amplint]\nignore = ["not-a-rule"]\n', "not-a-rule"),
    ('[tool.amplint]\nper-file-ignores = { "a.py" = ["XYZ1"] }\n', "XYZ1"),
    ('[tool.amplint]\nselect = "AMP001"\n', "list of strings"),
    ('[tool.amplint\n', "invalid TOML"),
])
def test_bad_configuration_is_an_error_naming_the_problem(project, config, needle):
    (project / "pyproject.toml").write_text(config)
    result = run(["check", "flagged.py"], project)
    assert result.exit_code == 2
    assert needle in result.output


def test_missing_config_file(project):
    result = run(["check", "--config", "nope.toml", "flagged.py"], project)
    assert result.exit_code == 2 and "nope.toml" in result.output


def test_per_file_ignores(project):
    (project / "pyproject.toml").write_text('[tool.amplint]\nper-file-ignores = { "flag*.py" = ["AMP001"] }\n')
    assert run(["check", "flagged.py"], project).exit_code == 0


def test_noqa(project):
    (project / "a.py").write_text(FLAGGED.replace("loss.backward()", "loss.backward()  # noqa: AMP001"))
    assert run(["check", "a.py"], project).exit_code == 0
    (project / "b.py").write_text(FLAGGED.replace("loss.backward()", "loss.backward()  # noqa"))
    assert run(["check", "b.py"], project).exit_code == 0
    (project / "c.py").write_text(FLAGGED.replace("loss.backward()", "loss.backward()  # noqa: AMP003"))
    assert run(["check", "c.py"], project).exit_code == 1
    (project / "d.py").write_text("# amplint: noqa\n" + FLAGGED)
    assert run(["check", "d.py"], project).exit_code == 0


def test_bad_input_gets_diagnostics_and_the_run_goes_on(project):
    # Each file mentions autocast: files with no AMP vocabulary at all are skipped by the prefilter unparsed.
    (project / "broken.py").write_text("import torch  # autocast\ndef f(:\n    pass\n")
    (project / "py2.py").write_text('import torch.cuda.amp\nprint "hello"\nscaler = torch.cuda.amp.GradScaler()\n')
    (project / "latin.py").write_bytes(b"x = '\xe9\xff'  # autocast\n")
    (project / "empty.py").write_bytes(b"")
    (project / "junk.py").write_bytes(b"autocast" + bytes(range(256)))
    result = run(["check", "--output-format", "concise", "broken.py", "py2.py", "latin.py", "empty.py",
                  "junk.py", "flagged.py"], project)
    assert result.exit_code == 1
    out = result.output
    assert "broken.py:2:7: AMP900" in out
    assert "py2.py:2:" in out
    assert "latin.py:1:1: AMP901" in out and "cannot decode" in out
    assert "empty.py" not in out
    assert "junk.py:1:1: AMP90" in out
    assert "flagged.py:6:9: AMP001" in out  # the other files are still reported
    assert "Traceback" not in out


def test_declared_encoding_is_honoured(project):
    source = "# -*- coding: latin-1 -*-\n# caf\xe9\n" + FLAGGED
    (project / "latin.py").write_bytes(source.encode("latin-1"))
    result = run(["check", "--output-format", "concise", "latin.py"], project)
    assert "latin.py:8:9: AMP001" in result.output


def test_stdin(project):
    result = run(["check", "-", "--stdin-filename", "train.py", "--output-format", "concise"], project,
                 input=FLAGGED.encode())
    assert result.exit_code == 1 and "train.py:6:9: AMP001" in result.output
    result = run(["check", "-"], project, input=CLEAN.encode())
    assert result.exit_code == 0
    fixed = run(["check", "-", "--fix"], project, input=FLAGGED.encode())
    assert fixed.output == CLEAN


def test_discovery_excludes(project):
    for folder in (".git", "build", ".venv", "node_modules", "__pycache__", "site-packages"):
        (project / folder).mkdir()
        (project / folder / "x.py").write_text(FLAGGED)
    env = project / "myenv"
    env.mkdir()
    (env / "pyvenv.cfg").write_text("home = /usr\n")
    (env / "x.py").write_text(FLAGGED)
    result = run(["check", "--output-format", "concise", "."], project)
    assert [line.split(":")[0] for line in result.output.splitlines() if ": AMP" in line] == ["flagged.py"]
    # An explicit file is linted even inside an excluded folder, unless --force-exclude.
    assert run(["check", "build/x.py"], project).exit_code == 1
    assert run(["check", "--force-exclude", "build/x.py"], project).exit_code == 0
    (project / "pyproject.toml").write_text('[tool.amplint]\nextend-exclude = ["flagged.py"]\n')
    assert run(["check", "."], project).exit_code == 0


def test_symlink_loop_does_not_hang(project):
    (project / "loop").symlink_to(project, target_is_directory=True)
    result = run(["check", "--output-format", "concise", "."], project)
    assert result.exit_code == 1


def test_internal_error_is_reported_with_exit_code_2(project, monkeypatch):
    from amplint.rules.amp001_backward_in_autocast import BackwardInAutocast

    def explode(self, facts):
        raise RuntimeError("boom")
        yield  # pragma: no cover

    monkeypatch.setattr(BackwardInAutocast, "check", explode)
    result = run(["check", "--output-format", "concise", "flagged.py", "clean.py"], project)
    assert result.exit_code == 2
    assert "AMP902" in result.output and "boom" in result.output


def test_subprocess_entry_point(project):
    result = amplint_process("check", "flagged.py", cwd=project)
    assert result.returncode == 1 and "AMP001" in result.stdout
    bad = amplint_process("check", "--select", "ZZZ", cwd=project)
    assert bad.returncode == 2 and "ZZZ" in bad.stderr and "Traceback" not in bad.stderr


def test_the_linter_never_imports_torch(project):
    program = textwrap.dedent(f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ImportError("torch must not be imported")
        sys.meta_path.insert(0, Block())
        sys.path.insert(0, {str(REPO)!r})
        sys.argv = ["amplint", "check", "--output-format", "json", "flagged.py", "clean.py"]
        from amplint.cli import entry
        entry()
    """)
    result = subprocess.run([sys.executable, "-c", program], cwd=project, capture_output=True, text=True)
    assert result.returncode == 1, result.stderr
    assert "AMP001" in result.stdout


def test_libcst_is_imported_only_when_a_file_is_analysed(project):
    """A run whose files have no AMP word (or come from the cache) never pays libcst's import (amplint/lazy.py)."""
    (project / "plain.py").write_text("import os\nprint(os.getcwd())\n")
    program = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        sys.argv = ["amplint", "check", "--no-cache", *sys.argv[1:]]
        from amplint.cli import entry
        try:
            entry()
        except SystemExit as end:
            loaded = type(sys.modules["libcst"]).__name__ == "module"
            print("libcst loaded" if loaded else "libcst not loaded", end.code)
    """)
    for files, expected in ((["plain.py"], "libcst not loaded 0"), (["plain.py", "flagged.py"], "libcst loaded 1")):
        result = subprocess.run([sys.executable, "-c", program, *files], cwd=project, capture_output=True, text=True)
        assert result.stdout.strip().endswith(expected), result.stdout + result.stderr


def test_target_torch_version_on_the_command_line(project):
    legacy = "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n"
    (project / "legacy.py").write_text(legacy)
    assert "AMP007" in run(["check", "--output-format", "concise", "legacy.py"], project).output
    older = run(["check", "--output-format", "concise", "--target-torch-version", "2.1", "legacy.py"], project)
    # no fix before 2.3; AMP007 is a warning: exit 0
    assert older.exit_code == 0 and "AMP007" in older.output and "[*]" not in older.output
    assert run(["check", "--target-torch-version", "two", "legacy.py"], project).exit_code == 2
