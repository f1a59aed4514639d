"""Where code lives never changes a finding.

Every flagged and clean single-file fixture with two or more top-level functions or classes is written again as a
project, one definition per module (`m_<name>.py` with the file's imports and explicit imports of the other
definitions; the rest of the module code in `main.py`), and must report the same codes as the one file. A
module-level assignment that a definition reads (`scaler = GradScaler()` read in `train_step`) goes to
`m_state.py`, which every module imports it from, so that the split is still the same program; a case whose
definitions read a name bound otherwise at module level (a loop, a `with`) is left out, not compared.

The cases that still differ are listed in `KNOWN_TO_DIFFER` with the reason; a listed case that starts to agree
fails the test, so the list only shrinks.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from amplint.cli import main

REPO = Path(__file__).resolve().parents[1]
CODES = {f"AMP{n:03d}" for n in range(1, 15)}

# (rule folder, kind, file) -> why the split still differs
KNOWN_TO_DIFFER: dict[tuple[str, str, str], str] = {}


def _definitions(tree: ast.Module) -> list[ast.stmt]:
    return [node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def _globals_read(tree: ast.Module) -> tuple[list[ast.stmt], bool]:
    """The module-level assignments binding names that a definition reads, and whether some name a definition
    reads is bound at module level otherwise (then the case is not split)."""
    definitions = _definitions(tree)
    names = {definition.name for definition in definitions}
    read = {child.id for definition in definitions for child in ast.walk(definition)
            if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Load)}
    moved, other = [], False
    for node in tree.body:
        if node in definitions or isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if set(_bound(node)) & read:
            uses_definitions = any(isinstance(child, ast.Name) and child.id in names for child in ast.walk(node))
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and not uses_definitions:
                moved.append(node)
            else:
                other = True
    return moved, other


def _bound(node: ast.stmt) -> list[str]:
    return sorted({child.id for child in ast.walk(node)
                   if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store)})


def split(text: str, folder: Path, package: bool = False) -> None:
    """One module per top-level definition, the globals they read in `m_state.py`, the rest in `main.py`. With
    `package`, the modules are those of a package `pkg` (importing each other as `pkg.m_x`) whose `__init__`
    re-exports every definition, and `main.py` imports them from the package."""
    tree = ast.parse(text)
    prefix = "pkg." if package else ""
    modules = folder / "pkg" if package else folder
    modules.mkdir(exist_ok=True)
    imports = [ast.get_source_segment(text, node) for node in tree.body
               if isinstance(node, (ast.Import, ast.ImportFrom))]
    definitions = _definitions(tree)
    moved, _ = _globals_read(tree)
    names = [node.name for node in definitions]
    state = [f"from {prefix}m_state import {name}" for node in moved for name in _bound(node)]
    if moved:
        (modules / "m_state.py").write_text("\n".join(imports + [ast.get_source_segment(text, n) for n in moved]) + "\n")
    for node in definitions:
        own = [f"from {prefix}m_{other} import {other}" for other in names if other != node.name]
        decorators = "".join(f"@{ast.get_source_segment(text, d)}\n" for d in node.decorator_list)
        segment = ast.get_source_segment(text, node)
        if not segment.lstrip().startswith("@"):
            segment = decorators + segment
        (modules / f"m_{node.name}.py").write_text("\n".join(imports + state + own) + "\n\n\n" + segment + "\n")
    if package:
        (modules / "__init__.py").write_text("".join(f"from .m_{name} import {name}\n" for name in names))
    rest = [ast.get_source_segment(text, node) for node in tree.body if node not in definitions
            and node not in moved and not isinstance(node, (ast.Import, ast.ImportFrom))]
    from_package = [f"from pkg import {name}" for name in names]
    (folder / "main.py").write_text("\n".join(
        imports + state + (from_package if package else [f"from m_{name} import {name}" for name in names]) + rest)
        + "\n")


def _cases() -> list[Path]:
    found = []
    for path in sorted((REPO / "fixtures").glob("AMP*-*/*/*.py")):
        if path.parent.name not in ("flagged", "clean"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if len(_definitions(tree)) >= 2 and not _globals_read(tree)[1]:
            found.append(path)
    return found


CASES = _cases()


def codes(path: Path) -> set[str]:
    result = CliRunner().invoke(main, ["check", "--no-cache", "--exit-zero", "--output-format", "json", str(path)],
                                catch_exceptions=False)
    return {d["code"] for d in json.loads(result.output)} & CODES


@pytest.mark.parametrize("package", [False, True], ids=["modules", "package"])
@pytest.mark.parametrize("case", CASES, ids=lambda path: f"{path.parent.parent.name}/{path.parent.name}/{path.name}")
def test_split_gives_the_same_codes(case, package, tmp_path):
    split(case.read_text(encoding="utf-8"), tmp_path, package)
    alone, spread = codes(case), codes(tmp_path)
    key = (case.parent.parent.name, case.parent.name, case.name)
    if key in KNOWN_TO_DIFFER:
        assert alone != spread, f"now agrees ({sorted(alone)}): take it off KNOWN_TO_DIFFER"
        pytest.xfail(KNOWN_TO_DIFFER[key])
    assert alone == spread, (sorted(alone), sorted(spread))


def test_the_cases_are_many():
    """The property is asked of real variety: the fixtures hold dozens of such cases."""
    assert len(CASES) >= 60


def test_a_checkout_with_an_init_at_its_root_resolves_a_scripts_imports(tmp_path):
    """Python runs `train.py` with its own folder first on `sys.path`: `from seq.steps import f` finds
    `seq/steps.py` beside it even when the checkout's root holds an `__init__.py` (which names it `root.seq.steps`)."""
    root = tmp_path / "checkout"
    (root / "seq").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "seq" / "__init__.py").write_text("")
    (root / "seq" / "steps.py").write_text("def backward_and_step(loss, opt):\n    loss.backward()\n    opt.step()\n")
    (root / "train.py").write_text(
        "import torch\nfrom seq.steps import backward_and_step\n\n\ndef train(model, opt, x):\n"
        "    with torch.autocast('cuda'):\n        backward_and_step(model(x).sum(), opt)\n")
    assert codes(root) == {"AMP001"}


