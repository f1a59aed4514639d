"""The torch versions a project declares it supports, read from its requirement files.

When neither the configuration nor the command line gives `target-torch-version`, the project's own
declarations say which torch its code must run on, and so which spellings a fix may write (a safe fix never
uses an API newer than the oldest supported torch). Read, in the project root:

- pyproject.toml: `[project] dependencies`, `[project.optional-dependencies]`, `[dependency-groups]`, and
  Poetry's `[tool.poetry.dependencies]` (with its groups; `^`/`~` constraints); Pipfile's `[packages]`;
- requirements*.txt (and requirements/*.txt), with the files they include (`-r`/`--requirement`, cycles guarded);
- setup.cfg: `[options] install_requires` and `[options.extras_require]` (configparser);
- setup.py: the literal `install_requires`/`extras_require` of a `setup(...)` call (stdlib `ast`; never run);
- environment.yml / environment.yaml: conda's `dependencies` list and its `pip:` sub-list (a small hand parser:
  amplint depends on libcst and click only, so no YAML library, and no `packaging` for the specifiers).

Each torch requirement gives a range: the floor is the lowest version it allows (`>=`, `~=`, `==`, `===`; `>V`
counts as V: a later patch release adds no API), the ceiling the first version it excludes (`<`, `<=`, `==`,
`~=`, `==V.*`). `!=` and environment markers narrow nothing here: every line counts, whatever its marker, since
the code must run wherever any of them installs it. Several requirements (several files, extras, alternatives)
are a union: the lowest floor, the highest ceiling (none when one of them has none). A requirement without a
floor (`torch`, `torch<3`, a URL) says nothing about the floor; no torch requirement at all gives no floor.
Only release numbers count (as in `amplint.facts.versions`): `2.4.0rc1` and `2.4.0+cu121` are 2.4.0.
"""

from __future__ import annotations

import ast
import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

Version = tuple[int, int, int]

PIP_NAMES = frozenset({"torch"})
CONDA_NAMES = frozenset({"torch", "pytorch", "pytorch-cpu", "pytorch-gpu"})  # the last two pin pytorch's version
REQUIREMENT_GLOBS = ("requirements*.txt", "requirements/*.txt")
MAX_INCLUDES = 64  # requirement files followed through -r, per project

_NAME = re.compile(r"\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*")
_EXTRAS = re.compile(r"\[[^\]]*\]\s*")
_CLAUSE = re.compile(r"\s*(~=|===|==|!=|<=|>=|<|>)\s*([^\s,;()]+)\s*")
_RELEASE = re.compile(r"(?:\d+!)?v?(\d+(?:\.\d+)*)(\.\*)?(?:[-_.]?(?:a|b|c|rc|alpha|beta|pre|preview|dev|post|r|rev)"
                      r"[-_.]?\d*)*(?:\+[A-Za-z0-9.]*)?", re.IGNORECASE)
_WHEEL = re.compile(r"(?:^|/)torch-(\d[^-/]*)-[^/]*\.whl$", re.IGNORECASE)
_COMMENT = re.compile(r"(^|\s)#.*$")
_INCLUDE = re.compile(r"(?:-r|--requirement)(?:\s*=\s*|\s+|(?=[^\s=-]))(\S+)")


@dataclass(frozen=True)
class Range:
    """The versions one requirement allows: floor (inclusive) and ceiling (exclusive), None when unbounded."""

    floor: Version | None = None
    below: Version | None = None


@dataclass(frozen=True)
class Declared:
    """One torch requirement and where it is written."""

    text: str  # the requirement as written
    path: Path
    line: int | None
    range: Range

    def where(self, relative_to: Path | None = None) -> str:
        path = self.path
        if relative_to is not None:
            try:
                path = self.path.relative_to(relative_to)
            except ValueError:
                pass
        return f"{path}:{self.line}" if self.line is not None else str(path)


