"""AMP009 unscaled-backward."""

from __future__ import annotations

import re
from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.facts import Event, EventKind, ModuleFacts
from amplint.facts.module import exclusive, loops_within, may_follow, scaler_enabled
from amplint.facts.names import code_words, dotted_name
from amplint.facts.switches import guarded_by_amp_test
from amplint.facts.timeline import Ordered
from amplint.diagnostics import Applicability
from amplint.index.flows import UNSCALED, Located, parameter_flow, parameters_of
from amplint.index.project import Target
from amplint.index.summary import Summary
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.screen import Ask
from amplint.rules.scopes import MESSAGE_SNIPPET, snippet

# Receivers of `.backward(...)` that are not tensors: frameworks that scale the loss themselves.
FRAMEWORK_RECEIVERS = re.compile(r"(^|_)(accelerator|fabric|engine|trainer|deepspeed|amp|self|model)$")


class UnscaledBackward(Rule):
    """## What it does
    Checks for `loss.backward()` on a loss that was not passed through `scaler.scale(...)`, when the gradients
    are then stepped with `scaler.step(optimizer)` in the same function.

    Applies to every torch version with `GradScaler` (torch >= 1.6).

    ## Why is this bad?
    `scaler.step(optimizer)` divides every gradient by the loss scale before stepping, assuming
    `scaler.scale(loss).backward()` multiplied them. Without the scaling, two things happen (measured on CPU with
    torch 2.13): when nothing was scaled yet, the first `scaler.step` raises
    `AssertionError: Attempted step but _scale is None.  This may indicate your script did not use
    scaler.scale(loss or outputs) earlier in the iteration.`; when something else was scaled (another loss,
    `scaled = scaler.scale(loss)` computed but not used), the gradients of this loss are divided by 65536 and
    the SGD update shrinks to 1.5e-5 of its size. With float16 the small gradients also underflow: the loss
    scale exists to prevent exactly that.

    ## Example
    ```python
    import torch

    scaler = torch.amp.GradScaler("cuda")
    loss = loss_fn(model(x), y)
    scaled = scaler.scale(loss)
    loss.backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Use instead
    ```python
    import torch

    scaler = torch.amp.GradScaler("cuda")
    loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    ```

    A loss the function is handed (`def _backward(self, loss)`) is whatever its callers pass: it is reported
    only when every call site the project index sees, in this module or another, hands over a loss computed
    unscaled (and at least one is seen); a caller that scales it first
    (`loss = self.scaler.scale(loss) if self.scaler else loss; self._backward(loss)`) makes it correct.

    ## Fix safety
    Sometimes safe. Safe for a loss the function computes itself: the fix rewrites `loss.backward(...)` as
    `scaler.scale(loss).backward(...)` with the scaler of the `scaler.step(...)` that follows, keeping the
    backward's arguments. Unsafe for a loss handed in: a caller the index cannot see (a callback, another
    project) may pass it scaled already, and scaling it twice multiplies the update by the loss scale.

    ## Limits
    Silent when the unscaled backward is the non-AMP code path (`if use_amp: scaler.scale(loss).backward() else:
    loss.backward()`), when an `optimizer.step()` consumes its gradients first, when the scaler is built with
    `enabled=False`, and for `accelerator.backward(loss)`, `fabric.backward(loss)`, `model_engine.backward(loss)`,
    Lightning's `manual_backward` and apex's `amp.scale_loss(...)` losses, which are scaled by their framework.
    Also silent when another backward of the same function is scaled, since the unscaled one may belong to a
    separate graph (a reference model), unless that scaled backward passes `retain_graph=True` for it.
    Silent when the loss's origin is not in view: a parameter with no caller in the project or a caller passing
    something not known, an attribute set in another method (`self.loss`), a loop or `with` target, a global.
    A loss whose code says `scale` (a name like `scaled_loss`, a helper like `compute_scaled_loss()`) is
    taken as scaled: silent.
    """

    code = "AMP009"
    name = "unscaled-backward"
    words = (vocab.BACKWARD,)
    requires = (Ask(Summary.scaler_possible) & Ask(Summary.calls_method, vocab.BACKWARD)
                & Ask(Summary.calls_method, vocab.STEP))
    min_torch = "1.6"
    fix = "sometimes"

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        functions: dict[int, _FunctionEvents] = {}  # each function's events, indexed once for all its backwards
        scaling_names: dict[tuple[str, int], bool] = {}  # (name, id of function) -> bound to something that scales
        located: Located | None = None  # the module's `ast` tree, for the flows of the losses (built when asked)
        for backward in facts.events:
            if backward.kind is not EventKind.BACKWARD or backward.scaled \
                    or not self._plain(facts, backward, scaling_names):
                continue
            if facts.no_grad_opener(backward.frame) is not None:
                continue  # no backward can run under no_grad/inference_mode: AMP005's business
            function = backward.frame.function()
            if id(function) not in functions:
                functions[id(function)] = _FunctionEvents(facts, facts.events_in(function))
            indexed = functions[id(function)]
            step = self._step_after(facts, indexed, backward)
            if step is None:
                continue
            scaler = step.scaler
            if any(self._separate_scaled_backward(facts, e, backward, scaler) for e in indexed.scaled(scaler)) \
                    or guarded_by_amp_test(facts, backward, step, scaler):
                continue
            if located is None:
                located = Located(facts.source)
            known = self._known_unscaled(facts, located, backward)
            if known is None:
                continue
            receiver = backward.node.func.value
            loss = snippet(facts, receiver)
            optimizer = step.optimizer or "optimizer"
            message = (f"`{snippet(facts, receiver, MESSAGE_SNIPPET)}` is backpropagated unscaled{known}, but "
                       f"`{scaler}.step({optimizer})` at line {facts.line_of(step.node)} unscales")
            fix = self._fix(facts, backward, scaler, Applicability.UNSAFE if known else Applicability.SAFE)
            yield Finding(backward.node, message, fix,
                          help=None if fix else f"Use `{scaler}.scale({loss}).backward()`")

    @staticmethod
    def _known_unscaled(facts: ModuleFacts, located: Located, backward: Event) -> str | None:
        """How the loss is known unscaled: "" when the function computes it from nothing scaled; ", as every
        caller passes it" when it comes from parameters and each call site the project index sees (at least one)
        hands over something unscaled. None when not known: a parameter with no caller in view or a caller
        passing something scaled or unknown, an attribute set elsewhere, a loop target."""
        start = facts.position(backward.node)[0]
        flow = located.receiver_flow(start.line, start.column)
        if flow == UNSCALED:
            return ""
        params = parameters_of(flow)
        info = facts.function_info(backward.frame.function())
        if not params or info is None:
            return None
        view = facts.project
        target = Target(view.path, info.qualname)
        sites = 0
        for param in params:
            handed, count = parameter_flow(view, target, param)
            if handed != UNSCALED:
                return None
            sites = max(sites, count)
        return f" by all {sites} call{'s' if sites > 1 else ''} seen"

    @staticmethod
    def _separate_scaled_backward(facts: ModuleFacts, other: Event, backward: Event, scaler: str) -> bool:
        """Another backward here is scaled: then this one is the non-AMP path of `if use_amp: ... else: ...`,
        or a separate graph (a reference model) that amplint cannot tell apart; silent. Unless the scaled one
        keeps its graph (`retain_graph=True`) for this backward to reuse: then both losses feed one model."""
        if other.kind is not EventKind.BACKWARD or not other.scaled or other.scaler != scaler:
            return False
        if exclusive(facts, other.frame, backward.frame):
            return True
        return not (_keeps_graph(facts, other) and other.index < backward.index)

    @staticmethod
    def _plain(facts: ModuleFacts, backward: Event, scaling_names: dict[tuple[str, int], bool]) -> bool:
        """A tensor's own `.backward()`: no positional argument, a receiver that is not a framework object, not
        a loss bound by `with ... as loss` (apex) or computed by something that scales. `scaling_names`: the
        answers so far for a name in a function (a name bound N times and backpropagated N times is read once)."""
        node = backward.node
        if not isinstance(node.func, cst.Attribute) or any(a.keyword is None for a in node.args):
            return False
        receiver = node.func.value
        if _says_scale(receiver):
            return False
        name = dotted_name(receiver)
        if name is not None:
            if FRAMEWORK_RECEIVERS.search(name.rsplit(".", 1)[-1].lower()):
                return False
            function = backward.frame.function()
            if name in facts.with_as_names(function):
                return False
            key = (name, id(function))  # a name's bindings depend on its function only (`ModuleFacts.bindings`)
            if key not in scaling_names:
                scaling_names[key] = any(_says_scale(assignment.value)
                                         for assignment in facts.bindings(name, backward.frame))
            if scaling_names[key]:
                return False
        return True

    @staticmethod
    def _step_after(facts: ModuleFacts, indexed: _FunctionEvents, backward: Event) -> Event | None:
        """The first `scaler.step(...)` this backward's gradients reach, unless a plain step consumes them first."""
        for event in indexed.steps_after(backward.index):
            if not may_follow(facts, backward.frame, event.frame):
                continue
            if event.kind is EventKind.OPTIMIZER_STEP:
                return None
            if event.kind is EventKind.SCALER_STEP and event.scaler and loops_within(backward.frame, event.frame):
                if scaler_enabled(facts, event.scaler, event.frame) is False:
                    return None
                return event
        return None

    @staticmethod
    def _fix(facts: ModuleFacts, backward: Event, scaler: str, applicability: Applicability) -> FixPlan | None:
        receiver = backward.node.func.value
        bare = receiver.with_changes(lpar=[], rpar=[]) if hasattr(receiver, "lpar") else receiver
        scale = cst.parse_expression(f"{scaler}.scale(_)")
        scale = scale.with_changes(args=[cst.Arg(bare)])
        new = backward.node.with_changes(func=backward.node.func.with_changes(value=scale))
        return FixPlan(f"Scale the loss: `{scaler}.scale(...).backward()`",
                       lambda: replace_nodes(facts.module, {backward.node: new}), applicability)


