"""The findings of an fp32 island's inputs, shared by AMP006 (inputs shown low precision) and AMP015 (inputs
whose dtype is not shown): the analysis is `amplint/facts/islands.py`; here, the screen's question and how an
input is reported and fixed."""

from __future__ import annotations

import ast

from amplint.lazy import libcst as cst

from amplint.diagnostics import Applicability
from amplint.facts.islands import MAX_MESSAGE, IslandInput, Source
from amplint.facts.module import ModuleFacts
from amplint.rules.base import Finding, FixPlan, replace_nodes


def disabled_region_possible(summary) -> bool:
    """The screen's question: a call that can open a disabled region, one passing a literal `False` (positionally
    or as `enabled=False`) to something that can open a region, or to a `partial`."""
    return summary.ask(summary.has_token("False"), lambda: any(
        summary.callee_can_open(call.func) or (type(call.func) is ast.Attribute and call.func.attr == "partial")
        or (type(call.func) is ast.Name and (call.func.id == "partial"
                                             or "partial" in summary.import_bound.get(call.func.id, ())))
        for call in summary.false_calls))


def island_finding(facts: ModuleFacts, found: IslandInput) -> Finding:
    """The finding for an input of an fp32 island: AMP006's message for one shown low precision, AMP015's for one
    whose dtype is not shown; a `.float()` at each use, safe only where the value is shown low and surely a
    floating tensor, and not a parameter (a caller may pass anything)."""
    name, source, uses = found.name, found.source, found.uses
    notes = tuple(source.notes) if found.known else ()
    message = source.text(name) if found.known else unknown_text(source, name)
    if source.container or found.starred:
        return Finding(found.at, message, help=f"Cast the tensors `{name}` holds with `.float()` before the "
                                              f"fp32 region", notes=notes)
    if found.in_place:
        return Finding(found.at, message, help=f"Cast `{name}` once before the fp32 region "
                                              f"(`{name} = {name}.float()`): an in-place op in the region "
                                              f"writes into it", notes=notes)

    def rebuild(uses=uses):
        return replace_nodes(facts.module, {
            u: cst.Call(func=cst.Attribute(value=u, attr=cst.Name("float"))) for u in uses
        })

    safe = found.known and found.floating and not source.parameter
    applicability = Applicability.SAFE if safe else Applicability.UNSAFE
    return Finding(found.at, message,
                   FixPlan(f"Cast `{name}` with `.float()` inside the fp32 region", rebuild, applicability),
                   notes=notes)


def unknown_text(source: Source, name: str) -> str:
    """AMP015's message: the value's dtype is not shown."""
    text = f"`{name}` enters the fp32 region at line {source.line} without a cast; its dtype is not shown"
    return text if len(text) <= MAX_MESSAGE else f"`{name}` enters the fp32 region uncast; dtype not shown"
