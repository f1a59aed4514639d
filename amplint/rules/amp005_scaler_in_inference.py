"""AMP005 scaler-in-inference."""

from __future__ import annotations

from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.diagnostics import Applicability
from amplint.facts import Event, ModuleFacts
from amplint.facts.evaluation import (ANY_NAME, NO_NAME, EvaluationQueries, Evaluates, How, Kept, scaled_argument,
                                      in_function_without_backward, module_without_backward, self_assignment)
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.screen import Ask, Summary
from amplint.rules.scopes import snippet
from amplint.vocabulary import Effect

BUILDS = (vocab.GRAD_SCALER, vocab.SHARDED_GRAD_SCALER)
GRAD_OFF = (vocab.NO_GRAD, vocab.INFERENCE_MODE, vocab.SET_GRAD_ENABLED)
USES = (vocab.SCALE, vocab.STEP, vocab.UPDATE, vocab.UNSCALE)  # what a training step calls on a scaler

# What each scaler call does where no backward runs, in a message's few words (the docstring says more).
CONSEQUENCE = {Effect.SCALER_SCALE: "it multiplies by the loss scale", Effect.SCALER_STEP: "it raises AssertionError",
               Effect.SCALER_UPDATE: "it raises AssertionError", Effect.UNSCALE: "there are no gradients to unscale"}
ADVICE = {Effect.BUILDS_SCALER: "Remove it: a GradScaler serves only a training step's backward",
          Effect.SCALER_SCALE: "Use the unscaled value"}  # what to do when there is no fix
# What shows that the code evaluates, in a message: of a construction (the evidence), of a use (where it runs).
BUILT = {How.UNDER: "under `{opener}`, line {line}", How.CALLS_EVAL: "{owner} calls `.eval()`",
         How.OPENS: "{owner} opens `{opener}`", How.SCRIPT: "{owner}, called by a script calling `.eval()`"}
RUNS = {How.UNDER: "runs under `{opener}` (line {line})", How.NO_BACKWARD: "runs in a module with no backward",
        How.CALLS_EVAL: "runs in {owner}, which has no backward", How.DATA: "runs in {owner}, which has no backward",
        How.SCRIPT: "runs in {owner}, called by a script calling `.eval()`"}


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
    # A scaler event under no_grad/inference_mode, at module level of a module without backward, or in a function
    # without backward calling `.eval()`; a `scale()` there (its value read as data); a construction there in a file
    # naming a grad mode (it may open no_grad); a script calling `.eval()` at module level (for what it calls).
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
        queries = EvaluationQueries(facts)
        for event in facts.events:
            if event.kind == Effect.BUILDS_SCALER and (built := queries.built_for_nothing(event)) is not None:
                yield _construction(facts, event, *built)
            elif event.kind in CONSEQUENCE and (evaluates := queries.evaluates(event)) is not None:
                yield _use(facts, event, evaluates, queries)  # scale, step, update, unscale_


def _construction(facts: ModuleFacts, event: Event, kept: Kept, evaluates: Evaluates) -> Finding:
    """A GradScaler built where no backward runs and kept there: dead code in evaluation code, reported with the
    evidence that the code evaluates; removed when its name is never read (a module-level one stays)."""
    subject = f"GradScaler `{kept.name}`" if kept.name else f"`{snippet(facts, event.node.func, 32)}(...)`"
    tail = "dead code" if kept.unread else "it serves no backward"
    message = f"{subject} built where no backward runs ({_words(facts, BUILT, evaluates)}): {tail}"
    if not kept.removable or evaluates.function is None:
        return Finding(event.node, message, help=ADVICE[Effect.BUILDS_SCALER])
    statement = event.call.statement
    return Finding(event.node, message, FixPlan(f"Remove the unused `{snippet(facts, statement, 48)}`", lambda:
                   replace_nodes(facts.module, {statement: cst.RemoveFromParent()}), Applicability.SAFE))


def _use(facts: ModuleFacts, event: Event, evaluates: Evaluates, queries: EvaluationQueries) -> Finding:
    """A scaler's `scale`, `step`, `update` or `unscale_` where no backward runs; `scaler.scale(x)` becomes `x`."""
    message = f"`{snippet(facts, event.node, 32)}` {_words(facts, RUNS, evaluates)}: {CONSEQUENCE[event.kind]}"
    argument = scaled_argument(event) if event.kind == Effect.SCALER_SCALE else None
    if argument is None:
        advice = f"Remove `{snippet(facts, event.node.func, 32)}(...)` from code without backward"
        return Finding(event.node, message, help=ADVICE.get(event.kind, advice))

    def unscaled() -> cst.Module:
        """`y = scaler.scale(x)` -> `y = x`; `x = scaler.scale(x)` and a scaler built for this call alone go."""
        statement = self_assignment(event, argument)
        replacements: dict = {statement: cst.RemoveFromParent()} if statement is not None else {event.node: argument}
        if (construction := queries.only_use_construction(event)) is not None:
            replacements[construction] = cst.RemoveFromParent()
        return replace_nodes(facts.module, replacements)
    title = f"Replace `{snippet(facts, event.node)}` with `{snippet(facts, argument)}`"
    return Finding(event.node, message, FixPlan(title, unscaled, Applicability.UNSAFE))


def _words(facts: ModuleFacts, table: dict[How, str], evaluates: Evaluates) -> str:
    """The table's words for what shows that the code evaluates, with its function and no_grad opener filled in."""
    opener, function = evaluates.opener, evaluates.function
    return table[evaluates.how].format(owner=f"`{function.name}()`" if function is not None else "module code",
                                       opener=snippet(facts, opener, 24) if opener is not None else "",
                                       line=facts.line_of(opener) if opener is not None else 0)
