"""The layering of amplint's modules, and the one vocabulary of AMP names, read from the source with `ast`.

1. **One vocabulary.** Every AMP API name the linter knows is spelled in amplint/vocabulary.py; no other module of
   amplint/ spells one as a string literal. The rule, precisely:
   - a *code word* is a string literal (`ast.Constant` holding a `str`) whose whole value is an identifier or a
     dotted name (`"step"`, `"torch.cuda.amp"`), matched by `CODE_WORD`;
   - it is an AMP API name when one of its dot-separated parts is in `vocabulary.API_WORDS`;
   - not code words, so never checked: docstrings and any other string that is a statement of its own, every
     part of an f-string (messages), strings holding anything but an identifier or a dotted name (messages, help
     text, regular expressions: they hold spaces or punctuation), and the values of a class's `__slots__`
     (attribute names of the class);
   - not checked: amplint/vocabulary.py itself, and amplint/runtime/ (it patches torch by attribute and runs
     apart from the linter);
   - `ALLOWED` lists the code words that equal an AMP name by coincidence, each with the definition it is in
     and why it is not the AMP name.
2. **Who may import whom.** Every `import` and `from ... import` of an amplint module, at any depth (function-
   level imports too) and `importlib.import_module("amplint....")` calls, is checked against `MAY_IMPORT`:
   the modules a layer's modules may import. The layers (see the README's Architecture section):
   - foundation: `vocabulary` (AMP names, imports nothing of amplint), `calls` (the neutral call shape both
     walkers build and the one classifier of what a call does; the vocabulary only), `lazy`, `diagnostics`,
     `source`, `parsing`, `outcome`;
   - Python structure: `index` (modules, imports, definitions, bindings, call sites; AMP names from the
     vocabulary only);
   - AMP knowledge: `facts` (libcst facts: order, regions, events), `rules` (one file per rule; nothing of
     files, formats or the CLI);
   - running: `prefilter` (the screen), `engine` (parses, slices, builds the facts, runs the rules; spells
     no AMP name and imports no rule module), `fixer`, `suppression`, `selection`, `cache`;
   - inputs and outputs: `sources`, `output`, `pipeline`, `parallel`, and the drivers (`cli`, `config`,
     `discovery`, `server`, `flake8_plugin`, `harness`, `plots`);
   - `runtime`: the run-time watcher, the one part that imports torch; the linter never imports it (the CLI's
     `amplint watch` command alone starts it).
   The module-level imports (those run when a module is imported) form no cycle.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from amplint import vocabulary

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "amplint"

CODE_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
UNCHECKED = ("amplint.vocabulary", "amplint.runtime")
# (module, the top-level definition or assignment holding it, the word): why it is not the AMP name.
ALLOWED = {
    ("amplint.harness", "load_program", "eval"): "compile()'s mode, not Module.eval",
    ("amplint.harness", "evaluate", "dtype"): "a name the harness's spec expressions read",
    ("amplint.plots", "record", "dtype"): "a field of the harness's result records",
    ("amplint.plots", "draw_entries", "dtype"): "a field of the harness's result records",
    ("amplint.plots", "_key", "dtype"): "a field of the harness's result records",
}

# Layer -> the amplint modules (prefixes) its modules may import. The most specific layer naming a module
# decides; `amplint` alone is the package's root (`__version__`).
DRIVERS = ("amplint", "amplint.cache", "amplint.config", "amplint.diagnostics", "amplint.discovery",
           "amplint.engine", "amplint.facts.versions", "amplint.index", "amplint.outcome", "amplint.output",
           "amplint.parallel", "amplint.pipeline", "amplint.plots", "amplint.prefilter", "amplint.requirements",
           "amplint.rules", "amplint.selection", "amplint.server", "amplint.source", "amplint.sources",
           "amplint.vocabulary")
MAY_IMPORT = {
    # foundation
    "amplint": (),
    "amplint.vocabulary": (),
    "amplint.calls": ("amplint.vocabulary",),
    "amplint.lazy": (),
    "amplint.diagnostics": (),
    "amplint.source": (),
    "amplint.requirements": ("amplint.source",),  # declaration files are read as source files are: bounded
    "amplint.parsing": ("amplint.lazy",),
    "amplint.outcome": ("amplint.diagnostics",),
    # Python structure
    "amplint.index": ("amplint.calls", "amplint.index", "amplint.parsing", "amplint.source", "amplint.vocabulary"),
    # AMP knowledge
    "amplint.facts": ("amplint.calls", "amplint.facts", "amplint.index", "amplint.lazy", "amplint.vocabulary"),
    "amplint.rules": ("amplint.calls", "amplint.rules", "amplint.facts", "amplint.index", "amplint.lazy",
                      "amplint.vocabulary", "amplint.diagnostics"),
    # running
    "amplint.prefilter": ("amplint.index", "amplint.parsing", "amplint.rules.base", "amplint.rules.screen",
                          "amplint.suppression"),
    "amplint.engine": ("amplint.diagnostics", "amplint.facts", "amplint.facts.slicing", "amplint.lazy",
                       "amplint.parsing", "amplint.rules.base", "amplint.suppression"),
    "amplint.fixer": ("amplint.diagnostics", "amplint.engine", "amplint.lazy", "amplint.parsing", "amplint.rules"),
    "amplint.suppression": ("amplint.rules",),
    "amplint.selection": ("amplint.facts.versions", "amplint.parsing", "amplint.prefilter", "amplint.rules"),
    "amplint.cache": ("amplint", "amplint.diagnostics", "amplint.index.functions", "amplint.prefilter",
                      "amplint.source"),
    # inputs and outputs
    "amplint.output": ("amplint", "amplint.diagnostics", "amplint.output"),
    "amplint.sources": ("amplint.diagnostics", "amplint.engine", "amplint.fixer", "amplint.output.common",
                        "amplint.parsing", "amplint.source", "amplint.sources"),
    "amplint.pipeline": ("amplint.diagnostics", "amplint.engine", "amplint.fixer", "amplint.outcome",
                         "amplint.rules.base", "amplint.selection", "amplint.source", "amplint.sources",
                         "amplint.suppression"),
    "amplint.parallel": ("amplint.cache", "amplint.engine", "amplint.index.build", "amplint.outcome",
                         "amplint.pipeline", "amplint.selection"),
    "amplint.discovery": ("amplint.config", "amplint.source"),
    "amplint.config": DRIVERS,
    "amplint.server": DRIVERS,
    "amplint.flake8_plugin": DRIVERS,
    "amplint.harness": DRIVERS,
    "amplint.plots": DRIVERS,
    "amplint.cli": DRIVERS + ("amplint.runtime.script",),  # `amplint watch` starts the run-time watcher
    "amplint.__main__": ("amplint.cli", "amplint.server"),  # `amplint server` starts without the CLI
    # the run-time watcher
    "amplint.runtime": ("amplint", "amplint.diagnostics", "amplint.rules", "amplint.runtime"),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


MODULES = modules()


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def docstring_like(tree: ast.AST) -> set[int]:
    """ids of the string nodes that are not code words by position: statements of their own, f-string parts,
    `__slots__` values."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            skipped.add(id(node.value))
        elif isinstance(node, ast.JoinedStr):
            skipped.update(id(part) for part in ast.walk(node))
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                  for t in node.targets):
            skipped.update(id(part) for part in ast.walk(node.value))
    return skipped