class _FunctionEvents:
    """One function's events as AMP009 asks about them for each of its backwards: the steps after a place, the
    scaled backwards of a scaler. Built once per function, so that N backwards cost N lookups, not N scans."""

    def __init__(self, facts: ModuleFacts, events: list[Event]) -> None:
        self.steps = Ordered()
        for event in events:
            if event.kind in (EventKind.OPTIMIZER_STEP, EventKind.SCALER_STEP):
                self.steps.add(event)
        self._scaled: dict[str | None, list[Event]] = {}
        for event in events:
            if event.kind is EventKind.BACKWARD and event.scaled:
                self._scaled.setdefault(event.scaler, []).append(event)
        for key, scaled in self._scaled.items():
            # The order `_separate_scaled_backward` settles soonest in: a backward that keeps no graph answers for
            # every other (one is enough), then the latest first (a later one answers at once).
            keeping = [e for e in scaled if _keeps_graph(facts, e)]
            dropping = [e for e in scaled if not _keeps_graph(facts, e)]
            self._scaled[key] = dropping[:1] + sorted(keeping, key=lambda e: e.index, reverse=True)

    def steps_after(self, index: int) -> Iterator[Event]:
        """The steps after `index`, in order (found by bisection, read lazily: most searches end at the first)."""
        return self.steps.after(index)

    def scaled(self, scaler: str) -> list[Event]:
        return self._scaled.get(scaler, [])


def _keeps_graph(facts: ModuleFacts, backward: Event) -> bool:
    """Does the backward pass `retain_graph=True` (its graph kept for another backward)?"""
    return any(arg.keyword is not None and arg.keyword.value == "retain_graph"
               and facts.code(arg.value) == "True" for arg in backward.node.args)


def _says_scale(node: cst.CSTNode) -> bool:
    """Does the code of an expression (its names and strings, not its comments) say `scale`?"""
    return any(vocab.SCALE in word.lower() for word in code_words(node))
