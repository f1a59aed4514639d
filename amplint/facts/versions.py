"""torch versions: parsing `target-torch-version`, what a module's own code shows about the torch it runs on,
and which spellings a fix may write.

The supported torch releases (`TorchSupport`) gate only what needs a version: a deprecation finding (reported
when some supported release deprecates the spelling: `reaches`) and a fix's spelling (written only when every
supported release has it: `has`). They never turn a bug rule off: code that calls `torch.cuda.amp` runs on a
torch that has it, whatever its requirements declare, and its bugs are bugs there. The floor is the declared
one (requirements or `target-torch-version`), raised by what the module itself shows (`shown_floor`: an AMP
module or name it uses whenever it runs). Only the release numbers count: "2.4", "2.4.1", "v2.4",
"2.4.0+cu121" and "2.5.0a0+git1234" are all accepted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from amplint.vocabulary import AMP_DEPRECATED_SINCE, INTRODUCED, SPELLING_SINCE

__all__ = ["AMP_DEPRECATED_SINCE", "SPELLING_SINCE", "TorchSupport", "parse_version", "shown_floor"]

_VERSION = re.compile(r"v?(?P<release>\d+(?:\.\d+){0,2})(?:[.+\-]?(?:a|b|rc|dev|post|\+)[0-9A-Za-z.+\-]*)?")


@lru_cache(maxsize=64)
def parse_version(text: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a torch version string; ValueError when it is not one."""
    match = _VERSION.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"not a torch version: {text!r} (expected something like \"2.4\" or \"2.4.1\")")
    parts = [int(part) for part in match.group("release").split(".")]
    return tuple(parts + [0] * (3 - len(parts)))  # type: ignore[return-value]


def introduced(qualified: str | None) -> str | None:
    """The first torch release that has this qualified name (`INTRODUCED`: the name, else its closest listed
    module), or None when none is listed."""
    while qualified:
        if qualified in INTRODUCED:
            return INTRODUCED[qualified]
        qualified = qualified.rpartition(".")[0]
    return None


def shown_floor(facts) -> str | None:
    """The oldest torch the module's own code needs wherever it runs: the newest `introduced` release among the
    AMP modules and names that its top-level statements import or evaluate whenever the module is imported.

    Only what runs at every import counts: a statement of the module's body outside `if`, `try`, loops and
    `with` (a compatibility shim is written with those), and in it neither a branch of `a if t else b`, the
    right side of `and`/`or`, a lambda nor a comprehension. A function body may never run on the torch where
    another one does, so a use there shows nothing about the rest of the module. None: nothing shown."""
    from amplint.facts.names import dotted_name
    from amplint.lazy import libcst as cst

    found: list[str] = []
    top_level = {id(small) for line in facts.module.body if isinstance(line, cst.SimpleStatementLine)
                 for small in line.body}
    for records in facts.imports.records.values():
        for record in records:
            if id(record.statement) not in top_level:
                continue
            if isinstance(record.statement, cst.Import) and record.alias is not None:
                found.append(dotted_name(record.alias.name) or "")  # `import torch.amp` binds `torch`
            else:
                found.append(record.qualified)

    def evaluated(node) -> None:
        if isinstance(node, (cst.Attribute, cst.Name)):
            found.append(facts.imports.qualify(node) or "")
            if isinstance(node, cst.Name):
                return
        if isinstance(node, cst.IfExp):
            return evaluated(node.test)
        if isinstance(node, cst.BooleanOperation):
            return evaluated(node.left)
        if isinstance(node, (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp,
                             cst.Import, cst.ImportFrom)):
            return None
        for child in node.children:
            evaluated(child)

    for line in facts.module.body:
        if isinstance(line, cst.SimpleStatementLine):
            for small in line.body:
                evaluated(small)
    versions = [version for version in map(introduced, found) if version is not None]
    return max(versions, key=parse_version) if versions else None


@dataclass(frozen=True)
class TorchSupport:
    """The torch releases the linted code must run on: `floor` the oldest (the target torch version, from the
    settings or the project's requirements), `below` the first release it no longer supports (from the
    requirements only). None: unknown, so unbounded; the default knows nothing and allows every spelling."""

    floor: str | None = None
    below: str | None = None

    def has(self, spelling: str) -> bool:
        """Does every supported release have this spelling (a key of SPELLING_SINCE)?"""
        return self.floor is None or parse_version(self.floor) >= parse_version(SPELLING_SINCE[spelling])

    def raised_to(self, floor: str | None) -> TorchSupport:
        """The releases that remain when the code shows it needs torch >= `floor` (`shown_floor`). An unknown floor
        stays unknown: what a module shows is a lower bound on a range nobody declared, not the range."""
        if floor is None or self.floor is None or parse_version(floor) <= parse_version(self.floor):
            return self
        return TorchSupport(floor, self.below)

    def reaches(self, version: str) -> bool:
        """Is some supported release at least this version?"""
        return self.below is None or parse_version(self.below) > parse_version(version)

    def __str__(self) -> str:
        """A short tag for cache keys: empty when nothing is known."""
        if self.floor is None and self.below is None:
            return ""
        return f"@{self.floor or ''}..{self.below or ''}"
