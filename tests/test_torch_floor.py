"""The torch versions a project supports (amplint/requirements.py), and what AMP007's fix writes for them.

- the requirement parsers, one source kind at a time, with the specifiers real projects write;
- where the range comes from (`infer_target_torch`: configuration, command line, the project's files);
- the project fixtures `fixtures/AMP007-*/projects/<name>/`: `project/` is linted as a whole project (its
  requirement files decide the floor), its `# expect:` marks are the exact findings, and `fixed/<file>` is what
  `--fix` makes of each file that changes (every other file stays as it is);
- AMP007's argument mapping, measured with torch: the migrated call builds an equal object, with no new exception.
"""

from __future__ import annotations

import json
import shutil
import textwrap
import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from amplint.cli import main
from amplint.config import Settings, infer_target_torch, load_settings
from amplint.engine import lint_text
from amplint.facts.versions import SPELLING_SINCE, TorchSupport
from amplint.fixer import fix_text
from amplint.requirements import (Range, conda_requirement, declared_torch, from_environment_yml,
                                  from_pyproject, from_requirements_txt, from_setup_cfg, from_setup_py,
                                  pip_requirement, poetry_constraint, project_root, project_torch, roots_for)
from amplint.rules import RULES_BY_CODE
from amplint.selection import rules_for
from test_fixtures import expected_marks

REPO = Path(__file__).resolve().parents[1]
PROJECTS = sorted(path for path in (REPO / "fixtures").glob("AMP007-*/projects/*") if path.is_dir())


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def bounds(found: Range | None) -> tuple | None:
    return None if found is None else (found.floor, found.below)


# --- specifiers -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("requirement", "expected"), [
    ("torch>=2.1", ((2, 1, 0), None)),
    ('torch[extra]>=2.1; python_version>"3.8"', ((2, 1, 0), None)),  # extras and markers: the range still holds
    ("Torch >= 1.13 , < 2", ((1, 13, 0), (2, 0, 0))),
    ("torch (>=1.13,<2)", ((1, 13, 0), (2, 0, 0))),
    ("torch==2.*", ((2, 0, 0), (3, 0, 0))),
    ("torch==2.1.*,!=2.1.1", ((2, 1, 0), (2, 2, 0))),
    ("torch~=2.2.0", ((2, 2, 0), (2, 3, 0))),
    ("torch~=2.2", ((2, 2, 0), (3, 0, 0))),
    ("torch==2.1.0+cu118", ((2, 1, 0), (2, 1, 1))),
    ("torch===2.1.0", ((2, 1, 0), (2, 1, 1))),
    ("torch>2.3", ((2, 3, 0), None)),  # just above 2.3: a patch release adds no API
    ("torch>=2.4.0.dev20240501", ((2, 4, 0), None)),
    ("torch>=1!2.0", ((2, 0, 0), None)),
    ("torch<=2.3", (None, (2, 3, 1))),
    ("torch<3", (None, (3, 0, 0))),  # `<` alone: no floor
    ("torch!=2.1.0", (None, None)),  # `!=` alone: no bound at all
    ("torch", (None, None)),
    ("torch>=2.0 --hash=sha256:0123", ((2, 0, 0), None)),
    ("torch @ https://download.pytorch.org/whl/cu118/torch-2.0.0%2Bcu118-cp310-cp310-linux_x86_64.whl",
     ((2, 0, 0), (2, 0, 1))),
    ("torch @ git+https://github.com/pytorch/pytorch@main", (None, None)),
    ("torch>=2.*", (None, None)),  # not a valid specifier: no bound from it
])
def test_pip_specifiers(requirement, expected) -> None:
    assert bounds(pip_requirement(requirement)) == expected


@pytest.mark.parametrize("requirement", ["torchvision>=0.15", "torch-geometric>=2", "torch_tb_profiler", "pytorch",
                                         "numpy>=1.21", "# torch>=2.1", ""])
def test_other_packages_are_not_torch(requirement) -> None:
    assert pip_requirement(requirement) is None


