"""Where given nodes are in a module's text, found with one plain code generation pass.

libcst's PositionProvider computes a range for every node of the module and splits every token it writes on
newlines: on a 460 KB file that is seconds, while a module's plain code generation is a tenth of it. A lint
run needs the position of a few nodes (the reported ones) and, for each fix, the path from the module down to
the replaced nodes. `locate` asks the code generator to note, for the wanted nodes only, which tokens they wrote
(and which nodes were open around them); offsets and rows/columns come from the generated text afterwards.

Given the source text, the pass stops once every wanted node is written and a statement of the module body
follows (the rest cannot move them).

The ranges are PositionProvider's: a node's syntactic range when its code generation records one (statements
without their leading lines, blocks from their first to their last statement), else everything it wrote.
"""

from __future__ import annotations

import bisect
import itertools
import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, Iterator

from amplint.lazy import libcst as cst
from libcst._nodes.internal import CodegenState

_NEWLINE = re.compile(r"\r\n?|\n")  # what libcst counts as a line break


@dataclass(frozen=True)
class Point:
    """A place in the text: `line` 1-based, `column` 0-based (in characters), as libcst's CodePosition."""

    line: int
    column: int


@dataclass
class Located:
    """Where one node is: token index ranges into the generated tokens, the nodes open around it (module
    first, its parent last) and the indentation open at its start."""

    start: int = -1  # syntactic range (PositionProvider's)
    end: int = -1
    outer_start: int = -1  # everything the node wrote, its leading lines and whitespace included
    outer_end: int = -1
    ancestors: tuple[cst.CSTNode, ...] = ()
    indent: tuple[str, ...] = ()


class _AllFound(Exception):
    """Every wanted node has been written, and a statement of the module body follows: stop there."""


class _EveryNode(set):
    """The wanted set of a pass that locates every node of the module (see `locate_all`)."""

    def __contains__(self, item: object) -> bool:
        return True


class _LocatingState(CodegenState):
    """The code generator's state, noting the wanted nodes on the way. Nodes are keyed by identity."""

    def __init__(self, module: cst.Module, wanted: set[int], with_ancestors: bool, stop_early: bool) -> None:
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.wanted = wanted
        self.found: dict[int, Located] = {}
        self.unfinished = len(wanted)  # wanted nodes not yet written to their end
        # The module body's statements but the last: after one of them, with nothing unfinished, the rest of
        # the text cannot move what was found (it is the source's own text, which the caller has).
        self.stop_after = {id(statement) for statement in module.body[:-1]} if stop_early else set()
        # With ancestors: (node, where its tokens start, how deep the indentation was) of each open node.
        self.open_nodes: list[tuple[cst.CSTNode, int, int]] | None = [] if with_ancestors else None
        self.dropped = ""

    def before_codegen(self, node: cst.CSTNode) -> None:
        open_nodes = self.open_nodes
        if id(node) in self.wanted:
            located = self.found.get(id(node))
            if located is None:
                located = self.found[id(node)] = Located()
            located.outer_start = len(self.tokens)
            located.indent = tuple(self.indent_tokens)
            if open_nodes is not None:
                located.ancestors = tuple(open for open, _, _ in open_nodes)
                self._note_ancestors()
        if open_nodes is not None:
            open_nodes.append((node, len(self.tokens), len(self.indent_tokens)))

    def _note_ancestors(self) -> None:
        """Locate the open nodes too (their whole output, from where they started to where they will end): a
        fix regenerates one of them. While a node is open the indentation below its depth stays as it was."""
        for open, start, depth in self.open_nodes:
            if id(open) not in self.found:
                self.found[id(open)] = Located(outer_start=start, indent=tuple(self.indent_tokens[:depth]))
                if id(open) not in self.wanted:
                    self.wanted.add(id(open))
                    self.unfinished += 1

    def after_codegen(self, node: cst.CSTNode) -> None:
        if self.open_nodes is not None:
            self.open_nodes.pop()
        located = self.found.get(id(node)) if id(node) in self.wanted else None
        if located is not None:
            # The module ends after the newline it dropped (as PositionProvider counts); nothing else ends after it.
            if located.outer_end < 0:
                self.unfinished -= 1
            located.outer_end = len(self.tokens) + (1 if self.dropped and type(node) is cst.Module else 0)
            if located.start < 0:  # no syntactic range recorded inside: the whole output is the range
                located.start, located.end = located.outer_start, located.outer_end
        if not self.unfinished and id(node) in self.stop_after:
            raise _AllFound

    def pop_trailing_newline(self) -> None:
        """The module drops its last newline when the file has none: keep it for the positions (libcst's
        PositionProvider counts it too), not for the text."""
        if self.tokens:
            self.dropped = self.tokens.pop()

    @contextmanager
    def record_syntactic_position(self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None,
                                  end_node: cst.CSTNode | None = None) -> Iterator[None]:
        if id(node) not in self.wanted:
            yield
            return
        # The range may be hoisted from children (a block spans its first to its last statement): note them too.
        for child in (start_node, end_node):
            if child is not None and id(child) not in self.wanted:
                self.wanted.add(id(child))
                self.unfinished += 1
        start = len(self.tokens)
        try:
            yield
        finally:
            end = len(self.tokens)
            if start_node is not None:
                start = self.found[id(start_node)].start
            if end_node is not None:
                end = self.found[id(end_node)].end
            located = self.found.setdefault(id(node), Located())
            located.start, located.end = start, end


