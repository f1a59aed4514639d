"""What a module's calls reach: for a call of a function of this module (by name, or `self.method()`), the
events of that function and of the functions it calls, a few calls deep (the facts layer); for a call of another
module's function, what the project index says it reaches. Each fact is answered with where it is done (`Doer`):
the function, its module and line, so that a message can name the helper that clips. And what a project function
does with what a call hands it (steps or zeroes an optimizer, calls the scaler it receives), and whether a loop
of a function trains (a backward or a step, itself or through a call the index resolves)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from amplint import calls
from amplint import vocabulary as vocab
from amplint.vocabulary import Effect
from amplint.facts.model import Call, Frame, FunctionInfo
from amplint.facts.module import ModuleFacts
from amplint.facts.names import dotted_name
from amplint.index.project import MAX_DEPTH, Target

HELPER_FACTS = (Effect.CLIP, Effect.UNSCALE, Effect.BACKWARD, Effect.SCALER_STEP, Effect.SCALER_UPDATE, Effect.STEP)
HELPER_DEPTH = MAX_DEPTH  # calls followed from the called helper, as the project index does


@dataclass(frozen=True)
class Doer:
    """Where a helper (or a function it calls) does a fact: the function, its module (None: this module) and
    the line; `order`: the fact's place in that function, to compare a clip with a step done by the same one."""

    qualname: str
    module: str | None
    line: int
    order: int
    target: Target | None = None  # the function, when it is another module's

    def where(self) -> str:
        """"`engine.clip_all()`, line 12" or "`Trainer._clip()`, line 12"."""
        name = f"{self.module}.{self.qualname}" if self.module else self.qualname
        return f"`{name}()`, line {self.line}"


class CallReach:
    """What the calls of this module reach: a same-module function through the facts layer (its events, and its
    own calls followed `HELPER_DEPTH` deep), another module's through the project index (`facts.project`)."""

    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self.view = facts.project
        self._infos = {info.qualname: info for info in reversed(facts.functions)}  # the first of a name wins
        self._targets: dict[int, str] = {}  # id of a call node -> the same-module function it calls
        for qualname, sites in facts.call_sites.items():
            for site in sites:
                self._targets[id(site.node)] = qualname
        self._calls: dict[int, list[Call]] = {}  # each function's calls, in source order
        for call in sorted(facts.calls, key=lambda call: call.index):
            self._calls.setdefault(id(call.frame.function()), []).append(call)
        self._indexes = {key: [call.index for call in calls] for key, calls in self._calls.items()}
        self._event_nodes = {id(event.node) for event in facts.events}
        self._done: dict[int, dict[str, Doer] | None] = {}

    def calls_in(self, function, start: int = -1, end: int | None = None) -> list[Call]:
        """The function's calls, in source order; with `start`/`end`, those strictly between (found by bisection:
        a function asked once per clip would otherwise be read once per clip)."""
        calls = self._calls.get(id(function), [])
        if start < 0 and end is None:
            return calls
        indexes = self._indexes.get(id(function), [])
        low = bisect.bisect_right(indexes, start)
        high = len(indexes) if end is None else bisect.bisect_left(indexes, end)
        return calls[low:high]

    def is_event(self, call: Call) -> bool:
        return id(call.node) in self._event_nodes

    def does(self, call: Call) -> dict[str, Doer] | None:
        """The facts of `HELPER_FACTS` the function a call runs does, itself or through its callees (the first
        found breadth first for each); None when the call runs no function the module or the index knows."""
        if id(call.node) not in self._done:
            self._done[id(call.node)] = self._does(call)
        return self._done[id(call.node)]

    def unscales(self, call: Call) -> bool | None:
        """Does the function the call runs reach an `unscale_` (a call, or `unscale_` taken under another name),
        itself or through its callees? None when the call runs no function the module or the index knows."""
        same = self._targets.get(id(call.node))
        if same is not None:
            if Effect.UNSCALE in self.does(call):
                return True
            return self.view.reaches(Target(self.view.path, same), (Effect.UNSCALE,)) is not None
        target = self._other_module(self.facts.function_info(call.frame), call)
        if target is None:
            return None
        return self.view.reaches(target, (Effect.UNSCALE,)) is not None

    def _does(self, call: Call) -> dict[str, Doer] | None:
        same = self._targets.get(id(call.node))
        if same is not None:
            found: dict[str, Doer] = {}
            self._same_module(same, found)
            return found
        target = self._other_module(self.facts.function_info(call.frame), call)
        if target is None:
            return None
        found = {}
        self._across(target, found, need_clip=True)
        return found

    def _same_module(self, qualname: str, found: dict[str, Doer]) -> None:
        frontier, seen = [qualname], {qualname}
        for _ in range(HELPER_DEPTH + 1):
            following = []
            for current in frontier:
                info = self._infos.get(current)
                if info is None:
                    continue
                for event in self.facts.events_in(info.frame):
                    for fact in calls.function_effects(event.kind):
                        if fact in HELPER_FACTS and fact not in found:
                            found[fact] = Doer(current, None, self.facts.line_of(event.node), event.index)
                for inner in self.calls_in(info.frame):
                    # Any unscale or backward counts (`x.unscale_()`, `x.manual_backward(loss)`), whatever the
                    # facts layer knows `x` to be: what the call is needs no knowledge of its names.
                    kind = calls.effect(self.facts.shape(inner.node)) if calls.may_have_effect(
                        inner.method, (inner.qualified,) if inner.qualified else ()) else None
                    for fact in calls.function_effects(kind):
                        if fact in (Effect.UNSCALE, Effect.BACKWARD) and fact not in found:
                            found[fact] = Doer(current, None, self.facts.line_of(inner.node), inner.index)
                    callee = self._targets.get(id(inner.node))
                    if callee is not None:
                        if callee not in seen:
                            seen.add(callee)
                            following.append(callee)
                        continue
                    target = self._other_module(info, inner)
                    if target is not None:
                        self._across(target, found)
            frontier = following

    def _other_module(self, info: FunctionInfo | None, call: Call):
        """The function of another module the call runs, through the project index; None when not known."""
        view = self.view
        if view is None or call.dotted is None or (call.qualified or "").startswith("torch."):
            return None
        target = view.resolve(info.qualname if info else None, call.dotted)
        return target if target is not None and target.module != view.path else None

    def _across(self, target, found: dict[str, Doer], need_clip: bool = False) -> None:
        """What another module's function does, through the index (`need_clip`: nothing more is asked when it
        reaches no clip: the call is then not reported, whatever else it does)."""
        view = self.view
        names = view.project.names
        for fact in HELPER_FACTS:  # "clip" first
            if fact in found:
                continue
            reached = view.reaches(target, (fact,))
            if reached is None and need_clip and fact == Effect.CLIP:
                return
            if reached is not None:
                doer = view.function(reached[0][-1])
                line = doer.lines.get(fact, doer.line)
                doing = reached[0][-1]
                found[fact] = Doer(doing.qualname, names.get(doing.module, "?"), line, line, doing)
        step, scaler_step = found.get(Effect.STEP), found.get(Effect.SCALER_STEP)
        if step is not None and scaler_step is not None and step.target == scaler_step.target:
            # A scaler handed in is known by its step and update (the index's `scaler_step`); another `.step()`
            # in that function (a scheduler's) is then no plain optimizer step.
            del found[Effect.STEP]


