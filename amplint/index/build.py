"""Building the project index for a run (phase 1).

Every Python file of the run (and beside its files) is known to the index by its module name. A file is indexed
up front when other files' answers may need its calls: when its text holds `INDEX_WORDS` (a GradScaler
construction, whose function's callers may loop), or names a function the index found building a scaler, or a
caller of one (it may call it in a loop): a second round over the remaining files, by plain substring tests.
Any other file is summarised only when an answer needs it: a call resolved into it (`ProjectIndex.record`), or
its own questions, from the tree the screen parsed anyway (`ModuleView.provide`). Most files are never parsed
here.

`index_file` is what a worker runs for one file; `ProjectIndex.add` gathers the records in the main process.
"""

from __future__ import annotations

import os
import re
from typing import Callable, Iterable

from amplint.index.functions import FileIndex, index_text
from amplint.index.project import ProjectIndex, Target

INDEX_WORDS = ("GradScaler",)


def holds_vocabulary(text: str) -> bool:
    """Is the file indexed up front: it may build a GradScaler (its function's callers may loop, AMP004), or open a
    disabled autocast region (its function's callers may run it under an enabled one, AMP006)?"""
    return any(word in text for word in INDEX_WORDS) or ("autocast" in text and _DISABLED.search(text) is not None)


_DISABLED = re.compile(r"enabled\s*=\s*False")  # how a disabled region is written (a positional False: not here)


# Facts whose functions' callers matter to a rule wherever they are, so that the files that may call them are
# indexed too (the second round): a scaler built per call (AMP004: a caller in a loop), a disabled region (AMP006:
# a caller in an enabled region).
CALLED_FACTS = frozenset({"builds_scaler", "disabled_region"})


def index_file(text: str) -> FileIndex | None:
    """The file's record, or None when it holds no AMP vocabulary or does not parse."""
    return index_text(text) if holds_vocabulary(text) else None


def build_index(paths: Iterable[str], read: Callable[[str], str | None]) -> ProjectIndex:
    """The project index of these files, read with `read` (the text, or None when unreadable), serially. The
    parallel runner does the same in its workers (`index_file` per file, then `expand`)."""
    paths = list(paths)
    return gather(paths, [index_file(text) if text is not None else None for text in map(read, paths)], read)


def gather(paths: list[str], records: list, read: Callable[[str], str | None],
           max_size: int = 10 * 1024 * 1024, cache=None) -> ProjectIndex:
    """The project of these files and their phase-1 records (None: known by name only), after the second round
    (`expand`, which reads the others with `read`). `cache`: where records read on demand are kept."""
    project = ProjectIndex(max_size, cache)
    for path, record in zip(paths, records):
        if record is not None:
            project.add(path, record)
        else:
            project.know(path)
    expand(project, {path: read for path in paths if path not in project.indexed})
    return project


def read_text(path: str, max_size: int):
    """The file's `SourceText`, or None when it cannot be read (phase 2 reports why)."""
    from amplint.source import SourceError, read_source

    try:
        return read_source(path, max_size)
    except (SourceError, OSError):
        return None


def read_python(path: str, max_size: int, cache=None) -> tuple[str, FileIndex | None] | None:
    """(text, record) of a Python file for phase 1; None when it cannot be read (phase 2 reports why). The
    record comes from the cache when it has one for these bytes."""
    source = read_text(path, max_size)
    if source is None:
        return None
    if cache is None or not holds_vocabulary(source.text):
        return source.text, index_file(source.text)
    return source.text, cache.index_record(source.raw, lambda: index_text(source.text))


