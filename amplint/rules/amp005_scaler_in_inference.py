"""AMP005 scaler-in-inference."""

from __future__ import annotations

import re

from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.vocabulary import Effect
from amplint.diagnostics import Applicability
from amplint.facts import Event, EventKind, Frame, ModuleFacts
from amplint.facts.model import FrameKind
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
# Builtins that read a function's local names without naming them: a scaler they may hand on is not left alone.
READS_EVERY_LOCAL = frozenset({"locals", "vars", "dir", vocab.EVAL, "exec"})  # `dir()`: the local names
MAX_CALLEES = 4  # how many same-module calls deep a backward behind a call is looked for


# Calls whose result is integer (indices, counts, booleans) whatever the loss scale of their input: a scaled value
# read only on its way to one of them reaches no backward.
INTEGER_RESULTS = vocab.INTEGER_OPS | {"multinomial"}


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
        functions = _Functions(facts)
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
    def _construction(facts: ModuleFacts, event: Event, functions: _Functions) -> Finding | None:
        """A GradScaler built where no backward runs and kept there (see `_Kept`): dead code in evaluation code,
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
    def _build_evidence(facts: ModuleFacts, event: Event, function: Frame | None, kept: _Kept,
                        functions: _Functions) -> str | None:
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
                event.kind is EventKind.SCALER_SCALE and _only_data(facts, function, event, functions)):
            return f"runs in `{function.name}()`, which has no backward"
        if functions.evaluation_script(function):
            return f"runs in `{function.name}()`, called by a script calling `.eval()`"
        return None


@dataclass
class _Kept:
    """A construction whose scaler stays where it is built: `name` (None for a bare `GradScaler()` statement) is
    read only to call its methods (`unread`: not at all); `removable`: the statement is `name = GradScaler(...)`
    (or the bare call) with arguments whose evaluation does nothing, and the name is never read."""

    name: str | None
    unread: bool
    removable: bool


class _Functions:
    """What AMP005 asks about the function of each scaler event, read once per module or per function: which
    functions call `.eval()` or open no_grad, which run a backward (themselves, in nested code, or behind a call),
    and how the names of a function's code are read (the scaler constructions of each function are
    `ModuleFacts.scaler_builds_by_function`). So N scaler events cost N lookups, not N scans of the module or of
    their function."""

    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self._names: dict[int, Counter[str]] = {}
        self._reads: dict[int, _Reads] = {}
        self._statements: dict[int, tuple[dict[str, list[cst.CSTNode]], set[str]]] = {}
        self._backward: dict[int, bool] = {}
        self._module_backward: dict[str | None, bool] = {}

    @cached_property
    def _calling_eval(self) -> set[int]:
        return {id(c.frame.function()) for c in self.facts.calls if c.method == vocab.EVAL and not c.node.args}

    def calls_eval(self, function: Frame | None) -> bool:
        """Does the function's own code (None: the module's) call `x.eval()`?"""
        return id(function) in self._calling_eval

    @cached_property
    def _withs_by_function(self) -> dict[int, list[Frame]]:
        grouped: dict[int, list[Frame]] = {}
        for frame in self.facts.with_frames.values():
            grouped.setdefault(id(frame.function()), []).append(frame)
        return grouped

    def grad_off_opener(self, function: Frame | None) -> cst.CSTNode | None:
        """The first no_grad/inference_mode/set_grad_enabled(False) the function (None: module-level code) opens:
        its decorator, or a with-statement anywhere in its own code."""
        if function is not None:
            opener = self.facts.no_grad_opener(function)
            if opener is not None:
                return opener
        for frame in self._withs_by_function.get(id(function), ()):
            opener = self.facts.no_grad_opener(frame)
            if opener is not None and any(opener is item.item for item in frame.node.items):
                return opener
        return None

    # backward ------------------------------------------------------------------------------------------------
    @cached_property
    def _within(self) -> dict[int, list]:
        """id of each function frame -> the calls of its code and of the functions nested in it."""
        grouped: dict[int, list] = {}
        for call in self.facts.calls:
            for frame in call.frame.ancestors():
                if frame.kind is FrameKind.FUNCTION:
                    grouped.setdefault(id(frame), []).append(call)
        return grouped

    @cached_property
    def _backward_calls(self) -> set[int]:
        """ids of the calls that run a backward (events, and every method `backward`/`manual_backward`)."""
        found = {id(e.call) for e in self.facts.events if e.kind is EventKind.BACKWARD}
        return found | {id(c) for c in self.facts.calls if c.method in (vocab.BACKWARD, vocab.MANUAL_BACKWARD)}

    @cached_property
    def _callees(self) -> dict[int, Frame]:
        """id of each call to a function of this module (`f()`, `self.f()`) -> that function's frame."""
        frames = {}
        for info in self.facts.functions:
            frames.setdefault(info.qualname, info.frame)
        return {id(call): frames[qualname] for qualname, calls in self.facts.call_sites.items()
                if qualname in frames for call in calls}

    def runs_backward(self, function: Frame) -> bool:
        """Does the function run a backward: in its own code, in a function nested in it, or in a function it
        calls (in this module, `MAX_CALLEES` calls deep; in any module of the project, through the index)?"""
        key = id(function)
        if key not in self._backward:
            self._backward[key] = self._reaches_backward([function], self._within.get(key, []))
        return self._backward[key]

    def module_runs_backward(self, name: str | None) -> bool:
        """Does module-level code, or a function that reads the module-level scaler `name`, run a backward
        behind a call (the module itself runs none)?"""
        if name not in self._module_backward:
            calls = [call for call in self.facts.calls if call.frame.function() is None]
            readers = [info.frame for info in self.facts.functions
                       if name is not None and self.reads(info.frame).receivers[name]]
            self._module_backward[name] = self._reaches_backward(readers, calls) or any(
                self.runs_backward(frame) for frame in readers)
        return self._module_backward[name]

    def _reaches_backward(self, functions: list[Frame], calls: list) -> bool:
        """Breadth first through same-module calls from these calls (the code of `functions`), then each call
        asked to the project index."""
        seen = {id(frame) for frame in functions}
        frontier = list(calls)
        examined = []
        for _ in range(MAX_CALLEES + 1):
            following = []
            for call in frontier:
                if id(call) in self._backward_calls:
                    return True
                examined.append(call)
                callee = self._callees.get(id(call))
                if callee is not None and id(callee) not in seen:
                    seen.add(id(callee))
                    following.extend(self._within.get(id(callee), []))
            frontier = following
            if not frontier:
                break
        return self._index_reaches_backward(examined)

    def _index_reaches_backward(self, calls: list) -> bool:
        """Does one of these calls run, through the project index, a function (of any module) that runs a
        backward itself or a few calls deep?"""
        view = self.facts.project
        if view is None:
            return False
        for call in calls:
            if call.dotted is None or (call.qualified or "").startswith("torch."):
                continue
            target = view.resolve(_qualname(self.facts, call.frame), call.dotted)
            if target is not None and view.reaches(target, (Effect.BACKWARD,)) is not None:
                return True
        return False

    # names ---------------------------------------------------------------------------------------------------
    def reads(self, function: Frame | None) -> _Reads:
        """How the names of the function's code (None: the whole module) are read."""
        key = id(function)
        if key not in self._reads:
            self._reads[key] = _read_names(function.node if function is not None else self.facts.module)
        return self._reads[key]

    def kept_here(self, event: Event) -> _Kept | None:
        """The construction as a `_Kept` when the scaler stays where it is built: the statement is
        `name = GradScaler(...)` (or `GradScaler(...) if flag else None`), or the bare call; the name is a plain
        one, read only as the receiver of its methods (never returned, passed, stored, compared, declared
        global, or read by `locals()`). None otherwise: the scaler may serve training elsewhere."""
        statement = event.call.statement
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return None
        small = statement.body[0]
        node = event.node
        function = event.frame.function()
        if isinstance(small, cst.Expr) and small.value is node:
            return _Kept(None, True, _inert_arguments(node))
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            target = small.targets[0].target
        elif isinstance(small, cst.AnnAssign) and small.value is not None:
            target = small.target
        else:
            return None
        value = small.value
        if not isinstance(target, cst.Name) or not (value is node or (
                isinstance(value, cst.IfExp) and node in (value.body, value.orelse))):
            return None
        name = target.value
        reads = self.reads(function)
        if self._builtin_readers(READS_EVERY_LOCAL & reads.names.keys(), function):
            return None
        bindings = sum(1 for a in self.facts.assignments_in(function)
                       if a.targets == (name,) and self.facts.is_scaler_construction(a.value))
        if reads.names[name] - reads.receivers[name] - bindings > 0:
            return None
        unread = reads.receivers[name] == 0
        return _Kept(name, unread, unread and value is node and _inert_arguments(node))

    def _builtin_readers(self, names: set[str], function: Frame | None) -> set[str]:
        """The names of `READS_EVERY_LOCAL` the code reads that are Python's builtins: a name the module binds
        (a `def eval(...)` of its own, an import, an assignment) is another function."""
        defined = {info.qualname for info in self.facts.functions}
        return {name for name in names if name not in defined and name not in self.facts.imports.bindings
                and not self.facts.bindings(name, function)}

    def evaluation_script(self, function: Frame | None) -> bool:
        """Is the function evaluation code of a script: module-level code calls `.eval()` and runs no backward
        (nor does the module, nor any call of module-level code), and the function is called by module-level
        code, itself or through a function of the module so called?"""
        if function is None or not self.calls_eval(None) or self.facts.module_has_backward \
                or self.module_runs_backward(None):
            return False
        info = self.facts.function_info(function)
        if info is None:
            return False
        callers = [info.qualname]
        for _ in range(2):
            sites = [site for name in callers for site in self.facts.call_sites.get(name, ())]
            if any(site.frame.function() is None for site in sites):
                return True
            callers = [caller.qualname for caller in (self.facts.function_info(site.frame) for site in sites)
                       if caller is not None]
        return False

    def construction(self, function: Frame, name: str) -> cst.SimpleStatementLine | None:
        """The statement of the function's first `name = GradScaler(...)` that is a statement of its own line."""
        for build in self.facts.scaler_builds_by_function.get((name, id(function)), ()):
            statement = build.call.statement
            if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
                return statement
        return None

    def statements_reading(self, function: Frame) -> tuple[dict[str, list[cst.CSTNode]], set[str]]:
        """(name -> the small statements of the function's code reading it, in order; the names its nested
        functions, classes and lambdas read), for `_only_data`: built once per function."""
        key = id(function)
        if key not in self._statements:
            readers: dict[str, list[cst.CSTNode]] = {}
            for node in _simple_statements(function.node.body):
                for name in dict.fromkeys(_name_values(node)):
                    readers.setdefault(name, []).append(node)
            nested = {name for node in _nested_definitions(function.node.body) for name in _name_values(node)}
            self._statements[key] = (readers, nested)
        return self._statements[key]

    def mentions(self, function: Frame, name: str) -> int:
        """How many times `name` appears as a name in the function's code (never in comments or strings)."""
        if id(function) not in self._names:
            self._names[id(function)] = _names(function.node)
        return self._names[id(function)][name]


