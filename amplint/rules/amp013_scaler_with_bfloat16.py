"""AMP013 scaler-with-bfloat16."""

from __future__ import annotations

import os
import re
from functools import cached_property
from typing import Iterator

from amplint.lazy import libcst as cst
from amplint import vocabulary as vocab
from amplint.facts.walk import walk
from amplint.lazy import visitor_class

from amplint.diagnostics import Applicability
from amplint.facts import Event, ModuleFacts, Region, RegionState
from amplint.facts.module import scaler_enabled
from amplint.facts.names import GRAD_SCALERS, code_words, dotted_name
from amplint.index.summary import Summary
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.screen import Ask, AskProject
from amplint.vocabulary import Effect

# Any of these in the module's code (a name, a string value: `code_words`) means float16 may be in play
# somewhere: stay silent. `torch.float16`, `args.fp16`, `"--fp16"`, `x.half()`, `torch.half`, `"half"`.
FLOAT16_WORD = re.compile(r"(?<![bB])float16|fp16|(?:^|\.)half$")
FLOAT16_TEXT = re.compile(r"(?<![bB])float16|fp16|half")  # a superset of the words, searched in the text first


def bfloat16_regions_reached(view) -> tuple[str, int] | None:
    """For a module that opens no region itself: (module name, line) of a bfloat16 region that a function it calls
    opens (a few calls deep, in the project: a decorated `forward` of another module), when every region its calls
    reach is bfloat16; None when none is, or one is float16 or of a dtype not known."""
    from amplint.index.project import calls_leaving

    if view is None:
        return None
    found = None
    for _, _, target in calls_leaving(view, "callee"):
        if view.reaches(target, (Effect.OTHER_REGION,)) is not None:
            return None
        reached = view.reaches(target, (Effect.BFLOAT16_REGION,))
        if reached is not None and found is None:
            doer = reached[0][-1]
            summary = view.function(doer)
            found = (view.project.names.get(doer.module, "?"), summary.lines.get(Effect.BFLOAT16_REGION, summary.line))
    return found


def bfloat16_regions_of_callers(view, qualname: str | None = None) -> tuple[str, int] | None:
    """For a module building a scaler in a function that hands it on (returns or stores it: `keeps_scaler`; the
    function `qualname`, else any): (file name, line) of a bfloat16 region of the modules calling that function,
    when every module calling it opens only bfloat16 regions and names no float16 in its text; None when a caller
    is not found, opens a region of another or unknown dtype, or may say float16."""
    from amplint.rules.across import importing_callers

    record = view.record(view.path) if view is not None else None
    if record is None:
        return None
    found = None
    for name, summary in record.functions.items():
        if (qualname is not None and name != qualname) or not {Effect.BUILDS_SCALER, Effect.KEEPS_SCALER} <= summary.does:
            continue
        callers = importing_callers(view, name)
        if not callers:
            return None
        for path, caller in callers:
            text = view.text(path) or ""
            if FLOAT16_TEXT.search(text) or any(Effect.OTHER_REGION in f.does for f in caller.functions.values()):
                return None
            lines = [f.lines[Effect.BFLOAT16_REGION] for f in caller.functions.values()
                     if Effect.BFLOAT16_REGION in f.does]
            if not lines:
                return None
            found = found or (os.path.basename(path), min(lines))
    return found