class Locations:
    """The result of one pass: offsets and (line, column) points of the located nodes."""

    def __init__(self, state: _LocatingState, source: str | None = None) -> None:
        # The module's code: the source when given and the tokens are a prefix of it (they are after a pass stopped
        # early; libcst does not give back a lone CR that ends a file, so a whole pass can lack the source's end)
        written = "".join(state.tokens)
        self.text = source if source is not None and source.startswith(written) else written
        self.tokens = state.tokens + [state.dropped] if state.dropped else state.tokens
        self.end_of_text = len(state.tokens)  # token index: ranges ending past it end in the dropped newline
        self.found = state.found
        self._offsets: dict[int, int] = {}
        self._prefix_sums: list[int] | None = None
        self._line_starts: list[int] | None = None

    def __contains__(self, node: cst.CSTNode) -> bool:
        return id(node) in self.found

    def get(self, node: cst.CSTNode) -> Located:
        return self.found[id(node)]

    def offset(self, token_index: int) -> int:
        """The character offset where the token at this index starts (the end of the text past the last)."""
        if self._prefix_sums is not None:
            return self._prefix_sums[min(token_index, len(self.tokens))]
        if len(self._offsets) >= 8:  # many nodes asked for: one running sum over all tokens
            self._prefix_sums = list(itertools.accumulate(map(len, self.tokens), initial=0))
            return self.offset(token_index)
        if token_index not in self._offsets:
            self._offsets[token_index] = sum(map(len, self.tokens[:token_index]))
        return self._offsets[token_index]

    def point(self, offset: int) -> Point:
        if self._line_starts is None:
            self._line_starts = [0] + [match.end() for match in _NEWLINE.finditer("".join(self.tokens))]
        row = bisect.bisect_right(self._line_starts, offset)
        return Point(row, offset - self._line_starts[row - 1])

    def span(self, node: cst.CSTNode) -> tuple[Point, Point]:
        """(start, end) of the node's syntactic range."""
        located = self.found[id(node)]
        return self.point(self.offset(located.start)), self.point(self.offset(located.end))


def locate_all(module: cst.Module) -> Locations:
    """One pass that locates every node of the module: for a file whose rules ask for many positions one by one,
    where a pass per question would make the work quadratic in the number of findings."""
    state = _LocatingState(module, _EveryNode(), with_ancestors=False, stop_early=False)
    module._codegen(state)
    return Locations(state, None)


def locate(module: cst.Module, nodes: Iterable[cst.CSTNode], with_ancestors: bool = False,
           source: str | None = None) -> Locations:
    """Run the code generator once over `module`, noting where each of `nodes` is (nodes not in the module
    are simply not found). `source`: the text the module was parsed from (its code); given, the pass stops
    after the module-body statement where the last wanted node ends, unless that statement is the last."""
    state = _LocatingState(module, {id(node) for node in nodes}, with_ancestors, stop_early=source is not None)
    try:
        module._codegen(state)
    except _AllFound:
        pass
    return Locations(state, source)
