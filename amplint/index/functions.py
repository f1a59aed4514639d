"""Per-function summaries of one file, the project index's record of it (phase 1).

Built from the same `ast` walk as the screen's `Summary` (amplint/index/summary.py): one parse per file. What a
function does is a set of facts, named once here (`FACTS`), from the same definitions the screen and the libcst
facts layer use: what a call is, the one classifier's (amplint/calls.py: `effect`, `function_effects`) given what
the file knows of the receiver (a GradScaler: `Summary.scaler_names`; an optimizer: `_used_as_optimizer`); a
scaled backward is `<scaler>.scale(loss).backward()`; an autocast region is a with-item the screen's `can_open`
accepts:

- `builds_scaler`: constructs a GradScaler (not with a literal `enabled=False`); `keeps_scaler`: returns it,
  stores it on an object (`self.scaler = ...`), passes it to a call, or restores it with `load_state_dict`;
- `backward` (a method `backward()`/`manual_backward()` or `torch.autograd.backward`/`grad`; a function of a
  module, `hm.backward(...)` of `import helpers as hm`, is none), `scaled_backward`;
- `unscale`, `clip` (`clip_grad_norm_`/`clip_grad_value_`, a torch clip, not a framework's method), `step`
  (a method `step()`), `optimizer_step` (also, on an object used as an optimizer is: `zero_grad()` on it in the
  file, or handed to a scaler's `step`/`unscale_`, as the facts layer's `is_optimizer`; not in a region written
  disabled), `scaler_step`, `scaler_update` (on something that can hold a GradScaler);
- `region` (opens an autocast region not written disabled), `disabled_region`, `autocast_off` (decorated
  `@autocast(enabled=False)`: nothing it does or calls runs in a caller's region), `returns_float32` (every
  return is computed with autocast off), `no_grad`
  (`no_grad`/`inference_mode`, a with or a decorator), `enable_grad`, `eval` (calls `.eval()`), `loop`;
- `bfloat16_region` / `other_region`: the dtype of each enabled region it opens (bfloat16, CPU's default
  included; else float16 or not known), `half_model` (`x.half()`, `x.to(torch.float16)`).

Beside the facts, each function records the entries of what it returns that are surely not low precision
(`items`: a dict's entries by key, a tuple's elements by position; `returned_items`), with the entries of other
functions' results they are taken from, for the project index to follow (`ModuleView.plain_item`). These, the
parameters it casts at entry (`casts`) and those whose dtype its returns keep (`keeps`) are asked by the fp32-island
rule of the few functions its regions reach: each is computed when first read, from the file's tree while it is
alive, else from its text parsed again (a record sent to another process carries its text).

Each call that may reach code of the project is kept with where it runs: in a loop, in an autocast region that
can be enabled, under no_grad. Calls to what the file imports from outside the project are kept too (the index
does not know yet which modules are the project's); the project index drops them when resolving.

A `FileIndex` is plain data (`to_json`/`from_json`) so that the cache can keep it by content.
"""

from __future__ import annotations

import ast
import hashlib
import json
import warnings
import weakref
from dataclasses import dataclass, field

from amplint import vocabulary as vocab
from amplint.calls import (EFFECT_CALLEES, EFFECT_METHODS, GRAD_MODE_CALLEES, autocast_call, effect,
                           function_effects, grad_mode, innermost_grad_mode, is_float32_cast, scale_call,
                           scaler_enabled, written_disabled)
from amplint.vocabulary import EFFECTS, INTEGER_OPS, LAYOUT_METHODS, GRAD_SCALERS, Effect
from amplint.index.shapes import call_shape
from amplint.index.summary import ENTER_CONTEXT, FUNCTIONS, Summary, _child_nodes, dotted

FACTS = EFFECTS  # what a function does (amplint/vocabulary.py)
# Calls that never reach project code: builtins and the methods every tensor or container has are not kept.
_NOT_PROJECT = frozenset({
    "print", "len", "range", "enumerate", "zip", "isinstance", "getattr", "setattr", "hasattr", "super", "int",
    "float", "str", "list", "dict", "tuple", "set", "min", "max", "sum", "abs", "sorted", "open", "type", "iter",
    "next", "map", "filter", "any", "all", "round", "repr", "format", "vars", "id", "bool", "object"})


class _Record:
    """A record with facts computed when first read: pickled slot by slot (a deferred fact travels as the file's
    text, never its tree), equal when everything it says is (`to_json`, deferred facts computed)."""

    __slots__ = ()

    def __getstate__(self):
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setstate__(self, state) -> None:
        for name, value in zip(self.__slots__, state):
            setattr(self, name, value)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.to_json() == other.to_json()

    __hash__ = None  # mutable, as the dataclasses they replace


class CallRecord(_Record):
    """One call a function (or module-level code) makes. What it hands over (`args`) is computed when first read,
    from the tree of the file (`_Deferred`): only the callers of a function whose parameter is backpropagated are
    ever asked (amplint/index/flows.py, `parameter_flow`), and following every argument of every call of every
    indexed file cost more than the rest of the index."""

    __slots__ = ("callee", "line", "in_loop", "in_region", "no_grad", "_args", "_deferred")

    def __init__(self, callee: str, line: int, in_loop: bool = False, in_region: bool = False,
                 no_grad: bool = False, args: tuple[str, ...] = ()) -> None:
        self.callee = callee  # as written: "train_one_epoch", "self.optimizer_step", "utils.clip", "fn"
        self.line = line
        self.in_loop = in_loop  # in a loop's body of its function
        self.in_region = in_region  # in an autocast region that can be enabled (a with or the function's decorator)
        self.no_grad = no_grad  # under no_grad/inference_mode (a with or the function's decorator)
        self._args = args
        # (the file's text, the call's place: line, column, end line, end column, and its function's line and
        # column, (0, 0) at module level): not yet computed
        self._deferred: tuple[_Deferred, tuple[int, ...]] | None = None

    @property
    def args(self) -> tuple[str, ...]:
        """What it hands over, where known (amplint/index/flows.py: `argument_flows`)."""
        if self._deferred is not None:
            source, place = self._deferred
            self._deferred = None
            self._args = source.argument_flows(place)
        return self._args

    def to_json(self, deferred: bool = False) -> list:
        """With `deferred`, arguments not yet followed are left out and the call's place written instead, for
        `from_json` with the file's text."""
        data = self.eager_json()
        if deferred and self._deferred is not None:
            return data + [[], list(self._deferred[1])]
        return data + [list(self.args)] if self.args else data

    def eager_json(self) -> list:
        """What the call's record says without its arguments (a function of the file's text and this)."""
        return [self.callee, self.line, int(self.in_loop), int(self.in_region), int(self.no_grad)]

    @classmethod
    def from_json(cls, data: list, source: _Deferred | None = None) -> CallRecord:
        """`source`: the file's text, for a record written with its arguments deferred (a KeyError without it)."""
        record = cls(data[0], data[1], bool(data[2]), bool(data[3]), bool(data[4]),
                     tuple(data[5]) if len(data) > 5 else ())
        if len(data) > 6:
            if source is None:
                raise KeyError("deferred arguments without the file's text")
            record._deferred = (source, tuple(data[6]))
        return record

    def __repr__(self) -> str:
        return f"CallRecord({self.callee!r}, {self.line}, {self.in_loop}, {self.in_region}, {self.no_grad})"


