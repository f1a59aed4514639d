"""What a call site hands over (amplint/index/flows.py): scaled, unscaled, a parameter's, or not known."""

from __future__ import annotations

import ast

from amplint.index.flows import Located, Scope, argument_flows
from amplint.index.functions import index_text


def flows_of(source: str, function: str = "f") -> dict[str, tuple[str, ...]]:
    """The `argument_flows` of each call of the function `function`, by its callee's text."""
    tree = ast.parse(source)
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    scope = Scope(node)
    return {ast.unparse(call.func): argument_flows(scope, call) for call in ast.walk(node)
            if isinstance(call, ast.Call) and call.args}


def test_a_loss_scaled_on_one_path_is_scaled():
    source = """
def f(self, x, y):
    loss = self.criterion(self.model(x), y)
    loss = self.scaler.scale(loss) if self.scaler else loss
    self._backward(loss)
"""
    assert flows_of(source)["self._backward"] == ("0=s",)


def test_a_computed_loss_is_unscaled_a_parameter_is_the_callers():
    source = """
def f(model, x, y, loss_in, n):
    loss = torch.nn.functional.mse_loss(model(x), y) / n
    step(loss, loss_in, loss_in / n, sum([loss_in, loss]))
"""
    assert flows_of(source)["step"] == ("0=u", "1=p:loss_in", "2=p:loss_in", "3=p:loss_in")


def test_unknown_values_and_starred_calls_say_nothing():
    source = """
def f(self, losses, extra):
    for loss in losses:
        step(loss, self.loss, GLOBAL)
    step(*extra)
"""
    found = flows_of(source)
    assert found["step"] in ((), ("*",))
    tree = ast.parse(source)
    calls = [c for c in ast.walk(tree) if isinstance(c, ast.Call) and ast.unparse(c.func) == "step"]
    scope = Scope(tree.body[0])
    assert sorted(argument_flows(scope, c) for c in calls) == [(), ("*",)]


def test_the_index_records_what_each_call_hands_over():
    record = index_text("def g(model, x, y):\n    loss = model(x)\n    helper(loss, y)\n")
    assert [call.args for call in record.functions["g"].calls if call.callee == "helper"] == [("0=u", "1=p:y")]


def test_a_receivers_flow_at_its_place():
    text = "def h(self, loss):\n    loss.backward()\n    out = self.m(1)\n    out.backward()\n"
    located = Located(text)
    assert located.receiver_flow(2, 4) == "p:loss"
    assert located.receiver_flow(4, 4) == "u"


def test_names_bound_many_times_from_one_another_stay_bounded():
    """Every name bound several times from the others branches at each step: the flows are memoised per name and
    bounded in steps (past the bound, unknown), where following them naively took minutes on one real module."""
    names = [f"v{i}" for i in range(12)]
    lines = ["def f(self, x):"]
    for round_ in range(4):
        for i, name in enumerate(names):
            lines.append(f"    {name} = {names[i - 1]} + {names[i - 2]} * {round_}")
    lines.append(f"    self.step({names[-1]}, x)")
    tree = ast.parse("\n".join(lines) + "\n")
    scope = Scope(tree.body[0])
    call = tree.body[0].body[-1].value
    flows = argument_flows(scope, call)
    assert scope.steps <= 2000
    assert flows == ("1=p:x",)  # the first argument: unknown (no value of it is shown), the second the caller's
