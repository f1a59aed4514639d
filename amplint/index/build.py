"""Building the project index for a run (phase 1).

A file enters the index when its text holds AMP vocabulary (`INDEX_WORDS`: what makes a function's summary say
anything), or when it names a function the index found doing something a rule asks about across calls (it may
call it, in a loop or a region): a second round over the remaining files, by plain substring tests. Files with
neither are not parsed here; nothing they hold can change an answer of the index.

`index_file` is what a worker runs for one file; `ProjectIndex.add` gathers the records in the main process.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable

from amplint.index.functions import FileIndex, index_text
from amplint.index.project import ProjectIndex

INDEX_WORDS = ("GradScaler", "backward", "clip_grad", "unscale_", "autocast", "no_grad", "inference_mode",
               "step(", "eval(")
# Facts whose functions' callers matter to a rule (a caller in a loop or a region, in any module)
CALLED_FACTS = frozenset({"builds_scaler", "backward", "scaled_backward", "clip", "unscale", "scaler_step",
                          "scaler_update", "step"})


def holds_vocabulary(text: str) -> bool:
    return any(word in text for word in INDEX_WORDS)


def index_file(text: str) -> FileIndex | None:
    """The file's record, or None when it holds no AMP vocabulary or does not parse."""
    return index_text(text) if holds_vocabulary(text) else None


def interesting_names(project: ProjectIndex) -> set[str]:
    """Last names of the functions whose callers a rule may ask about (`CALLED_FACTS`)."""
    return {qualname.rsplit(".", 1)[-1] for index in project.files.values()
            for qualname, summary in index.functions.items() if summary.does & CALLED_FACTS}


def build_index(paths: Iterable[str], read: Callable[[str], str | None]) -> ProjectIndex:
    """The project index of these files, read with `read` (the text, or None when unreadable), serially. The
    parallel runner does the same in its workers (`index_file` per file, then `expand`)."""
    paths = list(paths)
    project = ProjectIndex()
    for path, record in zip(paths, (index_file(text) if text is not None else None for text in map(read, paths))):
        if record is not None:
            project.add(path, record)
    expand(project, {path: read for path in paths if path not in project.files})
    return project


def read_python(path: str, max_size: int, cache=None) -> tuple[str, FileIndex | None] | None:
    """(text, record) of a Python file for phase 1; None when it cannot be read (phase 2 reports why). The
    record comes from the cache when it has one for these bytes."""
    from amplint.source import SourceError, read_source

    try:
        source = read_source(path, max_size)
    except (SourceError, OSError):
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
        wanted |= {qualname.rsplit(".", 1)[-1] for index in project.files.values()
                   for qualname, summary in index.functions.items()
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
    for path in paths:
        folder = os.path.dirname(os.path.abspath(path))
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for name in names:
            if name.endswith((".py", ".pyi")) and os.path.isfile(os.path.join(folder, name)):
                found[os.path.join(folder, name)] = None
    return list(found)