class FunctionRecord(_Record):
    """What one function does (`does`, `lines`, `calls`) and, for the fp32-island rule, what it does with its
    parameters and returns (`casts`, `keeps`, `items`). These three are computed when first read, from the tree
    of the file (`_Deferred`): most functions of a project are never asked about them."""

    __slots__ = ("qualname", "line", "params", "does", "lines", "calls", "_casts", "_keeps", "_items", "_deferred")

    def __init__(self, qualname: str, line: int, params: tuple[str, ...] = (), does: set[str] | None = None,
                 lines: dict[str, int] | None = None, calls: list[CallRecord] | None = None,
                 casts: tuple[str, ...] = (), keeps: tuple[str, ...] = (),
                 items: dict[str, tuple[tuple[str, str], ...]] | None = None) -> None:
        self.qualname = qualname  # "train" or "Trainer.train_step" (as the facts layer's FunctionInfo.qualname)
        self.line = line
        self.params = params
        self.does: set[str] = set() if does is None else does
        self.lines: dict[str, int] = {} if lines is None else lines  # fact -> line of its first occurrence
        self.calls: list[CallRecord] = [] if calls is None else calls
        self._casts = casts
        self._keeps = keeps
        self._items = {} if items is None else items
        self._deferred: tuple[_Deferred, int] | None = None  # (the file's text, the def's column): not yet computed

    @property
    def casts(self) -> tuple[str, ...]:
        """The parameters the body casts to float32 before anything else (`casts_at_entry`)."""
        if self._deferred is not None:
            self._settle()
        return self._casts

    @property
    def keeps(self) -> tuple[str, ...]:
        """With `lowers_nothing`: the parameters whose dtype what it returns carries (not those only used as
        indices, sizes or written into another tensor: `get_segments(x, start_idxs, n)` carries `x`'s)."""
        if self._deferred is not None:
            self._settle()
        return self._keeps

    @property
    def items(self) -> dict[str, tuple[tuple[str, str], ...]]:
        """The entries of what it returns that are surely not low precision (`returned_items`): "k:<key>" of a
        dict, "p:<n>" of a tuple -> the (callee as written, entry) of other functions' results each is taken
        from."""
        if self._deferred is not None:
            self._settle()
        return self._items

    def _settle(self) -> None:
        source, column = self._deferred
        self._deferred = None
        node = source.function(self.line, column)
        if node is None:
            return
        try:
            self._casts, self._items = _parameter_facts(node, self.params)
            if Effect.LOWERS_NOTHING in self.does:
                self._keeps = _dtype_sources(node, self.params)
        except RecursionError:  # an expression nested too deep to follow: nothing known
            self._casts, self._keeps, self._items = (), (), {}

    def __repr__(self) -> str:
        return f"FunctionRecord({self.qualname!r}, {self.line}, {self.params!r}, does={sorted(self.does)!r})"

    def to_json(self, deferred: bool = False) -> dict:
        """Everything, the facts computed when first read included; with `deferred`, a fact not yet computed is
        left out and the def's column written instead ("z"), for `from_json` with the file's text."""
        data = self.eager_json()
        data["c"] = [call.to_json(deferred) for call in self.calls]
        if deferred and self._deferred is not None:
            data["z"] = self._deferred[1]
            return data
        data.update({"x": list(self.casts), "k": list(self.keeps),
                     "it": {slot: [list(ref) for ref in refs] for slot, refs in self.items.items()}})
        return data

    def eager_json(self) -> dict:
        """What the function's record says without the facts computed when first read (`casts`, `keeps`, `items`,
        its calls' `args`: each a function of the file's text and this)."""
        return {"q": self.qualname, "l": self.line, "p": list(self.params), "d": sorted(self.does),
                "dl": self.lines, "c": [call.eager_json() for call in self.calls]}

    @classmethod
    def from_json(cls, data: dict, source: _Deferred | None = None) -> FunctionRecord:
        """`source`: the file's text, for a record written with its facts deferred (a KeyError without it)."""
        summary = cls(data["q"], data["l"], tuple(data["p"]), set(data["d"]), dict(data["dl"]),
                      [CallRecord.from_json(call, source) for call in data["c"]], tuple(data.get("x", ())),
                      tuple(data.get("k", ())), {slot: tuple((ref[0], ref[1]) for ref in refs)
                                                 for slot, refs in data.get("it", {}).items()})
        if "z" in data:
            if source is None:
                raise KeyError("deferred facts without the file's text")
            summary._deferred = (source, data["z"])
        return summary


class _Deferred:
    """The text a file's record was built from, for the facts computed when first asked (`FunctionRecord.casts`,
    `.keeps`, `.items`, `CallRecord.args`): the tree it was built from while that is alive, else the text parsed
    again (in another process: the record travels with its text, not its tree)."""

    __slots__ = ("text", "_tree", "_module", "_functions", "_calls", "_scopes", "_digest")

    def __init__(self, text: str, tree: ast.AST | None = None) -> None:
        self.text = text
        self._digest: str | None = None
        self._tree = weakref.ref(tree) if tree is not None else None
        self._module: ast.AST | None = None  # the tree, once a deferred fact was asked
        self._functions: dict[tuple[int, int], ast.AST] | None = None  # (line, column) of a def -> the def
        self._calls: dict[tuple[int, ...], ast.Call] | None = None  # a call's place -> the call
        self._scopes: dict[tuple[int, int], object] = {}  # (line, column) of a def, (0, 0): the module -> its Scope

    def _parsed(self) -> ast.AST | None:
        if self._module is None:
            tree = self._tree() if self._tree is not None else None
            self._tree = None
            if tree is None:
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        tree = ast.parse(self.text)
                except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
                    return None
            self._module = tree
        return self._module

    def text_digest(self) -> str:
        if self._digest is None:
            self._digest = text_digest(self.text)
        return self._digest

    def function(self, line: int, column: int) -> ast.AST | None:
        if self._functions is None:
            tree = self._parsed()
            self._functions = {} if tree is None else {
                (node.lineno, node.col_offset): node for node in ast.walk(tree) if type(node) in FUNCTIONS}
        return self._functions.get((line, column))

    def argument_flows(self, place: tuple[int, ...]) -> tuple[str, ...]:
        """`argument_flows` of the call at `place` (`call_place`), in its function's scope."""
        from amplint.index.flows import Scope, argument_flows  # asked by AMP009's question only
        if self._calls is None:
            tree = self._parsed()
            self._calls = {} if tree is None else {call_place(node): node for node in ast.walk(tree)
                                                   if type(node) is ast.Call}
        call = self._calls.get(tuple(place[:4]))
        where = (place[4], place[5])
        scope_node = self.function(*where) if where != (0, 0) else self._parsed()
        if call is None or scope_node is None:
            return ()
        if where not in self._scopes:
            self._scopes[where] = Scope(scope_node)
        try:
            return argument_flows(self._scopes[where], call)
        except RecursionError:  # an expression nested too deep to follow: nothing known
            return ()

    def __getstate__(self):
        return (self.text,)  # never its tree

    def __setstate__(self, state: tuple) -> None:
        self.text, self._tree, self._module, self._functions, self._calls, self._scopes, self._digest = \
            state[0], None, None, None, None, {}, None


def call_place(call: ast.Call) -> tuple[int, int, int, int]:
    """Where a call is written: (line, column, end line, end column); a call nested in another at its start
    (`f(x)(y)`, `a.b(x).c(y)`) ends before it."""
    return call.lineno, call.col_offset, call.end_lineno or 0, call.end_col_offset or 0


