"""Every rule fixture, checked against the linter.

Layout (one folder per rule, `fixtures/<CODE>-<name>/`):
- `flagged/*.py`: programs with mistakes; every expected finding of ANY rule is marked on its line with a
  trailing comment `# expect: CODE:COL` (COL is the 1-based column of the reported call or name; several
  findings on a line: `# expect: AMP001:9, AMP002:9`; a mark without `:COL` accepts any column).
- `clean/*.py`: correct patterns and lookalikes; they must produce nothing at all.
- `fixed/*.py`: the expected fix of the folder's rule (checked in test_fix_engine.py).

The tests are generic over every `fixtures/AMP*-*/` folder, so a new rule only needs its folder.
Known linter problems are listed in KNOWN_LINT_FAILURES: they stay the specification and are run as strict
xfails, so the suite turns red the moment one gets fixed (then remove the entry).
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

from amplint.engine import lint_text
from amplint.rules import ALL_RULES, RULES_BY_CODE

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
RULE_FOLDERS = sorted(path for path in FIXTURES.glob("AMP*-*") if path.is_dir())
CORE_CODES = ("AMP001", "AMP002", "AMP003", "AMP004", "AMP005", "AMP006")
MIN_FILES_CORE = 8  # flagged and clean programs per core rule
MIN_FILES_LATER = 6  # for the rules added after the core five/six
# The core fixtures use the legacy torch.cuda.amp / torch.cpu.amp spellings on purpose (every spelling must be
# understood), and AMP007 (deprecated-amp-api) reports each of them. Its findings are checked by its own
# folder; in the core folders they are neither marked nor compared, so the core specifications do not depend
# on how AMP007 words or places its reports.
NOT_COMPARED_IN_CORE = frozenset({"AMP007"})

EXPECT = re.compile(r"#\s*expect:(?P<marks>.*)$")
MARK = re.compile(r"(?P<code>[A-Z]+[0-9]+)(?::(?P<column>[0-9]+))?")

# fixture path (relative to fixtures/) -> why amplint gets it wrong today. Strict xfails: remove when fixed.
KNOWN_LINT_FAILURES: dict[str, str] = {}


def folder_code(folder: Path) -> str:
    return folder.name.split("-", 1)[0]


def fixture_files(kind: str) -> list[Path]:
    return [path for folder in RULE_FOLDERS for path in sorted((folder / kind).glob("*.py"))]


def fixture_id(path: Path) -> str:
    return path.relative_to(FIXTURES).as_posix()


def with_known_failures(paths: list[Path], known: dict[str, str]) -> list:
    params = []
    for path in paths:
        reason = known.get(fixture_id(path))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(path, id=fixture_id(path), marks=marks))
    return params


def expected_marks(text: str) -> set[tuple[str, int, int | None]]:
    """The `# expect:` marks of a source, from its comment tokens (never from strings)."""
    found = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type != tokenize.COMMENT:
            continue
        match = EXPECT.search(token.string)
        if match is None:
            continue
        for mark in MARK.finditer(match.group("marks")):
            column = mark.group("column")
            found.add((mark.group("code"), token.start[0], int(column) if column else None))
    return found


def compared_codes(path: Path) -> set[str] | None:
    """The codes whose findings are compared for this fixture (None: all). An opt-in rule (off unless named) is
    compared in its own folder only."""
    own = folder_code(path.parents[1])
    opt_in = {rule.code for rule in ALL_RULES if rule.opt_in and rule.code != own}
    if own in CORE_CODES:
        return {rule.code for rule in ALL_RULES} - NOT_COMPARED_IN_CORE - opt_in
    return {rule.code for rule in ALL_RULES} - opt_in if opt_in else None


def diagnostics(path: Path) -> list:
    text = path.read_text(encoding="utf-8")
    codes = compared_codes(path)
    return [d for d in lint_text(text, str(path), [rule() for rule in ALL_RULES]).diagnostics
            if codes is None or d.code in codes]


def reported(path: Path) -> set[tuple[str, int, int]]:
    return {(d.code, d.location.row, d.location.column) for d in diagnostics(path)}


def compare(expected: set, actual: set) -> tuple[list, list]:
    """(missing, unexpected), where a mark without a column matches any column on its line."""
    unmatched = set(actual)
    missing = []
    for code, row, column in sorted(expected, key=lambda m: (m[1], m[0], m[2] or 0)):
        if column is not None and (code, row, column) in unmatched:
            unmatched.discard((code, row, column))
            continue
        if column is None:
            candidates = sorted(a for a in unmatched if a[0] == code and a[1] == row)
            if candidates:
                unmatched.discard(candidates[0])
                continue
        missing.append((code, row, column))
    return missing, sorted(unmatched)


FLAGGED = fixture_files("flagged")
CLEAN = fixture_files("clean")


@pytest.mark.parametrize("path", with_known_failures(FLAGGED, KNOWN_LINT_FAILURES))
def test_flagged_fixture_reports_exactly_the_marked_findings(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    expected = expected_marks(text)
    codes = compared_codes(path)
    assert not any(codes is not None and code not in codes for code, _, _ in expected), \
        f"{fixture_id(path)} marks findings of a rule not compared here ({sorted(NOT_COMPARED_IN_CORE)})"
    assert expected, f"{fixture_id(path)} has no `# expect:` mark"
    assert any(code == folder_code(path.parents[1]) for code, _, _ in expected), \
        f"{fixture_id(path)} marks no finding of its own rule"
    missing, unexpected = compare(expected, reported(path))
    assert not missing and not unexpected, f"missing {missing}, unexpected {unexpected}"


@pytest.mark.parametrize("path", with_known_failures(CLEAN, KNOWN_LINT_FAILURES))
def test_clean_fixture_reports_nothing(path: Path) -> None:
    assert not expected_marks(path.read_text(encoding="utf-8")), "clean fixtures carry no `# expect:` marks"
    assert [f"{d.location.row}:{d.location.column} {d.code} {d.message}" for d in diagnostics(path)] == []


def test_every_fixture_parses_and_compiles() -> None:
    for path in FLAGGED + CLEAN + fixture_files("fixed"):
        compile(path.read_text(encoding="utf-8"), str(path), "exec")


def test_expect_marks_are_read_from_comments_only() -> None:
    text = 's = "# expect: AMP001:1"\nx.backward()  # expect: AMP001:1, AMP002\n'
    assert expected_marks(text) == {("AMP001", 2, 1), ("AMP002", 2, None)}
    assert compare({("AMP002", 2, None)}, {("AMP002", 2, 7)}) == ([], [])
    assert compare({("AMP002", 2, 5)}, {("AMP002", 2, 7)}) == ([("AMP002", 2, 5)], [("AMP002", 2, 7)])


# --- the fixture set itself -------------------------------------------------------------------------------

def test_fixture_folders_exist() -> None:
    assert {folder_code(folder) for folder in RULE_FOLDERS} >= set(CORE_CODES)


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda rule: rule.code)
def test_every_registered_rule_has_a_fixture_folder(rule) -> None:
    folders = [folder for folder in RULE_FOLDERS if folder_code(folder) == rule.code]
    assert folders, f"{rule.code} ({rule.name}) has no fixtures/{rule.code}-{rule.name}/ folder"
    assert folders[0].name == f"{rule.code}-{rule.name}", f"expected fixtures/{rule.code}-{rule.name}/"


@pytest.mark.parametrize("folder", RULE_FOLDERS, ids=lambda folder: folder.name)
def test_every_fixture_folder_names_a_registered_rule(folder: Path) -> None:
    assert folder_code(folder) in RULES_BY_CODE, f"{folder.name}: no registered rule {folder_code(folder)}"


@pytest.mark.parametrize("folder", RULE_FOLDERS, ids=lambda folder: folder.name)
def test_every_fixture_folder_has_enough_programs(folder: Path) -> None:
    minimum = MIN_FILES_CORE if folder_code(folder) in CORE_CODES else MIN_FILES_LATER
    for kind in ("flagged", "clean"):
        count = len(list((folder / kind).glob("*.py")))
        assert count >= minimum, f"{folder.name}/{kind}: {count} programs, at least {minimum} needed"


@pytest.mark.parametrize("folder", RULE_FOLDERS, ids=lambda folder: folder.name)
def test_fixed_files_belong_to_flagged_files(folder: Path) -> None:
    flagged = {path.name for path in (folder / "flagged").glob("*.py")}
    fixed = {path.name for path in (folder / "fixed").glob("*.py")}
    assert fixed <= flagged, f"fixed/ without a flagged/ original: {sorted(fixed - flagged)}"


def test_known_failures_name_existing_fixtures() -> None:
    for name in KNOWN_LINT_FAILURES:
        assert (FIXTURES / name).is_file(), name


# --- the command line over the core folders ---------------------------------------------------------------

def core_folders() -> list[Path]:
    return [folder for folder in RULE_FOLDERS if folder_code(folder) in CORE_CODES]


def amplint(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "amplint", "check", "--output-format", "concise", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


def test_cli_exits_1_on_the_flagged_folders() -> None:
    result = amplint(*(str((folder / "flagged").relative_to(REPO)) for folder in core_folders()))
    assert result.returncode == 1, result.stdout + result.stderr
    for folder in core_folders():
        assert f"{folder_code(folder)}" in result.stdout


def test_cli_exits_0_on_the_clean_folders() -> None:
    # Folders are passed whole when none of their files is a known false positive; otherwise the other files.
    args = []
    for folder in core_folders():
        files = sorted((folder / "clean").glob("*.py"))
        if any(fixture_id(path) in KNOWN_LINT_FAILURES for path in files):
            args += [str(path.relative_to(REPO)) for path in files if fixture_id(path) not in KNOWN_LINT_FAILURES]
        else:
            args.append(str((folder / "clean").relative_to(REPO)))
    result = amplint("--ignore", ",".join(sorted(NOT_COMPARED_IN_CORE)), *args)
    assert result.returncode == 0, result.stdout + result.stderr