def test_an_annotated_assignment_binds_like_a_plain_one(tmp_path):
    """`helper: Helper = Helper()` holds a Helper: its method is followed as for `helper = Helper()`."""
    (tmp_path / "helpers.py").write_text("class Helper:\n    def run(self, loss):\n        loss.backward()\n")
    body = ("import torch\nfrom helpers import Helper\n\n\ndef train(model, x):\n    helper{} = Helper()\n"
            "    with torch.autocast('cuda'):\n        helper.run(model(x).sum())\n")
    (tmp_path / "train.py").write_text(body.format(": Helper"))
    annotated = codes(tmp_path)
    (tmp_path / "train.py").write_text(body.format(""))
    assert annotated == codes(tmp_path) == {"AMP001"}


def test_a_scaler_built_in_another_module_is_the_same_object(tmp_path):
    """`from state import scaler` where state.py builds a GradScaler at module level: its `scale()` under no_grad
    is AMP005 as in one module; a parameter of the same name is another object, and an imported non-scaler
    (an sklearn-style `scaler`) is none."""
    (tmp_path / "state.py").write_text("import torch\nscaler = torch.amp.GradScaler('cuda')\n")
    (tmp_path / "other.py").write_text("from sklearn.preprocessing import StandardScaler\nscaler = StandardScaler()\n")
    body = ("import torch\nfrom {module} import scaler\n\n\n@torch.no_grad()\ndef evaluate(model, x{param}):\n"
            "    with torch.autocast('cuda', dtype=torch.float16):\n        return scaler.scale(model(x))\n")
    (tmp_path / "evaluate.py").write_text(body.format(module="state", param=""))
    assert codes(tmp_path) == {"AMP005"}
    (tmp_path / "evaluate.py").write_text(body.format(module="state", param=", scaler=None"))
    assert codes(tmp_path) == set()
    (tmp_path / "evaluate.py").write_text(body.format(module="other", param=""))
    assert codes(tmp_path) == set()


