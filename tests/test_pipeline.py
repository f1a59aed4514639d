"""One pipeline: the same program as a file, on stdin, as an editor's buffer, through flake8, as a notebook's cell
and as a harness program goes through `amplint.pipeline.run` and comes out with the same findings and fixes."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from amplint import harness, pipeline, sources
from amplint.flake8_plugin import AmplintChecker
from amplint.outcome import Mode
from amplint.selection import all_rules
from amplint.server import fix_all, lint_document
from amplint.sources.file import FileSource
from amplint.sources.notebook import NotebookSource
from amplint.sources.text import TextSource

from samples import CLIP, FLAGGED, invoke_in, notebook_json

PROGRAM = CLIP + "\n\n" + FLAGGED.split("\n", 2)[2]  # AMP003 and AMP001, both with a safe fix


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text("[tool.amplint]\n", encoding="utf-8")
    (tmp_path / "train.py").write_text(PROGRAM, encoding="utf-8")
    (tmp_path / "train.ipynb").write_text(notebook_json([PROGRAM]), encoding="utf-8")
    return tmp_path


@pytest.fixture
def runs(monkeypatch) -> list[tuple[str, str, Mode]]:
    """Every call of `pipeline.run`: (the source's kind, its name, the mode)."""
    calls = []
    real = pipeline.run

    def counting(source, rules, mode=Mode(), cache=None, project=None):
        calls.append((type(source).__name__, Path(source.path).name, mode))
        return real(source, rules, mode, cache, project)

    monkeypatch.setattr(pipeline, "run", counting)
    return calls


def _cli(project: Path, *args: str, input: str | None = None) -> list[tuple]:
    result = invoke_in(project, ["check", "--no-cache", "--output-format", "json", *args], input=input)
    return [(d["code"], d["location"]["row"], d["message"]) for d in json.loads(result.output)]


def _findings(diagnostics) -> list[tuple]:
    return [(d.code, d.location.row, d.message) for d in diagnostics]


def test_every_entry_point_finds_the_same(project):
    expected = _cli(project, "train.py")
    assert {code for code, _, _ in expected} == {"AMP001", "AMP003"}
    assert _cli(project, "-", "--stdin-filename", "train.py", input=PROGRAM) == expected
    assert _cli(project, "train.ipynb") == expected  # one cell: its rows are the program's
    assert _findings(lint_document(PROGRAM, str(project / "train.py"))) == expected
    checker = AmplintChecker(ast.parse(PROGRAM), "train.py", PROGRAM.splitlines(keepends=True))
    assert [(message.split(" ", 1)[0], row, message.split(" ", 1)[1]) for row, _, message, _ in checker.run()] \
        == expected
    assert harness._fix.__wrapped__(project / "train.py", PROGRAM, False, "AMP003").flagged_codes \
        == tuple(code for code, _, _ in expected)


def test_every_entry_point_fixes_the_same(project):
    fixed = fix_all(PROGRAM, str(project / "train.py"))
    assert fixed != PROGRAM
    stdin = invoke_in(project, ["check", "--fix", "-", "--stdin-filename", "train.py"], input=PROGRAM)
    assert stdin.output == fixed
    invoke_in(project, ["check", "--no-cache", "--fix", "train.py", "train.ipynb"])
    assert (project / "train.py").read_text(encoding="utf-8") == fixed
    [cell] = json.loads((project / "train.ipynb").read_text(encoding="utf-8"))["cells"]
    assert "".join(cell["source"]) == fixed
    assert harness._fix.__wrapped__(project / "t.py", PROGRAM, False, "AMP003").text == fixed


def test_each_entry_point_goes_through_pipeline_run(project, runs):
    _cli(project, "train.py", "train.ipynb")
    _cli(project, "-", "--stdin-filename", "train.py", input=PROGRAM)
    lint_document(PROGRAM, str(project / "train.py"))
    fix_all(PROGRAM, str(project / "train.py"))
    list(AmplintChecker(ast.parse(PROGRAM), "train.py", PROGRAM.splitlines(keepends=True)).run())
    harness._fix.__wrapped__(project / "train.py", PROGRAM, False, "AMP003")
    assert [(kind, name, mode.fix) for kind, name, mode in runs] == [
        ("FileSource", "train.py", False),  # the command line, files (through the workers' check_path)
        ("NotebookSource", "train.ipynb", False),
        ("TextSource", "train.py", False),  # stdin
        ("TextSource", "train.py", False),  # the server's buffer: lint, then fix all
        ("TextSource", "train.py", True),
        ("TextSource", "train.py", False),  # flake8
        ("TextSource", "train.py", False),  # the harness: lint, then fix
        ("TextSource", "train.py", True),
    ]


def test_sources_say_how_they_are_read_and_where_fixes_go(project):
    assert isinstance(sources.open_path(str(project / "train.py")), FileSource)
    assert isinstance(sources.open_path(str(project / "train.ipynb")), NotebookSource)
    assert isinstance(sources.from_bytes(b"x = 1\n", "-"), TextSource)
    assert isinstance(sources.from_bytes(notebook_json(["x = 1"]).encode(), "n.ipynb"), NotebookSource)
    # A text handed over as text is never written: its fixed text comes back, and no bytes.
    outcome = pipeline.run(sources.from_text(PROGRAM, "buffer.py"), all_rules(), Mode(fix=True))
    assert outcome.fixed and outcome.fixed_text != PROGRAM and outcome.output is None
    assert set(outcome.applied) == {"AMP001", "AMP003"}
    # Bytes handed over come back as bytes, fixed, in their own encoding.
    raw = ("# -*- coding: latin-1 -*-\n# caf\xe9\n" + PROGRAM).encode("latin-1")
    outcome = pipeline.run(sources.from_bytes(raw, "t.py"), all_rules(), Mode(fix=True))
    assert outcome.output == outcome.fixed_text.encode("latin-1") and outcome.output != raw
