"""Every rule is documented in the same sections and has the metadata the tool relies on."""

from __future__ import annotations

import re

import pytest

from amplint.rules import ALL_RULES
from amplint.rules.base import DOC_SECTIONS

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
