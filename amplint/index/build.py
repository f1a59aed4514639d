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
from typing import Callable, Iterable

from amplint.index.functions import FileIndex, index_text
from amplint.index.project import ProjectIndex

INDEX_WORDS = ("GradScaler",)
# Facts whose functions' callers matter to a rule wherever they are: a caller in a loop, in a file that may hold
# no AMP vocabulary (AMP004's per-epoch scaler). Callers in a region need no second round: a region is opened by
# a name `autocast`, which puts its file in the index already.
CALLED_FACTS = frozenset({"builds_scaler"})


def holds_vocabulary(text: str) -> bool:
    return any(word in text for word in INDEX_WORDS)


def index_file(text: str) -> FileIndex | None:
    """The file's record, or None when it holds no AMP vocabulary or does not parse."""
    return index_text(text) if holds_vocabulary(text) else None


def interesting_names(project: ProjectIndex) -> set[str]:
    """Last names of the functions whose callers a rule may ask about (`CALLED_FACTS`)."""
    return {qualname.rsplit(".", 1)[-1] for path in project.indexed
            for qualname, summary in project.files[path].functions.items()
            if summary.does & CALLED_FACTS and "keeps_scaler" not in summary.does}


def build_index(paths: Iterable[str], read: Callable[[str], str | None]) -> ProjectIndex:
    """The project index of these files, read with `read` (the text, or None when unreadable), serially. The
    parallel runner does the same in its workers (`index_file` per file, then `expand`)."""
    paths = list(paths)
    project = ProjectIndex()
    for path, record in zip(paths, (index_file(text) if text is not None else None for text in map(read, paths))):
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
    """The second round: files outside the index that name an interesting function, or a function that calls one
    (a caller's caller, up to the index's depth), enter it. `others`: path -> how to read it (read once, when a
    name is first looked for)."""
    from amplint.index.project import MAX_DEPTH

    wanted = interesting_names(project)
    scanned: set[str] = set()
    texts: dict[str, str | None] = {}
    for _ in range(MAX_DEPTH):
        wanted |= {qualname.rsplit(".", 1)[-1] for path in project.indexed
                   for qualname, summary in project.files[path].functions.items()
                   if any(call.callee.rsplit(".", 1)[-1] in wanted for call in summary.calls)}
        names = wanted - scanned
        if not names or not others:
            return
        scanned |= names
        for path in list(others):
            text = texts[path] if path in texts else texts.setdefault(path, others[path](path))
            if text is None:
                del others[path]
            elif any(name in text for name in names):
                del others[path]
                record = index_text(text)
                if record is not None:
                    project.add(path, record)


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
