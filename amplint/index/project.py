"""The project index: every file's `FileIndex`, imports resolved to the project's own modules, and calls resolved
to functions across modules (phase 1's result, what phase 2 asks about calls that leave a function).

Module names come from the files' places: a file in a package (folders holding `__init__.py`) is named from the
top-most package down (`pkg/sub/mod.py`: `pkg.sub.mod`); a file outside packages by its stem, as Python names a
script's sibling that the script imports (`train.py` beside `engine.py`: `import engine`). When two files have
one name (two folders of scripts), an import resolves to the one nearest the importing file. An import no name
matches is looked for as Python does for a script, from the importing file's folder up (`find_module`).

A call leaves its function through: a module-level function of the same module or of an imported project module
(`f()`, `mod.f()`, `from pkg import f` through a package's `__init__` re-exports, `from x import *`), a method of
the same class or of a project base class (`self.f()`), a method of an object whose class is known
(`self.helper = Helper()` then `self.helper.run()`; `h = Helper()` then `h.run()`), and the `__call__` of such
an object (`h(x)`). Functions passed as arguments are not followed. Every question is bounded (`MAX_DEPTH`
calls deep) and safe on cycles.

A name a module reads and never binds (`FileIndex.free`: `loss_scaler(loss, optimizer)`, `scaler.scale(x)` with no
assignment, parameter, def, class or import of the name in the module) is read from the module's globals, which
the modules importing it set (`import engine; engine.scaler = scaler`, or one file split in two): it stands for
the module-level binding of that name in the project files importing the module (`ProjectIndex.importers`), when
each of those binding it binds it to the same object (`module_binding`, and calls through it in `resolve`);
otherwise, or when none binds it, it stays unknown. A module's own binding or import always wins; a builtin is
never read so.

`ModuleView` is the index seen from one module. It records which other modules its answers read
(`read_modules`), so that a file's cached result can be keyed by the facts it used (amplint/cache.py).
"""

from __future__ import annotations

import ast
import collections
import functools
import os
import re
import sys
import zlib
from dataclasses import dataclass
from typing import Iterator

from amplint.vocabulary import GRAD_SCALER, Effect
from amplint.index.functions import CallRecord, FileIndex, FunctionRecord, text_digest

MAX_DEPTH = 3  # calls followed from a function, and callers followed up from one
# An import statement as a file's text holds it (what follows it on its line, or up to `)`, is read too).
_IMPORT_STATEMENT = re.compile(r"^[ \t]*(?:from[ \t]+[.\w]+[ \t]+import\b|import[ \t])", re.MULTILINE)
_WORD = re.compile(r"\w+")
_INLINE_IMPORT = re.compile(r"[:;][ \t]*(?:import|from)\b")  # `try: import x`, `x = 1; import y`
_CONTINUED_IMPORT = re.compile(r"^[ \t]*(?:import|from)\b[^\n]*\\\n", re.MULTILINE)  # `from m \` + a line
_ALIAS = re.compile(r"(\w+)\s+as\s+(\w+)")  # `x as y` in an import statement
NOTEBOOK_SUFFIX = ".ipynb"
KEPT_TEXTS = 64  # texts of other files kept by a project for the answers that read them (`ProjectIndex._text`)
# The bytes of the files phase 1 read, kept compressed (`ProjectIndex.keep`) so that a question reading a file again
# (a record built on demand, a call site's arguments, the second round) does not read it again: at most this many
# compressed bytes (about a third of the source's), the files beyond them read again when asked.
KEPT_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class ImportText:
    """What a file's text says of its import statements, found when the file is read for the index (phase 1) and
    kept, so that no question across modules reads the file again: `words`, each word of its import statements
    (`_import_statements`: a part of a module's name, an imported name); `aliases`, each `x as y` in them as
    (x, y); `lines`, each word on a line starting with `from` or `import` (`amplint.index.build.import_words`,
    what the second round of the index looks for; None when not asked: a file indexed up front)."""

    words: tuple[str, ...]
    aliases: tuple[tuple[str, str], ...]
    lines: tuple[str, ...] | None = None


NO_IMPORTS = ImportText((), ())


def import_text(text: str, lines: tuple[str, ...] | None = None) -> ImportText:
    """The `ImportText` of a text (its words interned: a project holds the same few words many times)."""
    intern = sys.intern
    words: set[str] = set()
    aliases: set[tuple[str, str]] = set()
    has_alias = " as" in text
    for start, end in _import_statements(text):
        words.update(_WORD.findall(text, start, end))
        if has_alias:
            aliases.update(_ALIAS.findall(text, start, end))
    return ImportText(tuple(sorted(intern(word) for word in words)),
                      tuple(sorted((intern(a), intern(b)) for a, b in aliases)), lines)


@dataclass(frozen=True)
class Target:
    module: str  # the path of its file
    qualname: str


@dataclass(frozen=True)
class CallerSite:
    caller: Target
    call: CallRecord


def module_name(path: str) -> str:
    """The module name Python gives the file (see the module's docstring)."""
    folder, filename = os.path.split(os.path.abspath(path))
    stem = filename.rsplit(".", 1)[0]
    package = _package(folder)
    return ".".join(part for part in (package, "" if stem == "__init__" else stem) if part) or stem


@functools.lru_cache(maxsize=4096)
def _package(folder: str) -> str:
    """The dotted package a folder is ("" outside packages), asked once per folder. A folder without `__init__.py`
    inside a package is a namespace package of it (`pkg/sub/mod.py` is `pkg.sub.mod`, and `from ..x import f`
    there reads `pkg.x`), as Python imports it."""
    if not (os.path.isfile(os.path.join(folder, "__init__.py")) or os.path.isfile(os.path.join(folder, "__init__.pyi"))):
        parent, name = os.path.split(folder)
        outer = _package(parent) if name.isidentifier() and parent != folder else ""
        return f"{outer}.{name}" if outer else ""
    parent, name = os.path.split(folder)
    if not name:
        return ""
    outer = _package(parent)
    return f"{outer}.{name}" if outer else name