@dataclass
class FileIndex:
    """What one file holds for the project index."""

    functions: dict[str, FunctionRecord] = field(default_factory=dict)
    # local name -> (module as written, name in it or None for `import x` / `import x as y`, relative level)
    imports: dict[str, tuple[str, str | None, int]] = field(default_factory=dict)
    star_imports: list[tuple[str, int]] = field(default_factory=list)  # (module, level) of `from x import *`
    classes: dict[str, list[str]] = field(default_factory=dict)  # class -> its bases as written
    # "Class.attr" or a module-level/local name -> the callee of the call it is assigned (`self.h = Helper()`)
    instances: dict[str, str] = field(default_factory=dict)
    module_calls: list[CallRecord] = field(default_factory=list)  # calls at module level (scripts)
    # Names called or called a method of and never bound in the file (`Summary.free_names`), and the names bound
    # at module level other than by a def, a class or an import (`Summary.module_bound`).
    free: list[str] = field(default_factory=list)
    globals: list[str] = field(default_factory=list)
    # The text the record was built from, where its facts computed when first read come from (None: a record
    # written whole, by hand or before deferring): part of `digest`, never of `to_json` or equality.
    source: _Deferred | None = field(default=None, compare=False, repr=False)

    def to_json(self, deferred: bool = False) -> dict:
        """`deferred`: the functions' facts not yet computed are left out (`FunctionRecord.to_json`); the cache
        stores records so, and reads them back with the file's text (`from_json`)."""
        return {"f": {name: record.to_json(deferred) for name, record in self.functions.items()},
                "i": {name: list(value) for name, value in self.imports.items()},
                "s": [list(item) for item in self.star_imports], "k": self.classes, "n": self.instances,
                "m": [call.to_json(deferred) for call in self.module_calls], "fr": self.free, "g": self.globals}

    @classmethod
    def from_json(cls, data: dict, text: str | None = None) -> FileIndex:
        """`text`: the file's, for a record written with its facts deferred."""
        source = _Deferred(text) if text is not None else None
        return cls({name: FunctionRecord.from_json(value, source) for name, value in data["f"].items()},
                   {name: (value[0], value[1], value[2]) for name, value in data["i"].items()},
                   [(item[0], item[1]) for item in data["s"]], data["k"], data["n"],
                   [CallRecord.from_json(call, source) for call in data["m"]], list(data.get("fr", ())),
                   list(data.get("g", ())), source)

    def digest(self) -> str:
        """A fingerprint of what other files can read of this one (the cache keys dependants by it). A record built
        from a text (`index_text`, or the cache's with the text) is a function of that text, its deferred facts
        included: the text's digest, the same whether or not they were computed, and computing none of them."""
        if self.source is None:
            return text_digest(json.dumps(self.to_json(), sort_keys=True))
        return self.source.text_digest()

    def call_digest(self, call: CallRecord) -> str:
        """A fingerprint of one of its calls (`digest`'s, for the fingerprint of the calls of a name)."""
        if self.source is None:
            return json.dumps(call.to_json())
        return f"{json.dumps(call.eager_json())}\0{self.source.text_digest()}"


def text_digest(text: str) -> str:
    """The index's fingerprint of a text (a file's, or what a question's answer read, written out)."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


def index_text(text: str, summary: Summary | None = None) -> FileIndex | None:
    """The file's index record, from the summary's `ast` walk (parsed here when the screen has not); None when the
    text does not parse."""
    summary = summary if summary is not None else Summary(text)
    try:
        summary.parse_tree()
    except Exception:  # noqa: BLE001 - unparsable: the engine reports it; the index has nothing to say
        return None
    return _Builder(summary).build()


def import_table(summary: Summary) -> tuple[dict[str, tuple[str, str | None, int]], list[tuple[str, int]]]:
    """The file's import statements as its record holds them (`FileIndex.imports`, `star_imports`), from the
    summary's tree alone: what a question about who imports whom needs, without the rest of the record."""
    return import_table_of(summary.import_nodes)


def import_table_of(nodes) -> tuple[dict[str, tuple[str, str | None, int]], list[tuple[str, int]]]:
    """`import_table` of these import statements (`ast.Import`, `ast.ImportFrom`), in order."""
    imports: dict[str, tuple[str, str | None, int]] = {}
    star_imports: list[tuple[str, int]] = []
    for node in nodes:
        if type(node) is ast.Import:
            for alias in node.names:
                if alias.asname:
                    imports[alias.asname] = (alias.name, None, 0)
                else:
                    head = alias.name.split(".")[0]
                    imports.setdefault(head, (head, None, 0))
        elif type(node) is ast.ImportFrom:
            module = node.module or ""
            for alias in node.names:
                if alias.name == "*":
                    star_imports.append((module, node.level))
                else:
                    imports[alias.asname or alias.name] = (module, alias.name, node.level)
    return imports, star_imports


