"""torch versions: parsing `target-torch-version`, deciding which version-dependent rules apply, and which
spellings a fix may write.

A rule that names `min_torch` (for example AMP008, about `torch.cuda.amp.GradScaler` which appeared in torch
1.6) is turned off when the target is older. A fix writes only spellings that every supported release has
(`TorchSupport.has`). Only the release numbers count: "2.4", "2.4.1", "v2.4", "2.4.0+cu121" and
"2.5.0a0+git1234" are all accepted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from amplint.vocabulary import AMP_DEPRECATED_SINCE, SPELLING_SINCE

__all__ = ["AMP_DEPRECATED_SINCE", "SPELLING_SINCE", "TorchSupport", "parse_version", "rule_applies"]

_VERSION = re.compile(r"v?(?P<release>\d+(?:\.\d+){0,2})(?:[.+\-]?(?:a|b|rc|dev|post|\+)[0-9A-Za-z.+\-]*)?")


@lru_cache(maxsize=64)
def parse_version(text: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a torch version string; ValueError when it is not one."""
    match = _VERSION.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"not a torch version: {text!r} (expected something like \"2.4\" or \"2.4.1\")")
    parts = [int(part) for part in match.group("release").split(".")]
    return tuple(parts + [0] * (3 - len(parts)))  # type: ignore[return-value]


def rule_applies(min_torch: str | None, target: str | None) -> bool:
    """Does a rule needing torch >= `min_torch` apply to code targeting torch `target`? (no target: yes)"""
    if min_torch is None or target is None:
        return True
    return parse_version(target) >= parse_version(min_torch)


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

    def reaches(self, version: str) -> bool:
        """Is some supported release at least this version?"""
        return self.below is None or parse_version(self.below) > parse_version(version)

    def __str__(self) -> str:
        """A short tag for cache keys: empty when nothing is known."""
        if self.floor is None and self.below is None:
            return ""
        return f"@{self.floor or ''}..{self.below or ''}"
