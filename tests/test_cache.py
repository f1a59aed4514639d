"""The result cache: exact round trips, hits, invalidation, corrupt entries, concurrent writers, `amplint clean`."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from amplint import cache as cache_module
from amplint import pipeline
from amplint.cache import Cache, decode, encode
from amplint.cli import main
from amplint.config import Settings
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix, Location
from amplint.rules import ALL_RULES
from amplint.outcome import Mode
from amplint.pipeline import process_file
from amplint.selection import rules_for

FLAGGED = """\
import torch

scaler = torch.amp.GradScaler("cuda")
for batch in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(batch)
        scaler.scale(loss).backward()  # a comment, unicode: é
    scaler.step(optimizer)
    scaler.update()
"""
CLEAN = "import os\nprint(os.getcwd())\n"


def _rules():
    return rules_for("x.py", list(ALL_RULES), Settings())


def _entries(directory: Path) -> list[Path]:
    return sorted((directory / "entries").rglob("*.json"))


@pytest.fixture
def engine_calls(monkeypatch):
    """Counts the engine's analyses (the cache must spare them)."""
    calls = []
    original = pipeline.lint_text

    def counting(text, path, rules, **options):
        calls.append(path)
        return original(text, path, rules, **options)

    monkeypatch.setattr(pipeline, "lint_text", counting)
    return calls


def _write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


# Round trip ----------------------------------------------------------------------------------------------------
def test_diagnostics_round_trip_exactly():
    edit = Edit(3, 17, "new text\n\twith tab é", Location(1, 4), Location(2, 1))
    diagnostic = Diagnostic("AMP001", "backward-in-autocast", "message `x` é", "a.py", Location(5, 9),
                            Location(5, 30), Fix("Move it", (edit, edit), Applicability.UNSAFE), cell=3,
                            source_line="        scaler.scale(loss).backward()  # é")
    back = decode(json.loads(json.dumps(encode([diagnostic, diagnostic]))))
    assert back == [diagnostic, diagnostic]
    assert back[0].source_line == diagnostic.source_line  # not part of ==
    assert type(back[0].fix.edits) is tuple and back[0].fix.applicability is Applicability.UNSAFE


def test_real_diagnostics_round_trip_with_fixes_and_source_lines(tmp_path):
    path = _write(tmp_path / "train.py", FLAGGED)
    fresh = process_file(path, _rules(), Mode()).diagnostics
    assert fresh and any(d.fix for d in fresh)
    cache = Cache.open(tmp_path / "cache")
    cache.store("k" * 40, fresh)
    loaded = cache.load("k" * 40, path)
    assert loaded == fresh
    assert [d.source_line for d in loaded] == [d.source_line for d in fresh]
    assert [d.to_dict() for d in loaded] == [d.to_dict() for d in fresh]


def test_decode_refuses_unknown_classes():
    with pytest.raises(ValueError):
        decode({"@": "Popen", "fields": {}})
    with pytest.raises(ValueError):
        decode({"@": "__builtins__", "fields": {}})


# Hits and misses ----------------------------------------------------------------------------------------------
def test_second_run_is_a_hit(tmp_path, engine_calls):
    path = _write(tmp_path / "train.py", FLAGGED)
    cache = Cache.open(tmp_path / "cache")
    first = process_file(path, _rules(), Mode(), cache=cache)
    assert len(engine_calls) == 1 and len(_entries(tmp_path / "cache")) == 1
    second = process_file(path, _rules(), Mode(), cache=cache)
    assert len(engine_calls) == 1
    assert second.diagnostics == first.diagnostics
    assert [d.source_line for d in second.diagnostics] == [d.source_line for d in first.diagnostics]


def test_same_content_elsewhere_is_a_hit_reported_under_its_own_name(tmp_path, engine_calls):
    cache = Cache.open(tmp_path / "cache")
    a = _write(tmp_path / "a.py", FLAGGED)
    b = _write(tmp_path / "b.py", FLAGGED)
    first = process_file(a, _rules(), Mode(), cache=cache)
    second = process_file(b, _rules(), Mode(), cache=cache)
    assert len(engine_calls) == 1
    assert {d.filename for d in second.diagnostics} == {b}
    assert [d.location for d in second.diagnostics] == [d.location for d in first.diagnostics]


def test_content_change_invalidates(tmp_path, engine_calls):
    cache = Cache.open(tmp_path / "cache")
    path = _write(tmp_path / "train.py", FLAGGED)
    process_file(path, _rules(), Mode(), cache=cache)
    _write(tmp_path / "train.py", FLAGGED.replace("scaler.update()", "scaler.update()  # changed"))
    process_file(path, _rules(), Mode(), cache=cache)
    assert len(engine_calls) == 2


