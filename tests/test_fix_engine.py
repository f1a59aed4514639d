"""Fixes: every flagged fixture against its expected fix, and the fix engine's guarantees on real files
(encodings, BOM, newlines, tabs, --diff, exit codes, files changed on disk, unparsable fixes, JSON)."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

import amplint.sources.file
from amplint.diagnostics import Applicability
from amplint.engine import lint_text
from amplint.fixer import fix_text
from amplint.rules import RULES_BY_CODE
from amplint.rules.base import Rule
from amplint.rules.amp003_clip_without_unscale import ClipWithoutUnscale
from samples import invoke_in
from test_fixtures import fixture_files, fixture_id, folder_code, with_known_failures

# fixture path -> why amplint's fix differs from fixed/ today. Strict xfails: remove an entry once it passes.
KNOWN_FIX_FAILURES: dict[str, str] = {}
# Only the core rules: each is selected explicitly so rules added later cannot change these byte-level tests.
CORE = "AMP001,AMP002,AMP003,AMP004,AMP005,AMP006"

FLAGGED = fixture_files("flagged")


def rule_for(path: Path):
    code = folder_code(path.parents[1])
    if code not in RULES_BY_CODE:
        pytest.skip(f"{code} is not a registered rule yet")
    return RULES_BY_CODE[code]()


def fixed_path(path: Path) -> Path:
    return path.parents[1] / "fixed" / path.name


@pytest.mark.parametrize("path", with_known_failures(FLAGGED, KNOWN_FIX_FAILURES))
def test_fix_gives_the_expected_file(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    outcome = fix_text(text, str(path), rules=[rule_for(path)], unsafe=True)
    assert outcome.error is None
    expected = fixed_path(path)
    if expected.exists():
        assert outcome.text == expected.read_text(encoding="utf-8")
    else:
        assert outcome.text == text, "no fixed/ file: fixing must leave this file unchanged"


@pytest.mark.parametrize("path", [pytest.param(p, id=fixture_id(p)) for p in FLAGGED])
def test_fixed_result_is_final(path: Path) -> None:
    """The expected result (fixed/, else the original) parses, keeps no fixable finding, and fixing it again
    changes nothing."""
    rule = rule_for(path)
    original = path.read_text(encoding="utf-8")
    expected = fixed_path(path)
    text = expected.read_text(encoding="utf-8") if expected.exists() else original
    compile(text, str(expected), "exec")
    remaining = [d for d in lint_text(text, str(path), [rule]).diagnostics if d.code == rule.code]
    assert all(not d.fixable(unsafe=True) for d in remaining), [d.message for d in remaining if d.fix]
    unfixable_before = [d for d in lint_text(original, str(path), [rule]).diagnostics
                        if d.code == rule.code and not d.fixable(unsafe=True)]
    if expected.exists():
        assert len(remaining) <= len(unfixable_before)
    assert fix_text(text, str(path), rules=[rule], unsafe=True).text == text


@pytest.mark.parametrize("path", [pytest.param(p, id=fixture_id(p)) for p in FLAGGED])
def test_fixing_the_fix_output_changes_nothing(path: Path) -> None:
    rule = rule_for(path)
    first = fix_text(path.read_text(encoding="utf-8"), str(path), rules=[rule], unsafe=True)
    compile(first.text, str(path), "exec")
    assert fix_text(first.text, str(path), rules=[rule], unsafe=True).text == first.text


# --- the engine on real files, through the command line ---------------------------------------------------

SAMPLE = '''\
"""Training loop with three mistakes (the comment below has a non-ASCII character: caf\u00e9)."""

import torch


def train(model, loader, optimizer):
    for x, y in loader:
        scaler = torch.amp.GradScaler("cuda")  # rebuilt: caf\u00e9
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
            scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
'''
SAMPLE_FIXED = '''\
"""Training loop with three mistakes (the comment below has a non-ASCII character: caf\u00e9)."""

import torch


def train(model, loader, optimizer):
    scaler = torch.amp.GradScaler("cuda")  # rebuilt: caf\u00e9
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
'''
# Evaluation code stepping the scaler: reported (AMP005) without a fix.
UNFIXABLE = '''\
import torch


@torch.no_grad()
def evaluate(model, loader, optimizer, scaler):
    model.eval()
    for x in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            out = model(x)
        scaler.step(optimizer)
    return out
'''


def cli(*args: str, cwd: Path):
    return invoke_in(cwd, ["check", "--select", CORE, *args])


def write(tmp_path: Path, data: bytes, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_fix_rewrites_the_sample(tmp_path: Path) -> None:
    path = write(tmp_path, SAMPLE.encode())
    result = cli("--fix", path.name, cwd=tmp_path)
    assert path.read_bytes() == SAMPLE_FIXED.encode()
    assert result.exit_code == 0, result.output


def test_crlf_is_kept(tmp_path: Path) -> None:
    path = write(tmp_path, SAMPLE.replace("\n", "\r\n").encode())
    cli("--fix", path.name, cwd=tmp_path)
    data = path.read_bytes()
    assert data == SAMPLE_FIXED.replace("\n", "\r\n").encode()
    assert b"\n" not in data.replace(b"\r\n", b"")


def test_lone_cr_line_ends_are_kept_to_the_last_one(tmp_path: Path) -> None:
    """libcst does not give back a lone CR that ends a file (its code for `x\r` is `x`): a fix keeps it, also
    when it changes the last statement (which libcst regenerates without it)."""
    path = write(tmp_path, SAMPLE.replace("\n", "\r").encode())
    cli("--fix", path.name, cwd=tmp_path)
    assert path.read_bytes() == SAMPLE_FIXED.replace("\n", "\r").encode()
    last = ("import torch\nfor x in data:\n    with torch.autocast('cuda'):\n        loss = model(x).sum()\n"
            "        loss.backward()\n")
    lf, cr = write(tmp_path, last.encode(), "lf.py"), write(tmp_path, last.replace("\n", "\r").encode(), "cr.py")
    cli("--fix", lf.name, cr.name, cwd=tmp_path)
    assert lf.read_bytes() != last.encode()  # the backward left the block
    assert cr.read_bytes() == lf.read_bytes().replace(b"\n", b"\r")


def test_utf8_bom_is_kept(tmp_path: Path) -> None:
    path = write(tmp_path, b"\xef\xbb\xbf" + SAMPLE.encode())
    cli("--fix", path.name, cwd=tmp_path)
    assert path.read_bytes() == b"\xef\xbb\xbf" + SAMPLE_FIXED.encode()


def tabs(text: str) -> str:
    lines = []
    for line in text.splitlines(keepends=True):
        stripped = line.lstrip(" ")
        lines.append("\t" * ((len(line) - len(stripped)) // 4) + stripped)
    return "".join(lines)


def test_tab_indentation_is_kept(tmp_path: Path) -> None:
    path = write(tmp_path, tabs(SAMPLE).encode())
    cli("--fix", path.name, cwd=tmp_path)
    data = path.read_text(encoding="utf-8")
    assert data == tabs(SAMPLE_FIXED)
    assert not any(line.startswith(" ") for line in data.splitlines())


def test_latin1_file_keeps_its_bytes_except_the_edit(tmp_path: Path) -> None:
    cookie = "# -*- coding: latin-1 -*-\n"
    path = write(tmp_path, (cookie + SAMPLE).encode("latin-1"))
    assert "é".encode("latin-1") in path.read_bytes()
    cli("--fix", path.name, cwd=tmp_path)
    assert path.read_bytes() == (cookie + SAMPLE_FIXED).encode("latin-1")


def test_diff_writes_nothing_and_exits_1(tmp_path: Path) -> None:
    data = SAMPLE.encode()
    path = write(tmp_path, data)
    result = cli("--diff", path.name, cwd=tmp_path)
    assert result.exit_code == 1
    assert path.read_bytes() == data
    assert "+        scaler.unscale_(optimizer)" in result.output
    assert f"--- a/{path.name}" in result.output


def test_diff_exits_0_when_nothing_to_fix(tmp_path: Path) -> None:
    path = write(tmp_path, SAMPLE_FIXED.encode())
    result = cli("--diff", path.name, cwd=tmp_path)
    assert result.exit_code == 0, result.output
    assert path.read_bytes() == SAMPLE_FIXED.encode()


def test_fix_exits_1_while_findings_remain(tmp_path: Path) -> None:
    path = write(tmp_path, (SAMPLE + "\n\n" + UNFIXABLE.replace("import torch\n", "")).encode())
    result = cli("--fix", path.name, cwd=tmp_path)
    assert result.exit_code == 1, result.output
    assert "AMP005" in result.output
    assert "scaler.unscale_(optimizer)" in path.read_text(encoding="utf-8")  # the fixable part was fixed


def test_fix_exits_0_when_everything_is_fixed(tmp_path: Path) -> None:
    path = write(tmp_path, SAMPLE.encode())
    assert cli("--fix", path.name, cwd=tmp_path).exit_code == 0
    assert cli(path.name, cwd=tmp_path).exit_code == 0


def test_file_changed_on_disk_is_not_overwritten(tmp_path: Path, monkeypatch) -> None:
    path = write(tmp_path, SAMPLE.encode())
    edited = (SAMPLE + "# edited in the editor meanwhile\n").encode()
    real_read = amplint.sources.file.read_source

    def read_then_edit(name, *args, **kwargs):
        source = real_read(name, *args, **kwargs)
        Path(name).write_bytes(edited)  # somebody saves the file after amplint read it
        return source

    monkeypatch.setattr(amplint.sources.file, "read_source", read_then_edit)
    result = cli("--fix", path.name, cwd=tmp_path)
    assert path.read_bytes() == edited
    assert "changed on disk" in result.output
    assert result.exit_code == 1


def test_unparsable_fix_is_refused(tmp_path: Path, monkeypatch) -> None:
    real_check = ClipWithoutUnscale.check

    def garbage_fixes(self, facts):
        for finding in real_check(self, facts):
            if finding.fix is not None:
                code = facts.module.code + "\ndef broken(:\n"
                finding.fix.rewrite = lambda code=code: types.SimpleNamespace(code=code)
            yield finding

    monkeypatch.setattr(ClipWithoutUnscale, "check", garbage_fixes)
    source = SAMPLE_FIXED.replace("        scaler.unscale_(optimizer)\n", "")
    path = write(tmp_path, source.encode())
    result = cli("--fix", "--select", "AMP003", path.name, cwd=tmp_path)
    assert path.read_bytes() == source.encode()
    assert "does not compile" in result.output
    assert result.exit_code == 1
    outcome = fix_text(source, "train.py", rules=[ClipWithoutUnscale()])
    assert outcome.text == source and not outcome.applied and outcome.error


def offsets(text: str, row: int, column: int) -> int:
    lines = text.splitlines(keepends=True)
    return sum(len(line) for line in lines[: row - 1]) + column - 1


def test_json_output_carries_each_fix(tmp_path: Path) -> None:
    path = write(tmp_path, SAMPLE.encode())
    result = cli("--output-format", "json", path.name, cwd=tmp_path)
    assert result.exit_code == 1
    diagnostics = json.loads(result.output)
    assert sorted(d["code"] for d in diagnostics) == ["AMP001", "AMP003", "AMP004"]
    expected = {d.code: d for d in lint_text(SAMPLE, path.name,
                                             [RULES_BY_CODE[c]() for c in CORE.split(",")]).diagnostics}
    for diagnostic in diagnostics:
        fix = diagnostic["fix"]
        assert fix is not None, diagnostic["code"]
        assert fix["applicability"] in {a.value for a in Applicability}
        assert fix["applicability"] == expected[diagnostic["code"]].fix.applicability.value
        assert fix["message"] == expected[diagnostic["code"]].fix.message
        assert fix["edits"], diagnostic["code"]
        text = SAMPLE
        for edit in sorted(fix["edits"], key=lambda e: (e["location"]["row"], e["location"]["column"]),
                           reverse=True):
            start = offsets(text, edit["location"]["row"], edit["location"]["column"])
            end = offsets(text, edit["end_location"]["row"], edit["end_location"]["column"])
            text = text[:start] + edit["content"] + text[end:]
        compile(text, "edited.py", "exec")
        assert text != SAMPLE
    clip = next(d for d in diagnostics if d["code"] == "AMP003")
    assert "scaler.unscale_(optimizer)" in "".join(e["content"] for e in clip["fix"]["edits"])


# --- fixer-wide guarantees: code that compiles, a real fixed point -----------------------------------------

class LegacyCallRule(Rule):
    """A stub rule for the fixer's own checks: every `legacy(...)` call is reported, and its safe fix renames it
    `modern(...)` turning a first positional argument into `enabled=` (as a deprecated-API migration might).
    On `legacy(True, enabled=flag)` that gives `enabled` twice: libcst parses it, CPython does not compile it."""

    code, name, words = "AMP990", "legacy-call", None

    def check(self, facts):
        from amplint.diagnostics import Applicability
        from amplint.lazy import libcst as cst
        from amplint.rules.base import Finding, FixPlan, replace_nodes

        calls = [node for node in _walk(facts.module) if isinstance(node, cst.Call)
                 and isinstance(node.func, cst.Name) and node.func.value == "legacy"]
        for call in calls:
            args = list(call.args)
            if args and args[0].keyword is None:
                args[0] = args[0].with_changes(keyword=cst.Name("enabled"), equal=cst.AssignEqual(
                    whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))
            new = call.with_changes(func=cst.Name("modern"), args=args)
            yield Finding(call, "legacy() is deprecated",
                          FixPlan("use modern()", lambda call=call, new=new: replace_nodes(facts.module, {call: new}),
                                  Applicability.SAFE))


class GrowingFixRule(Rule):
    """A stub rule whose safe fix never removes its finding: `h` in `f(h...)` gets one more `.float()` per round
    (the shape of a cast fix that keeps seeing a low-precision value)."""

    code, name, words = "AMP991", "growing-fix", None

    def check(self, facts):
        from amplint.lazy import libcst as cst
        from amplint.rules.base import Finding, FixPlan, replace_nodes

        for node in _walk(facts.module):
            if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "f":
                arg = node.args[0]
                cast = cst.Call(cst.Attribute(arg.value, cst.Name("float")))
                new = node.with_changes(args=[arg.with_changes(value=cast)])
                yield Finding(node.func, "f sees a low-precision h",
                              FixPlan("cast", lambda node=node, new=new: replace_nodes(facts.module, {node: new})))


def _walk(node):
    yield node
    for child in node.children:
        yield from _walk(child)


def test_fix_that_does_not_compile_is_refused_and_the_others_applied() -> None:
    """libcst parses `modern(enabled=True, enabled=flag)`, CPython refuses it (the AMP007 case
    `torch.cuda.amp.autocast(True, enabled=flag)`): the fixer refuses that fix, applies the other one and says why.
    Before the compile check the fixer wrote the duplicate keyword."""
    source = "flag = True\nlegacy(True, enabled=flag)\nlegacy(flag)\n"
    outcome = fix_text(source, "train.py", rules=[LegacyCallRule()])
    assert outcome.text == "flag = True\nlegacy(True, enabled=flag)\nmodern(enabled=flag)\n"
    compile(outcome.text, "train.py", "exec")
    assert [d.code for d in outcome.applied] == ["AMP990"]
    assert "does not compile" in outcome.error and "keyword argument repeated" in outcome.error
    assert [d.location.row for d in outcome.remaining] == [2]
    assert fix_text(outcome.text, "train.py", rules=[LegacyCallRule()]).text == outcome.text


def test_file_that_did_not_compile_is_judged_by_parse_and_top_level_await_compiles() -> None:
    """A file CPython would not compile before fixing (here: `return` outside a function) can only be asked to
    parse; top-level `await` (notebook cells) counts as compiling, so the compile check still applies there."""
    outcome = fix_text("return legacy(True, enabled=flag)\n", "m.py", rules=[LegacyCallRule()])
    assert outcome.text == "return modern(enabled=True, enabled=flag)\n" and outcome.error is None
    notebook = "await start()\nlegacy(True, enabled=flag)\nlegacy(1)\n"
    outcome = fix_text(notebook, "nb.ipynb", rules=[LegacyCallRule()])
    assert outcome.text == "await start()\nlegacy(True, enabled=flag)\nmodern(enabled=1)\n"
    assert "does not compile" in outcome.error


def test_fix_that_never_removes_its_finding_stops() -> None:
    """A round must take away a finding it fixed: a fix that only grows the code is refused, and fixing stops
    (before: applied ten times, `h.float().float()...`, then the loop ended silently)."""
    outcome = fix_text("f(h)\n", "m.py", rules=[GrowingFixRule()])
    assert outcome.text == "f(h)\n" and not outcome.applied
    assert "did not remove their findings" in outcome.error


def nested_regions(depth: int) -> str:
    lines = ["import torch", "", "", "def train(model, x, optimizer):"]
    for level in range(1, depth + 1):
        lines.append("    " * level + 'with torch.autocast("cuda"):')
    body = "    " * (depth + 1)
    # zero_grad with step: an optimizer by what the code does with it, so its step() is of the update phase
    lines += [body + "loss = model(x).sum()", body + "loss.backward()", body + "optimizer.step()",
              body + "optimizer.zero_grad()"]
    return "\n".join(lines) + "\n"


def test_fixer_reaches_a_fixed_point_beyond_ten_rounds() -> None:
    """15 nested regions: the backward and the step leave one region per round, so 15 rounds are needed (the old
    fixed limit of 10 left them inside five regions, and fixing again changed the file)."""
    rules = [RULES_BY_CODE["AMP001"](), RULES_BY_CODE["AMP002"]()]
    source = nested_regions(15)
    outcome = fix_text(source, "train.py", rules=rules)
    assert outcome.error is None and outcome.remaining == []
    assert "\n    loss.backward()\n    optimizer.step()\n" in outcome.text
    compile(outcome.text, "train.py", "exec")
    again = fix_text(outcome.text, "train.py", rules=rules)
    assert again.text == outcome.text and not again.applied
    assert outcome.found and outcome.removed == len(outcome.found)


def test_legacy_autocast_with_positional_and_keyword_enabled_compiles() -> None:
    """`torch.cuda.amp.autocast(True, enabled=flag)`: whatever the rules make of it, the fixed file compiles (the
    migration once wrote `enabled` twice; the compile check refuses that even when a rule gets it wrong)."""
    source = ("import torch\n\nflag = True\nwith torch.cuda.amp.autocast(True, enabled=flag):\n    pass\n"
              "scaler = torch.cuda.amp.GradScaler()\n")
    for unsafe in (False, True):
        outcome = fix_text(source, "train.py", unsafe=unsafe)
        compile(outcome.text, "train.py", "exec", dont_inherit=True)
        assert fix_text(outcome.text, "train.py", unsafe=unsafe).text == outcome.text
