"""Hostile input: special files, oversized files, expressions nested deeper than a parser or a walk can follow.
Each such file gets a diagnostic of its own (AMP901, AMP900) and every other file its results; nothing hangs,
nothing crashes the run (issue "Never lose data, never hang, never crash the run", items 6-8)."""

from __future__ import annotations

import os
import threading

import pytest

from amplint.config import ConfigError, Settings, settings_from_table
from amplint.parallel import lint_paths
from amplint.rules import ALL_RULES
from amplint.runner import Mode
from amplint import source
from amplint.source import SourceError, read_bytes

# A real finding (AMP001: backward inside an enabled autocast region), on line 3.
FINDING = 'import torch\nwith torch.autocast("cuda"):\n    loss.backward()\n'


def lint(paths, settings: Settings | None = None) -> dict[str, list[tuple[str, str]]]:
    """path -> [(code, message)] of a serial run (the run the LSP and pre-commit's single files make)."""
    outcomes = lint_paths([str(path) for path in paths], ALL_RULES, settings or Settings(), Mode(), jobs=1)
    return {outcome.path: [(d.code, d.message) for d in outcome.diagnostics] for outcome in outcomes}


# Special files (item 8) ----------------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_named_like_a_source_is_refused_without_blocking(tmp_path):
    """A FIFO named `x.py` (nothing writes to it): reading it would block the run forever. It is AMP901 "not a
    regular file" and the file beside it gets its finding. (The join's timeout only detects the hang: on a
    reader that opens the FIFO, the test then unblocks it by opening the FIFO's other end.)"""
    fifo = tmp_path / "x.py"
    os.mkfifo(fifo)
    real = tmp_path / "real.py"
    real.write_text(FINDING)
    found: dict = {}
    worker = threading.Thread(target=lambda: found.update(lint([fifo, real], Settings(root=tmp_path))), daemon=True)
    worker.start()
    worker.join(timeout=120)
    if worker.is_alive():  # blocked reading the FIFO: release it, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(timeout=30)
        pytest.fail("reading a FIFO blocked the run")
    assert found[str(fifo)] == [("AMP901", "not a regular file (a FIFO); not read")]
    assert [code for code, _ in found[str(real)]] == ["AMP001"]


@pytest.mark.skipif(not os.path.exists("/dev/null") or not hasattr(os, "symlink"), reason="no /dev/null")
def test_a_link_to_a_device_is_refused(tmp_path):
    """`z.py` -> /dev/zero would be read until memory runs out; any device is refused before it is read (the
    test uses /dev/null, which ends: read, it would be an empty, clean file)."""
    link = tmp_path / "z.py"
    link.symlink_to("/dev/null")
    assert lint([link], Settings(root=tmp_path)) == {
        str(link): [("AMP901", "not a regular file (a character device); not read")]}


def test_read_bytes_refuses_what_is_not_a_regular_file(tmp_path):
    with pytest.raises(SourceError, match=r"not a regular file \(a folder\)"):
        read_bytes(str(tmp_path))
    with pytest.raises(SourceError, match="cannot read"):
        read_bytes(str(tmp_path / "missing.py"))


# Size cap (item 8) ---------------------------------------------------------------------------------------------


def test_a_file_over_max_file_size_is_refused_and_the_others_are_linted(tmp_path):
    big = tmp_path / "big.py"
    big.write_text("x = 1\n" * 20)  # 120 bytes
    exact = tmp_path / "exact.py"
    exact.write_text(FINDING + " " * (100 - len(FINDING) - 1) + "\n")  # 100 bytes: at the cap, read
    settings = settings_from_table({"max-file-size": 100}, tmp_path / "amplint.toml")
    found = lint([big, exact], settings)
    assert found[str(big)] == [("AMP901", "larger than `max-file-size` (100 bytes); not read "
                                          "(raise `max-file-size` to lint it)")]
    assert [code for code, _ in found[str(exact)]] == ["AMP001"]


def test_read_bytes_reads_at_most_one_byte_past_the_cap(tmp_path, monkeypatch):
    """A file that grows past the cap after its size was checked is refused too, and no more than cap + 1 bytes
    of it are read (the size checks are skipped here, as if the file grew after them)."""
    path = tmp_path / "grown.py"
    path.write_bytes(b"#" * 1000)
    monkeypatch.setattr(source, "_check_regular", lambda info, max_size: None)
    sizes = []
    real_fdopen = os.fdopen

    class Watched:
        def __init__(self, *args, **kwargs) -> None:
            self.handle = real_fdopen(*args, **kwargs)

        def __enter__(self):
            return self

        def __exit__(self, *exception) -> None:
            self.handle.close()

        def read(self, size: int = -1) -> bytes:
            sizes.append(size)
            return self.handle.read(size)

    monkeypatch.setattr(os, "fdopen", Watched)
    with pytest.raises(SourceError, match=r"larger than `max-file-size` \(100 bytes\)"):
        read_bytes(str(path), 100)
    assert sizes == [101]


@pytest.mark.parametrize("value", [0, -1, True, "10MB", 1.5])
def test_max_file_size_must_be_a_positive_integer(tmp_path, value):
    with pytest.raises(ConfigError, match="`max-file-size` must be a positive integer"):
        settings_from_table({"max-file-size": value}, tmp_path / "amplint.toml")


def test_max_file_size_has_a_default():
    assert Settings().max_file_size == 10 * 1024 * 1024
