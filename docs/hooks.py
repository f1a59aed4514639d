"""The documentation site, generated from the repository at build time (an mkdocs hook: see mkdocs.yml).

Each text has one home, so none can drift from what it describes:
- a page per rule from the rule's docstring (what `amplint rule CODE` prints), with its runtime evidence: the
  harness's programs and their specs (`amplint.harness.discover`, no torch imported), the rows of the evidence
  table (docs/evidence.md) that `python -m amplint.harness` printed, its picture (docs/plots/), each program's
  source and the diff amplint's own fixer makes of it;
- a page per code of a file that could not be analysed (AMP900-AMP902), so every URL a report carries exists;
- the configuration reference from `amplint.config.KEYS` (types, defaults) and `amplint check`'s options;
- the README's `## ` sections (the README is their one home: what a newcomer reads first), each on the page
  README_PAGES names;
- the reference, written as pages in docs/ (DOCS_PAGES: configuration, evidence, fixes, integrations...), each
  its text's one home; this hook adds their generated parts (the configuration keys) and reads the evidence
  table from docs/evidence.md.
A README section on no page, a page naming a section the README lacks, a Markdown file of docs/ in no menu, a
README link into docs/ that is no page, an evidence row of no program or a program with no row is a warning, and
`mkdocs build --strict` fails on warnings.

The site has no address of its own: wherever it is published, `docs-url` (amplint/config.py) names it, and the
reports link to `<docs-url>/rules/<CODE>/`, the page of each code here (`use_directory_urls`, mkdocs' default;
tests/test_docs_site.py checks every address a report carries is a page of the built site).
"""

from __future__ import annotations

import difflib
import json
import re
import sys
from pathlib import Path

from mkdocs.plugins import get_plugin_logger
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # the checkout's amplint, even when another one is installed

PLOTS = ROOT / "docs" / "plots"  # the committed pictures of the runtime evidence (amplint.plots)
log = get_plugin_logger("amplint-docs")  # its warnings fail a --strict build

# page -> (title, the README's `## ` sections it shows, in order). A page of one section takes the section's
# headings one level up (its `##` becomes the page's title).
README_PAGES = {
    # "": the text before the first section
    "index.md": ("amplint", ("", "Install", "Documentation", "See the harm", "Development")),
    "usage.md": ("Usage", ("Usage", "Suppression", "Using amplint with ruff")),
    "rules/index.md": ("Rules", ("Rules",)),
    "architecture.md": ("Architecture", ("Architecture",)),
}

# The pages written in docs/ (each file is its page, in the menu at this place), after README_PAGES's.
DOCS = ROOT / "docs"
DOCS_PAGES = ("configuration.md", "not-flagged.md", "evidence.md", "fixes.md", "reliability.md",
              "notebooks-and-editors.md", "integrations.md", "performance.md", "runtime.md")
EVIDENCE = DOCS / "evidence.md"  # its table: what `python -m amplint.harness` printed


# --- the README's sections -------------------------------------------------------------------------------------

def _outside_fences(lines: list[str]):
    """(index, line, in_fence) for each line: headings and list marks inside ``` blocks are code, not Markdown."""
    fence = False
    for index, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fence = not fence
            yield index, line, True
            continue
        yield index, line, fence


def readme_sections(text: str) -> dict[str, list[str]]:
    """The README's `## ` sections by title (each with its `###` subsections, without its own heading); the
    text before the first one under ""."""
    sections: dict[str, list[str]] = {"": []}
    current = ""
    lines = text.splitlines()
    for index, line, fenced in _outside_fences(lines):
        if not fenced and line.startswith("## "):
            current = line[3:].strip()
            sections[current] = []
            continue
        sections[current].append(line)
    first = sections[""]
    if first and first[0].startswith("# "):  # the README's own title: the page has its own
        sections[""] = first[1:]
    return sections


def markdown(lines: list[str], promote: bool = False) -> str:
    """README (GitHub) Markdown as Python-Markdown needs it: a blank line before a list that follows a
    paragraph; with `promote`, every heading one level up."""
    out: list[str] = []
    for _, line, fenced in _outside_fences(lines):
        if not fenced:
            if promote and re.match(r"#{2,6} ", line):
                line = line[1:]
            if re.match(r"\s*(?:[-*]|\d+\.) ", line) and out and out[-1].strip() and not re.match(
                    r"\s*(?:[-*]|\d+\.) ", out[-1]) and not out[-1].startswith(("|", " ", "#")):
                out.append("")
        out.append(line)
    return "\n".join(out).strip("\n") + "\n"