def _qualname(facts: ModuleFacts, frame: Frame) -> str | None:
    """The qualname the project index knows the code of `frame` by: its outermost function's (a nested
    function's calls resolve as its enclosing method's); None at module level."""
    outer = None
    for current in frame.ancestors():
        if current.kind is FrameKind.FUNCTION:
            outer = current
    info = facts.function_info(outer) if outer is not None else None
    return info.qualname if info is not None else None


def _only_data(facts: ModuleFacts, function: Frame, event: Event, functions: _Functions) -> bool:
    """Is `name = scaler.scale(...)` read, in its function, only by tensor methods, torch functions and operators
    whose results are in turn read the same way, ending in integer results (`multinomial`, `argmax`) or nowhere:
    never returned, stored, handed to another call or backwarded? Then the scaled value reaches no backward."""
    statement = event.call.statement
    if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return False
    small = statement.body[0]
    if not (isinstance(small, cst.Assign) and small.value is event.node and len(small.targets) == 1
            and isinstance(small.targets[0].target, cst.Name)):
        return False
    tainted = {small.targets[0].target.value}
    # A statement's answer depends only on the tainted names it reads: each is checked again when one of its names
    # becomes tainted (the statements reading a name are indexed once per function: N scales cost N, not N x N).
    readers, nested_names = functions.statements_reading(function)
    pending = list(tainted)
    while pending:
        for node in readers.get(pending.pop(), ()):
            if node is small:
                continue
            flows = _Flow(facts, tainted)
            if not flows.statement(node):
                return False
            pending.extend(flows.bound - tainted)
            tainted |= flows.bound
    return not tainted & nested_names  # a closure reading one may hand it anywhere


