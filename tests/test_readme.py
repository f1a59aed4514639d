"""The README stays true: its rule table matches the registry, its set-up example really reports findings."""

from __future__ import annotations

import re
from pathlib import Path

from amplint.rules import ALL_RULES
from amplint.runner import Mode, process_file, rules_for
from amplint.config import Settings

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def rule_table_rows() -> list[list[str]]:
    table = README.split("<!-- rules-table", 1)[1].split("<!-- /rules-table -->", 1)[0]
    rows = [line for line in table.splitlines() if re.match(r"\|\s*AMP\d{3}", line)]
    return [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows]


def test_rule_table_matches_the_registry():
    rows = rule_table_rows()
    assert [(code, name, fix) for code, name, fix, _ in rows] == [
        (rule.code, rule.name, rule.fix) for rule in ALL_RULES
    ]
    assert all(summary for *_, summary in rows)


def test_the_set_up_example_reports_findings():
    assert "amplint check examples/train_amp.py" in README
    path = str(REPO / "examples" / "train_amp.py")
    outcome = process_file(path, rules_for(path, list(ALL_RULES), Settings()), Mode())
    assert {d.code for d in outcome.diagnostics} == {"AMP001", "AMP003", "AMP004"}


def test_the_readme_test_command_is_what_ci_runs():
    ci = (REPO / ".ci" / "run").read_text()
    assert "python -m pytest" in README and "python -m pytest" in ci
    assert 'pip install torch==2.13.0 -e ".[test]"' in README
