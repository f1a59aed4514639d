"""Building the project index for a run (phase 1).

Every Python file of the run (and beside its files) is known to the index by its module name. A file is indexed
up front when other files' answers may need its calls: when its text holds `INDEX_WORDS` (a GradScaler
construction, whose function's callers may loop), or names a function the index found building a scaler, or a
caller of one (it may call it in a loop): a second round over the remaining files, by plain substring tests.
Any other file is summarised only when an answer needs it: a call resolved into it (`ProjectIndex.record`), or
its own questions, from the tree the screen parsed anyway (`ModuleView.provide`). Most files are never parsed
here. A file of the run that is parsed here (up front, in the second round, on demand) is screened from the same tree
(`index_screened`, `amplint.prefilter.Ahead`), so that its own screen does not parse it again; and the bytes phase 1
reads of each file are kept, compressed (`ProjectIndex.keep`), for what reads it again.

`index_file` is what a worker runs for one file; `ProjectIndex.add` gathers the records in the main process.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from dataclasses import dataclass
from typing import Callable, Iterable

from amplint import vocabulary as vocab
from amplint.index.functions import FileIndex, index_text
from amplint.vocabulary import Effect
from amplint.index.project import ImportText, ProjectIndex, Target, import_text, indexed, line_starts, pack, unpack

INDEX_WORDS = (vocab.GRAD_SCALER,)


def holds_vocabulary(text: str) -> bool:
    """Is the file indexed up front: it may build a GradScaler (its function's callers may loop, AMP004), or open a
    disabled autocast region (its function's callers may run it under an enabled one, AMP006)?"""
    return any(word in text for word in INDEX_WORDS) or (vocab.AUTOCAST in text and _DISABLED.search(text) is not None) \
        or _steps_without_update(text)


def _steps_without_update(text: str) -> bool:
    """Does the text scale and step (a scaler handed in or imported) and never update: a per-step function whose
    callers' loops matter (AMP010)?"""
    return f".{vocab.SCALE}(" in text and f".{vocab.STEP}(" in text and f".{vocab.UPDATE}(" not in text


_DISABLED = re.compile(r"enabled\s*=\s*False")  # how a disabled region is written (a positional False: not here)


# Facts whose functions' callers matter to a rule wherever they are, so that the files that may call them are
# indexed too (the second round): a scaler built per call (AMP004: a caller in a loop), a disabled region or a
# function decorated `autocast(enabled=False)` (AMP006: a caller in an enabled region, passing a low value).
CALLED_FACTS = frozenset({"builds_scaler", "disabled_region", "autocast_off"})


def index_file(text: str) -> FileIndex | None:
    """The file's record, or None when it holds no AMP vocabulary or does not parse."""
    return index_text(text) if holds_vocabulary(text) else None


def build_index(paths: Iterable[str], read: Callable[[str], str | None]) -> ProjectIndex:
    """The project index of these files, read with `read` (the text, or None when unreadable), serially. The
    parallel runner does the same in its workers (`index_file` per file, then `expand`)."""
    paths = list(paths)
    texts = [read(path) for path in paths]
    by_path = dict(zip(paths, texts))  # each file read once: the second round looks at these texts
    return gather(paths, [index_file(text) if text is not None else None for text in texts],
                  lambda path: _as_source(by_path.get(path)))


def _as_source(text: str | None):
    from amplint.source import SourceText

    return SourceText(text, "utf-8", None) if text is not None else None


def gather(paths: list[str], records: list, read: Callable[[str], object], max_size: int = 10 * 1024 * 1024,
           cache=None, scan: Scan | None = None, texts: list[ImportText | None] | None = None,
           kept: list[bytes | None] | None = None, screens: list | None = None, screener=None) -> ProjectIndex:
    """The project of these files and their phase-1 records (None: known by name only), after the second round
    (`expand`: the others read with `read`, a path's `SourceText` or None, or looked at by `scan`). `cache`: where
    records read on demand, or in the second round, are kept. `texts`: what phase 1's read found of each file's
    import statements (`read_for_index`), kept by the project so that no question reads the file for them again,
    and the second round looks at a file's text only when its import statements can reach a function it asks
    about (`known_first`). `kept`: each file's bytes as phase 1 read them (`pack`), which the project keeps for
    what reads the file again (`ProjectIndex.keep`): the second round here, records on demand, a call site's
    arguments. `screens`: what the screen decided of each file from the tree its record was built from
    (`index_screened`), kept for the file's own screen; `screener` decides it where the project builds a record
    later (the second round here, a record on demand)."""
    project = ProjectIndex(max_size, cache)
    project.screener = screener
    texts = texts if texts is not None else [None] * len(paths)
    for path, record, text, packed, ahead in zip(paths, records, texts, kept or [None] * len(paths),
                                                 screens or [None] * len(paths), strict=True):
        if record is not None:
            project.add(path, record, text=text)
            project.screen(path, ahead)
        else:
            project.know(path)
            if text is not None:
                project.texts[os.path.abspath(path)] = text
        project.keep(path, packed)

    def source(path: str):
        return packed_source(project.kept(path), path, read)
    expand(project, [path for path in paths if path not in project.indexed],
           known_first(project, scan or local_scan(source, cache, screener)))
    return project


def kept_bytes() -> int:
    """How many compressed bytes of the files read a project keeps (`KEPT_BYTES`, as it is now)."""
    from amplint.index import project

    return project.KEPT_BYTES


def read_text(path: str, max_size: int):
    """The file's `SourceText`, or None when it cannot be read (phase 2 reports why)."""
    from amplint.source import SourceError, read_source

    try:
        return read_source(path, max_size)
    except (SourceError, OSError):
        return None


def read_for_index(path: str, max_size: int, cache=None, keep: bool = False,
                   screener=None) -> tuple[FileIndex | None, ImportText, bytes | None, object] | None:
    """(record, import statements, bytes, screen) of a Python file for phase 1, from its one read; None when it
    cannot be read (phase 2 reports why). The record comes from the cache when it has one for these bytes; the
    words of the lines of import statements (`import_words`, what the second round looks at first) are kept for a
    file without a record; with `keep`, its bytes too (`pack`: for the project to keep, `ProjectIndex.keep`); the
    screen is what `screener` decides from the tree the record is built from (`index_screened`), or None."""
    source = read_text(path, max_size)
    if source is None:
        return None
    text = source.text
    record, ahead = indexed(path, source, cache, screener) if holds_vocabulary(text) else (None, None)
    return (record, import_text(text, None if record is not None else tuple(import_words(text))),
            pack(source.raw) if keep and source.raw is not None else None, ahead)


def packed_source(packed: bytes | None, path: str, read: Callable[[str], object]):
    """A file's `SourceText` from its kept bytes (`pack`), else `read(path)`; None when it cannot be decoded."""
    if packed is None:
        return read(path)
    from amplint.source import SourceError, decode_source

    try:
        return decode_source(unpack(packed))
    except SourceError:
        return None


@dataclass(frozen=True)
class Round:
    """What one round of `expand` looks for in a file outside the index: plain words and patterns, so that a worker
    process can look (`scan_files`). A file matches when an import statement names one of the round's modules or
    functions (`importing`: words one of which the line of an import statement holds), its text names one of the
    functions (`named`, asked when they are few: cheaper than finding its calls), and it calls one of them by name
    (`name(`) with an import statement through which that function can be reached (`reaching`: name -> the words,
    one set per function of that name, `_module_words`)."""

    importing: frozenset[str]
    named: str | None
    reaching: tuple[tuple[str, tuple[frozenset[str], ...]], ...]

    def matches(self, text: str, called: Callable[[], set[str]], imported: Callable[[], set[str]],
                renamed: Callable[[], set[str]]) -> bool:
        """`called()`: the names the text calls (`_CALLED`); `imported()`: the words of its import statements'
        lines (`import_words`); `renamed()`: the names written before ` as ` (`_RENAMED`); each found when
        first needed."""
        words = imported()
        if self.importing.isdisjoint(words) or \
                (self.named is not None and _compiled(self.named).search(text) is None):
            return False
        names = called()
        return any(not reach.isdisjoint(words) for name, reaches in self.reaching
                   if name in names or name in renamed()
                   for reach in reaches)  # `from m import name as g`: its calls are `g(`


_IMPORT_LINE = re.compile(r"^[ \t]*(?:from|import)[ \t]([^\n]*)", re.MULTILINE)
_WORD = re.compile(r"\w+")
# `name as g` (in an import statement, or anywhere: more, fine). The lookbehind finds what the pattern without it
# finds (a match cannot start inside a word: the word's first character was tried first with the same rest) at
# a third of the cost: the engine no longer runs `\w+` from every character of every word.
_RENAMED = re.compile(r"(?<!\w)(\w+)[ \t]+as[ \t]")


def import_words(text: str) -> set[str]:
    """The words (`\\w+`) on the lines of the text's import statements, after `from`/`import`: a module or a name
    is named by an import statement when its words hold it. (The lines matching `_IMPORT_LINE`, each holds one
    of the two words: found by substring search, each matched at its start.)"""
    found: set[str] = set()
    intern = sys.intern
    for line in sorted({*line_starts(text, "import"), *line_starts(text, "from")}):
        match = _IMPORT_LINE.match(text, line)
        if match is not None:
            found.update(intern(word) for word in _WORD.findall(text, match.start(1), match.end(1)))
    return found


def called_names(text: str) -> set[str]:
    """The names `_CALLED` finds in the text (each name followed by the `(` of a call), found from the end: the
    reversed text searched for `(` (a literal, which the regex engine scans for fast) and the name before it;
    the name starts where `_CALLED`'s would (the leftmost ASCII letter or `_` of the word not preceded by one)."""
    if "(" not in text:
        return set()
    return {name[::-1] for name in _CALLED_BACKWARDS.findall(text[::-1])}


def renamed_names(text: str) -> set[str]:
    """The names `_RENAMED` finds in the text (`name as`), asked only where ` as ` occurs: the word before it
    matched there with `_RENAMED` itself, in order and without overlapping a previous match, as `findall` does."""
    found: set[str] = set()
    last = 0  # the end of the previous match: `findall` looks on from there
    position = 0
    while True:
        occurrence = _AS.search(text, position)
        if occurrence is None:
            return found
        position = occurrence.start() + 3  # occurrences may overlap (`x as as y`)
        end = occurrence.start()
        while end > 0 and text[end - 1] in " \t":
            end -= 1
        word, window = None, 64
        while True:  # the word ending there (looked for in a window of the text, widened for a long word)
            low = max(0, end - window)
            word = _WORD_END.search(text, low, end)
            if word is None or word.start() > low or low == 0:
                break
            window *= 4
        if word is None or word.start() < last:
            continue
        match = _RENAMED.match(text, word.start())
        if match is not None:
            found.add(match.group(1))
            last = match.end()


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.MULTILINE)


# A file looked at in a round: None when it cannot be read (it is left out of later rounds), False when it does not
# match, else (its record, its screen): it enters the index (a record of None: it does not parse, and is left out),
# and the project keeps its screen (`ProjectIndex.screen`).
Found = bool | tuple[FileIndex | None, object] | None
Scan = Callable[[list[str], Round], list[Found]]


def scan_files(paths: list[str], found: Round, read: Callable[[str], object], cache=None,
               texts: dict | None = None, called: dict | None = None, imported: dict | None = None,
               renamed: dict | None = None, screener=None) -> list[Found]:
    """Each file's `Found` for one round. `read(path)`: its `SourceText`, or None; `texts`, `called`: what earlier
    rounds read (kept by the caller), so that a file is read and its calls found once. A file that matches is
    summarised (`index_text`; its record kept in `cache` by content, as phase 1's), and screened from the same
    tree by `screener` (`index_screened`: the second item of its `Found`)."""
    texts = {} if texts is None else texts
    called = {} if called is None else called
    imported = {} if imported is None else imported
    renamed = {} if renamed is None else renamed
    results: list[Found] = []
    for path in paths:
        if path not in texts:
            texts[path] = read(path)
        source = texts[path]
        if source is None:
            results.append(None)
            continue
        text = source.text

        def calls(path=path, text=text) -> set[str]:
            if path not in called:
                called[path] = called_names(text)
            return called[path]

        def words(path=path, text=text) -> set[str]:
            if path not in imported:
                imported[path] = import_words(text)
            return imported[path]

        def aliased(path=path, text=text) -> set[str]:
            if path not in renamed:
                renamed[path] = renamed_names(text)
            return renamed[path]

        if not found.matches(text, calls, words, aliased):
            results.append(False)
        else:
            results.append(indexed(path, source, cache, screener))
    return results


def local_scan(read: Callable[[str], object], cache=None, screener=None) -> Scan:
    """`scan_files` in this process, each file read once for all rounds."""
    texts: dict = {}
    called: dict = {}
    imported: dict = {}
    renamed: dict = {}
    return lambda paths, found: scan_files(paths, found, read, cache, texts, called, imported, renamed, screener)


def known_first(project: ProjectIndex, scan: Scan) -> Scan:
    """`scan`, asked only of the files whose text it must see: a file whose import statements' words phase 1 kept
    (`ImportText.lines`) and none of which the round looks for (`Round.importing`: the first thing a round asks,
    `Round.matches`) does not match, and is not read again."""
    def known(paths: list[str], found: Round) -> list[Found]:
        results: list[Found | None] = [None] * len(paths)
        unknown: list[int] = []
        for position, path in enumerate(paths):
            text = project.texts.get(os.path.abspath(path))
            if text is not None and text.lines is not None and found.importing.isdisjoint(text.lines):
                results[position] = False
            else:
                unknown.append(position)
        if unknown:
            for position, result in zip(unknown, scan([paths[i] for i in unknown], found), strict=True):
                results[position] = result
        return results
    return known


def expand(project: ProjectIndex, others: Iterable[str], scan: Scan) -> None:
    """The second round: files outside the index that may call an interesting function, or a function that calls
    one (a caller's caller, up to the index's depth), enter it. A file may call a function of another module when
    its text calls the name (`name(`) and an import statement names that module (a part of its dotted name), or
    the function: `Round`. `others`: the paths of the files outside the index; `scan` looks at them for a round
    (`local_scan`, or the run's worker processes)."""
    from amplint.index.project import MAX_DEPTH

    others = list(others)
    builders = {Target(path, qualname) for path in project.indexed for qualname in _builders(project, path)}
    wanted = set(builders)
    scanned: set[Target] = set()
    for _ in range(MAX_DEPTH):
        wanted |= _callers_of(project, wanted)
        pending = wanted - scanned
        if not pending or not others:
            return
        scanned |= pending
        by_name: dict[str, list[str]] = {}
        for target in pending:
            name = target.qualname.rsplit(".", 1)[-1]
            if "." in target.qualname and name in CALLED_AS_OBJECT:
                name = target.qualname.rsplit(".", 2)[-2]  # a module's `forward` runs when the module is called: files
                # building one of its class (`encoder = Encoder(...)`, then `encoder(x)`) may run it
            elif "." in target.qualname and target not in builders:
                continue  # a method found as a caller: its callers reach it through `self` or an object
            by_name.setdefault(name, []).append(_module_words(project.names.get(target.module, ""), name))
        if not by_name:
            continue
        importing = frozenset({project.names.get(target.module, "").rsplit(".", 1)[-1] or "__main__"
                               for target in pending} | set(by_name))
        named = "|".join(re.escape(name) for name in sorted(by_name, key=len, reverse=True))
        found = Round(importing, named if len(by_name) <= 16 else None,
                      tuple((name, tuple(patterns)) for name, patterns in sorted(by_name.items())))
        remaining = []
        for path, result in zip(others, scan(others, found), strict=True):
            if result is False:
                remaining.append(path)
            elif result is not None and result[0] is not None:
                project.add(path, result[0], text=project.texts.get(os.path.abspath(path)), same_bytes=True)
                project.screen(path, result[1] if len(result) > 1 else None)
        others = remaining


# A name followed by the `(` of a call (or of a def: more, fine); the lookbehind as `_RENAMED`'s (a letter after a
# digit still starts a name, as without it).
_CALLED = re.compile(r"(?<![A-Za-z_])([A-Za-z_]\w*)\s*\(")
# `_CALLED` on the reversed text: `(`, spaces, then the name backwards up to its first character (an ASCII letter or
# `_` not preceded by one: the greedy `\w*` gives it back from the word's far end). `called_names`.
_CALLED_BACKWARDS = re.compile(r"\(\s*(\w*[A-Za-z_])(?![A-Za-z_])")
_AS = re.compile(r"[ \t]as[ \t]")  # where `_RENAMED` can match: `renamed_names`
_WORD_END = re.compile(r"\w+\Z")


def _builders(project: ProjectIndex, path: str) -> set[str]:
    """Qualnames of the file's functions whose callers matter (`CALLED_FACTS`; a scaler handed on does not) and can
    be found: not an `__init__`, which runs as its class (`Cls(...)`), a call the index does not resolve to it (a
    class building a scaler is known by its names instead: `ProjectIndex.scaler_wrapper_names`)."""
    return {qualname for qualname, summary in project.files[path].functions.items()
            if not qualname.endswith(".__init__")
            and (summary.does & CALLED_FACTS - ({"builds_scaler"} if "keeps_scaler" in summary.does else set())
                 or _per_step(summary))}


def _per_step(summary) -> bool:
    """A function that steps a scaler once per call and neither updates it nor loops (AMP010 asks whether its
    callers call it in a loop), or one that makes a model half and steps nothing (AMP012 asks whether its callers
    step a scaler)."""
    if Effect.HALF_MODEL in summary.does and Effect.SCALER_STEP not in summary.does:
        return True  # a factory making a model half: a caller may step its optimizer through a scaler (AMP012)
    return Effect.SCALER_STEP in summary.does and not summary.does & {Effect.SCALER_UPDATE, Effect.LOOP}


def _callers_of(project: ProjectIndex, targets: set[Target]) -> set[Target]:
    """The indexed functions whose calls the index resolves to one of the targets, outside a loop: their own callers
    decide whether the call repeats (a call in a loop needs no further round)."""
    lasts = {target.qualname.rsplit(".", 1)[-1] for target in targets}
    found = set()
    for path in list(project.indexed):
        view = project.view(path)
        instances = project.files[path].instances
        for qualname, summary in project.files[path].functions.items():
            if qualname.split(".")[-1].startswith("test"):
                continue  # a pytest test: pytest calls it, once
            owner = qualname.split(".")[0] if "." in qualname else None
            for call in summary.calls:
                last = call.callee.rsplit(".", 1)[-1]
                imported = project.files[path].imports.get(last)
                if (last in lasts or last == call.callee and f"{qualname}:{last}" in instances
                        or owner is not None and call.callee == f"self.{last}" and f"{owner}.{last}" in instances
                        or imported is not None and imported[1] in lasts) \
                        and not call.in_loop and view.resolve(qualname, call.callee) in targets:
                    found.add(Target(path, qualname))  # by name, or an object it holds called (`self.block(x)`)
                    break
    return found


CALLED_AS_OBJECT = ("forward", "__call__")  # methods run by calling an object of their class


def _module_words(module: str, name: str) -> frozenset[str]:
    """The words one of which an import statement through which another file can reach the function `name` of
    `module` holds: the module's (its last part: `import engine`, `from proj.training import loop`) or the
    function's own (`from proj.training import train_epoch`, a package's re-export)."""
    return frozenset({module.rsplit(".", 1)[-1] or "__main__", name})


def sibling_files(paths: Iterable[str]) -> list[str]:
    """The Python files beside the given ones (the modules a script imports by name), for a run given files:
    their folders, not recursively."""
    found: dict[str, None] = {}
    for folder in dict.fromkeys(os.path.dirname(os.path.abspath(path)) for path in paths):
        try:
            entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.name.endswith((".py", ".pyi")) and entry.is_file():
                    found[entry.path] = None
            except OSError:
                continue
    return list(found)
