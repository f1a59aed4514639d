"""Where given nodes are in a module's text, found with code generation of the statements around them.

libcst's PositionProvider computes a range for every node of the module and splits every token it writes on
newlines: on a 460 KB file that is seconds, while a module's plain code generation is a tenth of it. A lint
run needs the position of a few nodes (the reported ones) and, for each fix, the path from the module down to
the replaced nodes. `locate` asks the code generator to note, for the wanted nodes only, which tokens they wrote
(and which nodes were open around them); offsets and rows/columns come from the generated text afterwards.

Given the source text, only the statement of a block around each wanted node is generated, and found in the
source by its text (`_local`); else, or where that cannot be done, one pass over the module, which stops once
every wanted node is written and a statement of the module body follows (the rest cannot move them).

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
        return self.span_by_id(id(node))

    def span_by_id(self, key: int) -> tuple[Point, Point]:
        located = self.found[key]
        return self.point(self.offset(located.start)), self.point(self.offset(located.end))


def locate_all(module: cst.Module) -> Locations:
    """Positions of every node of the module, for a file whose rules ask for many positions one by one (a pass
    per question would make the work quadratic in the number of findings). When the module's source is known (a
    `locate` with the source ran on it last), each node is found in the statement around it (see `_local`);
    else one code generation pass locates every node."""
    source = _source_of(module)
    if source is not None:
        return _LocalEverything(module, source)
    return _locate_all(module)


def _locate_all(module: cst.Module) -> Locations:
    state = _LocatingState(module, _EveryNode(), with_ancestors=False, stop_early=False)
    module._codegen(state)
    return Locations(state, None)


def locate(module: cst.Module, nodes: Iterable[cst.CSTNode], with_ancestors: bool = False,
           source: str | None = None) -> Locations:
    """Run the code generator once over `module`, noting where each of `nodes` is (nodes not in the module
    are simply not found). `source`: the text the module was parsed from (its code); given, the pass stops
    after the module-body statement where the last wanted node ends, unless that statement is the last; or
    only the statements around the wanted nodes are generated (`_local`)."""
    nodes = list(nodes)
    if source is not None:
        _remember_source(module, source)
        local = _local(module, source, nodes, with_ancestors)
        if local is not None:
            return local
    state = _LocatingState(module, {id(node) for node in nodes}, with_ancestors, stop_early=source is not None)
    try:
        module._codegen(state)
    except _AllFound:
        pass
    return Locations(state, source)


# Positions from the statements around the wanted nodes --------------------------------------------------------
#
# A statement of a block (or of the module body) writes whole lines, and the same text wherever it is, given the
# indentation of the blocks around it. So a wanted node is located by generating only such a statement around it,
# and finding that statement's text in the source: when the text occurs there exactly once, that occurrence is
# the statement (the module's code is its source). The ranges are the code generator's own, in that statement's
# tokens; offsets count the text before it. Where the text occurs more than once, the next statement out is tried,
# then the whole pass. The module's last statement in a text that does not end in a line break is not looked for
# (libcst gives it a line break the text does not have, and drops it from the module's code).

_REMEMBERED: list = [None, None]  # [module, its source]: the last module located with its source given


def _remember_source(module: cst.Module, source: str) -> None:
    _REMEMBERED[0], _REMEMBERED[1] = module, source


def _source_of(module: cst.Module) -> str | None:
    return _REMEMBERED[1] if _REMEMBERED[0] is module else None


class _Found:
    """The state's result, shaped for `Locations`: the text before the located statements and their tokens."""

    def __init__(self, tokens: list[str], found: dict[int, Located]) -> None:
        self.tokens = tokens
        self.found = found
        self.dropped = ""


