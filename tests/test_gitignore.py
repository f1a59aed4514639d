"""What git ignores is not linted (`respect-gitignore`, on by default, as ruff): `.gitignore` files (nested ones
too) inside a git repository, its `.git/info/exclude`, git's global excludes file, and `.ignore` files anywhere; a
path named on the command line is linted whatever they say."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from amplint.cli import main
from amplint.config import Settings
from amplint.discovery import discover, global_excludes_file

FLAGGED = 'import torch\nwith torch.autocast("cpu"):\n    loss.backward()\n'


@pytest.fixture(autouse=True)
def no_global_git_configuration(tmp_path, monkeypatch):
    """git's global configuration comes from this test's own home, never the user's."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    return home


def _tree(root, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _repository(root) -> None:
    (root / ".git" / "info").mkdir(parents=True)


def _found(root, *paths, **settings) -> list[str]:
    named = [str(root / path) for path in paths] or [str(root)]
    return sorted(os.path.relpath(path, root).replace(os.sep, "/")
                  for path in discover(named, Settings(root=root, **settings)))


def test_a_git_ignored_run_folder_is_not_linted(tmp_path):
    project = tmp_path / "project"
    _repository(project)
    _tree(project, {".gitignore": "wandb/\n", "wandb/run1/files/code.py": FLAGGED, "train.py": FLAGGED})
    assert _found(project) == ["train.py"]
    assert _found(project, respect_gitignore=False) == ["train.py", "wandb/run1/files/code.py"]


def test_through_the_command_line_and_the_configuration(tmp_path, monkeypatch):
    project = tmp_path / "project"
    _repository(project)
    _tree(project, {".gitignore": "wandb/\n", "wandb/run1/files/code.py": FLAGGED, "train.py": FLAGGED})
    monkeypatch.chdir(project)
    runner = CliRunner()

    def reported(*arguments):
        done = runner.invoke(main, ["check", "--no-cache", "--output-format", "concise", *arguments])
        return sorted(line.split(":")[0] for line in done.output.splitlines() if ": AMP" in line)

    assert reported(".") == ["train.py"]
    assert reported(".", "--no-respect-gitignore") == ["train.py", "wandb/run1/files/code.py"]
    (project / "pyproject.toml").write_text("[tool.amplint]\nrespect-gitignore = false\n")
    assert reported(".") == ["train.py", "wandb/run1/files/code.py"]
    assert reported(".", "--respect-gitignore") == ["train.py"]
    shown = runner.invoke(main, ["check", "--show-settings", "--respect-gitignore"]).output
    assert "respect-gitignore = true  # --respect-gitignore" in shown


def test_a_named_path_is_linted_whatever_the_ignore_files_say(tmp_path):
    project = tmp_path / "project"
    _repository(project)
    _tree(project, {".gitignore": "wandb/\ngenerated_*.py\n", "wandb/run1/files/code.py": FLAGGED,
                    "wandb/run1/files/generated_x.py": FLAGGED, "generated_y.py": FLAGGED})
    assert _found(project, "wandb/run1/files/code.py") == ["wandb/run1/files/code.py"]
    assert _found(project, "generated_y.py") == ["generated_y.py"]
    # a named folder that is ignored is walked; the pattern that ignores the folder is set aside inside it
    assert _found(project, "wandb") == ["wandb/run1/files/code.py", "wandb/run1/files/generated_x.py"]


def test_negation_keeps_a_file(tmp_path):
    _repository(tmp_path)
    _tree(tmp_path, {".gitignore": "scratch/*.py\n!scratch/keep.py\n", "scratch/keep.py": FLAGGED,
                     "scratch/drop.py": FLAGGED})
    assert _found(tmp_path) == ["scratch/keep.py"]


def test_nested_gitignore_files_are_relative_to_their_folder_and_the_deeper_one_wins(tmp_path):
    _repository(tmp_path)
    _tree(tmp_path, {".gitignore": "*_old.py\n", "pkg/.gitignore": "/local.py\n!kept_old.py\n",
                     "pkg/local.py": FLAGGED, "pkg/sub/local.py": FLAGGED, "local.py": FLAGGED,
                     "pkg/kept_old.py": FLAGGED, "pkg/gone_old.py": FLAGGED, "top_old.py": FLAGGED})
    assert _found(tmp_path) == ["local.py", "pkg/kept_old.py", "pkg/sub/local.py"]
    # walked from inside the repository, the files above still apply
    assert _found(tmp_path, "pkg") == ["pkg/kept_old.py", "pkg/sub/local.py"]


def test_info_exclude_the_global_file_and_dot_ignore(tmp_path, no_global_git_configuration):
    home = no_global_git_configuration
    project = tmp_path / "project"
    _repository(project)
    (project / ".git" / "info" / "exclude").write_text("excluded.py\n")
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "ignore").write_text("global_default.py\n")
    _tree(project, {"excluded.py": FLAGGED, "global_default.py": FLAGGED, "global_set.py": FLAGGED,
                    "dot_ignored.py": FLAGGED, ".ignore": "dot_ignored.py\n", "kept.py": FLAGGED})
    assert _found(project) == ["global_set.py", "kept.py"]
    (home / ".gitconfig").write_text('[user]\n\tname = x\n[core]\n\texcludesFile = "~/my-ignore"\n')
    (home / "my-ignore").write_text("global_set.py\n")
    assert global_excludes_file() == str(home / "my-ignore")
    assert _found(project) == ["global_default.py", "kept.py"]
    # a .ignore file wins over any .gitignore (as ripgrep and ruff read them)
    (project / ".gitignore").write_text("kept.py\n")
    (project / ".ignore").write_text("dot_ignored.py\n!kept.py\n")
    assert _found(project) == ["global_default.py", "kept.py"]


