"""Notebooks: code cells linted as one program, diagnostics per cell, fixes written back into the cells."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from amplint import pipeline
from amplint.sources import notebook as nb
from amplint.cli import main
from amplint.config import Settings
from amplint.discovery import discover
from amplint.fixer import FixOutcome
from amplint.rules import ALL_RULES
from amplint.outcome import Mode
from amplint.pipeline import process_file

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "notebooks"
FLAGGED = sorted((FIXTURES / "flagged").glob("*.ipynb"))
CLEAN = sorted((FIXTURES / "clean").glob("*.ipynb"))


def rules():
    return [rule() for rule in ALL_RULES]


def lint(path) -> list:
    return process_file(str(path), rules(), Mode()).diagnostics


def fix(path, **mode):
    return process_file(str(path), rules(), Mode(fix=True, **mode))


def write_notebook(path: Path, cells: list, metadata: dict | None = None, **dump) -> Path:
    data = {"cells": cells, "metadata": metadata or {}, "nbformat": 4, "nbformat_minor": 5}
    dump.setdefault("indent", 1)
    dump.setdefault("ensure_ascii", False)
    path.write_text(json.dumps(data, **dump) + "\n", encoding="utf-8", newline="")
    return path


def code(source, **extra) -> dict:
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
    cell.update(extra)
    return cell


def markdown(text) -> dict:
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def without_sources(data: dict, positions) -> dict:
    data = json.loads(json.dumps(data))
    for position in positions:
        del data["cells"][position]["source"]
    return data


# --- reporting -------------------------------------------------------------------------------------------------


def test_fixture_sets_are_there():
    assert FLAGGED and CLEAN
    assert sorted(p.name for p in (FIXTURES / "fixed").glob("*.ipynb")) == [p.name for p in FLAGGED]
    for path in [*FLAGGED, *CLEAN]:
        data = json.loads(path.read_text(encoding="utf-8"))
        assert data["nbformat"] == 4 and any(c["cell_type"] == "markdown" for c in data["cells"])


def test_scaler_built_in_one_cell_and_stepped_in_another_is_one_program():
    diagnostics = lint(FIXTURES / "flagged" / "scaler_across_cells.ipynb")
    assert [(d.code, d.cell, d.location.row, d.location.column) for d in diagnostics] == [("AMP003", 5, 8, 5)]
    assert diagnostics[0].source_line.strip().startswith("torch.nn.utils.clip_grad_norm_(")
    assert diagnostics[0].fix.edits[0].location.row == 8  # edit rows are counted within the cell too


def test_cell_magic_cell_and_line_references_within_cells():
    diagnostics = lint(FIXTURES / "flagged" / "scaler_per_batch.ipynb")
    found = [(d.code, d.cell, d.location.row, d.location.column) for d in diagnostics]
    assert found == [("AMP004", 5, 3, 14), ("AMP001", 5, 7, 9)]
    assert "the loop at line 2," in diagnostics[0].message
    assert "region at line 5" in diagnostics[1].message and "of cell" not in diagnostics[1].message


@pytest.mark.parametrize("path", CLEAN, ids=lambda p: p.name)
def test_clean_notebooks_are_silent(path):
    assert lint(path) == []


@pytest.mark.parametrize("path", sorted((FIXTURES / "fixed").glob("*.ipynb")), ids=lambda p: p.name)
def test_fixed_notebooks_are_silent(path):
    assert lint(path) == []


def test_clean_recipe_is_really_linted(tmp_path):
    text = (FIXTURES / "clean" / "amp_recipe.ipynb").read_text(encoding="utf-8")
    broken = text.replace('"    scaler.unscale_(optimizer)\\n",\n', "", 1)
    assert broken != text
    path = tmp_path / "broken.ipynb"
    path.write_text(broken, encoding="utf-8")
    assert [(d.code, d.cell) for d in lint(path)] == [("AMP003", 4)]


def test_other_cells_are_named_in_messages(tmp_path):
    path = write_notebook(tmp_path / "n.ipynb", [
        code("import torch\nmodel = Net().half()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
             "scaler = torch.amp.GradScaler()\n"),
        markdown("training"),
        code("for x in data:\n    with torch.autocast('cuda'):\n        loss = model(x)\n"
             "    scaler.scale(loss).backward()\n    scaler.step(opt)\n    scaler.update()"),
    ])
    [half] = lint(path)
    assert (half.code, half.cell, half.location.row) == ("AMP012", 1, 2)
    assert "at line 5 of cell 3" in half.message


def test_cli_formats_show_the_cell():
    path = str(FIXTURES / "flagged" / "scaler_across_cells.ipynb")
    result = CliRunner().invoke(main, ["check", path, "--output-format", "concise"])
    assert result.exit_code == 1
    assert f"{path}:cell 5:8:5: AMP003" in result.output
    result = CliRunner().invoke(main, ["check", path, "--output-format", "json"])
    assert [(d["code"], d["cell"], d["location"]["row"]) for d in json.loads(result.output)] == [("AMP003", 5, 8)]


def test_discovery_finds_notebooks_but_not_checkpoints(tmp_path):
    shutil.copy(FLAGGED[0], tmp_path / "a.ipynb")
    (tmp_path / ".ipynb_checkpoints").mkdir()
    shutil.copy(FLAGGED[0], tmp_path / ".ipynb_checkpoints" / "a-checkpoint.ipynb")
    (tmp_path / "b.py").write_text("x = 1\n")
    found = [Path(p).name for p in discover([str(tmp_path)], Settings(root=tmp_path))]
    assert found == ["a.ipynb", "b.py"]


# --- IPython syntax --------------------------------------------------------------------------------------------


def test_ipython_lines_are_masked_keeping_line_numbers():
    lines = [
        "%matplotlib inline", "!pip install torch", "x = !ls", "files = %sx ls", "torch.amp.GradScaler?",
        "??torch.autocast", 's = """why?', "%not a magic", '!nor this"""', "y = (1,", "  %2)",
        "for i in range(3):", "    %time f(i)", "z = a if b else c  # why?", '!echo "it\'s"', "w = 'a'",
        "v = a != b", "u == !x",
    ]
    masked, python = nb.mask_ipython(lines)
    assert python and len(masked) == len(lines)
    changed = [index for index, (old, new) in enumerate(zip(lines, masked)) if old != new]
    assert changed == [0, 1, 2, 3, 4, 5, 12, 14]
    assert masked[12] == "    pass  # amplint: magic"


def test_cell_magics():
    assert nb.mask_ipython(["", "%%bash", "echo 'hi"]) == (["", "", ""], False)
    assert nb.mask_ipython(["%%time", "x = 1"]) == (["pass  # amplint: magic", "x = 1"], True)
    assert nb.mask_ipython(["%%"]) == ([""], False)


def test_magic_heavy_notebook_does_not_crash(tmp_path):
    path = write_notebook(tmp_path / "m.ipynb", [
        code(["%%writefile train.py\n", "import torch\n", "def broken(:\n"]),
        code("%%html\n<b>bold</b>"),
        code(""),
        code([]),
        code("!nvidia-smi\nx = !ls\n%env CUDA_VISIBLE_DEVICES=0\nobj?\n"),
        code("%%time\nfor i in range(2):\n    %time f(i)\n    !echo {i}\n"),
    ])
    assert lint(path) == []


def test_syntax_error_is_reported_in_its_cell(tmp_path):
    path = write_notebook(tmp_path / "s.ipynb", [markdown("x"), code("import torch"), code("x = 1\ndef f(:\n")])
    [diagnostic] = lint(path)
    assert (diagnostic.code, diagnostic.cell, diagnostic.location.row) == ("AMP900", 3, 2)


# A broken cell's message names lines of that cell: CPython counts them in the cell parsed alone ("on line 1"),
# which must not be read as rows of the joined program (another cell, another line).
BROKEN_CELLS = [
    ("for i in range(3):", 1, "expected an indented block after 'for' statement on line 1"),
    ("a = 1\nb = [1,\n 2)\n", 3, "closing parenthesis ')' does not match opening parenthesis '[' on line 2"),
    ("if x:\n    pass\nelse:", 3, "expected an indented block after 'else' statement on line 3"),
    ("s = 1\nt = \'\'\'abc\n", 2, "unterminated triple-quoted string literal (detected at line 2)"),
]


@pytest.mark.parametrize("before", [0, 3], ids=["first-code-cell", "after-three-cells"])
@pytest.mark.parametrize("source, row, message", BROKEN_CELLS, ids=[m.split(" ")[0] for _, _, m in BROKEN_CELLS])
def test_a_syntax_error_message_names_lines_of_its_own_cell(tmp_path, before, source, row, message):
    cells = [markdown("notes")] + [code(f"import torch\nx{n} = {n}\ny{n} = {n}\n") for n in range(before)]
    path = write_notebook(tmp_path / "b.ipynb", [*cells, code(source), code("z = 1\n")])
    [diagnostic] = lint(path)
    assert (diagnostic.code, diagnostic.cell, diagnostic.location.row) == ("AMP900", len(cells) + 1, row)
    assert diagnostic.message == f"cannot parse: {message}"


# One notebook per IPython form (fixtures/notebooks/ipython): each has a training cell with an AMP001 that must
# be reported whatever the IPython syntax in the cells around it (before, one such cell hid it: AMP900 only).
IPYTHON = FIXTURES / "ipython"
IPYTHON_FORMS = {
    "automagic": [("AMP001", 6, 4)],
    "cell_magic_other": [("AMP001", 13, 4)],
    "cell_magic_python": [("AMP001", 5, 5)],
    "classic_prompt": [("AMP001", 4, 4)],
    "help": [("AMP001", 7, 4)],
    "indented_first_line": [("AMP001", 4, 4)],
    "ipython_prompt": [("AMP001", 4, 4)],
    "magic_assignment": [("AMP001", 4, 4)],
    "magic_continued": [("AMP001", 5, 4)],
    "shell_continued": [("AMP001", 4, 4)],
    "syntax_error": [("AMP900", 3, 1), ("AMP001", 4, 4)],
}


def test_every_ipython_form_has_its_fixture():
    assert sorted(p.stem for p in IPYTHON.glob("*.ipynb")) == sorted(IPYTHON_FORMS)


@pytest.mark.parametrize("name", sorted(IPYTHON_FORMS))
def test_each_ipython_form_is_read_as_ipython_reads_it(name):
    path = IPYTHON / f"{name}.ipynb"
    cells = [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
    assert not all(nb._parses("".join(c["source"])) for c in cells)  # the fixture is not plain Python
    assert [(d.code, d.cell, d.location.row) for d in lint(path)] == IPYTHON_FORMS[name]


@pytest.mark.parametrize("name", sorted(IPYTHON_FORMS))
def test_fixing_next_to_ipython_edits_only_the_training_cell(tmp_path, name):
    path = tmp_path / f"{name}.ipynb"
    shutil.copy(IPYTHON / path.name, path)
    before = json.loads(path.read_text(encoding="utf-8"))["cells"]
    outcome = fix(path)
    after = json.loads(path.read_text(encoding="utf-8"))["cells"]
    assert outcome.fixed == 1 and [d.code for d in outcome.diagnostics] == [c for c, _, _ in IPYTHON_FORMS[name][:-1]]
    assert after[:-1] == before[:-1]
    assert "".join(after[-1]["source"]) == "".join(before[-1]["source"]).replace(
        "        loss.backward()", "    loss.backward()")


MAGIC = nb.PLACEHOLDER
CONTINUED = nb.CONTINUED


@pytest.mark.parametrize("lines, masked", [
    (["!pip install -q \\", "    torch \\", "  numpy", "x = 1"], [MAGIC, CONTINUED, CONTINUED, "x = 1"]),
    (["!echo # not a comment \\", "  more", "x = 1"], [MAGIC, CONTINUED, "x = 1"]),
    (["if a:", "    %run train.py \\", "        --epochs 2", "    b = 1"],
     ["if a:", "    " + MAGIC, "    " + CONTINUED, "    b = 1"]),
    (["files = !ls \\", "  -a", "here = %pwd"], [MAGIC, CONTINUED, MAGIC]),
    (["x = 1 \\", "  + 2", "!ls"], ["x = 1 \\", "  + 2", MAGIC]),  # a Python continuation is Python
    (["torch.amp.GradScaler(", "    init_scale=2)?", "y = 2"], [MAGIC, CONTINUED, "y = 2"]),
    (["/print 1 2", ",print a b", ";print a b"], [MAGIC, MAGIC, MAGIC]),
    (["", "    a = 1", "    if a:", "        b = 2", "", "c = 3"], ["", "a = 1", "if a:", "    b = 2", "", "c = 3"]),
    (["  %%time", "  x = 1"], [MAGIC, "x = 1"]),
])
def test_ipython_statements_become_placeholders_line_for_line(lines, masked):
    assert nb.mask_ipython(lines) == (masked, True)


@pytest.mark.parametrize("lines, magic", [
    (["cd data"], True),
    (["pip install -q torch", ""], True),
    (["", "cat notes.txt\r"], True),
    (["ls -l"], False),  # Python on its own: a subtraction
    (["cd"], False),
    (["cd = 'data'"], False),
    (["cd data", "x = 1"], False),  # IPython applies automagic to one-line cells only
    (["frobnicate data"], False),  # not a magic
])
def test_automagic_only_where_ipython_applies_it(lines, magic):
    masked, python = nb.mask_ipython(lines)
    assert python and (masked != lines) == magic


def test_automagic_in_a_longer_cell_is_a_syntax_error_of_that_cell_alone(tmp_path):
    path = write_notebook(tmp_path / "n.ipynb", [
        code("import torch"),
        code("cd data\nx = 1"),
        code("with torch.autocast('cuda'):\n    loss = model(x)\n    loss.backward()"),
    ])
    assert [(d.code, d.cell, d.location.row) for d in lint(path)] == [("AMP900", 2, 1), ("AMP001", 3, 3)]


def test_a_cell_left_open_is_reported_in_that_cell_and_the_next_cell_is_linted(tmp_path):
    path = write_notebook(tmp_path / "n.ipynb", [
        code("import torch"),
        code("sizes = (1,\n"),
        markdown("then"),
        code("with torch.autocast('cuda'):\n    loss = model(x)\n    loss.backward()"),
        code("def f(:\n    pass"),
    ])
    found = [(d.code, d.cell, d.location.row) for d in lint(path)]
    assert found == [("AMP900", 2, 1), ("AMP001", 4, 3), ("AMP900", 5, 1)]
    assert fix(path).fixed == 1
    sources = ["".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]]
    assert sources[1] == "sizes = (1,\n" and sources[4] == "def f(:\n    pass"
    assert sources[3] == "with torch.autocast('cuda'):\n    loss = model(x)\nloss.backward()"


def test_an_indented_cell_keeps_its_columns_indentation_and_magics_through_a_fix(tmp_path):
    path = write_notebook(tmp_path / "n.ipynb", [code("import torch"), code(
        "    with torch.autocast('cuda', dtype=torch.bfloat16):\n        loss = model(x).sum()\n"
        "        loss.backward()\n        !echo done \\\n           --twice\n        %time val = model(x)\n")])
    [found] = lint(path)
    assert (found.code, found.cell, found.location.row, found.location.column) == ("AMP001", 2, 3, 9)
    assert found.source_line == "        loss.backward()"
    assert fix(path).fixed == 1
    assert "".join(json.loads(path.read_text(encoding="utf-8"))["cells"][1]["source"]) == (
        "    with torch.autocast('cuda', dtype=torch.bfloat16):\n        loss = model(x).sum()\n"
        "    loss.backward()\n    with torch.autocast('cuda', dtype=torch.bfloat16):\n"
        "        !echo done \\\n           --twice\n        %time val = model(x)\n")


@pytest.mark.parametrize("lines, removed", [
    ([">>> x = 1", "... y = 2", "...", "z = 3"], [">>> ", "... ", "...", ""]),
    (["", ">>>", "...     x"], ["", ">>>", "...     "]),  # a stripped run is dedented (IPython 9, doctest mode)
    (["x = [", "... ]"], ["", ""]),  # `...` is a prompt only in a block with a `>>>` line
    (["...", "x = 1"], ["", ""]),  # `...` first is Python's Ellipsis: no prompts
    ([">>>x = 1", "y"], [">>>", ""]),  # doctest mode: the space after `>>>` is optional
    (["  >>> a = 1", "  ... b", "... c"], ["  >>> ", "  ... ", "... "]),  # the indentation goes first
    (["In [12]: x = 1", "   ...: y = 2", "    ...:", "[ins] In [3]: z"], ["In [12]: ", "   ...: ", "    ...:",
                                                                        "[ins] In [3]: "]),
    (["x = 1", "y", "In [1]: z"], ["", "", ""]),  # only the first two lines decide
    ([">>> x = 1", "In [1]: y"], [">>> ", "In [1]: "]),  # each kind of prompt in turn
    ([">>> a = 1", "", " >>> b = a"], [">>> ", "", " >>> "]),  # doctest mode: indented prompts too
    (["x = '''", ">>> s", "'''", ">>> y = 2"], ["", ">>> ", "", ">>> "]),  # a string opened after code: stripped
    (["'''", ">>> kept", "'''", ">>> y = 2"], ["", "", "", ">>> "]),  # a plain string keeps its prompts
])
def test_pasted_prompts_are_removed_as_ipython_removes_them(lines, removed):
    """Each case as IPython 9.18 strips it (leading_indent, classic_prompt in doctest mode, ipython_prompt),
    checked against IPython itself when the cases were written."""
    assert nb.removed_prefixes(lines) == removed


def test_a_finding_in_a_prompted_cell_is_reported_at_its_column_and_fixed_keeping_the_prompts(tmp_path):
    cell = (">>> import torch\n>>> with torch.autocast('cuda', dtype=torch.bfloat16):\n...     loss = model(x).sum()\n"
            "...     loss.backward()\n...\n>>> %time val = model(x)")
    path = write_notebook(tmp_path / "n.ipynb", [code(cell)])
    [found] = lint(path)
    assert (found.code, found.cell, found.location.row, found.location.column) == ("AMP001", 1, 4, 9)
    assert found.source_line == "...     loss.backward()"
    assert fix(path).fixed == 1
    assert "".join(json.loads(path.read_text(encoding="utf-8"))["cells"][0]["source"]) == cell.replace(
        "...     loss.backward()", "... loss.backward()")


def test_a_fix_that_cannot_keep_the_prompts_is_refused():
    notebook = nb.parse_notebook(json.dumps({"nbformat": 4, "cells": [code(">>> x = 1\n>>> y = 2")]}))
    assert notebook.text == "x = 1\ny = 2" and notebook.cells[0].prompted
    assert nb.split_fixed_text(notebook, "x = 1\ny = 3") == {0: ">>> x = 1\n>>> y = 3"}
    # a line without a prompt before them: IPython (doctest mode) still strips the prompts below it
    assert nb.split_fixed_text(notebook, "z = 0\n\nx = 1\ny = 2") == {0: "z = 0\n\n>>> x = 1\n>>> y = 2"}
    with pytest.raises(nb.CrossCellEdit, match="pasted prompts"):
        nb.split_fixed_text(notebook, "x = 1\n...\ny = 2")  # IPython would read the new `...` as a prompt


def test_a_fix_may_not_split_a_continued_command():
    notebook = nb.parse_notebook(json.dumps({"nbformat": 4, "cells": [code("!pip install \\\n  torch\nx = 1")]}))
    assert notebook.text == f"{MAGIC}\n{CONTINUED}\nx = 1"
    with pytest.raises(nb.CrossCellEdit, match="splits an IPython command"):
        nb.split_fixed_text(notebook, f"{MAGIC}\nif a:\n    {CONTINUED}\nx = 1")
    with pytest.raises(nb.CrossCellEdit, match="moves IPython lines"):
        nb.split_fixed_text(notebook, f"{CONTINUED}\n{MAGIC}\nx = 1")
    assert nb.split_fixed_text(notebook, f"if a:\n    {MAGIC}\n    {CONTINUED}\nx = 1") == {
        0: "if a:\n    !pip install \\\n      torch\nx = 1"}


# --- bad files -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("content, words", [
    ("{not json", "invalid JSON"),
    ('{"cells": [], "nbformat": 3, "metadata": {}}', "nbformat 3"),
    ("[1, 2]", "no `cells` list"),
    ('{"cells": [{"cell_type": "code", "source": 3}], "nbformat": 4}', "`source` must be"),
])
def test_invalid_notebooks_are_reported_and_the_run_goes_on(tmp_path, content, words):
    (tmp_path / "bad.ipynb").write_text(content, encoding="utf-8")
    shutil.copy(FLAGGED[0], tmp_path / "good.ipynb")
    result = CliRunner().invoke(main, ["check", str(tmp_path), "--output-format", "json"])
    assert result.exit_code == 1
    found = json.loads(result.output)
    assert [(Path(d["filename"]).name, d["code"]) for d in found] == [("bad.ipynb", "AMP901"), ("good.ipynb", "AMP003")]
    assert words in found[0]["message"] and found[0]["cell"] is None


def test_undecodable_notebook(tmp_path):
    (tmp_path / "bad.ipynb").write_bytes(b'{"cells": "\xff"}')
    [diagnostic] = lint(tmp_path / "bad.ipynb")
    assert diagnostic.code == "AMP901"


def test_notebooks_of_other_languages_are_not_linted(tmp_path):
    path = write_notebook(tmp_path / "r.ipynb", [code("x <- 1\nscaler.scale(loss).backward()")],
                          {"kernelspec": {"language": "R", "name": "ir"}})
    assert lint(path) == []
    assert fix(path).fixed == 0


# --- fixing ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flagged", FLAGGED, ids=lambda p: p.name)
def test_fix_in_place_keeps_everything_but_the_edited_sources(tmp_path, flagged):
    path = tmp_path / flagged.name
    shutil.copy(flagged, path)
    before = json.loads(flagged.read_text(encoding="utf-8"))
    outcome = fix(path)
    assert outcome.fixed >= 1 and outcome.diagnostics == [] and outcome.message is None
    assert path.read_bytes() == (FIXTURES / "fixed" / flagged.name).read_bytes()
    after = json.loads(path.read_text(encoding="utf-8"))
    edited = [i for i, (old, new) in enumerate(zip(before["cells"], after["cells"])) if old["source"] != new["source"]]
    assert edited == [4]  # the training-loop cell only
    assert without_sources(after, edited) == without_sources(before, edited)  # outputs, ids, metadata intact
    assert after["cells"][4]["outputs"] and isinstance(after["cells"][4]["source"], list)
    second = fix(path)  # idempotent
    assert second.fixed == 0 and second.diagnostics == []
    assert path.read_bytes() == (FIXTURES / "fixed" / flagged.name).read_bytes()


def test_magics_survive_a_fix(tmp_path):
    path = tmp_path / "n.ipynb"
    shutil.copy(FIXTURES / "flagged" / "scaler_per_batch.ipynb", path)
    fix(path)
    sources = ["".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]]
    assert sources[0].startswith("files = !ls\n") and sources[1] == "%%bash\nnvidia-smi -L"
    assert sources[4].startswith("%%time\nscaler = torch.amp.GradScaler(device)\nfor ")
    assert sources[5] == "torch.amp.GradScaler?"


def test_string_sources_other_indents_crlf_and_ascii_escapes_are_kept(tmp_path):
    cells = [
        markdown("Ünïcödé notes"),
        code("import torch\nscaler = torch.amp.GradScaler()"),
        code("for x, y in data:\n    with torch.autocast('cuda'):\n        loss = f(x, y)\n"
             "        scaler.scale(loss).backward()\n    scaler.step(opt)\n    scaler.update()\n",
             outputs=[{"name": "stdout", "output_type": "stream", "text": "é\n"}], id="c3"),
    ]
    for dump in ({"indent": 2, "ensure_ascii": True}, {"indent": 4}, {"indent": None, "separators": (",", ":")}):
        path = write_notebook(tmp_path / "n.ipynb", cells, **dump)
        raw = path.read_bytes()
        for crlf in (False, True):
            original = raw.replace(b"\n", b"\r\n") if crlf else raw
            path.write_bytes(original)
            assert fix(path).fixed == 1
            written = path.read_bytes()
            expected = json.loads(original)
            expected["cells"][2]["source"] = ("for x, y in data:\n    with torch.autocast('cuda'):\n"
                                              "        loss = f(x, y)\n    scaler.scale(loss).backward()\n"
                                              "    scaler.step(opt)\n    scaler.update()\n")
            assert json.loads(written) == expected
            # the same serialization: only the edited source's text differs
            assert nb.detect_style(written.decode(), expected).dump(json.loads(original)).encode() == original
            assert (b"\r\n" in written) == crlf


def test_cross_cell_edits_are_refused(tmp_path, monkeypatch):
    path = tmp_path / "n.ipynb"
    shutil.copy(FIXTURES / "flagged" / "scaler_across_cells.ipynb", path)
    original = path.read_bytes()
    real = pipeline.fix_text

    def merging_fix(text, filename, rules=None, unsafe=False, **options):
        outcome = real(text, filename, rules, unsafe, **options)
        # a fix that rewrites the last line of cell 3 and the first line of cell 5 as one change
        merged = outcome.text.replace("scaler = torch.amp.GradScaler(device)  # built once, stepped in the loop below"
                                      "\npass  # amplint: magic", "scaler = torch.amp.GradScaler(device)", 1)
        assert merged != outcome.text
        return FixOutcome(merged, outcome.applied, outcome.remaining)

    monkeypatch.setattr(pipeline, "fix_text", merging_fix)
    outcome = fix(path)
    assert outcome.fixed == 0 and path.read_bytes() == original
    assert "fixes not applied: a fix changes cells 3 and 5 together" in outcome.message
    assert [(d.code, d.cell) for d in outcome.diagnostics] == [("AMP003", 5)]


def test_split_back_rules():
    notebook = nb.parse_notebook(json.dumps({"nbformat": 4, "cells": [
        code("a = 1\nfor i in x:\n    %time f()\n    g()"), code("b = 2"), code("%%bash\nls")]}))
    assert notebook.text == "a = 1\nfor i in x:\n    pass  # amplint: magic\n    g()\nb = 2\n\n"
    # a dedented block keeps its magic, at the new indentation
    moved = nb.split_fixed_text(notebook, "a = 1\nif True:\n  pass  # amplint: magic\n  g()\nb = 2\n\n")
    assert moved == {0: "a = 1\nif True:\n  %time f()\n  g()"}
    # an insertion between two cells goes to the next cell, or to the previous one when indented
    assert nb.split_fixed_text(notebook, notebook.text.replace("\nb = 2", "\nc = 3\nb = 2")) == {1: "c = 3\nb = 2"}
    assert nb.split_fixed_text(notebook, notebook.text.replace("\nb = 2", "\n    h()\nb = 2")) == {
        0: "a = 1\nfor i in x:\n    %time f()\n    g()\n    h()"}
    with pytest.raises(nb.CrossCellEdit, match="cells 1 and 2"):
        nb.split_fixed_text(notebook, notebook.text.replace("    g()\nb = 2", "    g(b=2)"))
    with pytest.raises(nb.CrossCellEdit, match="not Python"):
        nb.split_fixed_text(notebook, notebook.text + "x = 1")
    with pytest.raises(nb.CrossCellEdit, match="IPython lines"):
        nb.split_fixed_text(notebook, notebook.text.replace("    pass  # amplint: magic\n", ""))
    timed = nb.parse_notebook(json.dumps({"nbformat": 4, "cells": [code("%%time\nx = 1")]}))
    assert nb.split_fixed_text(timed, timed.text + "\ny = 2") == {0: "%%time\nx = 1\ny = 2"}
    with pytest.raises(nb.CrossCellEdit, match="cell magic"):
        nb.split_fixed_text(timed, "y = 2\n" + timed.text)


def test_diff_and_stdin(tmp_path):
    path = str(FIXTURES / "flagged" / "scaler_across_cells.ipynb")
    result = CliRunner().invoke(main, ["check", path, "--diff"])
    assert result.exit_code == 1
    assert f"--- a/{path.lstrip('/')}:cell 5" in result.output and "+    scaler.unscale_(optimizer)" in result.output
    raw = Path(path).read_bytes()
    result = CliRunner().invoke(main, ["check", "-", "--stdin-filename", "nb.ipynb", "--fix"], input=raw)
    assert result.exit_code == 0
    assert result.output.encode() == (FIXTURES / "fixed" / "scaler_across_cells.ipynb").read_bytes()


def test_a_fix_that_edits_other_cells_is_reported_without_misplaced_edits(tmp_path):
    """A module-wide migration edits the import's cell and the call's: in the report of the call's cell its
    edits would have rows of other cells (negative ones), so it shows only what it does; `--fix` applies it."""
    from samples import notebook_json

    path = tmp_path / "train.ipynb"
    path.write_text(notebook_json(["import torch\nfrom torch.cuda.amp import autocast\n", "x = 1\n",
                                   "with autocast():\n    y = torch.ones(2)\n"]))
    result = CliRunner().invoke(main, ["check", "--no-cache", "--output-format", "json", str(path)])
    found = [d for d in json.loads(result.output) if d["code"] == "AMP007" and d["cell"] == 3]
    assert found
    for diagnostic in found:
        fix = diagnostic["fix"]
        assert fix is None or all(edit["location"]["row"] >= 1 for edit in fix["edits"])
    CliRunner().invoke(main, ["check", "--no-cache", "--fix", str(path)])
    fixed = "".join("".join(cell["source"]) for cell in json.loads(path.read_text())["cells"])
    assert "torch.cuda.amp" not in fixed and "torch.amp" in fixed


# --- the screen ------------------------------------------------------------------------------------------------
ALL_NOTEBOOKS = sorted(FIXTURES.rglob("*.ipynb"))


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_screening_a_notebook_drops_no_finding(path, monkeypatch):
    screened = lint(path)
    monkeypatch.setattr(nb.NotebookSource, "screens", lambda self, program: False)
    assert screened == lint(path)


def test_a_notebook_that_compiles_and_no_rule_can_fire_on_is_not_analysed(tmp_path, monkeypatch):
    analysed = []
    real = pipeline.lint_program
    monkeypatch.setattr(pipeline, "lint_program", lambda *args, **kw: analysed.append(1) or real(*args, **kw))
    quiet = write_notebook(tmp_path / "q.ipynb", [code("%matplotlib inline\nimport numpy as np"), code("np.ones(3)")])
    assert lint(quiet) == [] and analysed == []
    amp = write_notebook(tmp_path / "a.ipynb", [code("import torch"), code(
        "def step(model, x):\n    with torch.autocast('cpu'):\n        model(x).sum().backward()\n")])
    assert [d.code for d in lint(amp)] == ["AMP001"] and analysed == [1]


def test_a_cell_that_does_not_parse_is_reported_whatever_the_words(tmp_path):
    path = write_notebook(tmp_path / "b.ipynb", [code("x = 1"), code("def f(:\n    pass\n")])
    assert [(d.code, d.cell) for d in lint(path)] == [("AMP900", 2)]
