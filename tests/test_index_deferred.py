"""The index's facts computed when first read (`FunctionRecord.casts`, `.keeps`, `.items`, `CallRecord.args`),
and the screen's questions that look at the project before building a file's record: the same answers as
computed up front, in the process that built the record and in another one, and a cached result that follows the
project."""

from __future__ import annotations

import ast
import json
import pickle
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from amplint.cli import main
from amplint.index.functions import FileIndex, _dtype_sources, casts_at_entry, index_text, returned_items
from amplint.index.summary import Summary
from amplint.vocabulary import Effect

REPO = Path(__file__).resolve().parents[1]
FACTORY = REPO / "fixtures" / "AMP012-half-model-with-scaler" / "projects" / "factory_elsewhere"

SOURCE = '''\
import torch


def loss_of(logits, target, scale=1.0):
    logits = logits.float()
    return torch.nn.functional.cross_entropy(logits, target) * scale


def segments(x, starts, n):
    out = x.new_zeros(n, x.size(1))
    for i in range(n):
        out[i] = x[starts[i]]
    return out


class Aligner(torch.nn.Module):
    def forward(self, x):
        durations = self.align(x).argmax(-1).int()
        return {"durations": durations, "mask": x > 0, "logits": self.head(x)}

    async def fetch(self, x):
        a, b = self.split(x)
        return a.long(), b

    def outer(self, x):
        def inner(y):
            return y.float()
        return inner(x)
'''


def _direct(text: str) -> dict[str, tuple]:
    """Each function's (casts, keeps, items), computed on the parsed tree here."""
    tree = ast.parse(text)
    found = {}
    for owner in [tree, *[n for n in tree.body if type(n) is ast.ClassDef]]:
        prefix = f"{owner.name}." if type(owner) is ast.ClassDef else ""
        for node in owner.body:
            if type(node) in (ast.FunctionDef, ast.AsyncFunctionDef):
                arguments = node.args
                params = tuple(a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs))
                found[prefix + node.name] = (casts_at_entry(node, params), _dtype_sources(node, params),
                                             returned_items(node, params))
    return found


def _facts(record: FileIndex) -> dict[str, tuple]:
    return {name: (summary.casts, summary.keeps if Effect.LOWERS_NOTHING in summary.does else _NOT_KEPT,
                   summary.items) for name, summary in record.functions.items() if name in _direct(SOURCE)}


_NOT_KEPT = "not asked"


def _expected() -> dict[str, tuple]:
    record = index_text(SOURCE)
    return {name: (casts, keeps if Effect.LOWERS_NOTHING in record.functions[name].does else _NOT_KEPT, items)
            for name, (casts, keeps, items) in _direct(SOURCE).items()}


def test_deferred_facts_are_those_computed_on_the_tree():
    expected = _expected()
    assert expected["loss_of"][0] == ("logits",)
    assert expected["segments"][1] == ("x",)
    assert expected["Aligner.forward"][2] == {"k:durations": (), "k:mask": ()}
    assert expected["Aligner.fetch"][2] == {"p:0": (), "p:1": (("self.split", "p:1"),)}
    summary = Summary(SOURCE)  # the tree the record is built from stays alive: it is read, not parsed again
    alive = index_text(SOURCE, summary)
    assert _facts(alive) == expected
    assert _facts(index_text(SOURCE)) == expected  # the tree gone: the text parsed again


def test_deferred_facts_travel_with_the_record_to_another_process():
    expected = _expected()
    record = index_text(SOURCE)
    moved = pickle.loads(pickle.dumps(record))  # as phase 1's workers send it, nothing read yet
    assert _facts(moved) == expected
    assert moved.to_json() == index_text(SOURCE).to_json()
    kept = FileIndex.from_json(json.loads(json.dumps(index_text(SOURCE).to_json())))  # as the cache keeps it
    assert _facts(kept) == expected


