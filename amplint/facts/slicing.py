"""Slicing: the functions no rule can need, blanked out before libcst parses a module.

libcst is where a run spends its time, and a large module with findings on a few lines is mostly code no rule
reads (torch's 462 KB distributed_test.py: three findings). `slice_module` decides with the stdlib `ast` and the
text which functions and methods the facts layer (amplint/facts/module.py) and the rules can need, and replaces
every other one by whitespace of the same length: every line break stays, every other character becomes a
space (a `#` starts a blanked line after the module's last line of code: `_Slicer._comment_tail`). The
offsets, rows and columns of everything kept are unchanged, so diagnostics point at the same places and a fix
(edits on offsets of the text) applies to the original text as it is. A class whose body blanking empties gets
`pass` on the first blanked method's `def` line, at its indentation.

Only top-level functions and the methods of classes (nested classes included) are ever blanked; every other
statement is kept: imports, assignments, module-level code, class headers and class-level statements. A function or method is kept when it
- holds a word of `STRONG_WORDS` anywhere in its text (comments and strings included): the AMP API, scalers,
  clipping, half precision, the `amp` modules: what rules report on and read in the function itself;
- holds `x.step()`, `x.update()`, `x.zero_grad()` or `x.param_groups` on a name that kept code names
  (`WEAK_WORDS`: whether `x` is an optimizer or a scaler is read from every use of it in the module);
- runs a backward when no code kept anyway does (whether the module runs one at all is read once);
- is a method of a class in Lightning's manual optimization (its methods name `manual_backward` and
  `automatic_optimization`): AMP001 reads every method of such a class;
- is called by kept code (`f()`, `self.f()`: the same-module calls the facts layer follows);
- names a function kept for its words (it may call it: the facts layer asks whether such a function's callers
  call it in a loop; the callers that matter for regions, down from a function that opens one, are kept as
  called by kept code);
- assigns `self.x` where a kept method of its class names `x` (that method's bindings of `self.x` read every
  method's), or where kept code calls `self.x()` (is it a method or an attribute);
- names one of the module's AMP names (`_AmpNames`: an alias imported from the AMP API, a scaler's name):
  module-wide questions (is every use of an import a deprecated spelling, how often a scaler is referenced)
  count every use; or converts a model made half precision back (`model.float()`), or, where a model is made
  half precision outside functions, binds a name kept code names while naming that model (an optimizer over
  its parameters);
- binds one of them, or `torch`, or is named like one (a rebound name makes a rule leave it alone).
The closure runs to a fixed point. Names are read from the text (strings and comments included): a superset of
the code's, which keeps more, never less.

The engine (amplint/engine.py) analyses the slice instead of the whole text and falls back to the whole text
when the slice does not parse, its analysis fails, a fix's edit touches a blanked range (`Slice.touches`) or
blanking changed which quote the module writes most (`Slice.same_quotes`): the result is the same either way
(tests/test_slicing.py compares both on every fixture and on generated programs). `AMPLINT_SLICING=off` turns
slicing off; `always` slices any module where something can be blanked; the default slices modules of
`MIN_CHARS` or more where at least `MIN_SHARE` of the text would go.
"""

from __future__ import annotations

import ast
import bisect
import keyword
import os
import re
import warnings
from dataclasses import dataclass

from amplint import vocabulary as vocab