def test_settings_change_invalidates(tmp_path, engine_calls):
    cache = Cache.open(tmp_path / "cache")
    path = _write(tmp_path / "train.py", FLAGGED)
    everything = process_file(path, _rules(), Mode(), cache=cache).diagnostics
    fewer = [rule for rule in _rules() if rule.code != "AMP001"]
    without = process_file(path, fewer, Mode(), cache=cache).diagnostics
    assert len(engine_calls) == 2
    assert "AMP001" in {d.code for d in everything} and "AMP001" not in {d.code for d in without}
    assert cache.key(b"x", fewer) != cache.key(b"x", _rules())
    assert cache.key(b"x", _rules(), "lint") != cache.key(b"x", _rules(), Mode(fix=True))


def test_version_change_invalidates(tmp_path, engine_calls, monkeypatch):
    path = _write(tmp_path / "train.py", FLAGGED)
    older = Cache.open(tmp_path / "cache")
    process_file(path, _rules(), Mode(), cache=older)
    monkeypatch.setattr(cache_module, "__version__", "999.0")
    newer = Cache.open(tmp_path / "cache")
    assert newer.fingerprint != older.fingerprint
    process_file(path, _rules(), Mode(), cache=newer)
    assert len(engine_calls) == 2
    assert len(_entries(tmp_path / "cache")) == 2


def test_code_fingerprint_follows_version_and_code(monkeypatch):
    base = cache_module.code_fingerprint()
    assert cache_module.code_fingerprint() == base
    monkeypatch.setattr(cache_module, "__version__", "999.0")
    assert cache_module.code_fingerprint() != base
    monkeypatch.undo()
    monkeypatch.setattr(cache_module, "_schema", lambda: "Diagnostic(new:field)")
    assert cache_module.code_fingerprint() != base
    monkeypatch.undo()
    monkeypatch.setattr(cache_module, "_libcst_version", lambda: "__version__ = '0.0.1'")
    assert cache_module.code_fingerprint() != base


def test_libcst_version_is_read_without_importing_libcst():
    import subprocess
    import sys

    code = ("import sys; from amplint.cache import _libcst_version; v = _libcst_version(); "
            "loaded = 'libcst._nodes' in sys.modules; from importlib.metadata import version; "
            "print(version('libcst') in v, loaded)")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert shown == ["True", "False"]  # the installed version, and libcst (lazy in amplint) never loaded


def test_corrupt_entry_is_ignored_and_rebuilt(tmp_path, engine_calls):
    cache = Cache.open(tmp_path / "cache")
    path = _write(tmp_path / "train.py", FLAGGED)
    good = process_file(path, _rules(), Mode(), cache=cache).diagnostics
    (entry,) = _entries(tmp_path / "cache")
    for garbage in (b"", b"{not json", b'{"key": "other", "diagnostics": []}', b'{"key": 1}', b"\xff\xfe",
                    json.dumps({"key": entry.parent.name + entry.stem,
                                "diagnostics": [{"@": "Nope", "fields": {}}]}).encode()):
        entry.write_bytes(garbage)
        again = process_file(path, _rules(), Mode(), cache=cache).diagnostics
        assert again == good
        assert json.loads(entry.read_bytes())["key"] == entry.parent.name + entry.stem  # rewritten
    assert len(engine_calls) == 7


def test_files_without_words_are_not_stored(tmp_path, engine_calls):
    cache = Cache.open(tmp_path / "cache")
    path = _write(tmp_path / "plain.py", CLEAN)
    assert process_file(path, _rules(), Mode(), cache=cache).diagnostics == []
    assert _entries(tmp_path / "cache") == [] and engine_calls == []


def test_clean_results_are_stored_too(tmp_path, engine_calls):
    cache = Cache.open(tmp_path / "cache")
    path = _write(tmp_path / "lookalike.py", "import torch\nwith torch.autocast('cuda'):\n    y = model(x)\n")
    assert process_file(path, _rules(), Mode(), cache=cache).diagnostics == []
    assert process_file(path, _rules(), Mode(), cache=cache).diagnostics == []
    assert len(_entries(tmp_path / "cache")) == 1


def test_internal_errors_are_not_cached(tmp_path):
    cache = Cache.open(tmp_path / "cache")
    crash = Diagnostic("AMP902", "internal-error", "boom", "a.py", Location(1, 1), Location(1, 1))
    cache.store("a" * 40, [crash])
    assert cache.load("a" * 40, "a.py") is None