def test_the_cache_keeps_a_record_with_its_facts_deferred(tmp_path):
    """A record written to the cache before its facts were read is stored without them and read back with them
    deferred to the file's text; the same facts, and the same record, as computed up front."""
    from amplint.cache import Cache

    expected = _expected()
    cache = Cache(str(tmp_path / "cache"))
    raw = SOURCE.encode()
    built = cache.index_record(raw, lambda: index_text(SOURCE), SOURCE)
    assert _facts(built) == expected
    again = cache.index_record(raw, lambda: (_ for _ in ()).throw(AssertionError("built again")), SOURCE)  # read
    assert all(summary._deferred is not None for summary in again.functions.values())
    assert _facts(again) == expected
    assert again.to_json() == index_text(SOURCE).to_json()
    written = index_text(SOURCE).to_json(deferred=True)
    assert all("x" not in entry and "z" in entry for entry in written["f"].values())
    assert FileIndex.from_json(json.loads(json.dumps(written)), SOURCE).to_json() == index_text(SOURCE).to_json()
    with pytest.raises(KeyError):  # deferred facts without the text: not a record with no facts
        FileIndex.from_json(written)


def test_a_record_of_an_empty_or_unparsable_text_reads_as_nothing():
    empty = pickle.loads(pickle.dumps(index_text("")))
    assert empty.functions == {}
    record = index_text("def f(x):\n    return x.float()\n")
    record.functions["f"]._deferred[0].text = "def f(x:\n"  # the text no longer parses: nothing is known
    assert record.functions["f"].casts == () and record.functions["f"].items == {}