def test_a_per_step_function_of_another_module_asks_only_its_callers_about_a_handed_in_scaler(tmp_path):
    """`one_step(grad_scaler, ...)` called in a loop of `loop.py`: an `update()` there (the scaler's holder) ends
    the finding; one in an unrelated module, on another object of that name, does not."""
    (tmp_path / "step.py").write_text(
        "import torch\n\n\ndef one_step(grad_scaler, net, opt, x):\n    grad_scaler.scale(net(x).sum()).backward()\n"
        "    grad_scaler.step(opt)\n    opt.zero_grad()\n")
    loop = ("import torch\nfrom step import one_step\n\n\ndef train(net, opt, batches):\n"
            "    grad_scaler = torch.amp.GradScaler('cuda')\n    for x in batches:\n"
            "        one_step(grad_scaler, net, opt, x)\n{update}")
    (tmp_path / "other.py").write_text("def refresh(grad_scaler):\n    grad_scaler.update()\n")
    (tmp_path / "loop.py").write_text(loop.format(update=""))
    assert codes(tmp_path) == {"AMP010"}
    (tmp_path / "loop.py").write_text(loop.format(update="        grad_scaler.update()\n"))
    assert codes(tmp_path) == set()


# A name a module reads and never binds: what the modules importing it bind it to ---------------------------------
EVALUATE = ("import torch\n{own}\n\n@torch.no_grad()\ndef evaluate(model, x{param}):\n"
            "    with torch.autocast('cuda', dtype=torch.float16):\n        return scaler.scale(model(x))\n")
TRAIN = "import torch\nfrom evaluation import evaluate\n{binding}\n\n\ndef train(model, x):\n    return evaluate(model, x)\n"


@pytest.mark.parametrize(("own", "param", "binding", "expected"), [
    ("", "", "scaler = torch.amp.GradScaler('cuda')", {"AMP005"}),  # as `scaler = GradScaler()` beside evaluate
    ("", "", "", set()),  # no importer binds it
    ("", "", "for scaler in [torch.amp.GradScaler('cuda')]:\n    pass", set()),  # bound, not by a known call
    ("", ", scaler=None", "scaler = torch.amp.GradScaler('cuda')", set()),  # a parameter: another object
    ("scaler = None", "", "scaler = torch.amp.GradScaler('cuda')", set()),  # the module's own binding wins
    ("from features import scaler", "", "scaler = torch.amp.GradScaler('cuda')", set()),  # and its import
], ids=["bound-by-importer", "unbound", "loop-target", "parameter", "own-binding", "own-import"])
def test_a_name_read_and_never_bound_is_what_the_importers_bind(tmp_path, own, param, binding, expected):
    (tmp_path / "features.py").write_text("class FeatureScaler:\n    def scale(self, x):\n        return x / 2\n\n\n"
                                          "scaler = FeatureScaler()\n")
    (tmp_path / "evaluation.py").write_text(EVALUATE.format(own=own, param=param))
    (tmp_path / "train.py").write_text(TRAIN.format(binding=binding))
    assert codes(tmp_path) == expected


def test_importers_that_disagree_leave_the_name_unknown(tmp_path):
    (tmp_path / "evaluation.py").write_text(EVALUATE.format(own="", param=""))
    (tmp_path / "train.py").write_text(TRAIN.format(binding="scaler = torch.amp.GradScaler('cuda')"))
    (tmp_path / "report.py").write_text(TRAIN.format(binding="scaler = torch.amp.GradScaler('cuda')"))
    assert codes(tmp_path) == {"AMP005"}  # two importers, one kind of object
    (tmp_path / "report.py").write_text("from evaluation import evaluate\nfrom features import FeatureScaler\n\n"
                                        "scaler = FeatureScaler()\n")
    (tmp_path / "features.py").write_text("class FeatureScaler:\n    def scale(self, x):\n        return x / 2\n")
    assert codes(tmp_path) == set()


ENGINE_LOOP = ("import torch\n\n\ndef train_one_epoch(model, optimizer, loader):\n    for x in loader:\n"
               "        with torch.autocast('cuda'):\n            {name}(model(x).mean(), optimizer)\n")
SCALING = ("import torch\n\n\nclass NativeScaler:\n    def __init__(self):\n"
           "        self._scaler = torch.amp.GradScaler('cuda')\n\n    def __call__(self, loss, optimizer):\n"
           "        self._scaler.scale(loss).backward()\n        self._scaler.step(optimizer)\n"
           "        self._scaler.update()\n")


def test_a_builtin_is_never_read_from_the_importers(tmp_path):
    (tmp_path / "scaling.py").write_text(SCALING)
    for name, expected in (("loss_scaler", {"AMP001", "AMP002"}), ("print", set())):
        (tmp_path / "engine.py").write_text(ENGINE_LOOP.format(name=name))
        (tmp_path / "main.py").write_text(f"from engine import train_one_epoch\nfrom scaling import NativeScaler\n\n"
                                          f"{name} = NativeScaler()\n")
        assert codes(tmp_path) == expected, name