@pytest.mark.parametrize(("spec", "expected"), [
    ("pytorch=2.1", ((2, 1, 0), (2, 2, 0))),  # conda's single `=` is a prefix match
    ("pytorch>=1.13,<2", ((1, 13, 0), (2, 0, 0))),
    ("pytorch 2.1.* cuda*", ((2, 1, 0), (2, 2, 0))),
    ("pytorch 2.0.1 py3.10_cuda11.8_0", ((2, 0, 1), (2, 0, 2))),
    ("conda-forge::pytorch==2.1.0=py3.10*", ((2, 1, 0), (2, 1, 1))),
    ("pytorch=1.13.1=py3.9_cuda11.7_0", ((1, 13, 1), (1, 13, 2))),
    ("pytorch[version='>=2.1']", ((2, 1, 0), None)),
    ("pytorch>=1.13|>=2.0", ((1, 13, 0), None)),
    ("pytorch-gpu>=2.2", ((2, 2, 0), None)),
    ("pytorch", (None, None)),
    ("pytorch-cuda=11.8", None),
    ("torchvision", None),
])
def test_conda_specs(spec, expected) -> None:
    assert bounds(conda_requirement(spec)) == expected


def test_torch_support() -> None:
    unknown = TorchSupport()
    assert all(unknown.has(spelling) for spelling in SPELLING_SINCE) and unknown.reaches("2.4") and str(unknown) == ""
    old = TorchSupport("1.13", "2.0")
    assert old.has("torch.autocast") and not old.has("torch.amp.autocast") and not old.has("torch.amp.GradScaler")
    assert not old.reaches("2.4") and str(old) == "@1.13..2.0"
    assert TorchSupport("2.3").has("torch.amp.GradScaler") and not TorchSupport("2.3").has("torch.amp.custom_fwd")
    assert TorchSupport(None, "2.4.1").reaches("2.4") and not TorchSupport(None, "2.4").reaches("2.4")


# --- sources --------------------------------------------------------------------------------------------------

def test_pyproject_dependencies_extras_and_groups(tmp_path) -> None:
    path = write(tmp_path, "pyproject.toml", """
        [project]
        name = "x"
        dependencies = ["numpy", "torch>=2.2"]

        [project.optional-dependencies]
        legacy = [
            "torch>=1.13,<2",  # the old stack
        ]

        [dependency-groups]
        ci = ["torch==2.5.1"]

        [tool.other]
        torch = ">=1.0"
    """)
    found = [(d.text, d.line, bounds(d.range)) for d in from_pyproject(path)]
    assert found == [("torch>=2.2", 3, ((2, 2, 0), None)), ("torch>=1.13,<2", 7, ((1, 13, 0), (2, 0, 0))),
                     ("torch==2.5.1", 11, ((2, 5, 1), (2, 5, 2)))]
    requirement = declared_torch(tmp_path)
    assert requirement.floor.text == "torch>=1.13,<2" and requirement.below is None  # the union: lowest, unbounded


@pytest.mark.parametrize(("constraint", "expected"), [
    ("^1.13", ((1, 13, 0), (2, 0, 0))),  # caret: up to the next major
    ("^0.2.3", ((0, 2, 3), (0, 3, 0))),  # ... or the next minor below 1.0
    ("~2.1", ((2, 1, 0), (2, 2, 0))),
    ("~=2.2", ((2, 2, 0), (3, 0, 0))),
    (">=1.13, <2", ((1, 13, 0), (2, 0, 0))),
    ("2.1.*", ((2, 1, 0), (2, 2, 0))),
    ("2.1.0", ((2, 1, 0), (2, 1, 1))),
    ("^1.13 || ^2.0", ((1, 13, 0), (3, 0, 0))),
    ("*", (None, None)),
])
def test_poetry_constraints(constraint, expected) -> None:
    assert bounds(poetry_constraint(constraint)) == expected


def test_poetry_and_pipfile_tables(tmp_path) -> None:
    write(tmp_path, "pyproject.toml", """
        [tool.poetry.dependencies]
        python = "^3.10"
        torch = {version = "^2.1", source = "pytorch-cu121"}

        [tool.poetry.group.legacy.dependencies]
        torch = [
            {version = "~1.13", markers = "sys_platform == 'darwin'"},
            {version = "^2.0", markers = "sys_platform != 'darwin'"},
        ]
    """)
    found = [(d.line, bounds(d.range)) for d in from_pyproject(tmp_path / "pyproject.toml")]
    assert found == [(3, ((2, 1, 0), (3, 0, 0))), (6, ((1, 13, 0), (3, 0, 0)))]
    write(tmp_path, "Pipfile", '[packages]\nnumpy = "*"\ntorch = ">=2.2"\n\n[dev-packages]\ntorch = {path = "."}\n')
    requirement = declared_torch(tmp_path)
    assert requirement.floor.text.startswith("torch = ") and requirement.floor.range.floor == (1, 13, 0)
    assert [d.line for d in requirement.declared if d.path.name == "Pipfile"] == [3, 6]
    assert requirement.below is None  # the path source has no version: no ceiling


