"""The documentation site: it builds in strict mode, and every address a report links to is a page it built.

The site is the reference pages written in docs/ and what docs/hooks.py generates from the rule docstrings, the
runtime harness's programs, the configuration keys and the README (see mkdocs.yml). Built once per module into a
temporary folder (about 2 s).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from click.testing import CliRunner

from amplint import harness
from amplint.cli import main
from amplint.config import KEYS
from amplint.diagnostics import rule_url
from amplint.output import FORMAT_NAMES
from amplint.output.common import FILE_ERRORS
from amplint.rules import ALL_RULES
from amplint.rules.base import DOC_SECTIONS

REPO = Path(__file__).resolve().parents[1]
URL = re.compile(r"https?://[^\s\"'<>\\)]+")
DOCS_BASE = "https://docs.example.test/amplint/"  # wherever the site is published: the `docs-url` setting


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("docs") / "site"
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"),
                            "-d", str(out)], cwd=REPO, capture_output=True, text=True)
    assert build.returncode == 0, build.stdout + build.stderr
    return out


def page_for(url: str, site: Path) -> Path:
    """The built file an address of the site names."""
    assert url.startswith(DOCS_BASE), f"{url} is not below the site's address {DOCS_BASE}"
    path = urlsplit(url[len(DOCS_BASE):]).path
    return site / path / "index.html" if not path or path.endswith("/") else site / path


def report_urls(tmp_path: Path) -> dict[str, set[str]]:
    """format -> the addresses of the site (its host) that `amplint check` prints in that format, for files with
    findings of several rules and a file that cannot be parsed (AMP900)."""
    (tmp_path / "train.py").write_text((REPO / "examples" / "train_amp.py").read_text())
    (tmp_path / "broken.py").write_text("import torch\nscaler = torch.amp.GradScaler(\n")
    host = urlsplit(DOCS_BASE).netloc
    found = {}
    for name in FORMAT_NAMES:
        result = CliRunner().invoke(main, ["check", str(tmp_path / "train.py"), str(tmp_path / "broken.py"),
                                           "--no-cache", "--output-format", name, "--docs-url", DOCS_BASE])
        assert result.exit_code == 1, result.output
        found[name] = {url for url in URL.findall(result.output) if urlsplit(url).netloc == host}
    return found


def test_the_site_builds_with_a_page_for_every_address_the_reports_carry(site, tmp_path):
    urls = report_urls(tmp_path)
    for name in ("json", "json-lines", "sarif", "junit"):
        codes = {Path(urlsplit(url).path).name for url in urls[name]}
        assert {"AMP001", "AMP003", "AMP004", "AMP900"} <= codes, (name, urls[name])
    assert DOCS_BASE in urls["sarif"]  # the tool's informationUri: the home page
    every = set().union(*urls.values()) | {rule_url(rule.code, DOCS_BASE) for rule in ALL_RULES} | {
        rule_url(code, DOCS_BASE) for code in FILE_ERRORS}
    missing = sorted(url for url in every if not page_for(url, site).is_file())
    assert not missing, f"reports link to pages the site does not have: {missing}"


def test_the_sites_address_is_the_one_reports_use():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    assert "site_url" not in config  # not published anywhere yet: `docs-url` says where it is
    assert config.get("use_directory_urls", True) is True  # rules/AMP003.md becomes rules/AMP003/
    assert rule_url("AMP003", DOCS_BASE) == DOCS_BASE + "rules/AMP003/"
    assert rule_url("AMP003", None) is None


class Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        self.links += [value for key, value in attrs if key in ("href", "src") and value]


def test_every_link_inside_the_site_resolves(site):
    broken = []
    for page in site.rglob("*.html"):
        parser = Links()
        parser.feed(page.read_text(encoding="utf-8"))
        for link in parser.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or not parts.path:
                continue
            target = site / parts.path.lstrip("/") if parts.path.startswith("/") else page.parent / parts.path
            if not target.resolve().exists():
                broken.append(f"{page.relative_to(site)} -> {link}")
    assert not broken, broken


def test_each_rule_page_has_its_docs_and_its_runtime_evidence(site):
    programs = harness.discover()
    pages = load_hooks().pages()  # the Markdown the site was built from
    evidence = (REPO / "docs" / "evidence.md").read_text(encoding="utf-8")
    for rule in ALL_RULES:
        page = (site / "rules" / rule.code / "index.html").read_text(encoding="utf-8")
        assert f"{rule.code}: {rule.name}" in page
        for section in (*DOC_SECTIONS, "Limits", "Runtime evidence"):  # the long form (`amplint rule --long`)
            assert f">{section.replace('?', '')}" in page.replace("?", ""), (rule.code, section)
        mine = [p for p in programs if p.rule == rule.code]
        assert mine, rule.code
        for program in mine:
            assert program.path.relative_to(REPO).as_posix() in page, (rule.code, program.name)
        # the measured rows of the evidence table (docs/evidence.md), as the harness printed them
        rows = [line for line in evidence.splitlines() if line.startswith(f"| {rule.code} |")]
        assert rows, rule.code
        for row in rows:
            _, _, program, device, dtype, _, flagged, fixed, _, _ = re.split(r"(?<!\\)\|", row)
            assert f"| {device.strip()} | {dtype.strip()} | {flagged.strip()} | {fixed.strip()} |" in pages[
                f"rules/{rule.code}.md"], (rule.code, row)


def test_the_configuration_page_lists_every_key(site):
    page = (site / "configuration" / "index.html").read_text(encoding="utf-8")
    reference = page.split('id="reference"', 1)[1]
    for key in KEYS:
        assert f"<code>{key}</code>" in reference, key


def load_hooks():
    spec = importlib.util.spec_from_file_location("amplint_docs_hooks", REPO / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_readme_section_on_no_page_is_reported():
    hooks = load_hooks()
    readme = (REPO / "README.md").read_text()
    assert hooks.unplaced_sections(hooks.readme_sections(readme)) == []
    added = readme + "\n## Troubleshooting\n\nText.\n\n```text\n## not a heading\n```\n"
    assert hooks.unplaced_sections(hooks.readme_sections(added)) == ["Troubleshooting"]


def test_a_markdown_file_of_docs_on_no_page_is_reported(tmp_path):
    hooks = load_hooks()
    assert hooks.unlisted_docs() == []
    for name in hooks.DOCS_PAGES:
        (tmp_path / name).write_text("# A page\n")
    assert hooks.unlisted_docs(tmp_path) == []
    (tmp_path / "troubleshooting.md").write_text("# Troubleshooting\n")
    (tmp_path / hooks.DOCS_PAGES[0]).unlink()
    assert hooks.unlisted_docs(tmp_path) == sorted(["troubleshooting.md", hooks.DOCS_PAGES[0]])


def test_the_readmes_links_into_docs_become_links_between_pages(caplog):
    hooks = load_hooks()
    assert hooks.site_links("See [Fixes](docs/fixes.md) and [keys](docs/configuration.md#reference).") == \
        "See [Fixes](fixes.md) and [keys](configuration.md#reference)."
    with caplog.at_level("WARNING"):
        hooks.site_links("[gone](docs/gone.md)")
    assert "docs/gone.md" in caplog.text


def test_ci_builds_the_site_in_strict_mode_before_the_tests():
    ci = (REPO / ".ci" / "run").read_text()
    assert '".[test,docs]"' in ci
    assert ci.index("mkdocs build --strict") < ci.index("python -m pytest")
    build = next(line for line in ci.splitlines() if "mkdocs build" in line)
    assert "--quiet" not in build and " -q" not in build  # mkdocs's --quiet drops warnings, so --strict fails on none
