"""Which files to lint: explicit files as given, directories walked for Python sources minus excludes and, with
`respect-gitignore` (the default), minus what the ignore files exclude.

The ignore files, as ruff and ripgrep read them: `.ignore` files anywhere; inside a git repository (a `.git` in the
walked folder or above it) also `.gitignore` files, the repository's `.git/info/exclude` and git's global excludes
file (`core.excludesFile`, by default `$XDG_CONFIG_HOME/git/ignore`). Outside a git repository `.gitignore` files
mean nothing (git does not read them there, nor does ruff). Each file's patterns are matched by `pathspec`, with
git's semantics, against paths relative to the file's folder; a deeper file wins over a shallower one, a `.ignore`
over any `.gitignore`, a `.gitignore` over `info/exclude`, which wins over the global file; within a file the last
matching pattern wins (`!keep.py` re-includes). A path named on the command line is linted whatever they say.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Iterator

from amplint.config import Settings

GITIGNORE, IGNORE = ".gitignore", ".ignore"
MAX_IGNORE_FILE_BYTES = 1 << 20  # an ignore file larger than this is not read (nor is anything but a regular file)

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
    excludes and, with `respect_gitignore`, the ignore files prune what the walk meets below it: `Ignores`);
    missing paths are yielded too so
    that the caller reports them. Symlinked folders are not followed (no loops). A folder that cannot be listed
    is given to `on_error` with the error (the caller reports it: it may hide any number of files), never
    skipped silently.
    """
    def unlisted(error: OSError) -> None:
        if on_error is not None:
            on_error(os.path.normpath(error.filename) if error.filename else path, error)

    seen: set[object] = set()
    respect = getattr(settings, "respect_gitignore", True)
    for path in paths:
        if force_excluded(path, settings):
            continue
        if not os.path.isdir(path):
            key = _identity(path)
            if key not in seen:
                seen.add(key)
                yield path
            continue
        parents: dict[str, Ignores] = {}  # a subfolder still to walk -> the ignore files in force in its folder
        for folder, subfolders, files in os.walk(path, onerror=unlisted, followlinks=False):
            here = None
            if respect:
                parent = parents.pop(folder, None)
                if parent is None:  # where the walk starts
                    start = Ignores.above(folder, settings.root)
                    here = start.child(start.folder, files)
                else:
                    here = parent.child(os.path.join(parent.folder, os.path.basename(folder)), files)
            subfolders[:] = sorted(
                name for name in subfolders
                if not settings.excluded(os.path.join(folder, name), walked=True)
                and not is_virtualenv(os.path.join(folder, name))
                and not (here is not None and here.ignored(name, folder=True))
            )
            if here is not None:
                parents.update((os.path.join(folder, name), here) for name in subfolders)
            for name in sorted(files):
                full = os.path.join(folder, name)
                if not name.endswith(SOURCE_SUFFIXES) or settings.excluded(full, walked=True):
                    continue
                if here is not None and here.ignored(name, folder=False):
                    continue
                key = _identity(full)
                if key not in seen:
                    seen.add(key)
                    yield os.path.normpath(full)


# The ignore files ---------------------------------------------------------------------------------------------

Level = tuple  # (the absolute folder its patterns are relative to, a pathspec.GitIgnoreSpec)


class Ignores:
    """The ignore files in force in one folder of the walk: the `.ignore` levels and the git levels, each deepest
    (strongest) first. A folder's object is made from its parent's and the names of its files, so each ignore
    file is read once per run."""

    __slots__ = ("folder", "ignore", "git", "repository")

    def __init__(self, folder: str, ignore: tuple[Level, ...], git: tuple[Level, ...], repository: str | None):
        self.folder = folder  # absolute
        self.ignore = ignore
        self.git = git  # the .gitignore files, then info/exclude, then the global excludes file
        self.repository = repository  # the repository's top folder (None: outside any, no git levels)

    @classmethod
    def above(cls, folder: str, root) -> Ignores:
        """What the ignore files of the folders above `folder` say, where a walk starts: those between it and the
        top of its repository (outside a repository: the project root, when `folder` lies below it). An ignore
        file that excludes `folder` itself is set aside: a folder named on the command line is linted."""
        start = os.path.abspath(folder)
        repository = repository_of(start)
        top = repository
        if top is None:
            project = os.path.abspath(str(root))
            top = project if _below(start, project) else start
        chain = []
        directory = start
        while directory != top:
            parent = os.path.dirname(directory)
            if parent == directory:  # `top` is not above `start` after all
                chain = []
                break
            chain.append(parent)
            directory = parent
        ignore: list[Level] = []
        git: list[Level] = []
        if repository is not None:
            git.extend(_git_levels(repository))
        for directory in reversed(chain):  # from the top down: each deeper level goes first
            names = _ignore_files_in(directory)
            _add_levels(directory, names, ignore, git, repository is not None)
        return cls(start, tuple(level for level in reversed(ignore) if not _excludes(level, start)),
                   tuple(level for level in reversed(git) if not _excludes(level, start)), repository)

    def child(self, folder: str, files: list[str]) -> Ignores:
        """The ignore files in force in `folder` (absolute: this one's subfolder, or this folder itself where the
        walk starts), given the names of the files in it."""
        names = [name for name in (IGNORE, GITIGNORE) if name in files]
        if not names:
            return self if folder == self.folder else Ignores(folder, self.ignore, self.git, self.repository)
        ignore, git = list(reversed(self.ignore)), list(reversed(self.git))
        _add_levels(folder, names, ignore, git, self.repository is not None)
        return Ignores(folder, tuple(reversed(ignore)), tuple(reversed(git)), self.repository)

    def ignored(self, name: str, folder: bool) -> bool:
        """Is the entry `name` of this folder (a subfolder when `folder`) excluded by the ignore files?"""
        if not (self.ignore or self.git):
            return False
        path = os.path.join(self.folder, name)
        for levels in (self.ignore, self.git):
            for base, spec in levels:
                relative = path[len(base) + 1:] if base != os.sep else path[1:]
                if os.sep != "/":
                    relative = relative.replace(os.sep, "/")
                verdict = spec.check_file(relative + "/" if folder else relative).include
                if verdict is not None:
                    return verdict
        return False