def test_a_new_importer_binding_the_name_relints_the_module(tmp_path):
    """The answer read which files import the module: a cached result is not reused once one binds the name."""
    tree, cache = tmp_path / "tree", tmp_path / "cache"
    tree.mkdir()
    (tree / "scaling.py").write_text(SCALING)
    (tree / "engine.py").write_text(ENGINE_LOOP.format(name="loss_scaler"))

    def run() -> set[tuple[str, str]]:
        result = CliRunner().invoke(main, ["check", str(tree), "--cache-dir", str(cache), "--exit-zero",
                                           "--output-format", "json"], catch_exceptions=False)
        return {(Path(d["filename"]).name, d["code"]) for d in json.loads(result.output)}

    assert run() == set()
    (tree / "main.py").write_text("from engine import train_one_epoch\nfrom scaling import NativeScaler\n\n"
                                  "loss_scaler = NativeScaler()\n")
    assert run() == {("engine.py", "AMP001"), ("engine.py", "AMP002")}
    (tree / "main.py").write_text("from engine import train_one_epoch\n")
    assert run() == set()


# A class whose `__init__` builds a GradScaler, built in a loop: found under every name the project imports it as --
TRAIN_WITH = ("import torch\nfrom {module} import {name}\n\n\ndef train(model, optimizer, loader):\n"
              "    for x in loader:\n        amp = {name}()\n        with torch.autocast('cuda'):\n"
              "            loss = model(x).mean()\n        amp(loss, optimizer)\n")


def test_a_wrapper_renamed_twice_on_its_way_is_still_known(tmp_path):
    from amplint.index.build import build_index

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "scaling.py").write_text(SCALING)
    (tmp_path / "pkg" / "__init__.py").write_text("from .scaling import NativeScaler as AmpScaler\n")
    (tmp_path / "compat.py").write_text("from pkg import (\n    AmpScaler as LossScaler,\n)\n")
    (tmp_path / "train.py").write_text(TRAIN_WITH.format(module="compat", name="LossScaler"))
    assert codes(tmp_path) == {"AMP004"}
    paths = sorted(str(path) for path in tmp_path.rglob("*.py"))
    project = build_index(paths, lambda path: Path(path).read_text())
    assert project.scaler_wrapper_names() == {"NativeScaler", "AmpScaler", "LossScaler"}
    (tmp_path / "compat.py").write_text("from pkg import AmpScaler\nLossScaler = None\n")  # not the wrapper
    assert codes(tmp_path) == set()


def test_a_class_that_starts_building_a_scaler_relints_the_files_building_it(tmp_path):
    """A file's cached result read which names the project's scaler-wrapper classes have: one more relints it."""
    tree, cache = tmp_path / "tree", tmp_path / "cache"
    tree.mkdir()
    (tree / "scaling.py").write_text(SCALING.replace("torch.amp.GradScaler('cuda')", "None"))
    (tree / "train.py").write_text(TRAIN_WITH.format(module="scaling", name="NativeScaler"))

    def run() -> set[tuple[str, str]]:
        result = CliRunner().invoke(main, ["check", str(tree), "--cache-dir", str(cache), "--exit-zero",
                                           "--output-format", "json"], catch_exceptions=False)
        return {(Path(d["filename"]).name, d["code"]) for d in json.loads(result.output)}

    assert run() == set()
    (tree / "scaling.py").write_text(SCALING)
    assert run() == {("train.py", "AMP004")}


TRAIN_FINISHING = ("import torch\nfrom steps import finish\n\n\ndef train(model, optimizer, loader):\n"
                   "    scaler = torch.amp.GradScaler('cuda')\n    for x in loader:\n"
                   "        with torch.autocast('cuda'):\n            loss = model(x).mean()\n"
                   "        scaler.scale(loss).backward()\n        finish([model])\n"
                   "        scaler.step(optimizer)\n        scaler.update()\n")