def test_broken_pyproject_is_skipped(tmp_path) -> None:
    write(tmp_path, "pyproject.toml", "[project\ndependencies = ['torch>=2.1']\n")
    assert declared_torch(tmp_path).declared == ()


def test_requirements_txt_comments_continuations_and_includes(tmp_path) -> None:
    write(tmp_path, "requirements.txt", """
        # torch>=1.0 in a comment is not a requirement
        --index-url https://download.pytorch.org/whl/cu121
        -r base.txt
        --requirement=extra/gpu.txt
        -c constraints.txt
        -e git+https://github.com/example/project#egg=project
        numpy  # torch>=1.1 after a requirement: a comment too
        torch>=2.2 \\
            --hash=sha256:0123
    """)
    write(tmp_path, "base.txt", """
        -r requirements.txt
        torch ~= 2.1.0
    """)  # includes the first file again: a cycle, read once
    wheel = "https://download.pytorch.org/whl/torch-2.0.1%2Bcu118-cp311-linux_x86_64.whl"
    write(tmp_path, "extra/gpu.txt", f"-r ../base.txt\n{wheel}\n")
    write(tmp_path, "constraints.txt", "torch==1.8.0\n")  # constraints narrow what is required; they require nothing
    found = [(d.path.name, d.line, bounds(d.range)) for d in from_requirements_txt(tmp_path / "requirements.txt")]
    assert found == [("base.txt", 2, ((2, 1, 0), (2, 2, 0))), ("gpu.txt", 2, ((2, 0, 1), (2, 0, 2))),
                     ("requirements.txt", 8, ((2, 2, 0), None))]


def test_requirements_files_of_a_root(tmp_path) -> None:
    write(tmp_path, "requirements-dev.txt", "torch>=2.3\n")
    write(tmp_path, "requirements/ci.txt", "torch==2.2.*\n")
    write(tmp_path, "docs/requirements.txt", "torch>=1.0\n")  # another folder: not this project's declaration
    requirement = declared_torch(tmp_path)
    assert requirement.floor.text == "torch==2.2.*" and requirement.below is None


def test_setup_cfg(tmp_path) -> None:
    path = write(tmp_path, "setup.cfg", """
        [metadata]
        name = x

        [options]
        install_requires =
            numpy
            # torch>=1.0 commented out
            torch>=2.1,<3; python_version >= "3.9"

        [options.extras_require]
        old = torch==1.13.1
    """)
    found = [(d.line, bounds(d.range)) for d in from_setup_cfg(path)]
    assert found == [(8, ((2, 1, 0), (3, 0, 0))), (11, ((1, 13, 1), (1, 13, 2)))]
    write(tmp_path, "setup.cfg", "[options\ninstall_requires = torch>=2.1\n")
    assert list(from_setup_cfg(path)) == []  # unreadable: skipped


def test_setup_py_literals_never_executed(tmp_path) -> None:
    marker = tmp_path / "executed"
    path = write(tmp_path, "setup.py", f"""
        from setuptools import setup
        open({str(marker)!r}, "w").close()
        REQUIRED = [
            "numpy",
            "torch>=2.0",
        ]
        setup(
            name="x",
            install_requires=REQUIRED,
            extras_require={{"old": ["torch>=1.12"], "dynamic": read("reqs.txt")}},
        )
    """)
    found = [(d.line, bounds(d.range)) for d in from_setup_py(path)]
    assert found == [(5, ((2, 0, 0), None)), (10, ((1, 12, 0), None))]
    assert not marker.exists()
    write(tmp_path, "setup.py", "import setuptools\nsetuptools.setup(install_requires=['torch>=2.3'])\n")
    assert [d.text for d in from_setup_py(path)] == ["torch>=2.3"]
    write(tmp_path, "setup.py", "setup(install_requires=read_requirements())\n")
    assert list(from_setup_py(path)) == []  # not a literal: nothing known
    write(tmp_path, "setup.py", "print 'python 2'\n")
    assert list(from_setup_py(path)) == []


def test_environment_yml(tmp_path) -> None:
    path = write(tmp_path, "environment.yml", """
        name: trainer
        channels:
          - pytorch
        dependencies:
          - python=3.10
          # - pytorch=1.8 (commented out)
          - "pytorch::pytorch>=1.12,<3"  # quoted, with a channel
          - pip
          - pip:
              - torch==2.0.1  # the pip sub-list holds PEP 508 requirements
              - tqdm
          - numpy
        variables:
          pytorch: "=1.0"
    """)
    found = [(d.line, bounds(d.range)) for d in from_environment_yml(path)]
    assert found == [(7, ((1, 12, 0), (3, 0, 0))), (10, ((2, 0, 1), (2, 0, 2)))]
    write(tmp_path, "environment.yml", "dependencies:\n- pytorch=2.1\n- pip:\n  - torch>=2.2\n")  # items at column 0
    assert [bounds(d.range) for d in from_environment_yml(path)] == [((2, 1, 0), (2, 2, 0)), ((2, 2, 0), None)]
    write(tmp_path, "environment.yml", "dependencies: [python=3.10, 'pytorch>=2.3']\n")
    assert [bounds(d.range) for d in from_environment_yml(path)] == [((2, 3, 0), None)]


