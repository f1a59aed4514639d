"""Every rule is documented in the same sections and has the metadata the tool relies on."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from amplint.config import Settings
from amplint.rules import ALL_RULES, RULES_BY_CODE
from amplint.rules.base import DOC_SECTIONS
from amplint.outcome import Mode
from amplint.pipeline import process_text
from amplint.selection import rules_for

FIX_KINDS = {"safe", "unsafe", "sometimes", "none"}


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_rule_documentation(rule):
    doc = rule.documentation()
    positions = [doc.find(f"## {section}") for section in DOC_SECTIONS]
    assert all(p >= 0 for p in positions), f"{rule.code} lacks a section: {DOC_SECTIONS}"
    assert positions == sorted(positions), f"{rule.code}: sections out of order"
    assert doc.count("```python") >= 2, f"{rule.code}: Example and Use instead need code"
    assert rule.headline()


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_rule_metadata(rule):
    assert re.fullmatch(r"AMP\d{3}", rule.code)
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.name)
    assert rule.fix in FIX_KINDS
    assert rule.words, "the prefilter needs words"


def test_codes_and_names_are_unique():
    assert len({r.code for r in ALL_RULES}) == len(ALL_RULES)
    assert len({r.name for r in ALL_RULES}) == len(ALL_RULES)


# --- the examples: each rule's `Example` is flagged by it, its `Use instead` is clean -------------------------

def code_blocks(documentation: str, section: str) -> list[str]:
    """The ```python blocks of one `## ` section of a rule's documentation."""
    match = re.search(rf"^## {re.escape(section)}\n(.*?)(?=^## |\Z)", documentation, re.S | re.M)
    assert match, f"no section `## {section}`"
    return re.findall(r"^```python\n(.*?)^```", match.group(1), re.S | re.M)


def lint_example(code: str, rule_classes) -> list:
    """An example as a file of its own, as it is written (a user copies it whole), through the prefilter and the
    engine as `amplint check` runs them, with no torch floor (every rule applies)."""
    rules = rules_for("example.py", list(rule_classes), Settings())
    return process_text(code, "example.py", rules, Mode()).diagnostics


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_each_example_is_a_complete_program(rule):
    """A snippet that uses `torch` imports it: without the import `torch` is an unknown name and no rule can tell
    what `torch.autocast` is, so a copied Example would pass and a copied Use instead would prove nothing."""
    for section in ("Example", "Use instead"):
        for code in code_blocks(rule.documentation(), section):
            compile(code, f"{rule.code} {section}", "exec")
            assert re.search(r"^(import torch\b|from torch\b)", code, re.M), f"{rule.code} {section}:\n{code}"


# Every Example and Use instead as a file of its own, linted by one `amplint check` run with JSON output, as a
# user who copied them would run it (no configuration: every rule, no torch floor).
@pytest.fixture(scope="module")
def examples_through_the_cli(tmp_path_factory):
    from click.testing import CliRunner

    from amplint.cli import main

    folder = tmp_path_factory.mktemp("examples")
    files = {}
    for rule in ALL_RULES:
        for section in ("Example", "Use instead"):
            for number, code in enumerate(code_blocks(rule.documentation(), section)):
                path = folder / f"{rule.code}_{section.replace(' ', '_')}_{number}.py"
                path.write_text(code, encoding="utf-8")
                files[path.name] = (rule.code, section, code)
    here = os.getcwd()
    os.chdir(folder)  # the configuration is looked for from here: none, as in a user's scratch folder
    try:
        opt_in = [arg for rule in ALL_RULES if rule.opt_in for arg in ("--extend-select", rule.code)]
        result = CliRunner().invoke(main, ["check", ".", "--output-format", "json", "--no-cache", *opt_in])
    finally:
        os.chdir(here)
    assert result.exit_code == 1, result.output  # the Examples are flagged
    found: dict[str, list[str]] = {name: [] for name in files}
    for diagnostic in json.loads(result.output):
        found[Path(diagnostic["filename"]).name].append(diagnostic["code"])
    return files, found


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_copied_examples_through_the_cli(rule, examples_through_the_cli):
    """`amplint check` on each copied snippet: the Example reports the rule, the Use instead reports nothing."""
    files, found = examples_through_the_cli
    mine = {name: spec for name, spec in files.items() if spec[0] == rule.code}
    assert {section for _, section, _ in mine.values()} == {"Example", "Use instead"}
    for name, (_, section, code) in mine.items():
        if section == "Example":
            assert rule.code in found[name], f"{rule.code}'s Example, copied, is not flagged:\n{code}\n{found[name]}"
        else:
            assert not found[name], f"{rule.code}'s Use instead, copied, is flagged:\n{code}\n{found[name]}"


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_the_example_is_flagged_by_its_rule(rule):
    blocks = code_blocks(rule.documentation(), "Example")
    assert blocks
    for code in blocks:
        found = [d.code for d in lint_example(code, [rule])]
        assert rule.code in found, f"{rule.code}'s Example is not flagged by {rule.code}:\n{code}"


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_use_instead_is_clean(rule):
    blocks = code_blocks(rule.documentation(), "Use instead")
    assert blocks
    for code in blocks:
        found = [(d.code, d.message) for d in lint_example(code, ALL_RULES)]
        assert not found, f"{rule.code}'s Use instead is flagged:\n{code}\n{found}"


