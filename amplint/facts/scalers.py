"""The GradScalers of a module by construction and use, and of a project by the functions building one to hand on.

`ScalerUses` answers, once per module, what taking a scaler out of the module touches: the scalers built and bound
to a name, those used (stepped, scaling a loss, backpropagated through, updated), how many times each scaler's and
each constructor's name is referenced, what each call of a scaler is without it (`ScalerCalls`: `scaler.scale(loss)`
is `loss`, `scaler.step(opt)` is `opt.step()`, `scaler.update()` is nothing), and the `from ... import` lines binding
each local name. So N scalers cost N lookups, not N walks of the module. `scaler_builders_handing_on` reads the
project index: the functions of a file that build a scaler and hand it on (return or store it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from amplint.lazy import libcst as cst
from amplint.lazy import visitor_class

from amplint import vocabulary as vocab
from amplint.facts.model import Event
from amplint.facts.module import ModuleFacts
from amplint.facts.names import dotted_name
from amplint.facts.walk import walk
from amplint.vocabulary import Effect


class ScalerUses:
    """The scalers a module builds and uses, read once per module: `builds`, the constructions bound to a name;
    `used`, the names stepped, scaling, backpropagated through or updated; `references`, `calls`, `without` and
    `imports` (below)."""

    USES = (Effect.SCALER_STEP, Effect.SCALER_SCALE, Effect.BACKWARD, Effect.SCALER_UPDATE)

    def __init__(self, facts: ModuleFacts) -> None:
        self.facts = facts
        self.builds: list[Event] = [e for e in facts.events if e.kind == Effect.BUILDS_SCALER and e.bound_to]
        self.used = {e.scaler for e in facts.events if e.kind in self.USES}
        self._names = {b.bound_to for b in self.builds} | {b.node.func.value for b in self.builds
                                                            if isinstance(b.node.func, cst.Name)}
        self._without: dict[str, ScalerCalls | None] = {}

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

    def without(self, key: str) -> ScalerCalls | None:
        """What the calls of scaler `key` are without it (once per name: every scaler of that name shares them);
        None when a call is of another kind."""
        if key not in self._without:
            self._without[key] = _without(self.calls.get(key, ()))
        return self._without[key]

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
                for name in dict.fromkeys(local_name(a) for a in line.body[0].names):
                    lines.setdefault(name, []).append(line)

        self.facts.module.visit(Imports())
        return lines


@dataclass
class ScalerCalls:
    """The calls of one scaler name, each with a meaning without the scaler. `rewritten`, in source order: (the
    call, the method, what it stands for): (`scaler.scale(loss)`, "scale", the `loss` expression), a loss;
    (`scaler.step(opt)`, "step", "opt"), the optimizer's own step. `inert`: the statements `scaler.update()` and
    `scaler.unscale_(opt)`, which do nothing without it."""

    rewritten: list[tuple[cst.Call, str, object]] = field(default_factory=list)
    inert: list[cst.CSTNode] = field(default_factory=list)

    @property
    def count(self) -> int:
        """How many calls of the scaler these are."""
        return len(self.rewritten) + len(self.inert)


def _without(calls) -> ScalerCalls | None:
    """`ScalerUses.without` of the calls of one scaler name."""
    found = ScalerCalls()
    for call in calls:
        node = call.node
        if call.method == vocab.SCALE and len(node.args) == 1 and node.args[0].keyword is None \
                and not node.args[0].star:
            found.rewritten.append((node, vocab.SCALE, node.args[0].value))
        elif call.method == vocab.STEP and len(node.args) == 1 and node.args[0].keyword is None \
                and dotted_name(node.args[0].value):
            found.rewritten.append((node, vocab.STEP, dotted_name(node.args[0].value)))
        elif call.method in (vocab.UPDATE, vocab.UNSCALE) and single(call.statement, cst.Expr) and \
                call.statement.body[0].value is node:
            found.inert.append(call.statement)
        else:
            return None
    return found


def local_name(alias: cst.ImportAlias) -> str | None:
    """The name an import alias binds in the module (`b` of `import a as b`, `a.b` of `import a.b`)."""
    return (alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name)
            else dotted_name(alias.name))


def single(statement: cst.CSTNode, kind: type) -> bool:
    """Is the statement a line holding one small statement of this kind (`cst.Assign`, `cst.Expr`)?"""
    return isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1 and isinstance(
        statement.body[0], kind)


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


def scaler_builders_handing_on(view, qualname: str | None = None) -> list[str] | None:
    """The functions of the view's file (`qualname` alone, else every one) that build a GradScaler and hand it on
    (return or store it: the index's `KEEPS_SCALER`), in the file's order; None when the index has no record of
    the file."""
    record = view.record(view.path) if view is not None else None
    if record is None:
        return None
    return [name for name, summary in record.functions.items()
            if (qualname is None or name == qualname) and {Effect.BUILDS_SCALER, Effect.KEEPS_SCALER} <= summary.does]