@dataclass(frozen=True)
class TorchRequirement:
    """What a project's declarations say together: the union of every torch requirement found."""

    declared: tuple[Declared, ...] = ()

    @property
    def floor(self) -> Declared | None:
        """The requirement with the lowest floor (the first of those tied); None when none has a floor."""
        with_floor = [d for d in self.declared if d.range.floor is not None]
        return min(with_floor, key=lambda d: d.range.floor) if with_floor else None

    @property
    def below(self) -> Version | None:
        """The first version no requirement allows; None when one of them has no ceiling (or there are none)."""
        if not self.declared or any(d.range.below is None for d in self.declared):
            return None
        return max(d.range.below for d in self.declared)


def version_text(version: Version) -> str:
    """(2, 4, 0) -> "2.4"; (2, 4, 1) -> "2.4.1"."""
    major, minor, patch = version
    return f"{major}.{minor}" if patch == 0 else f"{major}.{minor}.{patch}"


# Specifiers ---------------------------------------------------------------------------------------------------
def _release(text: str) -> tuple[list[int], bool] | None:
    """The release numbers of a version (and whether it ends in `.*`); None when it is not a version."""
    match = _RELEASE.fullmatch(text.strip())
    if match is None:
        return None
    return [int(part) for part in match.group(1).split(".")], match.group(2) is not None


def _three(parts: list[int]) -> Version:
    return tuple((parts + [0, 0, 0])[:3])  # type: ignore[return-value]


def _after(parts: list[int]) -> Version:
    """The first version after every version that starts with these release numbers (2.1 -> 2.2; 2 -> 3)."""
    parts = parts[:3]
    return _three(parts[:-1] + [parts[-1] + 1])


def _just_after(version: Version) -> Version:
    """The first release after exactly this one (2.1.0 -> 2.1.1)."""
    return version[0], version[1], version[2] + 1


def clause_range(operator: str, text: str) -> Range | None:
    """The versions one PEP 440 clause allows, as a range; None when it gives no bound (or is malformed)."""
    parsed = _release(text)
    if parsed is None:
        return None
    parts, wildcard = parsed
    if wildcard and operator not in ("==", "!="):
        return None  # `>=2.*` is not a valid specifier
    version = _three(parts)
    if operator in (">=", ">"):
        return Range(floor=version)
    if operator == "<":
        return Range(below=version)
    if operator == "<=":
        return Range(below=_just_after(version))
    if operator in ("==", "==="):
        return Range(floor=version, below=_after(parts) if wildcard else _just_after(version))
    if operator == "~=":
        if len(parts) < 2:
            return None  # `~=2` is not a valid specifier
        return Range(floor=version, below=_after(parts[:-1]))
    return None  # `!=` excludes versions; it bounds nothing


def intersect(ranges: Iterable[Range]) -> Range:
    """The clauses of one requirement all hold: the highest floor, the lowest ceiling."""
    ranges = list(ranges)
    floors = [r.floor for r in ranges if r.floor is not None]
    belows = [r.below for r in ranges if r.below is not None]
    return Range(max(floors) if floors else None, min(belows) if belows else None)


def _unite(ranges: list[Range]) -> Range:
    """Alternatives (conda's `|`): the lowest floor, the highest ceiling."""
    floors = [r.floor for r in ranges]
    belows = [r.below for r in ranges]
    return Range(None if None in floors else min(floors), None if None in belows else max(belows))  # type: ignore


def _clauses(text: str) -> Iterator[Range]:
    """The ranges of `>=1.13, <2` (also inside parentheses); stops at what is not a clause."""
    position = 0
    text = text.strip()
    if text.startswith("("):
        text = text[1:]
    while True:
        match = _CLAUSE.match(text, position)
        if match is None:
            return
        found = clause_range(match.group(1), match.group(2))
        if found is not None:
            yield found
        position = match.end()
        if not text.startswith(",", position):
            return
        position += 1


