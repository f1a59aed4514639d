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
are written to a temporary file and renamed into place, so concurrent runs never see half an entry.

A run of many files also keeps a run record: every file's diagnostics under a key made of the files it lints,
the rules for each, the other files of their project and the settings above, with the state of each file
(size, modification and change times in nanoseconds, inode: `file_states`) before the run read it. A later run
of the same files whose files are all in that state takes its results from the record without reading any
file; any difference (one file touched, added or removed) and the files go through the entries above, by
content. The change time moves on every write and cannot be set back by a tool, so a file rewritten in place
with the same size and modification time still differs. A file whose times are within `RACY_NS` of the moment
its state was taken could be written again within the same tick of the file system's clock without any of them
moving; the record keeps a digest of its bytes too, and a later run reads and compares it (as git does for its
racily clean files).

An entry is trusted only when it is a regular file (a FIFO is never opened blocking), holds the key it is
stored under, has exactly the shape and types `encode` writes, and carries a checksum of its key and its
diagnostics: the key is a digest of the file's bytes (with the settings), so the checksum ties the result to
the content, and a hand-edited or truncated result (`"diagnostics": []` for a file with findings) is detected.
Anything else is ignored and the file analysed again. (Someone who recomputes the checksum can still forge an
entry: telling that apart needs the analysis the cache exists to avoid. The `.gitignore` keeps entries out of
repositories, so a clone brings none.)

The folder is made only where nothing else lives: a new or empty folder, or one that already holds only
amplint's files, and never the project root, the current folder, the home folder, `/` or a folder above any
of them (`refusal`). `clean` removes only the files amplint writes there, and the folder only when nothing
else is left in it.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import os
import platform
import re
import stat
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from amplint import __version__
from amplint import diagnostics as diagnostics_module
from amplint.diagnostics import Applicability, Diagnostic, Edit, Fix, Location, Note, Severity
from amplint.source import SourceError, read_bytes

DEFAULT_DIRECTORY = ".amplint_cache"
ENTRIES = "entries"
TAG_NAME = "CACHEDIR.TAG"
TAG = ("Signature: 8a477f597d28d172789f06886806bc55\n"
       "# This file is a cache directory tag created by amplint.\n"
       "# For information about cache directory tags see https://bford.info/cachedir/\n")
GITIGNORE = "# Created by amplint.\n*\n"
FORMAT = 5  # the layout of an entry; bump it when `encode`/`decode` change
TEMPORARY_PREFIX = ".amplint-tmp-"  # amplint's temporary files (`.tmp-`: the name earlier versions used)
OWN_NAMES = frozenset({ENTRIES, TAG_NAME, ".gitignore"})
ENTRY_FOLDER = re.compile(r"[0-9a-f]{2}")
ENTRY_FILE = re.compile(r"[0-9a-f]{38}\.json")
TEMPORARY = re.compile(r"\.(?:amplint-)?tmp-[a-z0-9_]{8}")  # mkstemp's names, with this or the older prefix
MAX_ENTRY_BYTES = 64 * 1024 * 1024  # far above any real entry; a bigger file is not read


class CacheRefused(Exception):
    """A cache folder amplint will not use (it holds other files, or is the project root, home, `/`...)."""


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


def _is_location(value: object) -> bool:
    return (type(value) is Location and type(value.row) is int and type(value.column) is int
            and value.row >= 0 and value.column >= 0)


def _is_edit(value: object) -> bool:
    return (type(value) is Edit and type(value.start) is int and type(value.end) is int
            and 0 <= value.start <= value.end and type(value.content) is str
            and _is_location(value.location) and _is_location(value.end_location))


def _is_fix(value: object) -> bool:
    return (type(value) is Fix and type(value.message) is str and type(value.edits) is tuple
            and all(_is_edit(edit) for edit in value.edits) and type(value.applicability) is Applicability)


