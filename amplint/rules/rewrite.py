"""Fixes as text: the module with some nodes replaced, regenerated only where it changed."""

from __future__ import annotations

from functools import cached_property

from libcst._nodes.internal import CodegenState

from amplint.facts.locate import Locations, locate
from amplint.lazy import libcst as cst


class Moved:
    """The replacement for a statement that a fix moves elsewhere: it leaves its place together with its own
    comments, which the fix puts back with the statement where it goes (see `MOVED`)."""

    def __repr__(self) -> str:
        return "MOVED"


# Replace a statement with MOVED when the fix re-inserts it (with its leading comments) somewhere else;
# `cst.RemoveFromParent()` deletes it and keeps its own-line comments in place.
MOVED = Moved()


class ReplaceNodes(cst.CSTTransformer):
    """Replace given nodes (by identity) with new nodes, several statements, or nothing.

    A replacement may be a callable taking the updated node, for nodes whose children change too. With
    `on_path` (ids of the replaced nodes and of every node around them), subtrees off those paths are kept
    as they are without being walked.

    Comments survive deletion: a statement removed with `cst.RemoveFromParent()` leaves its own-line comments
    (those above it and those inside a compound statement's body) to the next statement of its block, or to the
    block's footer when it was the last. Only comments on the deleted code lines themselves go. A statement
    replaced with `MOVED` takes its comments along.
    """

    def __init__(self, replacements: dict[cst.CSTNode, object], on_path: set[int] | None = None) -> None:
        super().__init__()
        self.replacements = replacements
        self.on_path = on_path
        self.pending: list[list[cst.EmptyLine]] = []  # per open block: comments left by its removed statements

    def on_visit(self, node) -> bool:
        if isinstance(node, (cst.IndentedBlock, cst.Module)):
            self.pending.append([])
        return self.on_path is None or id(node) in self.on_path

    def on_leave(self, original_node, updated_node):
        result = updated_node
        if original_node in self.replacements:
            replacement = self.replacements[original_node]
            result = replacement(updated_node) if callable(replacement) else replacement
        if isinstance(original_node, cst.BaseStatement) and self.pending:
            return self._statement_left(original_node, result)
        if isinstance(original_node, (cst.IndentedBlock, cst.Module)):
            left = self.pending.pop()
            if left and isinstance(result, (cst.IndentedBlock, cst.Module)):
                result = result.with_changes(footer=[*left, *result.footer])
        return result

    def _statement_left(self, original: cst.BaseStatement, result):
        left = self.pending[-1]
        if isinstance(result, Moved):
            return cst.RemovalSentinel.REMOVE
        if result is cst.RemovalSentinel.REMOVE:
            left.extend(kept_comment_lines(original))
            return result
        if left:
            if isinstance(result, cst.FlattenSentinel) and result.nodes:
                first = result.nodes[0]
                result = cst.FlattenSentinel([first.with_changes(leading_lines=[*left, *first.leading_lines]),
                                              *result.nodes[1:]])
            elif isinstance(result, cst.BaseStatement):
                result = result.with_changes(leading_lines=[*left, *result.leading_lines])
            else:
                return result
            left.clear()
        return result


def split_blank_lines(target: cst.CSTNode) -> tuple[list[cst.EmptyLine], list[cst.EmptyLine]]:
    """The leading lines of a statement that a fix puts others in front of, split where its first comment line
    starts: the blank lines above go above the statements put in front, the comments stay with `target`."""
    lines = list(target.leading_lines)
    blank = 0
    while blank < len(lines) and lines[blank].comment is None:
        blank += 1
    return lines[:blank], lines[blank:]


def kept_comment_lines(statement: cst.CSTNode) -> list[cst.EmptyLine]:
    """The own-line comments of a statement being deleted, as lines to keep at its block's indentation: the lines
    above it down to its last comment (blank lines between them too), then the comment lines inside it."""
    above = list(getattr(statement, "leading_lines", ()))
    while above and above[-1].comment is None:
        above.pop()
    inside: list[cst.EmptyLine] = []

    class Comments(cst.CSTVisitor):
        def visit_EmptyLine(self, line: cst.EmptyLine) -> None:
            if line.comment is not None:
                inside.append(line)

    own = {id(line) for line in getattr(statement, "leading_lines", ())}
    for child in statement.children:
        if id(child) not in own:
            child.visit(Comments())
    return [line.with_changes(indent=True) if line.comment is not None else line for line in [*above, *inside]]


class Rewritten:
    """What a fix makes of the module: the module with some nodes replaced.

    `changes` is `(old, spans)`: the module's code and the changes as disjoint (start, end, new text) spans of it,
    in order; `code` is the whole new text. `locations`, when the engine sets it, is a pass of `locate` (with
    ancestors) that found every replaced node: the engine locates the nodes of all fixes and findings of a file
    in one pass.
    """

    def __init__(self, module: cst.Module, replacements: dict[cst.CSTNode, object]) -> None:
        self.module = module
        self.replacements = replacements
        self.locations: Locations | None = None

    @cached_property
    def changes(self) -> tuple[str, list[tuple[int, int, str]]]:
        return rewritten_spans(self.module, self.replacements, self.locations)

    @cached_property
    def code(self) -> str:
        text, spans = self.changes
        for start, end, new in reversed(spans):
            text = text[:start] + new + text[end:]
        return text

    def full_code(self) -> str:
        """The same text, by transforming and regenerating the whole module (the reference `code` must match)."""
        return self.module.visit(ReplaceNodes(self.replacements)).code