class ProjectIndex:
    """The files of a project: those indexed up front (phase 1: `add`), and those only known by name (`know`),
    whose record is built the first time an answer needs it (`record`: a call resolved into them). Call sites
    (`calls_named`) are those of the files indexed up front, so that an answer never depends on which known
    files happened to be read before it."""

    def __init__(self, max_size: int = 10 * 1024 * 1024, cache=None) -> None:
        self.cache = cache  # the run's cache (`Cache.index_record`): a record read on demand is built once per content
        self.files: dict[str, FileIndex] = {}  # path -> its record (indexed up front or read on demand)
        self.indexed: set[str] = set()  # paths indexed up front
        self.names: dict[str, str] = {}  # path -> module name, of every file the project knows
        self.by_name: dict[str, list[str]] = {}  # module name -> paths
        self.packages: set[str] = set()  # paths of `__init__` files
        self.max_size = max_size  # files larger than this are not read on demand
        self._digests: dict[str, str] = {}
        self._calls: dict[str, list] | None = None  # `calls_named`: last name of the callee -> its call sites
        self._call_aliases: dict[str, set[str]] = {}  # `calls_named`: an imported name -> the names the indexed files'
        # imports bind it as (their records'; not `_aliases`, the table of every file's import statements)
        # `calls_named_in`: (last name, effects) -> (files, sites); `calls_digest`: ("digest", name) -> its digest
        self._calls_by: dict = {}
        # What each file's text says of its import statements (`ImportText`): from the read of phase 1, else from
        # one read when a question first needs it; never read again in this process.
        self.texts: dict[str, ImportText] = {}
        self._read_texts: collections.OrderedDict[str, str | None] = collections.OrderedDict()  # `_text`: the last few
        self._kept: dict[str, bytes] = {}  # path -> its bytes as phase 1 read them, compressed (`keep`, `source`)
        self._kept_size = 0
        # The screen of a run's file, decided where the index parsed it (`amplint.prefilter.Ahead`), for its own
        # screen to take without parsing it again (`ModuleView.screened`); `screener` decides it for a record read on
        # demand (`index_screened`), None outside a run.
        self.screens: dict[str, object] = {}
        self.screener = None
        # Where the processes of a pooled run share the records they read on demand (`amplint.cache.RunShare`: `load`,
        # `store`), so that one builds each; None in one process.
        self.shared = None
        self._asked: set[str] = set()  # files whose own screen was asked in this process (`screened`)
        # path -> (imports, star imports) of a file whose record is not built, from its tree alone (`import_table`)
        self._import_tables: dict[str, tuple[dict, list]] = {}
        # Name-keyed tables built once from `texts` and kept while the files known change by files only known by name
        # (a notebook's view): such a file is entered into them (`_pending`), never the whole project looked at again.
        # `importers`: a word of an import statement -> the files holding one; the module's path -> its importers
        self._import_words: dict[str, set[str]] | None = None
        self._aliases: dict[str, set[str]] | None = None  # an imported name -> the names an import binds it as
        self._pending: list[str] = []  # files known since the tables were built, entered when they are next asked
        self._importers: dict[str, list[str]] = {}
        self._wrapper_classes: frozenset[str] | None = None  # the scaler-wrapper classes of the indexed files
        self._wrapper_names: frozenset[str] | None = None  # `scaler_wrapper_names`
        self._reaches: dict = {}  # `ModuleView.reaches`: (question) -> (answer, what answering it read)
        self._resolved: dict = {}  # `ModuleView._resolved_calls`: callee's last name -> its sites resolved

    def know(self, path: str, name: str | None = None) -> None:
        """A file of the project whose record is read when an answer needs it."""
        path = os.path.abspath(path)
        if path in self.names:
            return
        name = name or module_name(path)
        self._forget_answers()
        if self._import_words is not None or self._aliases is not None:
            self._pending.append(path)
        self.names[path] = name
        self.by_name.setdefault(name, []).append(path)
        if os.path.basename(path).startswith("__init__."):
            self.packages.add(path)

    def add(self, path: str, index: FileIndex, name: str | None = None, text: ImportText | None = None,
            same_bytes: bool = False) -> None:
        """A file indexed up front, with its record; `text`: what its text says of imports, when it was read;
        `same_bytes`: the record is of the bytes the project keeps of the file (the second round's), kept on."""
        path = os.path.abspath(path)
        packed = self._kept.get(path) if same_bytes else None
        self.remove(path)
        self.keep(path, packed)
        self.know(path, name)
        self._calls = None
        self._calls_by = {}
        self._forget_answers(tables=True)
        self.files[path] = index
        self.indexed.add(path)
        if text is not None:
            self.texts[path] = text

    def remove(self, path: str) -> None:
        path = os.path.abspath(path)
        if path in self.names:
            self._calls = None
            self._calls_by = {}
            self._forget_answers(tables=True)
            self.texts.pop(path, None)
            self._read_texts.pop(path, None)
            self._kept_size -= len(self._kept.pop(path, b""))
            self.screens.pop(path, None)
            self._import_tables.pop(path, None)
            self.files.pop(path, None)
            self.indexed.discard(path)
            self._digests.pop(path, None)
            self.packages.discard(path)
            name = self.names.pop(path)
            self.by_name[name] = [p for p in self.by_name.get(name, []) if p != path]

    def record(self, path: str) -> FileIndex | None:
        """The file's record; read and built now for a file only known so far (an empty record when it cannot be
        read or parsed: it then says nothing)."""
        found = self.files.get(path)
        if found is None and path in self.names:
            built = self.shared.load(path) if self.shared is not None else None
            if built is None:  # screened from the same tree, unless its own screen was asked here already
                built = _record_of(path, self.source(path), self.cache,
                                   self.screener if path not in self._asked else None)
                if self.shared is not None:
                    self.shared.store(path, built)
            found, ahead = built
            self.files[path] = found
            self.screen(path, ahead)
        return found

    def screened(self, path: str):
        """The screen decided of the file where its record was built (an `amplint.prefilter.Ahead`), for its own
        screen, which is asked now (so that no record built later in this process decides it again); one another
        worker of the run built is taken from the run's share (`shared`), the record with it."""
        self._asked.add(path)
        ahead = self.screens.get(path)
        if ahead is None and path not in self.files and self.shared is not None:
            built = self.shared.load(path)
            if built is not None:
                self.files[path] = built[0]
                self.screen(path, built[1])
                ahead = built[1]
        return ahead

    def screen(self, path: str, ahead) -> None:
        """The screen of the file decided where its record was built (`index_screened`), kept for its own screen."""
        if ahead is not None:
            self.screens[os.path.abspath(path)] = ahead

    def keep(self, path: str, packed: bytes | None) -> None:
        """The file's bytes as phase 1 read them (`pack`), kept while the kept bytes stay within `KEPT_BYTES`: a
        question reading the file again takes them (`source`)."""
        path = os.path.abspath(path)
        if packed is None or path in self._kept or self._kept_size + len(packed) > KEPT_BYTES:
            return
        self._kept[path] = packed
        self._kept_size += len(packed)

    def kept(self, path: str) -> bytes | None:
        """The file's bytes kept from phase 1's read (`keep`), compressed; None when not kept."""
        return self._kept.get(os.path.abspath(path))

    def source(self, path: str):
        """The file's `SourceText`, from the bytes phase 1 kept (`keep`), else read now; None when it cannot be
        read or decoded (phase 2 reports why)."""
        from amplint.source import SourceError, decode_source, read_source

        packed = self.kept(path)
        try:
            return decode_source(unpack(packed)) if packed is not None else read_source(path, self.max_size)
        except (SourceError, OSError):
            return None

    def calls_named(self, last: str | None) -> list[tuple[str, str | None, CallRecord]]:
        """(path, calling function or None at module level, call) of every call whose callee's last name is
        `last`, or a name some file imports it as (`from m import last as g`: `g()`); with None, every call to a
        plain name or a method (a `__call__` can be reached by any)."""
        if self._calls is None:
            self._calls = {}
            for path in sorted(self.indexed):
                index = self.files[path]
                for qualname, summary in index.functions.items():
                    for call in summary.calls:
                        self._calls.setdefault(call.callee.rsplit(".", 1)[-1], []).append((path, qualname, call))
                for call in index.module_calls:
                    self._calls.setdefault(call.callee.rsplit(".", 1)[-1], []).append((path, None, call))
            self._call_aliases = {}
            for path in sorted(self.indexed):
                for local, (_, attribute, _) in self.files[path].imports.items():
                    if attribute is not None and attribute != local:
                        self._call_aliases.setdefault(attribute, set()).add(local)
        if last is None:
            return [site for sites in self._calls.values() for site in sites]
        found = self._calls.get(last, [])
        for alias in sorted(self._call_aliases.get(last, ())):  # `from m import f as g`: `g(...)` may call it too
            found = found + self._calls.get(alias, [])
        return found

    def calls_named_in(self, last: str | None, effects: frozenset[str]) -> tuple[frozenset[str], list]:
        """The files holding a call `calls_named(last)` finds, and those of its call sites whose calling function
        does one of `effects` (a stepping caller is rare, a call named `forward` or `__init__` is not): asked
        once per name and state of the index."""
        key = (last, effects)
        found = self._calls_by.get(key)
        if found is None:
            sites = self.calls_named(last)
            chosen = []
            for path, caller, call in sites:
                summary = self.files[path].functions.get(caller) if caller is not None else None
                if summary is not None and summary.does & effects:
                    chosen.append((path, caller, call))
            found = self._calls_by[key] = (frozenset(path for path, _, _ in sites), chosen)
        return found

    def _forget_answers(self, tables: bool = False) -> None:
        """What is derived from the files known (importers, wrapper names, `reaches`), asked again; with `tables`
        (a record added or a file removed), the name-keyed tables too. A file only known by name (`know`) is
        entered into the tables when they are next asked (`_pending`): they are not built again."""
        self._reaches = {}  # `ModuleView.reaches`: answers kept while the files known stay the same
        self._resolved = {}  # `ModuleView._resolved_calls`: call sites of a name, resolved, and what that read
        self._importers = {}
        self._wrapper_names = None
        if tables:
            self._import_words = None
            self._aliases = None
            self._pending = []
            self._wrapper_classes = None

    def _tables(self) -> None:
        """The name-keyed tables of the files' import statements (`_import_words`, `_aliases`), built once from
        what each file's text says (`imports_of`), the files known since entered."""
        if self._import_words is None or self._aliases is None:
            self._import_words, self._aliases, self._pending = {}, {}, []
            for path in sorted(self.names):
                self._enter(path)
        elif self._pending:
            pending, self._pending = self._pending, []
            for path in pending:
                if path in self.names:
                    self._enter(path)

    def _enter(self, path: str) -> None:
        """The file's words into the tables: each word of its import statements (a part of a module's name, an
        imported name; its record's as well, or its import table's, when one is built) -> the file; each `x as y`
        -> y."""
        text = self.imports_of(path)
        words = set(text.words)
        record = self.files.get(path)
        imports, star_imports = (record.imports, record.star_imports) if record is not None else \
            self._import_tables.get(path, ({}, []))
        words.update(word for module, attribute, _ in imports.values()
                     for word in (*module.split("."), attribute or "") if word)
        words.update(word for module, _ in star_imports for word in module.split(".") if word)
        for word in words:
            self._import_words.setdefault(word, set()).add(path)
        for imported, local in text.aliases:
            self._aliases.setdefault(imported, set()).add(local)

    def imports_of(self, path: str) -> ImportText:
        """What the file's text says of its import statements: kept from phase 1's read, else read now (once)."""
        found = self.texts.get(path)
        if found is None:
            if path.endswith(NOTEBOOK_SUFFIX):
                found = NO_IMPORTS  # JSON: no line of it starts with an import statement
            else:
                text = self._text(path)
                found = import_text(text) if text is not None else NO_IMPORTS
            self.texts[path] = found
        return found

    def scaler_wrapper_names(self) -> frozenset[str]:
        """Every name a file can write a scaler-wrapper class as (a class whose `__init__` builds a GradScaler:
        `NativeScaler`): the class's own name, and each name an import statement of the project binds one of
        those to (`from .amp import NativeScaler as Scaler`, re-exported on), followed on. `class_at` finds a
        class only through such names, so a file whose text holds none of them builds no wrapper. The classes
        come from the files indexed up front: a file that builds a GradScaler names one (`INDEX_WORDS`)."""
        if self._wrapper_names is None:
            if self._wrapper_classes is None:
                self._wrapper_classes = frozenset(name for path in self.indexed
                                                  for name in _scaler_wrappers(self.files[path]))
            found = set(self._wrapper_classes)
            if found:
                aliases = self._aliases_of_imports()
                todo = list(found)
                while todo:
                    for alias in aliases.get(todo.pop(), ()):
                        if alias not in found:
                            found.add(alias)
                            todo.append(alias)
            self._wrapper_names = frozenset(found)
        return self._wrapper_names

    def scaler_wrappers_digest(self) -> str:
        return text_digest("\n".join(sorted(self.scaler_wrapper_names())))

    def importers(self, path: str) -> list[str]:
        """The files of the project that import the module at `path` (`import m`, `from m import x`, `from pkg
        import m`, `from m import *`), as Python resolves each import from the importing file. Asked only for a
        name the module reads and never binds (`FileIndex.free`): the import statements of every file are looked
        for once per run (the records of the indexed files, the text of the others), and only the files whose
        import statements name the module are read."""
        found = self._importers.get(path)
        if found is not None:
            return found
        self._tables()
        name = self.names.get(path, "")
        found = []
        for candidate in sorted(self._import_words.get(name.rsplit(".", 1)[-1], ())):
            if candidate != path and self._may_import(candidate, path) and self._imports_module(candidate, path):
                found.append(candidate)
        self._importers[path] = found
        return found

    def importers_digest(self, path: str) -> str:
        return text_digest("\n".join(self.importers(path)) if path in self.names else "?")

    def _aliases_of_imports(self) -> dict[str, set[str]]:
        """A name an import statement imports -> the names it binds it as (`x as y`), over the text of every file
        of the project (never its record: the answer is the same in every process, whichever records it built)."""
        self._tables()
        return self._aliases

    def _text(self, path: str) -> str | None:
        """The file's text (None when it cannot be read), for what an answer reads beyond the index's records (a
        call site's arguments): the last few kept, so that a file asked again is not read again."""
        if path in self._read_texts:
            self._read_texts.move_to_end(path)
            return self._read_texts[path]
        source = self.source(path)
        text = source.text if source is not None else None
        self._read_texts[path] = text
        if len(self._read_texts) > KEPT_TEXTS:
            self._read_texts.popitem(last=False)
        return text

    def import_table(self, path: str) -> tuple[dict, list] | None:
        """(imports, star imports) of a file of the project as its record holds them (`FileIndex.imports`,
        `star_imports`; None for a file the project does not know): from its record when it is built (or the cache
        holds it), else from its tree alone (`amplint.index.functions.import_table`): a question about who
        imports whom then costs a parse, not the rest of the record (about three times as much), which most of
        the files asked so are never asked."""
        record = self.files.get(path)
        if record is None and path in self.names and path not in self._import_tables:
            record = self._stored(path)
            if record is None:
                self._import_tables[path] = self._read_imports(path)
        if record is not None:
            return record.imports, record.star_imports
        return self._import_tables.get(path)

    def _stored(self, path: str) -> FileIndex | None:
        """The file's record from the run's share or the cache, when one of them holds it (taken as `record`
        would take it), else None."""
        built = self.shared.load(path) if self.shared is not None else None
        if built is not None:
            self.files[path] = built[0]
            self.screen(path, built[1])
            return built[0]
        source = self.source(path) if self.cache is not None else None
        if source is not None and source.raw is not None:
            found, record = self.cache.stored_index_record(source.raw, source.text)
            if found:
                self.files[path] = record = record if record is not None else FileIndex()
                return record
        return None

    def _read_imports(self, path: str) -> tuple[dict, list]:
        """The file's import table from its tree (`import_table`), and its screen decided from the same tree (as
        `record` does), both shared with the run's other processes (`shared`)."""
        name = f"imports\0{path}"
        built = self.shared.load(name) if self.shared is not None else None
        if built is None:
            source = self.source(path)
            built = ({}, [], None) if source is None else \
                imports_screened(path, source.text, self.screener if path not in self._asked else None)
            if self.shared is not None:
                self.shared.store(name, built)
        self.screen(path, built[2])
        return built[0], built[1]

    def _may_import(self, candidate: str, path: str) -> bool:
        """A look at a file's import statements as its text holds them (`_import_statements`, each parsed alone)
        before its tree is parsed for its import table: False only when none of them imports the module at
        `path` (a word of theirs naming the module made it a candidate: most such files import another module of
        that name). True when its table is known already (that answers exactly, cheaply), or when the text may
        hold an import statement the look does not read (one not starting its line, `try: import x`; one
        continued with a backslash; one that does not parse alone)."""
        if candidate in self.files or candidate in self._import_tables:
            return True
        text = self._text(candidate)
        if text is None:
            return True
        spans = list(_import_statements(text))
        starts = {start for start, _ in spans}  # each a line's start
        if _INLINE_IMPORT.search(text) and any(line not in starts for line in line_starts(text, "import")) \
                or "\\\n" in text and _CONTINUED_IMPORT.search(text):
            return True
        for start, end in spans:
            table = _statement_table(text[start:end].strip())
            if table is None or self._table_imports(table, candidate, path):
                return True
        return False

    def _imports_module(self, importer: str, path: str) -> bool:
        """Does one of the file's import statements bind a name to the module at `path`, or import from it?"""
        table = self.import_table(importer)
        return table is not None and self._table_imports(table, importer, path)

    def _table_imports(self, table: tuple[dict, list], importer: str, path: str) -> bool:
        """Does this import table of the file `importer` bind a name to the module at `path`, or import from it?"""
        imports, star_imports = table
        for module, attribute, level in imports.values():
            absolute = self.absolute(importer, module, level)
            if absolute and self.find_module(absolute, importer) == path:
                return True
            if attribute is not None:
                inner = f"{absolute}.{attribute}" if absolute else attribute
                if self.find_module(inner, importer) == path:
                    return True
        return any(self.find_module(self.absolute(importer, module, level), importer) == path
                   for module, level in star_imports if module or level)

    def calls_digest(self, name: str) -> str:
        """A fingerprint of every call site whose callee's last name is `name` ("*": every call site)."""
        key = ("digest", name)
        found = self._calls_by.get(key)
        if found is None:
            sites = self.calls_named(None if name == "*" else name)
            text = "\n".join(sorted(f"{path}\0{caller}\0{self.files[path].call_digest(call)}"
                                    for path, caller, call in sites))
            found = self._calls_by[key] = text_digest(text)
        return found

    def valid(self, dependencies: dict[str, str], path: str | None = None) -> bool:
        """Do these dependencies (`ModuleView.dependencies`) still hold in this index, for the file at `path`
        (the file they were recorded for may lie elsewhere: a cached result is found by content)?"""
        for key, value in dependencies.items():
            if key.startswith("?"):  # absent then, looked for from these files: found now from one of them?
                nears = [os.path.abspath(path) if near == "." and path else near
                         for near in value.split("\0")] if value else []
                if any(self.find_module(key[1:], near) is not None for near in nears) or not nears \
                        and self.by_name.get(key[1:]):
                    return False
            elif key.startswith("calls:"):
                if self.calls_digest(key[6:]) != value:
                    return False
            elif key.startswith("importers:"):
                if self.importers_digest(key[10:]) != value:
                    return False
            elif key == "scaler-wrappers":
                if self.scaler_wrappers_digest() != value:
                    return False
            elif key.startswith("text:"):
                if _text_digest(self._text(key[5:])) != value:
                    return False
            elif key not in self.names or self.digest(key) != value:
                return False
        return True

    def view(self, path: str) -> ModuleView:
        return ModuleView(self, os.path.abspath(path))

    def digest(self, path: str) -> str:
        if path not in self._digests:
            record = self.record(path)
            self._digests[path] = record.digest() if record is not None else ""
        return self._digests[path]

    # modules -------------------------------------------------------------------------------------------------
    def find_module(self, name: str, near: str) -> str | None:
        """The path of the project module `name`, the nearest to the file `near` when several have that name."""
        paths = self.by_name.get(name)
        if not paths:
            return self._beside(name, near)
        if len(paths) == 1:
            return paths[0]
        folder = os.path.dirname(near)
        return max(paths, key=lambda p: (len(os.path.commonpath([folder, os.path.dirname(p)])), -len(p)))

    def _beside(self, name: str, near: str) -> str | None:
        """The module `name` as Python finds it when the file `near` runs as a script: from the script's own
        folder, the first entry of `sys.path` (a checkout with an `__init__.py` at its root names its files
        `root.x`, and yet `train.py` there imports `x`). Folders above it are tried too, up to the top-most
        package's parent, the root the package names come from."""
        folder = os.path.dirname(near)
        parts = name.split(".")
        while True:
            base = os.path.join(folder, *parts)
            for candidate in (base + ".py", base + ".pyi", os.path.join(base, "__init__.py")):
                if candidate in self.names:
                    return candidate
            if not _package(folder):
                return None  # the top-most package's parent: the root of the names
            parent = os.path.dirname(folder)
            if parent == folder:
                return None
            folder = parent

    def absolute(self, path: str, module: str, level: int) -> str:
        """The absolute module name of a (possibly relative) import written in the file at `path`."""
        if not level:
            return module
        package = self.names[path].split(".")
        if path not in self.packages:
            package = package[:-1]
        package = package[:len(package) - (level - 1)] if level > 1 else package
        return ".".join([*package, module] if module else package)


