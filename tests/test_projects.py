"""Project fixtures: folders of several modules whose findings span modules (`fixtures/<CODE>-<name>/projects/<case>/`).

Every `.py` file of a case marks its expected findings as the rule fixtures do (`# expect: CODE:COL`); a case
without marks must report nothing. Each case is linted as a directory by the command line (phase 1 indexes the
folder, phase 2 asks the index about calls that leave a module), and each of its files alone, which must report
only what needs no other file (a subset of the marks).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from amplint import parallel
from amplint.cli import main
from amplint.config import Settings
from amplint.index import build
from amplint.index.build import build_index
from amplint.outcome import Mode
from amplint.rules import ALL_RULES
from amplint.index.project import module_name

from test_fixtures import NOT_COMPARED_IN_CORE, expected_marks

REPO = Path(__file__).resolve().parents[1]
# The torch-floor cases of AMP007 (`project/` beside `fixed/`) are tests/test_torch_floor.py's: what crosses files
# there is the declared torch version, not a call.
CASES = sorted(path for path in (REPO / "fixtures").glob("AMP*-*/projects/*")
               if path.is_dir() and not (path / "project").is_dir())


def case_id(path: Path) -> str:
    return path.relative_to(REPO / "fixtures").as_posix()


def compared(case: Path, code: str) -> bool:
    return code not in NOT_COMPARED_IN_CORE or case.parent.parent.name.startswith(code)


def marks_of(case: Path) -> set[tuple[str, str, int, int | None]]:
    return {(path.relative_to(case).as_posix(), code, row, column)
            for path in sorted(case.rglob("*.py")) for code, row, column in expected_marks(path.read_text())
            if compared(case, code)}


def reported(case: Path) -> list[dict]:
    result = CliRunner().invoke(main, ["check", "--no-cache", "--output-format", "json", str(case)],
                                catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    return [d for d in json.loads(result.output) if compared(case, d["code"])]


def matches(found: list[dict], case: Path, marks) -> bool:
    got = {(Path(d["filename"]).resolve().relative_to(case.resolve()).as_posix(), d["code"], d["location"]["row"],
            d["location"]["column"]) for d in found}
    wanted = {(path, code, row, column) for path, code, row, column in marks}
    loose = {(path, code, row) for path, code, row, column in marks if column is None}
    return {item for item in got if item[:3] not in loose} == {item for item in wanted if item[3] is not None} and \
        {item[:3] for item in got} >= loose and len(got) == len(wanted)


def test_there_are_project_cases():
    assert len(CASES) >= 8
    assert any(marks_of(case) for case in CASES) and any(not marks_of(case) for case in CASES)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_project_as_a_directory(case):
    found = reported(case)
    assert matches(found, case, marks_of(case)), [(d["filename"], d["code"], d["location"], d["message"])
                                                  for d in found]


# Rules whose findings need no other module by their contract: AMP006's fp32 region is itself the evidence that
# its function runs under autocast, wherever the callers are.
LOCAL_BY_CONTRACT = ("AMP006",)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_findings_span_modules_only_with_the_index(case):
    """Each marked finding needs another module: linted with an index of its own file only, it is not reported
    (the project fixtures test what crosses modules; single-module cases belong in flagged/)."""
    from amplint.engine import lint_text
    from amplint.rules import ALL_RULES

    if case.parent.parent.name.startswith(LOCAL_BY_CONTRACT):
        pytest.skip("the rule's findings rest on the module alone; its project cases check a split changes nothing")
    for path in sorted(case.rglob("*.py")):
        marks = expected_marks(path.read_text())
        if not marks:
            continue
        alone = build_index([str(path)], lambda p: Path(p).read_text())
        diagnostics = lint_text(path.read_text(), str(path), [rule() for rule in ALL_RULES],
                                project=alone.view(str(path))).diagnostics
        assert not {(d.code, d.location.row) for d in diagnostics} & {(code, row) for code, row, _ in marks}, path


def test_module_names_follow_packages(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    for name in ("pkg/__init__.py", "pkg/sub/__init__.py", "pkg/sub/mod.py", "script.py"):
        (tmp_path / name).write_text("")
    assert module_name(str(tmp_path / "pkg/sub/mod.py")) == "pkg.sub.mod"
    assert module_name(str(tmp_path / "pkg/sub/__init__.py")) == "pkg.sub"
    assert module_name(str(tmp_path / "script.py")) == "script"


# The cache keys a result by what it read of other files ---------------------------------------------------------
ENGINE = """\
import torch


