"""The result cache: a file's diagnostics, kept under a key made of its content and everything that decides them.

The key hashes the file's bytes, the rules enabled for it, the run's mode, amplint's version and a fingerprint
of its code (the source files of the package), the libcst and Python versions, and the shape of the
diagnostic classes. A file whose content and settings are unchanged is not analysed again, whatever its path
or modification time; anything else is a new key, so there is no invalidation to get wrong.

Layout of the folder (default `.amplint_cache` in the project root):

    CACHEDIR.TAG          marks it as a cache for backup tools (https://bford.info/cachedir/)
    .gitignore            `*`: never committed
    entries/ab/cdef...    one JSON file per key

Only lint results are cached, never fix runs, and never a result with an internal error (AMP902). Entries
are written to a temporary file and renamed into place, so concurrent runs never see half an entry; an entry
that cannot be read or decoded is ignored (and rewritten by the run).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import os
import platform
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from amplint import __version__
from amplint import diagnostics as diagnostics_module
from amplint.diagnostics import Diagnostic

DEFAULT_DIRECTORY = ".amplint_cache"
ENTRIES = "entries"
TAG_NAME = "CACHEDIR.TAG"
TAG = ("Signature: 8a477f597d28d172789f06886806bc55\n"
       "# This file is a cache directory tag created by amplint.\n"
       "# For information about cache directory tags see https://bford.info/cachedir/\n")
GITIGNORE = "# Created by amplint.\n*\n"
FORMAT = 2  # the layout of an entry; bump it when `encode`/`decode` change


class _Uncacheable(Exception):
    """A value the entry format cannot represent exactly; the result is simply not cached."""


# Entries ------------------------------------------------------------------------------------------------------
def encode(value: object) -> object:
    """A JSON-able form of a diagnostic (or any value made of the classes in amplint.diagnostics, tuples,
    lists, str-keyed dicts and scalars) that `decode` turns back into an equal value of the same types."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"@": type(value).__name__,
                "fields": {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if isinstance(value, enum.Enum):
        return {"@enum": type(value).__name__, "value": encode(value.value)}
    if value is None or type(value) in (str, int, float, bool):
        return value
    if type(value) is tuple:
        return {"@tuple": [encode(item) for item in value]}
    if type(value) is list:
        return [encode(item) for item in value]
    if type(value) is dict and all(type(key) is str for key in value):
        return {"@dict": {key: encode(item) for key, item in value.items()}}
    raise _Uncacheable(type(value).__name__)


def _known_class(name: object) -> type:
    cls = getattr(diagnostics_module, name, None) if isinstance(name, str) else None
    if not isinstance(cls, type) or not (dataclasses.is_dataclass(cls) or issubclass(cls, enum.Enum)):
        raise ValueError(f"unknown class in cache entry: {name!r}")
    return cls


def decode(data: object) -> object:
    if isinstance(data, list):
        return [decode(item) for item in data]
    if isinstance(data, dict):
        if "@" in data:
            cls = _known_class(data["@"])
            return cls(**{name: decode(item) for name, item in data["fields"].items()})
        if "@enum" in data:
            return _known_class(data["@enum"])(decode(data["value"]))
        if "@tuple" in data:
            return tuple(decode(item) for item in data["@tuple"])
        if "@dict" in data:
            return {key: decode(item) for key, item in data["@dict"].items()}
        raise ValueError("malformed cache entry")
    return data


def _schema() -> str:
    """The shape of the diagnostic classes: a change to it (a new field...) invalidates every entry."""
    parts = []
    for name in sorted(vars(diagnostics_module)):
        cls = getattr(diagnostics_module, name)
        if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == diagnostics_module.__name__:
            parts.append(name + "(" + ",".join(f"{f.name}:{f.type}" for f in dataclasses.fields(cls)) + ")")
    return ";".join(parts)


def code_fingerprint() -> str:
    """amplint's version and its code (name, size and modification time of every source file of the package),
    the versions of libcst and Python, and the diagnostics' schema."""
    package = Path(__file__).resolve().parent
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"amplint {__version__}\0format {FORMAT}\0".encode())
    for folder, subfolders, files in os.walk(package):
        subfolders[:] = sorted(name for name in subfolders if name != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                try:
                    stat = os.stat(path)
                except OSError:
                    continue
                digest.update(f"{os.path.relpath(path, package)}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    try:
        from importlib.metadata import version

        libcst_version = version("libcst")
    except Exception:  # noqa: BLE001 - a missing distribution record must not stop a run
        libcst_version = "?"
    digest.update(f"libcst {libcst_version}\0{platform.python_implementation()} {platform.python_version()}\0".encode())
    digest.update(_schema().encode())
    return digest.hexdigest()


# The cache ----------------------------------------------------------------------------------------------------
def default_directory(settings) -> Path:
    """`--cache-dir`, else `cache-dir` from the configuration (relative to its folder), else
    `.amplint_cache` in the project root (the configuration's folder, or the current folder)."""
    root = Path(getattr(settings, "root", None) or Path.cwd())
    configured = getattr(settings, "cache_dir", None)
    if configured:
        path = Path(configured).expanduser()
        return path if path.is_absolute() else root / path
    return root / DEFAULT_DIRECTORY


def is_cache_directory(path: Path) -> bool:
    """Does the folder hold the CACHEDIR.TAG that amplint writes?"""
    try:
        content = (path / TAG_NAME).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return content.startswith(TAG.splitlines()[0]) and "amplint" in content


class Cache:
    """Lint results by key; picklable (it travels to worker processes)."""

    def __init__(self, directory: str | os.PathLike, fingerprint: str | None = None) -> None:
        self.directory = Path(directory)
        self.fingerprint = fingerprint if fingerprint is not None else code_fingerprint()
        self.entries = self.directory / ENTRIES

    @classmethod
    def open(cls, directory: str | os.PathLike, fingerprint: str | None = None) -> Cache | None:
        """The cache in `directory`, created (with CACHEDIR.TAG and .gitignore) if needed; None when it cannot
        be created (a read-only tree is linted without a cache)."""
        path = Path(directory)
        try:
            (path / ENTRIES).mkdir(parents=True, exist_ok=True)
            for name, content in ((TAG_NAME, TAG), (".gitignore", GITIGNORE)):
                if not (path / name).exists():
                    _write_atomically(path / name, content.encode())
        except OSError:
            return None
        return cls(path, fingerprint)

    def key(self, raw: bytes, rules: Sequence[object], mode: object = None) -> str:
        # a rule's code, with the torch range its fixes and messages were written for (empty when unknown)
        codes = ",".join(sorted(f"{getattr(rule, 'code', type(rule).__name__)}{getattr(rule, 'torch', '')}"
                                for rule in rules))
        digest = hashlib.sha256()  # the fastest of hashlib's on CPUs with SHA instructions (2x blake2b)
        digest.update(f"{self.fingerprint}\0{codes}\0{mode!r}\0".encode())
        digest.update(raw)
        return digest.hexdigest()[:40]

    def lint(self, raw: bytes, text: str, rules: Sequence[object], filename: str,
             compute: Callable[[], list[Diagnostic]], words_decide: bool = True) -> list[Diagnostic]:
        """The diagnostics of a file, from the cache or from `compute()` (then stored).

        With `words_decide`, a file without a word of any enabled rule (prefilter stage 1) is decided faster than
        an entry is read: it is neither looked up nor stored. (A notebook is always looked up: a malformed one is
        reported whatever its words.)
        """
        from amplint.prefilter import prefilter_for

        if words_decide and not prefilter_for(rules).has_words(text):
            return []
        key = self.key(raw, rules, "lint")
        cached = self.load(key, filename)
        if cached is not None:
            return cached
        diagnostics = compute()
        self.store(key, diagnostics)
        return diagnostics

    def _path(self, key: str) -> str:
        return os.path.join(self.entries, key[:2], f"{key[2:]}.json")

    def load(self, key: str, filename: str) -> list[Diagnostic] | None:
        """The cached diagnostics, reported for `filename`; None when absent or unreadable."""
        try:
            with open(self._path(key), "rb") as handle:
                data = json.loads(handle.read())
            if data.get("key") != key:
                return None
            diagnostics = decode(data["diagnostics"])
            if not isinstance(diagnostics, list) or not all(isinstance(d, Diagnostic) for d in diagnostics):
                return None
            return [dataclasses.replace(d, filename=filename) for d in diagnostics]
        except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
            return None

    def store(self, key: str, diagnostics: Sequence[Diagnostic]) -> None:
        if any(d.code == "AMP902" for d in diagnostics):
            return  # internal errors may come from the environment (memory, recursion): analyse again
        try:
            payload = json.dumps({"key": key, "diagnostics": encode([dataclasses.replace(d, filename="")
                                                                     for d in diagnostics])},
                                 ensure_ascii=False, separators=(",", ":"))
        except (_Uncacheable, TypeError, ValueError):
            return
        path = Path(self._path(key))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_atomically(path, payload.encode("utf-8"))
        except OSError:
            pass  # a full disk or a read-only cache costs speed, never results


def _write_atomically(path: Path, data: bytes) -> None:
    descriptor, temporary = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        os.chmod(temporary, 0o644)  # mkstemp makes it private; the cache is as readable as the project
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def clean(directory: str | os.PathLike) -> bool:
    """Remove the cache folder. False when there is none; ValueError when the folder is not amplint's cache
    (no CACHEDIR.TAG written by amplint), which is never removed."""
    path = Path(directory)
    if not path.exists():
        return False
    if not path.is_dir() or not is_cache_directory(path):
        raise ValueError(f"{path} is not an amplint cache folder (no CACHEDIR.TAG from amplint); not removed")
    shutil.rmtree(path)
    return True
