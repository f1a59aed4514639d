"""Rules AMP007-AMP014: fixtures (marked findings, silence on correct code, exact fixes), the AMP007 migration
run under torch with FutureWarnings as errors, and the `target-torch-version` setting."""

from __future__ import annotations

import ast
import io
import json
import re
import subprocess
import sys
import textwrap
import tokenize
from pathlib import Path

import pytest
from click.testing import CliRunner

from amplint.cli import main
from amplint.config import ConfigError, Settings, settings_from_table
from amplint.engine import lint_text
from amplint.facts.versions import parse_version
from amplint.fixer import fix_text
from amplint.rules import ALL_RULES, RULES_BY_CODE
from amplint.rules.base import DOC_SECTIONS
from amplint.selection import rules_for

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
CODES = tuple(f"AMP{n:03d}" for n in range(7, 15))
FIXABLE = ("AMP007", "AMP008", "AMP009", "AMP010", "AMP011", "AMP013", "AMP014")
MIN_FILES = 6
EXPECT = re.compile(r"#\s*expect:(?P<marks>.*)$")
MARK = re.compile(r"(?P<code>[A-Z]+[0-9]+)(?::(?P<column>[0-9]+))?")


def folder(code: str) -> Path:
    rule = RULES_BY_CODE[code]
    return FIXTURES / f"{code}-{rule.name}"


def files(kind: str) -> list[pytest.param]:
    return [pytest.param(code, path, id=f"{code}/{path.name}")
            for code in CODES for path in sorted((folder(code) / kind).glob("*.py"))]


def marks(text: str) -> set[tuple[str, int, int]]:
    found = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT and (match := EXPECT.search(token.string)):
            for mark in MARK.finditer(match.group("marks")):
                assert mark.group("column"), f"line {token.start[0]}: give the column of {mark.group('code')}"
                found.add((mark.group("code"), token.start[0], int(mark.group("column"))))
    return found


def findings(text: str, name: str, codes=CODES, rules=None) -> set[tuple[str, int, int]]:
    rules = rules if rules is not None else [rule() for rule in ALL_RULES]
    result = lint_text(text, name, rules)
    assert not [d for d in result.diagnostics if d.code.startswith("AMP9")], result.diagnostics
    return {(d.code, d.location.row, d.location.column) for d in result.diagnostics if d.code in codes}


def fix(code: str, text: str, name: str):
    return fix_text(text, name, rules=[RULES_BY_CODE[code]()], unsafe=True)


# --- the fixture set ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("code", CODES)
def test_every_rule_has_enough_fixtures(code: str) -> None:
    for kind in ("flagged", "clean"):
        count = len(list((folder(code) / kind).glob("*.py")))
        assert count >= MIN_FILES, f"{folder(code).name}/{kind}: {count} programs, at least {MIN_FILES} needed"
    fixed = {p.name for p in (folder(code) / "fixed").glob("*.py")}
    if code in FIXABLE:
        assert len(fixed) >= MIN_FILES, f"{code}: only {len(fixed)} fixed/ files"
    else:
        assert not fixed, f"{code} offers no fix, so it has no fixed/ files"
    assert fixed <= {p.name for p in (folder(code) / "flagged").glob("*.py")}
    runtime = sorted((folder(code) / "runtime").glob("*.py"))
    assert runtime, f"{code}: no runtime program"
    for program in runtime:
        spec = json.loads(program.with_suffix(".expect.json").read_text(encoding="utf-8"))
        assert spec["rule"] == code and spec["observable"] and spec["note"] and spec["bad"]
        assert ("good" in spec) != bool(spec.get("no_fix")), program.name


