"""Linting costs work in proportion to the input: N findings cost N times the work of one, never N x N.

Measured by counting work, not by timing: the Python function calls a lint makes and the lines amplint runs (a
trace hook), and the whole-module code generation passes (`cst.Module._codegen`). Each case lints a file with N and with 4N repetitions of a
pattern; the work must grow about 4 times (a quadratic cost grows 16 times), and the whole-module passes must not
grow at all. N is small: the quadratic costs these tests guard against showed at N = 20 already.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

import libcst as cst

import amplint

from amplint.engine import lint_text
from amplint.facts import ModuleFacts
from amplint.pipeline import lint_program as lint_notebook
from amplint.sources.notebook import parse_notebook
from amplint.rules import ALL_RULES
from amplint.rules.amp001_backward_in_autocast import BackwardInAutocast
from amplint.rules.amp003_clip_without_unscale import ClipWithoutUnscale
from amplint.rules.amp005_scaler_in_inference import ScalerInInference
from amplint.rules.amp013_scaler_with_bfloat16 import ScalerWithBfloat16
from amplint.rules.amp011_unscale_twice import UnscaleTwice
from samples import notebook_json

RULES = [rule() for rule in ALL_RULES]
AMPLINT = str(Path(amplint.__file__).parent)
LINEAR = 5.0  # the largest growth accepted for 4x the input (constant costs make it a little under 4 when linear)


@contextmanager
def counting(lines_in: str = AMPLINT):
    """Counts work (Python function calls, and the lines amplint's own code runs: a loop over every call of the
    module makes no call per item; `lines_in`: the folder whose lines count) and whole-module code generation
    passes while active."""
    counts = {"calls": 0, "lines": 0, "module passes": 0}
    original = cst.Module._codegen

    def module_pass(self, state, *args, **kwargs):
        counts["module passes"] += 1
        return original(self, state, *args, **kwargs)

    def line(frame, event, arg):
        if event == "line":
            counts["lines"] += 1
        return line

    def call(frame, event, arg):
        counts["calls"] += 1
        return line if frame.f_code.co_filename.startswith(lines_in) else None  # loops count line by line

    cst.Module._codegen = module_pass
    sys.settrace(call)
    try:
        yield counts
    finally:
        sys.settrace(None)
        cst.Module._codegen = original


def work(text: str, codes: set[str], findings: int, rules=RULES) -> dict[str, int]:
    with counting() as counts:
        diagnostics = lint_text(text, "many.py", rules).diagnostics
    assert sorted(d.code for d in diagnostics if d.code in codes) == sorted(codes) * findings  # found every one
    return counts


def assert_linear(make, codes: set[str], n: int = 20, rules=RULES) -> None:
    """`make(k)`: a source with k findings of each code in `codes`."""
    small, large = work(make(n), codes, n, rules), work(make(4 * n), codes, 4 * n, rules)
    assert_grows_linearly(small, large)
    assert large["module passes"] <= max(small["module passes"], 3), (small, large)


def assert_grows_linearly(small: dict[str, int], large: dict[str, int]) -> None:
    """The counts for 4x the input against those for 1x."""
    assert large["calls"] <= LINEAR * small["calls"], (small, large)
    assert large["lines"] <= LINEAR * small["lines"], (small, large)


def backwards_in_one_function(k: int) -> str:
    """k autocast regions in one function, each with a backward inside: k AMP001 findings, k fixes that each move
    one statement out of its region (a fix once regenerated the whole function around it)."""
    blocks = "".join(f"    with torch.autocast('cuda'):\n        loss{i} = model(data).sum()\n        loss{i}.backward()\n"
                     for i in range(k))
    return f"import torch\ndef train(model, data):\n{blocks}"


def test_fixes_in_one_function_cost_linear_work():
    assert_linear(backwards_in_one_function, {"AMP001"})


def test_each_fix_regenerates_its_own_statements_only():
    """The fix for one region regenerates that region (the statement it replaces), not the function around it."""
    facts = ModuleFacts(cst.parse_module(backwards_in_one_function(3)))
    findings = list(BackwardInAutocast().check(facts))
    assert len(findings) == 3
    for finding in findings:
        text, spans = finding.fix.rewrite().changes
        (start, end, new), = spans
        assert text[start:end].count("torch.autocast") == new.count("torch.autocast") == 1, text[start:end]


def unscaled_backwards_in_one_loop(k: int) -> str:
    """k unscaled backwards of one name in one loop before a scaler.step: k AMP009 findings (each once looked at
    every event and every binding of `loss` after it)."""
    body = "".join("        loss = model(x).sum()\n        loss.backward()\n" for _ in range(k))
    return ("import torch\ndef train(model, opt, data):\n    scaler = torch.amp.GradScaler('cuda')\n"
            f"    for x in data:\n{body}        scaler.step(opt)\n        scaler.update()\n")


def test_unscaled_backwards_cost_linear_work():
    assert_linear(unscaled_backwards_in_one_loop, {"AMP009"})


def steps_without_update_in_many_functions(k: int) -> str:
    """k functions that step a scaler in a loop and never update it, and k that do it right: k AMP010 findings
    (each once scanned every call of the module)."""
    functions = "".join(
        f"def bad{i}(model, opt, data):\n    for x in data:\n        scaler.scale(model(x)).backward()\n"
        f"        scaler.step(opt)\n"
        f"def good{i}(model, opt, data):\n    for x in data:\n        s{i}.scale(model(x)).backward()\n"
        f"        s{i}.step(opt)\n        s{i}.update()\n" for i in range(k))
    return f"import torch\nscaler = torch.amp.GradScaler('cuda')\n{functions}"


def test_steps_in_many_functions_cost_linear_work():
    assert_linear(steps_without_update_in_many_functions, {"AMP010"})


def test_a_clean_notebook_of_many_cells_costs_linear_work():
    """Notebooks skip the screen: every rule runs on every cell. Half the cells are training steps done right."""
    def notebook(k: int) -> str:
        cells = [["import torch\n", "scaler = torch.amp.GradScaler('cuda')\n"]]
        for i in range(k):
            cells.append([f"def step{i}(model, opt, x):\n", "    with torch.autocast('cuda'):\n",
                          "        loss = model(x).sum()\n", "    scaler.scale(loss).backward()\n",
                          "    scaler.step(opt)\n", "    scaler.update()\n"])
            cells.append([f"x{i} = {i}\n", f"print(x{i})"])
        return notebook_json(cells)

    def cost(k: int) -> dict[str, int]:
        parsed = parse_notebook(notebook(k))
        with counting(lines_in=str(Path(AMPLINT) / "rules")) as counts:  # the rules' questions: walks would hide them
            assert lint_notebook(parsed, "many.ipynb", RULES) == []
        return counts

    assert_grows_linearly(cost(30), cost(120))


def test_a_long_line_costs_a_fixed_number_of_whole_module_passes():
    """A 4x longer statement before a finding: the same number of whole-module code generation passes (positions
    of every finding and fix from those), and linear work."""
    def source(k: int) -> str:
        return (f"import torch\nx = [{', '.join(['1'] * (250 * k))}]\n"
                "with torch.autocast('cuda'):\n    loss = model(x).sum()\n    loss.backward()\n")

    small, large = work(source(1), {"AMP001"}, 1), work(source(4), {"AMP001"}, 1)
    assert small["module passes"] == large["module passes"] <= 2, (small, large)
    assert_grows_linearly(small, large)


def device_regions_in_one_function(k: int) -> str:
    """k autocast regions given a `torch.device` in one function: k AMP014 findings (each once read the whole
    function for the names it binds)."""
    regions = "".join(f"    with torch.autocast(device, dtype=torch.bfloat16):\n        y{i} = model(x)\n" for i in range(k))
    return f"import torch\ndef evaluate(model, x):\n    device = torch.device('cuda')\n{regions}"


def test_device_regions_in_one_function_cost_linear_work():
    assert_linear(device_regions_in_one_function, {"AMP014"})


def unscales_twice_in_one_function(k: int) -> str:
    """k steps in one function, each unscaling twice: k AMP011 findings whose fixes delete a statement (each fix
    once regenerated the whole function around it)."""
    steps = "".join("    scaler.scale(loss).backward()\n    scaler.unscale_(optimizer)\n"
                    "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n    scaler.unscale_(optimizer)\n"
                    "    scaler.step(optimizer)\n    scaler.update()\n" for _ in range(k))
    return f"import torch\ndef train_step(model, loss, optimizer, scaler):\n{steps}"



def test_a_fix_deleting_a_statement_deletes_its_text_only():
    """AMP011's fix deletes the second `unscale_`: the change is that line, not the function around it."""
    facts = ModuleFacts(cst.parse_module(unscales_twice_in_one_function(3)))
    findings = list(UnscaleTwice().check(facts))
    assert len(findings) == 3
    for finding in findings:
        text, spans = finding.fix.rewrite().changes
        (start, end, new), = spans
        assert (text[start:end], new) == ("    scaler.unscale_(optimizer)\n", "")