class ModuleView:
    """The project index seen from one file."""

    def __init__(self, project: ProjectIndex, path: str) -> None:
        self.project = project
        self.path = path
        self.read_modules: set[str] = set()  # paths of other files whose index an answer used
        # (module name, the file it was looked for from) for each module an answer looked for and did not find
        self.missing: set[tuple[str, str]] = set()
        self.asked_calls: set[str] = set()  # callee names whose call sites across the project an answer read
        self.asked_importers: set[str] = set()  # paths of modules whose importers an answer read
        self.asked_wrappers = False  # an answer read the project's scaler-wrapper classes
        self.asked_texts: dict[str, str] = {}  # path -> the digest of the text an answer read of another file
        self.read_own = False  # an answer read this file's own record
        self._own = None  # `provide`: builds this file's record from the screen's tree
        self.summary = None  # `provide`: the screen's summary of the file
        self.parts: dict[str, object] = {}  # `provide`: what questions read of the file, found ahead (`file_part`)

    @property
    def name(self) -> str:
        return self.project.names.get(self.path, "")

    def _file(self, path: str) -> FileIndex | None:
        if path == self.path:
            self.read_own = True
            return self._own_record()
        self.read_modules.add(path)
        return self.project.record(path)

    def screened(self):
        """The screen of this view's file decided where the index parsed it (`ProjectIndex.screened`), or None."""
        return self.project.screened(self.path)

    def provide(self, build, summary=None, parts: dict[str, object] | None = None) -> None:
        """How to build the view's own file's record (from the tree the screen parsed), when an answer first
        needs it and the index has none; `summary`: the screen's `Summary` of the file, for questions its text or
        tree answers without the record (`function_names`, `calls_in_loop`); `parts`: what questions read of the
        file's tree, found where the index parsed it (`file_part`)."""
        self.project.know(self.path)
        self._own = build
        self.summary = summary
        self.parts = dict(parts or {})

    def file_part(self, part):
        """What a question across modules reads of the view's own file's tree (`part(summary)`, plain data: a
        question names the parts it reads as its `file_parts`): found where the index parsed the file (`provide`'s
        `parts`), else from the screen's summary now."""
        key = part_key(part)
        if key in self.parts:
            return self.parts[key]
        return part(self.summary)

    def scaler_wrapper_names(self) -> frozenset[str]:
        """`ProjectIndex.scaler_wrapper_names`, recorded as read (a new wrapper class anywhere relints the file),
        and the view's own file's, when the index did not take it up front (a text alone, an editor's buffer)."""
        self.asked_wrappers = True
        names = self.project.scaler_wrapper_names()
        if self.path not in self.project.indexed and self.summary is not None \
                and GRAD_SCALER in self.summary.text:  # a class building one names it
            record = self._own_record()
            if record is not None:
                names = names | _scaler_wrappers(record)
        return names

    def calls_in_loop(self, names) -> bool:
        """Does the view's own file call one of these names (or an import alias of one) in a loop's body, as its
        record would say (`CallRecord.in_loop`)? From the screen's summary, without the record; True when the
        record is built already or no summary is at hand."""
        if self.summary is None or self.path in self.project.files:
            return True  # its record answers (cheaply), or nothing here can
        if not self.summary.calls_in_loop(*names):  # the text's tokens first
            return False
        self.summary.parse_tree()
        return any(self.summary.sites(names, looped=True))

    def function_names(self) -> set[str] | None:
        """The last names of the view's own file's functions (`Class.run`: "run"), or a superset of them when its
        record is not built yet (the names after `def` in its text); None when neither is known."""
        record = self.project.files.get(self.path)
        if record is not None:
            return {qualname.rsplit(".", 1)[-1] for qualname in record.functions}
        return self.summary.written_def_names() if self.summary is not None else None

    def record(self, path: str) -> FileIndex | None:
        """The index record of a file of the project (read when first needed; recorded as read by this view)."""
        return self._file(path)

    def class_at(self, path: str, written: str) -> tuple[str, str] | None:
        """(path, class name) of a class named as written in the file at `path` (`Helper`, `helpers.Helper`)."""
        return self._class(path, written, MAX_DEPTH)

    def _own_record(self) -> FileIndex | None:
        if self.path not in self.project.files and self._own is not None:
            record, self._own = self._own(), None
            self.project.files[self.path] = record if record is not None else FileIndex()
        return self.project.record(self.path)

    def dependencies(self) -> dict[str, str]:
        """What this file's answers read of other files, each with its current fingerprint: a path -> the digest
        of its index; "?name" -> the files (NUL-separated) a module was looked for from and not found (as Python
        finds it from there: a namespace package beside a file is found by its folders, not by its name);
        "calls:name" -> the digest of every call site named so (a new caller anywhere changes it); "importers:path" -> the digest of the files importing
        that module (`ProjectIndex.importers`); "scaler-wrappers" -> the digest of the names scaler-wrapper classes can be
        written as (`scaler_wrapper_names`). A cached result is valid while `valid` holds for it."""
        found = {path: self.project.digest(path) for path in sorted(self.read_modules) if path in self.project.names}
        absent: dict[str, set[str]] = {}
        for name, near in self.missing:  # "." for this file: the same file elsewhere asks from where it is
            absent.setdefault(name, set()).add("." if near == self.path else near)
        found.update({f"?{name}": "\0".join(sorted(nears)) for name, nears in sorted(absent.items())})
        found.update({f"calls:{name}": self.project.calls_digest(name) for name in sorted(self.asked_calls)})
        found.update({f"importers:{path}": self.project.importers_digest(path) for path in sorted(self.asked_importers)})
        if self.asked_wrappers:
            found["scaler-wrappers"] = self.project.scaler_wrappers_digest()
        found.update({f"text:{path}": digest for path, digest in sorted(self.asked_texts.items())})
        return found

    def text(self, path: str) -> str | None:
        """The text of another file of the project, for an answer that reads its code beyond the index's record (a
        call site's arguments): the cached result then depends on the text itself."""
        text = self.project._text(path)
        self.asked_texts[path] = _text_digest(text)
        return text

    def outside(self, qualified: str) -> bool:
        """Is the top module of an imported name (`k2` of `k2.get_rnnt_prune_ranges`) absent from the project: a
        library's?"""
        return self._find(qualified.split(".")[0], self.path) is None

    def _find(self, name: str, near: str) -> str | None:
        found = self.project.find_module(name, near)
        if found is None:
            self.missing.add((name, near))
        return found

    # resolving calls -----------------------------------------------------------------------------------------
    def resolve(self, caller: str | None, callee: str, path: str | None = None) -> Target | None:
        """The project function a call `callee(...)` written in function `caller` (a qualname; None at module
        level) of the file at `path` (this view's by default) runs, if the index can tell."""
        path = path or self.path
        return self._resolve(path, caller, callee, MAX_DEPTH)

    def _resolve(self, path: str, caller: str | None, callee: str, depth: int) -> Target | None:
        index = self._file(path)
        if index is None or depth < 0:
            return None
        parts = callee.split(".")
        class_name = caller.split(".")[0] if caller and "." in caller else None
        if parts[0] in ("self", "cls") and class_name:
            if len(parts) == 2:
                found = self._method(path, class_name, parts[1], depth)
                held = index.instances.get(f"{class_name}.{parts[1]}") if found is None else None
                # `self.runner = Runner()` then `self.runner(loss)`: the object's `__call__`
                return self._method_of_callee(path, held, "__call__", depth) if held else found
            if len(parts) == 3:  # self.helper.run(): the helper's class
                held = index.instances.get(f"{class_name}.{parts[1]}")
                return self._method_of_callee(path, held, parts[2], depth) if held else None
            return None
        if len(parts) <= 2:
            held = _held(index, caller, parts[0])
            if held:  # h = Helper(); h(x) / h.run()
                return self._method_of_callee(path, held, parts[1] if len(parts) == 2 else "__call__", depth)
            if len(parts) == 1:
                return self._name(path, parts[0], depth)
        module = self._module_of(path, parts[:-1])
        if module is not None:
            return self._name(module, parts[-1], depth - 1)
        if len(parts) == 2:  # `loss_scaler.run()`, the object bound by the modules importing this one
            return self._injected(path, index, parts[0], parts[1], depth)
        return None

    def _name(self, path: str, name: str, depth: int) -> Target | None:
        """A module-level function named `name` in the file, or what the file imports under that name."""
        index = self._file(path)
        if index is None or depth < 0:
            return None
        if name in index.functions and "." not in name:
            return Target(path, name)
        if name in index.classes:
            return None  # a class: its construction, not a call into its methods
        imported = index.imports.get(name)
        if imported is not None:
            module, attribute, level = imported
            absolute = self.project.absolute(path, module, level)
            if attribute is None:
                return None  # `import x` called as `x()`: not a function of ours
            target = self._find(absolute, path)
            if target is None:
                return None
            record = self._file(target)
            held = record.instances.get(f":{attribute}") if record is not None else None
            if held is not None and attribute not in record.functions:
                # `from helpers import runner`, `runner = Runner()` there: calling it runs `Runner.__call__`
                return self._method_of_callee(target, held, "__call__", depth - 1)
            return self._name(target, attribute, depth - 1)
        for module, level in index.star_imports:
            target = self._find(self.project.absolute(path, module, level), path)
            if target is not None:
                found = self._name(target, name, depth - 1)
                if found is not None:
                    return found
        return self._injected(path, index, name, "__call__", depth)

    # names a module reads and never binds ------------------------------------------------------------------
    def _free(self, path: str, index: FileIndex, name: str) -> bool:
        """Does the file read `name` without ever binding it (`FileIndex.free`), and no module of the project
        that it star-imports may bind it? Then the name is what the modules importing the file bind it to."""
        if name not in index.free:
            return False
        return not any(self._find(self.project.absolute(path, module, level), path) is not None
                       for module, level in index.star_imports if module or level)

    def _binders(self, path: str, name: str) -> list[tuple[str, FileIndex]] | None:
        """The files importing the module at `path` that bind `name` at module level, with their records (those
        that do not bind it say nothing); None when one may bind it through a star import of the project."""
        self.asked_importers.add(path)
        found = []
        for importer in self.project.importers(path):
            record = self._file(importer)
            if record is None:
                continue
            if name in record.globals or name in record.imports or name in record.classes \
                    or name in record.functions or f":{name}" in record.instances:
                found.append((importer, record))
            elif any(self._binds(self._find(self.project.absolute(importer, module, level), importer), name)
                     for module, level in record.star_imports if module or level):
                return None
        return found

    def _binds(self, path: str | None, name: str) -> bool:
        record = self._file(path) if path is not None else None
        return record is not None and (name in record.globals or name in record.imports or name in record.classes
                                       or name in record.functions or f":{name}" in record.instances)

    def _injected(self, path: str, index: FileIndex, name: str, method: str, depth: int) -> Target | None:
        """For a name the file reads and never binds (`_free`): the project function that calling its `method`
        runs (`__call__`: calling the name itself), when every module importing the file that binds the name binds
        it to one object whose class (or function) the index knows, and they agree: `loss_scaler = NativeScaler()`
        in `main.py`, which imports the module calling `loss_scaler(loss, optimizer)`. None otherwise."""
        if depth <= 0 or not self._free(path, index, name):
            return None
        binders = self._binders(path, name)
        found: set[Target] = set()
        for importer, record in binders or ():
            held = record.instances.get(f":{name}")
            if held is not None and name not in record.functions and name not in record.classes:
                target = self._method_of_callee(importer, held, method, depth - 1)
            elif method == "__call__" and name not in record.globals and (
                    name in record.functions or name in record.imports):
                target = self._name(importer, name, depth - 1)
            else:
                target = None
            if target is None:
                return None
            found.add(target)
        return found.pop() if len(found) == 1 else None

    def _module_of(self, path: str, parts: list[str]) -> str | None:
        """The project module a dotted receiver names (`utils`, `pkg.utils`, an `import pkg.utils as u`)."""
        index = self._file(path)
        if index is None:
            return None
        imported = index.imports.get(parts[0])
        if imported is None:
            return None
        module, attribute, level = imported
        absolute = self.project.absolute(path, module, level)
        if attribute is not None:
            absolute = f"{absolute}.{attribute}" if absolute else attribute
        name = ".".join([absolute, *parts[1:]])
        return self._find(name, path)

    def _method(self, path: str, class_name: str, method: str, depth: int, seen: frozenset = frozenset()
                ) -> Target | None:
        """`method` of the class or of a project base class (bases followed `depth` deep)."""
        index = self._file(path)
        if index is None or depth < 0 or (path, class_name) in seen:
            return None
        qualname = f"{class_name}.{method}"
        if qualname in index.functions:
            return Target(path, qualname)
        for base in index.classes.get(class_name, ()):
            located = self._class(path, base, depth)
            if located is not None:
                found = self._method(located[0], located[1], method, depth - 1, seen | {(path, class_name)})
                if found is not None:
                    return found
        return None

    def _class(self, path: str, written: str, depth: int) -> tuple[str, str] | None:
        """(path, class name) of a class named as written in the file (`Helper`, `helpers.Helper`)."""
        index = self._file(path)
        if index is None or depth < 0:
            return None
        parts = written.split(".")
        if len(parts) == 1:
            if parts[0] in index.classes:
                return path, parts[0]
            imported = index.imports.get(parts[0])
            if imported is not None and imported[1] is not None:
                target = self._find(self.project.absolute(path, imported[0], imported[2]), path)
                if target is not None:
                    return self._class(target, imported[1], depth - 1)
            for module, level in index.star_imports:
                target = self._find(self.project.absolute(path, module, level), path)
                if target is not None:
                    found = self._class(target, parts[0], depth - 1)
                    if found is not None:
                        return found
            return None
        module = self._module_of(path, parts[:-1])
        return self._class(module, parts[-1], depth - 1) if module else None

    def _method_of_callee(self, path: str, constructor: str, method: str, depth: int) -> Target | None:
        """`method` of the class the object was built from; calling an object whose class defines no `__call__`
        in the project runs its `forward` (a torch.nn.Module's `__call__`)."""
        located = self._class(path, constructor, depth)
        if located is None:
            return None
        found = self._method(located[0], located[1], method, depth)
        if found is None and method == "__call__":
            found = self._method(located[0], located[1], "forward", depth)
        return found

    # questions ---------------------------------------------------------------------------------------------
    def function(self, target: Target) -> FunctionRecord | None:
        index = self._file(target.module)
        return index.functions.get(target.qualname) if index else None

    def plain_item(self, target: Target, slot: str, depth: int = MAX_DEPTH) -> bool:
        """Is the entry `slot` of what the function returns ("k:<key>" of a dict, "p:<n>" of a tuple) surely not
        low precision (the index's `items`: integer, bool or float32), following the other functions' results
        it is taken from, `depth` calls deep?"""
        summary = self.function(target)
        if summary is None or slot not in summary.items:
            return False
        references = summary.items[slot]
        if references and depth <= 0:
            return False
        for callee, inner in references:
            found = self._resolve(target.module, target.qualname, callee, MAX_DEPTH)
            if found is None or not self.plain_item(found, inner, depth - 1):
                return False
        return True

    def reaches(self, target: Target, facts: tuple[str, ...], depth: int = MAX_DEPTH, stop: tuple[str, ...] = ()
                ) -> tuple[list[Target], str] | None:
        """Does the function, or a function it calls (`depth` calls deep), do one of `facts`? The chain of
        functions from `target` to the one that does, and the fact; None when none does (or the index cannot
        tell). Breadth first: the shortest chain. A function with one of the facts `stop` is not looked into
        (`autocast_off`: what it does runs outside any caller's region). The answer does not depend on the file
        asking, so it is kept by the project for every file that asks the same (what answering read is recorded
        as read by each of them)."""
        key = (target, facts, depth, stop)
        kept = self.project._reaches.get(key)
        if kept is None:
            asking = ModuleView(self.project, self.path)
            asking._own = self._own
            answer = asking._reaches(target, facts, depth, stop)
            read = asking.read_modules | ({self.path} if asking.read_own else set())
            kept = self.project._reaches[key] = (answer, frozenset(read), frozenset(asking.missing),
                                                 frozenset(asking.asked_calls), frozenset(asking.asked_importers),
                                                 asking.asked_wrappers)
        answer, read, missing, calls, importers, wrappers = kept
        if self.path in read:
            self.read_own = True
        self.read_modules.update(read - {self.path})
        self.missing.update(missing)
        self.asked_calls.update(calls)
        self.asked_importers.update(importers)
        self.asked_wrappers = self.asked_wrappers or wrappers
        return (list(answer[0]), answer[1]) if answer is not None else None

    def _reaches(self, target: Target, facts: tuple[str, ...], depth: int, stop: tuple[str, ...]
                 ) -> tuple[list[Target], str] | None:
        frontier: list[tuple[Target, list[Target]]] = [(target, [target])]
        seen = {target}
        for level in range(depth + 1):
            following = []
            for current, chain in frontier:
                summary = self.function(current)
                if summary is None or any(fact in summary.does for fact in stop):
                    continue
                for fact in facts:
                    if fact in summary.does:
                        return chain, fact
                if level == depth:
                    continue  # the last level's callees would never be looked at: not resolved (nor read)
                for call in summary.calls:
                    callee = self._resolve(current.module, current.qualname, call.callee, MAX_DEPTH)
                    if callee is not None and callee not in seen:
                        seen.add(callee)
                        following.append((callee, [*chain, callee]))
            frontier = following
        return None

    def module_binding(self, name: str, path: str | None = None, depth: int = MAX_DEPTH) -> str | None:
        """For a name the file imports from a project module (`from state import scaler`), the qualified name of
        the call that module assigns it at module level (`scaler = torch.amp.GradScaler()`:
        "torch.amp.GradScaler"), through re-exports; for a name the file reads and never binds, the one the
        modules importing it assign it (`_injected_binding`); None when the index cannot tell."""
        path = path or self.path
        index = self._file(path)
        if index is None or depth < 0:
            return None
        imported = index.imports.get(name)
        if imported is None:
            return self._injected_binding(path, index, name, depth)
        if imported[1] is None:
            return None
        module, attribute, level = imported
        target = self._find(self.project.absolute(path, module, level), path)
        record = self._file(target) if target is not None else None
        if record is None:
            return None
        if f":{attribute}" not in record.instances:
            return self.module_binding(attribute, target, depth - 1)  # re-exported (`from .state import scaler`)
        return _qualified_instance(record, attribute)

    def _injected_binding(self, path: str, index: FileIndex, name: str, depth: int) -> str | None:
        """`module_binding` of a name the file reads and never binds (`_free`): the qualified name of the call
        that the modules importing the file assign it at module level (`scaler = torch.amp.GradScaler()` in
        `main.py`), when each one binding it binds it so, to the same call; None otherwise."""
        if depth <= 0 or not self._free(path, index, name):
            return None
        binders = self._binders(path, name)
        found = set()
        for importer, record in binders or ():
            if f":{name}" in record.instances and name not in record.functions and name not in record.classes:
                found.add(_qualified_instance(record, name))
            elif name in record.imports and name not in record.globals:
                found.add(self.module_binding(name, importer, depth - 1))
            else:
                return None  # a def, a class, a value not from a call: not one of the vocabulary's objects
        return found.pop() if len(found) == 1 else None

    def project_runs_backward(self) -> bool:
        """Does a function of the project (this file's included) run a backward itself? Asked of the files
        indexed up front first, then of those known by name (read now, once per run); each file read becomes a
        dependency of a cached result, so a backward added anywhere changes the answer."""
        project = self.project
        for path in [self.path, *sorted(project.indexed), *sorted(set(project.names) - project.indexed)]:
            index = self._file(path)
            if index is not None and any(Effect.BACKWARD in summary.does for summary in index.functions.values()):
                return True
        return False

    def callers(self, target: Target, any_name: bool = False) -> Iterator[CallerSite]:
        """Every call site in the project that the index resolves to `target`; with `any_name`, also those calling
        it by another name (a module's `forward` run by calling the module: `self.attention(q, k)`)."""
        last = target.qualname.rsplit(".", 1)[-1]
        name = last if last != "__call__" and not any_name else None
        self.asked_calls.add(name or "*")
        for path, caller, call, resolved in self._resolved_calls(name):
            if resolved == target:
                yield CallerSite(Target(path, caller or "<module>"), call)

    def _resolved_calls(self, name: str | None) -> tuple:
        """(path, calling function, call, the function it runs) of every call site `calls_named(name)` finds, each
        resolved once per state of the index (a table kept by the project, as `reaches`' answers: what resolving
        read is recorded as read by each view asking), instead of once per question: a module's `forward` asked
        for by every module calling a model once resolved every call of the project again."""
        kept = self.project._resolved.get(name)
        if kept is None:
            asking = ModuleView(self.project, self.path)
            asking._own = self._own
            sites = []
            for path, caller, call in self.project.calls_named(name):
                asking._file(path)
                sites.append((path, caller, call, asking._resolve(path, caller, call.callee, MAX_DEPTH)))
            read = asking.read_modules | ({self.path} if asking.read_own else set())
            kept = self.project._resolved[name] = (tuple(sites), frozenset(read), frozenset(asking.missing),
                                                   frozenset(asking.asked_calls), frozenset(asking.asked_importers),
                                                   asking.asked_wrappers)
        sites, read, missing, calls, importers, wrappers = kept
        if self.path in read:
            self.read_own = True
        self.read_modules.update(read - {self.path})
        self.missing.update(missing)
        self.asked_calls.update(calls)
        self.asked_importers.update(importers)
        self.asked_wrappers = self.asked_wrappers or wrappers
        return sites

    def method_calls(self, method: str, receiver: str) -> list[CallerSite]:
        """Every call site in the project of `<...>.<receiver>.<method>()` (`scaler.update()`,
        `self.scaler.update()` for receiver "scaler"): by the receiver's last name, as a module matches its own
        calls (`ModuleFacts.updates_by_last_name`)."""
        self.asked_calls.add(method)
        found = []
        for path, caller, call in self.project.calls_named(method):
            parts = call.callee.split(".")
            if len(parts) >= 2 and parts[-2] == receiver:
                found.append(CallerSite(Target(path, caller or "<module>"), call))
        return found

    def called_per_iteration(self, target: Target, depth: int = MAX_DEPTH) -> list[CallerSite] | None:
        """The chain of call sites through which the function runs once per iteration of a loop: a call in a
        loop's body, or a call from a function that is itself so called (`depth` callers up). None when no
        such chain is known."""
        frontier: list[tuple[Target, list[CallerSite]]] = [(target, [])]
        seen = {target}
        for _ in range(depth):
            following = []
            for current, chain in frontier:
                for site in self.callers(current):
                    if site.call.in_loop:
                        return [*chain, site]
                    if site.caller not in seen and site.caller.qualname != "<module>":
                        seen.add(site.caller)
                        following.append((site.caller, [*chain, site]))
            frontier = following
        return None