class _Builder:
    def __init__(self, summary: Summary) -> None:
        self.summary = summary
        self.deferred = _Deferred(summary.text, summary.tree)
        self.index = FileIndex(source=self.deferred)
        self.by_id: dict[int, FunctionRecord] = {}
        self.nodes: dict[int, ast.AST] = {}  # id of a def -> the def
        self.scalers = summary.scaler_names()
        self._optimizers: set[str] | None = None  # `_used_as_optimizer`
        self._shapes: dict[int, object] = {}  # id of a call or callee -> its shape, if it may set a grad mode
        self._no_grads: dict[tuple, bool] = {}  # (function, withs around a call) -> `_no_grad`
        self._written_disabled: dict[int, bool] = {}  # id of an opener -> `_disabled`
        self.class_nodes: list[ast.ClassDef] = []

    def build(self) -> FileIndex:
        tree = self.summary.tree
        self._definitions(tree.body, "")
        self._imports()
        self._calls()
        self._regions()
        self._lowering()
        self._scaler_builds()
        self._instances()
        self.index.free = sorted(self.summary.free_names())
        self.index.globals = sorted(self.summary.module_bound)
        return self.index

    # definitions -------------------------------------------------------------------------------------------
    def _definitions(self, body: list, class_name: str) -> None:
        """Every def with its qualname (as the facts layer names it: "Class.method", else the bare name)."""
        pending = [(body, class_name)]
        while pending:
            statements, owner = pending.pop()
            for node in statements:
                kind = type(node)
                if kind in FUNCTIONS:
                    qualname = f"{owner}.{node.name}" if owner else node.name
                    arguments = node.args
                    params = tuple(a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs))
                    summary = FunctionRecord(qualname, node.lineno, params)
                    summary._deferred = (self.deferred, node.col_offset)  # `casts`, `items`: when first read
                    self.index.functions.setdefault(qualname, summary)
                    self.by_id[id(node)] = summary
                    self.nodes[id(node)] = node
                    for decorator in node.decorator_list:
                        if self._grad_mode(decorator) is False:
                            self._note(summary, Effect.NO_GRAD, node.lineno)
                    pending.append((node.body, ""))
                elif kind is ast.ClassDef:
                    self.class_nodes.append(node)
                    self.index.classes[node.name] = [name for name in map(dotted, node.bases) if name]
                    pending.append((node.body, node.name))
                else:
                    for child in ast.iter_child_nodes(node):
                        if type(child) in FUNCTIONS or type(child) is ast.ClassDef:
                            pending.append(([child], owner))
                        elif hasattr(child, "body") and isinstance(getattr(child, "body"), list):
                            pending.append((child.body, owner))
                            pending.append((getattr(child, "orelse", []) or [], owner))

    def _instances(self) -> None:
        """What a name holds when it is assigned a call (`self.helper = Helper(...)` in a method: "Class.helper";
        `h = Helper(...)` in a function: "qualname:h"; at module level: ":h"), so that `self.helper.run()` and `h()` can be resolved to
        the class's `run` and `__call__`. A name assigned calls of two callees holds either: it is left out."""
        assigned: dict[str, set[str]] = {}
        for function, node in self.summary.call_assignments:
            owner = self._owner(function)
            targets = node.targets if type(node) is ast.Assign else [node.target]
            if len(targets) != 1 or (owner is None and function is not None):
                continue  # several targets, or in a lambda
            target = targets[0]
            qualname = owner.qualname if owner is not None else ""  # "" at module level: ":name"
            class_name = qualname.split(".")[0] if "." in qualname else ""
            if type(target) is ast.Attribute and type(target.value) is ast.Name and target.value.id == "self" \
                    and class_name:
                key = f"{class_name}.{target.attr}"
            elif type(target) is ast.Name:
                key = f"{qualname}:{target.id}"
            else:
                continue
            value = node.value
            while type(value.func) is ast.Attribute and value.func.attr in vocab.MODULE_RETURNS_SELF \
                    and type(value.func.value) is ast.Call:
                value = value.func.value  # `Net().cuda()`: the module itself
            assigned.setdefault(key, set()).add(dotted(value.func) or "")
        self._annotated(assigned)
        self.index.instances = {key: next(iter(callees)) for key, callees in assigned.items()
                                if len(callees) == 1 and "" not in callees}

    def _annotated(self, assigned: dict[str, set[str]]) -> None:
        """A parameter annotated with a class (`def run(model: Model)`: "run:model"), and an attribute annotated so
        in a class body or a method (`model: Model`, `self.model: Model = model`: "Class.model"), as if assigned a
        call of it: a hint, read only to find the method a call on the object runs (`model.optimize(...)`); an
        assignment of another callee makes the name unknown."""
        for function_id, owner in self.by_id.items():
            arguments = self.nodes[function_id].args
            for argument in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs):
                written = _annotation(argument.annotation)
                if written and argument.arg not in ("self", "cls"):
                    assigned.setdefault(f"{owner.qualname}:{argument.arg}", set()).add(written)
        for node in self.class_nodes:
            for statement in node.body:
                if type(statement) is ast.AnnAssign and type(statement.target) is ast.Name \
                        and type(statement.value) is not ast.Call:
                    written = _annotation(statement.annotation)
                    if written:
                        assigned.setdefault(f"{node.name}.{statement.target.id}", set()).add(written)
        for function_id, owner in self.by_id.items():
            if "." not in owner.qualname:
                continue
            class_name = owner.qualname.split(".")[0]
            arguments = self.nodes[function_id].args
            hinted = {argument.arg: _annotation(argument.annotation)
                      for argument in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)}
            if not any(hinted.values()) and not any(type(n) is ast.AnnAssign for n in self.nodes[function_id].body):
                continue
            for node in self.nodes[function_id].body:  # the method's own statements (`self.model = model`)
                if type(node) is ast.Assign and len(node.targets) == 1 and type(node.value) is ast.Name \
                        and hinted.get(node.value.id) and type(node.targets[0]) is ast.Attribute \
                        and type(node.targets[0].value) is ast.Name and node.targets[0].value.id == "self":
                    # `self.model = model`, the parameter annotated `model: Model`
                    assigned.setdefault(f"{class_name}.{node.targets[0].attr}", set()).add(hinted[node.value.id])
                elif type(node) is ast.AnnAssign and type(node.value) is not ast.Call \
                        and type(node.target) is ast.Attribute and type(node.target.value) is ast.Name \
                        and node.target.value.id == "self":
                    written = _annotation(node.annotation)
                    if written:
                        assigned.setdefault(f"{class_name}.{node.target.attr}", set()).add(written)

    def _imports(self) -> None:
        self.index.imports, self.index.star_imports = import_table(self.summary)

    # calls -------------------------------------------------------------------------------------------------
    def _owner(self, function) -> FunctionRecord | None:
        return self.by_id.get(id(function)) if type(function) in FUNCTIONS else None

    def _note(self, summary: FunctionRecord | None, fact: str, line: int) -> None:
        if summary is None:
            return  # module-level code: only its calls are asked about (`module_calls`)
        summary.does.add(fact)
        summary.lines.setdefault(fact, line)

    def _calls(self) -> None:
        summary = self.summary
        scalers = self.scalers
        for name, sites in summary.call_sites_by_name.items():
            for function, withs, receiver, loops, call in sites:
                if type(function) is ast.Lambda:
                    continue
                owner = self._owner(function)
                line = call.lineno
                if loops:
                    self._note(owner, Effect.LOOP, line)
                self._fact_of_call(owner, name, receiver, call, line, scalers, withs)
                callee = dotted(call.func)
                if callee is None or callee in _NOT_PROJECT:
                    continue
                record = CallRecord(callee, line, bool(loops), self._in_region(function, withs),
                                    self._no_grad(function, withs))
                if call.args or call.keywords:  # what it hands over: followed when first asked
                    record._deferred = (self.deferred, (*call_place(call), *((function.lineno, function.col_offset)
                                                                             if function is not None else (0, 0))))
                (owner.calls if owner is not None else self.index.module_calls).append(record)

        called = {id(call.func) for _, _, _, _, call in summary.call_sites_by_name.get(vocab.UNSCALE, ())}
        for function, attribute in summary.unscale_attributes:
            if id(attribute) not in called and type(function) is not ast.Lambda:
                # `unscale = scaler.unscale_`, `partial(scaler.unscale_, opt)`, `map(scaler.unscale_, opts)`: the
                # function may unscale under another name
                self._note(self._owner(function), Effect.UNSCALE, attribute.lineno)

    def _fact_of_call(self, owner, name: str, receiver: str | None, call: ast.Call, line: int, scalers,
                      withs=()) -> None:
        """What the function does by making the call (`calls.effect`, `calls.function_effects`), given what the
        file knows of the receiver: a GradScaler (`scalers`, `Summary.scaler_names`), an optimizer
        (`_used_as_optimizer`); a backward on a scaler's `scale(...)` is a scaled one."""
        if not (receiver is not None and name in EFFECT_METHODS) and not self.summary.resolves(call.func,
                                                                                             EFFECT_CALLEES):
            return
        scaler = receiver in scalers  # also `x.step(arg)` with `x.update()` in one function: a scaler handed in
        optimizer = name == vocab.STEP and not scaler and receiver in self._used_as_optimizer()
        shape = call_shape(call, self.summary)
        kind = effect(shape, scaler, optimizer)
        for fact in function_effects(kind):
            if fact == Effect.OPTIMIZER_STEP and any(self.summary.can_open(item.context_expr) and self._disabled(
                    item.context_expr) for with_node in withs for item in with_node.items):
                continue  # a step in `autocast(enabled=False)` runs in no region
            self._note(owner, fact, line)
        if kind in (Effect.BACKWARD, Effect.MANUAL_BACKWARD) and scale_call(shape.inner):
            self._note(owner, Effect.SCALED_BACKWARD, line)

    def _used_as_optimizer(self) -> set[str]:
        """Receivers the file uses as only an optimizer is used: `x.zero_grad()`, or handed to a scaler's
        `step`/`unscale_` (`calls.effect`: the facts layer's `is_optimizer`, by use and never by name)."""
        if self._optimizers is None:
            found = {receiver for _, _, receiver, _, call in self.summary.call_sites_by_name.get(vocab.ZERO_GRAD, ())
                     if receiver and effect(call_shape(call, self.summary)) == Effect.ZERO_GRAD}
            for method in (vocab.STEP, vocab.UNSCALE):
                for _, _, receiver, _, call in self.summary.call_sites_by_name.get(method, ()):
                    if receiver and effect(call_shape(call, self.summary), receiver in self.scalers) in (
                            Effect.SCALER_STEP, Effect.UNSCALE):
                        found.update(name for name in map(dotted, call.args) if name)
            self._optimizers = found
        return self._optimizers

    def _in_region(self, function, withs) -> bool:
        summary = self.summary
        return any(self._enabled_opener(with_node) for with_node in withs) or (
            function is not None and any(summary.can_open(d) and not self._disabled(d)
                                         for d in summary.call_decorators.get(id(function), ())))

    def _enabled_opener(self, with_node) -> bool:
        can_open = self.summary.can_open
        return any(can_open(item.context_expr) and not self._disabled(item.context_expr) for item in with_node.items) \
            or any(withs and withs[-1] is with_node and call.args and can_open(call.args[0])
                   and not self._disabled(call.args[0])  # `with ExitStack() as s: s.enter_context(autocast(...))`
                   for _, withs, _, _, call in self.summary.call_sites_by_name.get(ENTER_CONTEXT, ()))

    def _no_grad(self, function, withs) -> bool:
        """Does the code run with gradients off: the innermost with-item or decorator of its function setting a
        known mode turns them off (`calls.innermost_grad_mode`, as the facts layer's `no_grad_opener`)?"""
        key = (id(function), *map(id, withs))
        if key not in self._no_grads:
            openers = [item.context_expr for with_node in reversed(withs) for item in reversed(with_node.items)]
            if type(function) in FUNCTIONS:
                openers += reversed(function.decorator_list)
            decided = innermost_grad_mode(shape for shape in map(self._grad_shape, openers) if shape is not None)
            self._no_grads[key] = decided is not None and decided[1] is False
        return self._no_grads[key]

    def _grad_mode(self, expr: ast.AST) -> bool | None:
        """The gradient mode a with-item, decorator or call sets (`calls.grad_mode`, the facts layer's too)."""
        shape = self._grad_shape(expr)
        return grad_mode(shape) if shape is not None else None

    def _grad_shape(self, expr: ast.AST):
        """The shape of a callee that may set the gradient mode (`calls.GRAD_MODE_CALLEES`), built once; None for
        any other (whose mode is none: no shape is built)."""
        key = id(expr)
        if key not in self._shapes:
            func = expr.func if type(expr) is ast.Call else expr
            self._shapes[key] = call_shape(expr, self.summary) if self.summary.resolves(
                func, GRAD_MODE_CALLEES) else None
        return self._shapes[key]

    def _regions(self) -> None:
        for with_node, function, _ in self.summary.withs:
            if type(function) is ast.Lambda:
                continue
            owner = self._owner(function)
            for item in with_node.items:
                expr = item.context_expr
                if self.summary.can_open(expr):
                    disabled = self._disabled(expr)
                    self._note(owner, Effect.DISABLED_REGION if disabled else Effect.REGION, with_node.lineno)
                    if not disabled:
                        self._note(owner, self._region_dtype(expr), with_node.lineno)
                mode = self._grad_mode(expr)
                if mode is not None:
                    self._note(owner, Effect.ENABLE_GRAD if mode else Effect.NO_GRAD, with_node.lineno)
        for function_id, decorators in self.summary.call_decorators.items():
            owner = self.by_id.get(function_id)
            if owner is None:
                continue
            openers = [d for d in decorators if self.summary.can_open(d)]
            if any(not self._disabled(d) for d in openers):
                self._note(owner, Effect.REGION, owner.line)
                for opener in openers:
                    if not self._disabled(opener):
                        self._note(owner, self._region_dtype(opener), owner.line)
            elif openers:  # `@autocast(enabled=False)`: its whole body, and what it calls, runs with autocast off
                self._note(owner, Effect.AUTOCAST_OFF, owner.line)
        if self.summary.contains(vocab.AUTOCAST):
            self._factories()
        for function_id, owner in self.by_id.items():
            if (Effect.DISABLED_REGION in owner.does or Effect.AUTOCAST_OFF in owner.does) and self._returns_float32(
                    self.nodes[function_id], Effect.AUTOCAST_OFF in owner.does):
                self._note(owner, Effect.RETURNS_FLOAT32, owner.line)

    def _factories(self) -> None:
        """`returns_autocast`: a function whose result opens an enabled region when a `with` enters it: it returns
        something that can open one (`return torch.autocast(...)`, `return nullcontext() if c else autocast(...)`,
        a name bound to one), or, a generator (a `@contextmanager`), yields inside a `with` that opens one. The
        line is the return's or the yield's. What is known of the region itself (its state, device, dtype) is the
        facts layer's, from the module's own tree; other modules see only this fact (a region maybe enabled)."""
        summary = self.summary
        for function_id, owner in self.by_id.items():
            function = self.nodes[function_id]
            own = _own_nodes(function)
            yields = [node for node in own if type(node) in (ast.Yield, ast.YieldFrom)]
            if yields:
                inside = {id(node) for with_node in own if type(with_node) in (ast.With, ast.AsyncWith)
                          and any(summary.can_open(item.context_expr) and not self._disabled(item.context_expr)
                                  for item in with_node.items)
                          for node in _own_nodes(with_node)}
                found = [node for node in yields if id(node) in inside]
                if found:
                    self._note(owner, Effect.RETURNS_AUTOCAST, min(node.lineno for node in found))
                continue
            opening = [node for node in own if type(node) is ast.Return and node.value is not None
                       and summary.can_open(node.value) and not self._disabled(node.value)]
            if opening:
                self._note(owner, Effect.RETURNS_AUTOCAST, min(node.lineno for node in opening))

    def _region_dtype(self, expr: ast.AST) -> str:
        """`bfloat16_region` for an opener whose region runs in bfloat16 (`dtype=torch.bfloat16`, the second
        positional argument, or a CPU region with no dtype: its default; `calls.Autocast.runs_in`), else
        `other_region` (float16, or not known)."""
        if type(expr) is not ast.Call:
            return Effect.OTHER_REGION
        runs_in = autocast_call(call_shape(expr, self.summary)).runs_in
        return Effect.BFLOAT16_REGION if runs_in == vocab.BFLOAT16 else Effect.OTHER_REGION

    def _disabled(self, expr: ast.AST) -> bool:
        """An opener written disabled (`calls.written_disabled`: `autocast(enabled=False)`), read once per node."""
        if type(expr) is not ast.Call:
            return False
        key = id(expr)
        if key not in self._written_disabled:
            self._written_disabled[key] = written_disabled(call_shape(expr, self.summary))
        return self._written_disabled[key]

    def _lowering(self) -> None:
        """`lowers_nothing`: the function runs no op autocast casts to a low dtype (no matmul, linear, conv, no
        module or function of the user's; only tensor methods and torch functions that keep a dtype, indexing,
        builtins): under any autocast, what it returns has its inputs' dtype (`get_segments(x, starts, n)`)."""
        from amplint.vocabulary import AUTOCAST_DTYPE_QUERIES

        queried = not AUTOCAST_DTYPE_QUERIES.isdisjoint(self.summary.identifiers)  # else no function casts so
        for function_id, owner in self.by_id.items():
            if _lowers_nothing(self.nodes[function_id]):
                self._note(owner, Effect.LOWERS_NOTHING, owner.line)  # its `keeps`: when first read
            if queried and _returns_autocast_dtype(self.nodes[function_id], owner.params):
                self._note(owner, Effect.RETURNS_AUTOCAST_DTYPE, owner.line)

    def _returns_float32(self, function: ast.AST, off: bool) -> bool:
        """Does every `return` of the function return a value computed with autocast off (in a region written
        disabled, or anywhere in a function decorated so)? What it returns is then float32 where its inputs
        were (AMP006 reports the region's uncast ones)."""
        returns: list[bool] = []
        pending: list[tuple[list, bool]] = [(list(function.body), off)]
        while pending:
            statements, disabled = pending.pop()
            for statement in statements:
                kind = type(statement)
                if kind in FUNCTIONS or kind is ast.ClassDef:
                    continue
                if kind is ast.Return:
                    returns.append(disabled and statement.value is not None)
                    continue
                inner = disabled or (kind in (ast.With, ast.AsyncWith) and any(
                    self.summary.can_open(item.context_expr) and self._disabled(item.context_expr)
                    for item in statement.items))
                for name in ("body", "orelse", "finalbody"):
                    if isinstance(getattr(statement, name, None), list):
                        pending.append((getattr(statement, name), inner))
                for handler in getattr(statement, "handlers", ()):
                    pending.append((handler.body, inner))
        return bool(returns) and all(returns)

    def _scaler_builds(self) -> None:
        """GradScaler constructions (resolved through the imports, as the facts layer's `GRAD_SCALERS`), and
        whether the function keeps the scaler beyond its call."""
        # in source order: the first construction of a function is the line it is known by (`lines`)
        for call in sorted(self.summary.api_calls(GRAD_SCALERS), key=lambda call: (call.lineno, call.col_offset)):
            if scaler_enabled(call_shape(call, self.summary)) is False:
                continue
            for function, _, _, _, site in self.summary.call_sites_by_name.get(call.func.attr if type(
                    call.func) is ast.Attribute else getattr(call.func, "id", ""), ()):
                if site is call:
                    owner = self._owner(function)
                    self._note(owner, Effect.BUILDS_SCALER, call.lineno)
                    if owner is not None and _keeps(function, call):
                        self._note(owner, Effect.KEEPS_SCALER, call.lineno)
                    break