# Words of the code rules report on and the facts they read in its own function (plain substrings; `amp` as a
# word of a dotted or underscored name: `torch.cuda.amp`, `use_amp`, not `example`): a function holding one is
# kept.
STRONG_WORDS = (
    vocab.AUTOCAST, vocab.GRAD_SCALER, vocab.SCALE, vocab.CLIP_GRAD, vocab.CUSTOM_FWD, vocab.CUSTOM_BWD, vocab.HALF,
    vocab.FLOAT16, "fp16", "bf16",
    vocab.REGISTER_HOOK,  # a gradient hook clamping a scaled backward's gradients (AMP003)
    vocab.LIGHTNING.precision,  # a framework's precision shown (`Trainer(precision=...)`, `mixed_precision=`)
)
# Words of the code whose facts other functions' questions read only about objects named there too (the
# optimizer whose `zero_grad()` is called somewhere), or only in the function itself (its `.eval()`, its
# `no_grad`), or once for the module (is there a backward at all): a function holding only these is kept when
# one of its `x.step()`, `x.update()`, `x.zero_grad()`, `x.param_groups` is on a name kept code names.
WEAK_WORDS = (
    vocab.BACKWARD, vocab.AUTOGRAD, vocab.STEP, vocab.UPDATE, vocab.ZERO_GRAD, vocab.PARAM_GROUPS, vocab.OPTIM,
    vocab.NO_GRAD, vocab.INFERENCE_MODE, vocab.ENABLE_GRAD, vocab.SET_GRAD_ENABLED, vocab.EVAL,
)
VOCABULARY = STRONG_WORDS + WEAK_WORDS
_AMP = r"|(?<![^\W_])amp(?![^\W_])"
_STRONG = re.compile("|".join(map(re.escape, STRONG_WORDS)) + _AMP)
_BACKWARD = re.compile("backward|autograd")
_TIED = re.compile(r"([^\W\d]\w*)\s*\.\s*(?:step|update|zero_grad|param_groups)\b")
_HALF = re.compile("half|float16|fp16")
# Words of the AMP API itself: a statement holding one may build or name an object a rule counts the uses of.
_API = re.compile(r"autocast|GradScaler|custom_fwd|custom_bwd" + _AMP)
# What kept code calls, by name (`f(...)`, `self.f(...)`: the same-module calls the facts layer follows); a
# conversion call (`model.float()`, `.to(...)`, `.type(...)`) of a model made half precision.
_CALLED = re.compile(r"(?:(?<![\w.])(?<!def )(?<!class )|\bself\s*\.\s*)([^\W\d]\w*)\s*\(")
_FLOAT = re.compile(r"([^\W\d]\w*)\s*\.\s*float\s*\(")
_CONVERSION = re.compile(r"([^\W\d]\w*)\s*\.\s*(?:float|to|type)\s*\(")
_IDENTIFIER = re.compile(r"[^\W\d]\w*")
_NOT_NEWLINE = re.compile(r"[^\r\n]+")
# Names that tie no code together: keywords (never a name), and `self`/`cls`, which every method names.
_UNTIED = frozenset(keyword.kwlist) | {"self", "cls"}
_TORCH_REBOUND = re.compile(r"\bas\s+torch\b|^[ \t]*from\s+\S+\s+import\b[^\n]*\btorch\b", re.MULTILINE)

MIN_CHARS = 20_000  # smaller modules parse fast enough whole: the `ast` parse would cost about what it saves
MIN_SHARE = 0.2  # slice only when at least this share of the text would be blanked
ENVIRONMENT = "AMPLINT_SLICING"  # off | always | auto (the default)


def mode() -> str:
    """How the engine slices, from `AMPLINT_SLICING`: "off", "always" or "auto"."""
    value = os.environ.get(ENVIRONMENT, "auto").strip().lower()
    return value if value in ("off", "always") else "auto"


@dataclass(frozen=True)
class Slice:
    """A module's text with the ranges no rule needs blanked: `text` has the original's length and line breaks."""

    text: str
    original: str
    blanked: tuple[tuple[int, int], ...]  # (start, end) offsets of the blanked ranges, in order

    def touches(self, start: int, end: int) -> bool:
        """Does the range [start, end] overlap or border a blanked range? An edit there may have been built from
        the blanks (or from comments and blank lines next to them, which libcst then gives to another
        statement), not from the code."""
        position = bisect.bisect_left(self.blanked, (start + 1,))
        for low, high in self.blanked[max(position - 1, 0):position + 1]:
            if start <= high and end >= low:
                return True
        return False

    def same_quotes(self) -> bool:
        """Does the module write the same quote most often with and without the blanked code? A fix that
        writes a string literal writes the module's usual quote (AMP007 counts the module's string literals).
        False when unsure (an f-string holding quotes: libcst counts the strings inside it)."""
        whole = string_quotes(self.original)
        kept = string_quotes(self.text)
        if whole is None or kept is None:
            return False
        return (whole[0] > whole[1]) == (kept[0] > kept[1])


# Python's string literals, comments and names (a name right before a quote is the string's prefix, or a keyword).
_STRING = re.compile(
    r"#[^\r\n]*"
    r"|(?P<prefix>[^\W\d]\w*)?(?P<string>'''(?:[^'\\]|\\.|'(?!''))*(?:'''|\Z)"
    r'|"""(?:[^"\\]|\\.|"(?!""))*(?:"""|\Z)'
    r"|'(?:[^'\\\r\n]|\\(?:\r\n|.))*'?"
    r'|"(?:[^"\\\r\n]|\\(?:\r\n|.))*"?)',
    re.DOTALL)
