"""Suppression comments are found by the tokenizer: a `noqa` in a string, a docstring or an f-string is text,
not a comment. File-level `# amplint: noqa: CODES` suppresses only those codes, bare `# amplint: noqa` the file."""

from __future__ import annotations

import json
import textwrap

from amplint.engine import lint_text
from amplint.outcome import Mode
from amplint.pipeline import process_file, process_text
from amplint.rules import ALL_RULES
from amplint.suppression import comments, file_suppression

TWO = textwrap.dedent("""\
    import torch


    def train(model, optimizer, loader, scaler):
        for inputs, targets in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(inputs).sum()
                scaler.scale(loss).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
""")


def codes(text: str, prefilter: bool = True) -> list[str]:
    return [d.code for d in process_text(text, "t.py", [rule() for rule in ALL_RULES], Mode(),
                                         prefilter=prefilter).diagnostics]


def test_the_example_has_two_findings():
    assert codes(TWO) == ["AMP001", "AMP003"]


def test_file_level_codes_suppress_only_those_codes():
    for prefilter in (True, False):
        assert codes("# amplint: noqa: AMP003\n" + TWO, prefilter) == ["AMP001"]
        assert codes("# amplint: noqa: AMP001, AMP003\n" + TWO, prefilter) == []
        assert codes("# amplint: noqa:AMP001 AMP003\n" + TWO, prefilter) == []
        assert codes("# amplint: noqa\n" + TWO, prefilter) == []
        assert codes(TWO + "# Amplint: NOQA\n", prefilter) == []


def test_rule_names_are_accepted_and_unknown_codes_warned(capsys):
    assert codes("# amplint: noqa: clip-without-unscale\n" + TWO) == ["AMP001"]
    assert codes("# amplint: noqa: AMP099\n" + TWO) == ["AMP001", "AMP003"]
    assert "unknown code 'AMP099'" in capsys.readouterr().err


def test_file_level_only_on_a_line_of_its_own():
    assert codes(TWO.replace("import torch", "import torch  # amplint: noqa")) == ["AMP001", "AMP003"]


def test_noqa_in_strings_is_not_a_comment():
    for text in ('"# amplint: noqa"\n', 's = """\n# amplint: noqa\n"""\n', 'f"{x}\\n# amplint: noqa"\n',
                 'def f():\n    """\n    # amplint: noqa: AMP001\n    """\n'):
        assert file_suppression(text) is None, text
        assert codes(text + TWO) == ["AMP001", "AMP003"], text
    line = TWO.replace("scaler.scale(loss).backward()", 'scaler.scale(loss).backward(); s = "# noqa"')
    assert codes(line) == ["AMP001", "AMP003"]
    line = TWO.replace("scaler.scale(loss).backward()", 'scaler.scale(loss).backward(); s = f"{loss}  # noqa: AMP001"')
    assert codes(line) == ["AMP001", "AMP003"]
    assert codes(TWO.replace("scaler.scale(loss).backward()", 'scaler.scale(loss).backward()  # noqa: AMP001')) == ["AMP003"]
    assert codes(TWO.replace("scaler.scale(loss).backward()", 'scaler.scale(loss).backward()  # noqa: backward-in-autocast')) == ["AMP003"]
    assert codes(TWO.replace("scaler.scale(loss).backward()", 'scaler.scale(loss).backward()  # noqa: E501')) == ["AMP001", "AMP003"]


def test_comments_keep_python_rows_with_any_line_breaks():
    text = "a = 1\r# one\rb = '# no'\r\n# two\n"
    assert [(row, comment) for row, _, comment in comments(text)] == [(2, "# one"), (4, "# two")]
    assert [(row, comment) for row, _, comment in comments("x = (\n# inside\n")] == [(2, "# inside")]


def test_line_noqa_with_a_lone_cr_line_break():
    text = TWO.replace("\n", "\r").replace("scaler.scale(loss).backward()", "scaler.scale(loss).backward()  # noqa: AMP001")
    assert [d.code for d in lint_text(text, "t.py", [rule() for rule in ALL_RULES]).diagnostics] == ["AMP003"]


def _notebook(path, *sources):
    cells = [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
             for source in sources]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return str(path)


def test_notebooks(tmp_path):
    rules = [rule() for rule in ALL_RULES]
    found = lambda *cells: [d.code for d in process_file(_notebook(tmp_path / "n.ipynb", *cells), rules).diagnostics]
    assert found(TWO) == ["AMP001", "AMP003"]
    assert found("# amplint: noqa: AMP001\n", TWO) == ["AMP003"]
    assert found("x = 1\n", TWO, "# amplint: noqa\n") == []
    assert found('s = """\n# amplint: noqa\n"""\n', TWO) == ["AMP001", "AMP003"]
    assert found(TWO.replace("scaler.scale(loss).backward()", 'scaler.scale(loss).backward(); s = "# noqa"')) == ["AMP001", "AMP003"]
    assert found(TWO.replace("scaler.scale(loss).backward()", "scaler.scale(loss).backward()  # noqa")) == ["AMP003"]
