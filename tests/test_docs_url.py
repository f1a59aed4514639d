"""Links come from one `docs-url` setting: without it no report points at an address (JSON `url: null`, SARIF
without `helpUri`, the editor without `codeDescription`) and the help says `amplint rule CODE`; with it every
format links `<docs-url>/rules/CODE/`."""

from __future__ import annotations

import json
import re
from pathlib import Path

from samples import FLAGGED, invoke_in

from amplint.server import lint_document

URL = re.compile(r"https?://[^\s\"'<>\\)]+")
SITE = "https://docs.example.test/amplint"
FORMATS = ("full", "concise", "grouped", "json", "json-lines", "github", "gitlab", "sarif", "junit")


def check(folder: Path, *args: str):
    return invoke_in(folder, ["check", "train.py", "--no-cache", *args])


def test_no_links_by_default(tmp_path):
    (tmp_path / "train.py").write_text(FLAGGED)
    for name in FORMATS:
        result = check(tmp_path, "--output-format", name)
        urls = [url for url in URL.findall(result.output) if "sarif-schema" not in url]
        assert urls == [], (name, urls)
    records = json.loads(check(tmp_path, "--output-format", "json").output)
    assert [record["url"] for record in records] == [None]
    junit = check(tmp_path, "--output-format", "junit").output
    assert "see: amplint rule AMP001" in junit
    rules = json.loads(check(tmp_path, "--output-format", "sarif").output)["runs"][0]["tool"]["driver"]["rules"]
    assert all("helpUri" not in rule and f"amplint rule {rule['id']}" in rule["help"]["text"] for rule in rules)
    assert [d.url for d in lint_document(FLAGGED, str(tmp_path / "train.py"))] == [None]


def test_docs_url_from_the_configuration_links_every_format(tmp_path):
    (tmp_path / "train.py").write_text(FLAGGED)
    (tmp_path / "pyproject.toml").write_text(f'[tool.amplint]\ndocs-url = "{SITE}/"\n')
    page = f"{SITE}/rules/AMP001/"
    records = json.loads(check(tmp_path, "--output-format", "json").output)
    assert [record["url"] for record in records] == [page]
    assert json.loads(check(tmp_path, "--output-format", "json-lines").output)["url"] == page
    assert page in check(tmp_path, "--output-format", "junit").output
    driver = json.loads(check(tmp_path, "--output-format", "sarif").output)["runs"][0]["tool"]["driver"]
    assert {rule["id"]: rule["helpUri"] for rule in driver["rules"]}["AMP001"] == page
    assert [d.url for d in lint_document(FLAGGED, str(tmp_path / "train.py"))] == [page]
    assert "docs-url" in check(tmp_path, "--show-settings").output


def test_docs_url_on_the_command_line(tmp_path):
    (tmp_path / "train.py").write_text(FLAGGED)
    records = json.loads(check(tmp_path, "--output-format", "json", "--docs-url", "https://x.test/d").output)
    assert [record["url"] for record in records] == ["https://x.test/d/rules/AMP001/"]


def test_the_shipped_examples_sarif_is_small(tmp_path):
    example = Path(__file__).resolve().parents[1] / "examples" / "train_amp.py"
    (tmp_path / "train.py").write_text(example.read_text())
    for extra in ((), ("--docs-url", SITE)):
        output = check(tmp_path, "--output-format", "sarif", *extra).output
        assert len(output.encode()) <= 40_000, (extra, len(output.encode()))
        assert "## Why is this bad?" not in output
