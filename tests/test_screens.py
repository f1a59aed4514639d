"""Screens derived, not written: each rule declares what must co-occur for it to fire (`Rule.requires`,
`Rule.requires_across`, amplint/rules/screen.py), the prefilter computes its screen from the declaration, and
the screen of every rule is conservative on every case the rule flags, alone and across modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from amplint.index.build import build_index
from amplint.prefilter import Prefilter, Verdict
from amplint.rules import ALL_RULES
from amplint.rules.base import Rule
from amplint.rules.screen import AllOf, AnyOf, Ask, AskProject, Need
from amplint.index.summary import Summary

from test_fixtures import expected_marks

REPO = Path(__file__).resolve().parents[1]
RULES_DIR = REPO / "amplint" / "rules"


def rule_folder(rule: type[Rule]) -> Path:
    folders = sorted((REPO / "fixtures").glob(f"{rule.code}-*"))
    assert len(folders) == 1, rule.code
    return folders[0]


def flagged_cases() -> list[tuple[type[Rule], Path]]:
    return [(rule, path) for rule in ALL_RULES for path in sorted((rule_folder(rule) / "flagged").glob("*.py"))
            if any(code == rule.code for code, _, _ in expected_marks(path.read_text(encoding="utf-8")))]


def project_cases() -> list[tuple[type[Rule], Path, Path]]:
    """(rule, case folder, file) for each file of a project fixture marked with a finding of the rule (the
    torch-floor cases, a `project/` beside its `fixed/`, are tests/test_torch_floor.py's, as in test_projects)."""
    found = []
    for case in sorted((REPO / "fixtures").glob("AMP*-*/projects/*")):
        if not case.is_dir() or (case / "project").is_dir():
            continue
        for path in sorted(case.rglob("*.py")):
            codes = {code for code, _, _ in expected_marks(path.read_text(encoding="utf-8"))}
            found += [(rule, case, path) for rule in ALL_RULES if rule.code in codes]
    return found


FLAGGED = flagged_cases()
PROJECTS = project_cases()


def case_id(case) -> str:
    return f"{case[0].code}:{case[-1].relative_to(REPO / 'fixtures').as_posix()}"


def test_there_are_cases_for_every_rule():
    assert {rule for rule, _ in FLAGGED} == set(ALL_RULES)
    across = {rule for rule in ALL_RULES if rule.requires_across is not None}
    assert across and across <= {rule for rule, _, _ in PROJECTS}


def test_no_rule_module_writes_its_screen():
    """Rules declare `requires`; `maybe_applies` and `maybe_applies_across` are computed in one place."""
    written = []
    for path in sorted(RULES_DIR.glob("amp*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("maybe_applies"):
                written.append(f"{path.name}:{node.lineno} {node.name}")
    assert not written
    for rule in ALL_RULES:
        assert rule.maybe_applies.__func__ is Rule.maybe_applies.__func__, rule.code
        assert rule.maybe_applies_across.__func__ is Rule.maybe_applies_across.__func__, rule.code
        assert isinstance(rule.requires, Need), f"{rule.code} declares no requirement: every file would be analysed"


def test_the_declarations_are_monotone():
    """Only `&` and `|` of questions: no part negates another, so text-mode answers bound exact-mode ones."""
    def parts(need: Need):
        yield need
        if isinstance(need, (AllOf, AnyOf)):
            for part in need.parts:
                yield from parts(part)

    for rule in ALL_RULES:
        for declared in (rule.requires, rule.requires_across):
            for need in parts(declared) if declared is not None else ():
                assert type(need) in (AllOf, AnyOf, Ask, AskProject), (rule.code, need)
        assert not any(isinstance(need, AskProject) for need in parts(rule.requires)), rule.code


@pytest.mark.parametrize("case", FLAGGED, ids=case_id)
def test_each_rules_screen_keeps_every_file_it_flags(case):
    rule, path = case
    verdict, rules = Prefilter([rule]).select(path.read_text(encoding="utf-8"))
    assert verdict is Verdict.ANALYSE and rules == [rule], (rule.code, verdict)


@pytest.mark.parametrize("case", PROJECTS, ids=case_id)
def test_each_rules_screen_keeps_every_project_file_it_flags(case):
    rule, folder, path = case
    files = sorted(str(p) for p in folder.rglob("*.py"))
    index = build_index(files, lambda name: Path(name).read_text(encoding="utf-8"))
    verdict, rules = Prefilter([rule]).select(path.read_text(encoding="utf-8"), view=index.view(str(path)))
    assert verdict is Verdict.ANALYSE and rules == [rule], (rule.code, verdict)


def test_a_declaration_is_evaluated_in_order_and_short_circuits():
    asked = []

    def question(summary, answer):
        asked.append(answer)
        return answer

    need = Ask(question, False) & Ask(question, True) | Ask(question, True)
    assert need.holds(Summary("x = 1\n")) and asked == [False, True]
    asked.clear()
    assert not (Ask(question, True) & (Ask(question, False) | Ask(question, False))).holds(Summary(""))
    assert asked == [True, False, False]