def train_one_epoch(model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda")
    for inputs in loader:
        with torch.autocast("cuda"):
            loss = model(inputs).mean()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
"""
MAIN = """\
from engine import train_one_epoch


def main(model, optimizer, loader, epochs):
    for epoch in range(epochs):
        train_one_epoch(model, optimizer, loader)
"""
UNRELATED = "import torch\n\n\ndef evaluate(model, x):\n    with torch.no_grad():\n        return model(x)\n"


@pytest.fixture
def analysed(monkeypatch):
    """The files the engine analyses (a cache hit spares them)."""
    from amplint import pipeline

    calls = []
    original = pipeline.lint_text

    def counting(text, path, rules, **options):
        calls.append(Path(path).name)
        return original(text, path, rules, **options)

    monkeypatch.setattr(pipeline, "lint_text", counting)
    return calls


def _cached_run(tree: Path, cache: Path) -> set[tuple[str, str]]:
    result = CliRunner().invoke(main, ["check", str(tree), "--cache-dir", str(cache), "--output-format", "json"],
                                catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    return {(Path(d["filename"]).name, d["code"]) for d in json.loads(result.output)}


def test_editing_a_caller_relints_the_callee_and_nothing_else(tmp_path, analysed):
    tree, cache = tmp_path / "tree", tmp_path / "cache"
    tree.mkdir()
    for name, text in (("engine.py", ENGINE), ("main.py", MAIN), ("unrelated.py", UNRELATED)):
        (tree / name).write_text(text)
    assert _cached_run(tree, cache) == {("engine.py", "AMP004")}
    analysed.clear()
    assert _cached_run(tree, cache) == {("engine.py", "AMP004")} and analysed == []  # all hits
    # the caller no longer loops: engine.py's finding came from main.py, so engine.py is analysed again
    (tree / "main.py").write_text(MAIN.replace("for epoch in range(epochs):\n        ", ""))
    assert _cached_run(tree, cache) == set()
    assert "engine.py" in analysed and "unrelated.py" not in analysed
    analysed.clear()
    (tree / "unrelated.py").write_text(UNRELATED + "\n\nprint(1)\n")  # reads nothing of the others
    assert _cached_run(tree, cache) == set()
    assert "engine.py" not in analysed and "main.py" not in analysed


def test_a_new_caller_elsewhere_relints_the_callee(tmp_path, analysed):
    tree, cache = tmp_path / "tree", tmp_path / "cache"
    tree.mkdir()
    (tree / "engine.py").write_text(ENGINE)
    assert _cached_run(tree, cache) == set()
    (tree / "main.py").write_text(MAIN)
    analysed.clear()
    assert _cached_run(tree, cache) == {("engine.py", "AMP004")} and "engine.py" in analysed


def test_reaches_reads_no_module_past_its_depth(tmp_path):
    """A chain of calls one module per call: `reaches` looks `MAX_DEPTH` calls deep and reads the modules of those
    functions only, so a cached answer does not depend on (is not re-linted for) the module one call further."""
    from amplint.index.project import MAX_DEPTH, Target

    count = MAX_DEPTH + 2
    for i in range(count):
        body = f"from m{i + 1} import f{i + 1}\n\n\ndef f{i}(x):\n    return f{i + 1}(x)\n" if i + 1 < count else \
            f"import torch\n\n\ndef f{i}(p):\n    torch.nn.utils.clip_grad_norm_(p, 1.0)\n"
        (tmp_path / f"m{i}.py").write_text(body)
    paths = [str(tmp_path / f"m{i}.py") for i in range(count)]
    view = build_index(paths, lambda p: Path(p).read_text()).view(paths[0])
    assert view.reaches(Target(paths[0], "f0"), ("clip",)) is None  # the clip is MAX_DEPTH + 1 calls away
    assert sorted(Path(p).name for p in view.read_modules) == [f"m{i}.py" for i in range(1, MAX_DEPTH + 1)]
    near = build_index(paths[1:], lambda p: Path(p).read_text()).view(paths[1])
    chain, fact = near.reaches(Target(paths[1], "f1"), ("clip",))
    assert fact == "clip" and [t.qualname for t in chain] == [f"f{i}" for i in range(1, count)]


def test_the_second_round_does_not_look_for_callers_of_an_init(tmp_path):
    """A class whose `__init__` opens a disabled region is built as `Cls(...)`, which the index does not resolve to
    `__init__`: a file calling some `__init__` (`super().__init__()`) and importing the module is no caller of it
    (the files of a large project mostly are such files); a caller of a plain function opening one still is."""
    (tmp_path / "blocks.py").write_text(
        "import torch\n\n\nclass Island:\n    def __init__(self, model):\n"
        "        with torch.autocast('cuda', enabled=False):\n            self.out = model(torch.zeros(1))\n\n\n"
        "def island(model):\n    with torch.autocast('cuda', enabled=False):\n        return model(torch.zeros(1))\n")
    (tmp_path / "layer.py").write_text(
        "from blocks import Island\n\n\nclass Layer(Island):\n    def __init__(self, model):\n"
        "        super().__init__(model)\n")
    (tmp_path / "run.py").write_text("from blocks import island\n\n\ndef run(model):\n    return island(model)\n")
    paths = sorted(str(path) for path in tmp_path.glob("*.py"))
    project = build_index(paths, lambda path: Path(path).read_text())
    assert {Path(path).name for path in project.indexed} == {"blocks.py", "run.py"}


def _second_round_tree(tree: Path) -> list[str]:
    """engine.py builds a scaler per call; main.py (no AMP word: found by the second round) calls it per epoch
    through a launcher of its own; enough unrelated files that a run takes the worker pool."""
    tree.mkdir()
    (tree / "engine.py").write_text(ENGINE)
    (tree / "main.py").write_text(MAIN.replace("def main(", "def launch(model, optimizer, loader):\n"
                                              "    train_one_epoch(model, optimizer, loader)\n\n\ndef main(")
                                   .replace("        train_one_epoch(model, optimizer, loader)\n",
                                            "        launch(model, optimizer, loader)\n"))
    for i in range(parallel.SERIAL_BELOW):
        (tree / f"other{i}.py").write_text(UNRELATED + f"\n\ndef train_one_epoch_{i}():\n    return {i}\n")
    return sorted(str(path) for path in tree.glob("*.py"))


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_second_round_finds_callers_in_workers_as_in_one_process(tmp_path, jobs):
    paths = _second_round_tree(tmp_path / "tree")
    project = parallel.index_project(paths, jobs, Settings())
    assert {Path(p).name for p in project.indexed} == {"engine.py", "main.py"}
    outcomes = parallel.lint_paths(paths, ALL_RULES, Settings(), Mode(), jobs=jobs)
    assert [(Path(o.path).name, d.code) for o in outcomes for d in o.diagnostics] == [("engine.py", "AMP004")]


def test_a_second_round_chunk_whose_worker_fails_is_looked_at_here(tmp_path, monkeypatch):
    paths = _second_round_tree(tmp_path / "tree")

    def lost(paths, found):
        raise OSError("worker lost")

    if parallel._context().get_start_method() != "fork":
        pytest.skip("the workers must be forked to fail as patched here")
    monkeypatch.setattr(parallel, "_scan_chunk", lost)  # the forked workers fail every round's chunk
    looked_here = []
    real = build.local_scan

    def counted(*args):
        scan = real(*args)
        return lambda paths, found: looked_here.append(len(paths)) or scan(paths, found)

    monkeypatch.setattr(build, "local_scan", counted)
    project = parallel.index_project(paths, 2, Settings())
    assert {Path(p).name for p in project.indexed} == {"engine.py", "main.py"}
    assert sum(looked_here) >= 1  # the files a round must read (their import statements may reach its functions)


def test_the_names_a_wrapper_is_imported_as_do_not_depend_on_what_was_asked_before():
    """The names a scaler-wrapper class is written as come from every file's import statements (a package's
    `__init__` renaming it on re-export, a file the index does not take up front), whether or not the call sites of
    a name were asked first (they keep the aliases of the indexed files' records apart): a worker of a pool asks in
    another order than one process does."""
    case = REPO / "fixtures" / "AMP004-scaler-per-iteration" / "projects" / "wrapper_renamed_on_reexport"
    paths = sorted(str(path) for path in case.rglob("*.py"))
    for first_calls in (False, True):
        project = build_index(paths, lambda path: Path(path).read_text(encoding="utf-8"))
        project.importers(paths[0])  # the tables of every file's import statements
        if first_calls:
            project.calls_named("step")
        assert {"NativeScaler", "LossScaler"} <= project.scaler_wrapper_names()


def test_who_imports_a_module_is_answered_without_building_the_importers_records(tmp_path):
    """The importers of a module are found from each candidate's import statements, read from its tree alone (an
    import table); its record (what its functions do and call, the costly part) is not built for that, and the
    answer is the one the records give."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "engine.py").write_text("def step(loss, optimizer):\n    loss_scaler(loss, optimizer)\n")
    for i in range(4):
        (tmp_path / f"train{i}.py").write_text(
            ("from pkg import engine\n" if i % 2 else "import pkg.engine as engine\n") +
            f"engine.loss_scaler = object()\n\n\ndef run{i}(x):\n    return engine.step(x, None)\n")
    (tmp_path / "other.py").write_text("import engine_like\n")
    paths = sorted(str(path) for path in tmp_path.rglob("*.py"))
    engine = str(tmp_path / "pkg" / "engine.py")
    project = build_index(paths, lambda path: Path(path).read_text(encoding="utf-8"))
    found = project.importers(engine)
    assert [Path(path).name for path in found] == [f"train{i}.py" for i in range(4)]
    assert not set(found) & set(project.files)  # no record built to say so
    for path in paths:
        project.record(path)
    project._forget_answers()
    assert project.importers(engine) == found


