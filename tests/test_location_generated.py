"""Where code lives never changes a finding: generated layouts.

tests/test_location_invariance.py splits every case one definition per module. Here hypothesis draws a case (a
flagged or clean single-file fixture with two or more top-level definitions) and one of its definitions (a helper
function or a class), moves that definition to `helpers.py`, and writes the rest as `main.py` importing it in one
of several ways: `from helpers import f`, through a package's `__init__` re-export (`from pkg import f`), under an
alias (`from helpers import f as g`, every use in `main.py` renamed), or through a module alias (`import helpers as
hm`, every use written `hm.f`). The moved definition imports what it reads of `main.py` (`from main import x`), as
the program would. The project must report the same codes as the one file.

Layouts that still differ are listed in `KNOWN_TO_DIFFER` with the reason; a listed one that agrees fails.
"""

from __future__ import annotations

import ast
import functools
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_location_invariance import CASES, REPO, _definitions, codes

LAYOUTS = ("module", "package", "alias", "module_alias")
ALIAS = "moved_alias"
MODULE_ALIAS = "hm"

# (rule folder, kind, file, moved definition, layout) -> why the layout still differs
KNOWN_TO_DIFFER: dict[tuple[str, str, str, str, str], str] = {}


@functools.lru_cache(maxsize=None)
def alone(case: Path) -> frozenset[str]:
    return frozenset(codes(case))


class _Rename(ast.NodeTransformer):
    """Every use of `name` in `main.py` written as the layout imports it."""

    def __init__(self, name: str, layout: str) -> None:
        self.name = name
        self.layout = layout

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id != self.name:
            return node
        if self.layout == "alias":
            return ast.copy_location(ast.Name(ALIAS, node.ctx), node)
        if self.layout == "module_alias" and isinstance(node.ctx, ast.Load):
            return ast.copy_location(ast.Attribute(ast.Name(MODULE_ALIAS, ast.Load()), self.name, node.ctx), node)
        return node


def lay_out(text: str, moved_index: int, layout: str, folder: Path) -> str:
    """Write the case with its `moved_index`-th definition in another module, imported as `layout` says; return
    the moved definition's name."""
    tree = ast.parse(text)
    definitions = _definitions(tree)
    moved = definitions[moved_index]
    name = moved.name
    imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    import_lines = [ast.get_source_segment(text, node) for node in imports]
    stored = {child.id for node in tree.body if node is not moved and not isinstance(node, (ast.Import, ast.ImportFrom))
              for child in ast.walk(node) if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store)}
    stored |= {node.name for node in definitions if node is not moved}
    read = {child.id for child in ast.walk(moved) if isinstance(child, ast.Name)}
    from_main = [f"from main import {other}" for other in sorted(read & stored) if other != name]
    if layout == "package":
        module, importer = folder / "pkg" / "helpers.py", f"from pkg import {name}"
        module.parent.mkdir()
        (module.parent / "__init__.py").write_text(f"from .helpers import {name}\n")
    else:
        module = folder / "helpers.py"
        importer = {"module": f"from helpers import {name}", "alias": f"from helpers import {name} as {ALIAS}",
                    "module_alias": f"import helpers as {MODULE_ALIAS}"}[layout]
    module.write_text("\n".join(import_lines + from_main) + "\n\n\n" + ast.unparse(moved) + "\n")
    rest = [node for node in tree.body if node is not moved and node not in imports]
    body = ast.Module([_Rename(name, layout).visit(node) for node in rest], type_ignores=[])
    (folder / "main.py").write_text("\n".join(import_lines + [importer]) + "\n\n\n" + ast.unparse(body) + "\n")
    return name


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES), pick=st.integers(min_value=0, max_value=63), layout=st.sampled_from(LAYOUTS),
       classes=st.booleans())
def test_a_generated_layout_gives_the_same_codes(case, pick, layout, classes):
    text = case.read_text(encoding="utf-8")
    definitions = _definitions(ast.parse(text))
    wanted = [i for i, node in enumerate(definitions) if isinstance(node, ast.ClassDef) == classes]
    moved_index = (wanted or list(range(len(definitions))))[pick % len(wanted or definitions)]
    with tempfile.TemporaryDirectory() as folder:
        name = lay_out(text, moved_index, layout, Path(folder))
        spread = frozenset(codes(Path(folder)))
    key = (case.parent.parent.name, case.parent.name, case.name, name, layout)
    if key in KNOWN_TO_DIFFER:
        assert alone(case) != spread, f"now agrees: take {key} off KNOWN_TO_DIFFER"
        return
    assert alone(case) == spread, (key, sorted(alone(case)), sorted(spread))


def test_a_layout_is_the_same_program(tmp_path):
    """The generator's own check: a moved helper is imported as the layout says and still called."""
    text = "import torch\n\n\ndef helper(x):\n    return x\n\n\ndef train(x):\n    return helper(x)\n"
    assert lay_out(text, 0, "module_alias", tmp_path) == "helper"
    main = (tmp_path / "main.py").read_text()
    assert "import helpers as hm" in main and "hm.helper(x)" in main
    assert "def helper(x)" in (tmp_path / "helpers.py").read_text()


@pytest.mark.parametrize("fixture, moved", [
    ("AMP010-step-without-update/flagged/per_step_function.py", "train_step"),
    ("AMP004-scaler-per-iteration/flagged/per_epoch_function_same_module.py", "train_one_epoch"),
])
def test_a_function_imported_under_an_alias_has_its_callers(fixture, moved, tmp_path):
    """`from helpers import f as g` then `g(...)` in a loop: the caller is found under the alias (the index's
    call sites by name and its second round both know the alias), as the one file finds it."""
    case = REPO / "fixtures" / fixture
    text = case.read_text(encoding="utf-8")
    names = [node.name for node in _definitions(ast.parse(text))]
    lay_out(text, names.index(moved), "alias", tmp_path)
    assert ALIAS in (tmp_path / "main.py").read_text()
    assert codes(tmp_path) == codes(case) != set()


def test_generated_examples_do_not_depend_on_the_modules_a_worker_imported(tmp_path, monkeypatch):
    """The cases above are derandomized: they must be the same whichever tests a pytest-xdist worker ran first.
    Hypothesis would mix constants of this repository's already imported modules into its draws (conftest.py
    leaves them out): a module imported now adds none."""
    from hypothesis.internal.conjecture import providers

    (tmp_path / "late_module.py").write_text("MARKER = 987654321\nNAME = 'late-module-marker'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__("late_module")
    constants = providers._get_local_constants()
    assert 987654321 not in constants.integers and "late-module-marker" not in constants.strings
