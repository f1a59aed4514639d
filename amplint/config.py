"""Settings: `[tool.amplint]` in the closest pyproject.toml that has the table, or amplint.toml, or --config.

Every key and rule code is checked: an unknown one is an error naming it, never silently ignored.
"""

from __future__ import annotations

import codecs
import fnmatch
import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from amplint import rules as registry
from amplint.diagnostics import Severity
from amplint.facts.versions import parse_version
from amplint.output import FORMAT_NAMES
from amplint.output.common import FILE_ERRORS
from amplint.source import DEFAULT_MAX_FILE_SIZE

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
    # Where target_torch_version comes from: the configuration file, "--target-torch-version", or the project's
    # requirement that gives the lowest torch ("torch>=1.13,<2 (pyproject.toml:7)", see infer_target_torch).
    target_torch_source: str | None = None
    torch_below: str | None = None  # the first torch release the project's requirements exclude (inferred only)
    # No target configured: each file's range is inferred from its own project's requirements (`torch_range_for`).
    torch_inferred: bool = False
    force_exclude: bool = False
    respect_gitignore: bool = True  # skip what .gitignore, .ignore and git's excludes exclude (amplint/discovery.py)
    cache_dir: str | None = None
    jobs: int | None = None
    max_file_size: int = DEFAULT_MAX_FILE_SIZE  # bytes: a larger file is not read (AMP901)
    # `[tool.amplint.severity]`: rule selector -> "error" | "warning", as written (see `severity_levels`)
    severity: dict[str, str] = field(default_factory=dict)
    exit_non_zero_on_warning: bool = False  # warnings alone exit 1 (else 0)
    docs_url: str | None = None  # the documentation site reports link to: <docs-url>/rules/CODE/ (None: no links)
    root: Path = field(default_factory=Path.cwd)  # the folder of the config file (patterns are relative to it)
    source: Path | None = None  # the config file, if any
    named: bool = False  # the config file was named (--config), not found by the lookup: it applies to every file
    warnings: list[str] = field(default_factory=list)  # files skipped while looking for the configuration
    # Where each key's value came from, for `--show-settings`: key (as in KEYS) -> "pyproject.toml: [tool.amplint]
    # select", "--select", "inferred from ...". A key not here has its default.
    origins: dict[str, str] = field(default_factory=dict)


    def torch_range_for(self, path: str) -> tuple[str | None, str | None]:
        """The torch releases a file is linted for: (the lowest, the first excluded). A configured target applies
        as it is, and so does a range inferred from the configuration's own folder. Otherwise it is inferred from
        the requirements of the project the file belongs to, the nearest folder at or above the file's with a
        declaration file (amplint/requirements.py `project_root`): a run over several repositories gives each its
        own range, and a file is linted for the same releases whichever folder the run named. Read once per
        folder and project root in a run."""
        from amplint.requirements import has_declarations

        memo = self.__dict__.setdefault("_torch_ranges", {})  # folder -> range, for this run
        if "configured" not in memo:
            memo["configured"] = not self.torch_inferred or self.source is not None and has_declarations(self.root)
        if memo["configured"]:
            return self.target_torch_version, self.torch_below
        folder = os.path.dirname(os.path.abspath(path)) if path != "-" else os.getcwd()
        if folder not in memo:
            reals = self.__dict__.setdefault("_real_folders", {})
            memo[folder] = self._range_at(_real_folder(folder, reals), self.__dict__.setdefault("_real_ranges", {}))
        return memo[folder]

    def _range_at(self, folder: str, memo: dict) -> tuple[str | None, str | None]:
        """The range the project at or above the real `folder` declares, as `requirements.project_root` finds it
        (a folder's declarations first, then a repository's root stops the search); each folder asked once."""
        from amplint.requirements import has_declarations, project_torch, version_text

        if folder in memo:
            return memo[folder]
        above = os.path.dirname(folder)
        if has_declarations(Path(folder)):
            requirement = project_torch([Path(folder)])
            lowest, below = requirement.floor, requirement.below
            found = (version_text(lowest.range.floor) if lowest is not None else None,
                     version_text(below) if below is not None else None)
        elif above == folder or any(os.path.exists(os.path.join(folder, marker)) for marker in (".git", ".hg")):
            found = (None, None)
        else:
            found = self._range_at(above, memo)
        memo[folder] = found
        return found
    def excluded(self, path: str, walked: bool = False) -> bool:
        """Does an exclude pattern match this path (its name, or its path relative to the root)?

        A path given as is is also excluded when it lies inside a folder a pattern names (`--force-exclude` on
        `build/x.py`). A `walked` path was reached by walking a folder whose excluded subfolders the walk has
        already pruned, so only the path itself is matched: a folder named on the command line is linted even
        when a pattern names it or a folder above it (as ruff does; `--force-exclude` skips it before the walk).
        """
        name = os.path.basename(os.path.normpath(path))
        relative = _relative(path, self.root)
        by_name, by_path, by_path_itself = _exclude_matchers(tuple(self.exclude), tuple(self.extend_exclude))
        return by_name(os.path.normcase(name)) is not None or \
            (by_path_itself if walked else by_path)(os.path.normcase(relative)) is not None

    def excluding_pattern(self, path: str) -> tuple[str, str] | None:
        """The first pattern that excludes this path given as is, and its key (`exclude` or `extend-exclude`), to
        tell the user which one; None when none does. One pattern at a time: asked only to explain a skip."""
        for key, patterns in (("exclude", self.exclude), ("extend-exclude", self.extend_exclude)):
            for pattern in patterns:
                if Settings(exclude=[pattern], root=self.root).excluded(path):
                    return pattern, key
        return None

    def set_by(self, key: str, value: object, option: str, extend: bool = False) -> None:
        """Set a key from the command line (`option` is the flag), recording where the value came from. With
        `extend` the option adds to what the configuration gave, and both are named."""
        setattr(self, key.replace("-", "_"), value)
        before = self.origins.get(key)
        self.origins[key] = f"{before}, and {option}" if extend and before else option

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

    def severity_levels(self) -> dict[str, Severity]:
        """Code -> level for the rules whose configured level differs from their default (`resolve_severity`)."""
        return resolve_severity(self.severity)


