"""AMP005 scaler-in-inference."""

from __future__ import annotations

import re

from collections import Counter
from functools import cached_property
from typing import Iterator

from amplint.lazy import libcst as cst

from amplint.diagnostics import Applicability
from amplint.facts import Event, EventKind, Frame, ModuleFacts
from amplint.index.summary import FUNCTIONS
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.scopes import snippet

SCALER_EVENTS = (EventKind.SCALER_BUILD, EventKind.SCALER_SCALE, EventKind.SCALER_STEP, EventKind.SCALER_UPDATE,
                 EventKind.SCALER_UNSCALE)
# Evaluation-like function names: a word of the name (split at `_`) starts like one of these.
EVAL_NAME = re.compile(r"(?:^|_)(?:val(?:_|$)|eval|valid|predict|infer|generat|sampl|test)", re.IGNORECASE)


def eval_like(name: str) -> bool:
    """`evaluate`, `run_validation`, `predict_step`, `test`, `generate`..."""
    return EVAL_NAME.search(name) is not None


# What each scaler call does where no backward runs, in a message's few words (the docstring says more).
CONSEQUENCE = {
    EventKind.SCALER_SCALE: "it multiplies by the loss scale",
    EventKind.SCALER_STEP: "it raises AssertionError",
    EventKind.SCALER_UPDATE: "it raises AssertionError",
    EventKind.SCALER_UNSCALE: "there are no gradients to unscale",
    EventKind.SCALER_BUILD: "nothing here needs a scaler",
}
# What to do when there is no fix.
ADVICE = {
    EventKind.SCALER_BUILD: "Build the scaler in the training code",
    EventKind.SCALER_SCALE: "Use the unscaled value",
}