def amp_literals(source: str) -> list[tuple[int, str, str]]:
    """(line, top-level definition holding it, word) for each code word of `source` naming the AMP API."""
    tree = ast.parse(source)
    skipped = docstring_like(tree)
    found = []
    for statement in tree.body:
        owner = statement.name if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
            else next((t.id for t in getattr(statement, "targets", [getattr(statement, "target", None)])
                       if isinstance(t, ast.Name)), "")
        for node in ast.walk(statement):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped \
                    and CODE_WORD.match(node.value) and set(node.value.split(".")) & vocabulary.API_WORDS:
                found.append((node.lineno, owner, node.value))
    return found


def test_the_literal_check_finds_what_it_must_and_skips_messages():
    source = '''
"""Module docstring: autocast, GradScaler."""
import re
NAMES = ("torch.cuda.amp.autocast", "fine", "step")
def f(x):
    """unscale_"""
    print(f"`{x}.unscale_()` runs twice")
    print("call scaler.step(optimizer) after unscale_")
    return x.method == "unscale_" or re.compile(r"autocast\\(")
class C:
    __slots__ = ("half", "other")
'''
    assert amp_literals(source) == [(4, "NAMES", "torch.cuda.amp.autocast"), (4, "NAMES", "step"),
                                    (9, "f", "unscale_")]