def test_fixes_that_do_not_overlap_take_the_same_rounds_for_4x_the_findings(monkeypatch):
    """The fixer applies every fix that does not touch another in one round: two lints (before and after) for N and
    for 4N findings, and linear work."""
    import amplint.fixer as fixer

    lints = []
    original = fixer.lint_text

    def counted(*args, **kwargs):
        lints.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(fixer, "lint_text", counted)
    costs = []
    for k in (20, 80):
        lints.clear()
        with counting() as counts:
            outcome = fixer.fix_text(backwards_in_one_function(k), "many.py", RULES)
        assert len(outcome.applied) == k and not outcome.remaining and outcome.error is None
        assert len(lints) == 2
        costs.append(counts)
    assert_grows_linearly(*costs)


def test_a_notebook_with_a_finding_in_every_cell_costs_linear_work():
    """Each finding is placed in its cell (and each line its message names): by bisection, not a scan of the cells
    (counted in the notebook module's own lines)."""
    def notebook(k: int) -> str:
        cells = [["import torch\n"]] + [["with torch.autocast('cuda'):\n", f"    loss{i} = model(x).sum()\n",
                                         f"    loss{i}.backward()"] for i in range(k)]
        return notebook_json(cells)

    def cost(k: int) -> dict[str, int]:
        parsed = parse_notebook(notebook(k))
        with counting(lines_in=str(Path(AMPLINT) / "notebook.py")) as counts:
            diagnostics = lint_notebook(parsed, "many.ipynb", RULES)
        assert [(d.code, d.cell) for d in diagnostics] == [("AMP001", i + 2) for i in range(k)]
        return counts

    small, large = cost(20), cost(80)
    assert large["lines"] <= LINEAR * small["lines"], (small, large)


