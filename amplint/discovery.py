"""Which files to lint: explicit files as given, directories walked for Python sources minus excludes."""

from __future__ import annotations

import os
from typing import Callable, Iterator

from amplint.config import Settings

SOURCE_SUFFIXES = (".py", ".pyi", ".ipynb")


def is_virtualenv(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, "pyvenv.cfg"))


def _identity(path: str) -> object:
    """The same for two paths of one file (a symlink and its target, a file named twice): its device and inode,
    one stat (cheaper than resolving every part of the path)."""
    try:
        status = os.stat(path)
    except OSError:
        return os.path.abspath(path)  # missing or unreadable: reported later, once per spelling
    return status.st_dev, status.st_ino


def force_excluded(path: str, settings: Settings) -> bool:
    """Is a path named on the command line skipped? Only with `force_exclude` (the pre-commit hooks set it): a
    file or folder named explicitly is otherwise linted, whatever the excludes say (as ruff does)."""
    return settings.force_exclude and path not in (".", "./") and settings.excluded(path)


def discover(paths: list[str], settings: Settings,
             on_error: Callable[[str, OSError], None] | None = None) -> Iterator[str]:
    """Yield the files to lint, sorted within each argument, each once.

    Explicit file and folder arguments are always linted unless `force_exclude` is set (inside a folder, the
    excludes prune what the walk meets below it); missing paths are yielded too so
    that the caller reports them. Symlinked folders are not followed (no loops). A folder that cannot be listed
    is given to `on_error` with the error (the caller reports it: it may hide any number of files), never
    skipped silently.
    """
    def unlisted(error: OSError) -> None:
        if on_error is not None:
            on_error(os.path.normpath(error.filename) if error.filename else path, error)

    seen: set[object] = set()
    for path in paths:
        if force_excluded(path, settings):
            continue
        if not os.path.isdir(path):
            key = _identity(path)
            if key not in seen:
                seen.add(key)
                yield path
            continue
        for folder, subfolders, files in os.walk(path, onerror=unlisted, followlinks=False):
            subfolders[:] = sorted(
                name for name in subfolders
                if not settings.excluded(os.path.join(folder, name), walked=True)
                and not is_virtualenv(os.path.join(folder, name))
            )
            for name in sorted(files):
                full = os.path.join(folder, name)
                if not name.endswith(SOURCE_SUFFIXES) or settings.excluded(full, walked=True):
                    continue
                key = _identity(full)
                if key not in seen:
                    seen.add(key)
                    yield os.path.normpath(full)
