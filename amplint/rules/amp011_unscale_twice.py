"""AMP011 unscale-twice."""

from __future__ import annotations

import ast
import bisect
from collections import Counter
from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.facts import Event, EventKind, Frame, FrameKind, ModuleFacts
from amplint.facts.collect import target_names
from amplint.facts.names import dotted_name
from amplint.facts.module import branch_condition, may_follow, scaler_enabled
from amplint.facts.loops import Stores, always_reached, block_of_frame, conjuncts, continue_between, frames_between, \
    same_every_iteration
from amplint.index.summary import Summary, names_in
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.screen import Ask
from amplint.rules.scopes import MESSAGE_SNIPPET, snippet


def can_run_again(summary, *names: str) -> bool:
    """The screen's question for this rule: a method call to one of the names that can run twice with nothing
    between: in a loop's body (in its function) other than only `for x in ...` loops over its first argument, or
    with another method call to one of the names, or to `step`, in the same function."""
    def exact() -> bool:
        sites = [site for name in names for site in summary.call_sites_by_name.get(name, ()) if site[2] is not None]
        calls_by_function: dict[int, set[int]] = {}  # id(function) -> ids of its calls to the names or `step`
        for site in sites + [site for site in summary.call_sites_by_name.get(vocab.STEP, ()) if site[2] is not None]:
            calls_by_function.setdefault(id(site[0]), set()).add(id(site[4]))
        for function, _, _, loops, call in sites:
            argument = call.args[0] if call.args else None
            argument = argument.id if type(argument) is ast.Name else None
            if any(not (type(loop) in (ast.For, ast.AsyncFor) and argument is not None
                        and argument in names_in(loop.target)) for loop in loops):
                return True
            if len(calls_by_function[id(function)]) > 1:  # another call besides this one
                return True
        return False

    return summary.ask(summary.has_token(*names, kind="method"), exact)