def test_who_imports_a_module_parses_only_the_candidates_whose_import_lines_may_name_it(tmp_path, monkeypatch):
    """A file is a candidate importer of `pkg/train.py` when a word of its import lines is `train`; most such
    files import another module of that name. Their import statements, as the text holds them, are each parsed
    alone first: only a candidate whose statements may import the module is parsed whole, and the answer is the
    one parsing every candidate gives, statements the look cannot read (`try: import x`, a backslash, a
    docstring quoting an import) included."""
    from amplint.index import project as index_project_module

    for folder in ("pkg", "other"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text("")
        (tmp_path / folder / "train.py").write_text("def run():\n    return 1\n")
    files = {
        "imports_other.py": "from other import train\n",
        "imports_other_too.py": "import other.train as train\n",
        "imports_it.py": "from pkg import train\n",
        "imports_it_parenthesized.py": "from pkg import (\n    train,\n)\n",
        "imports_it_continued.py": "from pkg \\\n    import train\n",
        "imports_it_inline.py": "try: from pkg import train\nexcept ImportError: pass\nimport other.train\n",
        "quotes_it.py": '"""Usage:\n\nfrom pkg import train\n"""\nfrom other import train\n',
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    paths = sorted(str(path) for path in tmp_path.rglob("*.py"))
    target = str(tmp_path / "pkg" / "train.py")
    parsed: list[str] = []
    original = index_project_module.imports_screened
    monkeypatch.setattr(index_project_module, "imports_screened",
                        lambda path, text, screener=None: parsed.append(Path(path).name) or original(path, text))
    found = build_index(paths, lambda path: Path(path).read_text(encoding="utf-8")).importers(target)
    assert sorted(Path(path).name for path in found) == ["imports_it.py", "imports_it_continued.py",
                                                          "imports_it_inline.py", "imports_it_parenthesized.py"]
    assert "imports_other.py" not in parsed and "imports_other_too.py" not in parsed
    assert "quotes_it.py" in parsed  # its docstring's line may be an import statement: its tree says it is not
    monkeypatch.setattr(index_project_module.ProjectIndex, "_may_import", lambda self, candidate, path: True)
    assert build_index(paths, lambda path: Path(path).read_text(encoding="utf-8")).importers(target) == found