def is_valid_diagnostic(value: object) -> bool:
    """Exactly the types a rule produces: a decoded entry is made of the right classes, but JSON can put any
    value in any field (`"fix": "oops"`, a location of None), and such a value would break the report."""
    return (type(value) is Diagnostic
            and all(type(getattr(value, name)) is str for name in ("code", "name", "message", "filename",
                                                                   "source_line"))
            and _is_location(value.location) and _is_location(value.end_location)
            and (value.fix is None or _is_fix(value.fix))
            and (value.cell is None or (type(value.cell) is int and value.cell >= 1))
            and type(value.severity) is Severity
            and type(value.notes) is tuple and all(_is_note(note) for note in value.notes))


def _is_note(value: object) -> bool:
    return (type(value) is Note and type(value.message) is str and _is_location(value.location)
            and (value.filename is None or type(value.filename) is str)
            and (value.cell is None or (type(value.cell) is int and value.cell >= 1)))


def _checksum(key: str, body: bytes) -> str:
    """Ties an entry's diagnostics to its key (itself a digest of the file's bytes and the settings)."""
    return hashlib.sha256(key.encode() + b"\0" + body).hexdigest()


def _entry_head(key: str) -> bytes:
    return b'{"key":"' + key.encode() + b'","check":"'


ENTRY_MIDDLE = b'","entry":'
CHECKSUM_LENGTH = 64