def test_fix_runs_do_not_use_the_cache(tmp_path):
    path = _write(tmp_path / "train.py", FLAGGED)
    result = CliRunner().invoke(main, ["check", path, "--fix", "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code in (0, 1), result.output
    assert not (tmp_path / "cache").exists()


# The folder ---------------------------------------------------------------------------------------------------
def test_folder_is_tagged_and_ignored(tmp_path):
    Cache.open(tmp_path / "cache")
    assert (tmp_path / "cache" / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    assert "*" in (tmp_path / "cache" / ".gitignore").read_text().splitlines()


def test_unwritable_folder_means_no_cache(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert Cache.open(blocker / "cache") is None


def test_default_folder_is_in_the_project_root(tmp_path):
    settings = Settings(root=tmp_path)
    assert cache_module.default_directory(settings) == tmp_path / ".amplint_cache"
    settings.cache_dir = "build/lint-cache"
    assert cache_module.default_directory(settings) == tmp_path / "build" / "lint-cache"


def _hammer(directory: str, key: str, rounds: int, queue) -> None:
    cache = Cache(directory, "fingerprint")
    diagnostics = [Diagnostic("AMP001", "n", "m" * 2000, "", Location(1, 1), Location(1, 2), source_line="x")]
    bad = 0
    for _ in range(rounds):
        cache.store(key, diagnostics)
        loaded = cache.load(key, "f.py")
        if loaded is not None and [d.message for d in loaded] != ["m" * 2000]:
            bad += 1
    queue.put(bad)


def test_concurrent_writers_never_leave_a_half_entry(tmp_path):
    Cache.open(tmp_path / "cache", "fingerprint")
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    queue = context.Queue()
    workers = [context.Process(target=_hammer, args=(str(tmp_path / "cache"), "c" * 40, 60, queue))
               for _ in range(3)]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=600) for _ in workers]  # the bounds only guard against a hang
    for worker in workers:
        worker.join(timeout=600)
    assert results == [0, 0, 0]
    leftovers = [p for p in (tmp_path / "cache").rglob("*") if cache_module.TEMPORARY.fullmatch(p.name)]
    assert leftovers == []


# The command line ---------------------------------------------------------------------------------------------
def test_cli_uses_and_cleans_the_cache(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "train.py", FLAGGED)
    first = CliRunner().invoke(main, ["check", "train.py", "--output-format", "json"])
    assert (tmp_path / ".amplint_cache" / "CACHEDIR.TAG").is_file()
    second = CliRunner().invoke(main, ["check", "train.py", "--output-format", "json"])
    assert first.exit_code == second.exit_code == 1 and first.output == second.output
    result = CliRunner().invoke(main, ["clean"])
    assert result.exit_code == 0 and "Removed" in result.output
    assert not (tmp_path / ".amplint_cache").exists()
    assert "No cache" in CliRunner().invoke(main, ["clean"]).output


def test_cli_no_cache_and_cache_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "train.py", FLAGGED)
    CliRunner().invoke(main, ["check", "train.py", "--no-cache"])
    assert not (tmp_path / ".amplint_cache").exists()
    CliRunner().invoke(main, ["check", "train.py", "--cache-dir", "elsewhere"])
    assert (tmp_path / "elsewhere" / "CACHEDIR.TAG").is_file() and not (tmp_path / ".amplint_cache").exists()
    assert CliRunner().invoke(main, ["clean", "--cache-dir", "elsewhere"]).exit_code == 0
    assert not (tmp_path / "elsewhere").exists()


def test_clean_refuses_a_folder_that_is_not_a_cache(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "keep.py").write_text("x = 1\n")
    result = CliRunner().invoke(main, ["clean", "--cache-dir", str(tmp_path / "src")])
    assert result.exit_code == 2
    assert (tmp_path / "src" / "keep.py").exists()


def test_cache_is_picklable_for_workers(tmp_path):
    import pickle

    cache = Cache.open(tmp_path / "cache")
    clone = pickle.loads(pickle.dumps(cache))
    assert clone.directory == cache.directory and clone.fingerprint == cache.fingerprint
    assert os.fspath(clone.entries) == os.fspath(cache.entries)


def test_notebooks_are_cached_with_their_cells(tmp_path, monkeypatch):
    import shutil

    calls = []
    original = pipeline.lint_text
    monkeypatch.setattr(pipeline, "lint_text", lambda *args, **options: calls.append(args[1]) or original(*args, **options))
    source = Path(__file__).resolve().parents[1] / "fixtures" / "notebooks" / "flagged" / "scaler_per_batch.ipynb"
    path = str(shutil.copy(source, tmp_path / "train.ipynb"))
    cache = Cache.open(tmp_path / "cache")
    first = process_file(path, _rules(), Mode(), cache=cache)
    second = process_file(path, _rules(), Mode(), cache=cache)
    assert len(calls) == 1 and first.diagnostics and second.diagnostics == first.diagnostics
    assert all(d.cell is not None for d in second.diagnostics)


def test_a_malformed_notebook_is_reported_from_the_cache_too(tmp_path):
    path = _write(tmp_path / "broken.ipynb", '{"cells": [')
    cache = Cache.open(tmp_path / "cache")
    for _ in range(2):
        assert [d.code for d in process_file(path, _rules(), Mode(), cache=cache).diagnostics] == ["AMP901"]
