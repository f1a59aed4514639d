"""AMP005 scaler-in-inference."""

from __future__ import annotations

import re
from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.diagnostics import Applicability
from amplint.facts import Event, EventKind, Frame, ModuleFacts
from amplint.facts.model import FrameKind
from amplint.facts.evaluation import EvaluationQueries, Kept, only_data
from amplint.index.summary import FUNCTIONS, Summary
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.screen import Ask
from amplint.rules.scopes import snippet

SCALER_EVENTS = (EventKind.SCALER_BUILD, EventKind.SCALER_SCALE, EventKind.SCALER_STEP, EventKind.SCALER_UPDATE,
                 EventKind.SCALER_UNSCALE)
# A function's name is never evidence (what the code does is): the screen asks about functions by what they call.
NO_NAME = re.compile(r"(?!)")
ANY_NAME = re.compile("")
BUILDS = (vocab.GRAD_SCALER, vocab.SHARDED_GRAD_SCALER)
GRAD_OFF = (vocab.NO_GRAD, vocab.INFERENCE_MODE, vocab.SET_GRAD_ENABLED)
USES = (vocab.SCALE, vocab.STEP, vocab.UPDATE, vocab.UNSCALE)  # what a training step calls on a scaler



# What each scaler call does where no backward runs, in a message's few words (the docstring says more).
CONSEQUENCE = {
    EventKind.SCALER_SCALE: "it multiplies by the loss scale",
    EventKind.SCALER_STEP: "it raises AssertionError",
    EventKind.SCALER_UPDATE: "it raises AssertionError",
    EventKind.SCALER_UNSCALE: "there are no gradients to unscale",
}
# What to do when there is no fix.
ADVICE = {
    EventKind.SCALER_BUILD: "Remove it: a GradScaler serves only a training step's backward",
    EventKind.SCALER_SCALE: "Use the unscaled value",
}


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