def entry_bytes(key: str, diagnostics: Sequence[Diagnostic], dependencies: dict[str, str] | None = None) -> bytes:
    """An entry: a JSON object whose first fields, in this order, are the key and the checksum of the rest. The
    rest holds the diagnostics and what they were computed from in other files (`ModuleView.dependencies`)."""
    body = json.dumps({"diagnostics": encode([dataclasses.replace(d, filename="") for d in diagnostics]),
                       "dependencies": dict(dependencies or {})},
                      ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return _framed(key, body)


def _framed(key: str, body: bytes) -> bytes:
    """An entry's bytes: the key and the checksum of the body first, then the body (a JSON object)."""
    return _entry_head(key) + _checksum(key, body).encode() + ENTRY_MIDDLE + body + b"}"


def _checked_body(key: str, raw: bytes) -> bytes | None:
    """The body of an entry's bytes when they are framed for this key and the checksum holds, else None."""
    head = _entry_head(key)
    start = len(head) + CHECKSUM_LENGTH + len(ENTRY_MIDDLE)
    if not (raw.startswith(head) and raw[start - len(ENTRY_MIDDLE):start] == ENTRY_MIDDLE and raw.endswith(b"}")):
        return None
    body = raw[start:-1]
    if raw[len(head):len(head) + CHECKSUM_LENGTH] != _checksum(key, body).encode():
        return None
    return body


def _diagnostics_of(encoded: object) -> list[Diagnostic] | None:
    """A decoded list of diagnostics of exactly the types a rule produces, or None."""
    diagnostics = decode(encoded)
    if type(diagnostics) is not list or not all(is_valid_diagnostic(d) for d in diagnostics):
        return None
    return diagnostics


def entry_content(key: str, raw: bytes) -> tuple[list[Diagnostic], dict[str, str]] | None:
    """The diagnostics and dependencies of an entry's bytes, or None unless the entry is exactly what
    `entry_bytes` writes for this key (key, checksum, shape and types)."""
    body = _checked_body(key, raw)
    if body is None:
        return None
    try:
        content = json.loads(body)
        diagnostics = _diagnostics_of(content["diagnostics"])
        dependencies = content["dependencies"]
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None
    if diagnostics is None:
        return None
    if type(dependencies) is not dict or not all(type(k) is str and type(v) is str for k, v in dependencies.items()):
        return None
    return diagnostics, dependencies


def entry_diagnostics(key: str, raw: bytes) -> list[Diagnostic] | None:
    """The diagnostics of an entry's bytes (`entry_content`), or None."""
    content = entry_content(key, raw)
    return content[0] if content is not None else None


def read_regular_file(path: str | os.PathLike, limit: int) -> bytes | None:
    """The bytes of a regular file of at most `limit` bytes; None for anything else (missing, a folder, a FIFO,
    a device, a symlink, too big): `source.read_bytes`, which never blocks on a FIFO, without following links."""
    try:
        return read_bytes(path, limit, follow=False)
    except SourceError:
        return None


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
    libcst_version = _libcst_version()
    digest.update(f"libcst {libcst_version}\0{platform.python_implementation()} {platform.python_version()}\0".encode())
    digest.update(_schema().encode())
    return digest.hexdigest()


def _libcst_version() -> str:
    """libcst's version as its package states it (`libcst/_version.py`), found without importing libcst or
    reading every installed distribution's record (importlib.metadata costs a run more than the rest of a warm
    start); its path and modification time too, so a reinstalled libcst is another fingerprint."""
    from importlib.machinery import PathFinder  # not importlib.util.find_spec: it would load the lazy libcst

    try:
        spec = PathFinder.find_spec("libcst")
        folder = os.path.dirname(spec.origin) if spec is not None and spec.origin else None
        if folder is None:
            return "?"
        path = os.path.join(folder, "_version.py")
        with open(path, encoding="utf-8") as handle:
            text = handle.read(4096)
        return f"{text.strip()}\0{path}\0{os.stat(path).st_mtime_ns}"
    except (OSError, ValueError, ImportError):
        return "?"


# The folder and the cache ---------------------------------------------------------------------------------
def default_directory(settings) -> Path:
    """`--cache-dir`, else `cache-dir` from the configuration (relative to its folder), else
    `.amplint_cache` in the project root (the configuration's folder, or the current folder)."""
    root = Path(getattr(settings, "root", None) or Path.cwd())
    configured = getattr(settings, "cache_dir", None)
    if configured:
        path = Path(configured).expanduser()
        return path if path.is_absolute() else root / path
    return root / DEFAULT_DIRECTORY


def _is_own_name(name: str) -> bool:
    return name in OWN_NAMES or TEMPORARY.fullmatch(name) is not None


def _guarded_folders(root: Path | None) -> list[tuple[Path, str]]:
    folders: list[tuple[Path, str]] = []
    for label, find in (("the project root", lambda: root), ("the current folder", Path.cwd),
                        ("the home folder", Path.home)):
        try:
            folder = find()
            if folder is not None:
                folders.append((Path(folder).resolve(), label))
        except (OSError, RuntimeError, KeyError):  # no home folder, a deleted current folder
            continue
    return folders


def refusal(directory: str | os.PathLike, root: Path | None = None) -> str | None:
    """Why `directory` must not hold amplint's cache, or None when it may.

    The cache writes a `.gitignore` of `*` (git then ignores everything there) and `clean` empties it, so it
    lives only in a folder that does not exist yet, is empty, or holds nothing but amplint's own files; and
    never in `/`, the project root, the current folder, the home folder or a folder above one of them, even
    when an amplint tag is already there.
    """
    path = Path(directory).expanduser()
    try:
        resolved = path.resolve()
    except (OSError, RuntimeError) as error:
        return f"cannot use {path} as the cache folder: {error}"
    if resolved.parent == resolved:
        return f"will not use {path} as the cache folder: it is the root of the file system"
    for folder, label in _guarded_folders(root):
        if resolved == folder:
            return f"will not use {path} as the cache folder: it is {label}"
        if resolved in folder.parents:
            return f"will not use {path} as the cache folder: it is a folder above {label}"
    try:
        info = os.stat(resolved)
    except OSError:
        return None  # absent (created by `Cache.open`), or cannot be created: no cache, no harm
    if not stat.S_ISDIR(info.st_mode):
        return f"will not use {path} as the cache folder: it is not a folder"
    try:
        others = sorted(name for name in os.listdir(resolved) if not _is_own_name(name))
    except OSError:
        return None
    if others:
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        return (f"will not use {path} as the cache folder: it holds files that are not amplint's ({shown}); "
                f"name a new or empty folder")
    return None


def is_cache_directory(path: Path) -> bool:
    """Does the folder hold the CACHEDIR.TAG that amplint writes (a regular file)?"""
    content = read_regular_file(Path(path) / TAG_NAME, 4096)
    if content is None:
        return False
    text = content.decode("utf-8", errors="replace")
    return text.startswith(TAG.splitlines()[0]) and "amplint" in text


class Cache:
    """Lint results by key; picklable (it travels to worker processes)."""

    def __init__(self, directory: str | os.PathLike, fingerprint: str | None = None) -> None:
        self.directory = Path(directory)
        self.fingerprint = fingerprint if fingerprint is not None else code_fingerprint()
        self.entries = self.directory / ENTRIES

    @classmethod
    def open(cls, directory: str | os.PathLike, fingerprint: str | None = None,
             root: Path | None = None) -> Cache | None:
        """The cache in `directory`, created (with CACHEDIR.TAG and .gitignore) if needed; None when it cannot
        be created (a read-only tree is linted without a cache). CacheRefused when the folder must not hold
        a cache (`refusal`)."""
        reason = refusal(directory, root)
        if reason is not None:
            raise CacheRefused(reason)
        path = Path(directory).expanduser()
        try:
            (path / ENTRIES).mkdir(parents=True, exist_ok=True)
            for name, content in ((TAG_NAME, TAG), (".gitignore", GITIGNORE)):
                if not os.path.lexists(path / name):
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
             compute: Callable[[], list[Diagnostic]], words_decide: bool = True, project=None) -> list[Diagnostic]:
        """The diagnostics of a file, from the cache or from `compute()` (then stored).

        With `words_decide`, a file without a word of any enabled rule (prefilter stage 1) is decided faster than
        an entry is read: it is neither looked up nor stored. (A notebook is always looked up: a malformed one is
        reported whatever its words.) `project`: the project index seen from the file (`ModuleView`); an entry
        holds what its diagnostics read of other files, and is used only while all of it is unchanged (editing
        the module a function calls into re-lints the caller; editing an unrelated one re-lints nothing).
        """
        from amplint.prefilter import prefilter_for

        if words_decide and not prefilter_for(rules).has_words(text):
            return []
        key = self.key(raw, rules, "lint")
        cached = self.load_entry(key, filename)
        if cached is not None:
            diagnostics, dependencies = cached
            if not dependencies or (project is not None and project.project.valid(dependencies, project.path)):
                return diagnostics
        diagnostics = compute()
        self.store(key, diagnostics, project.dependencies() if project is not None else None)
        return diagnostics

    def _path(self, key: str) -> str:
        return os.path.join(self.entries, key[:2], f"{key[2:]}.json")

    def load(self, key: str, filename: str) -> list[Diagnostic] | None:
        """The cached diagnostics, reported for `filename`; None when absent or not a valid entry."""
        entry = self.load_entry(key, filename)
        return entry[0] if entry is not None else None

    def load_entry(self, key: str, filename: str) -> tuple[list[Diagnostic], dict[str, str]] | None:
        """The cached diagnostics (reported for `filename`) and their dependencies; None when absent or invalid."""
        raw = read_regular_file(self._path(key), MAX_ENTRY_BYTES)
        content = entry_content(key, raw) if raw is not None else None
        if content is None:
            return None
        return [dataclasses.replace(d, filename=filename) for d in content[0]], content[1]

    def store(self, key: str, diagnostics: Sequence[Diagnostic], dependencies: dict[str, str] | None = None) -> None:
        if any(d.code == "AMP902" for d in diagnostics):
            return  # internal errors may come from the environment (memory, recursion): analyse again
        try:
            payload = entry_bytes(key, diagnostics, dependencies)
        except (_Uncacheable, TypeError, ValueError):
            return
        path = Path(self._path(key))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_atomically(path, payload)
        except OSError:
            pass  # a full disk or a read-only cache costs speed, never results

    # the project index's records (phase 1), by content ----------------------------------------------------
    def stored_index_record(self, raw: bytes, text: str | None = None) -> tuple[bool, object]:
        """(True, the record) when the cache holds a file's `FileIndex` for these bytes (the record may be None: a
        file the index leaves out), else (False, None); see `index_record`."""
        from amplint.index.functions import FileIndex

        key = self.key(raw, (), "index")  # its own key: no rule codes, another mode
        stored = read_regular_file(self._path(key), MAX_ENTRY_BYTES)
        body = _checked_body(key, stored) if stored is not None else None
        if body is not None:
            try:
                data = json.loads(body)
                return True, None if data is None else FileIndex.from_json(data, text)
            except (ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError):
                pass  # a damaged record is built again
        return False, None

    def index_record(self, raw: bytes, build: Callable[[], object], text: str | None = None):
        """A file's `FileIndex` (or None for a file the index leaves out), from the cache or from `build()`.
        With the file's `text`, a record is stored without the facts its functions compute when first read
        (`FileIndex.to_json(deferred=True)`), and read back with them deferred again."""
        found, record = self.stored_index_record(raw, text)
        if found:
            return record
        key = self.key(raw, (), "index")
        path = self._path(key)
        record = build()
        stored_form = record.to_json(deferred=text is not None) if record is not None else None
        body = json.dumps(stored_form, separators=(",", ":")).encode()
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            _write_atomically(Path(path), _framed(key, body))
        except OSError:
            pass
        return record


    # whole runs, by the state of their files ------------------------------------------------------------------
    def run_key(self, paths: Sequence[str], others: Sequence[str], rules_of: Callable[[str], Sequence[object]],
                mode: object, max_size: int) -> str:
        """The key of a run's record: the files it lints (in order) with the rules for each, the other files of its
        project (whose index facts its findings may read), the mode, the size limit, and amplint's code."""
        digest = hashlib.sha256()
        digest.update(f"{self.fingerprint}\0run\0{mode!r}\0{max_size}\0".encode())
        spelled: dict[tuple[int, ...], str] = {}  # most files share one list of rules: spelled once
        for path in paths:
            rules = rules_of(path)
            identity = tuple(map(id, rules))
            codes = spelled.get(identity)
            if codes is None:
                codes = spelled[identity] = ",".join(
                    f"{getattr(rule, 'code', type(rule).__name__)}{getattr(rule, 'torch', '')}" for rule in rules)
            digest.update(f"{path}\0{codes}\0".encode("utf-8", "surrogateescape"))
        digest.update(b"\1")
        for path in others:
            digest.update(f"{path}\0".encode("utf-8", "surrogateescape"))
        return digest.hexdigest()[:40]

    def load_run(self, key: str, paths: Sequence[str], project: Sequence[str],
                 states: list) -> list[list[Diagnostic]] | None:
        """Each file's diagnostics from the run record `key`, when every file of the run and of its project
        (`project`, whose current `file_states` are `states`) is as it was then; else None and the run is done
        again."""
        raw = read_regular_file(self._path(key), MAX_ENTRY_BYTES)
        body = _checked_body(key, raw) if raw is not None else None
        if body is None:
            return None
        try:
            content = json.loads(body)
            if not (type(content["states"]) is list and len(content["states"]) == len(states)
                    and all(_same_state(then, now, path) for then, now, path in zip(content["states"], states, project))
                    and len(content["diagnostics"]) == len(paths)):
                return None
            found = [_diagnostics_of(encoded) for encoded in content["diagnostics"]]
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
            return None
        if any(diagnostics is None for diagnostics in found):
            return None
        return [[dataclasses.replace(d, filename=path) for d in diagnostics] for path, diagnostics in zip(paths, found)]

    def store_run(self, key: str, paths: Sequence[str], states: list, found: Sequence[Sequence[Diagnostic]]) -> None:
        """Keep a run's diagnostics under `key`, with the state its files had before it read them."""
        if any(d.code == "AMP902" or d.filename != path for path, ds in zip(paths, found) for d in ds):
            return
        try:
            body = json.dumps({"states": states,
                               "diagnostics": [encode([dataclasses.replace(d, filename="") for d in ds]) for ds in found]},
                              ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        except (_Uncacheable, TypeError, ValueError):
            return
        path = Path(self._path(key))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            _write_atomically(path, _framed(key, body))
        except OSError:
            pass


RACY_NS = 2_000_000_000  # the coarsest file system clock in use (FAT keeps modification times to 2 s)
_STAT_FIELDS = 6  # size, modification and change times, inode, device, mode


def file_states(paths: Sequence[str]) -> list:
    """What tells that a file changed without reading it: size, modification and change times (nanoseconds: a
    write moves the change time, which no tool can set back), inode, device and mode; then, for a file written
    within `RACY_NS` of now, the digest of its bytes. None for a file that cannot be looked at."""
    import time

    now = time.time_ns()
    states: list = []
    for path in paths:
        try:
            info = os.stat(path)
        except (OSError, ValueError):
            states.append(None)
            continue
        state: list = [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev, info.st_mode]
        if max(info.st_mtime_ns, info.st_ctime_ns) >= now - RACY_NS:
            state.append(_content_digest(path, info))
        states.append(state)
    return states


def _content_digest(path: str, info: os.stat_result) -> str | None:
    """The digest of a regular file's bytes; None for anything else or a file that cannot be read."""
    if not stat.S_ISREG(info.st_mode):
        return None
    try:
        raw = read_bytes(path, max(info.st_size, 1) * 2, follow=True)
    except SourceError:
        return None
    return hashlib.sha256(raw).hexdigest()


def _same_state(then: object, now: list | None, path: str) -> bool:
    """Is a file as a run record saw it: the same state, and, where the record kept a digest (a file written
    just before that run), the same bytes now."""
    if now is None or then is None:
        return then is None and now is None
    if type(then) is not list or then[:_STAT_FIELDS] != now[:_STAT_FIELDS]:
        return False
    if len(then) == _STAT_FIELDS:
        return True
    if len(then) != _STAT_FIELDS + 1 or then[_STAT_FIELDS] is None:
        return False  # a file that could not be read then is looked at again
    if len(now) > _STAT_FIELDS:
        return now[_STAT_FIELDS] == then[_STAT_FIELDS]
    try:
        return _content_digest(path, os.stat(path)) == then[_STAT_FIELDS]
    except (OSError, ValueError):
        return False


SHARE_PREFIX = "amplint-run-"  # `RunShare`'s folders in the temporary folder: amplint-run-PID-XXXXXXXX
_SHARE = re.compile(re.escape(SHARE_PREFIX) + r"([0-9]+)-[a-z0-9_]{8}")


def _remove_stale_shares() -> None:
    """Remove the `RunShare` folders of this user's runs that ended without removing theirs (killed outright)."""
    import shutil

    folder = tempfile.gettempdir()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        match = _SHARE.fullmatch(entry.name)
        try:
            if match is None or not entry.is_dir(follow_symlinks=False) or \
                    entry.stat(follow_symlinks=False).st_uid != os.getuid() or _runs(int(match.group(1))):
                continue
        except (OSError, AttributeError):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)


