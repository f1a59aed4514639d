"""The README and the reference pages of docs/ stay true: the rule table matches the registry, the set-up example
really reports findings, every test they name exists, and the install instructions work (no package index, pinned
revisions that exist, a test extra that is what the tests use)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from amplint.rules import ALL_RULES
from amplint.outcome import Mode
from amplint.pipeline import process_file
from amplint.selection import rules_for
from amplint.config import Settings

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
DOCS = {path.relative_to(REPO).as_posix(): path.read_text(encoding="utf-8")
        for path in sorted((REPO / "docs").glob("*.md"))}
PAGES = {"README.md": README, **DOCS}  # what a reader reads: the README first, the reference in docs/


def rule_table_rows() -> list[list[str]]:
    table = README.split("<!-- rules-table", 1)[1].split("<!-- /rules-table -->", 1)[0]
    rows = [line for line in table.splitlines() if re.match(r"\|\s*AMP\d{3}", line)]
    return [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows]


def test_rule_table_matches_the_registry():
    rows = rule_table_rows()
    assert [(code, name, severity, fix) for code, name, severity, fix, _ in rows] == [
        (rule.code, rule.name, rule.severity.value, rule.fix) for rule in ALL_RULES
    ]
    assert all(headline for *_, headline in rows)


def test_the_set_up_example_reports_findings():
    assert "amplint check examples/train_amp.py" in README
    path = str(REPO / "examples" / "train_amp.py")
    outcome = process_file(path, rules_for(path, list(ALL_RULES), Settings()), Mode())
    assert {d.code for d in outcome.diagnostics} == {"AMP001", "AMP003", "AMP004"}


def readme_sections() -> list[str]:
    return re.findall(r"^## (.+)$", README, re.M)


def console_blocks(section: str) -> list[list[str]]:
    return [block.splitlines() for block in re.findall(r"```console\n(.*?)```", readme_section(section), re.S)]


def test_the_set_up_has_its_two_commands():
    """A user's first command (install, lint the shipped example) is the README's first section; the contributor's
    (the test extra, the suite) comes after, in Development."""
    assert readme_sections()[0] == "Install"
    assert console_blocks("Install")[0] == ["pip install . && amplint check examples/train_amp.py"]
    assert 'pip install torch==2.13.0 -e ".[test]" && python -m pytest -n auto' in [
        line for block in console_blocks("Development") for line in block]
    assert readme_sections().index("Install") < readme_sections().index("Development")


def test_the_cpu_torch_line_comes_before_the_command_that_needs_it_and_the_time_is_said():
    """On a machine without a GPU, the command that installs the CPU build of torch must be read before the one
    that would bring the CUDA build (several GB); the reader is told how long the suite takes."""
    lines = [line for block in console_blocks("Development") for line in block]
    cpu = next(n for n, line in enumerate(lines) if "--index-url https://download.pytorch.org/whl/cpu" in line)
    test = next(n for n, line in enumerate(lines) if line.endswith(readme_test_command()))
    assert cpu < test
    before_command = readme_section("Development").split(readme_test_command(), 1)[0]
    assert re.search(r"about \d+(?:-\d+)? minutes on \d+ cores", before_command)


def readme_test_command() -> str:
    for block in console_blocks("Development"):
        for line in block:
            if 'pip install torch==2.13.0 -e ".[test]" && ' in line:
                return line.split(" && ", 1)[1]
    raise AssertionError("no test command in the README's Development section")


def test_the_readme_test_command_is_what_ci_runs():
    ci = (REPO / ".ci" / "run").read_text()
    command = readme_test_command()
    assert command.startswith("python -m pytest")
    assert [line for line in ci.splitlines() if line.startswith("python -m pytest")] == [command]
    assert 'pip install torch==2.13.0 -e ".[test]"' in README


def test_the_test_command_runs_on_every_core():
    """`-n auto` is pytest-xdist's: one worker per core, with xdist from the `test` extra."""
    xdist_plugin = pytest.importorskip("xdist.plugin", reason="pytest-xdist is in the `test` extra")
    assert readme_test_command().split()[3:] == ["-n", "auto"]
    assert xdist_plugin.parse_numprocesses("auto") == "auto"