class ScalerWithBfloat16(Rule):
    """## What it does
    Checks for a GradScaler in a module whose autocast regions all use `dtype=torch.bfloat16` (or CPU autocast,
    whose default is bfloat16), with no float16 anywhere in the module. A module that opens no region itself is
    judged by the regions the functions it calls open, in this module or another (a decorated `forward`): all of
    them bfloat16, none float16 or of a dtype not known. A scaler a function builds and hands on (returns it,
    `GradScaler() if use_bfloat16 else None`) is judged by the modules calling that function: every one of them
    opening only bfloat16 regions and naming no float16 (reported without a fix: its uses are theirs).

    Applies to torch >= 1.10 (bfloat16 autocast).

    ## Why is this bad?
    Loss scaling exists because float16 has a narrow exponent range: small gradients underflow to zero unless
    the loss is multiplied first. bfloat16 has float32's exponent range, so nothing underflows and the scaler
    never finds an overflow to skip. Measured on CPU with torch 2.13: 300 steps with
    `GradScaler` + bfloat16 autocast give parameters bit-identical to the same 300 steps without a scaler (SGD
    and AdamW). The scaler only adds work every step (a multiply, an unscale pass over every gradient with an
    inf/NaN check, a scale update: 59.1 instead of 48.0 dispatched ops per step for a two-layer model) and a
    piece of state to checkpoint.

    ## Example
    ```python
    import torch

    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```

    ## Use instead
    ```python
    import torch

    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    ```

    ## Fix safety
    Unsafe: a safe fix cannot change what a correct program computes. Without overflow the result is bit-for-bit
    the same, but a step whose gradients hold inf/NaN was skipped by the scaler and is now applied, checkpoints
    no longer carry the scaler's state, and code that later switches the dtype to float16 would need the scaler
    back. The fix removes the construction, `scaler.update()` and `scaler.unscale_(...)`, and rewrites
    `scaler.scale(loss)` as `loss` and `scaler.step(optimizer)` as `optimizer.step()`; no fix when the scaler is
    used any other way (saved, passed to a function, `get_scale()`). Own-line comments above the removed
    statements (commented-out alternatives) stay; only comments on the removed lines go.

    ## Limits
    Silent when any autocast region of the module may be float16 (a dtype that is not a literal bfloat16 is
    taken as maybe float16), when the module's code mentions float16/half/fp16 at all (a name such as
    `torch.float16`, `args.fp16` or `x.half()`, or a string value such as `"--fp16"` or `"half"`, which may select
    float16 at run time; comments and docstrings run nothing and do not count), when the scaler is built with an
    `enabled=` flag (typically tied to the dtype), and when the module has no autocast region.
    """

    code = "AMP013"
    name = "scaler-with-bfloat16"
    severity = "warning"  # needless work: the parameters are bit-identical without the scaler
    words = (vocab.GRAD_SCALER,)  # the finding is a GradScaler construction
    # Regions here are any call that makes an autocast (not only with-items): `autocast` is named; and only
    # bfloat16 regions: a bfloat16 dtype, or CPU autocast (whose default is bfloat16).
    requires = (Ask(Summary.imports_module, vocab.TORCH) & Ask(Summary.calls_api, *GRAD_SCALERS)
                & Ask(Summary.mentions, vocab.AUTOCAST) & Ask(Summary.contains, vocab.BFLOAT16, vocab.CPU))
    requires_across = (Ask(Summary.imports_module, vocab.TORCH) & Ask(Summary.calls_api, *GRAD_SCALERS)
                       & (AskProject(bfloat16_regions_reached) | AskProject(bfloat16_regions_of_callers)))
    min_torch = "1.10"
    fix = "unsafe"

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        builds = [e for e in facts.events if e.kind == Effect.BUILDS_SCALER and e.bound_to]
        if not builds:
            return
        regions = self._regions(facts)
        active = [r for r in regions if r.state is not RegionState.OFF]
        if active:
            where = f"line {facts.line_of(active[0].opener)}"
        else:  # the module opens none: those that the functions it calls open (the index's region dtypes)
            reached = bfloat16_regions_reached(facts.project)
            if reached is None:
                yield from self._handed_on(facts, builds)
                return
            module, line = reached
            where = f"in `{module}`, line {line}"
        if any(_dtype(r) != vocab.BFLOAT16 for r in active) or _float16_in_code(facts):
            return  # the module's code walked last: only where every region is bfloat16
        index = _Index(facts, builds)
        for build in builds:
            key = build.bound_to
            if scaler_enabled(facts, key, build.frame) is not True:
                continue
            if key not in index.used:
                continue
            message = (f"`{key}` scales losses for bfloat16 autocast only ({where}), "
                       f"where loss scaling changes nothing")
            fix = _RemoveScaler(facts, build, index).plan()
            yield Finding(build.node, message, fix, help=None if fix else f"Remove `{key}`")

    @staticmethod
    def _handed_on(facts: ModuleFacts, builds: list[Event]) -> Iterator[Finding]:
        """A scaler a function of this module builds and hands on (`return GradScaler() if use_bf16 else None`),
        whose every caller, in other modules, opens only bfloat16 regions: reported here, without a fix (its uses
        are in the callers' modules)."""
        if _float16_in_code(facts):
            return
        for build in builds:
            info = facts.function_info(build.frame)
            if info is None or scaler_enabled(facts, build.bound_to, build.frame) is not True:
                continue
            reached = bfloat16_regions_of_callers(facts.project, info.qualname)
            if reached is None:
                continue
            where = f"{reached[0]}:{reached[1]}"
            yield Finding(build.node, f"`{build.bound_to}` is handed on to code using bfloat16 autocast only "
                                      f"({where}), where loss scaling changes nothing",
                          help=f"Build no GradScaler for bfloat16 (drop `{build.bound_to}` here and its uses "
                               f"by the callers)")

    @staticmethod
    def _regions(facts: ModuleFacts) -> list[Region]:
        regions = []
        for call in facts.calls:
            region = facts.classify_context(call.node, call.frame)
            if isinstance(region, Region) and region.opener is call.node:
                regions.append(region)
        return regions