def pip_requirement(text: str) -> Range | None:
    """The range of a PEP 508 requirement on torch; None when it is not one. Lenient: what follows the
    specifiers (a marker, pip's `--hash` options) is ignored."""
    name = _NAME.match(text)
    if name is None or _normalized(name.group(1)) not in PIP_NAMES:
        return None
    rest = text[name.end():]
    extras = _EXTRAS.match(rest)
    if extras is not None:
        rest = rest[extras.end():]
    if rest.startswith("@"):
        return _url_range(rest[1:].strip().split()[0] if rest[1:].strip() else "")
    if rest and rest[0] not in "(<>=!~;":
        return None  # `torch-geometric`-like names were cut by a character the name pattern stops at
    return intersect(_clauses(rest.split(";", 1)[0]))


def _url_range(url: str) -> Range:
    """A direct reference to a torch wheel names its version (`torch-2.1.0%2Bcu118-cp310-...whl`)."""
    match = _WHEEL.search(_unquoted(url.split("#", 1)[0].split("?", 1)[0]))
    if match is not None:
        parsed = _release(match.group(1))
        if parsed is not None:
            version = _three(parsed[0])
            return Range(floor=version, below=_just_after(version))
    return Range()


def _unquoted(url: str) -> str:
    return url.replace("%2B", "+").replace("%2b", "+")


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def conda_requirement(text: str) -> Range | None:
    """The range of a conda match spec on pytorch (`pytorch=2.1`, `pytorch>=1.13,<2`, `pytorch 2.1.* cuda*`,
    `conda-forge::pytorch==2.1.0=py3.10*`, `pytorch[version='>=2.1']`); None when it is not one."""
    text = text.strip()
    if "::" in text:
        text = text.split("::", 1)[1]
    name = _NAME.match(text)
    if name is None or _normalized(name.group(1)) not in CONDA_NAMES:
        return None
    rest = text[name.end():].strip()
    bracket = re.match(r"\[\s*version\s*=\s*['\"]?([^'\"\]]*)['\"]?\s*\]", rest)
    if bracket is not None:
        rest = bracket.group(1)
    elif rest.startswith("["):
        return Range()
    if rest and rest[0] not in "<>=!~" and not rest[0].isdigit():
        return None  # another package whose name starts like this one
    alternatives = []
    for alternative in rest.split("|"):
        alternative = alternative.strip()
        if not alternative:
            alternatives.append(Range())
            continue
        if alternative[0].isdigit():  # `pytorch 2.1.*` / `pytorch 2.1.0 build`: an exact or wildcard version
            alternative = "==" + alternative.split()[0]
        elif alternative.startswith("==="):
            alternative = "===" + alternative[3:].split("=", 1)[0]
        elif alternative.startswith("=="):  # `==2.1.0=py3.10*`: the build string follows a second `=`
            alternative = "==" + alternative[2:].split("=", 1)[0]
        elif alternative.startswith("="):  # `=2.1` means 2.1.*, also in `=2.1=build`
            version = alternative[1:].split("=", 1)[0].strip()
            alternative = "==" + (version if version.endswith("*") else version + ".*")
        alternatives.append(intersect(_clauses(alternative)))
    return _unite(alternatives)


# Sources ------------------------------------------------------------------------------------------------------
# The most a declaration file (or a configuration file: amplint/config.py reads its TOML here) may hold. Far above
# any real one; a larger file, and anything that is not a regular file (a FIFO an `-r` names, `/dev/zero`,
# `/dev/stdin`), is not read: one such file must neither block the run, nor exhaust its memory, nor read its input.
MAX_DECLARATION_BYTES = 1024 * 1024


class TomlProblem(ValueError):
    """A TOML file that cannot be read or parsed; the message says why (without the path)."""


def _bytes(path: Path) -> bytes | None:
    """The bytes of the regular file at `path` (at most MAX_DECLARATION_BYTES), read without blocking; None
    for anything else (amplint/source.py's `read_bytes`)."""
    from amplint.source import SourceError, read_bytes

    try:
        return read_bytes(path, MAX_DECLARATION_BYTES)
    except (SourceError, OSError, ValueError):
        return None


def _read(path: Path) -> str | None:
    raw = _bytes(path)
    return None if raw is None else raw.decode("utf-8-sig", errors="replace")


