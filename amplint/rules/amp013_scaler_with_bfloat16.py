"""AMP013 scaler-with-bfloat16."""

from __future__ import annotations

from typing import Iterator

from amplint.lazy import libcst as cst

from amplint import vocabulary as vocab
from amplint.diagnostics import Applicability
from amplint.facts import Event, ModuleFacts
from amplint.facts.bfloat16 import (bfloat16_regions_of_callers, bfloat16_regions_reached, float16_in_code,
                                    opened_regions, region_dtype)
from amplint.facts.module import scaler_enabled
from amplint.facts.names import GRAD_SCALERS
from amplint.facts.scalers import ScalerUses, local_name, single
from amplint.facts.across import importing_callers
from amplint.rules.base import Finding, FixPlan, Rule, replace_nodes
from amplint.rules.screen import Ask, AskProject, Summary


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
                       & (AskProject(bfloat16_regions_reached)
                          | AskProject(bfloat16_regions_of_callers, importing_callers)))
    min_torch = "1.10"
    fix = "unsafe"

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:
        scalers = ScalerUses(facts)
        if not scalers.builds:
            return
        regions = opened_regions(facts)
        if regions:
            where = f"line {facts.line_of(regions[0].opener)}"
        else:  # the module opens none: those that the functions it calls open (the index's region dtypes)
            reached = bfloat16_regions_reached(facts.project)
            if reached is None:
                yield from self._handed_on(facts, scalers.builds)
                return
            module, line = reached
            where = f"in `{module}`, line {line}"
        if any(region_dtype(facts, r) != vocab.BFLOAT16 for r in regions) or float16_in_code(facts):
            return  # the module's code walked last: only where every region is bfloat16
        for build in scalers.builds:
            key = build.bound_to
            if scaler_enabled(facts, key, build.frame) is not True or key not in scalers.used:
                continue
            message = (f"`{key}` scales losses for bfloat16 autocast only ({where}), "
                       f"where loss scaling changes nothing")
            fix = _RemoveScaler(facts, build, scalers).plan()
            yield Finding(build.node, message, fix, help=None if fix else f"Remove `{key}`")

    @staticmethod
    def _handed_on(facts: ModuleFacts, builds: list[Event]) -> Iterator[Finding]:
        """A scaler a function of this module builds and hands on (`return GradScaler() if use_bf16 else None`),
        whose every caller, in other modules, opens only bfloat16 regions: reported here, without a fix (its uses
        are in the callers' modules)."""
        if float16_in_code(facts):
            return
        for build in builds:
            info = facts.function_info(build.frame)
            if info is None or scaler_enabled(facts, build.bound_to, build.frame) is not True:
                continue
            reached = bfloat16_regions_of_callers(facts.project, importing_callers, info.qualname)
            if reached is None:
                continue
            where = f"{reached[0]}:{reached[1]}"
            yield Finding(build.node, f"`{build.bound_to}` is handed on to code using bfloat16 autocast only "
                                      f"({where}), where loss scaling changes nothing",
                          help=f"Build no GradScaler for bfloat16 (drop `{build.bound_to}` here and its uses "
                               f"by the callers)")


class _RemoveScaler:
    """The rewrite that takes a scaler out of a module, if every use of it is one we know how to remove."""

    def __init__(self, facts: ModuleFacts, build: Event, scalers: ScalerUses) -> None:
        self.facts = facts
        self.build = build
        self.key = build.bound_to
        self.scalers = scalers

    def plan(self) -> FixPlan | None:
        replacements = self._replacements()
        if replacements is None:
            return None
        return FixPlan(f"Remove `{self.key}`: `{self.key}.scale(loss)` -> `loss`, "
                       f"`{self.key}.step(opt)` -> `opt.step()`",
                       lambda: replace_nodes(self.facts.module, replacements), Applicability.UNSAFE)

    def _replacements(self) -> dict | None:
        build_statement = self.build.call.statement
        if not single(build_statement, cst.Assign) or build_statement.body[0].value is not self.build.node:
            return None
        uses = self.scalers.without(self.key)
        if uses is None:
            return None  # a call of the scaler we cannot undo
        if 1 + uses.count != self.scalers.references.get(self.key, 0):
            return None  # used some other way: saved, passed along, get_scale()...
        removed_statements = [build_statement, *uses.inert]
        if not self._blocks_survive(removed_statements):
            return None
        replacements: dict = {node: _parenthesized(operand) if method == vocab.SCALE else
                              cst.parse_expression(f"{operand}.step()") for node, method, operand in uses.rewritten}
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
        if self.scalers.references.get(func.value, 0) != 1:
            return
        for line in self.scalers.imports.get(func.value, ()):
            statement = line.body[0]
            local = [a for a in statement.names if local_name(a) == func.value]
            kept = [a for a in statement.names if a is not local[0]]
            if not kept:
                replacements[line] = cst.RemoveFromParent()
                continue
            if statement.lpar is None:
                kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            replacements[statement] = statement.with_changes(names=kept)


def _parenthesized(value: cst.BaseExpression) -> cst.BaseExpression:
    """The loss as it may stand where `scaler.scale(loss)` stood: parenthesized unless it is one term."""
    if isinstance(value, (cst.Name, cst.Attribute, cst.Call, cst.Subscript)) or getattr(value, "lpar", None):
        return value
    return value.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