def _annotation(annotation: ast.AST | None) -> str | None:
    """The dotted class an annotation names (`Model`, `models.Model`, `"Model"`), else None (`Optional[Model]`,
    a union: not one class)."""
    if type(annotation) is ast.Constant and isinstance(annotation.value, str) and all(
            part.isidentifier() for part in annotation.value.split(".")):
        return annotation.value
    return dotted(annotation) if annotation is not None else None


def _keeps(function: ast.AST, build: ast.Call) -> bool:
    """Does the function hand the scaler it builds to anything that outlives its call: returned, stored on an
    object or in a container, passed to a call, yielded, or restored (`load_state_dict`)? Conservative: any use of
    the bound name other than calling its scale/step/update/unscale_ methods counts as keeping it."""
    bound: set[str] = set()

    def built(value) -> bool:  # the construction, or one branch of `GradScaler() if flag else None`
        return value is build or (type(value) is ast.IfExp and build in (value.body, value.orelse))

    for node in ast.walk(function):
        if type(node) in (ast.Assign, ast.AnnAssign) and built(node.value):
            targets = node.targets if type(node) is ast.Assign else [node.target]
            for target in targets:
                if type(target) is ast.Name:
                    bound.add(target.id)
                else:
                    return True  # self.scaler = GradScaler(), a subscript, a tuple: kept
        elif type(node) in (ast.Return, ast.Yield, ast.YieldFrom) and built(node.value):
            return True
        elif type(node) is ast.Call and build in node.args:
            return True
        elif type(node) is ast.keyword and node.value is build:
            return True
    if not bound:
        return False
    harmless = {vocab.SCALE, vocab.STEP, vocab.UPDATE, vocab.UNSCALE, vocab.GET_SCALE, vocab.IS_ENABLED}
    method_receivers = {id(node.value) for node in ast.walk(function)
                        if type(node) is ast.Attribute and node.attr in harmless}
    return any(type(node) is ast.Name and node.id in bound and type(node.ctx) is ast.Load
               and id(node) not in method_receivers for node in ast.walk(function))