@functools.lru_cache(maxsize=64)
def _exclude_matchers(exclude: tuple[str, ...], extend_exclude: tuple[str, ...]):
    """All the patterns as one compiled regex per question (a name; a relative path, also inside a folder the
    pattern names; a relative path itself): the same answers as `fnmatch` on each pattern in turn, without the
    loop (discovery asks for every entry). `src/legacy/` names the folder `src/legacy` itself too."""
    patterns = (*exclude, *extend_exclude)
    if not patterns:
        return (lambda text: None), (lambda text: None), (lambda text: None)
    itself = [q for p in patterns for q in dict.fromkeys((p, p.rstrip("/") or p))]
    inside = [p.rstrip("/") + "/*" for p in patterns]
    by_name = "|".join(fnmatch.translate(os.path.normcase(p)) for p in patterns)
    by_path = "|".join(fnmatch.translate(os.path.normcase(q)) for q in (*itself, *inside))
    by_path_itself = "|".join(fnmatch.translate(os.path.normcase(q)) for q in itself)
    return re.compile(by_name).match, re.compile(by_path).match, re.compile(by_path_itself).match


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


def find_config(start: Path, warnings: list[str] | None = None) -> Path | None:
    """amplint.toml, or a pyproject.toml with a [tool.amplint] table, in `start` or the closest parent: the one
    lookup every front end makes for a file, from the file's folder (`settings_for`, `run_start`).

    In one folder amplint.toml wins over pyproject.toml's [tool.amplint] (as ruff.toml over pyproject.toml), and a
    warning says that the table is ignored. A pyproject.toml that cannot be read belongs to some other tool as much
    as to amplint: it is skipped with a warning (appended to `warnings`), unless it has a `[tool.amplint]` header,
    which makes it amplint's file and its problem an error. amplint.toml is always amplint's.
    """
    for folder in (start, *start.parents):
        found = config_in(folder, warnings)
        if found is not None:
            return found
    return None


def config_in(folder: Path, warnings: list[str] | None = None) -> Path | None:
    """The configuration file of this folder itself (see `find_config`), or None."""
    candidate = folder / "amplint.toml"
    if candidate.is_file():
        rival = folder / "pyproject.toml"
        if warnings is not None and rival.is_file() and _names_amplint_table(rival):
            warnings.append(f"{candidate} and the [tool.amplint] table of {rival} both configure amplint: "
                            f"amplint.toml is used and [tool.amplint] is ignored (remove one of them)")
        return candidate
    candidate = folder / "pyproject.toml"
    if candidate.is_file():
        try:
            tool = _read_toml(candidate).get("tool", {})
            if not isinstance(tool, dict):
                raise ConfigError(f"{candidate}: `tool` must be a table, not {_kind(tool)}")
        except ConfigError as error:
            if _names_amplint_table(candidate):
                return candidate  # amplint's own file: report it rather than skip it
            if warnings is not None:
                warnings.append(f"{error}; skipped while looking for [tool.amplint]")
            return None
        if "amplint" in tool:
            return candidate
    return None