def expand(project: ProjectIndex, others: dict[str, Callable[[str], str | None]]) -> None:
    """The second round: files outside the index that may call an interesting function, or a function that calls
    one (a caller's caller, up to the index's depth), enter it. A file may call a function of another module when
    its text calls the name (`name(`) and an import statement names that module (a part of its dotted name). `others`: path -> how to read it (read once, when first looked at)."""
    from amplint.index.project import MAX_DEPTH

    builders = {Target(path, qualname) for path in project.indexed for qualname in _builders(project, path)}
    wanted = set(builders)
    scanned: set[Target] = set()
    texts: dict[str, str | None] = {}
    called: dict[str, set[str]] = {}  # path -> the names its text calls (`name(`), found once
    for _ in range(MAX_DEPTH):
        wanted |= _callers_of(project, wanted)
        pending = wanted - scanned
        if not pending or not others:
            return
        scanned |= pending
        by_name: dict[str, list[re.Pattern[str]]] = {}
        for target in pending:
            if "." in target.qualname and target not in builders:
                continue  # a method found as a caller: its callers reach it through `self` or an object
            name = target.qualname.rsplit(".", 1)[-1]
            by_name.setdefault(name, []).append(_module_words(project.names.get(target.module, ""), name))
        if not by_name:
            continue
        named = re.compile("|".join(re.escape(name) for name in sorted(by_name, key=len, reverse=True)))
        few = len(by_name) <= 16
        importing = re.compile(r"^[ \t]*(?:from|import)[ \t][^\n]*\b(?:" + "|".join(sorted(
            {re.escape(project.names.get(target.module, "").rsplit(".", 1)[-1] or "__main__") for target in pending}
            | {re.escape(name) for name in by_name})) + r")\b", re.MULTILINE)
        for path in list(others):
            if path not in texts:
                texts[path] = others[path](path)
            text = texts[path]
            if text is None:
                del others[path]
                continue
            if importing.search(text) is None or (few and named.search(text) is None):
                continue  # imports none of their modules, or names none of them: cheaper than finding its calls
            if path not in called:
                called[path] = set(_CALLED.findall(text))
            if any(words.search(text) for name in called[path] & by_name.keys() for words in by_name[name]):
                del others[path]
                record = index_text(text)
                if record is not None:
                    project.add(path, record)


_CALLED = re.compile(r"([A-Za-z_]\w*)\s*\(")  # a name followed by the `(` of a call (or of a def: more, fine)


def _builders(project: ProjectIndex, path: str) -> set[str]:
    """Qualnames of the file's functions whose callers matter (`CALLED_FACTS`; a scaler handed on does not)."""
    return {qualname for qualname, summary in project.files[path].functions.items()
            if summary.does & CALLED_FACTS - ({"builds_scaler"} if "keeps_scaler" in summary.does else set())}


def _callers_of(project: ProjectIndex, targets: set[Target]) -> set[Target]:
    """The indexed functions whose calls the index resolves to one of the targets, outside a loop: their own callers
    decide whether the call repeats (a call in a loop needs no further round)."""
    lasts = {target.qualname.rsplit(".", 1)[-1] for target in targets}
    found = set()
    for path in list(project.indexed):
        view = project.view(path)
        for qualname, summary in project.files[path].functions.items():
            if qualname.split(".")[-1].startswith("test"):
                continue  # a pytest test: pytest calls it, once
            for call in summary.calls:
                last = call.callee.rsplit(".", 1)[-1]
                if (last in lasts or last == call.callee and f"{qualname}:{last}" in project.files[path].instances) \
                        and not call.in_loop and view.resolve(qualname, call.callee) in targets:
                    found.add(Target(path, qualname))
                    break
    return found


def _module_words(module: str, name: str) -> re.Pattern[str]:
    """A regex finding an import statement through which another file can reach the function `name` of `module`:
    one naming the module (its last part: `import engine`, `from proj.training import loop`) or the function
    itself (`from proj.training import train_epoch`, a package's re-export)."""
    last = module.rsplit(".", 1)[-1] or "__main__"
    return re.compile(rf"^[ \t]*(?:from|import)[ \t][^\n]*\b(?:{re.escape(last)}|{re.escape(name)})\b", re.MULTILINE)


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
