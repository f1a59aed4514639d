"""Nothing the user wrote is ever lost: the cache folder, fixes on links and read-only files, edits made during a
fix, `check - --fix` for editors, notebook fixes, cache entries that are not what amplint wrote.

Each test injects one fault or hostile situation and checks that amplint neither destroys nor hides anything.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import tempfile
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings, strategies as st

from amplint import cache as cache_module
from amplint import source as source_module
from amplint.cache import Cache, CacheRefused
from amplint.cli import main
from amplint.config import Settings
from amplint.rules import ALL_RULES
from amplint.outcome import Mode
from amplint.pipeline import process_file
from amplint.selection import rules_for
from samples import as_nobody

FLAGGED = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"  # AMP007, a safe fix
FIXED = 'import torch\nscaler = torch.amp.GradScaler("cuda")\n'
TRAINING = """\
import torch

scaler = torch.amp.GradScaler("cuda")
for batch in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = model(batch)
        scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _rules():
    return rules_for("x.py", list(ALL_RULES), Settings())


def _invoke(args, stdin: bytes | None = None):
    return CliRunner().invoke(main, args, input=stdin)


def _tree(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (relative path -> bytes), for before/after comparisons."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project with a git folder, a source file and a home folder of its own (HOME points there)."""
    root = tmp_path / "project"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "train.py").write_text(TRAINING)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("export X=1\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(root)
    return root


def _write_amplint_files(folder: Path) -> None:
    """What an earlier amplint wrote into a folder it was pointed at: the tag, `.gitignore`, an entry."""
    (folder / "CACHEDIR.TAG").write_text(cache_module.TAG)
    (folder / ".gitignore").write_text(cache_module.GITIGNORE)
    (folder / "entries" / "ab").mkdir(parents=True)
    (folder / "entries" / "ab" / ("c" * 38 + ".json")).write_text("{}")


# 1. The cache folder --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("folder", [".", "src", "build"])
def test_cache_dir_on_the_command_line_must_be_new_empty_or_amplints(project, folder):
    (project / "src").mkdir()
    (project / "src" / "model.py").write_text("x = 1\n")
    (project / "build").mkdir()
    (project / "build" / "model.ckpt").write_bytes(b"\x00weights")
    before = _tree(project)
    result = _invoke(["check", "train.py", "--cache-dir", folder])
    assert result.exit_code == 2
    assert "will not use" in result.stderr and "cache folder" in result.stderr
    assert _tree(project) == before  # no CACHEDIR.TAG, no `.gitignore` of `*` (git would ignore new sources)
    cleaned = _invoke(["clean", "--cache-dir", folder])
    assert cleaned.exit_code == 2 and _tree(project) == before


@pytest.mark.parametrize("configured", ["~", ".", "..", "/"])
def test_cache_dir_in_a_cloned_configuration_is_refused_and_the_run_goes_on(project, configured):
    (project / "pyproject.toml").write_text(f'[tool.amplint]\ncache-dir = "{configured}"\n')
    home = Path(os.environ["HOME"])
    before, home_before = _tree(project), _tree(home)
    result = _invoke(["check", "train.py"])
    assert result.exit_code == 1 and "AMP001" in result.stdout  # findings reported, without a cache
    assert "linting without a cache" in result.stderr
    assert _tree(project) == before and _tree(home) == home_before
    assert _invoke(["clean"]).exit_code == 2
    assert _tree(project) == before and _tree(home) == home_before


def test_an_empty_project_root_is_refused_too(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = _invoke(["check", "--cache-dir", "."])
    assert result.exit_code == 2 and ("project root" in result.stderr or "current folder" in result.stderr)
    assert list(tmp_path.iterdir()) == []


def test_refusal_names_each_guarded_folder(tmp_path, monkeypatch):
    root = tmp_path / "project"
    root.mkdir()
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(root)
    _write_amplint_files(root)  # a tag from an earlier run does not make the project root a cache
    assert "project root" in cache_module.refusal(root, root)
    assert "home folder" in cache_module.refusal(home, root)
    assert "above" in cache_module.refusal(tmp_path, root)
    assert "root of the file system" in cache_module.refusal("/", root)
    assert cache_module.refusal(root / ".amplint_cache", root) is None
    (root / "empty").mkdir()
    assert cache_module.refusal(root / "empty", root) is None
    with pytest.raises(CacheRefused):
        Cache.open(home, root=root)
    assert not (home / "CACHEDIR.TAG").exists()


def test_a_folder_amplint_tagged_before_with_user_files_is_not_used(project):
    (project / "build").mkdir()
    (project / "build" / "model.ckpt").write_bytes(b"weights")
    _write_amplint_files(project / "build")
    assert "model.ckpt" in cache_module.refusal(project / "build", project)


def test_clean_removes_only_amplints_files(project):
    """An earlier amplint tagged the project root: `clean` takes back its own files and nothing else."""
    _write_amplint_files(project)
    (project / "notes.tmp-file").write_text("mine")
    user = _tree(project)
    for name in ("CACHEDIR.TAG", ".gitignore", "entries/ab/" + "c" * 38 + ".json"):
        del user[name]
    result = _invoke(["clean", "--cache-dir", "."])
    assert result.exit_code == 0 and "kept the folder" in result.stdout
    assert _tree(project) == user and not (project / "entries").exists()


def test_clean_keeps_a_user_gitignore_files_in_entries_and_symlinked_targets(tmp_path):
    cache = tmp_path / "cache"
    Cache.open(cache, "fingerprint").store("d" * 40, [])
    (cache / ".gitignore").write_text("*.pyc\n")  # not amplint's content
    (cache / "entries" / "notes.txt").write_text("mine")
    (cache / "entries" / "ab").mkdir()
    (cache / "entries" / "ab" / "keep.txt").write_text("mine")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / ("e" * 38 + ".json")).write_text("not amplint's")
    os.symlink(outside, cache / "entries" / "ee")
    assert cache_module.clean(cache) == [".gitignore", "entries"]
    assert (cache / ".gitignore").read_text() == "*.pyc\n"
    assert sorted(p.name for p in (cache / "entries").iterdir()) == ["ab", "ee", "notes.txt"]
    assert (cache / "entries" / "ab" / "keep.txt").exists() and (outside / ("e" * 38 + ".json")).exists()
    assert not (cache / "CACHEDIR.TAG").exists() and not list((cache / "entries").glob("dd"))


def test_clean_removes_an_untouched_cache_folder(tmp_path):
    cache = Cache.open(tmp_path / "cache", "fingerprint")
    cache.store("d" * 40, [])
    (tmp_path / "cache" / "entries" / "dd" / ".amplint-tmp-abcd_123").write_text("half")
    assert cache_module.clean(tmp_path / "cache") == []
    assert not (tmp_path / "cache").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_named_like_the_tag_is_never_read(tmp_path):
    (tmp_path / "cache").mkdir()
    os.mkfifo(tmp_path / "cache" / "CACHEDIR.TAG")
    assert not cache_module.is_cache_directory(tmp_path / "cache")
    result = _invoke(["clean", "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 2 and (tmp_path / "cache" / "CACHEDIR.TAG").exists()


# 2. Links, owner, group, mode, read-only files ---------------------------------------------------------------
def test_fix_through_a_symlink_fixes_the_target_and_keeps_the_link(tmp_path):
    real = tmp_path / "real.py"
    real.write_text(FLAGGED)
    link = tmp_path / "link.py"
    link.symlink_to(real)
    outcome = process_file(str(link), _rules(), Mode(fix=True))
    assert outcome.fixed == 1 and outcome.message is None
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == FIXED


def test_fix_keeps_hard_links_linked(tmp_path):
    first = tmp_path / "a.py"
    first.write_text(FLAGGED)
    second = tmp_path / "b.py"
    os.link(first, second)
    inode = first.stat().st_ino
    assert process_file(str(first), _rules(), Mode(fix=True)).fixed == 1
    assert first.stat().st_ino == second.stat().st_ino == inode and first.stat().st_nlink == 2
    assert second.read_text() == FIXED


def test_fix_keeps_the_mode(tmp_path):
    path = tmp_path / "a.py"
    path.write_text(FLAGGED)
    os.chmod(path, 0o640)
    assert process_file(str(path), _rules(), Mode(fix=True)).fixed == 1
    assert stat.S_IMODE(path.stat().st_mode) == 0o640 and path.read_text() == FIXED


@pytest.mark.skipif(not IS_ROOT, reason="giving a file another owner needs root")
def test_fix_keeps_owner_and_group(tmp_path):
    path = tmp_path / "a.py"
    path.write_text(FLAGGED)
    os.chown(path, 12345, 23456)
    assert process_file(str(path), _rules(), Mode(fix=True)).fixed == 1
    info = path.stat()
    assert (info.st_uid, info.st_gid) == (12345, 23456) and path.read_text() == FIXED


@pytest.mark.skipif(not IS_ROOT, reason="giving a file another owner needs root")
def test_fix_keeps_owner_and_group_when_the_temporary_file_cannot_have_them(tmp_path, monkeypatch):
    """Where chown is not allowed (a non-root user fixing a file of another owner or group), the file is
    written in place: it keeps its inode, so its owner and group."""
    path = tmp_path / "a.py"
    path.write_text(FLAGGED)
    os.chown(path, 12345, 23456)
    inode = path.stat().st_ino

    def refuse(*args):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(source_module.os, "chown", refuse)
    assert process_file(str(path), _rules(), Mode(fix=True)).fixed == 1
    info = path.stat()
    assert info.st_ino == inode and (info.st_uid, info.st_gid) == (12345, 23456) and path.read_text() == FIXED
    assert [p.name for p in tmp_path.iterdir()] == ["a.py"]


@pytest.mark.parametrize("mode", [0o444, 0o400, 0o555])
def test_read_only_files_are_not_rewritten_and_findings_are_reported(tmp_path, mode):
    path = tmp_path / "a.py"
    path.write_text(FLAGGED)
    os.chmod(path, mode)
    try:
        result = _invoke(["check", str(path), "--fix", "--output-format", "concise", "--exit-non-zero-on-warning"])
        assert path.read_text() == FLAGGED
        assert "read-only" in result.output and "AMP007" in result.output and result.exit_code == 1
    finally:
        os.chmod(path, 0o644)


def _fix_as_nobody(paths: list[Path]) -> list[tuple[int, str | None, list[str]]]:
    """(fixes applied, message, codes found) for each file, fixed as `nobody`."""
    process_file(str(paths[0]), _rules(), Mode(diff=True))  # load every lazily imported module first

    def fix_each():
        return [(outcome.fixed, outcome.message, [d.code for d in outcome.diagnostics])
                for outcome in (process_file(str(path), _rules(), Mode(fix=True)) for path in paths)]

    return [tuple(result) for result in as_nobody(fix_each)]


@pytest.mark.skipif(not IS_ROOT or not hasattr(os, "fork"), reason="becoming another user needs root and fork")
def test_fix_as_a_non_root_user(tmp_path):
    """As a user who may not chown, may not write a read-only file and may not create files in a folder."""
    import shutil

    parent = Path(tempfile.mkdtemp(prefix="amplint-nonroot-"))  # under /tmp: reachable by another user
    try:
        os.chmod(parent, 0o755)
        own, locked = parent / "own", parent / "locked"
        own.mkdir()
        locked.mkdir()
        read_only, theirs, mine = own / "ro.py", own / "theirs.py", locked / "mine.py"
        for path in (read_only, theirs, mine):
            path.write_text(FLAGGED)
        for path in (own, read_only, mine):
            os.chown(path, 65534, 65534)
        os.chmod(theirs, 0o666)  # root's file, writable by all: the user cannot give a new file its owner
        os.chmod(read_only, 0o444)
        os.chmod(locked, 0o555)  # no new files in this folder
        before = {path: (path.stat().st_uid, path.stat().st_gid, path.stat().st_ino)
                  for path in (read_only, theirs, mine)}
        (ro_result, theirs_result, mine_result) = _fix_as_nobody([read_only, theirs, mine])
        assert ro_result[0] == 0 and "read-only" in ro_result[1] and ro_result[2] == ["AMP007"]
        assert read_only.read_text() == FLAGGED
        assert theirs_result[:2] == (1, None) and theirs.read_text() == FIXED
        assert mine_result[:2] == (1, None) and mine.read_text() == FIXED
        for path, identity in before.items():
            assert (path.stat().st_uid, path.stat().st_gid, path.stat().st_ino) == identity, path
        assert sorted(p.name for p in own.iterdir()) == ["ro.py", "theirs.py"]
    finally:
        os.chmod(parent / "locked", 0o755)
        shutil.rmtree(parent)


# 3. An edit made while fixing ---------------------------------------------------------------------------------
@pytest.mark.parametrize("links", [1, 2])
def test_an_append_between_the_compare_and_the_rename_is_kept(tmp_path, monkeypatch, links):
    path = tmp_path / "a.py"
    path.write_text(FLAGGED)
    if links == 2:
        os.link(path, tmp_path / "b.py")
    real_mkstemp, real_read = tempfile.mkstemp, source_module._read
    calls = []

    def editor_saves():
        if not calls:
            calls.append(1)
            with open(path, "a") as handle:
                handle.write("x = 1  # typed while amplint was fixing\n")

    def mkstemp(*args, **kwargs):  # after the content was compared, before the rename
        editor_saves()
        return real_mkstemp(*args, **kwargs)

    def read(target):  # the in-place path (hard links) compares with its own handle after this
        data = real_read(target)
        editor_saves()
        return data

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    monkeypatch.setattr(source_module, "_read", read)
    outcome = process_file(str(path), _rules(), Mode(fix=True))
    assert calls
    assert path.read_text() == FLAGGED + "x = 1  # typed while amplint was fixing\n"
    assert "changed on disk while fixing; not overwritten" in outcome.message
    assert [d.code for d in outcome.diagnostics] == ["AMP007"]
    assert sorted(p.name for p in tmp_path.iterdir()) == (["a.py"] if links == 1 else ["a.py", "b.py"])


def test_a_same_size_edit_with_the_old_mtime_is_caught_by_the_content(tmp_path, monkeypatch):
    path = tmp_path / "a.py"
    path.write_text(FLAGGED)
    info = path.stat()
    real_mkstemp = tempfile.mkstemp

    def mkstemp(*args, **kwargs):
        path.write_text(FLAGGED.replace("import", "IMPORT"))
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
        return real_mkstemp(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    outcome = process_file(str(path), _rules(), Mode(fix=True))
    assert path.read_text().startswith("IMPORT") and "not overwritten" in outcome.message


# 4. `check - --fix` ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("raw", [
    b"x = '\xe9\xff'\nscaler = torch.cuda.amp.GradScaler()\n",  # not UTF-8, no cookie: cannot be decoded
    b"import torch\ndef f(:\n    scaler = torch.cuda.amp.GradScaler()\n",  # a syntax error
    b"import torch\r\nwith torch.autocast('cuda'):\r\n    y = model(x)\r\n",  # nothing to fix, CRLF
    b"\xef\xbb\xbfimport os\n",  # nothing to fix, a BOM
    b"",
])
def test_stdin_fix_echoes_the_input_when_nothing_is_fixed(raw):
    result = _invoke(["check", "-", "--fix", "--stdin-filename", "t.py"], stdin=raw)
    assert result.stdout_bytes == raw


def test_stdin_fix_writes_latin1_with_its_cookie():
    raw = b'# -*- coding: latin-1 -*-\nimport torch\nname = "\xe9t\xe9"\nscaler = torch.cuda.amp.GradScaler()\n'
    result = _invoke(["check", "-", "--fix", "--stdin-filename", "t.py"], stdin=raw)
    assert result.stdout_bytes == raw.replace(b"torch.cuda.amp.GradScaler()", b'torch.amp.GradScaler("cuda")')


def test_stdin_fix_keeps_the_bom():
    raw = b"\xef\xbb\xbf" + FLAGGED.replace("\n", "  # \xc3\xa9\n").encode("latin-1")
    result = _invoke(["check", "-", "--fix", "--stdin-filename", "t.py"], stdin=raw)
    assert result.stdout_bytes.startswith(b"\xef\xbb\xbf")
    assert result.stdout_bytes == raw.replace(b"torch.cuda.amp.GradScaler()", b'torch.amp.GradScaler("cuda")')


def test_stdin_fix_of_a_notebook_echoes_an_invalid_one():
    raw = b'{"cells": [ \xff'
    result = _invoke(["check", "-", "--fix", "--stdin-filename", "t.ipynb"], stdin=raw)
    assert result.stdout_bytes == raw


# 5. Notebook fixes change only the edited cells' sources ------------------------------------------------------
NOTEBOOK = """{
 "cells": [
  {
   "cell_type": "code",
   "execution_count": 1,
   "metadata": {"tags": ["a"], "tags": ["b"]},
   "outputs": [{"data": {"image\\/png": "iVBOR\\/w==", "text/plain": ["<Figure>"]}, "metadata": {"scale": 1e5},
                "output_type": "display_data"}],
   "source": [
    "import torch\\n",
    "x = \\"caf\\u00e9\\"\\n",
    "scaler = torch.cuda.amp.GradScaler()"
   ]
  },
  {"source": "y = 2\\n", "cell_type": "code", "outputs": [], "metadata": {}, "execution_count": null}
 ],
 "nbformat_minor": 5, "nbformat": 4,
 "metadata": {"language_info": {"name": "python"}, "ratio": 1.50}
}
"""


def test_notebook_fix_leaves_every_byte_outside_the_edited_source(tmp_path):
    path = tmp_path / "n.ipynb"
    path.write_text(NOTEBOOK, encoding="utf-8", newline="")
    outcome = process_file(str(path), _rules(), Mode(fix=True))
    assert outcome.fixed == 1, outcome.message
    old_line = '    "scaler = torch.cuda.amp.GradScaler()"\n'
    new_line = '    "scaler = torch.amp.GradScaler(\\"cuda\\")"\n'
    assert path.read_text(encoding="utf-8") == NOTEBOOK.replace(old_line, new_line)


def test_notebook_fix_in_a_string_source(tmp_path):
    text = NOTEBOOK.replace('"source": "y = 2\\n"', '"source": "import torch\\ns = torch.cuda.amp.GradScaler()\\n"')
    path = tmp_path / "n.ipynb"
    path.write_text(text, encoding="utf-8", newline="")
    assert process_file(str(path), _rules(), Mode(fix=True)).fixed >= 1
    assert path.read_text(encoding="utf-8") == text.replace(
        'torch.cuda.amp.GradScaler()\\n"', 'torch.amp.GradScaler(\\"cuda\\")\\n"').replace(
        '"scaler = torch.cuda.amp.GradScaler()"', '"scaler = torch.amp.GradScaler(\\"cuda\\")"')


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=8)


@settings(max_examples=25, deadline=None)
@given(metadata=st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=3), before=st.integers(0, 2),
       indent=st.sampled_from([None, 1, 2, "\t"]), ensure_ascii=st.booleans(), as_list=st.booleans(),
       crlf=st.booleans())