def readme_page(title: str, names: tuple[str, ...], sections: dict[str, list[str]], path: str) -> str:
    present = [name for name in names if name in sections]
    for name in names:
        if name not in sections:
            log.warning(f"{path}: the README has no section `## {name}` (docs/hooks.py README_PAGES)")
    if len(present) == 1 and present[0]:
        return f"# {title}\n\n" + markdown(sections[present[0]], promote=True)
    parts = [f"# {title}\n"]
    for name in present:
        body = markdown(sections[name])
        if body.strip():
            parts.append((f"## {name}\n\n" if name else "") + body)
    return "\n".join(parts)


def unplaced_sections(sections: dict[str, list[str]]) -> list[str]:
    placed = {name for _, names in README_PAGES.values() for name in names}
    return [name for name in sections if name and name not in placed]


def unlisted_docs(docs: Path = DOCS) -> list[str]:
    """The Markdown files of docs/ that are no page of the menu (DOCS_PAGES), and the pages that have no file."""
    files = {path.relative_to(docs).as_posix() for path in docs.rglob("*.md")}
    return sorted(files ^ set(DOCS_PAGES))


DOCS_LINK = re.compile(r"\]\(docs/([^)#\s]+)")


def site_links(text: str) -> str:
    """The README's links into docs/ (`[Fixes](docs/fixes.md)`, right on GitHub) as the site's own pages."""
    def page(match: re.Match) -> str:
        if match.group(1) not in DOCS_PAGES:
            log.warning(f"the README links to docs/{match.group(1)}, which is no page of the site (DOCS_PAGES)")
        return "](" + match.group(1)
    return DOCS_LINK.sub(page, text)


README_LINK = re.compile(r"\]\(\.\./README\.md(?:#([\w-]+))?\)")


def readme_links(text: str) -> str:
    """A page of docs/ links to a README section as `../README.md#install` (right on GitHub and in a clone); on the
    site, to the page that shows that section (README_PAGES), with its anchor where the page has several."""
    def page(match: re.Match) -> str:
        anchor = match.group(1)
        for path, (_, sections) in README_PAGES.items():
            slugs = [re.sub(r"[^\w]+", "-", section.lower()).strip("-") for section in sections if section]
            if anchor is None and "" in sections or anchor in slugs:
                return f"]({path}#{anchor})" if anchor and len(sections) > 1 else f"]({path})"
        log.warning(f"a page links to ../README.md#{anchor}, a section on no page of the site (README_PAGES)")
        return match.group(0)
    return README_LINK.sub(page, text)


# --- rules -----------------------------------------------------------------------------------------------------

def evidence_rows(text: str) -> list[list[str]]:
    """The rows of the runtime evidence table in docs/evidence.md (as `python -m amplint.harness` printed them)."""
    rows = []
    for line in text.splitlines():
        if re.match(r"\|\s*AMP\d{3}\s*\|", line):
            rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    return rows


def _fence(text: str, language: str) -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{language}\n{text.rstrip()}\n{ticks}\n"


def _fix_diff(program, fixed_text: str | None) -> str:
    if fixed_text is None:
        return ""
    name = program.path.name
    diff = difflib.unified_diff(program.text.splitlines(keepends=True), fixed_text.splitlines(keepends=True),
                                f"{name} (flagged)", f"{name} (after amplint check --fix"
                                + (" --unsafe-fixes" if program.unsafe else "") + ")")
    return "".join(diff)


def picture(program) -> str:
    """The program's picture committed under docs/plots/ (amplint.plots), as Markdown. The build runs no torch, so
    the pictures are drawn beforehand; a pictured program whose picture is missing is a warning."""
    from amplint import plots

    if program.name not in plots.PICTURES:
        return ""
    name = plots.filename(program.rule, program.path.stem)
    if not (PLOTS / name).is_file():
        log.warning(f"docs/plots/{name} is missing: run `python -m amplint.harness --device cpu --rule "
                    f"{program.rule} --plots docs/plots` and commit the picture")
        return ""
    return (f"The CPU runs side by side, flagged on the left, fixed on the right (drawn by `python -m "
            f"amplint.harness --plots docs/plots`):\n\n![{program.rule} {program.path.stem}: "
            f"{plots.PICTURES[program.name].title}, flagged and fixed runs](../plots/{name})\n")


def _program_intro(program, heading: str, shows: str) -> list[str]:
    """The opening of a runtime program's section: its heading, its path and observable, then `shows` (what its
    runs show), and its spec's note."""
    parts = [f"### `{program.path.stem}`{heading}\n",
             f"`{program.path.relative_to(ROOT).as_posix()}`: {program.observable}. {shows}\n"]
    if program.note:
        parts.append(f"Note from its spec: {program.note}\n")
    return parts