def test_no_module_spells_an_amp_api_name_outside_the_vocabulary():
    found = []
    for name, path in MODULES.items():
        if any(within(name, prefix) for prefix in UNCHECKED):
            continue
        for line, owner, word in amp_literals(path.read_text(encoding="utf-8")):
            if (name, owner, word) not in ALLOWED:
                found.append(f"{path.relative_to(ROOT)}:{line} ({owner}): {word!r}")
    assert not found, "AMP API names spelled outside amplint/vocabulary.py:\n" + "\n".join(found)


def test_every_allowed_coincidence_is_still_there():
    """An entry of ALLOWED that no longer matches anything is removed, so the table says only what is true."""
    seen = {(name, owner, word) for name, path in MODULES.items() for _, owner, word in
            amp_literals(path.read_text(encoding="utf-8"))}
    assert set(ALLOWED) <= seen


def test_the_vocabulary_names_every_api_word_once():
    spelled = [value for key, value in vars(vocabulary).items() if key.isupper() and isinstance(value, str)]
    assert vocabulary.API_WORDS <= set(spelled)
    from amplint.facts import names

    for key in names.__all__:  # one word per idea: what the facts layer re-exports is the vocabulary's, same name
        value = getattr(names, key)
        assert value is getattr(vocabulary, key, None) or callable(value) or key in ("EXIT_STACKS", "ENTER_CONTEXT")
    assert names.GRAD_SCALERS is vocabulary.GRAD_SCALERS


def resolve(importer: str, path: Path, node: ast.ImportFrom) -> str:
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
    if not node.level:
        return node.module or ""
    base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(name: str, path: Path, top_level_only: bool = False) -> set[str]:
    """The amplint modules `name` imports (a `from amplint import x` names `amplint.x` when x is a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = ast.walk(tree) if not top_level_only else _top_level(tree)
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = resolve(name, path, node)
            for alias in node.names:
                candidate = f"{module}.{alias.name}"
                found.add(candidate if candidate in MODULES else module)
        elif isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)) and \
                getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__") \
                and node.args:
            first = node.args[0]
            if isinstance(first, ast.JoinedStr) and first.values and isinstance(first.values[0], ast.Constant):
                found.add(first.values[0].value.rstrip("."))
            elif isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.add(first.value)
    return {module for module in found if within(module, "amplint")}


def _top_level(tree: ast.Module):
    """The nodes run when the module is imported: everything outside function bodies."""
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            pending.extend(getattr(node, "decorator_list", []))
            continue
        pending.extend(ast.iter_child_nodes(node))


def layer_of(name: str) -> str:
    layers = [layer for layer in MAY_IMPORT if within(name, layer)]
    assert layers, f"{name} belongs to no layer of MAY_IMPORT"
    return max(layers, key=len)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_imports_follow_the_layering(name):
    layer = layer_of(name)
    allowed = MAY_IMPORT[layer]
    wrong = sorted(target for target in imports_of(name, MODULES[name])
                   if not within(target, layer) and not any(within(target, prefix) for prefix in allowed)
                   and not (target == "amplint" and "amplint" in allowed))
    wrong = [target for target in wrong if target != name]
    assert not wrong, f"{name} (layer {layer}) imports {wrong}; it may import {allowed}"


def test_the_layers_say_what_the_architecture_promises():
    """The table itself keeps the promises: the vocabulary imports nothing of amplint, the index knows Python
    structure only, the engine knows nothing of AMP, rules know nothing of files, formats or the CLI, and
    nothing of the linter imports the run-time watcher."""
    assert MAY_IMPORT["amplint.vocabulary"] == ()
    assert not any(within(p, "amplint.facts") or within(p, "amplint.rules") for p in MAY_IMPORT["amplint.index"])
    engine = MAY_IMPORT["amplint.engine"]
    assert not any(within(p, "amplint.vocabulary") or within(p, "amplint.index") or p in ("amplint.rules",)
                   or p == "amplint.facts.names" for p in engine)
    io = ("amplint.cli", "amplint.config", "amplint.output", "amplint.sources", "amplint.source", "amplint.discovery",
          "amplint.cache", "amplint.parallel", "amplint.pipeline", "amplint.server", "amplint.engine",
          "amplint.fixer", "amplint.flake8_plugin", "amplint.harness")
    assert not any(within(p, io_layer) for p in MAY_IMPORT["amplint.rules"] for io_layer in io)
    users = [layer for layer, allowed in MAY_IMPORT.items()
             if not within(layer, "amplint.runtime") and any(within(p, "amplint.runtime") for p in allowed)]
    assert users == ["amplint.cli"]


def test_the_vocabulary_and_the_engine_import_what_the_table_says():
    assert imports_of("amplint.vocabulary", MODULES["amplint.vocabulary"]) == set()
    engine = imports_of("amplint.engine", MODULES["amplint.engine"])
    assert "amplint.vocabulary" not in engine and not any(within(m, "amplint.rules.amp") for m in engine)


def test_no_rule_imports_another_rule():
    """A rule reads facts, never another rule: what two rules share is a fact (amplint/facts/) or a shared
    reporting module of amplint/rules/ (islands.py, scopes.py), so that each rule's file reads on its own."""
    rules = [name for name in MODULES if within(name, "amplint.rules") and name.rpartition(".")[2].startswith("amp0")]
    assert len(rules) >= 15
    wrong = {name: sorted(target for target in imports_of(name, MODULES[name]) if target in rules and target != name)
             for name in rules}
    assert not {name: targets for name, targets in wrong.items() if targets}


