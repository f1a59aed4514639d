"""SARIF 2.1.0, the format code scanning (GitHub, Azure DevOps, IDE viewers) reads.

One run: the tool with every rule that ran (a short description, where its documentation is: `amplint rule CODE`,
and the page's address as `helpUri` when `docs-url` is set), one result per diagnostic with its
region and, when there is one, its fix as replacements. Columns count characters (code points), as amplint's do.
Levels: each rule's default is its `defaultConfiguration`, a level the configuration changed is a
`ruleConfigurationOverrides` entry of the invocation, and every result states its own `level`.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from amplint import __version__
from amplint.diagnostics import Diagnostic, Edit, Location, rule_url
from amplint.output.common import FILE_ERRORS, fingerprints, name_bytes, portable, relative_path

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SRCROOT = "%SRCROOT%"


def artifact_location(filename: str) -> dict:
    """A relative URI against %SRCROOT% (the current folder) when possible, else an absolute file URI; either
    percent-encodes the name's bytes, so a name that is not UTF-8 keeps its exact bytes."""
    path = relative_path(filename)
    if Path(path).is_absolute():
        return {"uri": Path(path).as_uri()}
    return {"uri": quote(name_bytes(path), safe="/"), "uriBaseId": SRCROOT}


def region(start: Location, end: Location) -> dict:
    """SARIF regions are 1-based with an exclusive end column, like amplint's locations."""
    return {"startLine": start.row, "startColumn": start.column, "endLine": end.row, "endColumn": end.column}


def first_paragraph(documentation: str) -> str:
    """The first paragraph of prose (the "What it does" text) on one line."""
    paragraph: list[str] = []
    for line in documentation.splitlines():
        if line.startswith("#") or not line.strip():
            if paragraph:
                break
            continue
        paragraph.append(line.strip())
    return " ".join(paragraph)


def help_text(code: str, description: str, docs_url: str | None) -> dict:
    """What the rule finds and where its documentation is (never the whole documentation: viewers show it per
    result, and a log carries it once per rule)."""
    url = rule_url(code, docs_url)
    if url is None:
        return {"text": f"{description} Documentation: `amplint rule {code}`."}
    return {"text": f"{description} Documentation: {url} (or `amplint rule {code}`).",
            "markdown": f"{description} [Documentation]({url}), or `amplint rule {code}`."}


def rule_descriptor(rule, docs_url: str | None = None) -> dict:
    description = first_paragraph(rule.documentation()) or rule.headline()
    entry = {
        "id": rule.code,
        "name": rule.name,
        "shortDescription": {"text": rule.headline()},
        "fullDescription": {"text": description},
        "help": help_text(rule.code, rule.headline(), docs_url),
        "defaultConfiguration": {"level": rule.severity.value},
    }
    return _with_uri(entry, rule_url(rule.code, docs_url))


def file_error_descriptor(diagnostic: Diagnostic, docs_url: str | None = None) -> dict:
    """AMP900-902 are no Rule classes but results still name a rule; describe them briefly."""
    description = FILE_ERRORS.get(diagnostic.code, diagnostic.name)
    entry = {
        "id": diagnostic.code,
        "name": diagnostic.name,
        "shortDescription": {"text": description},
        "help": help_text(diagnostic.code, description, docs_url),
        "defaultConfiguration": {"level": "error"},
    }
    return _with_uri(entry, rule_url(diagnostic.code, docs_url))


def _with_uri(entry: dict, url: str | None) -> dict:
    """`helpUri` before `defaultConfiguration`, only when there is a site to link to."""
    if url is None:
        return entry
    level = entry.pop("defaultConfiguration")
    return {**entry, "helpUri": url, "defaultConfiguration": level}


def replacement(edit: Edit) -> dict:
    return {"deletedRegion": region(edit.location, edit.end_location), "insertedContent": {"text": edit.content}}


def message(diagnostic: Diagnostic) -> dict:
    """What is wrong as the text every viewer shows; with what to do as markdown, for viewers that render it."""
    text = portable(diagnostic.message)
    if not diagnostic.help:
        return {"text": text}
    return {"text": text, "markdown": f"{text}\n\n**help:** {portable(diagnostic.help)}"}


def result(diagnostic: Diagnostic, rule_index: int, fingerprint: str) -> dict:
    location = artifact_location(diagnostic.filename)
    entry: dict = {
        "ruleId": diagnostic.code,
        "ruleIndex": rule_index,
        "level": diagnostic.severity.value,
        "message": message(diagnostic),
        "locations": [{"physicalLocation": {
            "artifactLocation": location,
            "region": region(diagnostic.location, diagnostic.end_location),
        }}],
        "partialFingerprints": {"amplint/v1": fingerprint},
    }
    if diagnostic.notes:
        # The evidence of the message (where a value became low precision...): code scanning links each.
        entry["relatedLocations"] = [{
            "id": number,
            "physicalLocation": {"artifactLocation": artifact_location(note.filename or diagnostic.filename),
                                 "region": region(note.location, note.location)},
            "message": {"text": portable(note.message)},
        } for number, note in enumerate(diagnostic.notes)]
    if diagnostic.fix is not None and diagnostic.fix.edits:
        entry["fixes"] = [{
            "description": {"text": diagnostic.fix.message},
            "artifactChanges": [{
                "artifactLocation": location,
                "replacements": [replacement(edit) for edit in diagnostic.fix.edits],
            }],
            "properties": {"applicability": diagnostic.fix.applicability.value},
        }]
    if diagnostic.cell is not None:
        # Rows of a notebook diagnostic count from the top of its cell.
        entry["properties"] = {"cell": diagnostic.cell}
    return entry


def sarif_log(report) -> dict:
    docs_url = getattr(report, "docs_url", None)
    rules = [rule_descriptor(rule, docs_url) for rule in report.rules]
    index = {rule["id"]: position for position, rule in enumerate(rules)}
    for diagnostic in report.diagnostics:
        if diagnostic.code not in index:
            index[diagnostic.code] = len(rules)
            rules.append(file_error_descriptor(diagnostic, docs_url))
    results = [result(d, index[d.code], fp) for d, fp in zip(report.diagnostics, fingerprints(report.diagnostics))]
    invocation: dict = {"executionSuccessful": not any(d.code == "AMP902" for d in report.diagnostics)}
    overrides = [{"descriptor": {"id": code, "index": index[code]}, "configuration": {"level": level.value}}
                 for code, level in report.severities.items() if code in index]
    if overrides:
        invocation["ruleConfigurationOverrides"] = overrides
    if report.messages:
        invocation["toolExecutionNotifications"] = [
            {"level": "warning", "message": {"text": portable(message)}} for message in report.messages]
    driver: dict = {"name": "amplint", "version": __version__, "semanticVersion": __version__}
    if docs_url:
        driver["informationUri"] = docs_url.rstrip("/") + "/"  # the site's home page
    driver["rules"] = rules
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": driver},
            "invocations": [invocation],
            "originalUriBaseIds": {SRCROOT: {"uri": Path.cwd().as_uri().rstrip("/") + "/"}},
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    }


def render(report) -> str:
    return json.dumps(sarif_log(report), indent=2, ensure_ascii=False) + "\n"