def test_several_sources_take_the_lowest(tmp_path) -> None:
    write(tmp_path, "pyproject.toml", '[project]\ndependencies = ["torch>=2.2,<3"]\n')
    write(tmp_path, "requirements.txt", "torch>=2.0,<2.6\n")
    write(tmp_path, "environment.yml", "dependencies:\n  - pytorch=2.4\n")
    requirement = declared_torch(tmp_path)
    assert requirement.floor.text == "torch>=2.0,<2.6" and requirement.floor.where(tmp_path) == "requirements.txt:1"
    assert requirement.below == (3, 0, 0)
    write(tmp_path, "setup.py", "setup(install_requires=['torch'])\n")  # no floor: no say on it; no ceiling
    requirement = declared_torch(tmp_path)
    assert requirement.floor.text == "torch>=2.0,<2.6" and requirement.below is None


def test_project_root(tmp_path) -> None:
    write(tmp_path, "repo/requirements.txt", "torch>=2.1\n")
    write(tmp_path, "repo/src/pkg/train.py", "")
    assert project_root(tmp_path / "repo" / "src" / "pkg" / "train.py") == (tmp_path / "repo").resolve()
    (tmp_path / "repo" / "src" / ".git").mkdir()  # a repository inside: the search stops at its root
    assert project_root(tmp_path / "repo" / "src" / "pkg") is None
    write(tmp_path, "other/setup.cfg", "[options]\ninstall_requires = torch>=1.13\n")
    roots = roots_for([str(tmp_path / "repo" / "requirements.txt"), str(tmp_path / "other")], None)
    assert roots == [(tmp_path / "repo").resolve(), (tmp_path / "other").resolve()]
    assert project_torch(roots).floor.text == "torch>=1.13"
    assert roots_for([str(tmp_path / "other")], tmp_path / "repo") == [tmp_path / "repo"]  # the config's folder


# --- where the target comes from ------------------------------------------------------------------------------

def test_infer_target_torch(tmp_path, monkeypatch) -> None:
    write(tmp_path, "pyproject.toml", '[project]\nname = "x"\ndependencies = [\n  "torch>=1.13,<2",\n]\n')
    write(tmp_path, "train.py", "")
    monkeypatch.chdir(tmp_path)
    settings = Settings()
    infer_target_torch(settings, ["train.py"])
    assert (settings.target_torch_version, settings.torch_below) == ("1.13", "2.0")
    assert settings.target_torch_source == "torch>=1.13,<2 (pyproject.toml:4)"
    assert {rule.torch for rule in rules_for("train.py", [RULES_BY_CODE["AMP007"]], settings)} == {
        TorchSupport("1.13", "2.0")}
    given = Settings(target_torch_version="2.4", target_torch_source="--target-torch-version")
    infer_target_torch(given, ["train.py"])  # an explicit target wins; the requirements are not read
    assert (given.target_torch_version, given.torch_below, given.target_torch_source) == (
        "2.4", None, "--target-torch-version")
    write(tmp_path, "amplint.toml", 'target-torch-version = "2.2"\n')
    configured = load_settings()
    infer_target_torch(configured, ["train.py"])
    assert configured.target_torch_version == "2.2" and configured.target_torch_source.endswith("amplint.toml")
    nothing = Settings()
    infer_target_torch(nothing, [str(write(tmp_path, "elsewhere/.git/x", "").parents[1])])
    assert (nothing.target_torch_version, nothing.torch_below, nothing.target_torch_source) == (None, None, None)


def test_cache_keys_follow_the_torch_range(tmp_path) -> None:
    """A result computed for one torch range (its fixes and messages) is never served for another."""
    from amplint.cache import Cache

    cache = Cache(tmp_path / "cache", fingerprint="f")
    classes = [RULES_BY_CODE["AMP007"], RULES_BY_CODE["AMP001"]]
    keys = {cache.key(b"x", rules_for("t.py", classes, Settings(target_torch_version=floor, torch_below=below)))
            for floor, below in ((None, None), ("2.1", None), ("2.1", "3.0"), ("2.3", None))}
    assert len(keys) == 4