def lookup_start(path: str | None, fallback: Path | None = None) -> Path:
    """Where the lookup for the file or folder at `path` starts: a folder itself, a file's folder (whether or not
    it exists yet); `fallback` (else the working directory) for no path (standard input, an untitled buffer)."""
    if not path or path == "-":
        return (fallback or Path.cwd()).resolve()
    where = Path(path)
    return (where if where.is_dir() else where.parent).resolve()


def settings_for(path: str | None, config: str | None = None, fallback: Path | None = None) -> Settings:
    """The settings for the file at `path`, as the editor server and the flake8 plugin read them (and the command
    line, through `run_start` and the same two steps): those of `config` when given, else of the configuration
    closest to the file, with the torch range its project declares (`infer_target_torch`). ConfigError for a
    broken configuration; warnings for the caller to show are in `Settings.warnings`."""
    settings = load_settings(config, lookup_start(path, fallback))
    infer_target_torch(settings, [path] if path and path != "-" else [str(lookup_start(path, fallback))])
    return settings


def run_start(paths: list[str], fallback: Path | None = None) -> Path:
    """Where the command line's lookup for its run-wide options starts (output format, cache, jobs, discovery's
    excludes): the folder of its named paths when their closest configuration is one and the same (each path's
    lookup is `settings_for`'s), else the working directory (`fallback`), as ruff. Each file is linted with the
    configuration closest to it whatever this gives (`configuration_groups`). No path: the working directory."""
    named = [path for path in paths if path and path != "-"] or [None]
    chosen: set[Path | None] = set()
    for path in named:
        try:
            chosen.add(find_config(lookup_start(path, fallback)))
        except ConfigError:
            chosen.add(Path("?"))  # a broken one: reported when it is read
    if len(chosen) > 1:
        return (fallback or Path.cwd()).resolve()
    return lookup_start(named[0], fallback)


def _real_folder(folder: str, reals: dict[str, str]) -> str:
    """`os.path.realpath` of an absolute, normalised folder, through the real folder above it (asked once per
    folder of a run: one look at the folder itself, not one per folder above it)."""
    found = reals.get(folder)
    if found is None:
        above = os.path.dirname(folder)
        if above == folder:
            found = os.path.realpath(folder)
        else:
            candidate = os.path.join(_real_folder(above, reals), os.path.basename(folder))
            found = os.path.realpath(candidate) if os.path.islink(candidate) else candidate
        reals[folder] = found
    return found


def configuration_groups(files: list[str], settings: Settings) -> dict[Path | None, list[str]]:
    """The files of a run by the configuration closest to each (its folder, then each folder above: the editor
    server's and the flake8 plugin's lookup), in the order of `files`: the run's own configuration is the key
    `settings.source` (None: no configuration); a folder below with its own amplint.toml or [tool.amplint] is
    another key. With --config every file is the run's (as ruff). One look per folder; a configuration that
    cannot be read is a key too (its problem is reported when the run reads it)."""
    own = settings.source.resolve() if settings.source is not None else None
    if settings.named:
        return {settings.source: list(files)}
    memo: dict[str, Path | None] = {}  # a folder (absolute, as a string: most files share theirs) -> its closest

    def closest(folder: str) -> Path | None:
        pending = []
        found: Path | None = None
        each = folder
        while True:
            if each in memo:
                found = memo[each]
                break
            pending.append(each)
            try:
                found = config_in(Path(each))
            except ConfigError:
                found = Path(each) / "pyproject.toml"  # amplint's own broken file: read it to report the problem
            except OSError:
                found = None
            if found is not None:
                found = found.resolve()
                break
            above = os.path.dirname(each)
            if above == each:
                break
            each = above
        for each in pending:
            memo[each] = found
        return found

    groups: dict[Path | None, list[str]] = {}
    for name in files:
        found = closest(os.path.dirname(os.path.abspath(name)))
        key = settings.source if found == own or found is None and own is None else found
        if found is None and own is not None:
            key = None  # a file outside the run's configuration's folder, under none: the defaults
        groups.setdefault(key, []).append(name)
    return groups


