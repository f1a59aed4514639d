"""Fixes as text: the module with some nodes replaced, regenerated only where it changed."""

from __future__ import annotations

from functools import cached_property

from libcst._nodes.internal import CodegenState

from amplint.facts.locate import locate
from amplint.lazy import libcst as cst


class ReplaceNodes(cst.CSTTransformer):
    """Replace given nodes (by identity) with new nodes, several statements, or nothing.

    A replacement may be a callable taking the updated node, for nodes whose children change too. With
    `on_path` (ids of the replaced nodes and of every node around them), subtrees off those paths are kept
    as they are without being walked.
    """

    def __init__(self, replacements: dict[cst.CSTNode, object], on_path: set[int] | None = None) -> None:
        super().__init__()
        self.replacements = replacements
        self.on_path = on_path

    def on_visit(self, node) -> bool:
        return self.on_path is None or id(node) in self.on_path

    def on_leave(self, original_node, updated_node):
        if original_node in self.replacements:
            replacement = self.replacements[original_node]
            return replacement(updated_node) if callable(replacement) else replacement
        return updated_node


class Rewritten:
    """What a fix makes of the module: the module with some nodes replaced. `code` is the new source text."""

    def __init__(self, module: cst.Module, replacements: dict[cst.CSTNode, object]) -> None:
        self.module = module
        self.replacements = replacements

    @cached_property
    def code(self) -> str:
        return rewritten_code(self.module, self.replacements)

    def full_code(self) -> str:
        """The same text, by transforming and regenerating the whole module (the reference `code` must match)."""
        return self.module.visit(ReplaceNodes(self.replacements)).code


def rewritten_code(module: cst.Module, replacements: dict[cst.CSTNode, object]) -> str:
    """The module's text with the replacements made, in time proportional to the statement they change.

    One code generation pass finds the replaced nodes and the nodes around them; only those paths are
    transformed. When all replaced nodes lie in one statement of a block (or of the module body), that
    statement alone is regenerated, with the indentation it had, and spliced into the text; otherwise the whole
    module is regenerated.
    """
    if not replacements:
        return module.code
    locations = locate(module, replacements, with_ancestors=True)
    if any(node not in locations for node in replacements):  # not in this module: the plain way
        return module.visit(ReplaceNodes(replacements)).code
    paths = [locations.get(node).ancestors for node in replacements]
    on_path = {id(node) for path in paths for node in path} | {id(node) for node in replacements}
    transformer = ReplaceNodes(replacements, on_path)
    common = list(min(paths, key=len))
    for path in paths:  # the longest shared start of the paths, by identity
        while common and any(a is not b for a, b in zip(path, common)):
            common.pop()
    anchor = None
    for depth in range(len(common) - 1, 0, -1):
        node, parent = common[depth], common[depth - 1]
        if isinstance(node, cst.BaseStatement) and isinstance(parent, (cst.IndentedBlock, cst.Module)):
            anchor = node
            break
    located = locations.get(anchor) if anchor is not None else None
    if located is None or located.outer_end > locations.end_of_text:  # also: the module's last newline is dropped
        return module.visit(transformer).code
    new_anchor = anchor.visit(transformer)
    if new_anchor._is_removable() and not anchor._is_removable():  # emptied: libcst drops it from its block
        return module.visit(ReplaceNodes(replacements, on_path)).code
    state = CodegenState(default_indent=module.default_indent, default_newline=module.default_newline,
                         indent_tokens=list(located.indent))
    new_anchor._codegen(state)
    start, end = locations.offset(located.outer_start), locations.offset(located.outer_end)
    return locations.text[:start] + "".join(state.tokens) + locations.text[end:]