def _runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's: it runs
    return True


class RunShare:
    """What one worker process of a run builds and the others take instead of building it again (an index record
    read on demand, with the screen decided from the same tree: `amplint.index.project.ProjectIndex.record`), by
    name, in a private temporary folder (mkdtemp: this user's alone) that the run removes at its end (`close`);
    never read by another run. Written to a temporary file and renamed into place: a worker reads a whole value
    or none. A run killed outright (SIGKILL) cannot remove its folder: the folder names the run's process, and the
    next run removes those of this user's runs that are no longer running."""

    def __init__(self) -> None:
        _remove_stale_shares()
        self.directory = tempfile.mkdtemp(prefix=f"{SHARE_PREFIX}{os.getpid()}-")

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, hashlib.blake2b(name.encode("utf-8", "surrogatepass"),
                                                            digest_size=16).hexdigest())

    def load(self, name: str):
        """The value stored under `name` by this run's processes, or None."""
        import pickle

        try:
            with open(self._path(name), "rb") as handle:
                return pickle.load(handle)
        except Exception:  # noqa: BLE001 - absent (not yet built), or unreadable: built here then
            return None

    def store(self, name: str, value) -> None:
        import pickle

        try:
            descriptor, temporary = tempfile.mkstemp(prefix=TEMPORARY_PREFIX, dir=self.directory)
            with os.fdopen(descriptor, "wb") as handle:
                pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(temporary, self._path(name))
        except Exception:  # noqa: BLE001 - not shared: another process builds it too
            pass

    def close(self) -> None:
        import shutil

        shutil.rmtree(self.directory, ignore_errors=True)