# A line that opens `[tool.amplint]` (or a table below it), even unclosed, or sets a dotted `tool.amplint.` key.
AMPLINT_TABLE = re.compile(rb"^[ \t]*(?:\[[ \t]*)?tool[ \t]*\.[ \t]*[\"']?amplint(?![\w-])", re.MULTILINE)


def _names_amplint_table(path: Path) -> bool:
    """Does the file's text configure amplint (a broken file cannot be asked through its parsed table)?"""
    from amplint.requirements import MAX_DECLARATION_BYTES
    from amplint.source import SourceError, read_bytes

    try:  # bounded and never blocking, as every configuration read (amplint/requirements.py, `read_toml`)
        return AMPLINT_TABLE.search(read_bytes(path, MAX_DECLARATION_BYTES).removeprefix(codecs.BOM_UTF8)) is not None
    except SourceError:
        return False


def _read_toml(path: Path) -> dict:
    """The file's table (amplint/requirements.py, `read_toml`: a regular file of at most 1 MB, never read
    blocking; a table nested too deeply to parse is invalid TOML), or a ConfigError naming the file."""
    from amplint.requirements import TomlProblem, read_toml

    try:
        return read_toml(path)
    except TomlProblem as error:
        raise ConfigError(f"{path}: {error}") from None


def load_settings(config: str | None = None, start: Path | None = None) -> Settings:
    """The settings of the named file, or of the closest one found; warnings about files skipped on the way are
    in `Settings.warnings` for the caller to print."""
    warnings: list[str] = []
    path = Path(config) if config else find_config((start or Path.cwd()).resolve(), warnings)
    if path is None:
        return Settings(warnings=warnings)
    if not path.is_file():
        raise ConfigError(f"{path}: no such configuration file")
    data = _read_toml(path)
    if path.name == "pyproject.toml":
        tool = data.get("tool", {})
        if not isinstance(tool, dict):
            raise ConfigError(f"{path}: `tool` must be a table, not {_kind(tool)}")
        table = tool.get("amplint", {})
        table_name = "[tool.amplint]"
    else:
        tool = data.get("tool")
        nested = isinstance(tool, dict) and "amplint" in tool
        table, table_name = (tool["amplint"], "[tool.amplint]") if nested else (data, "")
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: `tool.amplint` must be a table, not {_kind(table)}")
    settings = settings_from_table(table, path, table_name)
    settings.warnings = warnings + settings.warnings
    settings.named = bool(config)
    return settings


# Keys and their types ------------------------------------------------------------------------------------------
# Each key names the conversion that checks its value's type; a wrong type is an error naming the key and the
# file. A new key is one line here and a field of Settings (the field is the key with `-` as `_`).


class _WrongType(Exception):
    """The value has the wrong type; the argument says what was expected."""


def _kind(value: object) -> str:
    """A TOML value's type as a user would name it, with the value when it is short."""
    names = {bool: "a boolean", int: "an integer", float: "a float", str: "a string", list: "an array",
             dict: "a table"}
    name = names.get(type(value), "a date or time")
    if not isinstance(value, (bool, int, float, str)):
        return name
    import json  # only a configuration error needs it

    shown = json.dumps(value, ensure_ascii=False)  # TOML spells these as JSON does: true, 5, "false"
    return f"{name} {shown}" if len(shown) <= 40 else name


def _string(value: object) -> str:
    if not isinstance(value, str):
        raise _WrongType("a string")
    return value