@pytest.mark.parametrize(("code", "path"), files("flagged"))
def test_flagged_reports_exactly_the_marks(code: str, path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    expected = {m for m in marks(text) if m[0] in CODES}
    assert any(m[0] == code for m in expected), "no mark of the folder's rule"
    assert findings(text, str(path)) == expected


@pytest.mark.parametrize(("code", "path"), files("clean"))
def test_clean_reports_nothing_from_any_rule(code: str, path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    result = lint_text(text, str(path), [rule() for rule in ALL_RULES])
    assert [f"{d.location.row}:{d.location.column} {d.code} {d.message}" for d in result.diagnostics] == []


@pytest.mark.parametrize(("code", "path"), files("flagged"))
def test_fix_gives_the_fixed_file(code: str, path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    outcome = fix(code, text, str(path))
    assert outcome.error is None
    expected = folder(code) / "fixed" / path.name
    if not expected.exists():
        # Only findings without a fix: the file stays as it is.
        own = [d for d in lint_text(text, str(path), [RULES_BY_CODE[code]()]).diagnostics if d.code == code]
        assert own and all(d.fix is None for d in own)
        assert outcome.text == text
        return
    fixed = expected.read_text(encoding="utf-8")
    assert outcome.text == fixed
    compile(fixed, str(expected), "exec")
    assert findings(fixed, str(expected), codes=(code,), rules=[RULES_BY_CODE[code]()]) == set()
    again = fix(code, fixed, str(expected))
    assert again.text == fixed and not again.applied


@pytest.mark.parametrize(("code", "path"), files("flagged"))
def test_all_rules_fix_compiles_and_is_idempotent(code: str, path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    outcome = fix_text(text, str(path), unsafe=True)
    assert outcome.error is None
    compile(outcome.text, str(path), "exec")
    again = fix_text(outcome.text, str(path), unsafe=True)
    assert again.text == outcome.text


@pytest.mark.parametrize("code", CODES)
def test_documentation(code: str) -> None:
    rule = RULES_BY_CODE[code]
    doc = rule.documentation()
    for section in DOC_SECTIONS:
        assert f"## {section}" in doc, f"{code}: no '## {section}'"
    assert rule.min_torch is not None and f"torch >= {rule.min_torch}" in doc


# --- AMP007: the migrated code runs under torch without FutureWarning -------------------------------------

# Each snippet uses a deprecated spelling; the asserts check that the migration keeps its meaning on CPU.
SPELLINGS = {
    "attribute chains and positional enabled": """
        import torch
        with torch.cpu.amp.autocast(False):
            assert not torch.is_autocast_enabled("cpu")
        with torch.cpu.amp.autocast(True, torch.bfloat16):
            assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
        with torch.cuda.amp.autocast(enabled=False):
            pass
    """,
    "import torch as th, positional init_scale": """
        import torch as th
        scaler = th.cpu.amp.GradScaler(2.0**14, 3.0)
        assert scaler.get_scale() == 2.0**14 and scaler.get_growth_factor() == 3.0
        cuda_scaler = th.cuda.amp.GradScaler(init_scale=1024.0, enabled=False)
        assert isinstance(scaler, th.cpu.amp.GradScaler)
    """,
    "from-imports with aliases": """
        import torch
        from torch.cpu.amp import GradScaler as CpuScaler, autocast as cpu_autocast
        from torch.cuda.amp import GradScaler, autocast
        scaler = CpuScaler(512.0)
        assert scaler.get_scale() == 512.0
        with cpu_autocast(dtype=torch.bfloat16):
            assert torch.is_autocast_enabled("cpu")
        with autocast(False):
            pass
        GradScaler(enabled=False)
    """,
    "module aliases": """
        import torch
        import torch.cpu.amp as cpu_amp
        from torch.cuda import amp
        with cpu_amp.autocast():
            assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
        amp.GradScaler(enabled=False)
        with amp.autocast(enabled=False):
            pass
    """,
    "module alias also used for other names": """
        import torch
        from torch.cuda import amp
        assert isinstance(amp.amp_definitely_not_available(), bool)
        with amp.autocast(False):
            pass
    """,
    "custom_fwd and custom_bwd, bare and called": """
        import torch
        from torch.cuda.amp import custom_bwd, custom_fwd

        class Square(torch.autograd.Function):
            @staticmethod
            @custom_fwd
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            @custom_bwd
            def backward(ctx, grad):
                (x,) = ctx.saved_tensors
                return 2 * x * grad

        class Exp(torch.autograd.Function):
            @staticmethod
            @torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)
            def forward(ctx, x):
                y = x.exp()
                ctx.save_for_backward(y)
                return y

            @staticmethod
            @torch.cuda.amp.custom_bwd
            def backward(ctx, grad):
                (y,) = ctx.saved_tensors
                return grad * y

        x = torch.ones(3, requires_grad=True)
        (Square.apply(x).sum() + Exp.apply(x).sum()).backward()
        assert torch.allclose(x.grad, 2 + torch.e * torch.ones(3))
    """,
    "functools.partial factories": """
        import functools
        import torch
        amp_autocast = functools.partial(torch.cpu.amp.autocast, dtype=torch.bfloat16)
        make_scaler = functools.partial(torch.cpu.amp.GradScaler, growth_interval=7)
        with amp_autocast(enabled=True):
            assert torch.is_autocast_enabled("cpu")
        assert make_scaler(256.0).get_scale() == 256.0
        assert make_scaler().get_growth_interval() == 7
    """,
    "imports local to two functions": """
        import torch

        def first():
            from torch.cpu.amp import autocast
            with autocast(False):
                assert not torch.is_autocast_enabled("cpu")

        def second():
            from torch.cpu.amp import autocast
            with autocast():
                assert torch.is_autocast_enabled("cpu")

        first()
        second()
    """,
    "split import": """
        import torch
        from torch.cuda.amp import amp_definitely_not_available, autocast
        amp_definitely_not_available()
        with autocast(enabled=False):
            pass
    """,
}

RUNNER = r"""
import json, sys, warnings
warnings.simplefilter("error", FutureWarning)
results = {}
for name, source in json.loads(sys.stdin.read()).items():
    try:
        exec(compile(source, name, "exec"), {"__name__": "snippet"})
        results[name] = "ok"
    except BaseException as error:
        results[name] = f"{type(error).__name__}: {error}"
print(json.dumps(results))
"""


def _unused_imports(source: str) -> list[str]:
    tree = ast.parse(source)
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound[(alias.asname or alias.name).split(".")[0]] = alias.name
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    return sorted(name for name in bound if name not in used)


def _run_snippets(snippets: dict[str, str]) -> dict[str, str]:
    completed = subprocess.run([sys.executable, "-W", "error::FutureWarning", "-c", RUNNER],
                               input=json.dumps(snippets), capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


@pytest.mark.runtime
def test_amp007_migration_runs_without_future_warnings() -> None:
    originals = {name: textwrap.dedent(source) for name, source in SPELLINGS.items()}
    fixed = {}
    for name, source in originals.items():
        outcome = fix("AMP007", source, "snippet.py")
        assert outcome.error is None and outcome.applied, name
        assert findings(outcome.text, "snippet.py", codes=("AMP007",)) == set(), name
        assert set(_unused_imports(outcome.text)) <= set(_unused_imports(source)), \
            f"{name}: leftover import\n{outcome.text}"
        fixed[name] = outcome.text
    before = _run_snippets(originals)
    after = _run_snippets(fixed)
    for name in originals:
        assert before[name].startswith("FutureWarning"), f"{name}: the original should warn, got {before[name]}"
        assert after[name] == "ok", f"{name}: {after[name]}\n{fixed[name]}"


@pytest.mark.runtime
def test_amp007_fixed_fixtures_define_without_future_warnings() -> None:
    """Executing the fixed fixture modules (definitions, decorators, module-level calls) warns nothing."""
    runnable = {}
    for path in sorted((folder("AMP007") / "fixed").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if ".cuda()" in text or "apex" in text:
            continue
        runnable[path.name] = text
    assert len(runnable) >= 4
    for name, result in _run_snippets(runnable).items():
        assert result == "ok", f"{name}: {result}"


def test_amp007_messages_name_the_replacement() -> None:
    text = "import torch\nwith torch.cuda.amp.autocast(False):\n    pass\n"
    (diagnostic,) = lint_text(text, "x.py", [RULES_BY_CODE["AMP007"]()]).diagnostics
    assert diagnostic.message == "`torch.cuda.amp.autocast` is deprecated since torch 2.4 and warns on each call"
    assert 'torch.amp.autocast("cuda", enabled=False, dtype=torch.float16)' in diagnostic.help
    assert "first positional argument is `enabled`" in diagnostic.help


# --- target-torch-version -------------------------------------------------------------------------------------

def test_parse_version() -> None:
    assert parse_version("2.4") == (2, 4, 0)
    assert parse_version("v2.4.1") == (2, 4, 1)
    assert parse_version("2.5.0a0+git1234") == (2, 5, 0)
    assert parse_version("2.3.1+cu121") == (2, 3, 1)
    for bad in ("", "banana", ">=2.4", "2.x"):
        with pytest.raises(ValueError):
            parse_version(bad)


def test_target_version_turns_no_rule_off() -> None:
    classes = list(ALL_RULES)
    # Code that calls an AMP API runs on a torch that has it, whatever the target says: every rule applies at every
    # target; what the target changes is AMP007's fix and whether it reports at all (tests/test_torch_floor.py).
    for target in (None, "1.5", "2.3", "2.3.1", "2.4", "2.6.0+cpu"):
        codes = {rule.code for rule in rules_for("train.py", classes, Settings(target_torch_version=target))}
        assert {"AMP007", "AMP008", "AMP009", "AMP010", "AMP011", "AMP012", "AMP013", "AMP014"} <= codes, target


def test_target_version_in_configuration(tmp_path, monkeypatch) -> None:
    source = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
    (tmp_path / "train.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    warning_fails = ["--exit-non-zero-on-warning"]  # AMP007 is a warning, which alone exits 0
    result = runner.invoke(main, ["check", "train.py", "--select", "AMP007", "--output-format", "concise",
                                  *warning_fails])
    assert result.exit_code == 1 and "AMP007" in result.output
    (tmp_path / "amplint.toml").write_text('target-torch-version = "2.2"\n')  # before torch.amp.GradScaler
    result = runner.invoke(main, ["check", "train.py", "--select", "AMP007", "--output-format", "concise",
                                  *warning_fails])
    assert result.exit_code == 1 and "AMP007" in result.output and "[*]" not in result.output, result.output
    (tmp_path / "amplint.toml").write_text('target-torch-version = "two point four"\n')
    result = runner.invoke(main, ["check", "train.py"])
    assert result.exit_code == 2 and "target-torch-version" in result.output
    with pytest.raises(ConfigError, match="target-torch-version"):
        settings_from_table({"target-torch-version": "latest"}, tmp_path / "amplint.toml")


# --- AMP007 behind a name: aliases and star imports, one import model -------------------------------------------
def test_amp007_reads_every_import_binding_from_the_facts_layer() -> None:
    """AMP007 keeps no import model of its own: each binding it weighs is a record of `facts.imports`."""
    from amplint.facts import ModuleFacts
    from amplint.facts.walk import walk
    from amplint.lazy import libcst as cst, visitor_class
    from amplint.facts.legacy import Scan as _Scan

    text = ("import torch as th\nfrom torch.cuda.amp import autocast as ac\nfrom torch.cpu.amp import *\n"
            "def f():\n    import torch.cuda.amp as tca\n    with ac():\n        tca.GradScaler()\n")
    facts = ModuleFacts(cst.parse_module(text))
    scan = visitor_class(_Scan)(facts)
    walk(facts.module, scan)
    assert set(scan.bindings) == {"th", "ac", "tca", "autocast", "GradScaler"}
    for name, bindings in scan.bindings.items():
        assert [id(b) for b in bindings] == [id(r) for r in facts.imports.records[name]], name
    assert [b.module_level for b in scan.bindings["tca"]] == [False]
    assert [b.alias for b in scan.bindings["GradScaler"]] == [None]  # bound by the star import


def test_facts_follow_a_known_star_import_until_an_unknown_one() -> None:
    from amplint.facts import ModuleFacts
    from amplint.lazy import libcst as cst

    def qualified(text: str) -> str | None:
        facts = ModuleFacts(cst.parse_module(text + "autocast()\n"))
        return facts.calls[-1].qualified

    assert qualified("from torch.cuda.amp import *\n") == "torch.cuda.amp.autocast"
    assert qualified("from torch.amp import *\n") == "torch.amp.autocast"
    assert qualified("from torch.cuda.amp import *\nfrom common import *\n") is None  # may bind it again
    assert qualified("from common import *\nfrom torch.cuda.amp import *\n") == "torch.cuda.amp.autocast"
    assert qualified("from torch.cuda.amp import *\nfrom torch.amp import autocast\n") == "torch.amp.autocast"
    assert qualified("from .amp import *\n") is None


def test_a_region_opened_through_a_star_import_is_a_region() -> None:
    text = ("import torch\nfrom torch.cuda.amp import *\n\n\ndef step(model, x):\n    with autocast():\n"
            "        model(x).sum().backward()\n")
    assert findings(text, "t.py", codes=("AMP001",)) == {("AMP001", 7, 9)}


@pytest.mark.parametrize("body, flagged", [
    ("ctx = torch.cuda.amp.autocast if amp else contextlib.suppress\nwith ctx():\n    pass\n", {1}),
    ("ctx = torch.cuda.amp.autocast if amp else contextlib.suppress\n", set()),  # never called: warns nothing
    ("m = torch.cuda.amp\ns = m.GradScaler()\n", {1}),
    ("m = torch.cuda.amp\nprint(m.__name__)\n", set()),
    ("from torch.cuda.amp import *\ns = GradScaler()\n", {1}),
    ("from torch.cuda.amp import *\nprint(GradScaler)\n", set()),
    ("m = torch.amp\ns = m.GradScaler('cuda')\n", set()),
    ("try:\n    m = torch.amp\nexcept AttributeError:\n    m = torch.cuda.amp\ns = m.GradScaler()\n", set()),
])
def test_amp007_behind_a_name_is_screened_and_reported_at_the_written_spelling(body, flagged) -> None:
    """The screen keeps every file the rule flags (it follows the same names), and the finding sits on the line
    that spells the legacy name."""
    from amplint.prefilter import Prefilter, Verdict

    text = "import contextlib\nimport torch\n" + body
    rows = {row - 2 for _, row, _ in findings(text, "t.py", codes=("AMP007",))}
    assert rows == flagged
    if flagged:
        assert Prefilter([RULES_BY_CODE["AMP007"]]).decide(text) is Verdict.ANALYSE


def test_amp007_alias_message_names_the_calls_and_offers_no_fix() -> None:
    text = ("import torch\nScaler = torch.cuda.amp.GradScaler\n\n\ndef fit():\n    a = Scaler(2.0**14)\n"
            "    b = Scaler()\n    return a, b\n")
    (diagnostic,) = lint_text(text, "x.py", [RULES_BY_CODE["AMP007"]()]).diagnostics
    assert diagnostic.location.row == 2 and diagnostic.fix is None
    assert diagnostic.message == ("`Scaler` is the deprecated `torch.cuda.amp.GradScaler`: `Scaler(2.0**14)` (line 6) "
                                  "and 1 more warn on each call")
    assert 'functools.partial(torch.amp.GradScaler, "cuda")' in diagnostic.help


def test_amp007_reads_its_table() -> None:
    """AMP007 from a table: every deprecated spelling, its replacement, device, legacy signature and default dtype
    is a row of `vocabulary.DEPRECATIONS`; the rule, its facts and its migration spell none of them."""
    from amplint import vocabulary as vocab

    assert list(vocab.DEPRECATED_AMP) == [s for row in vocab.DEPRECATIONS for s in row.spellings]
    assert {row.new_name for row in vocab.DEPRECATIONS if row.default_dtype} == {vocab.AUTOCAST}
    for path in ("amplint/rules/amp007_deprecated_amp_api.py", "amplint/rules/migrate.py", "amplint/facts/legacy.py"):
        strings = {node.value for node in ast.walk(ast.parse((REPO / path).read_text()))
                   if isinstance(node, ast.Constant) and isinstance(node.value, str)}
        assert not strings & set(vocab.DEPRECATED_AMP), path
    assert len((REPO / "amplint/rules/amp007_deprecated_amp_api.py").read_text().splitlines()) <= 200


@pytest.mark.parametrize("line, flagged", [
    ("register()(torch.cuda.amp.grad_scaler.GradScaler)", True),
    ("REGISTRY['legacy'] = torch.cuda.amp.GradScaler", True),
    ("build(torch.cuda.amp.GradScaler, init_scale=2.0**14)", True),
    ("print(torch.cuda.amp.GradScaler)", False),  # looked at, not called
    ("ok = isinstance(build, torch.cuda.amp.GradScaler)", False),  # a type
    ("describe(torch.cuda.amp.GradScaler)", False),  # a project function that never calls its parameter
    ("TABLE = {'cuda': torch.cuda.amp.GradScaler}", False),  # a table nothing reads
])
def test_amp007_a_legacy_class_handed_on_as_a_value(line, flagged) -> None:
    text = ("import torch\nREGISTRY = {}\n\n\ndef register():\n    return lambda cls: cls\n\n\n"
            "def build(factory, **kwargs):\n    return factory(**kwargs)\n\n\n"
            "def describe(factory):\n    return factory.__name__\n\n\n" + line + "\n")
    found = lint_text(text, "x.py", [RULES_BY_CODE["AMP007"]()]).diagnostics
    assert [d.location.row for d in found] == ([17] if flagged else [])
    if flagged:
        (diagnostic,) = found
        assert diagnostic.fix is None and "handed on as a value" in diagnostic.message
        assert '"cuda"' in diagnostic.help and "no fix" in diagnostic.help


@pytest.mark.runtime
def test_amp007_star_exports_are_what_torch_binds() -> None:
    """`STAR_EXPORTS` lists what `from <module> import *` binds of the AMP names, measured on the installed torch;
    and calling a star-imported legacy name warns (what the star import's finding says)."""
    from amplint.facts.names import STAR_EXPORTS

    program = textwrap.dedent("""
        import json, warnings
        amp_names = {"autocast", "GradScaler", "custom_fwd", "custom_bwd"}
        found = {}
        for module in MODULES:
            scope = {}
            exec(f"from {module} import *", scope)
            found[module] = sorted(amp_names & set(scope))
        scope = {}
        exec("from torch.cuda.amp import *", scope)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            scope["GradScaler"](enabled=False)
        found["warned"] = [type(w.message).__name__ for w in caught]
        print(json.dumps(found))
    """).replace("MODULES", repr(sorted(STAR_EXPORTS)))
    completed = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-2000:]
    found = json.loads(completed.stdout.strip().splitlines()[-1])
    for module, names in STAR_EXPORTS.items():
        assert found[module] == sorted(names), module
    assert "FutureWarning" in found["warned"]


def test_amp007_migration_leaves_a_called_alias_as_it_is() -> None:
    """The module's fix migrates the direct calls but never the legacy class behind a name that is called with
    legacy arguments (`torch.amp.GradScaler(2.0**14)` would take the scale for the device)."""
    text = ("import torch\nScaler = torch.cuda.amp.GradScaler\n\n\ndef fit():\n    scaler = Scaler(2.0**14)\n"
            "    with torch.cuda.amp.autocast():\n        pass\n    return scaler\n")
    outcome = fix("AMP007", text, "x.py")
    assert outcome.text == text.replace("torch.cuda.amp.autocast()", 'torch.amp.autocast("cuda", dtype=torch.float16)')
    assert findings(outcome.text, "x.py", codes=("AMP007",)) == {("AMP007", 2, 10)}


@pytest.mark.parametrize("source, flagged", [
    # a comment is not a shim: neither an `import` in a comment of the try body nor a version in a comment of a test
    ("try:\n    # import torch.amp once the cluster has torch 2.4\n    s = torch.cuda.amp.GradScaler()\n"
     "except Exception:\n    s = None\n", True),
    ("try:\n    import apex\n    s = torch.cuda.amp.GradScaler()\nexcept ImportError:\n    s = None\n", False),
    ("if (use_amp  # torch 2.4 renamed it\n        and ok):\n    s = torch.cuda.amp.GradScaler()\n", True),
    ("if (use_amp\n        and torch_version < (2, 4)):\n    s = torch.cuda.amp.GradScaler()\n", False),
    ("if torch.__version__ < '2.4':\n    s = torch.cuda.amp.GradScaler()\n", False),
])
def test_amp007_compatibility_shims_are_read_from_code_not_comments(source, flagged) -> None:
    text = "import torch\n" + source
    assert bool(findings(text, "t.py", codes=("AMP007",))) is flagged