def _float16_in_code(facts: ModuleFacts) -> bool:
    """Does the module's code name float16 anywhere (not its comments or docstrings: a comment mentioning
    `torch.float16` runs nothing)? The text is searched first: no word there, none in the code."""
    if not FLOAT16_TEXT.search(facts.source):
        return False
    return any(FLOAT16_WORD.search(word) for word in code_words(facts.module))


def _dtype(region: Region) -> str | None:
    if region.dtype is not None:
        return region.dtype
    if region.device == "cpu" and isinstance(region.opener, cst.Call):
        return vocab.BFLOAT16  # CPU autocast's default dtype
    return None


class _Index:
    """What AMP013 asks about each scaler it would remove, read once per module: the scalers used (stepped,
    scaling, backpropagated through or updated), how many times each scaler and each constructor name is
    referenced, the calls of each receiver, the block of each statement, the `from ... import` lines of each
    local name. So N scalers cost N lookups, not N walks of the module."""

    USES = (Effect.SCALER_STEP, Effect.SCALER_SCALE, Effect.BACKWARD, Effect.SCALER_UPDATE)

    def __init__(self, facts: ModuleFacts, builds: list[Event]) -> None:
        self.facts = facts
        self.used = {e.scaler for e in facts.events if e.kind in self.USES}
        self._names = {b.bound_to for b in builds} | {b.node.func.value for b in builds
                                                       if isinstance(b.node.func, cst.Name)}
        self._removed_calls: dict[str, tuple[dict, list, int] | None] = {}

    @cached_property
    def references(self) -> dict[str, int]:
        """How many times each scaler and constructor name of the module's builds is referenced outside imports."""
        references = visitor_class(_References)(self._names)
        walk(self.facts.module, references)
        return references.counts

    @cached_property
    def calls(self) -> dict[str | None, list]:
        """The calls of each receiver, in source order."""
        by_receiver: dict[str | None, list] = {}
        for call in self.facts.calls:
            by_receiver.setdefault(call.receiver, []).append(call)
        return by_receiver

    def removed_calls(self, key: str) -> tuple[dict, list, int] | None:
        """What removing scaler `key` makes of its calls (once per name: every scaler of that name shares them):
        the calls rewritten (`key.scale(loss)` -> `loss`, `key.step(opt)` -> `opt.step()`), the statements
        removed (`key.update()`, `key.unscale_(opt)`) and how many calls that is; None when a call is of another
        kind."""
        if key not in self._removed_calls:
            self._removed_calls[key] = _removed_calls(self.calls.get(key, ()))
        return self._removed_calls[key]

    @cached_property
    def imports(self) -> dict[str, list[cst.SimpleStatementLine]]:
        """The lines that are one `from ... import` (not `*`) binding a local name, by that name, in source order."""
        lines: dict[str, list[cst.SimpleStatementLine]] = {}

        class Imports(cst.CSTVisitor):
            def visit_SimpleStatementLine(self, line: cst.SimpleStatementLine) -> None:
                if len(line.body) != 1 or not isinstance(line.body[0], cst.ImportFrom):
                    return
                if isinstance(line.body[0].names, cst.ImportStar):
                    return
                for name in dict.fromkeys(_local_name(a) for a in line.body[0].names):
                    lines.setdefault(name, []).append(line)

        self.facts.module.visit(Imports())
        return lines