def test_many_paths_share_their_folders_root(tmp_path, monkeypatch) -> None:
    write(tmp_path, "requirements.txt", "torch>=2.2\n")
    paths = [str(write(tmp_path, f"a/b/c/f{index}.py", "")) for index in range(50)] + ["-", "a/missing.py"]
    monkeypatch.chdir(tmp_path)  # `-` (standard input) and relative paths start from here
    assert roots_for(paths, None) == [tmp_path.resolve()]


def test_a_file_reached_through_a_linked_folder_gets_its_real_projects_range(tmp_path, monkeypatch) -> None:
    """The range is the one of the project the file really lies in (as `requirements.project_root`, which resolves
    links), whatever folder above it is a link: one look per folder, not one per folder above it."""
    write(tmp_path, "old/requirements.txt", "torch>=1.13,<2\n")
    write(tmp_path, "old/src/deep/train.py", "")
    write(tmp_path, "new/requirements.txt", "torch>=2.3\n")
    write(tmp_path, "new/plain/train.py", "")
    (tmp_path / "new" / "vendored").symlink_to(tmp_path / "old" / "src", target_is_directory=True)
    monkeypatch.chdir(tmp_path / "new")
    settings = Settings(torch_inferred=True)  # no target given: each file's project says
    assert settings.torch_range_for("vendored/deep/train.py") == ("1.13", "2.0")
    assert settings.torch_range_for("plain/train.py") == ("2.3", None)
    assert settings.torch_range_for(str(tmp_path / "old" / "src" / "deep" / "train.py")) == ("1.13", "2.0")
    assert project_root(tmp_path / "new" / "vendored" / "deep" / "train.py") == (tmp_path / "old").resolve()


def run(args: list[str], cwd: Path, monkeypatch):
    monkeypatch.chdir(cwd)
    return CliRunner().invoke(main, args, catch_exceptions=False)


def test_command_line_wins_over_requirements(tmp_path, monkeypatch) -> None:
    write(tmp_path, "requirements.txt", "torch>=2.1\n")
    write(tmp_path, "train.py", "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n")
    inferred = run(["check", "--no-cache", "--select", "AMP007", "--output-format", "full", "train.py",
                    "--exit-non-zero-on-warning"], tmp_path, monkeypatch)  # AMP007 is a warning
    assert inferred.exit_code == 1 and "[*]" not in inferred.output and "torch 2.1" in inferred.output
    given = run(["check", "--no-cache", "--select", "AMP007", "--target-torch-version", "2.4", "--fix", "train.py"],
                tmp_path, monkeypatch)
    assert given.exit_code == 0 and 'torch.amp.GradScaler("cuda")' in (tmp_path / "train.py").read_text()


# --- the project fixtures -------------------------------------------------------------------------------------

def project_files(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*.py"))


@pytest.mark.parametrize("fixture", PROJECTS, ids=[p.name for p in PROJECTS])
def test_project_fixture(fixture: Path, tmp_path, monkeypatch) -> None:
    project = tmp_path / "project"
    shutil.copytree(fixture / "project", project)
    (project / ".git").mkdir()  # the copy is a repository of its own: nothing above it is read
    expected = {(str(path.relative_to(project)), code, row, column)
                for path in project_files(project)
                for code, row, column in expected_marks(path.read_text(encoding="utf-8"))}
    result = run(["check", "--no-cache", "--select", "AMP007", "--output-format", "json", "."], project, monkeypatch)
    reported = {(str(Path(d["filename"]).resolve().relative_to(project.resolve())), d["code"],
                 d["location"]["row"], d["location"]["column"]) for d in json.loads(result.output)}
    assert reported == expected
    originals = {path: path.read_text(encoding="utf-8") for path in project_files(project)}
    run(["check", "--no-cache", "--select", "AMP007", "--fix", "."], project, monkeypatch)
    for path, original in originals.items():
        fixed = fixture / "fixed" / path.relative_to(project)
        after = path.read_text(encoding="utf-8")
        assert after == (fixed.read_text(encoding="utf-8") if fixed.exists() else original), path.name
        compile(after, str(path), "exec")


def test_torch_1x_project_gets_no_torch_amp() -> None:
    """The fixture the issue names: `torch>=1.13,<2` gets no `torch.amp.GradScaler` (test_project_fixture checks
    that its file has no finding and stays unchanged)."""
    fixture = REPO / "fixtures" / "AMP007-deprecated-amp-api" / "projects" / "torch1x_pyproject"
    assert "torch>=1.13,<2" in (fixture / "project" / "pyproject.toml").read_text()
    assert not (fixture / "fixed").exists()
    assert "torch.cuda.amp.GradScaler()" in (fixture / "project" / "src" / "train.py").read_text()


# --- AMP007's argument mapping, measured with torch -----------------------------------------------------------

def migrate(source: str, support: TorchSupport = TorchSupport()) -> str:
    rule = RULES_BY_CODE["AMP007"]()
    rule.torch = support
    outcome = fix_text(source, "snippet.py", rules=[rule])
    assert outcome.error is None
    compile(outcome.text, "snippet.py", "exec")  # CPython, not only libcst
    return outcome.text


def build(source: str) -> object:
    """Run a snippet that binds `made`; FutureWarnings are not errors here (the legacy side emits them)."""
    torch = pytest.importorskip("torch")
    namespace = {"torch": torch}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(source, "snippet.py", "exec"), namespace)
    return namespace["made"]


