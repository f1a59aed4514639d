"""A notebook cell's lines are its source split on `\\n`, for findings, refusals and patches alike: a lone `\\r`
inside a line (Python's tokenizer ends a row there) does not move a finding to a later row or another cell."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amplint.outcome import Mode
from amplint.pipeline import process_file
from amplint.rules import ALL_RULES
from amplint.sources import notebook as nb

FLAG = "scaler = torch.cuda.amp.GradScaler()"


def _write(path: Path, sources: list[str]) -> Path:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "# notes"}]
    cells += [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
              for source in sources]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1))
    return path


def _found(path: Path) -> list[tuple[str, int | None, int, int]]:
    diagnostics = process_file(str(path), [rule() for rule in ALL_RULES], Mode()).diagnostics
    return [(d.code, d.cell, d.location.row, d.location.column) for d in diagnostics]


@pytest.mark.parametrize("first", ["import torch\ra = 1\n", "import torch\ra = 1\rb = 2\n", "import torch\r\n\r",
                                   "import torch\n"])
def test_a_lone_cr_in_an_earlier_cell_moves_no_finding(tmp_path, first):
    path = _write(tmp_path / "n.ipynb", [first, "x = 2\n", "y = 3\n" + FLAG + "\n"])
    assert _found(path) == [("AMP007", 4, 2, 10)]


def test_a_lone_cr_before_the_finding_in_its_own_line(tmp_path):
    path = _write(tmp_path / "n.ipynb", ["import torch\n", "y = 3\r" + FLAG + "\n"])
    assert _found(path) == [("AMP007", 3, 1, 16)]  # the cell's first line, after `y = 3\r`


def test_a_broken_cell_after_a_lone_cr_is_reported_at_its_line(tmp_path):
    path = _write(tmp_path / "n.ipynb", ["import torch\ra = 1\n", "x = (\n", FLAG + "\n"])
    found = _found(path)
    assert ("AMP007", 4, 1, 10) in found
    assert [(code, cell) for code, cell, _, _ in found if code == "AMP900"] == [("AMP900", 3)]


def test_the_refusal_of_a_cross_cell_change_names_the_cells_findings_name(tmp_path):
    """Findings and the refusal count cells alike: 1-based among all cells (the markdown cell included)."""
    notebook = nb.parse_notebook(_write(tmp_path / "n.ipynb", ["import torch\ra = 1\n", "b = 2", "c = 3"])
                                 .read_text())
    assert [cell.number for cell in notebook.cells] == [2, 3, 4]
    merged = notebook.text.replace("b = 2\nc = 3", "b = 2; c = 3")
    with pytest.raises(nb.CrossCellEdit, match="cells 3 and 4 together"):
        nb.split_fixed_text(notebook, merged)