class UnscaleTwice(Rule):
    """## What it does
    Checks for `scaler.unscale_(optimizer)` called again on the same optimizer before `scaler.update()`. That
    is: twice in a row, after `scaler.step(optimizer)`, or once per iteration of a loop (typically every
    micro-batch under gradient accumulation) whose iterations do not all reach `scaler.update()`.

    Applies to every torch version with `GradScaler.unscale_` (torch >= 1.6).

    ## Why is this bad?
    `unscale_` divides the gradients in place and records that it did, so that `step()` does not divide again;
    the record is cleared only by `update()`. A second call raises, measured on CPU with torch 2.13:
    `RuntimeError: unscale_() has already been called on this optimizer since the last update().`
    (`RuntimeError: unscale_() is being called after step().` after a step). Under gradient accumulation the
    error comes at the second micro-batch; unscaling at the step boundary gives the same accumulated gradient
    as a run without a scaler.

    ## Example
    ```python
    import torch

    scaler = torch.amp.GradScaler("cuda")
    for x, y in micro_batches:
        scaler.scale(loss_fn(model(x), y)).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Use instead
    ```python
    import torch

    scaler = torch.amp.GradScaler("cuda")
    for x, y in micro_batches:
        scaler.scale(loss_fn(model(x), y)).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    An optional clip (`if clip_grad: scaler.unscale_(optimizer)`) in the micro-batch loop is the same mistake:
    its test is the same every micro-batch, so once on it unscales every micro-batch. Silent when a test on the
    way can change between iterations (it may be the accumulation boundary: `if (i + 1) % accum == 0`, a name
    the loop assigns, a call, an attribute another method sets), and when the update runs under the same tests.
    An update that a `continue` between the two can skip (`if (i + 1) % accum != 0: continue`, `if not
    finite: continue`) is not reached by every iteration that unscaled: the next `unscale_` raises.

    ## Fix safety
    Safe. In a loop, the fix moves the `unscale_` (with the gradient clipping right after it) to just before the
    `scaler.step(optimizer)` it belongs to, when nothing it uses is assigned on the way; a plain second call in
    the same block is removed. An `if` whose body is only the `unscale_` and its clips moves as a whole (the test
    is the same in every iteration, so the clip still runs exactly when the flag says); an `if` holding anything
    else, or nested in another test of the loop, gets no fix. Code that raised now runs. Moved statements take
    their own comments (the lines above them) along; a removed call leaves the comments above it in place.

    ## Limits
    Silent when the optimizer is not a plain name (`optimizers[i]`), for a loop over optimizers
    (`for opt in optimizers: scaler.unscale_(opt)`), when the `unscale_` is under a test that may change between
    iterations, and when the update is in another function.
    """

    code = "AMP011"
    name = "unscale-twice"
    words = (vocab.UNSCALE,)
    # A second unscale_ (or a step) before it in the same function, or a loop that repeats it.
    requires = Ask(Summary.calls_method, vocab.UNSCALE) & Ask(can_run_again, vocab.UNSCALE)
    min_torch = "1.6"
    fix = "safe"

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        by_function: dict[int, tuple[list[Event], list[int]]] = {}  # id of function -> (events, their indexes)
        stores = Stores(facts.module)  # what the module binds, collected on the first question
        for unscale in facts.events:
            if unscale.kind is not EventKind.SCALER_UNSCALE or not unscale.optimizer or not unscale.scaler:
                continue
            if scaler_enabled(facts, unscale.scaler, unscale.frame) is False \
                    or facts.no_grad_opener(unscale.frame) is not None:
                continue
            function = unscale.frame.function()
            if id(function) not in by_function:  # once per function, not once per unscale_ in it
                function_events = facts.events_in(function)
                by_function[id(function)] = (function_events, [e.index for e in function_events])
            events, indexes = by_function[id(function)]
            scaler, optimizer = unscale.scaler, unscale.optimizer
            earlier = self._earlier(facts, events, indexes, unscale)
            if earlier is not None:
                after_step = earlier.kind is EventKind.SCALER_STEP
                earlier_call = f"`{scaler}.step(...)`" if after_step else "`unscale_`"
                message = (f"`{snippet(facts, unscale.node, MESSAGE_SNIPPET)}` raises: {earlier_call} at line "
                           f"{facts.line_of(earlier.node)} came first, with no `update()` between")
                fix = None if after_step else self._remove(facts, unscale)
                yield Finding(unscale.node, message, fix, help=None if fix else (
                    "Unscale before the step" if after_step else "Remove the second call"))
                continue
            loop = self._repeating_loop(facts, events, unscale, stores)
            if loop is None:
                continue
            message = (f"`{snippet(facts, unscale.node, MESSAGE_SNIPPET)}` repeats in the loop at line "
                       f"{facts.line_of(loop.node)} with no `update()` between: the second call raises")
            fix = self._move(facts, events, unscale, loop)
            yield Finding(unscale.node, message, fix, help=None if fix else (
                f"Move it just before `{scaler}.step({optimizer})` (unscale once, at the step boundary)"))

    @staticmethod
    def _earlier(facts: ModuleFacts, events: list[Event], indexes: list[int], unscale: Event) -> Event | None:
        """An earlier `unscale_`/`step` of the same optimizer that reaches this one with no update between.
        `indexes`: the events' source indexes (the search starts at this unscale_'s place and goes back)."""
        scaler, optimizer = unscale.scaler, unscale.optimizer
        for position in range(bisect.bisect_left(indexes, unscale.index) - 1, -1, -1):
            event = events[position]
            if not may_follow(facts, event.frame, unscale.frame):
                continue
            if event.kind is EventKind.SCALER_UPDATE and event.scaler == scaler:
                return None
            if event.kind in (EventKind.SCALER_UNSCALE, EventKind.SCALER_STEP) and event.scaler == scaler \
                    and event.optimizer == optimizer:
                # An update between them that is only conditional still leaves a path: flag only when the
                # earlier call is not inside a loop the second one is outside of (handled as a loop case).
                if event.frame.loops_up_to_function() == unscale.frame.loops_up_to_function():
                    return event
                return None
        return None

    @staticmethod
    def _repeating_loop(facts: ModuleFacts, events: list[Event], unscale: Event, stores: Stores) -> Frame | None:
        """The innermost loop (not over optimizers) that runs this unscale_ every iteration while not every
        iteration reaches an update of the scaler.

        An `unscale_` under `if` in the loop counts only when every test on the way is the same in every
        iteration (`if clip_grad:`, `if args.max_norm > 0:`): it then runs every micro-batch whenever it runs at
        all. A test that can change between iterations (`if (i + 1) % accum == 0`, `if i == last`, a call) may
        be the accumulation boundary: silent. An update under the same tests as the unscale_ (the boundary
        written twice) is reached whenever the unscale_ is: silent too."""
        loop, ifs = None, []
        for frame in unscale.frame.ancestors():
            if frame.kind is FrameKind.FUNCTION:
                return None
            if frame.kind is FrameKind.IF:
                ifs.append(frame)
            if frame.kind is FrameKind.LOOP:
                if isinstance(frame.node, cst.For) and unscale.optimizer in target_names(frame.node.target):
                    continue  # one unscale per optimizer
                loop = frame
                break
        if loop is None:
            return None
        if ifs and not all(same_every_iteration(facts, frame, loop, stores) for frame in ifs):
            return None
        updates = [e for e in events if e.kind is EventKind.SCALER_UPDATE and e.scaler == unscale.scaler
                   and e.frame.is_within(loop) and not continue_between(loop, unscale, e)]
        if always_reached(updates, loop):
            return None
        if ifs:
            tests = {branch_condition(facts, frame) for frame in ifs}
            if any({branch_condition(facts, frame) for frame in frames_between(update.frame, loop)
                    if frame.kind is FrameKind.IF} <= tests for update in updates):
                return None  # the update runs under the unscale_'s own tests: whenever it does
            # the same tests written two ways: `if fp16: if mode == "torch":` and `if fp16 and mode == "torch":`
            atoms = set().union(*(conjuncts(frame) for frame in ifs))
            if any(set().union(*(conjuncts(frame) for frame in frames_between(update.frame, loop)
                                 if frame.kind is FrameKind.IF)) <= atoms for update in updates):
                return None
        if not updates and not any(e.kind is EventKind.SCALER_UPDATE and e.scaler == unscale.scaler for e in events):
            return None  # no update in this function at all: the update lives elsewhere, stay silent
        return loop

    @staticmethod
    def _remove(facts: ModuleFacts, unscale: Event) -> FixPlan | None:
        statement = unscale.call.statement
        body = block_of_frame(unscale.frame)
        if not _single_call_statement(statement, unscale.node) or body is None or len(body) < 2:
            return None
        return FixPlan("Remove the second `unscale_`",
                       lambda: replace_nodes(facts.module, {statement: cst.RemoveFromParent()}))

    @staticmethod
    def _move(facts: ModuleFacts, events: list[Event], unscale: Event, loop: Frame) -> FixPlan | None:
        step = next((e for e in events if e.kind is EventKind.SCALER_STEP and e.index > unscale.index
                     and e.scaler == unscale.scaler and e.optimizer == unscale.optimizer), None)
        statement = unscale.call.statement
        if step is None or not _single_call_statement(statement, unscale.node):
            return None
        if sum(1 for e in events if e.kind is EventKind.SCALER_STEP and e.index > unscale.index
               and e.scaler == unscale.scaler and e.optimizer == unscale.optimizer) > 1:
            return None  # a step on each side of an `if`: moving it before one would leave the other unclipped
        target = step.call.statement
        if not isinstance(target, cst.SimpleStatementLine) or len(target.body) != 1:
            return None
        clips = {id(e.call.statement) for e in events if e.kind is EventKind.CLIP}
        if unscale.frame.kind is FrameKind.IF:
            # `if clip_grad:` holding only the unscale_ and its clips: the whole `if` moves (its test is the same
            # in every iteration, `_repeating_loop` checked), so the clip runs under the same flag, at the boundary.
            guard = _guard_to_move(unscale.frame, statement, clips)
            if guard is None or sum(f.kind is FrameKind.IF for f in frames_between(unscale.frame, loop)) != 1:
                return None
            body, moved, clip_lines = block_of_frame(unscale.frame.parent), [guard], list(guard.body.body[1:])
            if body is None or not any(s is guard for s in body):
                return None
        else:
            body = block_of_frame(unscale.frame)
            if body is None or not any(s is statement for s in body):
                return None
            moved = [statement]
            for following in body[[id(s) for s in body].index(id(statement)) + 1:]:
                if id(following) not in clips or not isinstance(following, cst.SimpleStatementLine):
                    break
                moved.append(following)
            clip_lines = moved[1:]
        if len(moved) == len(body):
            return None  # the block would be empty
        # Nothing the moved statements read may be assigned between here and the step (or by the loop).
        used = {name for s in moved for name in _references(s)}
        assigned = set()
        if isinstance(loop.node, cst.For) and not step.frame.is_within(loop):
            assigned.update(name.split(".")[0] for name in target_names(loop.node.target))
        for assignment in facts.assignments:
            if unscale.index < assignment.index < step.index or (
                    not step.frame.is_within(loop) and assignment.frame.is_within(loop)):
                if not any(assignment.statement is s for s in moved):
                    assigned.update(name.split(".")[0] for name in assignment.targets)
        if used & assigned:
            return None
        # A clip whose result is kept (`norm = clip_grad_norm_(...)`) must not be read later in the loop.
        stored = {name for s in clip_lines for a in facts.assignments if a.statement is s for name in a.targets}
        in_loop = _references(loop.node)
        if any(in_loop[name] > 1 for name in stored):
            return None

        def rebuild() -> cst.Module:
            from amplint.rules.rewrite import MOVED, split_blank_lines  # libcst's code generator, when a fix is built

            # The moved statements take their own comments along; the blank lines above the step go above them
            # and the step keeps its comments.
            blank, comments = split_blank_lines(target)
            first = moved[0].with_changes(leading_lines=[*blank, *moved[0].leading_lines])
            placed = [first, *moved[1:], target.with_changes(leading_lines=comments)]
            replacements: dict = {s: MOVED for s in moved}
            replacements[target] = cst.FlattenSentinel(placed)
            return replace_nodes(facts.module, replacements)

        what = f"the `if` around `{snippet(facts, unscale.node)}`" if moved[0] is not statement \
            else f"`{snippet(facts, unscale.node)}`"
        return FixPlan(f"Move {what} to just before `{snippet(facts, step.node)}`", rebuild)


