"""A backward on a loss not scaled while a scaler serves the optimizer: is `loss.backward()` a tensor's own backward
(not a framework's, not on a loss whose code says `scale`) whose gradients reach a `scaler.step(optimizer)` that
unscales them, with no plain step consuming them first and no scaled backward of that scaler beside it (the AMP
path of `if use_amp: ... else: ...`, or a separate graph)? And how the loss is known unscaled: the function
computes it from nothing scaled, or every caller the project index sees hands it over unscaled. Asked for each
backward of a module, answered once per module (`ScaledLosses`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.vocabulary import Effect
from amplint.facts.model import Event
from amplint.facts.module import ModuleFacts, exclusive, loops_within, may_follow, scaler_enabled
from amplint.facts.names import code_words, dotted_name
from amplint.facts.switches import guarded_by_amp_test
from amplint.facts.timeline import Ordered
from amplint.index.flows import UNSCALED, Located, parameter_flow, parameters_of
from amplint.index.project import Target

# Receivers of `.backward(...)` that are not tensors: frameworks that scale the loss themselves.
FRAMEWORK_RECEIVERS = re.compile(r"(^|_)(accelerator|fabric|engine|trainer|deepspeed|amp|self|model)$")


@dataclass(frozen=True)
class Unscaled:
    """A backward on a loss not scaled (`backward`) whose gradients `step`, a `scaler.step(...)`, unscales.
    `callers`: None when the function computes the loss from nothing scaled; else the loss comes from its
    parameters and this many call sites the project index sees (the most for one parameter) hand it unscaled."""

    backward: Event
    step: Event
    callers: int | None


class ScaledLosses:
    """The unscaled backwards of one module, asked for each backward: each function's events are indexed once for
    all its backwards, a name's bindings read once per function, the module's `ast` tree (for the flows of the
    losses) built when first asked."""

    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self._functions: dict[int, _FunctionEvents] = {}
        self._scaling_names: dict[tuple[str, int], bool] = {}  # (name, id of function) -> bound to what scales
        self._located: Located | None = None

    def unscaled(self, backward: Event) -> Unscaled | None:
        """The event as an `Unscaled` backward, or None: not a plain backward (`_plain`), one under no_grad/
        inference_mode (no backward can run there), one whose gradients reach no `scaler.step(...)` first
        (`_step_after`), one beside a scaled backward of that scaler (`separate_scaled_backward`) or guarded by
        an AMP test, or one whose loss is not known unscaled."""
        facts = self.facts
        if backward.kind != Effect.BACKWARD or backward.scaled or not self._plain(backward):
            return None
        if facts.no_grad_opener(backward.frame) is not None:
            return None
        function = backward.frame.function()
        if id(function) not in self._functions:
            self._functions[id(function)] = _FunctionEvents(facts, facts.events_in(function))
        indexed = self._functions[id(function)]
        step = _step_after(facts, indexed, backward)
        if step is None:
            return None
        scaler = step.scaler
        if any(separate_scaled_backward(facts, e, backward, scaler) for e in indexed.scaled(scaler)) \
                or guarded_by_amp_test(facts, backward, step, scaler):
            return None
        if self._located is None:
            self._located = Located(facts.source)
        start = facts.position(backward.node)[0]
        flow = self._located.receiver_flow(start.line, start.column)
        if flow == UNSCALED:
            return Unscaled(backward, step, None)
        callers = self._callers_handing_unscaled(backward, parameters_of(flow))
        return Unscaled(backward, step, callers) if callers is not None else None

    def _callers_handing_unscaled(self, backward: Event, params: list[str]) -> int | None:
        """How many call sites the project index sees hand the loss's parameters over unscaled (the most for one
        parameter; at least one); None when not known: no parameter, a parameter with no caller in view or a
        caller passing something scaled or unknown."""
        info = self.facts.function_info(backward.frame.function())
        if not params or info is None:
            return None
        view = self.facts.project
        target = Target(view.path, info.qualname)
        sites = 0
        for param in params:
            handed, count = parameter_flow(view, target, param)
            if handed != UNSCALED:
                return None
            sites = max(sites, count)
        return sites

    def _plain(self, backward: Event) -> bool:
        """A tensor's own `.backward()`: no positional argument, a receiver that is not a framework object, not
        a loss bound by `with ... as loss` (apex) or computed by something that scales (a name bound N times and
        backpropagated N times is read once per function)."""
        facts = self.facts
        node = backward.node
        if not isinstance(node.func, cst.Attribute) or any(a.keyword is None for a in node.args):
            return False
        receiver = node.func.value
        if says_scale(receiver):
            return False
        name = dotted_name(receiver)
        if name is not None:
            if FRAMEWORK_RECEIVERS.search(name.rsplit(".", 1)[-1].lower()):
                return False
            function = backward.frame.function()
            if name in facts.with_as_names(function):
                return False
            key = (name, id(function))  # a name's bindings depend on its function only (`ModuleFacts.bindings`)
            if key not in self._scaling_names:
                self._scaling_names[key] = any(says_scale(assignment.value)
                                               for assignment in facts.bindings(name, backward.frame))
            if self._scaling_names[key]:
                return False
        return True


def _step_after(facts: ModuleFacts, indexed: _FunctionEvents, backward: Event) -> Event | None:
    """The first `scaler.step(...)` this backward's gradients reach, unless a plain step consumes them first."""
    for event in indexed.steps_after(backward.index):
        if not may_follow(facts, backward.frame, event.frame):
            continue
        if event.kind == Effect.OPTIMIZER_STEP:
            return None
        if event.kind == Effect.SCALER_STEP and event.scaler and loops_within(backward.frame, event.frame):
            if scaler_enabled(facts, event.scaler, event.frame) is False:
                return None
            return event
    return None