def autocast_state(region) -> tuple:
    return region.device, region.fast_dtype, region._enabled, region._cache_enabled


AUTOCAST_CALLS = [
    "torch.cuda.amp.autocast()",
    "torch.cuda.amp.autocast(False)",
    "torch.cuda.amp.autocast(True, torch.bfloat16)",
    "torch.cuda.amp.autocast(True, torch.bfloat16, False)",
    "torch.cuda.amp.autocast(enabled=flag, cache_enabled=False)",
    "torch.cpu.amp.autocast()",
    "torch.cpu.amp.autocast(flag, dtype=torch.float16)",
    "torch.cpu.amp.autocast(cache_enabled=False)",
]


NESTED = """
import torch
flag = True
with torch.autocast({device!r}, dtype=torch.{other}):
    region = {call}
    with region:
        made = (torch.get_autocast_dtype({device!r}), torch.autocast({device!r}).fast_dtype)
"""


@pytest.mark.parametrize("call", AUTOCAST_CALLS)
@pytest.mark.parametrize("support", [TorchSupport(), TorchSupport("1.13")], ids=["torch.amp", "torch.autocast"])
def test_migrated_autocast_builds_the_same_region(call: str, support: TorchSupport) -> None:
    """Also inside an enclosing region of the other dtype: the legacy default dtype is written out, so the bare
    new spelling's "current dtype" does not take over, neither in the region nor (a disabled one too) in a region
    opened inside it without a dtype. Measured on CPU; the CUDA dtype state is kept without a GPU as well."""
    legacy = f"import torch\nflag = True\nmade = {call}\n"
    fixed = migrate(legacy, support)
    assert "cuda.amp" not in fixed and "cpu.amp" not in fixed
    assert autocast_state(build(fixed)) == autocast_state(build(legacy))
    device = "cuda" if "cuda.amp" in call else "cpu"
    other = "bfloat16" if device == "cuda" else "float16"  # not the legacy default
    migrated_call = fixed.splitlines()[-1].split("= ", 1)[1]
    assert build(NESTED.format(device=device, other=other, call=migrated_call)) == \
        build(NESTED.format(device=device, other=other, call=call))


@pytest.mark.parametrize("call", [
    "torch.cuda.amp.GradScaler()",
    "torch.cpu.amp.GradScaler(1024.0, 3.0, 0.25, 10, True)",
    "torch.cpu.amp.GradScaler(2.0**8, growth_interval=7)",
    "torch.cpu.amp.GradScaler(init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000, "
    "enabled=False)",
])
def test_migrated_scaler_builds_the_same_scaler(call: str) -> None:
    legacy = f"import torch\nmade = {call}\n"
    fixed = migrate(legacy)
    assert "torch.amp.GradScaler(" in fixed
    old, new = build(legacy), build(fixed)
    assert type(new).__name__ == "GradScaler" and new.state_dict() == old.state_dict()
    assert {k: v for k, v in vars(new).items()} == {k: v for k, v in vars(old).items()}


def test_migrated_custom_fwd_keeps_the_function() -> None:
    legacy = textwrap.dedent("""
        import torch
        from torch.cuda.amp import custom_bwd, custom_fwd

        class Double(torch.autograd.Function):
            @staticmethod
            @custom_fwd(cast_inputs=torch.float32)
            def forward(ctx, x):
                return x * 2

            @staticmethod
            @custom_bwd
            def backward(ctx, grad):
                return grad * 2

        x = torch.ones(3, requires_grad=True)
        y = Double.apply(x)
        y.sum().backward()
        made = (y.tolist(), x.grad.tolist())
    """)
    fixed = migrate(legacy)
    assert '@custom_fwd(cast_inputs=torch.float32, device_type="cuda")' in fixed
    assert '@custom_bwd(device_type="cuda")' in fixed and "from torch.amp import" in fixed
    assert build(fixed) == build(legacy) == ([2.0, 2.0, 2.0], [2.0, 2.0, 2.0])
    assert migrate(legacy, TorchSupport("2.3")) == legacy  # torch.amp.custom_fwd(device_type=) needs 2.4