def _removed_calls(calls) -> tuple[dict, list, int] | None:
    """`_Index.removed_calls` of the calls of one scaler name."""
    replacements: dict = {}
    removed: list[cst.CSTNode] = []
    handled = 0
    for call in calls:
        node = call.node
        if call.method == vocab.SCALE and len(node.args) == 1 and node.args[0].keyword is None \
                and not node.args[0].star:
            replacements[node] = _parenthesized(node.args[0].value)
        elif call.method == vocab.STEP and len(node.args) == 1 and node.args[0].keyword is None \
                and dotted_name(node.args[0].value):
            replacements[node] = cst.parse_expression(f"{dotted_name(node.args[0].value)}.step()")
        elif call.method in (vocab.UPDATE, vocab.UNSCALE) and _single(call.statement, cst.Expr) and \
                call.statement.body[0].value is node:
            removed.append(call.statement)
        else:
            return None
        handled += 1
    return replacements, removed, handled


def _local_name(alias: cst.ImportAlias) -> str | None:
    return (alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name)
            else dotted_name(alias.name))


class _RemoveScaler:
    """The rewrite that takes a scaler out of a module, if every use of it is one we know how to remove."""

    def __init__(self, facts: ModuleFacts, build: Event, index: _Index) -> None:
        self.facts = facts
        self.build = build
        self.key = build.bound_to
        self.index = index

    def plan(self) -> FixPlan | None:
        replacements = self._replacements()
        if replacements is None:
            return None
        return FixPlan(f"Remove `{self.key}`: `{self.key}.scale(loss)` -> `loss`, "
                       f"`{self.key}.step(opt)` -> `opt.step()`",
                       lambda: replace_nodes(self.facts.module, replacements), Applicability.UNSAFE)

    def _replacements(self) -> dict | None:
        build_statement = self.build.call.statement
        if not _single(build_statement, cst.Assign) or build_statement.body[0].value is not self.build.node:
            return None
        uses = self.index.removed_calls(self.key)
        if uses is None:
            return None  # a call of the scaler we cannot undo
        rewritten, removed_uses, handled = uses
        if 1 + handled != self.index.references.get(self.key, 0):
            return None  # used some other way: saved, passed along, get_scale()...
        removed_statements = [build_statement, *removed_uses]
        if not self._blocks_survive(removed_statements):
            return None
        replacements = dict(rewritten)
        for statement in removed_statements:
            replacements[statement] = cst.RemoveFromParent()
        self._drop_unused_import(replacements)
        return replacements

    def _blocks_survive(self, removed: list[cst.CSTNode]) -> bool:
        """No block may lose all of its statements."""
        taken: dict[int, int] = {}  # id of a block's statements -> how many of them are removed
        for statement in {id(r): r for r in removed}.values():
            found = self.facts.block_of(statement)
            if found is not None and not found[2]:
                block = found[0]
                taken[id(block)] = taken.get(id(block), 0) + 1
                if taken[id(block)] == len(block):
                    return False
        return True

    def _drop_unused_import(self, replacements: dict) -> None:
        func = self.build.node.func
        if not isinstance(func, cst.Name):
            return
        if self.index.references.get(func.value, 0) != 1:
            return
        for line in self.index.imports.get(func.value, ()):
            statement = line.body[0]
            local = [a for a in statement.names if _local_name(a) == func.value]
            kept = [a for a in statement.names if a is not local[0]]
            if not kept:
                replacements[line] = cst.RemoveFromParent()
                continue
            if statement.lpar is None:
                kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            replacements[statement] = statement.with_changes(names=kept)


class _References:  # a libcst visitor once made one with amplint.lazy.visitor_class
    """How many times each of some dotted names (`scaler`, `self.scaler`) is referenced outside imports (`self`
    within `self.scaler` is a reference to `self` too)."""

    def __init__(self, keys: set[str]) -> None:
        super().__init__()
        self.keys = keys
        self.counts: dict[str, int] = {}

    def _count(self, name: str | None) -> None:
        if name in self.keys:
            self.counts[name] = self.counts.get(name, 0) + 1

    def visit_Import(self, node: cst.Import) -> bool:
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        walk(node.value, self)
        return False

    def visit_Param(self, node: cst.Param) -> bool:
        self._count(node.name.value)
        for child in (node.annotation, node.default):
            if child is not None:
                walk(child, self)
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        self._count(dotted_name(node))
        walk(node.value, self)  # its receiver: another of the names (`self` of `self.scaler`) may be there
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self._count(node.value)


def _single(statement: cst.CSTNode, kind: type) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(
        statement.body[0], kind)


def _parenthesized(value: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(value, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) or getattr(value, "lpar", None):
        return value
    return value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