def _strings(value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise _WrongType("a list of strings")
    return list(value)


def _boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise _WrongType("true or false")
    return value


def _positive_integer(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _WrongType("a positive integer")
    return value


def _levels_per_selector(value: object) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(level, str) for level in value.values()):
        raise _WrongType('a table of rule = "error" or "warning"')
    return dict(value)


def _codes_per_pattern(value: object) -> dict[str, list[str]]:
    if not isinstance(value, dict) or not all(isinstance(codes, list) and all(isinstance(c, str) for c in codes)
                                              for codes in value.values()):
        raise _WrongType('a table of glob = [codes], such as { "tests/*" = ["AMP005"] }')
    return {pattern: list(codes) for pattern, codes in value.items()}


KEYS = {
    "select": _strings,
    "extend-select": _strings,
    "ignore": _strings,
    "exclude": _strings,
    "extend-exclude": _strings,
    "per-file-ignores": _codes_per_pattern,
    "output-format": _string,
    "target-torch-version": _string,
    "force-exclude": _boolean,
    "respect-gitignore": _boolean,
    "cache-dir": _string,
    "jobs": _positive_integer,
    "max-file-size": _positive_integer,
    "severity": _levels_per_selector,
    "exit-non-zero-on-warning": _boolean,
    "docs-url": _string,
}
KNOWN_KEYS = frozenset(KEYS)


def _did_you_mean(key: object) -> str:
    """` (did you mean `select`?)` for a key written close to a known one (`selct`, `extend_select`), else ""."""
    import difflib

    close = difflib.get_close_matches(str(key).replace("_", "-").lower(), sorted(KNOWN_KEYS), n=1, cutoff=0.75)
    return f" (did you mean `{close[0]}`?)" if close else ""


def settings_from_table(table: dict, path: Path, table_name: str = "[tool.amplint]") -> Settings:
    """The settings a table gives; `table_name` is how the file names it ("" for amplint.toml's top level), for
    the origin of each value (`Settings.origins`)."""
    unknown = sorted(set(table) - KNOWN_KEYS)
    if unknown:
        where = f" in {table_name}" if table_name else ""
        raise ConfigError(f"{path}: unknown key{'s' if len(unknown) > 1 else ''}{where}: "
                          f"{', '.join(key + _did_you_mean(key) for key in unknown)} "
                          f"(known: {', '.join(sorted(KNOWN_KEYS))})")
    settings = Settings(root=path.parent.resolve(), source=path)
    for key, value in table.items():
        try:
            setattr(settings, key.replace("-", "_"), KEYS[key](value))
        except _WrongType as expected:
            shown = _kind(value)
            if key == "per-file-ignores" and isinstance(value, dict):  # a table, but a value in it is wrong
                shown = "a table whose values are not all lists of codes"
            raise ConfigError(f"{path}: `{key}` must be {expected}, not {shown}") from None
        settings.origins[key] = f"{path}: {table_name} {key}" if table_name else f"{path}: {key}"
    if settings.select == []:
        raise ConfigError(f"{path}: `select` is empty, so no rule is selected (remove the key to select every rule)")
    if settings.output_format is not None and settings.output_format not in FORMAT_NAMES:
        raise ConfigError(f"{path}: unknown `output-format` {settings.output_format!r} "
                          f"(known: {', '.join(FORMAT_NAMES)})")
    if settings.target_torch_version is not None:
        check_torch_version(settings.target_torch_version, f"{path}: `target-torch-version`")
        settings.target_torch_source = str(path)
    validate_selectors(settings, str(path))
    try:
        resolve_severity(settings.severity)
    except ValueError as error:
        raise ConfigError(f"{path}: {error}") from None
    return settings


def check_torch_version(text: str, where: str) -> None:
    """A torch version given by the user (the configuration or `--target-torch-version`), or a ConfigError that
    starts with `where`."""
    try:
        parse_version(text)
    except ValueError as error:
        raise ConfigError(f"{where}: {error}") from None


def infer_target_torch(settings: Settings, paths: list[str]) -> None:
    """Without a `target-torch-version` from the configuration or the command line, take the lowest torch the
    project declares (amplint/requirements.py) and the first release it excludes. The project root is the
    configuration's folder, else the nearest folder above the linted paths with a requirement file: what
    --show-settings prints; each file is linted for its own project's range (`Settings.torch_range_for`). No
    torch requirement with a lower bound: nothing is set, every spelling is allowed (as before)."""
    if settings.target_torch_version is not None:
        return
    settings.torch_inferred = True
    from amplint.requirements import project_torch, roots_for, version_text

    requirement = project_torch(roots_for(paths or ["."], settings.root if settings.source is not None else None))
    below = requirement.below
    settings.torch_below = version_text(below) if below is not None else None
    lowest = requirement.floor
    if lowest is not None:
        settings.target_torch_version = version_text(lowest.range.floor)
        settings.target_torch_source = f"{lowest.text} ({lowest.where(Path.cwd())})"
        settings.origins["target-torch-version"] = f"inferred from {settings.target_torch_source}"


def resolve_severity(table: dict[str, str]) -> dict[str, Severity]:
    """The `severity` table as code -> level, for each rule whose level it changes from the rule's default.

    A key is a selector (code, prefix, name or `ALL`); where several match a rule, the narrowest (matching the
    fewest rules) decides, whatever their order: `{ALL = "warning", AMP003 = "error"}`. Two equally narrow keys
    that match a rule and disagree (`AMP003` and `clip-without-unscale`) are an error, as are an unknown level or
    selector. Raises ValueError with a message naming the entry."""
    chosen: dict[str, tuple[int, str, Severity]] = {}  # code -> (breadth, selector, level)
    for selector, text in table.items():
        where = f"`severity.{selector}`"
        try:
            level = Severity(text)
        except ValueError:
            raise ValueError(f'{where} must be "error" or "warning", not {_kind(text)}') from None
        if selector.strip().upper() in FILE_ERRORS:  # files amplint could not analyse
            raise ValueError(f"{where}: {selector} reports a file amplint could not analyse; it is always an error")
        try:
            rules = registry.matching(selector)
        except registry.UnknownSelector:
            raise ValueError(f"unknown rule code or name in `severity`: {selector!r}") from None
        for rule in rules:
            breadth = len(rules)
            previous = chosen.get(rule.code)
            if previous is not None and previous[0] == breadth and previous[2] is not level:
                raise ValueError(f"`severity` sets {rule.code} to both {previous[2].value!r} ({previous[1]}) "
                                 f"and {level.value!r} ({selector})")
            if previous is None or breadth < previous[0]:
                chosen[rule.code] = (breadth, selector, level)
    return {code: level for code, (_, _, level) in chosen.items()
            if level is not registry.REFS_BY_CODE[code].severity}


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


# The resolved configuration, for `amplint check --show-settings` ------------------------------------------------

def describe(settings: Settings) -> str:
    """Every key of KEYS with its resolved value and where the value came from, as TOML a user can paste into
    `[tool.amplint]` (a key with no value is a comment saying what that means), then the rules it enables and
    the level of each. Generated from KEYS, so a new key shows up without a change here."""
    found = f"{settings.source}" if settings.source is not None else "none found, so the defaults apply"
    lines = ["# amplint's resolved configuration: each key, its value, and where the value came from.",
             f"# configuration file: {found}",
             f"# project root: {settings.root} (exclude patterns and cache-dir are relative to it)"]
    for key in KEYS:
        value, meaning = _effective(settings, key)
        origin = settings.origins.get(key, "default")
        where = f"{origin}: {meaning}" if meaning and key not in settings.origins else origin
        if value is None:
            lines.append(f"# {key} is not set: {meaning}")
        else:
            lines.append(f"{key} = {_toml(value)}  # {where}")
        if key == "target-torch-version" and settings.torch_below is not None:
            lines.append(f"# the project's requirements exclude torch {settings.torch_below} and later (inferred)")
    levels = resolve_severity(settings.severity)
    chosen = registry.select(settings.select, settings.ignore, settings.extend_select)
    lines.append(f"# rules enabled ({len(chosen)} of {len(registry.CATALOG)}):")
    for rule in chosen:
        level = levels.get(rule.code, rule.severity)
        changed = f" ({rule.severity.value} by default)" if level is not rule.severity else ""
        lines.append(f"#   {rule.code} {rule.name}: {level.value}{changed}")
    return "\n".join(lines) + "\n"


def _effective(settings: Settings, key: str) -> tuple[object, str]:
    """A key's value as the run uses it, and what an unset one means (empty when the value says it all)."""
    value = getattr(settings, key.replace("-", "_"))
    if value is not None:
        return value, ""
    if key == "select":
        return ["ALL"], "every rule"
    if key == "output-format":
        return "full", ""
    if key == "cache-dir":
        from amplint.cache import default_directory  # the cache module is needed only here

        return str(default_directory(settings)), ".amplint_cache in the project root"
    if key == "jobs":
        return os.cpu_count() or 1, "the number of cores (small runs use one)"
    if key == "docs-url":
        return None, "reports carry no links; `amplint rule CODE` prints a rule's documentation"
    if key == "target-torch-version":
        return None, "no torch requirement with a lower bound was found, so every spelling is allowed"
    return None, "no value"


def _toml(value: object) -> str:
    """A value as TOML writes it: strings quoted, lists in brackets, tables inline."""
    import json  # only --show-settings needs it

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in value.items()) + "}"
    return json.dumps(str(value))