@pytest.mark.parametrize("call", [
    "torch.cuda.amp.autocast(True, enabled=flag)",
    "torch.cuda.amp.autocast(False, torch.float16, dtype=torch.bfloat16)",
    "torch.cuda.amp.autocast(device_type='cuda')",
    "torch.cuda.amp.autocast(True, torch.float16, True, None)",
    "torch.cuda.amp.GradScaler(1024.0, init_scale=2.0)",
    "torch.cuda.amp.custom_fwd(f, fwd=f)",
])
def test_calls_that_raise_already_get_no_fix(call: str) -> None:
    """A positional-and-keyword duplicate, an unknown keyword, one argument too many: the call raises
    TypeError as written; the rewrite would not even compile for some. Reported, left unchanged."""
    source = f"import torch\n\ndef f(x):\n    return x\n\nflag = True\nmade = {call}\n"
    (diagnostic,) = lint_text(source, "snippet.py", [RULES_BY_CODE["AMP007"]()]).diagnostics
    assert diagnostic.fix is None and "TypeError" in diagnostic.help
    assert migrate(source) == source
    with pytest.raises(TypeError):
        build(source)


def test_floor_decides_the_spelling() -> None:
    source = "import torch\nscaler = torch.cuda.amp.GradScaler()\nwith torch.cuda.amp.autocast(flag):\n    pass\n"
    assert migrate(source, TorchSupport("2.4")) == migrate(source) == (
        'import torch\nscaler = torch.amp.GradScaler("cuda")\n'
        'with torch.amp.autocast("cuda", enabled=flag, dtype=torch.float16):\n    pass\n')
    assert migrate(source, TorchSupport("2.2")) == (
        "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
        'with torch.amp.autocast("cuda", enabled=flag, dtype=torch.float16):\n    pass\n')
    assert migrate(source, TorchSupport("1.12")) == (
        "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
        'with torch.autocast("cuda", enabled=flag, dtype=torch.float16):\n    pass\n')
    assert migrate(source, TorchSupport("1.9")) == source  # no torch.autocast before 1.10
    rule = RULES_BY_CODE["AMP007"]()
    rule.torch = TorchSupport("1.13", "2.0")
    assert lint_text(source, "snippet.py", [rule]).diagnostics == []  # no supported torch warns
    rule.torch = TorchSupport("1.13")
    helps = [d.help for d in lint_text(source, "snippet.py", [rule]).diagnostics]
    assert any("`torch.amp.GradScaler` exists only from torch 2.3 on and the project supports torch 1.13" in h
               for h in helps)


def test_from_imports_follow_the_floor() -> None:
    source = "import torch\nfrom torch.cuda.amp import GradScaler, autocast\n\nscaler = GradScaler()\n" \
             "with autocast():\n    pass\n"
    assert migrate(source, TorchSupport("1.12")) == (
        "import torch\nfrom torch.cuda.amp import GradScaler\nfrom torch import autocast\n\n"
        'scaler = GradScaler()\nwith autocast("cuda", dtype=torch.float16):\n    pass\n')
    module = "import torch\nimport torch.cuda.amp as amp\n\nscaler = amp.GradScaler()\nwith amp.autocast():\n    pass\n"
    assert migrate(module, TorchSupport("2.1")) == (
        "import torch\nimport torch.cuda.amp as amp\n\nscaler = amp.GradScaler()\n"
        'with torch.amp.autocast("cuda", dtype=torch.float16):\n    pass\n')


# --- the floor gates only what needs a version ----------------------------------------------------------------

BUGGY_OLD_FLOOR = """\
import torch


def train(model, optimizer, loader):
    scaler = torch.cuda.amp.GradScaler()
    for x, y in loader:
        with torch.cuda.amp.autocast():
            loss = model(x, y)
        scaler.scale(loss).backward()
        optimizer.step()  # expect: AMP008
        optimizer.zero_grad()
        scaler.update()
"""


