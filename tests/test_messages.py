"""The messages a person reads: each finding says what is wrong, in the code's own names, in about 100 characters
on one line, and what to do on a separate help line. The measured consequences live in the rule's documentation
(`amplint rule CODE`), not in every report."""

from __future__ import annotations

import dataclasses
import json
import re
import statistics
from pathlib import Path

import pytest

from amplint.diagnostics import Diagnostic
from amplint.engine import lint_text
from amplint.lazy import libcst as cst
from amplint.output import Report, render
from amplint.rules import ALL_RULES
from amplint.rules.base import Finding, FixPlan
from samples import CLIP

REPO = Path(__file__).resolve().parents[1]
FLAGGED = sorted(REPO.glob("fixtures/AMP*-*/flagged/*.py"))
MAX_MESSAGE = 120  # characters; the median is about 90
MAX_MEDIAN = 100
# A figure measured on our own examples (2.4e-3, 65536x, 55772.77): the rule's documentation says it, once.
MEASURED = re.compile(r"measured|\d\.\d+e-\d|\d{3,}x\b|RuntimeError:|AssertionError:")


def diagnostics_of(path: Path) -> list[Diagnostic]:
    return lint_text(path.read_text(encoding="utf-8"), str(path), [rule() for rule in ALL_RULES]).diagnostics


def project_diagnostics() -> list[Diagnostic]:
    """The findings of the project fixtures (`fixtures/*/projects/<case>/`), each case indexed as a project."""
    from amplint.index.build import build_index

    found = []
    for case in sorted(path for path in REPO.glob("fixtures/AMP*-*/projects/*") if not (path / "project").is_dir()):
        paths = [str(path) for path in sorted(case.rglob("*.py"))]
        project = build_index(paths, lambda p: Path(p).read_text(encoding="utf-8"))
        for path in paths:
            found += lint_text(Path(path).read_text(encoding="utf-8"), path, [rule() for rule in ALL_RULES],
                               project=project.view(path)).diagnostics
    return found


@pytest.fixture(scope="module")
def flagged() -> list[Diagnostic]:
    found = [d for path in FLAGGED for d in diagnostics_of(path)] + project_diagnostics()
    assert {d.code for d in found} == {rule.code for rule in ALL_RULES}  # every rule speaks here
    return found


def test_every_message_is_short_on_one_line_and_has_a_help_line(flagged):
    too_long = [f"{d.filename}:{d.location.row} {d.code} ({len(d.message)}) {d.message}"
                for d in flagged if len(d.message) > MAX_MESSAGE]
    assert not too_long, "\n".join(too_long)
    assert statistics.median(len(d.message) for d in flagged) <= MAX_MEDIAN
    for d in flagged:
        assert "\n" not in d.message and d.help and "\n" not in d.help, d
        assert d.help != d.message and d.help[0].isupper(), d


def test_messages_leave_measured_figures_to_the_rule_docs(flagged):
    assert [d.message for d in flagged if MEASURED.search(d.message)] == []


def test_help_defaults_to_the_fix_title():
    node = cst.Name("x")
    fix = FixPlan("Insert `scaler.unscale_(optimizer)` before the clip", lambda: None)
    assert Finding(node, "m", fix).help_line() == fix.message
    assert Finding(node, "m", fix, help="Do this").help_line() == "Do this"
    assert Finding(node, "m").help_line() is None


def clip_report(**options) -> Report:
    diagnostics = lint_text(CLIP, "train.py", [rule() for rule in ALL_RULES]).diagnostics
    return Report(diagnostics=diagnostics, rules=list(ALL_RULES), **options)


def test_full_shows_the_message_the_frame_then_the_help():
    lines = render("full", clip_report()).splitlines()
    assert lines[:6] == [
        "train.py:9:9: AMP003 [*] `torch.nn.utils.clip_grad_norm_(...)` clips gradients still scaled by `scaler` "
        "(no `unscale_` before it)",
        "  |",
        "9 |         torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
        "  |         ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^ AMP003",
        "  |",
        "  = help: Insert `scaler.unscale_(optimizer)` before the clip",
    ]
    shown = render("full", clip_report(show_fixes=True))
    assert "  = help: Insert `scaler.unscale_(optimizer)` before the clip (safe fix)\n" in shown


def test_one_line_formats_keep_the_message_alone():
    for name in ("concise", "grouped"):
        text = render(name, clip_report())
        assert "clips gradients still scaled by `scaler`" in text and "help" not in text


def test_json_carries_the_help():
    [record] = json.loads(render("json", clip_report()))
    assert record["help"] == "Insert `scaler.unscale_(optimizer)` before the clip"
    assert record["message"].startswith("`torch.nn.utils.clip_grad_norm_(...)` clips")
    [line] = render("json-lines", clip_report()).splitlines()
    assert json.loads(line)["help"] == record["help"]


def test_the_readme_example_is_what_amplint_prints():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    usage = readme.split("\n## Usage\n", 1)[1]
    example = usage.split("```text\n", 1)[1].split("```", 1)[0]
    path = REPO / "examples" / "train_amp.py"
    diagnostics = [d for d in diagnostics_of(path) if d.code == "AMP001"]
    relative = [dataclasses.replace(d, filename="examples/train_amp.py") for d in diagnostics]
    printed = render("full", Report(diagnostics=relative, rules=list(ALL_RULES)))
    assert printed.startswith(example), f"README:\n{example}\namplint:\n{printed}"