def test_random_notebooks_change_only_the_edited_source(metadata, before, indent, ensure_ascii, as_list, crlf):
    from amplint.pipeline import process_text as process_notebook_text
    from amplint.sources.notebook import _source_spans

    source = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
    flagged = {"cell_type": "code", "execution_count": None, "metadata": metadata, "outputs": [],
               "source": source.splitlines(keepends=True) if as_list else source}
    cells = [{"cell_type": "markdown", "metadata": metadata, "source": "é"}] * before + [flagged]
    data = {"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}
    text = json.dumps(data, indent=indent, ensure_ascii=ensure_ascii)
    if crlf:
        text = text.replace("\n", "\r\n")
    outcome = process_notebook_text(text, "n.ipynb", _rules(), Mode(fix=True))
    assert outcome.fixed >= 1, outcome.message
    start, end = _source_spans(text, {before})[before]
    written = outcome.fixed_text
    assert written.startswith(text[:start]) and written.endswith(text[end:])
    expected = json.loads(text)
    expected["cells"][before]["source"] = json.loads(written)["cells"][before]["source"]
    assert json.loads(written) == expected
    assert "".join(expected["cells"][before]["source"]) == source.replace(
        "torch.cuda.amp.GradScaler()", 'torch.amp.GradScaler("cuda")')


# 9. Cache entries ---------------------------------------------------------------------------------------------
@pytest.fixture
def cached(tmp_path):
    """A cache holding the entry of a flagged file: (cache, path, the entry's path, the fresh diagnostics)."""
    path = tmp_path / "train.py"
    path.write_text(TRAINING)
    cache = Cache.open(tmp_path / "cache")
    fresh = process_file(str(path), _rules(), Mode(), cache=cache).diagnostics
    assert fresh
    (entry,) = (tmp_path / "cache" / "entries").rglob("*.json")
    return cache, str(path), entry, fresh


def _forge(entry: Path, mutate) -> None:
    """Rewrite an entry as JSON after `mutate(data)`, keeping its key and checksum fields."""
    data = json.loads(entry.read_bytes())
    mutate(data)
    entry.write_text(json.dumps(data, separators=(",", ":")))


@pytest.mark.parametrize("mutate", [
    lambda data: data["entry"].update(diagnostics=[]),  # hides the findings
    lambda data: data["entry"].update(dependencies={"x": 1}),
    lambda data: data["entry"]["diagnostics"][0]["fields"].update(fix="oops"),
    lambda data: data["entry"]["diagnostics"][0]["fields"].update(location=None),
    lambda data: data["entry"]["diagnostics"][0]["fields"]["location"]["fields"].update(row="1"),
    lambda data: data["entry"]["diagnostics"][0]["fields"].update(cell=True),
    lambda data: data["entry"]["diagnostics"][0]["fields"].update(message=["a"]),
    lambda data: data.update(check="0" * 64),
])
def test_a_forged_or_mistyped_entry_is_ignored_and_recomputed(cached, mutate):
    cache, path, entry, fresh = cached
    _forge(entry, mutate)
    assert process_file(path, _rules(), Mode(), cache=cache).diagnostics == fresh
    assert cache.load(entry.parent.name + entry.stem, path) == fresh  # rewritten


def test_a_mistyped_entry_never_becomes_an_internal_error(cached, monkeypatch):
    cache, path, entry, fresh = cached
    _forge(entry, lambda data: data["entry"]["diagnostics"][0]["fields"].update(fix="oops"))
    monkeypatch.chdir(Path(path).parent)
    result = _invoke(["check", "train.py", "--cache-dir", "cache", "--output-format", "concise"])
    assert result.exit_code == 1 and "internal error" not in result.output and "AMP001" in result.stdout


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_entry_is_never_opened_blocking(cached):
    """A writer stands ready on the FIFO: a blocking open would connect and read a forged empty result."""
    cache, path, entry, fresh = cached
    key = entry.parent.name + entry.stem
    forged = cache_module.entry_bytes(key, [])
    entry.unlink()
    os.mkfifo(entry)
    done = threading.Event()

    def writer():
        while not done.is_set():
            try:
                descriptor = os.open(entry, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # no reader (ENXIO), or the FIFO was replaced
                done.wait(0.001)
                continue
            try:
                if stat.S_ISFIFO(os.fstat(descriptor).st_mode):  # not the real entry that replaces it
                    os.write(descriptor, forged)
            except OSError:
                pass
            os.close(descriptor)
            return  # one forged entry, then end of file for a reader

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        assert process_file(path, _rules(), Mode(), cache=cache).diagnostics == fresh
    finally:
        done.set()
        thread.join()
    assert stat.S_ISREG(entry.stat().st_mode)  # replaced by a real entry


@pytest.mark.parametrize("kind", ["folder", "symlink to a device", "symlink to a forged entry"])
def test_an_entry_that_is_not_a_regular_file_is_ignored(cached, kind):
    """(A symlink to /dev/zero would be read until memory runs out; /dev/null is the same kind of file.)"""
    cache, path, entry, fresh = cached
    key = entry.parent.name + entry.stem
    entry.unlink()
    if kind == "folder":
        entry.mkdir()
    elif kind == "symlink to a device":
        entry.symlink_to(os.devnull)
    else:
        forged = entry.parent / "forged"
        forged.write_bytes(cache_module.entry_bytes(key, []))
        entry.symlink_to(forged)
    assert process_file(path, _rules(), Mode(), cache=cache).diagnostics == fresh


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_random_damage_to_an_entry_never_crashes_or_hides_findings(cached, data):
    cache, path, entry, fresh = cached
    key = entry.parent.name + entry.stem
    good = cache_module.entry_bytes(key, fresh)
    damage = data.draw(st.sampled_from(["truncate", "flip", "splice"]))
    position = data.draw(st.integers(0, len(good) - 1))
    if damage == "truncate":
        raw = good[:position]
    elif damage == "flip":
        raw = good[:position] + bytes([good[position] ^ data.draw(st.integers(1, 255))]) + good[position + 1:]
    else:
        raw = good[:position] + data.draw(st.binary(max_size=20)) + good[position:]
    loaded = cache_module.entry_diagnostics(key, raw)
    assert loaded is None or loaded == [dataclasses.replace(d, filename="") for d in fresh]
    entry.write_bytes(raw)
    assert process_file(path, _rules(), Mode(), cache=cache).diagnostics == fresh


# --output-file never names an input ---------------------------------------------------------------------------
# The report written over a source file would replace the user's code with "Found 1 warning."; refused before
# anything is written (no fix, no report, no cache), exit 2, whatever the spelling of the path.


def _output_shapes(root: Path) -> dict[str, tuple[list[str], str]]:
    """shape -> (the paths to lint, the --output-file), each naming an input of the run (cwd: root)."""
    (root / "src").mkdir()
    (root / "src" / "b.py").write_text(FLAGGED)
    (root / "link.py").symlink_to("t.py")
    os.link(root / "t.py", root / "hard.py")
    (root / "folder_link").symlink_to("src")
    return {
        "the file itself": (["t.py"], "t.py"),
        "another input": (["t.py", "src/b.py"], "src/b.py"),
        "absolute spelling": (["t.py"], str(root / "t.py")),
        "dotted spelling": (["t.py"], "./src/../t.py"),
        "a symlink to it": (["t.py"], "link.py"),
        "the file a named symlink points to": (["link.py"], "t.py"),
        "a hard link to it": (["t.py"], "hard.py"),
        "inside a named folder": (["src"], "src/b.py"),
        "inside the current folder": (["."], "src/b.py"),
        "through a linked folder": (["src"], "folder_link/b.py"),
        "the configuration file": (["t.py"], "amplint.toml"),
    }


SHAPES = ["the file itself", "another input", "absolute spelling", "dotted spelling", "a symlink to it",
          "the file a named symlink points to", "a hard link to it", "inside a named folder",
          "inside the current folder", "through a linked folder", "the configuration file"]


@pytest.mark.skipif(not hasattr(os, "symlink") or not hasattr(os, "link"), reason="needs symlinks and hard links")
@pytest.mark.parametrize("extra", [[], ["--fix"], ["--fix", "--unsafe-fixes"], ["--statistics"],
                                   ["--output-format", "json"]], ids=["report", "fix", "unsafe", "stats", "json"])
@pytest.mark.parametrize("shape", SHAPES)
def test_an_output_file_that_is_an_input_is_refused_before_anything_is_written(tmp_path, monkeypatch, shape, extra):
    root = tmp_path / "project"
    root.mkdir()
    (root / "t.py").write_text(FLAGGED)
    (root / "amplint.toml").write_text('select = ["AMP007"]\n')
    shapes = _output_shapes(root)
    monkeypatch.chdir(root)
    before = _tree(root)
    paths, output = shapes[shape]
    result = _invoke(["check", *paths, "--output-file", output, *extra])
    assert result.exit_code == 2, result.output
    assert "an input of this run" in result.stderr and "nothing was written" in result.stderr
    assert "Traceback" not in result.output
    assert _tree(root) == before  # no fix, no report, no cache folder
    assert not (root / ".amplint_cache").exists()


def test_an_output_file_beside_the_inputs_is_written(tmp_path, monkeypatch):
    (tmp_path / "t.py").write_text(FLAGGED)
    monkeypatch.chdir(tmp_path)
    result = _invoke(["check", ".", "--output-file", "report.txt", "--no-cache"])
    assert result.exit_code == 0, result.output
    assert "AMP007" in (tmp_path / "report.txt").read_text()
    assert (tmp_path / "t.py").read_text() == FLAGGED
    # written again: the report of the last run is no input of the next one (a .txt file is not linted)
    assert _invoke(["check", ".", "--output-file", "report.txt", "--no-cache"]).exit_code == 0


@pytest.mark.parametrize("name", ["requirements.txt", "requirements-dev.txt", "pyproject.toml", "setup.py",
                                  "environment.yml"])
def test_an_output_file_that_declares_the_torch_floor_is_refused(tmp_path, monkeypatch, name):
    """The declaration files the torch floor is read from are inputs of the run too."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "t.py").write_text(FLAGGED)
    (tmp_path / name).write_text("# the project's own\n")
    monkeypatch.chdir(tmp_path)
    before = _tree(tmp_path)
    result = _invoke(["check", "t.py", "--output-file", name])
    assert result.exit_code == 2 and "an input of this run" in result.stderr
    assert _tree(tmp_path) == before