def read_toml(path: Path) -> dict:
    """The table of the TOML file at `path`: the one place amplint parses TOML. TomlProblem when the file is not
    a regular file of at most MAX_DECLARATION_BYTES, not UTF-8 (a leading BOM is allowed: editors on Windows add
    it), not valid TOML, or nested deeper than the parser can follow (`x = [[[...]]]`: tomllib recurses)."""
    from amplint.source import SourceError, read_bytes

    try:
        data = read_bytes(path, MAX_DECLARATION_BYTES)
    except SourceError as error:
        message = str(error)
        if message.startswith("larger than"):
            message = f"larger than {MAX_DECLARATION_BYTES:,} bytes; not read"
        raise TomlProblem(message) from None
    return parse_toml(data)


def parse_toml(data: bytes) -> dict:
    """The table of a TOML file's bytes (see `read_toml`)."""
    import tomllib  # here: a project without TOML files never loads the parser

    data = data.removeprefix(b"\xef\xbb\xbf")
    try:
        return tomllib.loads(data.decode("utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise TomlProblem(f"invalid TOML: {error}") from None
    except UnicodeDecodeError:
        raise TomlProblem("not UTF-8 text (TOML files must be UTF-8)") from None
    except (RecursionError, MemoryError):
        raise TomlProblem("invalid TOML: arrays or inline tables nested too deeply to read") from None


def _line_of(text: str, needle: str) -> int | None:
    """The first line (1-based) of `text` holding `needle`, for reporting where a requirement is written."""
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return number
    return None


def _toml(path: Path) -> tuple[str, dict | None]:
    """The text of a TOML file and its table; None for a file that cannot be read or parsed (a broken file that is
    not amplint's configuration is not ours to report)."""
    raw = _bytes(path)
    if raw is None:
        return "", None
    try:
        return raw.decode("utf-8-sig", errors="replace"), parse_toml(raw)
    except TomlProblem:
        return "", None


def _strings(value: object) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def from_pyproject(path: Path) -> Iterator[Declared]:
    text, data = _toml(path)
    if data is None:
        return
    project = data.get("project") if isinstance(data.get("project"), dict) else {}
    requirements = _strings(project.get("dependencies"))
    optional = project.get("optional-dependencies")
    if isinstance(optional, dict):
        for extra in optional.values():
            requirements += _strings(extra)
    groups = data.get("dependency-groups")
    if isinstance(groups, dict):
        for group in groups.values():
            requirements += _strings(group)  # `{include-group = ...}` tables name other groups, read anyway
    for requirement in requirements:
        found = pip_requirement(requirement)
        if found is not None:
            yield Declared(requirement.strip(), path, _line_of(text, requirement), found)
    yield from _keyed_tables(text, path, _poetry_tables(data), poetry_constraint)


def _poetry_tables(data: dict) -> list[object]:
    """Poetry's dependency tables: `[tool.poetry.dependencies]`, `dev-dependencies`, `group.<name>.dependencies`."""
    tool = data.get("tool") if isinstance(data.get("tool"), dict) else {}
    poetry = tool.get("poetry") if isinstance(tool.get("poetry"), dict) else {}
    tables = [poetry.get("dependencies"), poetry.get("dev-dependencies")]
    groups = poetry.get("group")
    if isinstance(groups, dict):
        tables += [group.get("dependencies") for group in groups.values() if isinstance(group, dict)]
    return tables


def _keyed_tables(text: str, path: Path, tables: list[object], parse) -> Iterator[Declared]:
    """`torch = "<constraint>"` entries (or `torch = {version = "..."}`, or a list of such tables). Each is
    placed on the first `torch =` line not taken by an earlier one (tables come in the order they are written)."""
    used: set[int] = set()
    for table in tables:
        if not isinstance(table, dict):
            continue
        for name, value in table.items():
            if not isinstance(name, str) or _normalized(name) not in PIP_NAMES:
                continue
            values = value if isinstance(value, list) else [value]
            versions = [v.get("version") if isinstance(v, dict) else v for v in values]
            if not versions or not all(isinstance(v, str) for v in versions):
                found = Range()  # a path, a URL or a git source: no version to read
            else:
                found = _unite([parse(v) for v in versions])
            line = next((number for number, content in enumerate(text.splitlines(), start=1)
                         if number not in used and re.match(rf"\s*['\"]?{re.escape(name)}['\"]?\s*=", content)),
                        None)
            used.add(line)
            yield Declared(f"{name} = {value!r}" if not isinstance(value, str) else f'{name} = "{value}"', path,
                           line, found)


def poetry_constraint(text: str) -> Range:
    """Poetry's version constraints: `^1.13` (up to the next major; `^0.2` the next minor), `~2.1` (the next
    minor), `2.1.*`, `*`, an exact `2.1.0`, PEP 440 clauses, and alternatives with `||` (or `|`)."""
    alternatives = []
    for alternative in re.split(r"\|\|?", text):
        ranges = []
        for part in re.split(r"[,\s]+(?=[\^~<>=!0-9*])", alternative.strip()):
            part = part.strip().rstrip(",")
            if not part or part == "*":
                continue
            if part[0] in "^~" and not part.startswith("~="):
                parsed = _release(part[1:])
                if parsed is None or parsed[1]:
                    continue
                numbers = parsed[0]
                if part[0] == "^":
                    significant = next((i for i, n in enumerate(numbers) if n != 0), len(numbers) - 1)
                    below = _after(numbers[:significant + 1])
                else:
                    below = _after(numbers[:2] if len(numbers) >= 2 else numbers)
                ranges.append(Range(_three(numbers), below))
            elif part[0].isdigit():
                ranges.append(clause_range("==", part) or Range())
            else:
                ranges.extend(_clauses(part))
        alternatives.append(intersect(ranges))
    return _unite(alternatives)


def from_pipfile(path: Path) -> Iterator[Declared]:
    """Pipenv's `[packages]` and `[dev-packages]`: `torch = ">=2.1"` (PEP 440), `"*"`, or a table."""
    text, data = _toml(path)
    if data is None:
        return
    tables = [data.get("packages"), data.get("dev-packages")]
    yield from _keyed_tables(text, path, tables, lambda version: intersect(_clauses(version)))


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """pip's view of a requirements file: a line ending in `\\` joined with the next (a comment line never
    continues), then comments removed; (number of the first line, text)."""
    pending: list[str] = []
    start = 0
    for number, line in enumerate(text.splitlines(), start=1):
        comment_line = line.lstrip().startswith("#")
        if line.endswith("\\") and not comment_line:
            if not pending:
                start = number
            pending.append(line[:-1])
            continue
        if pending:
            pending.append(" " + line if comment_line else line)
            yield start, _COMMENT.sub("", "".join(pending))
            pending = []
        else:
            yield number, _COMMENT.sub("", line)
    if pending:
        yield start, _COMMENT.sub("", "".join(pending))


def from_requirements_txt(path: Path, seen: set[Path] | None = None) -> Iterator[Declared]:
    """A requirements file and, recursively, the files it includes with `-r`/`--requirement` (each once)."""
    seen = set() if seen is None else seen
    try:
        key = path.resolve()
    except (OSError, RuntimeError):
        return
    if key in seen or len(seen) >= MAX_INCLUDES:
        return
    seen.add(key)
    text = _read(path)
    if text is None:
        return
    for number, line in _logical_lines(text):
        line = line.strip()
        if not line:
            continue
        include = _INCLUDE.match(line)
        if include is not None:
            target = include.group(1)
            if "://" not in target:
                yield from from_requirements_txt(path.parent / target, seen)
            continue
        if line.startswith("-"):
            continue  # -c constraints, -e editable, --index-url, -f ...: no requirement on torch's version
        found = pip_requirement(line)
        if found is None and _WHEEL.search(_unquoted(line.split()[0])):
            found = _url_range(line.split()[0])  # a wheel named by URL or path: its version is in its name
        if found is not None:
            yield Declared(line, path, number, found)


def from_setup_cfg(path: Path) -> Iterator[Declared]:
    text = _read(path)
    if text is None:
        return
    import configparser  # only a setup.cfg needs it

    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(text, source=str(path))
    except configparser.Error:
        return
    values = []
    if parser.has_option("options", "install_requires"):
        values.append(parser.get("options", "install_requires"))
    if parser.has_section("options.extras_require"):
        values += [value for _, value in parser.items("options.extras_require")]
    for value in values:
        for line in value.splitlines():
            line = _COMMENT.sub("", line).strip()
            found = pip_requirement(line) if line else None
            if found is not None:
                yield Declared(line, path, _line_of(text, line), found)


def from_setup_py(path: Path) -> Iterator[Declared]:
    """The literal requirement lists of `setup(...)`: inline, or a module-level name bound to a literal."""
    text = _read(path)
    if text is None:
        return
    try:
        tree = ast.parse(text, filename=str(path))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return
    literals: dict[str, ast.expr] = {}
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(
                statement.targets[0], ast.Name):
            literals[statement.targets[0].id] = statement.value
        elif isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and statement.value:
            literals[statement.target.id] = statement.value
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _called_name(node.func) == "setup"):
            continue
        for keyword in node.keywords:
            if keyword.arg not in ("install_requires", "extras_require"):
                continue
            value = literals.get(keyword.value.id, keyword.value) if isinstance(keyword.value, ast.Name) \
                else keyword.value
            lists = value.values if isinstance(value, ast.Dict) else [value]
            for each in lists:
                if isinstance(each, ast.Name):
                    each = literals.get(each.id, each)
                if not isinstance(each, (ast.List, ast.Tuple)):
                    continue
                for element in each.elts:
                    if isinstance(element, ast.Constant) and isinstance(element.value, str):
                        found = pip_requirement(element.value)
                        if found is not None:
                            yield Declared(element.value.strip(), path, element.lineno, found)


def _called_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _yaml_scalar(text: str) -> str:
    text = _COMMENT.sub("", text).strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    return text.strip()


def _flow_items(text: str) -> list[str]:
    """`[a, b]` -> ["a", "b"] (no nesting: enough for a dependency list written inline)."""
    text = _COMMENT.sub("", text).strip()
    if not (text.startswith("[") and text.endswith("]")):
        return []
    return [_yaml_scalar(item) for item in text[1:-1].split(",") if item.strip()]


def from_environment_yml(path: Path) -> Iterator[Declared]:
    """conda's `dependencies:` list: match specs, and a `- pip:` item's sub-list of PEP 508 requirements."""
    text = _read(path)
    if text is None:
        return
    lines = text.splitlines()
    inside = False
    base: int | None = None  # the indentation of the dependency items
    pip_indent: int | None = None  # inside a `- pip:` item: the indentation of that item
    for number, raw in enumerate(lines, start=1):
        stripped = raw.strip()
        indent = len(raw) - len(raw.lstrip(" \t"))
        if not inside:
            match = re.match(r"dependencies\s*:(.*)$", raw)
            if match is not None:
                inside = True
                for item in _flow_items(match.group(1)):
                    yield from _declared_conda(item, path, number)
            continue
        if not stripped or stripped.startswith("#"):
            continue
        if indent == 0 and not stripped.startswith("-"):
            break  # the next top-level key
        if not stripped.startswith("-"):
            continue
        item = stripped[1:].strip()
        if base is None:
            base = indent
        if pip_indent is not None and indent > pip_indent:
            requirement = _yaml_scalar(item)
            found = pip_requirement(requirement)
            if found is not None:
                yield Declared(requirement, path, number, found)
            continue
        pip_indent = None
        pip = re.match(r"pip\s*:(.*)$", item)
        if pip is not None:
            pip_indent = indent
            for requirement in _flow_items(pip.group(1)):
                found = pip_requirement(requirement)
                if found is not None:
                    yield Declared(requirement, path, number, found)
            continue
        yield from _declared_conda(_yaml_scalar(item), path, number)


def _declared_conda(spec: str, path: Path, line: int) -> Iterator[Declared]:
    found = conda_requirement(spec)
    if found is not None:
        yield Declared(spec, path, line, found)


def requirement_files(root: Path) -> list[Path]:
    """The declaration files of a project root, in a fixed order."""
    found = [root / name for name in PROJECT_FILES if _is(root / name, os.path.isfile)]
    for pattern in REQUIREMENT_GLOBS:
        try:
            found += sorted(path for path in root.glob(pattern) if _is(path, os.path.isfile))
        except OSError:
            continue
    return found


def _is(path: Path, question) -> bool:
    """os.path's answer (a file? there at all?), False where the question itself fails (no permission)."""
    try:
        return question(path)
    except (OSError, ValueError):
        return False


# The project files that may declare torch, each with its reader, in the order they are read; any other declaration
# file is a requirements file (REQUIREMENT_GLOBS).
READERS = {"pyproject.toml": from_pyproject, "setup.cfg": from_setup_cfg, "setup.py": from_setup_py,
           "environment.yml": from_environment_yml, "environment.yaml": from_environment_yml,
           "Pipfile": from_pipfile}
PROJECT_FILES = tuple(READERS)


def declared_torch(root: Path) -> TorchRequirement:
    """Every torch requirement declared in this project root."""
    declared: list[Declared] = []
    seen: set[Path] = set()  # requirements files already read through `-r`
    for path in requirement_files(root):
        reader = READERS.get(path.name)
        declared += reader(path) if reader is not None else from_requirements_txt(path, seen)
    return TorchRequirement(tuple(declared))


def files_read(root: Path) -> list[Path]:
    """Every file `declared_torch(root)` reads: the declaration files of the root and the files its requirements
    files include with `-r`/`--requirement`, recursively (as they are named, whether or not they exist), for a
    run to refuse an output that would overwrite one of them."""
    found = requirement_files(root)
    seen: set[Path] = set()
    for path in found:
        if path.name not in READERS:
            for _ in from_requirements_txt(path, seen):
                pass
    return found + sorted(seen - {path.resolve() for path in found})


def has_declarations(folder: Path) -> bool:
    """Does this folder hold a declaration file? One listing of the folder (asked for every folder above every
    linted path)."""
    try:
        with os.scandir(folder) as entries:
            names = {entry.name for entry in entries}
    except OSError:
        return False
    if any(name in names for name in PROJECT_FILES):
        return True
    if any(fnmatch.fnmatchcase(name, REQUIREMENT_GLOBS[0]) for name in names):
        return True
    return "requirements" in names and bool(requirement_files(folder))


def project_root(start: Path, memo: dict[Path, bool] | None = None) -> Path | None:
    """The nearest folder at or above `start` with a declaration file; the search stops at a repository's root.
    `memo`: answers of `has_declarations` already known (many paths share their folders)."""
    memo = {} if memo is None else memo
    try:
        start = start.resolve()
    except (OSError, RuntimeError):
        return None
    if not _is(start, os.path.isdir):
        start = start.parent
    for folder in (start, *start.parents):
        if folder not in memo:
            memo[folder] = has_declarations(folder)
        if memo[folder]:
            return folder
        if _is(folder / ".git", os.path.exists) or _is(folder / ".hg", os.path.exists):
            return None
    return None


def project_torch(roots: Iterable[Path]) -> TorchRequirement:
    """The union of the torch requirements of these project roots (each read once)."""
    declared: list[Declared] = []
    seen: set[Path] = set()
    for root in roots:
        if root in seen:
            continue
        seen.add(root)
        declared += declared_torch(root).declared
    return TorchRequirement(tuple(declared))


def roots_for(paths: Iterable[str], configured: Path | None) -> list[Path]:
    """The project roots to read: the configuration's folder when it declares anything, else the nearest folder
    with a declaration file above each linted path (`-`, standard input: the current folder)."""
    if configured is not None and has_declarations(configured):
        return [configured]
    roots: list[Path] = []
    memo: dict[Path, bool] = {}
    folders: set[str] = set()
    for path in paths:
        start = "." if path == "-" else path if _is(Path(path), os.path.isdir) else os.path.dirname(path) or "."
        if start in folders:
            continue  # files of one folder share its root
        folders.add(start)
        root = project_root(Path(start), memo)
        if root is not None and root not in roots:
            roots.append(root)
    return roots