def test_an_old_declared_floor_turns_no_bug_rule_off(tmp_path, monkeypatch) -> None:
    """`torch>=1.0` beside code calling `torch.cuda.amp`: the bug rules still report (a bug is a bug on every torch
    that runs the code); the deprecation rule too (torch >= 2.4 is supported, and warns)."""
    write(tmp_path, "requirements.txt", "torch>=1.0\n")
    write(tmp_path, "train.py", BUGGY_OLD_FLOOR)
    (tmp_path / ".git").mkdir()
    result = run(["check", "--no-cache", "--output-format", "json", "train.py"], tmp_path, monkeypatch)
    codes = sorted({d["code"] for d in json.loads(result.output)})
    assert codes == ["AMP007", "AMP008"], result.output
    classes = list(RULES_BY_CODE.values())
    for target in ("1.0", "1.5", "1.9"):
        chosen = {rule.code for rule in rules_for("train.py", classes, Settings(target_torch_version=target))}
        assert {f"AMP0{n:02d}" for n in range(7, 15)} <= chosen, target


def test_old_floor_shows_no_rule_as_off(tmp_path, monkeypatch) -> None:
    write(tmp_path, "requirements.txt", "torch>=1.0\n")
    write(tmp_path, "train.py", BUGGY_OLD_FLOOR)
    (tmp_path / ".git").mkdir()
    shown = run(["check", "--show-settings", "train.py"], tmp_path, monkeypatch).output
    from amplint import rules as registry

    assert "it needs torch" not in shown
    assert f"rules enabled ({len(registry.select(None, [], []))} of" in shown


@pytest.mark.parametrize(("code", "floor"), [
    ("from torch.amp import GradScaler\n", "2.3"),
    ("import torch.amp\n", "1.12"),
    ("AUTOCAST = torch.amp.autocast\n", "1.12"),
    ("AUTOCAST = torch.autocast\n", "1.10"),
    ("from torch.cuda.amp import GradScaler\n", "1.6"),
    ("from torch.amp import custom_fwd\n", "2.4"),
    # not shown: behind a shim, a condition, in a function, or only in a comment or a string
    ("try:\n    from torch.amp import GradScaler\nexcept ImportError:\n    from torch.cuda.amp import GradScaler\n",
     None),
    ("if hasattr(torch, 'amp'):\n    from torch.amp import GradScaler\n", None),
    ("AUTOCAST = torch.amp.autocast if NEW else torch.cuda.amp.autocast\n", None),
    ("USE = NEW and torch.amp.GradScaler\n", None),
    ("def f():\n    return torch.amp.GradScaler('cuda')\n", None),
    ("# from torch.amp import GradScaler\nNOTE = 'torch.amp.GradScaler'\n", None),
])
def test_the_floor_a_module_shows(code: str, floor: str | None) -> None:
    import libcst

    from amplint.facts import ModuleFacts
    from amplint.facts.versions import shown_floor

    assert shown_floor(ModuleFacts(libcst.parse_module("import torch\n" + code))) == floor


RAISED = """\
import torch
from torch.amp import GradScaler

scaler = GradScaler("cuda")


def step(model, x):
    with torch.cuda.amp.autocast():
        return model(x)
"""


def test_the_code_raises_the_declared_floor(tmp_path, monkeypatch) -> None:
    """`torch>=1.13` declared, but the module imports `torch.amp.GradScaler` (torch >= 2.3) whenever it runs: the
    fix may write `torch.amp.autocast` (2.0), not only `torch.autocast`."""
    write(tmp_path, "requirements.txt", "torch>=1.13\n")
    path = write(tmp_path, "train.py", RAISED)
    (tmp_path / ".git").mkdir()
    run(["check", "--no-cache", "--select", "AMP007", "--fix", "train.py"], tmp_path, monkeypatch)
    assert 'with torch.amp.autocast("cuda", dtype=torch.float16):' in path.read_text()
    shimmed = RAISED.replace("from torch.amp import GradScaler\n", "try:\n    from torch.amp import GradScaler\n"
                             "except ImportError:\n    from torch.cuda.amp import GradScaler\n")
    path.write_text(shimmed, encoding="utf-8")
    run(["check", "--no-cache", "--select", "AMP007", "--fix", "train.py"], tmp_path, monkeypatch)
    assert 'with torch.autocast("cuda", dtype=torch.float16):' in path.read_text()  # the declared 1.13 holds


def test_the_code_never_lowers_nor_invents_a_floor() -> None:
    assert TorchSupport("2.4").raised_to("1.6") == TorchSupport("2.4")
    assert TorchSupport("1.13", "3.0").raised_to("2.3") == TorchSupport("2.3", "3.0")
    assert TorchSupport().raised_to("2.3") == TorchSupport()  # unknown stays unknown: every spelling allowed
    assert TorchSupport("2.1").raised_to(None) == TorchSupport("2.1")