def separate_scaled_backward(facts: ModuleFacts, other: Event, backward: Event, scaler: str) -> bool:
    """Another backward here is scaled: then this one is the non-AMP path of `if use_amp: ... else: ...`,
    or a separate graph (a reference model) that amplint cannot tell apart; silent. Unless the scaled one
    keeps its graph (`retain_graph=True`) for this backward to reuse: then both losses feed one model."""
    if other.kind != Effect.BACKWARD or not other.scaled or other.scaler != scaler:
        return False
    if exclusive(facts, other.frame, backward.frame):
        return True
    return not (keeps_graph(facts, other) and other.index < backward.index)


class _FunctionEvents:
    """One function's events as asked about for each of its backwards: the steps after a place, the scaled
    backwards of a scaler. Built once per function, so that N backwards cost N lookups, not N scans."""

    def __init__(self, facts: ModuleFacts, events: list[Event]) -> None:
        self.steps = Ordered()
        for event in events:
            if event.kind in (Effect.OPTIMIZER_STEP, Effect.SCALER_STEP):
                self.steps.add(event)
        self._scaled: dict[str | None, list[Event]] = {}
        for event in events:
            if event.kind == Effect.BACKWARD and event.scaled:
                self._scaled.setdefault(event.scaler, []).append(event)
        for key, scaled in self._scaled.items():
            # The order `separate_scaled_backward` settles soonest in: a backward that keeps no graph answers for
            # every other (one is enough), then the latest first (a later one answers at once).
            keeping = [e for e in scaled if keeps_graph(facts, e)]
            dropping = [e for e in scaled if not keeps_graph(facts, e)]
            self._scaled[key] = dropping[:1] + sorted(keeping, key=lambda e: e.index, reverse=True)

    def steps_after(self, index: int) -> Iterator[Event]:
        """The steps after `index`, in order (found by bisection, read lazily: most searches end at the first)."""
        return self.steps.after(index)

    def scaled(self, scaler: str) -> list[Event]:
        return self._scaled.get(scaler, [])


def keeps_graph(facts: ModuleFacts, backward: Event) -> bool:
    """Does the backward pass `retain_graph=True` (its graph kept for another backward)?"""
    return any(arg.keyword is not None and arg.keyword.value == "retain_graph"
               and facts.code(arg.value) == "True" for arg in backward.node.args)


def says_scale(node: cst.CSTNode) -> bool:
    """Does the code of an expression (its names and strings, not its comments) say `scale`?"""
    return any(vocab.SCALE in word.lower() for word in code_words(node))