def _below(path: str, folder: str) -> bool:
    return path == folder or path.startswith(os.path.join(folder, ""))


def _excludes(level: Level, path: str) -> bool:
    """Does this level exclude the folder `path` (below its base) itself?"""
    base, spec = level
    relative = path[len(base) + 1:].replace(os.sep, "/")
    return bool(relative) and spec.check_file(relative + "/").include is True


def _ignore_files_in(directory: str) -> list[str]:
    return [name for name in (IGNORE, GITIGNORE) if os.path.isfile(os.path.join(directory, name))]


def _add_levels(directory: str, names: list[str], ignore: list[Level], git: list[Level], in_repository: bool) -> None:
    """Append the levels of `directory`'s ignore files (`names`) to the lists (weakest first): `.ignore` always,
    `.gitignore` only inside a repository."""
    for name, into in ((IGNORE, ignore), (GITIGNORE, git)):
        if name in names and (name == IGNORE or in_repository):
            spec = _spec(os.path.join(directory, name))
            if spec is not None:
                into.append((directory, spec))


def _spec(path: str):
    """The patterns of one ignore file (None when it cannot be read or holds none)."""
    from amplint.source import SourceError, read_bytes

    try:
        text = read_bytes(path, MAX_IGNORE_FILE_BYTES).decode("utf-8", errors="replace")
    except SourceError:
        return None
    try:
        import pathspec  # only where an ignore file is found: a run on named files never loads it
    except ImportError:  # a dependency of the package, absent where amplint runs from its sources alone
        _say_once("amplint: warning: respect-gitignore needs the `pathspec` package (pip install pathspec); "
                  "ignore files are not applied in this run")
        return None
    spec = pathspec.GitIgnoreSpec.from_lines(text.splitlines())
    return spec if spec.patterns else None


_SAID: set[str] = set()


def _say_once(message: str) -> None:
    if message not in _SAID:
        _SAID.add(message)
        print(message, file=sys.stderr)


def repository_of(folder: str) -> str | None:
    """The top folder of the git repository `folder` is in (the nearest folder with a `.git`), or None."""
    directory = folder
    while True:
        if os.path.exists(os.path.join(directory, ".git")):
            return directory
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def _git_directory(repository: str) -> str | None:
    """The repository's git folder: `.git`, or where a `.git` file points (a worktree, a submodule); for a
    worktree, the common folder that holds `info/exclude`."""
    dot_git = os.path.join(repository, ".git")
    if os.path.isdir(dot_git):
        return dot_git
    try:
        with open(dot_git, encoding="utf-8", errors="replace") as handle:
            first = handle.readline().strip()
    except OSError:
        return None
    if not first.startswith("gitdir:"):
        return None
    directory = os.path.join(repository, first[len("gitdir:"):].strip())
    try:
        with open(os.path.join(directory, "commondir"), encoding="utf-8", errors="replace") as handle:
            directory = os.path.join(directory, handle.readline().strip())
    except OSError:
        pass
    return os.path.normpath(directory)


def _git_levels(repository: str) -> list[Level]:
    """The repository-wide levels, weakest first: the global excludes file, then `.git/info/exclude`."""
    levels: list[Level] = []
    git_directory = _git_directory(repository)
    for path in (global_excludes_file(repository, git_directory),
                 os.path.join(git_directory, "info", "exclude") if git_directory else None):
        if path is not None and os.path.isfile(path):
            spec = _spec(path)
            if spec is not None:
                levels.append((repository, spec))
    return levels


def global_excludes_file(repository: str | None = None, git_directory: str | None = None) -> str | None:
    """git's global excludes file: `core.excludesFile` from the system, global and repository configuration
    (the last that sets it wins), else `$XDG_CONFIG_HOME/git/ignore` (`~/.config/git/ignore`)."""
    home = os.path.expanduser("~")
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    configs = ["/etc/gitconfig", os.path.join(xdg, "git", "config"),
               os.environ.get("GIT_CONFIG_GLOBAL") or os.path.join(home, ".gitconfig")]
    if git_directory is not None:
        configs.append(os.path.join(git_directory, "config"))
    chosen = None
    for config in configs:
        value = _core_excludes_file(config)
        if value is not None:
            chosen = value
    if chosen is None:
        return os.path.join(xdg, "git", "ignore")
    chosen = os.path.expanduser(chosen)
    return chosen if os.path.isabs(chosen) or repository is None else os.path.join(repository, chosen)


def _core_excludes_file(config: str) -> str | None:
    """`excludesFile` of the `[core]` section of one git configuration file, as written (None: not set)."""
    try:
        with open(config, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    section, value = "", None
    for line in lines:
        text = line.strip()
        if not text or text[0] in "#;":
            continue
        if text.startswith("["):
            section = text[1:text.find("]")].strip().lower() if "]" in text else ""
            text = text[text.find("]") + 1:].strip() if "]" in text else ""
            if not text:
                continue
        if section != "core" or "=" not in text:
            continue
        key, _, written = text.partition("=")
        if key.strip().lower() == "excludesfile":
            written = written.strip()
            if len(written) >= 2 and written[0] == written[-1] == '"':
                written = written[1:-1]
            value = written
    return value