def _returns_autocast_dtype(function: ast.AST, params: tuple[str, ...]) -> bool:
    """`returns_autocast_dtype`: the function casts what it returns on purpose to the autocast dtype
    (`tensor.to(dtype=torch.get_autocast_gpu_dtype())`, the dtype perhaps through a name), or returns a parameter
    untouched where it does not (autocast off, not a tensor); at least one return casts."""
    from amplint.vocabulary import AUTOCAST_DTYPE_QUERIES

    def query(node: ast.AST) -> bool:
        return any(type(n) is ast.Call and (dotted(n.func) or "").rsplit(".", 1)[-1] in AUTOCAST_DTYPE_QUERIES
                   for n in ast.walk(node))

    returns = [n for n in ast.walk(function) if type(n) is ast.Return]
    if not returns or any(type(n) in (ast.Lambda, *FUNCTIONS) and n is not function for n in ast.walk(function)):
        return False
    dtypes = {t.id for n in ast.walk(function) if type(n) is ast.Assign and query(n.value)
              for t in n.targets if type(t) is ast.Name}
    casting = 0
    for node in returns:
        value = node.value
        if value is None:
            return False
        if type(value) is ast.Name and value.id in params:
            continue
        if query(value) or any(type(n) is ast.Name and n.id in dtypes for n in ast.walk(value)):
            casting += 1
            continue
        return False
    return casting > 0


def _dtype_sources(function: ast.AST, params: tuple[str, ...]) -> tuple[str, ...]:
    """The parameters whose dtype the function's returns carry, in a function that runs no lowering op: a name
    carries what it was assigned from (a method's receiver, an indexed value, operands, a torch function's
    arguments), not its indices or sizes; an item assignment (`out[i] = x[i]`) writes in `out`'s dtype; a loop
    variable carries what it walks. Unknown shapes carry every parameter they mention."""
    carries: dict[str, set[str]] = {name: {name} for name in params}

    def of(node: ast.AST | None) -> set[str]:
        kind = type(node)
        if node is None or kind is ast.Constant:
            return set()
        if kind is ast.Name:
            return set(carries.get(node.id, ()))
        if kind is ast.Subscript:
            return of(node.value)
        if kind is ast.Attribute:
            return set() if node.attr in ("shape", vocab.DTYPE, "device", "ndim") else of(node.value)
        if kind is ast.Call:
            func = node.func
            if type(func) is ast.Attribute:
                receiver = of(func.value)
                if func.attr in ("size", "dim", "numel", "item", "tolist"):
                    return set()
                if func.attr.startswith("new_"):
                    return receiver
                return receiver | {p for arg in node.args for p in of(arg)}
            if type(func) is ast.Name and func.id in ("len", "range", "int", "enumerate", "zip"):
                return set() if func.id in ("len", "range", "int") else {p for arg in node.args for p in of(arg)}
            return {p for arg in (*node.args, *(k.value for k in node.keywords)) for p in of(arg)}
        if kind is ast.BinOp:
            return of(node.left) | of(node.right)
        if kind is ast.UnaryOp:
            return of(node.operand)
        if kind in (ast.Tuple, ast.List):
            return {p for element in node.elts for p in of(element)}
        if kind is ast.IfExp:
            return of(node.body) | of(node.orelse)
        return {name.id for name in ast.walk(node) if type(name) is ast.Name and name.id in params}

    def bind(target: ast.AST, sources: set[str]) -> None:
        if type(target) is ast.Name:
            carries[target.id] = sources
        elif type(target) in (ast.Tuple, ast.List):
            for element in target.elts:
                bind(element, sources)

    statements = sorted((n for n in ast.walk(function) if type(n) in (ast.Assign, ast.AugAssign, ast.For)),
                        key=lambda n: (n.lineno, n.col_offset))
    for statement in statements:
        if type(statement) is ast.Assign:
            for target in statement.targets:
                if type(target) is not ast.Subscript:  # `out[i] = ...` writes in out's dtype
                    bind(target, of(statement.value))
        elif type(statement) is ast.AugAssign and type(statement.target) is ast.Name:
            carries[statement.target.id] = carries.get(statement.target.id, set()) | of(statement.value)
        elif type(statement) is ast.For:
            bind(statement.target, of(statement.iter))
    found = {p for n in ast.walk(function) if type(n) is ast.Return for p in of(n.value)}
    return tuple(p for p in params if p in found)


def _lowers_nothing(function: ast.AST) -> bool:
    from amplint.vocabulary import DTYPE_KEEPING_CALLS

    pending = [function]  # every node below the function (its decorators and defaults too), in any order
    while pending:
        node = pending.pop()
        kind = type(node)
        if kind is ast.BinOp and type(node.op) is ast.MatMult:
            return False
        if kind in _NESTED and node is not function:
            return False  # a nested function or lambda: not followed
        if kind is ast.Call:
            func = node.func
            if type(func) is ast.Name:
                if func.id not in _NOT_PROJECT:
                    return False
            elif type(func) is ast.Attribute:
                root = func.value
                while type(root) is ast.Attribute:
                    root = root.value
                if func.attr not in DTYPE_KEEPING_CALLS or (type(root) is ast.Name and root.id in ("self", "cls")):
                    return False
            else:
                return False
        pending.extend(_child_nodes(node))
    return True