def defined_tests() -> dict[str, set[str]]:
    """The test functions each file of tests/ defines (at any level: in classes too), read with ast."""
    import ast

    return {path.name: {node.name for node in ast.walk(ast.parse(path.read_text()))
                        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")}
            for path in sorted((REPO / "tests").glob("test_*.py"))}


NAMED_TEST = re.compile(r"`(?:(?:tests/)?(test_\w+\.py)::)?(test_\w+)`")  # `tests/test_x.py::test_y`, `test_y`


def test_every_test_the_readme_names_exists():
    defined = defined_tests()
    named = [match for text in PAGES.values() for match in NAMED_TEST.findall(text)]
    assert named
    everywhere = set().union(*defined.values())
    missing = [f"{file}::{name}" if file else name for file, name in named
               if name not in (defined.get(file, set()) if file else everywhere)]
    assert not missing, f"the README or docs/ name tests that do not exist: {missing}"


def test_each_reliability_promise_is_backed_by_a_named_test():
    table = DOCS["docs/reliability.md"].split("<!-- reliability -->", 1)[1].split("<!-- /reliability -->", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("|") and not line.startswith(("| promise", "|---"))]
    assert len(rows) >= 10
    for row in rows:
        promise, tests = [cell.strip() for cell in row.strip().strip("|").split("|")][-2:]
        assert promise and [file for file, _ in NAMED_TEST.findall(tests) if file], f"no test named for: {promise}"


def test_the_readmes_links_into_docs_are_pages():
    links = re.findall(r"\]\((docs/[^)#\s]+)", README)
    assert len(links) >= 8
    assert not [link for link in links if link not in DOCS], links


# --- installing: amplint is on no package index -----------------------------------------------------------------

def test_no_instruction_installs_amplint_from_a_package_index():
    """`pip install amplint` would install whatever an index holds under that name: every instruction names a
    clone (a path); the published-package form is said to be not yet available, and no page names a placeholder
    owner."""
    # `amplint` or `"amplint[server]"` as an argument of `pip install`, not followed by ` @ git+...`
    from_index = re.compile(r"""pip install[^\n`&;|#]*?(?<![\w@/.-])(["']?)amplint(\[[\w,]+\])?\1"""
                            r"""(?=[\s`"]|$)(?!\s*@)""")
    found = [(name, match.group(0)) for name, text in PAGES.items() for match in from_index.finditer(text)]
    assert not found, found
    assert "pip install ./amplint" in README
    assert "**not yet available**" in README
    pages = {**PAGES, "action.yml": (REPO / "action.yml").read_text()}
    assert not [name for name, text in pages.items() if "OWNER" in text or "amplint.readthedocs.io" in text]


def pinned_revisions() -> list[tuple[str, str]]:
    """(page, rev) of every pre-commit `rev:` of amplint in the README and docs/ (not another tool's, such as
    ruff-pre-commit's release tag beside it)."""
    found = []
    for name, text in PAGES.items():
        for repo, rev in re.findall(r"^\s*-?\s*repo:\s*([^\s#]+).*\n\s*rev:\s*([^\s#]+)", text, re.M):
            if not (re.match(r"https?://", repo) and "amplint" not in repo):
                found.append((name, rev))
    return found


def test_the_pinned_revision_is_the_readers_own_clones():
    """A fixed commit on a page gets older with every commit after it (a reader who copies it runs an older amplint
    than the one they installed): every `rev:` of amplint the pages show is a placeholder, and the page says how to
    fill it in with the reader's own clone's commit."""
    revisions = pinned_revisions()
    assert any(name == "docs/integrations.md" for name, _ in revisions)
    assert {rev for _, rev in revisions} == {"COMMIT"}
    assert not [name for name, text in PAGES.items() if re.search(r"\b[0-9a-f]{40}\b", text)]
    integrations = DOCS["docs/integrations.md"]
    assert "rev-parse HEAD" in integrations and "pre-commit autoupdate --freeze" in integrations
    assert "rev-parse HEAD" in readme_section("Install") and "autoupdate --freeze" in readme_section("Install")


def test_the_docs_link_to_the_readme_as_a_file():
    """A page of docs/ links to the README as `../README.md#section` (right on GitHub and in a clone; the site's
    build maps it to its page), never to `index.md`, which only the built site has."""
    titles = {re.sub(r"[^\w]+", "-", title.lower()).strip("-") for title in readme_sections()}
    for name, text in DOCS.items():
        assert "](index.md" not in text, name
        for anchor in re.findall(r"\]\(\.\./README\.md#([\w-]+)\)", text):
            assert anchor in titles, (name, anchor)


def test_the_readme_says_when_ruff_deletes_amplints_noqa_codes():
    """`ruff check --fix` removes `# noqa: AMP001` only where RUF100 or RUF102 is enabled, not with ruff's defaults."""
    section = " ".join(readme_section("Using amplint with ruff").split())
    assert re.search(r"Where RUF102 .* or RUF100 .* is enabled", section)
    assert "default selection" in section


# --- the test extra: what the tests use -------------------------------------------------------------------------

def modules_the_tests_use() -> set[str]:
    """Top-level modules the tests import, import with importorskip or run with `python -m`."""
    modules = set()
    for path in (REPO / "tests").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules.add(node.module.split(".")[0])
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr == "importorskip" and node.args and isinstance(node.args[0], ast.Constant):
                modules.add(str(node.args[0].value).split(".")[0])
            elif isinstance(node, (ast.List, ast.Tuple)):
                values = [item.value for item in node.elts if isinstance(item, ast.Constant)]
                modules |= {str(after) for before, after in zip(values, values[1:]) if before == "-m"}
    local = {path.stem for path in (REPO / "tests").glob("*.py")} | {"amplint"}
    return {name for name in modules if name not in sys.stdlib_module_names and name not in local}


def normal(requirement: str) -> str:
    """A requirement's distribution name, normalized (PEP 503)."""
    return re.sub(r"[-_.]+", "-", re.split(r"[<>=!~;\[ ]", requirement.strip(), maxsplit=1)[0]).lower()


def test_the_test_extra_is_what_the_tests_use():
    """Every distribution of the `test` extra provides a module the tests use (or is what one of amplint's own
    extras adds, which the tests run: `amplint server` needs pygls), and every installed module the tests use
    comes from the extra, the runtime dependencies or what the extra's distributions require."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    extra = {normal(name) for name in extras["test"]}
    features = {normal(name) for key, names in extras.items() if key != "test" for name in names}
    runtime = {normal(name) for name in project["dependencies"]}
    providers = {module: {normal(dist) for dist in dists}
                 for module, dists in metadata.packages_distributions().items()}
    used = modules_the_tests_use()
    installed = [dist for dist in extra if dist in set().union(*providers.values())]
    unused = sorted(dist for dist in installed if dist not in features
                    and not any(dist in providers.get(module, ()) for module in used))
    assert not unused, f"the test extra installs what no test uses: {unused}"
    required = {normal(req) for dist in installed for req in metadata.requires(dist) or () if "extra ==" not in req}
    unlisted = sorted(module for module in used
                      if module in providers and not providers[module] & (extra | runtime | required))
    assert not unlisted, f"the tests use modules that the test extra does not install: {unlisted}"


# --- "Using amplint with ruff" and "See the harm" ------------------------------------------------------------------

def readme_section(title: str) -> str:
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_ruff_section_keeps_amplints_noqa_codes():
    """The README and the integrations page say what ruff needs (`external = ["AMP"]`), in a TOML table ruff
    reads, and every `# noqa` the README and docs/ write names codes, never rule names (ruff and flake8 read
    codes only)."""
    section = readme_section("Using amplint with ruff")
    integrations = DOCS["docs/integrations.md"].split("\n## Using amplint with ruff\n", 1)[1].split("\n## ", 1)[0]
    for text in (section, integrations):
        toml = re.search(r"```toml\n(.*?)```", text, re.S).group(1)
        assert tomllib.loads(toml)["tool"]["ruff"]["lint"]["external"] == ["AMP"]
        assert "RUF100" in text and "RUF102" in text
    names = {rule.name for rule in ALL_RULES}
    written = []
    for page, text in PAGES.items():  # the code a reader copies: the pages' code blocks
        for block in re.findall(r"^```\w*\n(.*?)^```", text, re.S | re.M):
            for codes in re.findall(r"#\s*(?:amplint:\s*)?noqa:\s*([\w\-]+(?:,\s*[\w\-]+)*)", block):
                written.append((page, {code.strip() for code in codes.split(",")}))
    assert written
    assert not [(page, codes) for page, codes in written if codes & names], "a rule name in a noqa comment"
    # the pre-commit snippet with both tools: amplint's hook first, then ruff's
    hooks = re.findall(r"^\s*- id: ([\w-]+)", integrations, re.M)
    assert hooks.index("amplint-fix") < hooks.index("ruff-check")


def test_the_harm_sections_commands_are_the_harness_options():
    """The commands "See the harm" shows: the harness's options exist, the `plots` extra brings matplotlib, and each
    row quoted from the evidence table has its values in that table's row for the program."""
    section = readme_section("See the harm")
    commands = re.search(r"```console\n(.*?)```", section, re.S).group(1)
    usage = subprocess.run([sys.executable, "-m", "amplint.harness", "--help"], capture_output=True, text=True,
                           cwd=REPO)
    assert usage.returncode == 0, usage.stderr
    for option in set(re.findall(r"amplint\.harness[^\n#]*?(--[\w-]+)", commands)) | {"--plots"}:
        assert option in usage.stdout, option
    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    assert '".[plots]"' in commands and any(normal(name) == "matplotlib" for name in extras["plots"])
    evidence = {}
    for line in DOCS["docs/evidence.md"].splitlines():
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 8 and re.fullmatch(r"AMP\d{3}", cells[0]):
            evidence[(cells[0], cells[1], cells[3])] = cells
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in section.splitlines() if re.match(r"\|\s*AMP\d{3}", line)]
    assert rows
    for rule, program, dtype, _, flagged, fixed in rows:
        measured = evidence[(rule, program, dtype)]
        for quoted, cell in ((flagged, measured[5]), (fixed, measured[6])):
            assert set(quoted.split(", ")) <= set(cell.split(", ")), (rule, program, quoted, cell)