def open_for_run(explicit: str | None, settings, warn: Callable[[str], None]) -> Cache | None:
    """The run's cache: in `explicit` (`--cache-dir`), else `default_directory(settings)`.

    A folder named on the command line that must not hold a cache is the user's mistake: CacheRefused (the
    command line makes it a usage error, exit 2). One from the configuration, or the default, is skipped with a
    warning and the run goes on without a cache: a cloned repository's `cache-dir = "~"` must neither touch the
    home folder nor stop the run.
    """
    root = getattr(settings, "root", None)
    if explicit:
        return Cache.open(explicit, root=root)
    try:
        return Cache.open(default_directory(settings), root=root)
    except CacheRefused as error:
        warn(f"{error}; linting without a cache")
        return None


def _write_atomically(path: Path, data: bytes) -> None:
    descriptor, temporary = tempfile.mkstemp(prefix=TEMPORARY_PREFIX, dir=path.parent)
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


def _unlink_file(path: str) -> None:
    """Remove a regular file (never a folder, and a symlink only as itself)."""
    try:
        if stat.S_ISREG(os.lstat(path).st_mode):
            os.unlink(path)
    except OSError:
        pass


def _remove_entries(folder: str) -> None:
    """Remove amplint's entries (`xx/<38 hex>.json`) and temporary files, and the folders they leave empty."""
    try:
        subfolders = list(os.scandir(folder))
    except OSError:
        return
    for sub in subfolders:
        if TEMPORARY.fullmatch(sub.name):
            _unlink_file(sub.path)
        elif ENTRY_FOLDER.fullmatch(sub.name) and sub.is_dir(follow_symlinks=False):
            try:
                files = list(os.scandir(sub.path))
            except OSError:
                continue
            for entry in files:
                if ENTRY_FILE.fullmatch(entry.name) or TEMPORARY.fullmatch(entry.name):
                    _unlink_file(entry.path)
            _remove_if_empty(sub.path)
    _remove_if_empty(folder)