def _text_digest(text: str | None) -> str:
    return text_digest(text) if text is not None else ""


def _qualified_instance(record: FileIndex, name: str) -> str | None:
    """The qualified name of the call the file assigns `name` at module level, through its imports
    (`scaler = amp.GradScaler()` after `from torch import amp`: "torch.amp.GradScaler"); None for a class or
    function of the file itself (not an API the vocabulary names)."""
    callee = record.instances.get(f":{name}")
    if callee is None:
        return None
    head, _, rest = callee.partition(".")
    source = record.imports.get(head)
    if source is None:
        return None
    base = source[0] if source[1] is None else f"{source[0]}.{source[1]}"
    return f"{base}.{rest}" if rest else base


def _held(index: FileIndex, caller: str | None, name: str) -> str | None:
    """The callee whose result the name holds in the function (or, when the function does not assign the name,
    at module level), if the index knows it."""
    local = index.instances.get(f"{caller}:{name}") if caller else None
    if local is not None:
        return local
    if caller and caller in index.functions and name in index.functions[caller].params:
        return None  # a parameter of that name: not the module's object
    return index.instances.get(f":{name}")


def functions_doing(view: ModuleView, fact: str) -> list[Target]:
    """The functions of the view's file that do `fact` themselves."""
    index = view.record(view.path)
    if index is None:
        return []
    return [Target(view.path, qualname) for qualname, summary in index.functions.items() if fact in summary.does]