class ScalerInInference(Rule):
    """## What it does
    Checks for a GradScaler constructed or used (`scale`, `step`, `update`, `unscale_`) where no backward can
    happen: under `torch.no_grad()`, `torch.inference_mode()` or `torch.set_grad_enabled(False)` (a `with` block
    or a decorator), or in evaluation code: a function that runs no backward and either calls `.eval()` or is
    named like evaluation (`evaluate`, `validate`, `predict`, `infer`, `test`...), or module-level code of a
    module that runs no backward. In a module that trains, a name counts only with more evidence (the function
    runs under no_grad/inference_mode, or a scaled value is used where it is computed): there
    `generator_step()` stepping the scaler or a function returning a scaled loss is a training helper.
    Constructions are only reported under no_grad/inference_mode.

    ## Why is this bad?
    A GradScaler exists to scale a loss before backward and unscale gradients before the step. In inference it
    only does harm: `scaler.scale(outputs)` multiplies predictions by the loss scale (65536 by default, measured
    ratio exactly 65536); `step`/`update`/`unscale_` with no backward raise `AssertionError` ("No inf checks were
    recorded for this optimizer.", "No inf checks were recorded prior to update.", "Attempted step but _scale is
    None.", "Attempted unscale_ but _scale is None."); and a scaler whose first `scale()` runs
    under `inference_mode` holds an inference tensor that later breaks training with `RuntimeError: Inference
    tensors cannot be saved for backward`.

    ## Example
    ```python
    scaler = torch.amp.GradScaler("cuda")

    @torch.no_grad()
    def evaluate(model, x):
        with torch.autocast("cuda"):
            return scaler.scale(model(x))
    ```

    ## Use instead
    ```python
    @torch.no_grad()
    def evaluate(model, x):
        with torch.autocast("cuda"):
            return model(x)
    ```

    ## Fix safety
    Unsafe: a safe fix cannot change what a correct program computes, and `scaler.scale(x)` becoming `x` changes
    the values the code produces (that is the point, but code downstream may have compensated). A scaler
    constructed in the same function for that call alone (its name appears nowhere else in the function's code;
    comments do not count) is removed with it. Own-line comments above the removed statements stay; only
    comments on the removed lines go. `step`, `update`, `unscale_` and constructions are reported without a fix:
    removing them may change control flow.

    ## Limits
    Only objects known to be a torch GradScaler are considered (constructed from `GradScaler` in this module or
    used as one with `scale(loss).backward()`/`unscale_`); sklearn's `StandardScaler` and other `scaler` objects
    are not. Harmless calls such as `scaler.get_scale()` or `scaler.state_dict()` are not reported. Under
    `torch.no_grad()` in a module that runs a backward, `step`, `update` and `unscale_` are reported only in
    evaluation code: elsewhere they are the update phase of training (`with torch.no_grad():
    scaler.unscale_(optimizer)`).
    """

    code = "AMP005"
    name = "scaler-in-inference"
    fix = "unsafe"
    # A scaler is known from its construction (`GradScaler`) or from `x.unscale_(...)`/`x.scale(loss).backward()`.
    words = ("GradScaler", "scale")

    @classmethod
    def maybe_applies(cls, summary) -> bool:
        # A scaler event under no_grad/inference_mode, in an eval-like function, or at module level.
        builds, uses = ("GradScaler", "ShardedGradScaler"), ("scale", "step", "update", "unscale_")
        no_grad = ("no_grad", "inference_mode", "set_grad_enabled")
        return summary.scaler_possible() and (
            summary.calls_under(builds, no_grad) or summary.calls_under(("scale",), no_grad, on_scaler=True)
            or (module_without_backward(summary) and (
                summary.calls_under(uses, no_grad, on_scaler=True)
                or summary.calls_outside_functions(*uses, on_scaler=True)))
            or in_function_without_backward(summary, uses, EVAL_NAME, calling=("eval",), on_scaler=True))

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        functions = _Functions(facts)
        for event in facts.events:
            if event.kind not in SCALER_EVENTS:
                continue
            where = self._inference_context(facts, event, functions)
            if where is None:
                continue
            what = snippet(facts, event.node)
            message = f"`{snippet(facts, event.node, 32)}` {where}: {CONSEQUENCE[event.kind]}"
            fix = None
            if event.kind is EventKind.SCALER_SCALE and len(event.node.args) == 1 \
                    and event.node.args[0].keyword is None and not event.node.args[0].star:
                argument = event.node.args[0].value
                fix = FixPlan(f"Replace `{what}` with `{snippet(facts, argument)}`",
                              lambda event=event, arg=argument: self._unscaled(facts, event, arg, functions),
                              Applicability.UNSAFE)
            advice = ADVICE.get(event.kind,
                                f"Remove `{snippet(facts, event.node.func, 32)}(...)` from code without backward")
            yield Finding(event.node, message, fix, help=None if fix else advice)

    @staticmethod
    def _unscaled(facts: ModuleFacts, event: Event, argument: cst.BaseExpression,
                  functions: _Functions) -> cst.Module:
        """`y = scaler.scale(x)` -> `y = x`; `x = scaler.scale(x)` loses the whole statement; a scaler built in
        the same function for this call alone loses its construction too."""
        replacements: dict = {event.node: argument}
        statement = event.call.statement
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
            small = statement.body[0]
            if isinstance(small, cst.Assign) and small.value is event.node and len(small.targets) == 1 \
                    and isinstance(argument, cst.Name) and isinstance(small.targets[0].target, cst.Name) \
                    and small.targets[0].target.value == argument.value:
                replacements = {statement: cst.RemoveFromParent()}
        construction = ScalerInInference._only_use_construction(event, functions)
        if construction is not None:
            replacements[construction] = cst.RemoveFromParent()
        return replace_nodes(facts.module, replacements)

    @staticmethod
    def _only_use_construction(event: Event, functions: _Functions) -> cst.SimpleStatementLine | None:
        """`scaler = GradScaler(...)` in the same function when this `scaler.scale(...)` is the scaler's only
        other mention there (the name appears exactly twice in the function's code; comments do not count)."""
        function = event.frame.function()
        if function is None or event.scaler is None or "." in event.scaler:
            return None
        statement = functions.construction(function, event.scaler)
        if statement is None:
            return None
        return statement if functions.mentions(function, event.scaler) == 2 else None

    @staticmethod
    def _inference_context(facts: ModuleFacts, event: Event, functions: _Functions) -> str | None:
        module_has_backward = facts.module_has_backward
        opener = facts.no_grad_opener(event.frame)
        if opener is not None:
            # step/update/unscale_ under no_grad after a backward elsewhere is gradient surgery, not inference.
            if event.kind in (EventKind.SCALER_BUILD, EventKind.SCALER_SCALE) or not module_has_backward:
                return f"runs under `{snippet(facts, opener, 24)}` (line {facts.line_of(opener)})"
        function = event.frame.function()
        if event.kind is EventKind.SCALER_BUILD:
            return None  # a factory building the scaler for later training is not inference
        if function is None:
            return None if module_has_backward else "runs in a module with no backward"
        if not isinstance(function.node, cst.FunctionDef) or facts.has_backward(function):
            return None
        calls_eval = functions.calls_eval(function)
        # A name alone is weak evidence: in a module that runs a backward, `generator_step()` stepping the scaler
        # is a training helper (the backward in another method), and so is a function returning a scaled loss.
        # There the name counts only with more: the function runs under no_grad/inference_mode, or a scaled
        # value is used where it is computed (scaled logits in `generate()`).
        named = eval_like(function.name) and (not module_has_backward or opener is not None or (
            event.kind is EventKind.SCALER_SCALE and not _returned(event.call.statement)))
        if calls_eval or named:
            return f"runs in `{function.name}()`, which has no backward"
        return None


