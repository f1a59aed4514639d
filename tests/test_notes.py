"""A finding's evidence at other places (notes): from a rule's Finding through the engine to every format that
shows it, the cache and notebook cells."""

from __future__ import annotations

import dataclasses
import json

from amplint import cache
from amplint.diagnostics import Location, Note
from amplint.engine import lint_text
from amplint.facts import ModuleFacts
from amplint.output import Report, render
from amplint.rules.base import Finding, Rule
from test_output_formats import validate_sarif

TEXT = "import torch\n\nh = torch.mm(a, b)\nh.sum()\n"


class NotedRule(Rule):
    """A rule for this test: reports `h.sum()` with a note at the statement that made `h`, and one in another
    file."""

    code = "AMP099"
    name = "noted"
    words = None

    def check(self, facts: ModuleFacts):
        statements = facts.module.body
        made, used = statements[1], statements[2]
        yield Finding(used, "`h` is used", notes=((made, "`h` is made here"), (("other.py", 7, 3), "and there")))


def diagnostic():
    [found] = lint_text(TEXT, "train.py", [NotedRule()]).diagnostics
    return found


def test_the_engine_places_each_note():
    found = diagnostic()
    assert found.notes == (Note("`h` is made here", Location(3, 1)), Note("and there", Location(7, 3), "other.py"))


def test_text_json_and_sarif_show_the_notes():
    report = Report(diagnostics=[diagnostic()], rules=[])
    full = render("full", report)
    assert "  = note: train.py:3:1: `h` is made here\n" in full
    assert "  = note: other.py:7:3: and there\n" in full
    [record] = json.loads(render("json", report))
    assert record["notes"] == [
        {"message": "`h` is made here", "filename": "train.py", "cell": None, "location": {"row": 3, "column": 1}},
        {"message": "and there", "filename": "other.py", "cell": None, "location": {"row": 7, "column": 3}}]
    log = json.loads(render("sarif", report))
    validate_sarif(log)
    [result] = log["runs"][0]["results"]
    related = result["relatedLocations"]
    assert [r["message"]["text"] for r in related] == ["`h` is made here", "and there"]
    assert related[1]["physicalLocation"]["artifactLocation"]["uri"] == "other.py"
    assert related[0]["physicalLocation"]["region"]["startLine"] == 3


def test_a_finding_without_notes_has_none_anywhere():
    report = Report(diagnostics=[dataclasses.replace(diagnostic(), notes=())], rules=[])
    assert "= note" not in render("full", report)
    assert "relatedLocations" not in render("sarif", report)


def test_notes_survive_the_cache_and_a_damaged_note_is_refused():
    found = diagnostic()
    raw = cache.entry_bytes("k" * 64, [found])
    [back], _ = cache.entry_content("k" * 64, raw)
    assert back.notes == found.notes
    bad = dataclasses.replace(found, notes=(Note("x", None),))  # type: ignore[arg-type]
    assert not cache.is_valid_diagnostic(bad)


def test_a_notebook_note_counts_rows_within_its_cell():
    from amplint.sources.notebook import map_diagnostic, parse_notebook

    cells = [{"cell_type": "code", "metadata": {}, "source": ["import torch\n", "\n", "h = torch.mm(a, b)\n"],
              "outputs": [], "execution_count": None},
             {"cell_type": "code", "metadata": {}, "source": ["h.sum()\n"], "outputs": [], "execution_count": None}]
    notebook = parse_notebook(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    found = diagnostic()
    joined = found.location.row  # the finding's row in the notebook's joined text
    found = dataclasses.replace(found, location=Location(notebook.cells[1].start + 1, 1),
                                end_location=Location(notebook.cells[1].start + 1, 8),
                                notes=(Note("`h` is made here", Location(notebook.cells[0].start + 3, 1)),
                                       found.notes[1]))
    mapped = map_diagnostic(found, notebook)
    assert joined and mapped.cell == 2
    assert mapped.notes[0] == Note("`h` is made here", Location(3, 1), None, 1)
    assert mapped.notes[1] == found.notes[1]  # another file's note is not a cell's
    assert "  = note: nb.ipynb:cell 1:3:1: `h` is made here" in render(
        "full", Report(diagnostics=[dataclasses.replace(mapped, filename="nb.ipynb")], rules=[]))
