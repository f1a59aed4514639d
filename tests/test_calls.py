"""The neutral call shape and its classifier (amplint/calls.py): both walkers build the same shape of a call, and
the classifier's answers are the facts of what the call does, the same in a module and across modules."""

from __future__ import annotations

import ast

import libcst as cst
import pytest

from amplint import calls
from amplint.facts.names import ImportMap
from amplint.facts.shapes import call_shape as cst_shape
from amplint.index.shapes import call_shape as ast_shape
from amplint.index.summary import Summary

IMPORTS = "import torch\nimport torch as th\nfrom torch import no_grad as ng, float16\nfrom torch.cuda import amp\n"
CALLS = [
    "x.float()", "x.double()", "x.half()", "x.bfloat16()", "x.to(torch.float32)", "x.to(dtype=torch.float32)",
    "x.type(torch.float64)", "x.to(th.double)", "x.to(float)", "x.to(torch.float16)", "x.to(device, torch.half)",
    "x.to(float16)", "x.to(x)", "x.to(dtype)", "x.to(x.dtype)", "x.to('cuda')", "x.to(f'cuda:{i}')",
    "x.to(device)", "x.to(self.device)", "x.to(*args)", "x.to(**kwargs)", "x.to(device, **kwargs)",
    "x.to(dev, non_blocking=True)", "x.to()", "f().to(torch.float32)", "x.half(y)", "torch.sum(x, dtype=torch.float32)",
    "torch.no_grad()", "ng()", "torch.inference_mode()", "torch.inference_mode(False)",
    "torch.inference_mode(mode=False)", "torch.enable_grad()", "torch.set_grad_enabled(False)",
    "torch.set_grad_enabled(mode=True)", "torch.set_grad_enabled(flag)", "torch.set_grad_enabled(0)",
    "torch.autograd.grad_mode.no_grad()", "amp.autocast(enabled=False)", "x.to(None)", "x.to(3)", "x.to(b'x')",
    "x.to('a' 'b')", "(a + b).to(torch.float32)", "x[0].half()", "model.to(torch.bfloat16)",
]


def cst_call(code: str):
    module = cst.parse_module(IMPORTS + code + "\n")
    imports = ImportMap()
    for statement in module.body[:-1]:
        imports.add(statement.body[0])
    return cst_shape(module.body[-1].body[0].value, imports)


def ast_call(code: str):
    summary = Summary(IMPORTS + code + "\n")
    summary.parse_tree()
    return ast_shape(summary.tree.body[-1].value, summary)


@pytest.mark.parametrize("code", CALLS)
def test_both_walkers_build_the_same_shape(code):
    assert cst_call(code) == ast_call(code)


@pytest.mark.parametrize("code", ["torch.no_grad", "ng", "torch.enable_grad", "torch.set_grad_enabled", "x.y"])
def test_a_callee_named_without_a_call_has_one_shape(code):
    module = cst.parse_module(IMPORTS + code + "\n")
    imports = ImportMap()
    for statement in module.body[:-1]:
        imports.add(statement.body[0])
    summary = Summary(IMPORTS + code + "\n")
    summary.parse_tree()
    assert cst_shape(module.body[-1].body[0].value, imports) == ast_shape(summary.tree.body[-1].value, summary)
    assert not ast_shape(summary.tree.body[-1].value, summary).called


@pytest.mark.parametrize("code, converts", [
    ("x.float()", "float32"), ("x.to(dtype=torch.float32)", "float32"), ("x.to(th.double)", "float32"),
    ("x.to(float)", "float32"), ("x.half()", "low"), ("x.to(device, torch.half)", "low"),
    ("x.to(x)", "unknown"), ("x.to(x.dtype)", "unknown"), ("x.to(*args)", "unknown"), ("x.to(**kwargs)", "unknown"),
    ("x.to(None)", "unknown"),
    ("x.to('cuda')", None), ("x.to(f'cuda:{i}')", None), ("x.to(device)", None), ("x.to(self.device)", None),
    ("x.to()", None), ("torch.sum(x, dtype=torch.float32)", None), ("x.cuda()", None),
])
def test_conversion_knows_only_what_the_code_shows(code, converts):
    assert calls.conversion(ast_call(code)) == converts
    assert calls.is_float32_cast(cst_call(code)) is (converts == "float32")  # `.to(x)` is no float32 cast