def _guard_to_move(branch: Frame, statement: cst.CSTNode, clips: set[int]) -> cst.If | None:
    """The `if` around an `unscale_` when it can move as a whole: no `else`, and its body is the `unscale_`
    followed only by clip statements."""
    guard = branch.node
    if branch.in_else or not isinstance(guard, cst.If) or guard.orelse is not None \
            or not isinstance(guard.body, cst.IndentedBlock):
        return None
    lines = list(guard.body.body)
    if not lines or lines[0] is not statement:
        return None
    if not all(id(line) in clips and isinstance(line, cst.SimpleStatementLine) for line in lines[1:]):
        return None
    return guard


def _single_call_statement(statement: cst.CSTNode, call: cst.Call) -> bool:
    return (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr) and statement.body[0].value is call)


def _references(node: cst.CSTNode) -> Counter[str]:
    """How often each name and each dotted chain (`self.norm`, and `self`) is read or written in the code of
    `node`: code only, never its comments or strings."""
    found: Counter[str] = Counter()

    class References(cst.CSTVisitor):
        def visit_Name(self, name: cst.Name) -> None:
            found[name.value] += 1

        def visit_Attribute(self, attribute: cst.Attribute) -> None:
            dotted = dotted_name(attribute)
            if dotted is not None:
                found[dotted] += 1

    node.visit(References())
    return found


