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
