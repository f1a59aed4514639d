"""One walk over the module recording imports, calls, assignments, functions and the frames they run in."""

from __future__ import annotations

from amplint.lazy import libcst as cst

from amplint.facts.model import Assignment, Call, Frame, FrameKind, FunctionInfo
from amplint.facts.names import ImportMap, dotted_name


def target_names(target: cst.BaseExpression) -> list[str]:
    """Dotted names bound by an assignment target (tuples unpacked, subscripts/stars skipped)."""
    if isinstance(target, (cst.Tuple, cst.List)):
        names: list[str] = []
        for element in target.elements:
            names.extend(target_names(element.value))
        return names
    name = dotted_name(target)
    return [name] if name else []


class Collector:
    """Records what the facts layer needs in one pass; no interpretation happens here. A libcst visitor once
    made one with `amplint.lazy.visitor_class`."""

    def __init__(self) -> None:
        self.imports = ImportMap()
        self.module_frame: Frame | None = None
        self.frame: Frame | None = None
        self.statements: list[cst.CSTNode] = []
        self.calls: list[Call] = []
        self.assignments: list[Assignment] = []
        self.functions: list[FunctionInfo] = []
        self.with_frames: dict[cst.With, Frame] = {}
        self.function_frames: dict[cst.FunctionDef, Frame] = {}
        self.index = 0

    # frames -----------------------------------------------------------------------------------------
    def _push(self, kind: FrameKind, node: cst.CSTNode, **extra) -> Frame:
        self.frame = Frame(kind, node, self.frame, start_index=self.index + 1, **extra)
        return self.frame

    def _pop(self) -> None:
        assert self.frame is not None
        self.frame = self.frame.parent

    def visit_Module(self, node: cst.Module) -> None:
        self.module_frame = self._push(FrameKind.MODULE, node)

    walks_trivia = False  # no hook for whitespace and tokens: walk may skip them

    # The statements open around a node: each statement type's visit_/leave_ hook (set below, for the names in
    # STATEMENT_TYPES) pushes and pops it.
    def _enter_statement(self, node: cst.CSTNode) -> None:
        self.statements.append(node)

    def _leave_statement(self, node: cst.CSTNode) -> None:
        self.statements.pop()

    def visit_With_body(self, node: cst.With) -> None:
        self.with_frames[node] = self._push(FrameKind.WITH, node)

    def leave_With_body(self, node: cst.With) -> None:
        self._pop()

    def visit_For_body(self, node: cst.For) -> None:
        self._push(FrameKind.LOOP, node)

    def leave_For_body(self, node: cst.For) -> None:
        self._pop()

    def visit_While_body(self, node: cst.While) -> None:
        self._push(FrameKind.LOOP, node)

    def leave_While_body(self, node: cst.While) -> None:
        self._pop()

    def visit_If_body(self, node: cst.If) -> None:
        self._push(FrameKind.IF, node)

    def leave_If_body(self, node: cst.If) -> None:
        self._pop()

    def visit_If_orelse(self, node: cst.If) -> None:
        self._push(FrameKind.IF, node, in_else=True)

    def leave_If_orelse(self, node: cst.If) -> None:
        self._pop()

    def visit_ClassDef_body(self, node: cst.ClassDef) -> None:
        self._push(FrameKind.CLASS, node, name=node.name.value)

    def leave_ClassDef_body(self, node: cst.ClassDef) -> None:
        self._pop()

    def visit_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        parent = self.frame
        class_name = parent.name if parent is not None and parent.kind is FrameKind.CLASS else ""
        frame = self._push(FrameKind.FUNCTION, node, name=node.name.value, class_name=class_name)
        self.function_frames[node] = frame
        if parent is not None and parent.kind in (FrameKind.MODULE, FrameKind.CLASS):
            qualname = f"{class_name}.{node.name.value}" if class_name else node.name.value
            self.functions.append(FunctionInfo(node, frame, qualname, list(node.decorators)))

    def leave_FunctionDef_body(self, node: cst.FunctionDef) -> None:
        self._pop()

    def visit_Lambda_body(self, node: cst.Lambda) -> None:
        self._push(FrameKind.FUNCTION, node, name="<lambda>")

    def leave_Lambda_body(self, node: cst.Lambda) -> None:
        self._pop()

    # records ----------------------------------------------------------------------------------------
    def visit_Import(self, node: cst.Import) -> None:
        self._import(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self._import(node)

    def _import(self, node: cst.Import | cst.ImportFrom) -> None:
        line = self.statements[-1]
        module_level = all(frame.kind not in (FrameKind.FUNCTION, FrameKind.CLASS) for frame in self.frame.ancestors())
        self.imports.add(node, line if isinstance(line, cst.SimpleStatementLine) else None, module_level)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        receiver = method = None
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            receiver = dotted_name(func.value)
        self.index += 1
        self.calls.append(Call(
            node=node,
            frame=self.frame,
            statement=self.statements[-1],
            statements=tuple(self.statements),
            qualified=None,  # resolved after the walk, once every import is known
            dotted=dotted_name(func),
            receiver=receiver,
            method=method,
            index=self.index,
        ))

    def _assign(self, targets: list[str], value: cst.BaseExpression | None) -> None:
        if value is None or not targets:
            return
        self.index += 1
        self.assignments.append(
            Assignment(tuple(targets), value, self.frame, self.statements[-1], self.index)
        )

    def visit_Assign(self, node: cst.Assign) -> None:
        names: list[str] = []
        for target in node.targets:
            names.extend(target_names(target.target))
        self._assign(names, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._assign(target_names(node.target), node.value)


# libcst's statement types (amplint.lazy.statement_types, less the abstract ones; tests/test_walk.py compares them):
# each opens a statement for the calls and assignments in it.
STATEMENT_TYPES = ("SimpleStatementLine", "If", "For", "While", "With", "Try", "TryStar", "FunctionDef", "ClassDef",
                   "Match")
for _name in STATEMENT_TYPES:
    assert not hasattr(Collector, f"visit_{_name}") and not hasattr(Collector, f"leave_{_name}")
    setattr(Collector, f"visit_{_name}", Collector._enter_statement)
    setattr(Collector, f"leave_{_name}", Collector._leave_statement)