def test_a_rule_reads_facts_the_vocabulary_and_the_screen_only():
    """A rule is written against the model's answers (amplint/facts/), the vocabulary, its base class, the
    screen's questions and the wording shared between rules (scopes, islands, rewrite, migrate), never against
    the project index or the screen's `ast` model directly: `Summary` is named through `amplint.rules.screen`."""
    allowed = ("amplint.facts", "amplint.vocabulary", "amplint.lazy", "amplint.diagnostics", "amplint.rules.base",
               "amplint.rules.screen", "amplint.rules.scopes", "amplint.rules.islands", "amplint.rules.rewrite",
               "amplint.rules.migrate")
    rules = [name for name in MODULES if within(name, "amplint.rules") and name.rpartition(".")[2].startswith("amp0")]
    assert len(rules) >= 15
    wrong = {name: sorted(target for target in imports_of(name, MODULES[name]) if target != name
                          and target != "amplint" and not any(within(target, layer) for layer in allowed))
             for name in rules}
    assert not {name: targets for name, targets in wrong.items() if targets}


def test_a_rule_module_is_small():
    """A rule module is its documentation, a short check and its messages and fixes; what it asks of code lives
    in amplint/facts/. Median at most 200 lines, none over 400 (docstrings included)."""
    sizes = sorted(len(Path(MODULES[name]).read_text(encoding="utf-8").splitlines()) for name in MODULES
                   if within(name, "amplint.rules") and name.rpartition(".")[2].startswith("amp0"))
    assert len(sizes) >= 15
    assert sizes[len(sizes) // 2] <= 200 and sizes[-1] <= 400, sizes


def test_module_level_imports_form_no_cycle():
    graph = {name: {target for target in imports_of(name, path, top_level_only=True) if target in MODULES}
             for name, path in MODULES.items()}
    # A module imports its package first: `amplint.facts.module` runs `amplint.facts`'s __init__.
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                cycle = stack[stack.index(target):] + [target]
                package_init = all(within(b, a) or within(a, b) for a, b in zip(cycle, cycle[1:]))
                assert package_init, "import cycle: " + " -> ".join(cycle)
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