def _remove_if_empty(folder: str | os.PathLike) -> bool:
    try:
        os.rmdir(folder)
        return True
    except OSError:
        return False


def clean(directory: str | os.PathLike) -> list[str] | None:
    """Remove the files amplint wrote in the cache folder, then the folder if nothing else is left in it.

    None when there is no folder; otherwise the names left in it (not amplint's; empty when the folder was
    removed). ValueError when the folder is not amplint's cache (no CACHEDIR.TAG from amplint): nothing is
    removed. Nothing but amplint's own names is ever removed (entries, CACHEDIR.TAG, a `.gitignore` with
    exactly amplint's content, temporary files), and symlinks are not followed.
    """
    path = Path(directory).expanduser()
    if not os.path.lexists(path):
        return None
    if not path.is_dir() or not is_cache_directory(path):
        raise ValueError(f"{path} is not an amplint cache folder (no CACHEDIR.TAG from amplint); not removed")
    entries = path / ENTRIES
    if os.path.isdir(entries) and not os.path.islink(entries):
        _remove_entries(str(entries))
    for name in os.listdir(path):
        if TEMPORARY.fullmatch(name):
            _unlink_file(str(path / name))
    if read_regular_file(path / ".gitignore", 4096) == GITIGNORE.encode():
        _unlink_file(str(path / ".gitignore"))
    _unlink_file(str(path / TAG_NAME))
    if _remove_if_empty(path):
        return []
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []
