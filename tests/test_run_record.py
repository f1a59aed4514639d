"""The run record: a lint run of the same files, all as they were, takes its results back without reading a file;
any change among the files of the run or of its project, or in the rules for a file, does the run again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from amplint import cache as cache_module
from amplint import parallel
from amplint.cache import Cache
from amplint.config import Settings
from amplint.outcome import FileOutcome, Mode
from amplint.parallel import lint_paths
from amplint.rules import ALL_RULES

ENGINE = """\
import torch


def optimizer_step(model, optimizer, scaler):
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
"""

TRAIN = """\
import torch
import engine


def train(model, optimizer, loader):
    scaler = torch.amp.GradScaler("cuda")
    for batch in loader:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(batch)
        scaler.scale(loss).backward()
        engine.optimizer_step(model, optimizer, scaler)
"""

UNSCALES_FIRST = ENGINE.replace("    torch.nn.utils", "    scaler.unscale_(optimizer)\n    torch.nn.utils")


@pytest.fixture
def project(tmp_path):
    """A two-module project whose finding in train.py comes from engine.py, and a run over both files."""
    (tmp_path / "engine.py").write_text(ENGINE, encoding="utf-8")
    (tmp_path / "train.py").write_text(TRAIN, encoding="utf-8")
    return tmp_path


@pytest.fixture
def runs(monkeypatch):
    """Counts the runs that were done rather than taken from a record."""
    done = []
    original = parallel._lint_paths

    def counting(paths, *args):
        done.append(list(paths))
        return original(paths, *args)

    monkeypatch.setattr(parallel, "_lint_paths", counting)
    return done


def _lint(folder: Path, settings: Settings | None = None, mode: Mode | None = None, files=("engine.py", "train.py")):
    cache = Cache.open(folder / ".cache")
    paths = [str(folder / name) for name in files]
    return lint_paths(paths, ALL_RULES, settings or Settings(root=folder), mode or Mode(), jobs=1, cache=cache)


def _found(outcomes: list[FileOutcome]) -> list:
    return [(o.path, [(d.code, d.location, d.message, d.fix, d.source_line) for d in o.diagnostics]) for o in outcomes]


def test_a_run_of_unchanged_files_is_taken_from_the_record(project, runs):
    first = _lint(project)
    second = _lint(project)
    assert len(runs) == 1
    assert _found(second) == _found(first)
    assert [o.path for o in second] == [str(project / "engine.py"), str(project / "train.py")]


def test_a_record_is_taken_back_without_reading_files_written_long_ago(project, runs, monkeypatch):
    monkeypatch.setattr(cache_module, "RACY_NS", -(10 ** 18))  # no file counts as just written
    first = _lint(project)

    def no_reading(*args, **kwargs):
        raise AssertionError("a file was read")

    monkeypatch.setattr(parallel, "_read_source", no_reading)
    monkeypatch.setattr(cache_module, "_content_digest", no_reading)
    assert _found(_lint(project)) == _found(first)
    assert len(runs) == 1


def test_a_file_rewritten_with_the_same_size_and_time_is_linted_again(project, runs):
    first = _lint(project)
    info = os.stat(project / "engine.py")
    fixed = UNSCALES_FIRST.replace("    scaler.step(optimizer)\n    scaler.update()\n", "")
    fixed += " " * (len(ENGINE) - len(fixed))
    assert len(fixed) == len(ENGINE) and fixed != ENGINE
    (project / "engine.py").write_text(fixed, encoding="utf-8")
    os.utime(project / "engine.py", ns=(info.st_atime_ns, info.st_mtime_ns))
    second = _lint(project)
    assert len(runs) == 2
    assert _found(second) != _found(first)


def test_editing_the_module_called_into_does_the_run_again(project, runs):
    first = _lint(project, files=("train.py",))  # engine.py is only read through the index
    assert [d.code for d in first[0].diagnostics] == ["AMP003"]
    (project / "engine.py").write_text(UNSCALES_FIRST, encoding="utf-8")
    second = _lint(project, files=("train.py",))
    assert len(runs) == 2
    assert second[0].diagnostics == []


def test_a_new_file_beside_them_does_the_run_again(project, runs):
    _lint(project)
    (project / "other.py").write_text("x = 1\n", encoding="utf-8")
    _lint(project)
    assert len(runs) == 2


def test_other_rules_for_a_file_do_the_run_again(project, runs):
    _lint(project)
    ignoring = Settings(root=project, per_file_ignores={"train.py": ["AMP003"]})
    second = _lint(project, settings=ignoring)
    assert len(runs) == 2
    assert second[1].diagnostics == []
    assert _lint(project, settings=ignoring)[1].diagnostics == [] and len(runs) == 2


def test_a_tampered_record_is_ignored(project, runs):
    first = _lint(project)
    for entry in (project / ".cache" / "entries").rglob("*.json"):
        raw = entry.read_bytes()
        if b'"states"' in raw:
            entry.write_bytes(raw.replace(b'"AMP003"', b'"AMP001"'))
    second = _lint(project)
    assert len(runs) == 2
    assert _found(second) == _found(first)


@pytest.mark.parametrize("mode", [Mode(fix=True), Mode(diff=True)])
def test_fix_and_diff_runs_keep_no_record(project, runs, mode):
    _lint(project, mode=Mode(diff=True))
    _lint(project, mode=mode)
    assert len(runs) == 2
    assert not [entry for entry in (project / ".cache" / "entries").rglob("*.json") if b'"states"' in entry.read_bytes()]


def test_a_run_with_a_note_is_not_kept(project, runs, monkeypatch):
    original = parallel._lint_paths

    def with_note(paths, *args):
        outcomes = original(paths, *args)
        outcomes[0].note = "told the user something"
        return outcomes

    monkeypatch.setattr(parallel, "_lint_paths", with_note)
    _lint(project)
    _lint(project)
    assert not [entry for entry in (project / ".cache" / "entries").rglob("*.json") if b'"states"' in entry.read_bytes()]


def test_a_file_rewritten_within_one_clock_tick_differs_by_its_bytes(tmp_path):
    """Two writes within one tick of the file system's clock leave every time as it was: the record of a file
    written just before its run holds its digest, and that tells the two apart."""
    path = tmp_path / "engine.py"
    path.write_text(ENGINE, encoding="utf-8")
    then = cache_module.file_states([str(path)])[0]
    assert len(then) == 7 and then[6]  # just written: its digest is kept
    path.write_text(ENGINE.replace("1.0", "2.0"), encoding="utf-8")
    same_tick = then[:6]  # what stat would say had the clock not moved
    assert not cache_module._same_state(then, same_tick, str(path))
    path.write_text(ENGINE, encoding="utf-8")
    assert cache_module._same_state(then, same_tick, str(path))
    assert cache_module._same_state(then[:6], same_tick, str(path))  # an old file is trusted by its state


HELPERS = "def tidy(model):\n    return model  # tidy\n"
CALLS_HELPER = TRAIN.replace("import engine\n", "import helpers\n").replace(
    "        engine.optimizer_step(model, optimizer, scaler)\n",
    "        helpers.tidy(model)\n        scaler.step(optimizer)\n        scaler.update()\n")


def test_a_record_read_on_demand_is_built_once_per_content(tmp_path, monkeypatch):
    """A file the index only knows by name (no AMP vocabulary) is read when an answer needs it; with a cache its
    record is kept by content like phase 1's, so the next run (say, after train.py changed) does not build it."""
    from amplint.index import functions

    (tmp_path / "helpers.py").write_text(HELPERS, encoding="utf-8")
    (tmp_path / "train.py").write_text(CALLS_HELPER, encoding="utf-8")
    built = []
    original = functions.index_text

    def counting(text, *args, **kwargs):
        if "# tidy" in text:
            built.append(text)
        return original(text, *args, **kwargs)

    monkeypatch.setattr(functions, "index_text", counting)
    first = _lint(tmp_path, files=("train.py",))
    assert first[0].diagnostics == [] and len(built) == 1
    (tmp_path / "train.py").write_text(CALLS_HELPER + "\n", encoding="utf-8")
    assert _lint(tmp_path, files=("train.py",))[0].diagnostics == []
    assert len(built) == 1