_PREFIXES = frozenset({"r", "u", "b", "br", "rb"})  # with f (an f-string): not a libcst SimpleString


def string_quotes(text: str) -> tuple[int, int] | None:
    """How many plain string literals (libcst's SimpleString) of the text are quoted with `'` and with `"`,
    those in the replacement fields of f-strings included (libcst counts them); None when unsure."""
    counts = [0, 0]
    return (counts[0], counts[1]) if _tally(text, counts) else None


def _tally(text: str, counts: list[int]) -> bool:
    for match in _STRING.finditer(text):
        string = match.group("string")
        if string is None:
            continue
        prefix = (match.group("prefix") or "").lower()
        if "f" in prefix and prefix.replace("f", "", 1) in _PREFIXES | {""}:
            body = string[3:-3] if string[:3] in ("'''", '"""') else string[1:-1]
            fields = _fields(body)
            if fields is None or not all(_tally(field, counts) for field in fields):
                return False
            continue
        # a name or keyword right before the string (`if"a"`) is no prefix: the string is a plain one
        if string[-1:] == "'":
            counts[0] += 1
        elif string[-1:] == '"':
            counts[1] += 1
    return True


_FIELD_TOKEN = re.compile(r"\{\{|\}\}|'[^'\r\n]*'|\"[^\"\r\n]*\"|[{}]")


def _fields(body: str) -> list[str] | None:
    """The replacement fields of an f-string's body (`{x['a']:>{w}}` -> `x['a']:>{w}`); None when the braces
    do not balance as read here."""
    fields, depth, start = [], 0, 0
    for token in _FIELD_TOKEN.finditer(body):
        value = token.group()
        if depth == 0 and value in ("{{", "}}"):
            continue
        if value[0] == "{":
            depth += value.count("{")
            if depth == value.count("{"):
                start = token.end()
        elif value[0] == "}":
            depth -= value.count("}")
            if depth < 0:
                return None
            if depth == 0:
                fields.append(body[start:token.start()])
    return fields if depth == 0 else None


def slice_module(text: str, how: str | None = None) -> Slice | None:
    """The text with what no rule needs blanked, or None to analyse it whole (slicing off, a small text, too
    little to blank, a text the stdlib `ast` does not parse, a lone `\\r` line break). `how`: "always" to slice
    whenever something can be blanked, "off", or "auto" (None: `mode()`)."""
    how = how or mode()
    if how == "off" or (how == "auto" and len(text) < MIN_CHARS):
        return None
    if "\r" in text and text.count("\r") != text.count("\r\n"):
        return None  # a lone `\r`: lines as `ast` counts them may not be libcst's
    if how == "auto" and wordless_functions(text) < MIN_SHARE * len(text):
        return None  # not worth the `ast` parse: too little could be blanked
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None  # the engine parses it whole and reports what is wrong
    return _Slicer(text, tree).slice(MIN_SHARE if how == "auto" else 0.0)


_DEF = re.compile(r"[ \t]*(?:@|(?:async[ \t]+)?def[ \t])")


def wordless_functions(text: str) -> int:
    """About how many characters of the text are functions without a strong word: an estimate from the lines
    alone (a decorator or `def` line opens a block, the next line of code indented no deeper, other than its
    `def`, closes it), which spares the `ast` parse of a module where blanking could not reach `MIN_SHARE`. An
    estimate can only cost time: what is blanked is decided on the `ast` tree."""
    total = 0
    start = indent = -1  # the open block: its offset and indentation (-1: none)
    header = False  # in the decorators of the open block, before its `def`
    position = 0
    for line in text.splitlines(keepends=True):
        stripped = line.lstrip(" \t")
        if stripped[:1] not in ("", "\n", "\r", "#"):
            depth = len(line) - len(stripped)
            if start >= 0 and depth <= indent:
                if header and depth == indent and _DEF.match(line):
                    header = stripped.startswith("@")
                else:
                    if not _STRONG.search(text, start, position):
                        total += position - start
                    start = -1
            if start < 0 and _DEF.match(line):
                start, indent, header = position, len(line) - len(stripped), stripped.startswith("@")
        position += len(line)
    if start >= 0 and not _STRONG.search(text, start, position):
        total += position - start
    return total