def _local(module: cst.Module, source: str, nodes: list[cst.CSTNode], with_ancestors: bool) -> Locations | None:
    """`locate`, generating only statements around the nodes; None when some node cannot be located that way
    (the caller makes the whole pass).

    With ancestors (a fix's replaced nodes), the statement generated is the one of a block around the node, not
    the node itself when it is one: a fix regenerates that statement, or the node alone (amplint/rules/rewrite.py);
    the nodes around the generated statement are the node's ancestors but are not located themselves."""
    if not nodes:
        return None
    paths = _paths(module, {id(node): node for node in nodes})
    if paths is None:
        return None
    roots: dict[int, tuple[cst.CSTNode, tuple[cst.CSTNode, ...]]] = {}  # id -> (statement, nodes around it)
    members: dict[int, list[int]] = {}  # id of a statement -> the wanted nodes it is chosen for
    for node in nodes:
        chain = (*paths[id(node)], node)
        depth = _innermost_statement(chain[:-1]) if with_ancestors else 0
        depth = depth or _innermost_statement(chain)
        roots.setdefault(id(chain[depth]), (chain[depth], chain))
        members.setdefault(id(chain[depth]), []).append(id(node))
    # A statement inside another chosen one is generated with it.
    chosen = [(root, chain) for root, chain in roots.values()
              if not any(id(outer) in roots for outer in chain[:_depth(chain, root)])]
    wanted = {id(node) for node in nodes}
    pieces = []
    found: set[int] = set()
    for root, chain in chosen:
        if all(key in found for key in members[id(root)]):
            continue  # located with a statement around it (the text of this one occurs more than once)
        piece = _generate(module, source, chain, _depth(chain, root), wanted, with_ancestors)
        if piece is None:
            return None
        pieces.append(piece)
        found.update(piece[1].found)
    return _assemble(source, pieces)


def _depth(chain: tuple[cst.CSTNode, ...], node: cst.CSTNode) -> int:
    for depth, item in enumerate(chain):
        if item is node:
            return depth
    raise ValueError("not on the chain")


def _innermost_statement(chain: tuple[cst.CSTNode, ...]) -> int:
    """The depth of the innermost statement of a block or of the module body on the chain (module first)."""
    for depth in range(len(chain) - 1, 0, -1):
        if _block_statement(chain, depth):
            return depth
    return 0


def _block_statement(chain: tuple[cst.CSTNode, ...], depth: int) -> bool:
    return isinstance(chain[depth], cst.BaseStatement) and type(chain[depth - 1]) in (cst.IndentedBlock, cst.Module)


def _generate(module: cst.Module, source: str, chain: tuple[cst.CSTNode, ...], depth: int,
              wanted: set[int] | _EveryNode, with_ancestors: bool = False) -> tuple[int, _LocatingState] | None:
    """(where its text starts in the source, the state) of the innermost statement at or above `depth` on the
    chain whose text occurs exactly once in the source; None when none does."""
    if len(chain) < 2 or chain[1] is module.body[-1] and not source.endswith("\n"):
        return None  # the module's last statement, in a text whose last line break libcst adds and drops
    while depth > 0:
        if _block_statement(chain, depth):
            indent = _indentation(module, chain[:depth])
            if indent is not None:
                state = _LocatingState(module, wanted if isinstance(wanted, _EveryNode) else set(wanted),
                                       with_ancestors=with_ancestors, stop_early=False)
                state.indent_tokens = list(indent)
                if with_ancestors:  # open around the statement: the wanted nodes' ancestors start with them
                    state.open_nodes = [(around, 0, 0) for around in chain[:depth]]
                chain[depth]._codegen(state)
                for around in chain[:depth]:  # not located here (their text is not all generated)
                    state.found.pop(id(around), None)
                text = "".join(state.tokens)
                start = source.find(text)
                if text and start >= 0 and source.find(text, start + 1) < 0:
                    return start, state
        depth -= 1
    return None


def _indentation(module: cst.Module, around: tuple[cst.CSTNode, ...]) -> list[str] | None:
    """The indentation the blocks on the way open (None past a `match`, whose cases are indented by the match)."""
    indent = []
    for node in around:
        if type(node) is cst.IndentedBlock:
            indent.append(module.default_indent if node.indent is None else node.indent)
        elif type(node).__name__ == "Match":
            return None
    return indent