_NESTED = (ast.Lambda, *FUNCTIONS)


def casts_at_entry(function: ast.FunctionDef | ast.AsyncFunctionDef, params: tuple[str, ...]) -> tuple[str, ...]:
    """The parameters the function casts to float32 first thing: its leading statements (after a docstring and
    constant set-up such as `loss = 0`, also inside a leading `with`) rebind them as `p = p.float()`,
    `p = p.to(torch.float32)`, `a, b = a.float(), b.float()`, or loop over them casting each item first thing
    (`for dr, dg in zip(real, fake): dr = dr.float(); dg = dg.float()`, loops nested too, also numbered with
    `enumerate`). A caller's value
    handed to one of them needs no cast of its own."""
    body = list(function.body)
    if body and type(body[0]) is ast.Expr and type(body[0].value) is ast.Constant:
        body = body[1:]
    while body and type(body[0]) in (ast.With, ast.AsyncWith):
        body = list(body[0].body)
    cast = _cast_first(body, set(params)) | _cast_wherever_used(function, set(params))
    return tuple(name for name in params if name in cast)


def _cast_wherever_used(function: ast.AST, names: set[str]) -> set[str]:
    """Which of `names` the function uses only under a float32 cast (`outputs["logits"].float()`,
    `x.to(torch.float32)`): every load of the name lies in what a cast is called on."""
    loads: dict[str, int] = {}
    under_cast: dict[str, int] = {}
    for node in ast.walk(function):
        if type(node) is ast.Name and type(node.ctx) is ast.Load and node.id in names:
            loads[node.id] = loads.get(node.id, 0) + 1
        elif type(node) is ast.Name and node.id in names:
            loads[node.id] = loads.get(node.id, 0) + 10 ** 6  # rebound: not what the caller handed in
        elif type(node) is ast.Call and type(node.func) is ast.Attribute and is_float32_cast(call_shape(node)):
            for inner in ast.walk(node.func.value):
                if type(inner) is ast.Name and type(inner.ctx) is ast.Load and inner.id in names:
                    under_cast[inner.id] = under_cast.get(inner.id, 0) + 1
    return {name for name, count in loads.items() if under_cast.get(name, 0) >= count}


def _cast_first(body: list[ast.stmt], names: set[str]) -> set[str]:
    """Which of `names` the leading statements of `body` cast to float32 before any other use."""
    found: set[str] = set()
    for statement in body:
        kind = type(statement)
        if kind is ast.Assign and len(statement.targets) == 1:
            target, value = statement.targets[0], statement.value
            if type(target) is ast.Name and target.id not in names and _constant(value):
                continue  # set-up: `loss = 0`, `losses = []`
            pairs = list(zip(target.elts, value.elts)) if type(target) is ast.Tuple and type(value) is ast.Tuple \
                and len(target.elts) == len(value.elts) else [(target, value)]
            cast = [t.id for t, v in pairs if type(t) is ast.Name and t.id in names and _float32_cast_of(v) == t.id]
            if len(cast) != len(pairs):
                break
            found.update(cast)
        elif kind is ast.For:
            iterable, target = statement.iter, statement.target
            if type(iterable) is ast.Call and type(iterable.func) is ast.Name and iterable.func.id == "enumerate" \
                    and len(iterable.args) == 1 and not iterable.keywords and type(target) is ast.Tuple \
                    and len(target.elts) == 2 and type(target.elts[0]) is ast.Name:
                iterable, target = iterable.args[0], target.elts[1]  # `for i, (a, b) in enumerate(zip(x, y))`
            sources = _iterated(iterable, names)
            targets = [target] if type(target) is ast.Name else list(getattr(target, "elts", ()))
            if sources is None or len(sources) != len(targets) or not all(type(t) is ast.Name for t in targets):
                break
            inner = _cast_first(statement.body, {t.id for t in targets})
            if len(inner) != len(targets):
                break
            found.update(sources)
        else:
            break
    return found


def _iterated(iterable: ast.expr, names: set[str]) -> list[str] | None:
    """The names a loop walks in step (`x`, `zip(a, b)`; under `enumerate` as its caller unwraps), when all are in
    `names`."""
    if type(iterable) is ast.Name and iterable.id in names:
        return [iterable.id]
    if type(iterable) is ast.Call and type(iterable.func) is ast.Name and iterable.func.id == "zip" and \
            iterable.args and not iterable.keywords and all(type(a) is ast.Name and a.id in names
                                                            for a in iterable.args):
        return [a.id for a in iterable.args]
    return None


def _constant(value: ast.expr) -> bool:
    """A literal number or string, or an empty list, tuple or dict."""
    return type(value) is ast.Constant or (type(value) in (ast.List, ast.Tuple) and not value.elts) or (
        type(value) is ast.Dict and not value.keys)


def _float32_cast_of(value: ast.expr) -> str | None:
    """The name `value` casts to float32 (`x.float()`, `x.to(torch.float32)`, `x.type(torch.float64)`,
    `x.float().contiguous()`), if it is one."""
    while type(value) is ast.Call and type(value.func) is ast.Attribute:
        receiver = value.func.value
        if is_float32_cast(call_shape(value)):
            return receiver.id if type(receiver) is ast.Name else None
        value = receiver  # a method after the cast (`.float().contiguous()`): look at what it is called on
    return None


ITEM_KEY = "k:"  # an entry of a returned dict, by its string key
ITEM_POSITION = "p:"  # an element of a returned tuple, by its position
_SCOPES = (ast.Lambda, ast.ClassDef, *FUNCTIONS)
_NUMBER_BUILTINS = INTEGER_OPS & _NOT_PROJECT  # `int(x)`, `bool(x)`, `len(x)`
_ITEM_STEPS = 5000  # expressions looked at per function for its returned entries
_ITEM_DEPTH = 50  # names followed through one another


