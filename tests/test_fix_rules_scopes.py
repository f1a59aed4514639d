"""Fixes that move or delete statements (AMP001, AMP002, AMP004, AMP005, AMP013) against the definition of safe:
a safe fix cannot change what a correct program computes and cannot make a running program raise; a fix that
would rest on a guess is unsafe or not offered. Where that is a runtime matter, the fixture's functions and
their fixed twins are run on CPU torch and must give the same results and raise nothing new. Comments survive
every fix except those on the deleted code lines."""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

import pytest

from amplint.fixer import fix_text
from amplint.rules import RULES_BY_CODE
from samples import notebook_json

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def fixture(code: str, name: str) -> Path:
    return next(FIXTURES.glob(f"{code}-*")) / "flagged" / name


def fixed(text: str, code: str, unsafe: bool = True) -> str:
    result = fix_text(text, "fixture.py", rules=[RULES_BY_CODE[code]()], unsafe=unsafe).text
    compile(result, "fixture.py", "exec")  # CPython accepts it, not only libcst
    return result


def run_functions(text: str, names: list[str]) -> dict[str, object]:
    """Each function called with a fresh seeded model, optimizer and loader: its result, or its exception."""
    torch = pytest.importorskip("torch")
    namespace: dict = {"__name__": "fixture"}
    exec(compile(text, "fixture.py", "exec"), namespace)  # noqa: S102 - the fixture programs are ours
    results: dict[str, object] = {}
    for name in names:
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 4)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = [torch.randn(2, 4) for _ in range(3)]
        try:
            value = namespace[name](model, loader, optimizer)
            results[name] = (repr(value), [p.detach().clone().tolist() for p in model.parameters()])
        except Exception as error:  # the comparison shows which function raised what
            results[name] = f"{type(error).__name__}: {error}"
    return results


def comments(text: str) -> list[str]:
    return [t.string for t in tokenize.generate_tokens(io.StringIO(text).readline) if t.type == tokenize.COMMENT]


# --- AMP004: hoisting the construction ----------------------------------------------------------------------

BINDING_FORMS = ["walrus", "import_in_loop", "with_target", "inner_for_target", "augmented",
                 "method_changes_argument", "global_scaler"]


def test_amp004_no_hoist_when_the_loop_binds_what_the_construction_reads() -> None:
    text = fixture("AMP004", "loop_binds_arguments.py").read_text(encoding="utf-8")
    assert fixed(text, "AMP004") == text


def test_amp004_fixed_functions_compute_the_same() -> None:
    text = fixture("AMP004", "loop_binds_arguments.py").read_text(encoding="utf-8")
    original = run_functions(text, BINDING_FORMS)
    assert not any(isinstance(result, str) for result in original.values()), original
    assert run_functions(fixed(text, "AMP004"), BINDING_FORMS) == original



def test_amp004_hoist_is_unsafe_under_an_if_or_with_calls_in_the_arguments() -> None:
    text = fixture("AMP004", "hoist_unsafe_cases.py").read_text(encoding="utf-8")
    assert fixed(text, "AMP004", unsafe=False) == text
    assert fixed(text, "AMP004", unsafe=True) != text
    # A flag read by the loop's autocast too (torch's functions do not change their arguments): safe.
    flag = fixture("AMP004", "module_alias_enabled_flag.py").read_text(encoding="utf-8")
    assert fixed(flag, "AMP004", unsafe=False) != flag

# --- AMP001/AMP002: moving the update phase out of the region -----------------------------------------------

RUNTIME_CASES = [
    ("AMP001", "forward_without_calls_after.py", ["train"]),
    ("AMP001", "contextmanager_yield_step.py", ["train"]),
    ("AMP001", "with_items_around_autocast.py", ["items_after_autocast", "later_item_uses_the_region"]),
    ("AMP002", "closure_step.py", ["train"]),
]


@pytest.mark.parametrize(("code", "name", "functions"), RUNTIME_CASES, ids=[c[1] for c in RUNTIME_CASES])
def test_moved_update_phase_computes_the_same(code: str, name: str, functions: list[str]) -> None:
    text = fixture(code, name).read_text(encoding="utf-8")
    original = run_functions(text, functions)
    assert not any(isinstance(result, str) for result in original.values()), original
    for unsafe in (False, True):
        assert run_functions(fixed(text, code, unsafe), functions) == original


def test_with_items_are_never_reordered_and_closure_steps_never_move() -> None:
    for code, name in (("AMP001", "with_items_around_autocast.py"), ("AMP002", "closure_step.py")):
        text = fixture(code, name).read_text(encoding="utf-8")
        assert fixed(text, "AMP001") == fixed(text, "AMP002") == text


MOVES = """import torch

scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
with torch.autocast("cuda"):
    loss = model(x)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    if step % 10 == 0:
        print(f"{loss.item():.3f}", scaler.get_scale())
    total += loss.item()
    {after}
"""