class _Function:
    """A top-level function or a method: a candidate for blanking."""

    __slots__ = ("node", "owner", "first", "last", "start", "end", "kept", "identifiers", "assigned", "bound",
                 "tied", "converts")

    def __init__(self, node: ast.FunctionDef | ast.AsyncFunctionDef, owner: str | None, starts: list[int],
                 length: int) -> None:
        self.node = node
        self.owner = owner  # the name of the class of a method
        self.first = min([node.lineno] + [d.lineno for d in node.decorator_list])  # 1-based rows
        self.last = node.end_lineno
        self.start = starts[self.first - 1]
        self.end = starts[self.last] if self.last < len(starts) else length
        self.kept = False


class _Slicer:
    def __init__(self, text: str, tree: ast.Module) -> None:
        self.text = text
        self.starts = [0] + [match.end() for match in re.finditer("\n", text)]
        self.functions: list[_Function] = []
        self.classes: list[list[ast.stmt]] = []  # class bodies, to find those blanking empties
        self.others: list[ast.stmt] = []  # the statements always kept (not functions or methods)
        self._collect(tree.body, None)
        self.word_rows = self._rows(_STRONG)

    def _collect(self, body: list[ast.stmt], owner: str | None) -> None:
        for statement in body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions.append(_Function(statement, owner, self.starts, len(self.text)))
            elif isinstance(statement, ast.ClassDef):
                self.classes.append(statement.body)
                self.others.append(statement)  # its header; its body's statements are collected here
                self._collect(statement.body, statement.name)
            else:
                self.others.append(statement)

    def _rows(self, words: re.Pattern) -> list[int]:
        return sorted({bisect.bisect_right(self.starts, match.start()) for match in words.finditer(self.text)})

    def has_word(self, first: int, last: int) -> bool:
        """Does a row from `first` to `last` (1-based) hold one of the strong words?"""
        rows = self.word_rows
        position = bisect.bisect_left(rows, first)
        return position < len(rows) and rows[position] <= last

    def span(self, first: int, last: int) -> tuple[int, int]:
        return self.starts[first - 1], self.starts[last] if last < len(self.starts) else len(self.text)

    # what is kept ----------------------------------------------------------------------------------------
    def slice(self, min_share: float) -> Slice | None:
        functions, text = self.functions, self.text
        for function in functions:
            function.kept = self.has_word(function.first, function.last)
        self._keep_a_backward(functions)
        self._keep_manual_optimization(functions)
        if all(function.kept for function in functions):
            return None
        torch_untied = {"torch"} if not _TORCH_REBOUND.search(text) else set()
        named = self._names_outside(functions)  # every identifier of the kept text
        called = self._calls_outside(functions)  # ...called there as `f(...)` or `self.f(...)`
        by_class: dict[str | None, set[str]] = {}  # the identifiers of each class's kept methods
        active = set()  # the names of the functions kept for their words
        amp = _AmpNames(self)
        candidates = []
        for function in functions:
            if function.kept:
                self._keep(function, named, called, by_class)
                active.add(function.node.name)
            else:
                candidates.append(function)
                function.identifiers = self._names(function)
                function.assigned, function.bound = _assignments(function.node)
                function.tied = set(_TIED.findall(text, function.start, function.end))
                function.converts = set((_CONVERSION if vocab.FLOAT32 in text[function.start:function.end] else _FLOAT)
                                        .findall(text, function.start, function.end))
        amp.add([function.node for function in functions if function.kept])
        changed = True
        while changed:
            changed = False
            referenced = amp.names - _UNTIED - torch_untied
            bindable = amp.names | {"torch", "self", "cls"}
            kept = []
            for function in candidates:
                if function.kept:
                    continue
                name = function.node.name
                if (name in called or name in bindable or function.identifiers & active
                        or function.assigned & (called | by_class.get(function.owner, set()))
                        or function.tied & named or function.converts & amp.converted
                        or (amp.converted_outside and function.identifiers & amp.converted and function.bound & named)
                        or function.identifiers & referenced or function.bound & bindable):
                    function.kept = changed = True
                    self._keep(function, named, called, by_class)
                    kept.append(function.node)
            if kept:
                amp.add(kept)
        blanked = [function for function in functions if not function.kept]
        if not blanked or sum(f.end - f.start for f in blanked) < max(min_share * len(text), 1):
            return None
        return self._blank(blanked)

    def _keep(self, function: _Function, named: set[str], called: set[str], by_class: dict) -> None:
        """Note what a kept function names and calls."""
        identifiers = self._names(function)
        named |= identifiers
        called.update(_CALLED.findall(self.text, function.start, function.end))
        if function.owner is not None:
            by_class.setdefault(function.owner, set()).update(identifiers)

    def _calls_outside(self, functions: list[_Function]) -> set[str]:
        names: set[str] = set()
        position = 0
        for function in sorted(functions, key=lambda f: f.start):
            names.update(_CALLED.findall(self.text, position, function.start))
            position = function.end
        names.update(_CALLED.findall(self.text, position))
        return names

    def _keep_a_backward(self, functions: list[_Function]) -> None:
        """Whether the module runs a backward at all is one fact (AMP005): when no code kept anyway runs one, the
        functions that may are kept."""
        text = self.text
        if any(_BACKWARD.search(text, f.start, f.end) for f in functions if f.kept):
            return
        position = 0
        for function in sorted(functions, key=lambda f: f.start):
            if _BACKWARD.search(text, position, function.start):
                return
            position = function.end
        if _BACKWARD.search(text, position):
            return
        for function in functions:
            if _BACKWARD.search(text, function.start, function.end):
                function.kept = True

    def _keep_manual_optimization(self, functions: list[_Function]) -> None:
        """A class in Lightning's manual optimization (its methods name both `manual_backward` and
        `automatic_optimization`) keeps every method: AMP001 reads the switch in any of them and follows every
        method's calls to an fp32 island (amplint/facts/frameworks.py)."""
        text = self.text
        if vocab.MANUAL_BACKWARD not in text or vocab.LIGHTNING_MANUAL_SWITCH not in text:
            return
        words: dict[str, set[str]] = {}
        for function in functions:
            if function.owner is not None:
                body = text[function.start:function.end]
                words.setdefault(function.owner, set()).update(
                    word for word in (vocab.MANUAL_BACKWARD, vocab.LIGHTNING_MANUAL_SWITCH) if word in body)
        manual = {owner for owner, found in words.items() if len(found) == 2}
        for function in functions:
            if function.owner in manual:
                function.kept = True

    def _names(self, function: _Function) -> set[str]:
        """The identifiers of a function's text (strings and comments included: a superset of its names)."""
        return set(_IDENTIFIER.findall(self.text, function.start, function.end))

    def _names_outside(self, functions: list[_Function]) -> set[str]:
        names: set[str] = set()
        position = 0
        for function in sorted(functions, key=lambda f: f.start):
            names.update(_IDENTIFIER.findall(self.text, position, function.start))
            position = function.end
        names.update(_IDENTIFIER.findall(self.text, position))
        return names

    # the blanked text ------------------------------------------------------------------------------------
    def _blank(self, blanked: list[_Function]) -> Slice:
        text = self.text
        ranges = sorted((function.start, function.end) for function in blanked)
        pieces, position = [], 0
        for start, end in ranges:
            pieces.append(text[position:start])
            pieces.append(_NOT_NEWLINE.sub(lambda match: " " * len(match.group()), text[start:end]))
            position = end
        pieces.append(text[position:])
        sliced = "".join(pieces)
        for offset in self._passes({id(function.node) for function in blanked}):
            sliced = f"{sliced[:offset]}pass{sliced[offset + 4:]}"
        return Slice(self._comment_tail(sliced, ranges), text, tuple(ranges))

    def _comment_tail(self, sliced: str, ranges: list[tuple[int, int]]) -> str:
        """The blanked lines after the last line of code made comments (`#` then spaces). libcst does not give
        back every layout of whitespace-only lines at the end of a module (`x = 1\\n\\n   \\n` loses its last two
        lines, and a fix of such a module is not offered); column-0 comment lines it does."""
        starts, length = self.starts, len(sliced)
        row = len(starts)
        while row > 0:
            line = sliced[starts[row - 1]:starts[row] if row < len(starts) else length].strip()
            if line and not line.startswith("#"):
                break
            row -= 1
        tail = starts[row] if row < len(starts) else length
        if not ranges or ranges[-1][1] <= tail:
            return sliced
        pieces, position = [sliced[:tail]], tail
        for start, end in ranges:
            for line_start in starts[bisect.bisect_left(starts, max(start, tail)):bisect.bisect_left(starts, end)]:
                if sliced[line_start] == " ":
                    pieces += [sliced[position:line_start], "#"]
                    position = line_start + 1
        pieces.append(sliced[position:])
        return "".join(pieces)

    def _passes(self, blanked: set[int]) -> list[int]:
        """Where `pass` goes in each class body that blanking empties: the first blanked method's `def` line,
        after its indentation (a `def` line has room for it)."""
        offsets = []
        for body in self.classes:
            if all(id(statement) in blanked for statement in body):
                start, end = self.span(body[0].lineno, body[0].lineno)
                line = self.text[start:end]
                offsets.append(start + len(line) - len(line.lstrip(" \t\f")))
        return offsets


