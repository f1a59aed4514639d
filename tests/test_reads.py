"""A file is read once for the index and once for its own analysis, whatever the questions asked across modules
(what reads a file again, a record built on demand, the second round of the index, a call site's arguments, takes
the bytes the project kept of phase 1's read); a file is parsed (the stdlib `ast`) at most once in a process, its
index record and its screen from one tree; and a run's work grows with the project, not with the project times its
questions.

Counted, never timed: the reads of files (`amplint.source.read_bytes`, through which every read of a source goes),
the parses of texts (`ast.parse`, through which the screen, the index and the rules parse a module's text)
and the Python function calls of a whole run (a profile hook), on generated projects of N modules that ask every
kind of question across modules: helpers calling helpers through chains of imports, GradScalers built in helpers
and in wrapper classes (some imported under another name), a scaler a module reads and never binds (bound by the
modules importing it), disabled autocast regions called from other modules, and notebooks (a notebook's view once
made the project look at every file's text again).
"""

from __future__ import annotations

import ast
import multiprocessing
import os
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

from amplint import cache as cache_module, parallel, source
from amplint.index import project as project_module
from amplint.config import Settings
from amplint.discovery import discover
from amplint.outcome import Mode
from amplint.rules import CATALOG
from samples import notebook_json

READS_PER_FILE = 2  # phase 1 (the index) and phase 2 (the file's own analysis)
SLACK = 8  # reads any run may add (configuration)
# A file is parsed once in a process: its record (phase 1, the second round, or on demand) and its screen from one
# tree. A script of these projects is parsed once more, by AMP006 reading the arguments of its call into another
# module's disabled region from its tree (a rule reading another file's code): once per such call site, never per
# question.
PARSES_PER_FILE = 1
PER_CALLER_PARSES = 1
LINEAR = 2.6  # the largest growth of the work accepted for twice the modules (linear: a little over 2)


def _module(i: int) -> str:
    """Module i of the package: a helper calling the previous module's helper (a chain of imports), an epoch that
    builds its own GradScaler (called once per epoch by a script: AMP004), a disabled autocast region that a
    script calls under an enabled one with float16 values (AMP006), and a module whose `forward` holds one (its
    callers are every call of the project: a module is called by any name)."""
    previous = f"from pkg.mod{i - 1} import helper{i - 1}\n" if i else ""
    call = f"    x = helper{i - 1}(model, x)\n" if i else ""
    return (f"import torch\n{previous}\n\n"
            f"def helper{i}(model, x):\n{call}    return model(x)\n\n\n"
            f"def train_epoch{i}(model, optimizer, loader):\n    scaler = torch.amp.GradScaler('cuda')\n"
            f"    for x in loader:\n        with torch.autocast('cuda', dtype=torch.float16):\n"
            f"            loss = helper{i}(model, x).sum()\n        scaler.scale(loss).backward()\n"
            f"        scaler.step(optimizer)\n        scaler.update()\n\n\n"
            f"def exact{i}(a, b):\n    with torch.autocast('cuda', enabled=False):\n        return a @ b.T\n\n\n"
            f"class Block{i}(torch.nn.Module):\n    def forward(self, a):\n"
            f"        with torch.autocast('cuda', enabled=False):\n            return a @ a.T\n")


WRAPPER = """\
import torch


class NativeScaler:
    def __init__(self):
        self.scaler = torch.amp.GradScaler('cuda')

    def __call__(self, loss, optimizer):
        self.scaler.scale(loss).backward()
        self.scaler.step(optimizer)
        self.scaler.update()
"""

STEPPER = """\
def step(loss, optimizer):
    loss_scaler(loss, optimizer)
"""


def _script(i: int, n: int) -> str:
    """A training script using module i: its epoch once per epoch, its disabled region under an enabled one, the
    wrapper (imported under another name every other script), and the stepper whose scaler it binds."""
    wrapper = "from pkg.amp import NativeScaler as Scaler\n" if i % 2 else "from pkg.amp import NativeScaler\n"
    name = "Scaler" if i % 2 else "NativeScaler"
    return (f"import torch\nimport stepper\n{wrapper}from pkg.mod{i} import train_epoch{i}, exact{i}, Block{i}\n\n"
            f"loss_scaler = {name}()\nstepper.loss_scaler = loss_scaler\n\n\n"
            f"def main(model, optimizer, loader, x):\n    block = Block{i}()\n    for epoch in range(10):\n"
            f"        train_epoch{i}(model, optimizer, loader)\n"
            f"    with torch.autocast('cuda', dtype=torch.float16):\n        y = torch.mm(x, x)\n"
            f"        z = block(y)\n        return exact{i}(y, z)\n")


def _notebook(i: int) -> str:
    return notebook_json([["import torch\n", f"from pkg.mod{i} import helper{i}\n"],
                          ["with torch.autocast('cuda'):\n", f"    loss = helper{i}(model, x).sum()\n",
                           "    loss.backward()\n"]])