def program_section(program, rows: list[list[str]]) -> str:
    from amplint import harness

    parts = _program_intro(program, "", f"The harm shows with {', '.join(program.dtypes)}.")
    if rows:
        table = ["| device | dtype | flagged run | fixed run | confirmed |", "|---|---|---|---|---|"]
        table += [f"| {device} | {dtype} | {flagged} | {fixed} | {confirmed} |"
                  for _, _, device, dtype, _, flagged, fixed, confirmed in rows]
        parts.append("\n".join(table) + "\n")
    parts.append(picture(program))
    parts.append("The program:\n\n" + _fence(program.text, "python"))
    if program.fix:
        fixed = harness.fix_program(program)
        diff = _fix_diff(program, fixed.text)
        if diff:
            parts.append("What amplint's fixer makes of it (the fixed run runs this):\n\n" + _fence(diff, "diff"))
        else:
            log.warning(f"{program.path.relative_to(ROOT).as_posix()}: amplint's fixer gives no fixed program: {'; '.join(fixed.problems)}")
    else:
        parts.append("The rule offers no fix, so only the flagged program is run.\n")
    return "\n".join(parts)


def safety_section(program) -> str:
    from amplint import harness

    same = ", ".join(f"`{key}`" for key in program.same)
    parts = _program_intro(program, " (a fix that must not change results)",
                           f"The fixed program must give the same {same} as the original.")
    diff = _fix_diff(program, harness.fix_program(program).text)
    parts.append("What amplint's safe fixer makes of it:\n\n" + _fence(diff, "diff") if diff
                 else "amplint's safe fixer leaves it unchanged.\n")
    return "\n".join(parts)


def rule_page(rule, programs: list, rows: list[list[str]]) -> str:
    documentation = rule.documentation()
    parts = [f"# {rule.code}: {rule.name}\n",
             "| code | name | default severity | fix |\n|---|---|---|---|\n"
             f"| `{rule.code}` | `{rule.name}` | {rule.severity.value} | {rule.fix} |\n",
             markdown(documentation.splitlines())]
    harms = [p for p in programs if p.rule == rule.code and not p.safety]
    guards = [p for p in programs if p.rule == rule.code and p.safety]
    parts.append("## Runtime evidence\n")
    if not harms:
        log.warning(f"rules/{rule.code}.md: {rule.code} has no runtime program (fixtures/*/runtime/)")
    else:
        parts.append("Each program below is run with real torch as written (the flagged run) and as amplint's "
                     "fixer rewrites it (the fixed run), in separate processes; the table shows the rows of "
                     "[the evidence table](../evidence.md) that `python -m amplint.harness` printed.\n")
    for program in harms:
        mine = [row for row in rows if row[0] == rule.code and row[1] == program.path.stem]
        if not mine:
            log.warning(f"rules/{rule.code}.md: the evidence table (docs/evidence.md) has no row for "
                        f"{program.name}: run `python -m amplint.harness` and update the table")
        parts.append(program_section(program, mine))
    for program in guards:
        parts.append(safety_section(program))
    return "\n".join(parts)


def file_error_page(code: str, name: str, description: str) -> str:
    return (f"# {code}: {name}\n\n{description}\n\n"
            "Reported for a file amplint could not analyse; the other files are still linted. It is always an "
            "error. See [Usage](../usage.md#exit-codes) for the exit codes.\n")


def file_errors() -> list[tuple[str, str, str]]:
    """(code, name, description) of AMP900-AMP902."""
    from amplint import engine
    from amplint.output.common import FILE_ERRORS

    names = dict((engine.SYNTAX_ERROR, engine.IO_ERROR, engine.INTERNAL_ERROR))
    return [(code, names.get(code, code), description) for code, description in FILE_ERRORS.items()]


def link_rule_codes(text: str) -> str:
    """The README's rules table with each code linked to its page."""
    return re.sub(r"^\|\s*(AMP\d{3})\s*\|", lambda m: f"| [{m.group(1)}]({m.group(1)}.md) |", text, flags=re.M)


# --- configuration ---------------------------------------------------------------------------------------------

def _expected(convert) -> str:
    """What a key's conversion accepts, as its error message says it."""
    try:
        convert(object())
    except Exception as error:  # the conversion's own "wrong type" exception, whatever its class
        return str(error)
    return ""