@pytest.mark.parametrize("code, half", [
    ("x.half()", True), ("x.to(torch.float16)", True), ("x.to(device, torch.half)", True), ("x.to(float16)", True),
    ("x.half(y)", False), ("x.to(torch.bfloat16)", False), ("model.to(torch.bfloat16)", False), ("x.to(x)", False),
    ("x[0].half()", True),
])
def test_converts_to_half_resolves_the_dtype_through_the_imports(code, half):
    assert calls.converts_to_half(cst_call(code)) is half
    assert calls.converts_to_half(ast_call(code)) is half


@pytest.mark.parametrize("code, mode", [
    ("torch.no_grad()", False), ("ng()", False), ("torch.inference_mode()", False),
    ("torch.autograd.grad_mode.no_grad()", False), ("torch.inference_mode(False)", True),
    ("torch.inference_mode(mode=False)", True), ("torch.enable_grad()", True), ("torch.set_grad_enabled(False)", False),
    ("torch.set_grad_enabled(mode=True)", True), ("torch.set_grad_enabled(flag)", None),
    ("torch.set_grad_enabled(0)", None), ("amp.autocast(enabled=False)", None), ("x.to(x)", None),
])
def test_grad_mode_is_known_from_literals_only(code, mode):
    assert calls.grad_mode(cst_call(code)) is mode
    assert calls.grad_mode(ast_call(code)) is mode


def test_the_innermost_known_grad_mode_decides():
    shapes = [ast_call("torch.set_grad_enabled(flag)"), ast_call("torch.enable_grad()"), ast_call("torch.no_grad()")]
    assert calls.innermost_grad_mode(shapes) == (1, True)
    assert calls.innermost_grad_mode(shapes[:1]) is None


def test_the_index_and_the_facts_name_dotted_expressions_alike():
    for code in ("a", "a.b.c", "self.x", "f().x", "a[0].b", "(a).b", "torch.cuda.amp.autocast"):
        tree = ast.parse(code).body[0].value
        from amplint.facts.names import dotted_name
        from amplint.index.summary import dotted

        assert dotted(tree) == dotted_name(cst.parse_expression(code))


GRAD_MODES = '''import torch
from torch import set_grad_enabled as sge


def off(x):
    with torch.set_grad_enabled(False):
        helper(x)


def back_on(x):
    with torch.no_grad():
        with torch.enable_grad():
            helper(x)


@torch.inference_mode()
def decorated(x):
    helper(x)


@torch.no_grad()
@torch.enable_grad()
def innermost_decorator(x):
    helper(x)


def run_time(x, flag):
    with torch.no_grad(), torch.set_grad_enabled(flag):
        helper(x)


def alias(x):
    with sge(False):
        helper(x)
'''


def test_the_index_and_the_facts_agree_on_the_grad_mode():
    """One definition: a call under no_grad in the facts layer (`no_grad_opener`) is one in the index's record,
    and a context turning gradients off is the index's `no_grad` fact (set_grad_enabled(False) and an alias too)."""
    from amplint.facts.module import ModuleFacts
    from amplint.index.functions import index_text
    from amplint.vocabulary import Effect

    index = index_text(GRAD_MODES)
    facts = ModuleFacts(cst.parse_module(GRAD_MODES))
    expected = {"off": True, "back_on": False, "decorated": True, "innermost_decorator": False, "run_time": True,
                "alias": True}
    for call in facts.calls:
        if call.dotted == "helper":
            function = call.frame.function().name
            record = index.functions[function].calls[0]
            assert (facts.no_grad_opener(call.frame) is not None) is record.no_grad is expected[function], function
    assert Effect.NO_GRAD in index.functions["off"].does and Effect.ENABLE_GRAD not in index.functions["off"].does
    assert Effect.NO_GRAD in index.functions["alias"].does
    assert Effect.ENABLE_GRAD in index.functions["back_on"].does