# The qualified names whose local names a rule counts across the module: the deprecated spellings and the
# modules on their way (AMP007 rewrites an import only when every use of its name is one) and GradScaler itself
# (AMP013 drops an import no other code names).
def _api_prefixes() -> frozenset[str]:
    from amplint.facts.names import DEPRECATED_AMP, GRAD_SCALERS

    prefixes = set(GRAD_SCALERS)
    for name in DEPRECATED_AMP:
        parts = name.split(".")
        prefixes.update(".".join(parts[:end]) for end in range(2, len(parts) + 1))  # `torch` alone: see _UNTIED
    return frozenset(prefixes)


_API_PREFIXES = _api_prefixes()
_CONVERTERS = vocab.HALF_CONVERTERS  # the calls that make a model half precision (AMP012)


class _AmpNames:
    """The names a module-wide question may count or look up, read from the kept code (`_Statement`): names
    bound by imports of the AMP API (the head of a deprecated spelling, an alias of GradScaler); what a
    statement assigns that holds a word of the AMP API or one of those aliases (a scaler's name,
    `ctx = partial(autocast_alias, ...)`; `GS2 = GS` is one more alias). Apart, in `converted`: what an
    assignment that speaks of half precision assigns, and the receivers of such a statement's `.half()`,
    `.to()` and `.type()` calls (`model.half()`: a conversion of `model` back to float32 anywhere in the module
    may undo it; converted outside functions, an optimizer over its parameters built anywhere may be the one
    stepped). Names assigned from those names do not make more statements count
    (`x = scaler.get_scale()` ties no use of `x`): module-wide questions ask about the objects themselves, not
    about what is computed from them. Grown with each function the closure keeps (`add`)."""

    def __init__(self, slicer: _Slicer) -> None:
        self.slicer = slicer
        self.records: list[_Statement] = []
        self.aliases: set[str] = set()
        self.names: set[str] = set()
        self.converted: set[str] = set()  # the models made half precision
        self.converted_outside = False  # ... by code outside functions
        self.add(list(slicer.others), outside=True)

    def add(self, statements: list[ast.stmt], outside: bool = False) -> None:
        """Read these statements (with their blocks); `outside`: of no function (module or class level)."""
        stack = list(statements)
        while stack:
            statement = stack.pop()
            record = _Statement(statement, self.slicer)
            if outside and record.half:
                self.converted_outside = True
            self.aliases |= record.imported
            self.records.append(record)
            if not isinstance(statement, ast.ClassDef):  # a class's body is collected by the slicer
                for block in _blocks(statement):
                    stack.extend(block)
        self.names |= self.aliases
        changed = True
        while changed:  # to a fixed point: an alias found makes more statements count
            changed = False
            for record in self.records:
                if not record.hot and (record.api or record.half or record.identifiers & self.aliases):
                    record.hot = changed = True
                    if record.api or record.identifiers & self.aliases:
                        self.names |= record.targets
                    if record.half:
                        self.converted |= record.receivers | (record.targets if record.assigns else set())
                    if record.alias:
                        self.aliases |= record.targets