def _assemble(source: str, pieces: list[tuple[int, _LocatingState]]) -> Locations | None:
    """One `Locations` from statements generated apart: the text between them is a token each."""
    # A statement generated inside another one generated later (where that one's text occurs once) is left out:
    # the other located everything wanted in it.
    pieces.sort(key=lambda piece: (piece[0], -sum(map(len, piece[1].tokens))))
    tokens: list[str] = []
    found: dict[int, Located] = {}
    written = 0
    for start, state in pieces:
        if start < written and start + sum(map(len, state.tokens)) <= written:
            continue
        if start < written:
            return None  # overlapping texts: cannot be (a statement's text is unique), but never guess
        if start > written:
            tokens.append(source[written:start])
        shift = len(tokens)
        for key, located in state.found.items():
            found[key] = Located(located.start + shift, located.end + shift, located.outer_start + shift,
                                 located.outer_end + shift, located.ancestors, located.indent)
        tokens.extend(state.tokens)
        written = start + sum(map(len, state.tokens))
    locations = Locations(_Found(tokens, found), source)
    locations._line_starts = _line_starts(source)
    return locations


_LINE_STARTS: list = [None, None]  # [text, its line starts]


def _line_starts(text: str) -> list[int]:
    if _LINE_STARTS[0] is not text:
        _LINE_STARTS[0], _LINE_STARTS[1] = text, [0] + [match.end() for match in _NEWLINE.finditer(text)]
    return _LINE_STARTS[1]


def _paths(module: cst.Module, wanted: dict[int, cst.CSTNode] | None) -> dict | None:
    """The nodes around each wanted node (module first), by a search through the tree that stops once every one
    is found; None when a wanted node is not found (not in the module, or whitespace or punctuation, which the
    search skips). With `wanted` None: the parent of every node (None for the module)."""
    from amplint.facts.walk import significant_children

    parents: dict[int, cst.CSTNode | None] = {id(module): None}
    pending = set(wanted) if wanted is not None else None
    stack: list = [module]
    pop, extend = stack.pop, stack.extend
    while stack:
        node = pop()
        if pending is not None and id(node) in pending:
            pending.discard(id(node))
            if not pending:
                break
        children = significant_children(node)
        for child in children:
            parents[id(child)] = node
        children.reverse()
        extend(children)
    if wanted is None:
        return parents
    if pending:
        return None
    paths = {}
    for key, node in wanted.items():
        chain = []
        parent = parents[key]
        while parent is not None:
            chain.append(parent)
            parent = parents[id(parent)]
        chain.reverse()
        paths[key] = tuple(chain)
    return paths


class _LocalEverything(Locations):
    """`locate_all`'s answer when the source is known: each node asked for is located in the statement around it
    (the nodes around every node are found once); a node that cannot be located that way, by one whole pass."""

    def __init__(self, module: cst.Module, source: str) -> None:  # noqa: super().__init__ is not wanted here
        self.module = module
        self.source = source
        self._paths: dict | None = None  # id of each node -> its parent
        self._where: dict[int, Locations] = {}  # id of a located node -> the located statement around it
        self._whole: Locations | None = None

    def __contains__(self, node: cst.CSTNode) -> bool:
        return self._span(node) is not None

    def get(self, node: cst.CSTNode) -> Located:
        raise NotImplementedError("positions only")

    def span(self, node: cst.CSTNode) -> tuple[Point, Point]:
        found = self._span(node)
        if found is None:
            raise KeyError(node)
        return found

    def _span(self, node: cst.CSTNode) -> tuple[Point, Point] | None:
        if id(node) in self._where:
            return self._where[id(node)].span_by_id(id(node))
        if self._whole is None:
            if self._paths is None:
                self._paths = _paths(self.module, None)
            piece = None
            if id(node) in self._paths:
                chain = [node]
                while (parent := self._paths[id(chain[-1])]) is not None:
                    chain.append(parent)
                chain = tuple(reversed(chain))
                piece = _generate(self.module, self.source, chain, _innermost_statement(chain), _EveryNode())
            if piece is not None:
                located = _assemble(self.source, [piece])
                for key in located.found:  # everything in that statement
                    self._where[key] = located
                return located.span_by_id(id(node)) if id(node) in located.found else None
            self._whole = _locate_all(self.module)
        return self._whole.span(node) if node in self._whole else None
