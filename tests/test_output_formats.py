"""The exact shape of every output format, rendered from diagnostics that amplint really produced."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from amplint import __version__
from amplint.cli import main
from amplint.diagnostics import Diagnostic
from amplint.engine import lint_text
from amplint.output import FORMAT_NAMES, Report, render
from amplint.output.github import escape_data, escape_property
from amplint.rules import ALL_RULES
from samples import CLIP

# The official SARIF 2.1.0 schema, where a shared folder beside the repository has it (it is not ours to copy in);
# every clone has our own statement of the part amplint writes, and every log is validated against both where both
# are found (nothing is skipped in a plain clone).
SARIF_SCHEMA = Path(__file__).resolve().parents[2] / "shared" / "schemas" / "sarif-schema-2.1.0.json"
SARIF_SUBSET = Path(__file__).resolve().parent / "schemas" / "sarif-2.1.0-subset.json"

CLIP_ROW, CLIP_COLUMN = 9, 9

# The same mistake twice, on two identical lines: fingerprints must still differ.
TWICE = CLIP.replace(
    "        scaler.step(optimizer)\n",
    "        scaler.step(optimizer)\n"
    "        scaler.update()\n"
    "        scaler.scale(loss).backward()\n"
    "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
    "        scaler.step(optimizer)\n",
)

CLEAN = "import torch\n\nx = torch.ones(3)\n"


def lint(text: str, filename: str = "train.py") -> list[Diagnostic]:
    return lint_text(text, filename, [rule() for rule in ALL_RULES]).diagnostics


def report_for(*sources: tuple[str, str]) -> Report:
    diagnostics = sorted((d for filename, text in sources for d in lint(text, filename)), key=Diagnostic.sort_key)
    return Report(diagnostics=diagnostics, rules=[rule for rule in ALL_RULES if not rule.opt_in])  # what a run enables


@pytest.fixture
def clip_report() -> Report:
    report = report_for(("pkg/train.py", CLIP))
    assert [(d.code, d.location.row, d.location.column) for d in report.diagnostics] == [
        ("AMP003", CLIP_ROW, CLIP_COLUMN)]
    return report


def test_every_format_is_registered_and_renders():
    assert set(FORMAT_NAMES) >= {"full", "concise", "json", "grouped", "json-lines", "github", "gitlab", "sarif",
                                 "junit"}
    flagged = report_for(("train.py", CLIP))
    for name in FORMAT_NAMES:
        assert isinstance(render(name, flagged), str)
        assert isinstance(render(name, Report([], rules=list(ALL_RULES))), str)


# --- github -------------------------------------------------------------------------------------------------


def test_github_workflow_command(clip_report):
    diagnostic = clip_report.diagnostics[0]
    end = diagnostic.end_location
    assert render("github", clip_report) == (
        f"::error file=pkg/train.py,line={CLIP_ROW},col={CLIP_COLUMN},endLine={end.row},endColumn={end.column},"
        f"title=AMP003 clip-without-unscale::{diagnostic.message}%0Ahelp: {diagnostic.help}\n"
    )
    assert diagnostic.help == "Insert `scaler.unscale_(optimizer)` before the clip"


def test_github_escaping_follows_the_workflow_command_rules():
    # Data (the message): %, CR and LF; properties additionally `:` and `,`. `%` goes first, never twice.
    assert escape_data("100% a\r\nb: c, d") == "100%25 a%0D%0Ab: c, d"
    assert escape_property("C:\\x,y%\n") == "C%3A\\x%2Cy%25%0A"
    diagnostic = dataclasses.replace(lint(CLIP, "a,b:c%.py")[0], message="50% off\nnext: line, here",
                                     help="do 100%\r")
    line = render("github", Report([diagnostic]))
    assert line.startswith("::error file=a%2Cb%3Ac%25.py,line=9,")
    assert line.endswith("title=AMP003 clip-without-unscale::50%25 off%0Anext: line, here%0Ahelp: do 100%25%0D\n")
    assert line.count("\n") == 1


def test_github_names_the_notebook_cell_and_warns_about_messages(clip_report):
    in_cell = dataclasses.replace(clip_report.diagnostics[0], filename="nb.ipynb", cell=2)
    text = render("github", Report([in_cell], messages=["nb.ipynb: fixes not written: disk full"]))
    first, second = text.splitlines()
    assert "::cell 2: `torch.nn.utils.clip_grad_norm_" in first
    assert second == "::warning title=amplint::nb.ipynb: fixes not written: disk full"
    assert render("github", Report([])) == ""


# --- json-lines and grouped ----------------------------------------------------------------------------------


def test_json_lines_are_the_json_objects_one_per_line():
    report = report_for(("a.py", CLIP), ("b.py", TWICE))
    lines = render("json-lines", report).splitlines()
    assert len(lines) == len(report.diagnostics) == 3
    assert [json.loads(line) for line in lines] == json.loads(render("json", report))
    assert render("json-lines", Report([])) == ""


def test_grouped_puts_diagnostics_under_their_file():
    report = report_for(("a.py", CLIP), ("b.py", TWICE))
    a, b1, b2 = report.diagnostics
    assert render("grouped", report) == (
        "a.py:\n"
        f"  9:9 AMP003 [*] {a.message}\n"
        "\n"
        "b.py:\n"
        f"  9:9 AMP003 [*] {b1.message}\n"
        f"  13:9 AMP003 [*] {b2.message}\n"
        "\n"
        "Found 3 errors.\n"
        "[*] 3 fixable with `amplint check --fix`.\n"
    )
    assert render("grouped", Report([])) == "All checks passed!\n"


# --- gitlab -------------------------------------------------------------------------------------------------


def test_gitlab_code_quality_issue(clip_report):
    [issue] = json.loads(render("gitlab", clip_report))
    diagnostic = clip_report.diagnostics[0]
    assert set(issue) == {"description", "check_name", "fingerprint", "severity", "location", "content"}
    assert issue["description"] == f"AMP003 {diagnostic.message}"
    assert issue["content"] == {"body": f"help: {diagnostic.help}"}
    assert issue["check_name"] == "AMP003"
    assert issue["severity"] == "major"
    assert issue["location"] == {"path": "pkg/train.py", "lines": {"begin": CLIP_ROW, "end": CLIP_ROW}}
    assert len(issue["fingerprint"]) == 32 and int(issue["fingerprint"], 16) >= 0


def gitlab_fingerprints(*sources: tuple[str, str]) -> list[str]:
    return [issue["fingerprint"] for issue in json.loads(render("gitlab", report_for(*sources)))]


def test_gitlab_fingerprints_survive_reruns_and_line_shifts_and_tell_duplicates_apart():
    first = gitlab_fingerprints(("a.py", TWICE))
    assert first == gitlab_fingerprints(("a.py", TWICE))  # stable across runs
    shifted = "# a comment\n\n" + TWICE.replace("import torch\n", "import torch\nimport os\n")
    moved = json.loads(render("gitlab", report_for(("a.py", shifted))))
    assert [issue["location"]["lines"]["begin"] for issue in moved] == [12, 16]  # the lines did move
    assert [issue["fingerprint"] for issue in moved] == first  # the fingerprints did not
    assert len(set(first)) == 2  # two identical lines, two issues
    assert gitlab_fingerprints(("b.py", TWICE)) != first  # the path counts
    # A relative and an absolute spelling of the same file (under the current folder) agree.
    assert gitlab_fingerprints((str(Path.cwd() / "a.py"), TWICE)) == first


def test_gitlab_file_errors_rank_above_findings():
    [issue] = json.loads(render("gitlab", report_for(("broken.py", "def f(:\n"))))
    assert issue["check_name"] == "AMP900"
    assert issue["severity"] == "critical"
    assert json.loads(render("gitlab", Report([]))) == []


# --- junit --------------------------------------------------------------------------------------------------


def test_junit_has_a_suite_per_file_and_a_failing_case_per_diagnostic():
    report = report_for(("a.py", CLIP), ("b.py", TWICE))
    text = render("junit", report)
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>\n')
    root = ET.fromstring(text)
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "3", "0")
    suites = root.findall("testsuite")
    assert [(s.get("name"), s.get("tests"), s.get("failures")) for s in suites] == [
        ("a.py", "1", "1"), ("b.py", "2", "2")]
    cases = suites[1].findall("testcase")
    assert [c.get("name") for c in cases] == [
        "AMP003 clip-without-unscale at line 9, column 9", "AMP003 clip-without-unscale at line 13, column 9"]
    assert cases[1].get("classname") == "b.py" and cases[1].get("line") == "13"
    failure = cases[1].find("failure")
    assert failure.get("type") == "AMP003"
    assert failure.get("message") == report.diagnostics[2].message
    assert failure.text.startswith("b.py:13:9: error: AMP003 ")
    assert [(p.get("name"), p.get("value")) for p in cases[1].findall("properties/property")] == [
        ("severity", "error")]
    assert failure.text.endswith("see: amplint rule AMP003")  # no `docs-url`: no link


def test_junit_clean_run_is_one_passing_suite():
    root = ET.fromstring(render("junit", Report([])))
    [suite] = root.findall("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("1", "0", "0")
    [case] = suite.findall("testcase")
    assert list(case) == []  # no <failure>: passed


def test_junit_survives_characters_xml_cannot_carry(clip_report):
    odd = dataclasses.replace(clip_report.diagnostics[0], message="bad \x00\x1b char & <tag>")
    failure = ET.fromstring(render("junit", Report([odd]))).find("testsuite/testcase/failure")
    assert failure.get("message") == "bad \ufffd\ufffd char & <tag>"


# --- sarif --------------------------------------------------------------------------------------------------


def sarif_of(report: Report) -> dict:
    return json.loads(render("sarif", report))


def validate_sarif(log: dict) -> None:
    import jsonschema  # in the `test` extra

    for path in (SARIF_SUBSET, SARIF_SCHEMA):
        if path is SARIF_SCHEMA and not path.is_file():
            continue  # the official schema is not beside this clone: our statement of its part still holds
        schema = json.loads(path.read_text(encoding="utf-8"))
        validator_class = jsonschema.validators.validator_for(schema)
        validator_class.check_schema(schema)
        validator_class(schema, format_checker=validator_class.FORMAT_CHECKER).validate(log)


def test_the_sarif_subset_schema_catches_what_the_standard_forbids(clip_report):
    """Our own statement of SARIF's part rejects what the official schema rejects: a misspelt property, a level
    SARIF has not, a region from line 0, a result without a message."""
    import jsonschema

    good = sarif_of(clip_report)
    validate_sarif(good)
    result = good["runs"][0]["results"][0]
    for broken in ({**result, "levle": "error"}, {**result, "level": "fatal"},
                   {key: value for key, value in result.items() if key != "message"},
                   {**result, "locations": [{"physicalLocation": {**result["locations"][0]["physicalLocation"],
                                                                  "region": {"startLine": 0}}}]}):
        log = json.loads(json.dumps(good))
        log["runs"][0]["results"][0] = broken
        for path in (SARIF_SUBSET, SARIF_SCHEMA):
            if path.is_file():
                with pytest.raises(jsonschema.ValidationError):
                    jsonschema.Draft7Validator(json.loads(path.read_text(encoding="utf-8"))).validate(log)


def apply_replacements(text: str, replacements: list[dict]) -> str:
    """Apply SARIF replacements (1-based line/column regions, end exclusive) the way a consumer would."""
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(line: int, column: int) -> int:
        return starts[line - 1] + column - 1

    for item in sorted(replacements, key=lambda r: (r["deletedRegion"]["startLine"],
                                                   r["deletedRegion"]["startColumn"]), reverse=True):
        region = item["deletedRegion"]
        start = offset(region["startLine"], region["startColumn"])
        end = offset(region["endLine"], region["endColumn"])
        text = text[:start] + item["insertedContent"]["text"] + text[end:]
    return text


def test_sarif_is_valid_against_the_official_schema(clip_report):
    validate_sarif(sarif_of(clip_report))
    validate_sarif(sarif_of(report_for(("a.py", TWICE), ("broken.py", "def f(:\n"))))
    validate_sarif(sarif_of(Report([], rules=list(ALL_RULES), messages=["x.py: fixes not written"])))
    in_cell = dataclasses.replace(clip_report.diagnostics[0], filename="nb.ipynb", cell=3)
    validate_sarif(sarif_of(Report([in_cell], rules=list(ALL_RULES))))


def test_sarif_driver_lists_the_rules_that_ran_with_a_short_description():
    report = report_for(("a.py", CLIP))
    report.rules = [rule for rule in ALL_RULES if rule.code != "AMP005"]
    log = sarif_of(report)
    assert log["version"] == "2.1.0"
    assert log["$schema"].endswith("sarif-schema-2.1.0.json")
    [run] = log["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "amplint"
    assert driver["version"] == __version__
    assert "informationUri" not in driver  # no `docs-url`: no address that may not exist
    assert [rule["id"] for rule in driver["rules"]] == [rule.code for rule in report.rules]
    for descriptor, rule in zip(driver["rules"], report.rules):
        assert descriptor["name"] == rule.name
        assert descriptor["shortDescription"]["text"] == rule.headline()
        assert descriptor["help"] == {"text": f"{rule.headline()} Documentation: `amplint rule {rule.code}`."}
        assert "helpUri" not in descriptor
        assert "## Why is this bad?" not in json.dumps(descriptor)  # never the whole documentation
    assert run["columnKind"] == "unicodeCodePoints"
    assert run["invocations"] == [{"executionSuccessful": True}]


def test_sarif_links_the_rules_pages_with_docs_url():
    report = report_for(("a.py", CLIP))
    report.rules = list(ALL_RULES)
    report.docs_url = "https://docs.example.test/amplint"
    driver = sarif_of(report)["runs"][0]["tool"]["driver"]
    assert driver["informationUri"] == "https://docs.example.test/amplint/"
    for descriptor in driver["rules"]:
        url = f"https://docs.example.test/amplint/rules/{descriptor['id']}/"
        assert descriptor["helpUri"] == url
        assert url in descriptor["help"]["markdown"] and url in descriptor["help"]["text"]


def test_sarif_result_location_and_fix(clip_report):
    diagnostic = clip_report.diagnostics[0]
    [run] = sarif_of(clip_report)["runs"]
    [result] = run["results"]
    assert result["ruleId"] == "AMP003"
    assert run["tool"]["driver"]["rules"][result["ruleIndex"]]["id"] == "AMP003"
    assert result["level"] == "error"
    assert result["message"] == {"text": diagnostic.message,
                                 "markdown": f"{diagnostic.message}\n\n**help:** {diagnostic.help}"}
    [location] = result["locations"]
    physical = location["physicalLocation"]
    assert physical["artifactLocation"] == {"uri": "pkg/train.py", "uriBaseId": "%SRCROOT%"}
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == Path.cwd().as_uri().rstrip("/") + "/"
    assert physical["region"] == {
        "startLine": CLIP_ROW, "startColumn": CLIP_COLUMN,
        "endLine": diagnostic.end_location.row, "endColumn": diagnostic.end_location.column}
    assert "properties" not in result  # no notebook cell
    [fix] = result["fixes"]
    assert fix["description"]["text"] == diagnostic.fix.message
    assert fix["properties"] == {"applicability": "safe"}
    [change] = fix["artifactChanges"]
    assert change["artifactLocation"]["uri"] == "pkg/train.py"
    # Applying the replacements as a SARIF consumer would gives exactly amplint's fixed source.
    fixed = apply_replacements(CLIP, change["replacements"])
    assert "        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_" in fixed
    assert lint(fixed) == []


def test_sarif_paths_are_relative_with_forward_slashes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inside = lint(CLIP, str(tmp_path / "sub dir" / "train.py"))
    outside = lint(CLIP, "/elsewhere/train.py")
    [run] = sarif_of(Report(inside + outside))["runs"]
    uris = [r["locations"][0]["physicalLocation"]["artifactLocation"] for r in run["results"]]
    assert uris == [{"uri": "sub%20dir/train.py", "uriBaseId": "%SRCROOT%"}, {"uri": "file:///elsewhere/train.py"}]


def test_sarif_notebook_cell_is_a_property(clip_report):
    in_cell = dataclasses.replace(clip_report.diagnostics[0], filename="nb.ipynb", cell=3)
    [result] = sarif_of(Report([in_cell]))["runs"][0]["results"]
    assert result["properties"] == {"cell": 3}


def test_sarif_file_errors_get_a_rule_entry_and_fail_the_invocation():
    report = report_for(("broken.py", "def f(:\n"))
    internal = dataclasses.replace(report.diagnostics[0], code="AMP902", name="internal-error")
    [run] = sarif_of(Report(report.diagnostics + [internal], rules=list(ALL_RULES)))["runs"]
    codes = [rule["id"] for rule in run["tool"]["driver"]["rules"]]
    assert codes[-2:] == ["AMP900", "AMP902"]
    assert [codes[r["ruleIndex"]] for r in run["results"]] == ["AMP900", "AMP902"]
    assert run["invocations"][0]["executionSuccessful"] is False


def test_sarif_is_read_back_by_sarif_tools(tmp_path, clip_report):
    loader = pytest.importorskip("sarif.loader", reason="sarif-tools is in the `test` extra")
    report = report_for(("pkg/train.py", CLIP), ("b.py", TWICE))
    path = tmp_path / "amplint.sarif"
    path.write_text(render("sarif", report), encoding="utf-8")
    sarif_file = loader.load_sarif_file(str(path))
    assert sarif_file.get_distinct_tool_names() == ["amplint"]
    assert sarif_file.get_result_count() == 3
    records = sorted((r["Location"], int(r["Line"]), r["Code"], r["Severity"]) for r in sarif_file.get_records())
    assert records == [("b.py", 9, "AMP003", "error"), ("b.py", 13, "AMP003", "error"),
                       ("pkg/train.py", 9, "AMP003", "error")]
    assert sarif_file.get_rules_by_id("AMP003")[0]["name"] == "clip-without-unscale"
    # And its command line: `sarif summary` counts the errors, `--check error` fails on them.
    summary = subprocess.run([sys.executable, "-m", "sarif", "--check", "error", "summary", str(path)],
                             capture_output=True, text=True, timeout=600)
    assert summary.returncode != 0
    assert "error: 3" in summary.stdout


# --- command line -------------------------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(CLIP, encoding="utf-8")
    return tmp_path


def check(*args: str):
    return CliRunner().invoke(main, ["check", *args])


@pytest.mark.parametrize("name", [name for name in FORMAT_NAMES if name not in ("full", "concise")])
def test_cli_output_format(project, name):
    result = check("train.py", "--output-format", name)
    assert result.exit_code == 1, result.output
    assert result.stdout == render(name, report_for(("train.py", CLIP)))


def test_cli_output_file_writes_the_report_there_instead_of_stdout(project):
    result = check("train.py", "--output-format", "sarif", "--output-file", "reports/ci/amplint.sarif")
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    log = json.loads((project / "reports" / "ci" / "amplint.sarif").read_text(encoding="utf-8"))
    assert log["runs"][0]["results"][0]["ruleId"] == "AMP003"
    validate_sarif(log)


def test_cli_output_file_takes_statistics_and_default_format(project):
    assert check("train.py", "--statistics", "--output-file", "stats.txt").stdout == ""
    assert (project / "stats.txt").read_text() == ("    1\tAMP003\terror\t[*] clip-without-unscale\nFound 1 error.\n"
                                                  "[*] 1 fixable with `amplint check --fix`.\n")
    assert check("train.py", "--output-file", "full.txt").exit_code == 1
    assert "AMP003 [*]" in (project / "full.txt").read_text()


def test_cli_output_file_that_cannot_be_written_is_exit_2(project):
    (project / "taken").write_text("a file, not a folder")
    result = check("train.py", "--output-file", "taken/report.txt")
    assert result.exit_code == 2
    assert "cannot write taken/report.txt" in result.output


def test_config_output_format_accepts_the_new_names(project):
    (project / "amplint.toml").write_text('output-format = "github"\n')
    result = check("train.py")
    assert result.exit_code == 1
    assert result.stdout.startswith("::error file=train.py,line=9,col=9,")


def test_config_output_format_unknown_is_a_clear_error(project):
    (project / "amplint.toml").write_text('output-format = "sarif2"\n')
    result = check("train.py")
    assert result.exit_code == 2
    assert "unknown `output-format` 'sarif2'" in result.output
    assert "sarif" in result.output and "junit" in result.output


def test_quiet_grouped_drops_the_summary(project):
    result = check("train.py", "--output-format", "grouped", "--quiet")
    assert result.stdout.splitlines()[0] == "train.py:"
    assert "Found" not in result.stdout


# --- severities (issue 18) ------------------------------------------------------------------------------------

# AMP007 (a warning: a deprecated spelling) at 3:10 and AMP003 (an error) at 9:9 in one file.
MIXED = CLIP.replace("import torch\n", "import torch\n\nscaler = torch.cuda.amp.GradScaler()\n", 1)


@pytest.fixture
def mixed_report() -> Report:
    report = report_for(("train.py", MIXED))
    assert [(d.code, d.severity.value) for d in report.diagnostics] == [("AMP007", "warning"), ("AMP003", "error")]
    return report


def test_github_annotation_level_follows_the_severity(mixed_report):
    lines = render("github", mixed_report).splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == ["::warning", "::error"]


def test_gitlab_severity_follows_the_severity(mixed_report):
    issues = json.loads(render("gitlab", mixed_report))
    assert [(i["check_name"], i["severity"]) for i in issues] == [("AMP007", "minor"), ("AMP003", "major")]


def test_json_and_json_lines_carry_the_severity(mixed_report):
    assert [item["severity"] for item in json.loads(render("json", mixed_report))] == ["warning", "error"]
    lines = render("json-lines", mixed_report).splitlines()
    assert [json.loads(line)["severity"] for line in lines] == ["warning", "error"]


def test_junit_marks_each_case_with_its_severity(mixed_report):
    cases = ET.fromstring(render("junit", mixed_report)).findall("testsuite/testcase")
    assert [case.find("properties/property").get("value") for case in cases] == ["warning", "error"]
    assert [case.find("failure").text.split(": ")[1] for case in cases] == ["warning", "error"]


def test_sarif_levels_defaults_and_overrides(mixed_report):
    from amplint.diagnostics import Severity

    log = sarif_of(mixed_report)
    validate_sarif(log)
    run = log["runs"][0]
    assert [r["level"] for r in run["results"]] == ["warning", "error"]
    defaults = {rule["id"]: rule["defaultConfiguration"]["level"] for rule in run["tool"]["driver"]["rules"]}
    assert defaults["AMP007"] == defaults["AMP013"] == "warning" and defaults["AMP003"] == "error"
    assert "ruleConfigurationOverrides" not in run["invocations"][0]
    # The configuration made AMP007 an error: the results say so and the invocation records the override.
    raised = [dataclasses.replace(d, severity=Severity.ERROR) for d in mixed_report.diagnostics]
    log = sarif_of(Report(raised, rules=list(ALL_RULES), severities={"AMP007": Severity.ERROR}))
    validate_sarif(log)
    run = log["runs"][0]
    assert [r["level"] for r in run["results"]] == ["error", "error"]
    [override] = run["invocations"][0]["ruleConfigurationOverrides"]
    assert override["configuration"] == {"level": "error"} and override["descriptor"]["id"] == "AMP007"
    assert run["tool"]["driver"]["rules"][override["descriptor"]["index"]]["id"] == "AMP007"


def test_sarif_tools_count_warnings_apart_from_errors(tmp_path, mixed_report):
    pytest.importorskip("sarif", reason="sarif-tools is in the `test` extra")
    path = tmp_path / "amplint.sarif"
    path.write_text(render("sarif", mixed_report), encoding="utf-8")
    summary = subprocess.run([sys.executable, "-m", "sarif", "summary", str(path)],
                             capture_output=True, text=True, timeout=600)
    assert "error: 1" in summary.stdout and "warning: 1" in summary.stdout, summary.stdout


def test_the_summary_counts_errors_and_warnings(mixed_report):
    from amplint.output.concise import totals

    assert totals(mixed_report).splitlines()[0] == "Found 1 error and 1 warning."
    warnings_only = Report(mixed_report.diagnostics[:1])
    assert totals(warnings_only).splitlines()[0] == "Found 1 warning."
    assert totals(Report(mixed_report.diagnostics * 2)).splitlines()[0] == "Found 2 errors and 2 warnings."
    fixed = Report(mixed_report.diagnostics[:1], fixed=2)
    assert totals(fixed).splitlines()[0] == "Found 3 problems (2 fixed, 1 warning remaining)."
    assert totals(Report([], fixed=1)) == "Found 1 problem (1 fixed, 0 remaining)."
    for name in ("full", "concise", "grouped"):
        assert "Found 1 error and 1 warning." in render(name, mixed_report)