_BLOCK_FIELDS = frozenset({"body", "orelse", "finalbody", "handlers", "cases"})


class _Statement:
    """One statement of the kept code (of a compound statement, its header): its names, what it assigns, the
    receivers of its conversion calls, and whether it holds a word of the AMP API or speaks of half precision."""

    __slots__ = ("identifiers", "targets", "receivers", "imported", "api", "half", "hot", "alias", "assigns")

    def __init__(self, statement: ast.stmt, slicer: _Slicer) -> None:
        self.hot = False
        identifiers: set[str] = set()
        targets: set[str] = set()
        receivers: set[str] = set()
        stack = [part for field, value in ast.iter_fields(statement) if field not in _BLOCK_FIELDS
                 for part in (value if isinstance(value, list) else [value]) if isinstance(part, ast.AST)]
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Name):
                identifiers.add(node.id)
                if not isinstance(node.ctx, ast.Load):
                    targets.add(node.id)
            elif isinstance(node, ast.Attribute):
                identifiers.add(node.attr)
                if not isinstance(node.ctx, ast.Load):
                    targets.add(node.attr)
            elif isinstance(node, ast.alias):
                local = node.asname or node.name.split(".", 1)[0]
                identifiers.add(local)
                targets.add(local)
            elif isinstance(node, ast.arg):
                identifiers.add(node.arg)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _CONVERTERS:
                receiver = node.func.value
                if isinstance(receiver, ast.Name):
                    receivers.add(receiver.id)
                elif isinstance(receiver, ast.Attribute):
                    receivers.add(receiver.attr)
            stack.extend(ast.iter_child_nodes(node))
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            identifiers.add(statement.name)
            targets.add(statement.name)
        self.imported = _imported_api(statement) if isinstance(statement, (ast.Import, ast.ImportFrom)) else set()
        self.identifiers, self.targets, self.receivers = identifiers, targets, receivers
        self.assigns = isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign))
        self.alias = isinstance(statement, ast.Assign) and isinstance(statement.value, (ast.Name, ast.Attribute))
        first = min([statement.lineno] + [d.lineno for d in getattr(statement, "decorator_list", ())])
        blocks = _blocks(statement)
        last = max(first, min(block[0].lineno for block in blocks) - 1) if blocks else statement.end_lineno
        if slicer.has_word(first, last):
            start, end = slicer.span(first, last)
            self.api = bool(_API.search(slicer.text, start, end))
            self.half = bool(_HALF.search(slicer.text, start, end))
        else:
            self.api = self.half = False