def half_models_in_many_functions(k: int) -> str:
    """k functions that make their model float16 and step its optimizer through a scaler: k AMP012 findings (each
    once scanned every assignment and every call of the module)."""
    functions = "".join(
        f"def train{i}(model, loader):\n    model.half()\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)\n    scaler = torch.amp.GradScaler('cuda')\n"
        "    for x in loader:\n        with torch.autocast('cuda'):\n            loss = model(x).sum()\n"
        "        scaler.scale(loss).backward()\n        scaler.step(optimizer)\n        scaler.update()\n"
        for i in range(k))
    return f"import torch\n{functions}"


def test_half_models_in_many_functions_cost_linear_work():
    assert_linear(half_models_in_many_functions, {"AMP012"})


def test_unscales_twice_in_one_function_cost_linear_work():
    """AMP011 alone (each unscale_ once copied and filtered every event of its function)."""
    assert_linear(unscales_twice_in_one_function, {"AMP011"}, n=40, rules=[UnscaleTwice()])


def clips_in_one_function(k: int) -> str:
    """k steps in one function, each clipping before its unscale_ and k each with no unscale_ at all: 2k AMP003
    findings, k fixes that move an unscale_ and k that insert one (each clip once copied and filtered every event
    of its function, and each move looked at every event of the module)."""
    steps = "".join("    scaler.scale(loss).backward()\n    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
                    "    print(loss)\n    scaler.unscale_(optimizer)\n    scaler.step(optimizer)\n    scaler.update()\n"
                    "    scaler.scale(loss).backward()\n    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
                    "    scaler.step(optimizer)\n    scaler.update()\n" for _ in range(k))
    return ("import torch\ndef train_step(model, loss):\n    optimizer = torch.optim.SGD(model.parameters())\n"
            f"    scaler = torch.amp.GradScaler('cuda')\n{steps}")