def test_outside_a_git_repository_gitignore_means_nothing_but_dot_ignore_does(tmp_path):
    """As git and ruff: a `.gitignore` outside any repository (an exported tarball) is not read; `.ignore` is."""
    _tree(tmp_path, {".gitignore": "wandb/\n", "wandb/code.py": FLAGGED, "train.py": FLAGGED,
                     "notes/.ignore": "draft.py\n", "notes/draft.py": FLAGGED})
    assert _found(tmp_path) == ["train.py", "wandb/code.py"]


def test_an_ignore_file_that_is_not_a_regular_file_is_not_read(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    _repository(tmp_path)
    os.mkfifo(tmp_path / ".gitignore")  # reading it would wait for a writer for ever
    _tree(tmp_path, {"train.py": FLAGGED})
    assert _found(tmp_path) == ["train.py"]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git, to compare with")
def test_the_same_answers_as_git(tmp_path):
    """Every file of a tree with nested ignore files, negations, anchored and directory patterns: linted exactly
    when `git check-ignore` says git does not ignore it."""
    repository = tmp_path / "repo"
    repository.mkdir()
    environment = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", str(repository)], check=True, env=environment)
    (repository / ".git" / "info" / "exclude").write_text("*.tmp.py\n")
    _tree(repository, {
        ".gitignore": "build\n/top_only.py\nlogs/**/*.py\n!logs/keep/*.py\n*.bak.py\ndata/\n",
        "src/.gitignore": "!important.bak.py\nsecret*.py\n",
        "src/deep/.gitignore": "!secret_ok.py\n",
        **{name: FLAGGED for name in (
            "top_only.py", "src/top_only.py", "build/x.py", "src/build/y.py", "logs/a/b.py", "logs/keep/c.py",
            "x.bak.py", "src/important.bak.py", "src/other.bak.py", "src/secret1.py", "src/deep/secret_ok.py",
            "src/deep/secret_no.py", "data/z.py", "src/data/w.py", "kept.py", "a.tmp.py", "src/ok.py")},
    })
    every = sorted(os.path.relpath(os.path.join(folder, name), repository).replace(os.sep, "/")
                   for folder, _, names in os.walk(repository) if ".git" not in folder.split(os.sep)
                   for name in names if name.endswith(".py"))
    checked = subprocess.run(["git", "check-ignore", "--no-index", *every], cwd=repository, capture_output=True,
                             text=True, env=environment)
    ignored = set(checked.stdout.split())
    assert ignored, checked.stderr
    assert _found(repository) == [name for name in every if name not in ignored]


def test_a_run_on_named_files_does_not_load_pathspec(tmp_path):
    (tmp_path / "t.py").write_text(FLAGGED)
    code = ("import sys\nfrom amplint.cli import entry\nsys.argv = ['amplint', 'check', '--no-cache', sys.argv[1]]\n"
            "try:\n    entry()\nexcept SystemExit:\n    pass\nassert 'pathspec' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "t.py")], check=True, capture_output=True)


def test_without_pathspec_the_ignore_files_are_not_applied_and_the_run_says_so(tmp_path, monkeypatch, capsys):
    """Run from its sources where `pathspec` is absent, amplint lints everything and warns once; no error."""
    import amplint.discovery as discovery

    monkeypatch.setitem(sys.modules, "pathspec", None)  # `import pathspec` raises ImportError
    monkeypatch.setattr(discovery, "_SAID", set())
    project = tmp_path / "project"
    _repository(project)
    _tree(project, {".gitignore": "wandb/\n", "wandb/code.py": FLAGGED, "train.py": FLAGGED, "sub/.gitignore": "x\n"})
    assert _found(project) == ["train.py", "wandb/code.py"]
    assert capsys.readouterr().err.count("needs the `pathspec` package") == 1