def _special(name: str) -> bool:
    """A special method (`__init__`, `__call__`): Python calls it, code seldom names it."""
    return name.startswith("__") and name.endswith("__")


def _imported_api(statement: ast.Import | ast.ImportFrom) -> set[str]:
    """The local names an import binds to a module or a name of the AMP API (`from torch.cuda import amp`,
    `from torch.cuda.amp import GradScaler as GS`), `torch` itself left out."""
    found = set()
    for alias in statement.names:
        if isinstance(statement, ast.Import):
            qualified = alias.name if alias.asname else alias.name.split(".", 1)[0]
        elif statement.level or statement.module is None:
            continue
        else:
            qualified = f"{statement.module}.{alias.name}"
        if qualified in _API_PREFIXES:
            found.add(alias.asname or alias.name.split(".", 1)[0])
    return found


def _blocks(statement: ast.stmt) -> list[list[ast.stmt]]:
    """The statement blocks of a compound statement (none for a simple one)."""
    blocks = [getattr(statement, field, None) for field in ("body", "orelse", "finalbody")]
    blocks += [handler.body for handler in getattr(statement, "handlers", ())]
    blocks += [case.body for case in getattr(statement, "cases", ())]
    return [block for block in blocks if block]


def _assignments(function: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[set[str], set[str]]:
    """(the attributes a function assigns on `self`, `self.name = ...`, `self.a.name = ...`; the names it binds by
    assignment, import or definition), nested code included."""
    attributes: set[str] = set()
    names: set[str] = set()
    stack = list(function.body)
    while stack:
        statement = stack.pop()
        if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = list(statement.targets) if isinstance(statement, ast.Assign) else [statement.target]
            while targets:
                target = targets.pop()
                if isinstance(target, (ast.Tuple, ast.List)):
                    targets.extend(target.elts)
                elif isinstance(target, ast.Starred):
                    targets.append(target.value)
                elif isinstance(target, ast.Attribute):
                    root = target.value
                    while isinstance(root, ast.Attribute):
                        root = root.value
                    if isinstance(root, ast.Name) and root.id == "self":  # another object's: the function's own
                        attributes.add(target.attr)
                elif isinstance(target, ast.Name):
                    names.add(target.id)
        elif isinstance(statement, (ast.Import, ast.ImportFrom)):
            names.update(alias.asname or alias.name.split(".", 1)[0] for alias in statement.names)
        elif isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(statement.name)
        for block in _blocks(statement):
            stack.extend(block)
    return attributes, names