def test_files_asking_the_same_question_of_the_index_each_depend_on_what_answering_it_read(tmp_path):
    """Two files whose calls reach the same function two modules away: the answer is kept by the index for both,
    and each file's cached result still depends on the modules read to answer it."""
    tree, cache = tmp_path / "tree", tmp_path / "cache"
    tree.mkdir()
    clip = "import torch\n\n\ndef clip_all(modules, max_norm):\n    for module in modules:\n        {body}\n"
    (tree / "hooks.py").write_text(clip.format(body="module.zero_grad()"))
    (tree / "steps.py").write_text("from hooks import clip_all\n\n\ndef finish(modules):\n    clip_all(modules, 1.0)\n")
    (tree / "a_train.py").write_text(TRAIN_FINISHING)
    (tree / "b_train.py").write_text(TRAIN_FINISHING)

    def run() -> set[tuple[str, str]]:
        result = CliRunner().invoke(main, ["check", str(tree), "--cache-dir", str(cache), "--exit-zero",
                                           "--output-format", "json"], catch_exceptions=False)
        return {(Path(d["filename"]).name, d["code"]) for d in json.loads(result.output)}

    assert run() == set()  # the answer read hooks.py for both files, though only the first one asked it
    (tree / "hooks.py").write_text(clip.format(body="torch.nn.utils.clip_grad_norm_(module.parameters(), max_norm)"))
    assert run() == {("a_train.py", "AMP003"), ("b_train.py", "AMP003")}


def test_a_text_alone_building_its_own_wrapper_in_a_loop_is_screened_in():
    """A text the index did not take up front (stdin, an editor's buffer): its own scaler-wrapper classes count."""
    from amplint.index.functions import index_text
    from amplint.index.project import STANDALONE, ProjectIndex
    from amplint.index.summary import Summary
    from amplint.facts.construction import wrapper_built_in_loop

    text = SCALING + "\n\n" + TRAIN_WITH.split("\n", 2)[2].format(name="NativeScaler")
    summary = Summary(text)
    summary.exact = True
    view = ProjectIndex().view(STANDALONE)
    view.provide(lambda: index_text(text, summary), summary)
    assert view.scaler_wrapper_names() == {"NativeScaler"} and wrapper_built_in_loop(view)


def test_the_names_of_scaler_wrappers_do_not_depend_on_which_records_a_process_built(tmp_path):
    """A file's cached result records the digest of those names: a process that built more records (a worker)
    must compute the same names as the one that stored it, or every warm run relints."""
    from amplint.index.build import build_index

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "scaling.py").write_text(SCALING)
    (tmp_path / "pkg" / "__init__.py").write_text("from .scaling import NativeScaler as AmpScaler\n")
    (tmp_path / "compat.py").write_text("from pkg import \\\n    AmpScaler as LossScaler\n")
    (tmp_path / "train.py").write_text(TRAIN_WITH.format(module="compat", name="LossScaler"))
    paths = sorted(str(path) for path in tmp_path.rglob("*.py"))
    answers = []
    for build_all in (False, True):
        project = build_index(paths, lambda path: Path(path).read_text())
        if build_all:
            for path in paths:
                project.record(path)
        answers.append((project.scaler_wrapper_names(), project.scaler_wrappers_digest()))
    assert answers[0] == answers[1]


def test_a_kept_answer_of_reaches_records_what_it_read_for_the_second_file_too(tmp_path):
    """`ModuleView.reaches` keeps its answer for every file asking the same: the second file, which reads nothing
    itself, still records the modules the answer read (its cached result depends on them)."""
    from amplint.index.build import build_index
    from amplint.index.project import Target
    from amplint.vocabulary import Effect

    (tmp_path / "hooks.py").write_text("import torch\n\n\ndef clip_all(modules):\n    for module in modules:\n"
                                       "        torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)\n")
    (tmp_path / "steps.py").write_text("from hooks import clip_all\n\n\ndef finish(modules):\n    clip_all(modules)\n")
    for name in ("a_train.py", "b_train.py"):
        (tmp_path / name).write_text("from steps import finish\n")
    paths = sorted(str(path) for path in tmp_path.glob("*.py"))
    project = build_index(paths, lambda path: Path(path).read_text())
    target = Target(str(tmp_path / "steps.py"), "finish")
    first, second = project.view(str(tmp_path / "a_train.py")), project.view(str(tmp_path / "b_train.py"))
    answer = first.reaches(target, (Effect.CLIP,))
    assert answer is not None and second.reaches(target, (Effect.CLIP,)) == answer
    assert len(project._reaches) == 1  # answered once
    assert str(tmp_path / "hooks.py") in second.read_modules and second.read_modules == first.read_modules