def _name_values(node: cst.CSTNode) -> Iterator[str]:
    """Every `Name` in the node (as `_Flow._reads` sees them: attribute names too)."""
    pending = [node]
    while pending:
        current = pending.pop()
        if isinstance(current, cst.Name):
            yield current.value
        pending.extend(current.children)


def _nested_definitions(block: cst.CSTNode) -> list[cst.CSTNode]:
    found, pending = [], [block]
    while pending:
        node = pending.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            found.append(node)
            continue
        pending.extend(node.children)
    return found


def _simple_statements(block: cst.CSTNode) -> list[cst.CSTNode]:
    """The small statements of a function's code (nested functions and classes left out) and the expressions its
    compound statements test or iterate (`if`, `while`, `for ... in`, `with` items)."""
    found: list[cst.CSTNode] = []
    pending = [block]
    while pending:
        node = pending.pop()
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if isinstance(node, cst.BaseSmallStatement):
            found.append(node)
            continue
        if isinstance(node, (cst.If, cst.While)):
            found.append(cst.Expr(node.test))
        elif isinstance(node, cst.For):
            found.append(cst.Assign(targets=[cst.AssignTarget(node.target)], value=node.iter))
        elif isinstance(node, cst.With):
            found.extend(cst.Expr(item.item) for item in node.items)
        elif isinstance(node, cst.BaseExpression):
            continue
        pending.extend(child for child in node.children if not isinstance(child, cst.BaseExpression))
    return found