def returned_items(function: ast.FunctionDef | ast.AsyncFunctionDef,
                   params: tuple[str, ...]) -> dict[str, tuple[tuple[str, str], ...]]:
    """The entries of what the function returns that are surely not low precision under any autocast: the
    entries of a returned dict by string key (`"k:durations"`), or the elements of a returned tuple by position
    (`"p:0"`), that are not floating (`.int()`, `.long()`, `argmax`, comparisons, sizes, `None`, numbers,
    strings) or are float32 (`.float()`, `.to(torch.float32)`), also through methods that only move data
    (`.int().transpose(0, 1)`) and arithmetic of such values. Each entry comes with the entries of other
    functions' results it is taken from (`dur, soft = self.align(x)` then `{"durations": dur}`:
    `("self.align", "p:0")`), which must be so too. Every binding of a name counts, wherever it is in the
    function (a `None` set up before a branch binds it), and a parameter is never known. Nothing for a function
    whose every return is not a dict display (or a name bound only to dict displays, filled by string keys and
    used for nothing else) or a tuple display of one length, nor for a generator."""
    own = _own_nodes(function)
    if any(type(node) in (ast.Yield, ast.YieldFrom) for node in own):
        return {}
    returns = [node.value for node in own if type(node) is ast.Return]
    if not returns or any(value is None for value in returns):
        return {}
    bindings: dict[str, list] = {name: [None] for name in params}  # None: unknown; a (callee, entry) reference
    stores: dict[str, list[tuple[str, ast.expr]]] = {}  # `d["key"] = v`
    spoiled: set[str] = set()  # names a dict of which may change by other means than a string-key store

    def bind(target: ast.AST, value: ast.expr | None) -> None:
        kind = type(target)
        if kind is ast.Name:
            bindings.setdefault(target.id, []).append(value)
        elif kind in (ast.Tuple, ast.List):
            elements = target.elts
            if any(type(e) is not ast.Name for e in elements):
                for name in (n for e in elements for n in ast.walk(e) if type(n) is ast.Name):
                    bindings.setdefault(name.id, []).append(None)
            elif type(value) in (ast.Tuple, ast.List) and len(value.elts) == len(elements) and not any(
                    type(v) is ast.Starred for v in value.elts):
                for element, item in zip(elements, value.elts):
                    bind(element, item)
            elif type(value) is ast.Call and dotted(value.func):
                for position, element in enumerate(elements):
                    bindings.setdefault(element.id, []).append((dotted(value.func), f"{ITEM_POSITION}{position}"))
            else:
                for element in elements:
                    bind(element, None)
        elif kind is ast.Subscript and type(target.value) is ast.Name:
            key = target.slice
            if type(key) is ast.Constant and isinstance(key.value, str) and value is not None:
                stores.setdefault(target.value.id, []).append((key.value, value))
            else:
                spoiled.add(target.value.id)  # a tensor keeps its dtype; a dict gets an entry not known here
        elif kind is ast.Starred:
            bind(target.value, None)

    parents: dict[int, ast.AST] = {}
    for node in own:
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
        kind = type(node)
        if kind is ast.Assign:
            for target in node.targets:
                bind(target, node.value)
        elif kind is ast.AnnAssign and node.value is not None:
            bind(node.target, node.value)
        elif kind is ast.AugAssign:
            if type(node.target) is ast.Name:
                bind(node.target, ast.BinOp(left=ast.Name(id=node.target.id, ctx=ast.Load()), op=node.op,
                                            right=node.value))
            elif type(node.target) is ast.Subscript and type(node.target.value) is ast.Name:
                spoiled.add(node.target.value.id)
        elif kind is ast.NamedExpr:
            bind(node.target, node.value)
        elif kind in (ast.For, ast.AsyncFor):
            bind(node.target, None)
        elif kind in (ast.With, ast.AsyncWith):
            for item in node.items:
                for name in (n for n in ast.walk(item.optional_vars) if type(n) is ast.Name) \
                        if item.optional_vars is not None else ():
                    bind(name, None)
        elif kind is ast.ExceptHandler and node.name:
            bindings.setdefault(node.name, []).append(None)
        elif kind in (ast.Import, ast.ImportFrom):
            for alias in node.names:
                bindings.setdefault((alias.asname or alias.name).split(".")[0], []).append(None)
        elif kind in (ast.Global, ast.Nonlocal):
            for name in node.names:
                bindings.setdefault(name, []).append(None)
    for node in own:  # a dict's name used otherwise than by item or returned: it may be changed elsewhere
        if type(node) is ast.Name and type(node.ctx) is ast.Load:
            parent = parents.get(id(node))
            if not ((type(parent) is ast.Subscript and parent.value is node) or type(parent) is ast.Return):
                spoiled.add(node.id)

    budget = [_ITEM_STEPS]

    def known(node: ast.expr, seen: frozenset) -> list[tuple[str, str]] | None:
        """The references `node` is not low precision through ([] when it surely is not), None when unknown."""
        budget[0] -= 1
        if budget[0] < 0 or len(seen) > _ITEM_DEPTH:
            return None  # a chain of rebindings too long to follow: not known
        kind = type(node)
        if kind in (ast.Constant, ast.Compare):
            return []
        if kind is ast.Name:
            if node.id in seen:
                return []  # `x = x.view(...)`: the other bindings of x decide
            if node.id not in bindings:
                return None  # a global, a builtin or a closure's name
            found: list[tuple[str, str]] = []
            for binding in bindings[node.id]:
                inner = None if binding is None else [binding] if type(binding) is tuple else known(
                    binding, seen | {node.id})
                if inner is None:
                    return None
                found.extend(inner)
            return found
        if kind is ast.Call:
            func = node.func
            if type(func) is ast.Attribute:
                if func.attr in INTEGER_OPS or is_float32_cast(call_shape(node)):
                    return []
                return known(func.value, seen) if func.attr in LAYOUT_METHODS else None
            return [] if type(func) is ast.Name and func.id in _NUMBER_BUILTINS else None
        if kind is ast.Subscript:
            key = node.slice
            if not (type(key) is ast.Constant and isinstance(key.value, str)):
                return known(node.value, seen)  # indexing a tensor keeps its dtype
            if type(node.value) is not ast.Name or not bindings.get(node.value.id):
                return None
            found = []
            for binding in bindings[node.value.id]:  # an entry of a call's result: `outputs["durations"]`
                if type(binding) is not ast.Call or not dotted(binding.func):
                    return None
                found.append((dotted(binding.func), f"{ITEM_KEY}{key.value}"))
            return found
        if kind is ast.BinOp and type(node.op) is not ast.MatMult:
            left, right = known(node.left, seen), known(node.right, seen)
            return None if left is None or right is None else left + right
        if kind is ast.UnaryOp:
            return known(node.operand, seen)
        if kind in (ast.BoolOp, ast.IfExp):
            parts = node.values if kind is ast.BoolOp else [node.body, node.orelse]
            found = []
            for part in parts:
                inner = known(part, seen)
                if inner is None:
                    return None
                found.extend(inner)
            return found
        return None

    entries: dict[str, list[ast.expr]] = {}
    if all(type(value) is ast.Tuple for value in returns):
        if len({len(value.elts) for value in returns}) != 1 or any(
                type(e) is ast.Starred for value in returns for e in value.elts):
            return {}
        for value in returns:
            for position, element in enumerate(value.elts):
                entries.setdefault(f"{ITEM_POSITION}{position}", []).append(element)
    else:
        for value in returns:
            if type(value) is ast.Dict:
                displays, filled = [value], []
            elif type(value) is ast.Name and value.id not in spoiled and value.id not in params and all(
                    type(b) is ast.Dict for b in bindings.get(value.id, [None])):
                displays, filled = bindings[value.id], stores.get(value.id, [])
            else:
                return {}
            for display in displays:
                for key, item in zip(display.keys, display.values):
                    if not (type(key) is ast.Constant and isinstance(key.value, str)):
                        return {}  # `**rest` or a computed key: any entry may be anything
                    entries.setdefault(f"{ITEM_KEY}{key.value}", []).append(item)
            for key, item in filled:
                entries.setdefault(f"{ITEM_KEY}{key}", []).append(item)
    found: dict[str, tuple[tuple[str, str], ...]] = {}
    for slot, values in entries.items():
        references: list[tuple[str, str]] = []
        for value in values:
            inner = known(value, frozenset())
            if inner is None:
                break
            references.extend(r for r in inner if r not in references)
        else:
            found[slot] = tuple(references)
    return found


def _parameter_facts(function: ast.FunctionDef | ast.AsyncFunctionDef, params: tuple[str, ...]) \
        -> tuple[tuple[str, ...], dict[str, tuple[tuple[str, str], ...]]]:
    """(`casts_at_entry`, `returned_items`) of a function."""
    return casts_at_entry(function, params), _items_or_none(function, params)


def _items_or_none(function: ast.FunctionDef | ast.AsyncFunctionDef,
                   params: tuple[str, ...]) -> dict[str, tuple[tuple[str, str], ...]]:
    """`returned_items`, nothing known for an expression nested too deep to follow."""
    try:
        return returned_items(function, params)
    except RecursionError:
        return {}


def _own_nodes(function: ast.AST) -> list[ast.AST]:
    """The nodes of a function's body, not those of a function, lambda or class defined in it."""
    found: list[ast.AST] = []
    pending = list(function.body)
    while pending:
        node = pending.pop()
        if type(node) in _SCOPES:
            continue
        found.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return found