@pytest.mark.parametrize(("after", "stays"), [
    ("y = x @ w", True),              # matmul: an autocast op, no call
    ("y = 1 / x", True),              # __rtruediv__: an fp32 autocast op on CUDA
    ("y = x ** 2", True),             # pow
    ("probe = model(x)", True),       # a call into a model
    ("lr_scheduler.step()", True),    # `step()` on an object of unknown kind
    ("pass", True),                   # a notebook magic's placeholder, or nothing
    ("ema_steps = total * 2 + 1", False),
])
def test_only_the_update_phase_leaves_the_region(after: str, stays: bool) -> None:
    text = MOVES.replace("{after}", after)
    result = fix_text(text, "m.py", rules=[RULES_BY_CODE["AMP001"](), RULES_BY_CODE["AMP002"]()])
    assert result.text != text and "AMP001" in {d.code for d in result.applied}
    compile(result.text, "m.py", "exec")
    tail = result.text.split("total += loss.item()\n", 1)[1]
    assert tail.startswith('with torch.autocast("cuda"):\n    ' + after) if stays else tail == after + "\n"
    assert result.text.count("with torch.autocast") == 1 + stays


def test_notebook_magic_after_backward_stays_in_the_region(tmp_path: Path) -> None:
    import json

    from amplint.rules import ALL_RULES
    from amplint.outcome import Mode
    from amplint.pipeline import process_file

    source = ('with torch.autocast("cuda", dtype=torch.bfloat16):\n    loss = model(x).sum()\n'
              '    loss.backward()\n    %time val = model(x)\n')
    path = tmp_path / "n.ipynb"
    path.write_text(notebook_json(["import torch\n", source]))
    process_file(str(path), [rule() for rule in ALL_RULES], Mode(fix=True))
    written = "".join(json.loads(path.read_text())["cells"][1]["source"])
    split = ('with torch.autocast("cuda", dtype=torch.bfloat16):\n    loss = model(x).sum()\nloss.backward()\n'
             'with torch.autocast("cuda", dtype=torch.bfloat16):\n    %time val = model(x)\n')
    assert written == split, written


# --- comments survive ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("code", "name", "deleted"), [
    ("AMP013", "commented_alternatives.py", ["# expect: AMP013:14", "# called once per step"]),
    ("AMP005", "commented_scale.py", ["# expect: AMP005:14", "# expect: AMP005:22"]),
])
def test_fix_keeps_every_comment_not_on_a_deleted_line(code: str, name: str, deleted: list[str]) -> None:
    text = fixture(code, name).read_text(encoding="utf-8")
    result = fixed(text, code)
    assert result != text
    assert comments(result) == [c for c in comments(text) if c not in deleted]


REMOVALS = '''def f():
    a = 1

    # alternative one
    # alternative two
    scaler = GradScaler()  # on the deleted line
    b = 2
    if a:
        c = 3
        # inside, above the last statement
        scaler.update()
    # footer
'''


def test_removed_statements_leave_their_own_line_comments_and_moved_ones_take_them() -> None:
    import libcst as cst

    from amplint.rules.rewrite import MOVED, Rewritten

    module = cst.parse_module(REMOVALS)
    body = module.body[0].body.body
    build, update = body[1], body[3].body.body[1]
    removed = Rewritten(module, {build: cst.RemoveFromParent(), update: cst.RemoveFromParent()})
    assert removed.code == removed.full_code() == REMOVALS.replace(
        "    scaler = GradScaler()  # on the deleted line\n", "").replace("        scaler.update()\n", "")
    moved = Rewritten(module, {build: MOVED})
    assert moved.code == moved.full_code() == REMOVALS.replace(
        "\n    # alternative one\n    # alternative two\n    scaler = GradScaler()  # on the deleted line\n", "")


def test_amp004_hoisted_statement_takes_its_comments_once() -> None:
    text = ("import torch\n\n\ndef train(model, loader, optimizer):\n    for x in loader:\n"
            "        # one scaler per run\n        scaler = torch.amp.GradScaler('cuda')\n"
            "        scaler.scale(model(x)).backward()\n        scaler.step(optimizer)\n        scaler.update()\n")
    result = fixed(text, "AMP004", unsafe=False)
    assert result.count("# one scaler per run") == 1
    assert "    # one scaler per run\n    scaler = torch.amp.GradScaler('cuda')\n    for x in loader:\n" in result


def test_changes_sees_every_binding_form_and_what_calls_are_handed() -> None:
    import libcst as cst

    from amplint.facts.changes import Changes

    loop = cst.parse_module(
        "for x in loader:\n    import math\n    from os import path as p\n    with ctx() as (a, b):\n        pass\n"
        "    try:\n        pass\n    except E as err:\n        pass\n    match v:\n        case [m, *rest]:\n"
        "            pass\n    if (w := 1): pass\n    global g\n    del d\n    n *= 2\n    cfg.bump()\n"
        "    f(h.sub, [k], *s)\n    skipped = all(torch.equal(q, r) for q, r in zip(model.parameters(), q0))\n"
        "    torch.autocast('cuda', enabled=flag)\n    torch.nn.init.zeros_(weight)\n    print(shown)\n"
    ).body[0]
    changes = Changes.of(loop, {"torch": "torch"})
    assert changes.bound >= {"x", "math", "p", "a", "b", "err", "m", "rest", "w", "g", "d", "n", "q", "r",
                             "skipped"}
    assert changes.mutated >= {"n", "cfg", "h", "k", "s", "weight", "model", "q0"}  # zip may advance an iterator
    assert not changes.mutated & {"torch", "flag", "shown", "zip", "q", "r"}