def clips_then_steps(does: dict[str, Doer]) -> bool:
    """Does the helper clip and then step the scaler, in one function, the clip first?"""
    clip, step = does.get(Effect.CLIP), does.get(Effect.SCALER_STEP)
    return clip is not None and step is not None and (clip.qualname, clip.module) == (step.qualname, step.module) \
        and clip.order < step.order


# what the project function a call runs does with what it is handed ---------------------------------------------
def _callee_parameters(facts: ModuleFacts, call: Call):
    """The project function a call runs (through the project index) and its parameters as the call's arguments
    fill them (a method's `self` dropped); None when the index does not know the function."""
    view = facts.project
    info = facts.function_info(call.frame)
    target = view.resolve(info.qualname if info else None, call.dotted)
    summary = view.function(target) if target is not None else None
    if summary is None:
        return None
    params = list(summary.params)
    if call.method is not None and params and "." in summary.qualname:
        params = params[1:]
    return summary, params


def hands_an_optimizer(facts: ModuleFacts, call, key: str, loop: Frame) -> bool:
    """Does the call hand, beside `key`, an optimizer the loop does not build: a name built from an optimizer
    class in the function, or one the callee (through the project index) steps or zeroes (`optimizer.zero_grad()`
    on the parameter receiving it)? Then the callee is one stretch of a longer run, not a run of its own."""
    found = _callee_parameters(facts, call)
    if found is None:
        return False
    summary, params = found
    built_in_loop = {name for a in facts.assignments_in(call.frame.function()) if a.frame.is_within(loop)
                     for name in a.targets}
    used = {record.callee for record in summary.calls}
    for position, arg in enumerate(call.node.args):
        name = dotted_name(arg.value)
        if name is None or name == key or name in built_in_loop or arg.star:
            continue
        if facts.optimizer_constructed(name, call.frame):
            return True
        param = arg.keyword.value if arg.keyword is not None else (params[position] if position < len(params)
                                                                     else None)
        if param is not None and {f"{param}.{vocab.ZERO_GRAD}", f"{param}.{vocab.STEP}"} & used:
            return True
    return False


def handed_to_caller_of(facts: ModuleFacts, call, key: str) -> bool:
    """Does the call pass `key` (by position or keyword) to a project function that calls the parameter
    receiving it (`loss_scaler(loss, optimizer)`)?"""
    passed = [(position, arg.keyword.value if arg.keyword is not None else None)
              for position, arg in enumerate(call.node.args) if dotted_name(arg.value) == key and not arg.star]
    if not passed or (call.qualified or "").startswith("torch."):
        return False
    found = _callee_parameters(facts, call)
    if found is None:
        return False
    summary, params = found
    called = {record.callee for record in summary.calls}
    return any((keyword or (params[position] if position < len(params) else None)) in called
               for position, keyword in passed)


def loop_trains(facts: ModuleFacts, frame: Frame) -> bool:
    """Does a loop of the function run a backward or a step (itself, or through a call the project index
    resolves)? A loop that computes returns or metrics (GAE) does not make a per-step function a training loop."""
    function = frame.function()
    view = facts.project
    info = facts.function_info(frame)
    for event in facts.events_in(function):
        if event.kind in (Effect.BACKWARD, Effect.SCALER_STEP, Effect.OPTIMIZER_STEP) \
                and event.frame.loops_up_to_function():
            return True
    for call in facts.calls:
        if call.frame.function() is not function or not call.frame.loops_up_to_function() or call.dotted is None:
            continue
        target = view.resolve(info.qualname if info else None, call.dotted)
        if target is not None and view.reaches(target, (Effect.BACKWARD, Effect.STEP, Effect.SCALER_STEP)) is not None:
            return True
    return False