def line_starts(text: str, word: str) -> Iterator[int]:
    """The start of each line of the text holding `word`, in order (each line once): found by plain substring
    search, much faster than a regex tried at every line start."""
    position = 0
    while True:
        found = text.find(word, position)
        if found == -1:
            return
        yield text.rfind("\n", 0, found) + 1
        position = text.find("\n", found) + 1
        if not position:
            return


@functools.lru_cache(maxsize=16384)
def _statement_table(statement: str) -> tuple[dict, list] | None:
    """The import table (`amplint.index.functions.import_table_of`) of one import statement as `_import_statements`
    finds it in a text (a parenthesized one without its `)`), parsed alone; None when it does not parse so (a
    backslash continues it, or it is not a statement: a docstring's line)."""
    from amplint.index.functions import import_table_of

    if statement.endswith("\\"):
        return None
    for written in (statement, statement + ")"):  # `from m import (a,` ... up to the `)` the span leaves out
        try:
            return import_table_of(ast.parse(written).body)
        except (SyntaxError, ValueError):
            continue
    return None


def _import_statements(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each import statement as the text holds it: its line, or up to `)` when it opens one. The
    lines matching `_IMPORT_STATEMENT` (every one holds `import`), each matched at its start."""
    for line in line_starts(text, "import"):
        match = _IMPORT_STATEMENT.match(text, line)
        if match is None:
            continue
        start = match.end()
        end = text.find("\n", start)
        if text[start:end if end != -1 else None].lstrip(" \t").startswith("("):
            end = text.find(")", start)
        yield match.start(), end if end != -1 else len(text)


def _scaler_wrappers(record: FileIndex) -> set[str]:
    """The classes of the record whose `__init__` builds a GradScaler (`NativeScaler`, an AMP helper)."""
    return {qualname.rsplit(".", 2)[-2] for qualname, summary in record.functions.items()
            if qualname.endswith(".__init__") and Effect.BUILDS_SCALER in summary.does}


def calls_leaving(view: ModuleView, where: str) -> Iterator[tuple[str | None, CallRecord, Target]]:
    """(calling function or None, call, target) of every call of the view's file that runs `where` ("in_region",
    "in_loop", "no_grad") and that the index resolves to a function of the project (of this file too: through
    an object, a `__call__` or a base class, calls the facts layer does not follow)."""
    index = view.record(view.path)
    if index is None:
        return
    sites = [(qualname, call) for qualname, summary in index.functions.items() for call in summary.calls]
    sites += [(None, call) for call in index.module_calls]
    for qualname, call in sites:
        if getattr(call, where):
            target = view.resolve(qualname, call.callee)
            if target is not None:
                yield qualname, call, target


def part_key(part) -> str:
    """The name of what a question across modules reads of a file's tree (`ModuleView.file_part`), as it is kept."""
    return f"{part.__module__}:{part.__qualname__}"


