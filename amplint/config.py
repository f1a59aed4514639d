"""Settings: `[tool.amplint]` in the closest pyproject.toml that has the table, or amplint.toml, or --config.

Every key and rule code is checked: an unknown one is an error naming it, never silently ignored.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from amplint import rules as registry
from amplint.facts.versions import parse_version
from amplint.output import FORMAT_NAMES

KNOWN_KEYS = frozenset({
    "select", "extend-select", "ignore", "exclude", "extend-exclude", "per-file-ignores", "output-format",
    "target-torch-version", "force-exclude", "cache-dir", "jobs",
})
LIST_KEYS = ("select", "extend-select", "ignore", "exclude", "extend-exclude")
DEFAULT_EXCLUDE = (
    ".git", ".hg", ".svn", ".bzr", ".venv", "venv", ".tox", ".nox", ".mypy_cache", ".ruff_cache", ".pytest_cache",
    "__pycache__", "build", "dist", "node_modules", "site-packages", ".eggs", "*.egg-info", ".amplint_cache",
    ".ipynb_checkpoints", "__pypackages__", "_build", "buck-out",
)


class ConfigError(Exception):
    """A configuration problem; the message names the file and the offending key or value."""


@dataclass
class Settings:
    select: list[str] | None = None
    extend_select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=lambda: list(DEFAULT_EXCLUDE))
    extend_exclude: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    output_format: str | None = None
    target_torch_version: str | None = None
    force_exclude: bool = False
    cache_dir: str | None = None
    jobs: int | None = None
    root: Path = field(default_factory=Path.cwd)  # the folder of the config file (patterns are relative to it)
    source: Path | None = None  # the config file, if any

    def excluded(self, path: str) -> bool:
        """Does an exclude pattern match this path (its name, or its path relative to the root)?"""
        name = os.path.basename(os.path.normpath(path))
        relative = _relative(path, self.root)
        by_name, by_path = _exclude_matchers(tuple(self.exclude), tuple(self.extend_exclude))
        return by_name(os.path.normcase(name)) is not None or by_path(os.path.normcase(relative)) is not None

    def ignored_for(self, path: str) -> list[str]:
        if not self.per_file_ignores:
            return []
        relative = _relative(path, self.root)
        name = os.path.basename(path)
        ignored: list[str] = []
        for pattern, codes in self.per_file_ignores.items():
            if fnmatch.fnmatch(relative, pattern) or fnmatch.fnmatch(name, pattern):
                ignored.extend(codes)
        return ignored


@functools.lru_cache(maxsize=64)
def _exclude_matchers(exclude: tuple[str, ...], extend_exclude: tuple[str, ...]):
    """All the patterns as one compiled regex per question (a name; a relative path, also as a folder): the
    same answers as `fnmatch` on each pattern in turn, without the loop (discovery asks for every entry)."""
    patterns = (*exclude, *extend_exclude)
    if not patterns:
        return (lambda text: None), (lambda text: None)
    by_name = "|".join(fnmatch.translate(os.path.normcase(p)) for p in patterns)
    by_path = "|".join(fnmatch.translate(os.path.normcase(q)) for p in patterns for q in (p, p.rstrip("/") + "/*"))
    return re.compile(by_name).match, re.compile(by_path).match


@functools.lru_cache(maxsize=16)
def _resolved(root: Path) -> str:
    """The root, resolved, as a string ending in a separator."""
    return os.path.join(str(root.resolve()), "")


def _relative(path: str, root: Path) -> str:
    """The path relative to the root in POSIX form ("." for the root), or the path as given (normalized, POSIX
    form) when it is outside. String operations only: discovery asks for every file and folder."""
    absolute = os.path.abspath(path)
    base = _resolved(root)
    if absolute.startswith(base):
        relative = absolute[len(base):] or "."
    elif absolute == base[:-1]:
        relative = "."
    else:
        relative = os.path.normpath(path)
    return relative.replace(os.sep, "/") if os.sep != "/" else relative


def find_config(start: Path) -> Path | None:
    """amplint.toml, or a pyproject.toml with a [tool.amplint] table, in `start` or the closest parent."""
    for folder in (start, *start.parents):
        candidate = folder / "amplint.toml"
        if candidate.is_file():
            return candidate
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                if "amplint" in _read_toml(candidate).get("tool", {}):
                    return candidate
            except ConfigError:
                return candidate  # report the broken file rather than skip it
    return None


def _read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: invalid TOML: {error}") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror or error}") from None


def load_settings(config: str | None = None, start: Path | None = None) -> Settings:
    path = Path(config) if config else find_config((start or Path.cwd()).resolve())
    if path is None:
        return Settings()
    if not path.is_file():
        raise ConfigError(f"{path}: no such configuration file")
    data = _read_toml(path)
    table = data.get("tool", {}).get("amplint", {}) if path.name == "pyproject.toml" else data
    if path.name != "pyproject.toml" and "tool" in table and "amplint" in table.get("tool", {}):
        table = table["tool"]["amplint"]
    return settings_from_table(table, path)


def settings_from_table(table: dict, path: Path) -> Settings:
    unknown = sorted(set(table) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"{path}: unknown key{'s' if len(unknown) > 1 else ''} in [tool.amplint]: "
                          f"{', '.join(unknown)} (known: {', '.join(sorted(KNOWN_KEYS))})")
    settings = Settings(root=path.parent.resolve(), source=path)
    for key in LIST_KEYS:
        if key in table:
            value = table[key]
            if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
                raise ConfigError(f"{path}: `{key}` must be a list of strings")
            if key == "exclude":
                settings.exclude = value
            else:
                setattr(settings, key.replace("-", "_"), value)
    pfi = table.get("per-file-ignores", {})
    if not isinstance(pfi, dict) or not all(isinstance(v, list) for v in pfi.values()):
        raise ConfigError(f"{path}: `per-file-ignores` must be a table of pattern = [codes]")
    settings.per_file_ignores = pfi
    for key in ("output-format", "target-torch-version", "cache-dir"):
        if key in table:
            if not isinstance(table[key], str):
                raise ConfigError(f"{path}: `{key}` must be a string")
            setattr(settings, key.replace("-", "_"), table[key])
    if settings.output_format is not None and settings.output_format not in FORMAT_NAMES:
        raise ConfigError(f"{path}: unknown `output-format` {settings.output_format!r} "
                          f"(known: {', '.join(FORMAT_NAMES)})")
    if settings.target_torch_version is not None:
        try:
            parse_version(settings.target_torch_version)
        except ValueError as error:
            raise ConfigError(f"{path}: `target-torch-version`: {error}") from None
    if "force-exclude" in table:
        settings.force_exclude = bool(table["force-exclude"])
    if "jobs" in table:
        if not isinstance(table["jobs"], int) or table["jobs"] < 1:
            raise ConfigError(f"{path}: `jobs` must be a positive integer")
        settings.jobs = table["jobs"]
    validate_selectors(settings, str(path))
    return settings


def validate_selectors(settings: Settings, where: str) -> None:
    groups = [("select", settings.select or []), ("extend-select", settings.extend_select),
              ("ignore", settings.ignore)]
    groups += [(f"per-file-ignores[{pattern!r}]", codes) for pattern, codes in settings.per_file_ignores.items()]
    for key, selectors in groups:
        for selector in selectors:
            try:
                registry.matching(selector)
            except registry.UnknownSelector:
                raise ConfigError(f"{where}: unknown rule code or name in `{key}`: {selector!r}") from None
