"""Every rule is documented in the same sections and has the metadata the tool relies on."""

from __future__ import annotations

import re

import pytest

from amplint.config import Settings
from amplint.rules import ALL_RULES
from amplint.rules.base import DOC_SECTIONS
from amplint.runner import Mode, process_text, rules_for

FIX_KINDS = {"safe", "unsafe", "sometimes", "none"}


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.code)
def test_rule_documentation(rule):
    doc = rule.documentation()
    positions = [doc.find(f"## {section}") for section in DOC_SECTIONS]
    assert all(p >= 0 for p in positions), f"{rule.code} lacks a section: {DOC_SECTIONS}"
    assert positions == sorted(positions), f"{rule.code}: sections out of order"
    assert doc.count("```python") >= 2, f"{rule.code}: Example and Use instead need code"
    assert rule.summary()


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
    """An example as a file of its own, through the prefilter and the engine as `amplint check` runs them, with no
    torch floor (every rule applies). Examples are fragments of a module that imports torch: `import torch` is
    written above one that does not import it itself."""
    text = code if re.search(r"^import torch\b", code, re.M) else "import torch\n\n" + code
    rules = rules_for("example.py", list(rule_classes), Settings())
    return process_text(text, "example.py", rules, Mode()).diagnostics


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