class _Functions:
    """What AMP005 asks about the function of each scaler event, read once per module or per function: which
    functions call `.eval()` and how many times each name appears in a function's code (the scaler constructions
    of each function are `ModuleFacts.scaler_builds_by_function`). So N scaler events cost N lookups, not N scans of the module or of their function."""

    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self._names: dict[int, Counter[str]] = {}

    @cached_property
    def _calling_eval(self) -> set[int]:
        return {id(c.frame.function()) for c in self.facts.calls if c.method == "eval" and not c.node.args}

    def calls_eval(self, function: Frame) -> bool:
        """Does the function's own code call `x.eval()`?"""
        return id(function) in self._calling_eval

    def construction(self, function: Frame, name: str) -> cst.SimpleStatementLine | None:
        """The statement of the function's first `name = GradScaler(...)` that is a statement of its own line."""
        for build in self.facts.scaler_builds_by_function.get((name, id(function)), ()):
            statement = build.call.statement
            if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
                return statement
        return None

    def mentions(self, function: Frame, name: str) -> int:
        """How many times `name` appears as a name in the function's code (never in comments or strings)."""
        if id(function) not in self._names:
            self._names[id(function)] = _names(function.node)
        return self._names[id(function)][name]


def _returned(statement: cst.CSTNode) -> bool:
    """Does the statement hand its value to the caller (`return ...`, `yield ...`)?"""
    found = []

    class Hands(cst.CSTVisitor):
        def visit_Return(self, node: cst.Return) -> None:
            found.append(node)

        def visit_Yield(self, node: cst.Yield) -> None:
            found.append(node)

    statement.visit(Hands())
    return bool(found)


def _names(node: cst.CSTNode) -> Counter[str]:
    """How many times each name appears as a name in the code of `node` (never in comments or strings)."""
    found: Counter[str] = Counter()

    class Names(cst.CSTVisitor):
        def visit_Name(self, node: cst.Name) -> None:
            found[node.value] += 1

    node.visit(Names())
    return found


def _functions_with_backward(summary) -> set[int]:
    """Functions (ids; 0 for module level) whose body calls a method `backward`/`manual_backward`: the facts layer
    surely sees a backward there."""
    return summary.functions_calling_backward()


def module_without_backward(summary) -> bool:
    """No method call `.backward()`/`.manual_backward()` anywhere (from the text alone: always True)."""
    return summary.ask(True, lambda: not _functions_with_backward(summary))


def in_function_without_backward(summary, names, pattern, calling=(), on_scaler: bool = False) -> bool:
    """A call to one of the names in the body of a `def` that calls no method `backward`/`manual_backward` and whose
    name `pattern` finds or that calls one of `calling`."""
    def exact() -> bool:
        with_backward = _functions_with_backward(summary)
        calling_functions = {id(function) for function, _ in summary.sites(calling)} if calling else set()
        return any(type(function) in FUNCTIONS and id(function) not in with_backward
                   and (pattern.search(function.name) or id(function) in calling_functions)
                   for function, _ in summary.sites(names, on_scaler))

    return summary.ask(summary.written_call(names) and (summary.defines_function(pattern)
                                                        or summary.written_call(calling)), exact)