def test_clips_in_one_function_cost_linear_work():
    assert_linear(lambda k: clips_in_one_function(k // 2), {"AMP003"}, n=40, rules=[ClipWithoutUnscale()])


def scales_in_evaluation_code(k: int) -> str:
    """k evaluation functions that each build a scaler and scale with it (the construction and the scale are
    reported), and one that scales 2k times with a scaler it hands back: 4k AMP005 findings with fixes (each once
    scanned every call of the module, and each fix read its whole function)."""
    functions = "".join(f"def evaluate{i}(model, x):\n    model.eval()\n    s = torch.amp.GradScaler('cuda')\n"
                        f"    return s.scale(model(x))\n" for i in range(k))
    scales = "".join(f"    y{i} = scaler.scale(model(x))\n" for i in range(2 * k))
    return (f"import torch\n{functions}def predict(model, x):\n    scaler = torch.amp.GradScaler('cuda')\n{scales}"
            "    return scaler\n")


def test_scales_in_evaluation_code_cost_linear_work():
    assert_linear(lambda k: scales_in_evaluation_code(k // 4), {"AMP005"}, n=40, rules=[ScalerInInference()])


def scalers_with_bfloat16(k: int) -> str:
    """k functions that each build a scaler of their own for bfloat16 autocast: k AMP013 findings whose fixes
    remove a scaler (each once walked the whole module, twice, and scanned every event and call of it)."""
    functions = "".join(
        f"def train{i}(model, opt, x):\n    s{i} = torch.amp.GradScaler('cuda')\n"
        "    with torch.autocast('cuda', dtype=torch.bfloat16):\n        loss = model(x).sum()\n"
        f"    s{i}.scale(loss).backward()\n    s{i}.step(opt)\n    s{i}.update()\n" for i in range(k))
    return f"import torch\n{functions}"


def test_scalers_with_bfloat16_cost_linear_work():
    assert_linear(scalers_with_bfloat16, {"AMP013"}, rules=[ScalerWithBfloat16()])


def scalers_of_one_name_with_bfloat16(k: int) -> str:
    """k functions that each build a local `scaler` for bfloat16 autocast: k AMP013 findings (each once read every
    construction of the name, and every call of it)."""
    functions = "".join(
        f"def train{i}(model, opt, x):\n    scaler = torch.amp.GradScaler('cuda')\n"
        "    with torch.autocast('cuda', dtype=torch.bfloat16):\n        loss = model(x).sum()\n"
        "    scaler.scale(loss).backward()\n    scaler.step(opt)\n    scaler.update()\n" for i in range(k))
    return f"import torch\n{functions}"


def test_scalers_of_one_name_with_bfloat16_cost_linear_work():
    assert_linear(scalers_of_one_name_with_bfloat16, {"AMP013"}, n=40, rules=[ScalerWithBfloat16()])