def make_project(root: Path, n: int) -> list[str]:
    """A project of n package modules, n scripts and n // 5 notebooks; its files' paths, as a run discovers them."""
    package = root / "pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "amp.py").write_text(WRAPPER)
    (root / "stepper.py").write_text(STEPPER)
    for i in range(n):
        (package / f"mod{i}.py").write_text(_module(i))
        (root / f"train{i}.py").write_text(_script(i, n))
    for i in range(n // 5):
        (root / f"explore{i}.ipynb").write_text(_notebook(i))
    return list(discover([str(root)], Settings(root=root)))


@contextmanager
def counting_reads():
    """Every read of a file by amplint while active: path -> reads."""
    reads: dict[str, int] = {}
    original = source.read_bytes

    def counted(path, *args, **kwargs):
        reads[str(path)] = reads.get(str(path), 0) + 1
        return original(path, *args, **kwargs)

    source.read_bytes = counted
    try:
        yield reads
    finally:
        source.read_bytes = original


@contextmanager
def counting_parses():
    """Every parse of a module's text (`ast.parse` in exec mode) while active: text -> parses."""
    parses: dict[str, int] = {}
    original = ast.parse

    def counted(source, filename="<unknown>", mode="exec", *args, **kwargs):
        if mode == "exec":
            parses[source] = parses.get(source, 0) + 1
        return original(source, filename, mode, *args, **kwargs)

    ast.parse = counted
    try:
        yield parses
    finally:
        ast.parse = original


def parses_beyond(parses: dict[str, int], paths: list[str]) -> dict[str, int]:
    """The files (and other texts: a notebook's code) parsed more often than allowed: once, a script twice."""
    names = {}
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            names[handle.read()] = os.path.basename(path)
    allowed = {text: PARSES_PER_FILE + (PER_CALLER_PARSES if name.startswith("train") else 0)
               for text, name in names.items()}
    return {names.get(text, text[:60]): count for text, count in parses.items()
            if count > allowed.get(text, PARSES_PER_FILE)}


def run(paths: list[str], jobs: int = 1):
    return parallel.lint_paths(paths, CATALOG, Settings(), Mode(), jobs=jobs)


def reads_of(tmp_path: Path, n: int) -> tuple[int, int, list, dict]:
    """(files, reads, outcomes, files parsed more often than allowed) of a run over a project of n modules, in one
    process."""
    paths = make_project(tmp_path / f"project{n}", n)
    with counting_reads() as reads, counting_parses() as parses:
        outcomes = run(paths)
    assert all(not outcome.internal_error for outcome in outcomes)
    assert max(reads.values()) <= READS_PER_FILE, max(reads.items(), key=lambda item: item[1])
    return len(paths), sum(reads.values()), outcomes, parses_beyond(parses, [p for p in paths if p.endswith(".py")])


def bound(files: int) -> int:
    return READS_PER_FILE * files + SLACK


def test_the_projects_ask_questions_across_modules(tmp_path):
    """The generated projects are what the counts below need: findings that only other modules explain."""
    _, _, outcomes, _ = reads_of(tmp_path, 10)
    codes = {diagnostic.code for outcome in outcomes for diagnostic in outcome.diagnostics}
    assert {"AMP004", "AMP006"} <= codes, codes


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    """(files, reads, files parsed too often) of the runs over projects of 50, 100 and 200 modules, each run once
    for the tests below."""
    found: dict[int, tuple[int, int, dict]] = {}

    def of(n: int) -> tuple[int, int, dict]:
        if n not in found:
            files, reads, _, beyond = reads_of(tmp_path_factory.mktemp(f"reads{n}"), n)
            found[n] = (files, reads, beyond)
        return found[n]
    return of


@pytest.mark.parametrize("n", [50, 100, 200])
def test_each_file_is_read_at_most_twice(counted, n):
    """Phase 1 reads a file once (its record and what its import statements say), phase 2 once more; no
    question across modules reads it again, however many modules and notebooks ask."""
    files, reads, _ = counted(n)
    assert reads <= bound(files), (files, reads)


@pytest.mark.parametrize("n", [50, 100, 200])
def test_each_file_is_parsed_once(counted, n):
    """A file's record (built up front, in the second round or on demand) and its screen come from one `ast` tree:
    whichever is asked first decides the other from it (`amplint.prefilter.Ahead`)."""
    assert counted(n)[2] == {}


def test_reads_grow_as_the_project(counted):
    (small_files, small, _), (large_files, large, _) = counted(100), counted(200)
    assert large - small <= READS_PER_FILE * (large_files - small_files), (small_files, small, large_files, large)


def test_files_beyond_the_bytes_kept_are_read_again_with_the_same_findings(tmp_path, monkeypatch):
    """The project keeps phase 1's bytes within a bound (`KEPT_BYTES`); beyond it, what asks a file's text again
    reads the file again, and finds the same."""
    paths = make_project(tmp_path / "project", 10)
    with counting_reads() as reads:
        kept = run(paths)
    monkeypatch.setattr(project_module, "KEPT_BYTES", 0)
    with counting_reads() as again:
        unkept = run(paths)
    assert max(reads.values()) <= READS_PER_FILE < max(again.values())
    assert [outcome.diagnostics for outcome in unkept] == [outcome.diagnostics for outcome in kept]


def test_a_pool_reads_each_file_at_most_twice_and_parses_it_once_in_a_process(tmp_path, monkeypatch):
    """With worker processes (forked: they count into a file each), a file is read once in phase 1 and once in
    phase 2, in whichever process: no worker looks at every file's text again for its questions; and no process
    parses a file twice (a screen decided in phase 1's workers travels with the file's record)."""
    if parallel._context().get_start_method() != "fork":
        pytest.skip("the workers must be forked to count as patched here")
    paths = make_project(tmp_path / "project", 40)
    counts = tmp_path / "counts"
    counts.mkdir()
    original, parse = source.read_bytes, ast.parse

    def counted(path, *args, **kwargs):
        with open(counts / f"reads{os.getpid()}", "a", encoding="utf-8") as log:
            log.write(f"{path}\n")
        return original(path, *args, **kwargs)

    def parsed(text, filename="<unknown>", mode="exec", *args, **kwargs):
        if mode == "exec":
            with open(counts / f"parses{os.getpid()}", "a", encoding="utf-8") as log:
                log.write(f"{text!r}\n")
        return parse(text, filename, mode, *args, **kwargs)

    monkeypatch.setattr(source, "read_bytes", counted)
    monkeypatch.setattr(ast, "parse", parsed)
    monkeypatch.setattr(parallel, "default_jobs", lambda: 2)
    outcomes = run(paths, jobs=2)
    assert all(not outcome.internal_error for outcome in outcomes)
    reads = sum(len(log.read_text().splitlines()) for log in counts.glob("reads*"))
    assert reads <= bound(len(paths)), (len(paths), reads)
    assert not list(Path(tempfile.gettempdir()).glob(f"{cache_module.SHARE_PREFIX}{os.getpid()}-*"))  # removed
    python = [path for path in paths if path.endswith(".py")]
    for log in counts.glob("parses*"):
        parses: dict[str, int] = {}
        for line in log.read_text().splitlines():
            text = ast.literal_eval(line)
            parses[text] = parses.get(text, 0) + 1
        assert parses_beyond(parses, python) == {}, log.name


def _store(share, name, value) -> None:
    share.store(name, value)


def test_a_record_one_worker_builds_is_taken_by_another(tmp_path):
    """The pool's workers share the records they read on demand (`RunShare`): what one process stores, another
    loads whole; nothing is there before."""
    paths = make_project(tmp_path / "project", 2)
    project = parallel.index_project(paths, 1, Settings())
    share = cache_module.RunShare()
    try:
        path = next(path for path in project.names if path.endswith("train0.py"))
        assert share.load(path) is None
        built = project.record(path), project.screens.get(path)
        child = multiprocessing.get_context().Process(target=_store, args=(share, path, built))
        child.start()
        child.join()
        taken = share.load(path)
        assert taken[0].to_json() == built[0].to_json() and taken[1] == built[1]
    finally:
        share.close()
    assert not os.path.exists(share.directory)


def test_the_share_of_a_run_killed_outright_is_removed_by_the_next():
    ended = multiprocessing.get_context().Process(target=int)
    ended.start()
    ended.join()
    stale = Path(tempfile.gettempdir()) / f"{cache_module.SHARE_PREFIX}{ended.pid}-abcdefgh"
    stale.mkdir()
    (stale / "record").write_bytes(b"")
    share = cache_module.RunShare()
    try:
        assert not stale.exists() and os.path.isdir(share.directory)
    finally:
        share.close()


def calls_of(tmp_path: Path, n: int) -> int:
    """The Python function calls of a run over a project of n modules (in one process)."""
    paths = make_project(tmp_path / f"calls{n}", n)
    run(paths[:1])  # imports and first-use set-up out of the count
    calls = 0

    def profile(frame, event, arg):
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(profile)
    try:
        run(paths)
    finally:
        sys.setprofile(None)
    return calls


def test_work_grows_as_the_project(tmp_path):
    """Twice the modules (and scripts and notebooks): about twice the work. A question answered by looking at
    every file, once per notebook or per file asking it, grows with the square."""
    small, large = calls_of(tmp_path, 40), calls_of(tmp_path, 80)
    assert large <= LINEAR * small, (small, large)