class ScalerInInference(Rule):
    """## What it does
    Checks for a GradScaler constructed or used (`scale`, `step`, `update`, `unscale_`) where no backward can
    happen: under `torch.no_grad()`, `torch.inference_mode()` or `torch.set_grad_enabled(False)` (a `with` block
    or a decorator), or in evaluation code. Evaluation code is a function that runs no backward (neither in its
    own code, nor in a function nested in it, nor in a function it calls, in this module or, through the project
    index, in another) and that calls `.eval()` or opens `no_grad`/`inference_mode` anywhere in its code; a
    function without backward whose `scaler.scale(x)` result is read only as data that reaches no backward
    (scaled logits sampled into token ids: read by tensor methods, torch functions and operators down to integer
    results, never returned, stored or handed to another call); and the module-level code of a module that runs
    no backward.

    A construction is reported in evaluation code even when the scaler is never used, and even when it comes
    before the `no_grad` block, as long as the scaler stays in the function: its name is read only to call its
    methods. A scaler that is returned, stored (`self.scaler = ...`), passed to a call or compared
    (`scaler is not None`) may serve training elsewhere and is left alone, so factories and a trainer's
    `__init__` stay silent. Module-level constructions are reported only where the module's own code calls
    `.eval()` or opens `no_grad`/`inference_mode` (an inference script). A script whose module-level code calls
    `.eval()` and that runs no backward is evaluation code for the functions it defines and calls. A function of
    the module named `eval` is not Python's builtin `eval` (which reads every local name).

    A function's name is never evidence (`evaluate`, `generator_step`, `test_...` say nothing of what the code
    does): `generator_step()` stepping the scaler or a function returning a scaled loss is a training helper
    whatever it is called, and `validate()` is evaluation code only where it calls `.eval()`, opens
    `no_grad`/`inference_mode`/`set_grad_enabled(False)`, or uses a scaled value as data.

    ## Why is this bad?
    A GradScaler exists to scale a loss before backward and unscale gradients before the step. In inference it
    only does harm: `scaler.scale(outputs)` multiplies predictions by the loss scale (65536 by default, measured
    ratio exactly 65536); `step`/`update`/`unscale_` with no backward raise `AssertionError` ("No inf checks were
    recorded for this optimizer.", "No inf checks were recorded prior to update.", "Attempted step but _scale is
    None.", "Attempted unscale_ but _scale is None."); and a scaler whose first `scale()` runs
    under `inference_mode` holds an inference tensor that later breaks training with `RuntimeError: Inference
    tensors cannot be saved for backward`. A scaler only built in evaluation code does nothing at run time: it is
    dead code, and a sign that the mixed-precision training recipe was copied into code that does not train
    (and that what it was for, scaling a loss before a backward, was lost on the way).

    ## Example
    ```python
    import torch

    scaler = torch.amp.GradScaler("cuda")

    @torch.no_grad()
    def evaluate(model, x):
        with torch.autocast("cuda"):
            return scaler.scale(model(x))

    def run_validation(net, data):
        amp_scaler = torch.amp.GradScaler("cuda")
        net.eval()
        with torch.inference_mode():
            return [net(x) for x in data]
    ```

    ## Use instead
    ```python
    import torch

    @torch.no_grad()
    def evaluate(model, x):
        with torch.autocast("cuda"):
            return model(x)

    def run_validation(net, data):
        net.eval()
        with torch.inference_mode():
            return [net(x) for x in data]
    ```

    ## Fix safety
    Sometimes safe.

    - Removing a construction (`amp_scaler = GradScaler(...)` as a statement of its own) whose name the function
      never reads again is safe: nothing can use the object, and its arguments are names, attributes and literals,
      never a call whose effect would go with it. A call of `locals()`, `vars()`, `dir()`, `eval()` or `exec()`
      counts as reading the name; comments do not. A construction at module level stays (another module may import it).
    - Rewriting `scaler.scale(x)` as `x` is unsafe: it changes the values the code produces (that is the point,
      but code downstream may have compensated). A scaler built in the same function for that call alone goes
      with it.
    - `step`, `update`, `unscale_` and constructions whose name is read are reported without a fix: removing them
      may change control flow.
    - Own-line comments above the removed statements stay; only comments on the removed lines go.

    ## Limits
    Only objects known to be a torch GradScaler are considered (constructed from `GradScaler` in this module or
    used as one with `scale(loss).backward()`/`unscale_`); sklearn's `StandardScaler` and other `scaler` objects
    are not. Harmless calls such as `scaler.get_scale()` or `scaler.state_dict()` are not reported. Under
    `torch.no_grad()` in a module that runs a backward, `step`, `update` and `unscale_` are reported only in
    evaluation code: elsewhere they are the update phase of training (`with torch.no_grad():
    scaler.unscale_(optimizer)`). A backward behind a call is seen through calls the facts layer resolves in the
    module (`f()`, `self.f()`) and, when the file is linted with its project (the command line always indexes
    it), through the project index a few calls deep; linted alone (stdin, the library's `lint_text` without a
    project), a helper of another module is assumed to run no backward. A backward inside a call the index
    cannot resolve (a method of an object of unknown class) is not seen.
    """

    code = "AMP005"
    name = "scaler-in-inference"
    fix = "sometimes"
    # A scaler is known from its construction (`GradScaler`) or from `x.unscale_(...)`/`x.scale(loss).backward()`.
    words = (vocab.GRAD_SCALER, vocab.SCALE)
    # A scaler event under no_grad/inference_mode, in a function without backward that calls `.eval()`, or at
    # module level; a `scale()` in a function without backward (its value read as data); a construction in a
    # function without backward that calls `.eval()`, or (in a file naming a grad
    # mode) that may open no_grad; a construction at module level of a module without backward; a script that
    # puts its model in `.eval()` at module level is evaluation code for what it calls.
    requires = Ask(Summary.scaler_possible) & (
        Ask(Summary.calls_under, BUILDS, GRAD_OFF) | Ask(Summary.calls_under, (vocab.SCALE,), GRAD_OFF, on_scaler=True)
        | (Ask(module_without_backward) & (
            Ask(Summary.calls_under, USES, GRAD_OFF, on_scaler=True)
            | Ask(Summary.calls_outside_functions, *USES, on_scaler=True)
            | Ask(Summary.calls_outside_functions, *BUILDS)
            | Ask(Summary.calls_method_outside_functions, vocab.EVAL)))
        | Ask(in_function_without_backward, USES, NO_NAME, calling=(vocab.EVAL,), on_scaler=True)
        | Ask(in_function_without_backward, BUILDS, NO_NAME, calling=(vocab.EVAL,))
        | Ask(in_function_without_backward, (vocab.SCALE,), ANY_NAME, on_scaler=True)
        | (Ask(Summary.has_token, *GRAD_OFF) & Ask(in_function_without_backward, BUILDS, ANY_NAME)))

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        functions = EvaluationQueries(facts)
        for event in facts.events:
            if event.kind not in SCALER_EVENTS:
                continue
            if event.kind is EventKind.SCALER_BUILD:
                finding = self._construction(facts, event, functions)
                if finding is not None:
                    yield finding
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

    # constructions -------------------------------------------------------------------------------------------
    @staticmethod
    def _construction(facts: ModuleFacts, event: Event, functions: EvaluationQueries) -> Finding | None:
        """A GradScaler built where no backward runs and kept there (see `Kept`): dead code in evaluation code,
        reported with the evidence that the code evaluates; removed when its name is never read."""
        function = event.frame.function()
        if function is None and any(frame.kind is FrameKind.CLASS for frame in event.frame.ancestors()):
            return None  # a class attribute: every instance may read it
        if function is not None and not isinstance(function.node, cst.FunctionDef):
            return None
        kept = functions.kept_here(event)
        if kept is None:
            return None
        evidence = ScalerInInference._build_evidence(facts, event, function, kept, functions)
        if evidence is None:
            return None
        subject = f"GradScaler `{kept.name}`" if kept.name else f"`{snippet(facts, event.node.func, 32)}(...)`"
        tail = "dead code" if kept.unread else "it serves no backward"
        message = f"{subject} built where no backward runs ({evidence}): {tail}"
        fix = None
        if kept.removable and function is not None:
            statement = event.call.statement
            fix = FixPlan(f"Remove the unused `{snippet(facts, statement, 48)}`",
                          lambda statement=statement: replace_nodes(facts.module,
                                                                    {statement: cst.RemoveFromParent()}),
                          Applicability.SAFE)
        return Finding(event.node, message, fix, help=None if fix else ADVICE[EventKind.SCALER_BUILD])

    @staticmethod
    def _build_evidence(facts: ModuleFacts, event: Event, function: Frame | None, kept: Kept,
                        functions: EvaluationQueries) -> str | None:
        """What shows that the code building the scaler evaluates, in a few words; None when nothing does.

        Facts of what the code does come first: it runs under no_grad/inference_mode, calls `.eval()`, or opens
        no_grad/inference_mode anywhere (the construction may come before the block). A name counts only with a
        module that runs no backward at all: the name adds to that fact, it is never the only evidence."""
        if function is None:
            if facts.module_has_backward or functions.module_runs_backward(kept.name):
                return None
        elif functions.runs_backward(function):
            return None
        opener = facts.no_grad_opener(event.frame)
        if opener is not None:
            return f"under `{snippet(facts, opener, 24)}`, line {facts.line_of(opener)}"
        owner = f"`{function.name}()`" if function is not None else "module code"
        if functions.calls_eval(function):
            return f"{owner} calls `.eval()`"
        opener = functions.grad_off_opener(function)
        if opener is not None:
            return f"{owner} opens `{snippet(facts, opener, 24)}`"
        if functions.evaluation_script(function):
            return f"{owner}, called by a script calling `.eval()`"
        return None

    # uses ----------------------------------------------------------------------------------------------------
    @staticmethod
    def _unscaled(facts: ModuleFacts, event: Event, argument: cst.BaseExpression,
                  functions: EvaluationQueries) -> cst.Module:
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
    def _only_use_construction(event: Event, functions: EvaluationQueries) -> cst.SimpleStatementLine | None:
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
    def _inference_context(facts: ModuleFacts, event: Event, functions: EvaluationQueries) -> str | None:
        module_has_backward = facts.module_has_backward
        opener = facts.no_grad_opener(event.frame)
        if opener is not None:
            # step/update/unscale_ under no_grad after a backward elsewhere is gradient surgery, not inference.
            if event.kind is EventKind.SCALER_SCALE or not module_has_backward:
                return f"runs under `{snippet(facts, opener, 24)}` (line {facts.line_of(opener)})"
        function = event.frame.function()
        if function is None:
            if module_has_backward or functions.module_runs_backward(None):
                return None
            return "runs in a module with no backward"
        if not isinstance(function.node, cst.FunctionDef) or functions.runs_backward(function):
            return None
        # What the function does decides, never its name: it calls `.eval()`, or the scaled value is read only as
        # data that reaches no backward (scaled logits sampled into token ids in `generate()`). A function
        # returning or handing on a scaled loss is a training helper (the backward elsewhere).
        if functions.calls_eval(function) or (
                event.kind is EventKind.SCALER_SCALE and only_data(facts, function, event, functions)):
            return f"runs in `{function.name}()`, which has no backward"
        if functions.evaluation_script(function):
            return f"runs in `{function.name}()`, called by a script calling `.eval()`"
        return None


def _functions_with_backward(summary) -> set[int]:
    """Functions (ids; 0 for module level) whose body calls a method `backward`/`manual_backward`: the facts layer
    surely sees a backward there."""
    return summary.functions_calling_backward()