def pack(raw: bytes) -> bytes:
    """A file's bytes as a project keeps them (`ProjectIndex.keep`): compressed, fast."""
    return zlib.compress(raw, 1)


def unpack(packed: bytes) -> bytes:
    return zlib.decompress(packed)


def _record_of(path: str, source, cache=None, screener=None) -> tuple[FileIndex, object]:
    """The record of a file read on demand (`source`: its `SourceText`, None when it cannot be read), and the screen
    decided from the same parse (`index_screened`)."""
    if source is None:
        return FileIndex(), None
    record, ahead = indexed(path, source, cache, screener)
    return record if record is not None else FileIndex(), ahead


def indexed(path: str, source, cache=None, screener=None) -> tuple[FileIndex | None, object]:
    """The record of a file's `SourceText` (from the cache when it has one for these bytes) and, when it is built
    here, the screen decided from the same parse (`index_screened`)."""
    if cache is None or source.raw is None:
        return index_screened(path, source.text, screener)
    built: list = [None]

    def build() -> FileIndex | None:
        record, built[0] = index_screened(path, source.text, screener)
        return record
    return cache.index_record(source.raw, build, source.text), built[0]


def imports_screened(path: str, text: str, screener=None) -> tuple[dict, list, object]:
    """The file's import table (`amplint.index.functions.import_table`; empty when it does not parse) and its
    screen (`index_screened`), from one parse."""
    from amplint.index.functions import import_table
    from amplint.index.summary import Summary

    summary = Summary(text)
    ahead = None
    if screener is not None:
        try:
            ahead = screener(path, text, summary)
        except Exception:  # noqa: BLE001 - a screen that fails here is asked again in phase 2
            ahead = None
    try:
        summary.parse_tree()
    except Exception:  # noqa: BLE001 - unparsable: its record would say nothing either
        return {}, [], ahead
    return (*import_table(summary), ahead)


def index_screened(path: str, text: str, screener=None) -> tuple[FileIndex | None, object]:
    """The file's record, and what the screen decides of it from the same tree (`screener(path, text, summary)`, an
    `amplint.prefilter.Ahead`, or None): one parse for both. The screen asks first, as in phase 2 (where the record
    of a file the index did not take is built from the tree its screen parsed: `ModuleView.provide`)."""
    from amplint.index.functions import index_text
    from amplint.index.summary import Summary

    if screener is None:
        return index_text(text), None
    summary = Summary(text)
    try:
        ahead = screener(path, text, summary)
    except Exception:  # noqa: BLE001 - a screen that fails here is asked again in phase 2
        ahead = None
    return index_text(text, summary), ahead


STANDALONE = "<module>.py"  # the path of a module analysed alone (no file of a project)


def standalone_view(text: str) -> ModuleView:
    """The view of a project holding one module, this text (an index record of it, empty when it does not parse):
    a text analysed alone asks the same questions as a file of a project, and other modules are simply absent."""
    from amplint.index.functions import index_text

    project = ProjectIndex()
    record = index_text(text)
    project.add(STANDALONE, record if record is not None else FileIndex(), name="__main__")
    return project.view(STANDALONE)