def _amp012(folder: Path) -> list[tuple[str, int]]:
    result = CliRunner().invoke(main, ["check", str(folder), "--select", "AMP012", "--output-format", "json",
                                       "--cache-dir", str(folder.parent / "cache")], catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    return sorted((Path(d["filename"]).name, d["location"]["row"]) for d in json.loads(result.output))


def test_half_factory_follows_its_callers_through_the_cache(tmp_path):
    """The factory's module is screened out while no caller elsewhere steps through a GradScaler (its record never
    built), and its cached result gives way once one does, and again once it no longer does."""
    folder = tmp_path / "project"
    shutil.copytree(FACTORY, folder)
    run = folder / "run.py"
    text = run.read_text()
    plain = text.replace("grad_scaler.step(opt)", "opt.step()")
    assert plain != text
    run.write_text(plain)
    assert _amp012(folder) == []
    run.write_text(text)
    assert _amp012(folder) == [("setup_model.py", 5)]
    run.write_text(plain)
    assert _amp012(folder) == []


def test_half_factory_follows_a_new_caller_through_the_cache(tmp_path):
    """A caller stepping through a GradScaler that appears in a new module gives way to the cached result of the
    factory's module, screened out before."""
    folder = tmp_path / "project"
    shutil.copytree(FACTORY, folder)
    run = folder / "run.py"
    text = run.read_text()
    run.write_text(text.replace("grad_scaler.step(opt)", "opt.step()"))
    assert _amp012(folder) == []
    (folder / "run_scaled.py").write_text(text)
    assert _amp012(folder) == [("setup_model.py", 5)]


HANDING = '''\
import torch


def train(model, scaler, batches, weight):
    for x, y in batches:
        loss = model(x).sum()
        loss = scaler.scale(loss) if scaler else loss
        backward_of(loss, retain=False)
        log(make(weight)(loss / 4), y)
        a.b(loss).c(weight)


def run(loss):
    backward_of(loss * 2)


backward_of(torch.ones(1), retain=True)
'''


def _followed(text: str) -> dict[tuple, tuple]:
    """Every call's `argument_flows` in its function's scope, followed on the parsed tree here."""
    from amplint.index.flows import Scope, argument_flows
    from amplint.index.functions import call_place

    tree = ast.parse(text)
    found = {}
    for scope_node in [tree, *[n for n in ast.walk(tree) if type(n) is ast.FunctionDef]]:
        scope = Scope(scope_node)
        body = scope_node.body
        for node in (n for statement in body for n in ast.walk(statement)):
            if type(node) is ast.Call and (node.args or node.keywords) and _innermost(tree, node) is scope_node:
                found[call_place(node)[:2]] = argument_flows(scope, node)
    return found


def _innermost(tree: ast.AST, call: ast.Call) -> ast.AST:
    owner = tree
    for node in ast.walk(tree):
        if type(node) is ast.FunctionDef and any(inner is call for inner in ast.walk(node)):
            if owner is tree or any(inner is node for inner in ast.walk(owner)):
                owner = node
    return owner


def _arguments(record: FileIndex) -> dict[tuple, tuple]:
    calls = [call for function in record.functions.values() for call in function.calls] + record.module_calls
    return {(call.line, call.callee): call.args for call in calls}


def test_deferred_arguments_are_those_followed_on_the_tree():
    """What each call hands over (`CallRecord.args`) is followed when first read, in the process that built the
    record, in another one and from the cache: the same flows as followed up front, a call nested in another at
    its start (`make(w)(loss / 4)`, `a.b(loss).c(w)`) told from it, module-level calls in the module's scope."""
    record = index_text(HANDING)
    assert all(call._deferred is not None for f in record.functions.values() for call in f.calls if call.callee
               in ("backward_of", "log"))
    arguments = _arguments(record)
    assert arguments == {(6, "model"): (), (7, "scaler.scale"): ("0=s",), (8, "backward_of"): ("0=s", "retain=u"),
                         (9, "make"): ("0=p:weight",), (9, "log"): ("0=s",), (10, "a.b"): ("0=s",),
                         (14, "backward_of"): ("0=p:loss",), (17, "torch.ones"): ("0=u",),
                         (17, "backward_of"): ("0=u", "retain=u")}  # `y`, a loop's target: not known
    followed = _followed(HANDING)  # each call's (line, column) -> its flows, followed up front
    places = {(6, "model"): (6, 15), (7, "scaler.scale"): (7, 15), (8, "backward_of"): (8, 8), (9, "make"): (9, 12),
              (9, "log"): (9, 8), (10, "a.b"): (10, 8), (14, "backward_of"): (14, 4), (17, "torch.ones"): (17, 12),
              (17, "backward_of"): (17, 0)}
    assert {key: followed[place] for key, place in places.items()} == arguments
    assert _arguments(pickle.loads(pickle.dumps(index_text(HANDING)))) == arguments
    written = index_text(HANDING).to_json(deferred=True)
    again = FileIndex.from_json(json.loads(json.dumps(written)), HANDING)
    assert _arguments(again) == arguments
    assert again.to_json() == index_text(HANDING).to_json()
    with pytest.raises(KeyError):  # deferred arguments without the text
        FileIndex.from_json(written)


def _settled(record: FileIndex) -> FileIndex:
    for function in record.functions.values():
        function.casts, function.keeps, function.items, [call.args for call in function.calls]
    [call.args for call in record.module_calls]
    return record


def test_a_records_fingerprint_computes_no_deferred_fact_and_follows_one():
    """What dependants are keyed by (`FileIndex.digest`, `ProjectIndex.calls_digest`) is read without computing a
    fact deferred to the text, is the same whether it was computed, built here, in another process or read from
    the cache, and changes with an edit that changes only such a fact (a cast at entry, what a call hands over)."""
    from amplint.index.project import ProjectIndex

    record = index_text(SOURCE)
    digest = record.digest()
    assert all(function._deferred is not None for function in record.functions.values())  # none computed
    assert _settled(record).digest() == digest
    assert pickle.loads(pickle.dumps(index_text(SOURCE))).digest() == digest
    written = json.loads(json.dumps(index_text(SOURCE).to_json(deferred=True)))
    assert FileIndex.from_json(written, SOURCE).digest() == digest
    cast = SOURCE.replace("logits = logits.float()", "logits = logits.to(torch.float32)")
    record, digest = index_text(cast), index_text(cast).digest()
    other = index_text(cast.replace("torch.float32", "torch.bfloat16"))  # the same lines, calls and effects
    assert {name: f.eager_json() for name, f in other.functions.items()} == \
        {name: f.eager_json() for name, f in record.functions.items()}
    assert other.functions["loss_of"].casts == () and record.functions["loss_of"].casts == ("logits",)
    assert other.digest() != digest
    whole = FileIndex.from_json(_settled(index_text(SOURCE)).to_json())  # no text: its facts are its fingerprint
    assert whole.source is None and whole.digest() != FileIndex.from_json(_settled(other).to_json()).digest()

    def calls_digest(text: str, settle: bool) -> str:
        project = ProjectIndex()
        built = index_text(text)
        project.add("/project/train.py", _settled(built) if settle else built)
        return project.calls_digest("backward_of")

    handed = calls_digest(HANDING, settle=False)
    assert calls_digest(HANDING, settle=True) == handed
    moved = HANDING.replace("backward_of(loss * 2)", "backward_of(four * 2)")  # only what the call hands over
    assert index_text(moved).functions["run"].calls[0].args != index_text(HANDING).functions["run"].calls[0].args
    assert calls_digest(moved, settle=False) != handed
