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
    assert [(code, name, severity, fix) for code, name, severity, fix, _ in rows] == [
        (rule.code, rule.name, rule.severity.value, rule.fix) for rule in ALL_RULES
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


def defined_tests() -> dict[str, set[str]]:
    """The test functions each file of tests/ defines (at any level: in classes too), read with ast."""
    import ast

    return {path.name: {node.name for node in ast.walk(ast.parse(path.read_text()))
                        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")}
            for path in sorted((REPO / "tests").glob("test_*.py"))}


NAMED_TEST = re.compile(r"`(?:(?:tests/)?(test_\w+\.py)::)?(test_\w+)`")  # `tests/test_x.py::test_y`, `test_y`


def test_every_test_the_readme_names_exists():
    defined = defined_tests()
    named = NAMED_TEST.findall(README)
    assert named
    everywhere = set().union(*defined.values())
    missing = [f"{file}::{name}" if file else name for file, name in named
               if name not in (defined.get(file, set()) if file else everywhere)]
    assert not missing, f"the README names tests that do not exist: {missing}"


def test_each_reliability_promise_is_backed_by_a_named_test():
    table = README.split("<!-- reliability -->", 1)[1].split("<!-- /reliability -->", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("|") and not line.startswith(("| promise", "|---"))]
    assert len(rows) >= 10
    for row in rows:
        promise, tests = [cell.strip() for cell in row.strip().strip("|").split("|")][-2:]
        assert promise and [file for file, _ in NAMED_TEST.findall(tests) if file], f"no test named for: {promise}"
