"""What a rule is: metadata, documentation (its docstring) and a check over ModuleFacts."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, ClassVar, Iterator

import libcst as cst
from libcst._nodes.internal import CodegenState

from amplint.diagnostics import Applicability
from amplint.facts import ModuleFacts
from amplint.facts.locate import locate

DOC_SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead", "Fix safety")


@dataclass
class FixPlan:
    """A fix as a rewrite of the module's tree; the engine turns it into text edits."""

    message: str
    rewrite: Callable[[], Rewritten | None]  # what the fix makes of the module; None when it cannot be built
    applicability: Applicability = Applicability.SAFE


@dataclass
class Finding:
    node: cst.CSTNode  # the reported range
    message: str
    fix: FixPlan | None = None


class Rule:
    """Base class. Subclasses set `code`, `name`, `words` and write their docs in the docstring."""

    code: ClassVar[str]
    name: ClassVar[str]
    # Prefilter, stage 1 (amplint/prefilter.py): words one of which a file must contain (as plain substrings,
    # anywhere in the text) for this rule to possibly fire. None: no word filter, every file is considered.
    # Choose words that every spelling of what the rule looks for must contain, imports and aliases included.
    words: ClassVar[tuple[str, ...] | None] = None
    min_torch: ClassVar[str | None] = None
    # What --fix can do for this rule's findings: "safe", "unsafe", "sometimes" (safe or unsafe depending on
    # the code), or "none". Shown in the README's rule table.
    fix: ClassVar[str] = "none"

    def check(self, facts: ModuleFacts) -> Iterator[Finding]:  # pragma: no cover - interface
        raise NotImplementedError

    @classmethod
    def maybe_applies(cls, summary) -> bool:
        """Prefilter, stage 2: can this rule fire on a file with this `amplint.prefilter.Summary`?

        Asked only when one of `words` is in the file. Must be conservative (False only when the rule surely
        reports nothing) and monotone: `and`/`or` of the summary's questions, never `not` (it is asked once
        with answers from the text alone, then with answers from the parsed tree). The default (not
        overridden) is True: the file is always analysed.
        """
        return True

    @classmethod
    def summary(cls) -> str:
        """The first sentence of "What it does", on one line."""
        paragraph = []
        for line in cls.documentation().splitlines():
            if line.startswith("##"):
                if paragraph:
                    break
                continue
            if not line.strip():
                if paragraph:
                    break
                continue
            paragraph.append(line.strip())
        text = " ".join(paragraph)
        end = text.find(". ")
        return text if end == -1 else text[: end + 1]

    @classmethod
    def documentation(cls) -> str:
        return inspect.cleandoc(cls.__doc__ or "")


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


def replace_nodes(module: cst.Module, replacements: dict) -> Rewritten:
    return Rewritten(module, replacements)


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