def configuration_reference() -> str:
    from amplint import cli
    from amplint.config import KEYS, Settings

    defaults = Settings()
    options = {opt: param for param in cli.main.commands["check"].params for opt in getattr(param, "opts", ())}
    lines = ["## Reference", "",
             "Every key of `[tool.amplint]` (generated from amplint's own table of keys). A value of the wrong "
             "type is an error naming the key and the file.", "",
             "| key | value | default | command line | what it does |", "|---|---|---|---|---|"]
    for key, convert in KEYS.items():
        default = getattr(defaults, key.replace("-", "_"), None)
        shown = "not set" if default is None else f"`{json.dumps(default)}`"
        option = options.get(f"--{key}")
        help_text = (option.help or "").replace("|", "\\|") if option is not None else "—"
        lines.append(f"| `{key}` | {_expected(convert)} | {shown} | {f'`--{key}`' if option else ''} | "
                     f"{help_text} |")
    return "\n".join(lines) + "\n"


# --- the site --------------------------------------------------------------------------------------------------

def pages() -> dict[str, str]:
    """Every page of the site: path below docs/ -> Markdown."""
    from amplint import harness
    from amplint.rules import ALL_RULES

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    sections = readme_sections(readme)
    for name in unplaced_sections(sections):
        log.warning(f"the README's section `## {name}` is on no page of the site: add it to README_PAGES in "
                    "docs/hooks.py")
    for path in unlisted_docs():
        log.warning(f"docs/{path}: a Markdown file of docs/ that is no page, or a page with no file: DOCS_PAGES in "
                    "docs/hooks.py")
    site = {path: site_links(readme_page(title, names, sections, path))
            for path, (title, names) in README_PAGES.items()}
    site["rules/index.md"] = link_rule_codes(site["rules/index.md"]) + "\n## Files that could not be analysed\n\n" + \
        "\n".join(f"- [{code}]({code}.md) `{name}`: {description}" for code, name, description in file_errors()) + "\n"
    programs = harness.discover()
    rows = evidence_rows(EVIDENCE.read_text(encoding="utf-8"))
    known = {(p.rule, p.path.stem) for p in programs}
    for row in rows:
        if (row[0], row[1]) not in known:
            log.warning(f"the evidence table (docs/evidence.md) has a row for {row[0]} `{row[1]}`, which is no runtime "
                        "program: run `python -m amplint.harness` and update the table")
    for rule in ALL_RULES:
        site[f"rules/{rule.code}.md"] = rule_page(rule, programs, rows)
    for code, name, description in file_errors():
        site[f"rules/{code}.md"] = file_error_page(code, name, description)
    return site


def nav(site: dict[str, str]) -> list:
    def title(path: str) -> str:
        return site[path].split("\n", 1)[0].lstrip("# ").strip()

    rules = sorted(path for path in site if path.startswith("rules/") and path != "rules/index.md")
    return [{"Home": "index.md"}, {"Usage": "usage.md"}, {"Configuration": "configuration.md"},
            {"Rules": ["rules/index.md", *({title(path): path} for path in rules)]},
            {"What amplint does not flag": "not-flagged.md"},
            {"Runtime evidence": "evidence.md"}, {"Fixes": "fixes.md"}, {"Reliability": "reliability.md"},
            {"Notebooks and editors": "notebooks-and-editors.md"}, {"Integrations": "integrations.md"},
            {"Performance and benchmark": "performance.md"}, {"Checking at run time": "runtime.md"},
            {"Architecture": "architecture.md"}]


def _paths(entries) -> list[str]:
    """The pages a menu names, at any depth."""
    if isinstance(entries, str):
        return [entries]
    if isinstance(entries, dict):
        entries = list(entries.values())
    return [path for entry in entries for path in _paths(entry)]


_SITE: dict[str, str] = {}  # the pages of the build in progress (on_config makes them, on_files adds them)


def on_config(config):
    if not config.use_directory_urls:
        log.warning("mkdocs.yml's use_directory_urls is off: reports link to <docs-url>/rules/<CODE>/")
    _SITE.clear()
    _SITE.update(pages())
    config.nav = nav(_SITE)
    missing = sorted(set(_SITE) - set(_paths(config.nav)))
    if missing:
        log.warning(f"pages in no menu: {', '.join(missing)}")
    return config


def on_page_markdown(text, page, config, files):
    """The configuration page written in docs/ gets the reference generated from amplint's table of keys."""
    text = readme_links(text)
    if page.file.src_uri == "configuration.md":
        return text.rstrip("\n") + "\n\n" + configuration_reference()
    return text


def on_files(files, config):
    for path, text in _SITE.items():
        files.append(File.generated(config, path, content=text))
    return files