def rewritten_spans(module: cst.Module, replacements: dict[cst.CSTNode, object],
                    locations: Locations | None = None) -> tuple[str, list[tuple[int, int, str]]]:
    """The module's code and the spans the replacements change, in time proportional to the statements they
    change.

    A code generation pass (or the one given) finds the replaced nodes and the nodes around them; only those
    paths are transformed. Each replaced node lies in a statement of a block (or of the module body), its
    anchor; the outermost anchors are regenerated alone, with the indentation they had: each is one span. A
    statement of a block replaced by statements is its own anchor (`_own_anchor`), and one removed without a
    trace is a span of its own text replaced by nothing (`_deleted_alone`): a fix's cost does not grow with the
    function around it. When a replaced node has no such statement around it, the whole module is
    regenerated (one span, all of it).
    """
    if locations is None or any(node not in locations or not locations.get(node).ancestors for node in replacements):
        locations = locate(module, replacements, with_ancestors=True)
    text = locations.text

    def whole(transformer: ReplaceNodes) -> tuple[str, list[tuple[int, int, str]]]:
        # The module's code is the text, or the text but for what libcst does not give back at its end (a lone CR
        # that ends a file): that end is kept. Anything else: no fix.
        code = module.code
        if not text.startswith(code):
            return text, []
        return text, [(0, len(code), module.visit(transformer).code)]

    if not replacements:
        return text, []
    if any(node not in locations for node in replacements):  # not in this module: the plain way
        return whole(ReplaceNodes(replacements))
    paths = [locations.get(node).ancestors for node in replacements]
    on_path = {id(node) for path in paths for node in path} | {id(node) for node in replacements}
    transformer = ReplaceNodes(replacements, on_path)
    anchors: dict[int, tuple[cst.BaseStatement, tuple[cst.CSTNode, ...]]] = {}  # id -> (anchor, nodes around it)
    deleted = _deleted_alone(replacements, paths)
    for node, path in zip(replacements, paths):
        if id(node) in deleted or _own_anchor(node, replacements[node], path):
            anchors[id(node)] = (node, path)
            continue
        depth = _anchor_depth(path)
        if depth is None:
            return whole(transformer)
        anchors[id(path[depth])] = (path[depth], path[:depth])
    # An anchor inside another is regenerated with it.
    outermost = [anchor for anchor, around in anchors.values() if not any(id(outer) in anchors for outer in around)]
    spans = []
    for anchor in outermost:
        located = locations.get(anchor)
        if located.outer_end > locations.end_of_text:  # the module's dropped last newline is in it
            return whole(transformer)
        if id(anchor) in deleted:  # its text goes, nothing else changes
            spans.append((locations.offset(located.outer_start), locations.offset(located.outer_end), ""))
            continue
        new_anchor = anchor.visit(transformer)
        new_nodes = list(new_anchor.nodes) if isinstance(new_anchor, cst.FlattenSentinel) else [new_anchor]
        if not new_nodes or not all(isinstance(new, cst.BaseStatement) for new in new_nodes):
            return whole(transformer)  # an own anchor whose replacement, computed, is no statement
        if any(new._is_removable() for new in new_nodes) and not anchor._is_removable():  # emptied: libcst drops
            return whole(transformer)                                                     # it from its block
        state = CodegenState(default_indent=module.default_indent, default_newline=module.default_newline,
                             indent_tokens=list(located.indent))
        for new in new_nodes:  # the statements a block would write in its place, at its indentation
            new._codegen(state)
        spans.append((locations.offset(located.outer_start), locations.offset(located.outer_end), "".join(state.tokens)))
    return text, sorted(spans)


def _anchor_depth(path: tuple[cst.CSTNode, ...]) -> int | None:
    """Where on the path (the nodes around a replaced node) the innermost statement is that sits in a block or in
    the module body: regenerated alone, it needs nothing from its parent but the indentation."""
    for depth in range(len(path) - 1, 0, -1):
        node, parent = path[depth], path[depth - 1]
        if isinstance(node, cst.BaseStatement) and isinstance(parent, (cst.IndentedBlock, cst.Module)):
            return depth
    return None


def _own_anchor(node: cst.CSTNode, replacement: object, path: tuple[cst.CSTNode, ...]) -> bool:
    """Can a replaced node be regenerated alone, as its own anchor? When it is a statement of a block (or of the
    module body) that stays one or more statements (a callable's result is checked once computed): its block
    writes each of them at the same indentation. Not a removal (nor MOVED): the comments a removed statement
    leaves go to the next statement, which only its block reaches."""
    if not (isinstance(node, cst.BaseStatement) and path and isinstance(path[-1], (cst.IndentedBlock, cst.Module))):
        return False
    if isinstance(replacement, cst.FlattenSentinel):
        return bool(replacement.nodes) and all(isinstance(new, cst.BaseStatement) for new in replacement.nodes)
    return isinstance(replacement, cst.BaseStatement) or callable(replacement)


def _deleted_alone(replacements: dict[cst.CSTNode, object], paths: list[tuple[cst.CSTNode, ...]]) -> set[int]:
    """The replaced statements whose removal is only their own text going: statements of a block (or of the module
    body) replaced by MOVED (they take their comments along), or removed with no own-line comment to leave to the
    next statement; and not all of their block's statements (an emptied block is its owner's business)."""
    deleted: dict[int, list[int]] = {}  # id of the block -> ids of its statements deleted alone
    for node, path in zip(replacements, paths):
        replacement = replacements[node]
        if not (isinstance(node, cst.BaseStatement) and path and isinstance(path[-1], (cst.IndentedBlock, cst.Module))):
            continue
        if isinstance(replacement, Moved) or (replacement is cst.RemovalSentinel.REMOVE
                                              and not kept_comment_lines(node)):
            deleted.setdefault(id(path[-1]), []).append(id(node))
    blocks = {id(path[-1]): path[-1] for path in paths if path}
    return {node for block, nodes in deleted.items() if len(nodes) < len(blocks[block].body) for node in nodes}