class _Flow:
    """Where the tainted names' values go in one small statement: `statement` is False when one may leave as data
    a backward could use (returned, stored in an attribute or a subscript, handed to a call that is not a tensor
    method or a torch function, backwarded); `bound` collects the names assigned a tainted value."""

    def __init__(self, facts: ModuleFacts, tainted: set[str]) -> None:
        self.facts, self.tainted, self.bound = facts, tainted, set()

    def statement(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.Expr):
            return self.value(node.value) is not None
        if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
            carried = self.value(node.value) if node.value is not None else False
            if carried is None:
                return False
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            if carried:
                for target in targets:
                    names = [e.value for e in (target.elements if isinstance(target, (cst.Tuple, cst.List)) else [])]
                    if isinstance(target, cst.Name):
                        self.bound.add(target.value)
                    elif names and all(isinstance(n, cst.Name) for n in names):
                        self.bound.update(n.value for n in names)
                    else:
                        return False  # stored in an attribute or a subscript
            return True
        return not self._reads(node)  # return, yield, del, raise...: any read of a tainted value leaves

    def _reads(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.Name):
            return node.value in self.tainted
        return any(self._reads(child) for child in node.children)

    def value(self, node: cst.CSTNode) -> bool | None:
        """Does the expression's value carry a tainted value (None: a tainted value leaves through it)?"""
        if isinstance(node, cst.Name):
            return node.value in self.tainted
        if not self._reads(node):
            return False
        if isinstance(node, (cst.BinaryOperation, cst.UnaryOperation, cst.Subscript, cst.Tuple, cst.List,
                             cst.Element, cst.SubscriptElement, cst.Index, cst.Slice, cst.Arg)):
            parts = [self.value(child) for child in node.children if isinstance(child, cst.CSTNode)]
            return None if None in parts else any(parts)
        if isinstance(node, cst.Comparison):
            return False if all(self.value(c) is not None for c in node.children) else None
        if isinstance(node, cst.Call):
            func, args = node.func, [self.value(arg.value) for arg in node.args]
            if None in args:
                return None
            if isinstance(func, cst.Attribute) and not (self.facts.imports.qualify(func) or "").startswith("torch."):
                receiver = self.value(func.value)
                method = func.attr.value
                if receiver is None or method not in vocab.TENSOR_METHODS | INTEGER_RESULTS:
                    return None if receiver or any(args) else False
                return False if method in INTEGER_RESULTS else bool(receiver or any(args))
            qualified = self.facts.imports.qualify(func) or ""
            if not qualified.startswith("torch.") or qualified.split(".")[1:2] == [vocab.AUTOGRAD]:
                return None  # handed to a call that may run a backward
            return False if qualified.rsplit(".", 1)[-1] in INTEGER_RESULTS else any(args)
        return None


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


def _inert_arguments(call: cst.Call) -> bool:
    """Does evaluating the call's arguments do nothing a removal could lose: no call, await, yield or `:=` in
    them (names, attributes, subscripts, literals and operators only)?"""
    active = []

    class Active(cst.CSTVisitor):
        def on_visit(self, node: cst.CSTNode) -> bool:
            if isinstance(node, (cst.Call, cst.Await, cst.Yield, cst.NamedExpr, cst.Lambda)):
                active.append(node)
                return False
            return True

    for argument in call.args:
        argument.value.visit(Active())
    return not active


@dataclass
class _Reads:
    names: Counter  # name -> how many times it appears as a name (attribute names and keywords of calls left out)
    receivers: Counter  # name -> how many of those are the object of an attribute (`name.method`, `name.x`)


def _read_names(node: cst.CSTNode) -> _Reads:
    """How each name appears in the code of `node`: in all, and as the object of an attribute. The attribute's
    own name (`x.scaler`) and a call's keyword (`f(scaler=...)`) are no uses of a variable."""
    reads = _Reads(Counter(), Counter())
    skip: set[int] = set()

    class Names(cst.CSTVisitor):
        def visit_Attribute(self, node: cst.Attribute) -> None:
            skip.add(id(node.attr))
            if isinstance(node.value, cst.Name):
                reads.receivers[node.value.value] += 1

        def visit_Arg(self, node: cst.Arg) -> None:
            if node.keyword is not None:
                skip.add(id(node.keyword))

        def visit_Name(self, node: cst.Name) -> None:
            if id(node) not in skip:
                reads.names[node.value] += 1

    node.visit(Names())
    return reads


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