# --- Fix safety says what the rule's fixes are ----------------------------------------------------------------

# The definition of a safe fix some sections open with: it speaks of fixes in general, not of this rule's.
DEFINITION = re.compile(r"(?:Safe means: |A safe fix )[^.]*?cannot change what a correct program computes[^.]*\.")


def fix_safety(rule) -> str:
    documentation = rule.documentation()
    section = documentation.split("## Fix safety\n", 1)[1]
    return " ".join(section.split("\n## ", 1)[0].split())


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_fix_safety_agrees_with_the_rules_fix_kind(rule):
    """`Rule.fix` (the README's rules table shows it: tests/test_readme.py) and the prose say the same: a rule with
    no fix opens with "No fix", an unsafe one with "Unsafe", a safe one with "Safe" and never calls its fix
    unsafe; one whose fix is sometimes safe says when it is unsafe."""
    text = fix_safety(rule)
    rest = DEFINITION.sub("", text)
    if rule.fix == "none":
        assert text.startswith("No fix"), text
    elif rule.fix == "unsafe":
        assert text.startswith("Unsafe"), text
    elif rule.fix == "safe":
        assert text.startswith("Safe") and not re.search(r"\bunsafe\b", rest, re.I), text
    else:
        assert rule.fix == "sometimes"
        assert re.search(r"\bunsafe\b", rest, re.I), f"{rule.code}: when is the fix unsafe?\n{text}"
        assert not text.startswith(("No fix", "Unsafe")), text


# --- "What amplint does not flag, and why" (docs/not-flagged.md, a page of the site) ------------------------------

REPO = Path(__file__).resolve().parents[1]
NOT_FLAGGED = REPO / "docs" / "not-flagged.md"


def test_what_amplint_does_not_flag_is_not_flagged():
    """The page's programs (an `out=` call, in-place ops, an explicit `dtype=` feeding a disabled region) are
    clean under every rule."""
    blocks = re.findall(r"^```python\n(.*?)^```", NOT_FLAGGED.read_text(encoding="utf-8"), re.S | re.M)
    assert blocks
    for code in blocks:
        found = [(d.code, d.message) for d in lint_example(code, ALL_RULES)]
        assert not found, f"{NOT_FLAGGED.name} shows code amplint flags:\n{code}\n{found}"


def test_the_compile_notes_name_torchs_option_and_its_values():
    """The page and AMP001's Limits name the option and the values torch reads (its default is checked with torch
    by test_compiled_backward_autocast_is_set_by_config)."""
    readme = NOT_FLAGGED.read_text(encoding="utf-8")
    limits = RULES_BY_CODE["AMP001"].documentation().split("## Limits\n", 1)[1]
    for text in (readme, limits):
        for words in ("torch._functorch.config.backward_pass_autocast", '"same_as_forward"', '"off"'):
            assert words in text


# A custom Function computing a float32 matmul in its backward (no custom_bwd), compiled (aot_eager: AOTAutograd,
# as the default inductor backend does, without a C++ compiler) under bfloat16 CPU autocast. Prints the input
# gradient's relative error against the exact one, per (backward_pass_autocast, where .backward() is written).
COMPILED_BACKWARD = '''
import torch, torch._dynamo, torch._functorch.config as config

class Fp32Mm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        with torch.autocast("cpu", enabled=False):
            return torch.mm(x.float(), w.float())

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return torch.mm(g, w.t()), torch.mm(x.t(), g)

def f(x, w):
    return Fp32Mm.apply(x, w).sum()

torch.manual_seed(0)
W = torch.randn(32, 32, dtype=torch.float64)
exact = torch.ones(32, 32, dtype=torch.float64) @ W.t()

def error(mode, inside):
    torch._dynamo.reset()
    config.backward_pass_autocast = mode
    x = torch.randn(32, 32).requires_grad_()
    w = W.float().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = torch.compile(f, backend="aot_eager", fullgraph=True)(x, w)
        if inside:
            loss.backward()
    if not inside:
        loss.backward()
    return ((x.grad.double() - exact).norm() / exact.norm()).item()

print(config.backward_pass_autocast, error("same_as_forward", False), error("off", True))
'''


@pytest.mark.runtime
def test_compiled_backward_autocast_is_set_by_config():
    """What the page and AMP001's Limits say: the option's default is "same_as_forward", and for a compiled region, `.backward()` after the block still runs under
    autocast by default (bfloat16 error), and with "off" it runs in float32 even when written inside the block."""
    run = subprocess.run([sys.executable, "-c", COMPILED_BACKWARD], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    default, after_default, inside_off = run.stdout.split()
    assert default == "same_as_forward"
    after_default, inside_off = float(after_default), float(inside_off)
    assert after_default > 1e-4, after_default  # bfloat16 arithmetic (2.4e-3 measured)
    assert inside_off < 1e-5, inside_off  # float32 arithmetic (1.4e-7 measured)
