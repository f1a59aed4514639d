"""torch versions: parsing `target-torch-version` and deciding which version-dependent rules apply.

A rule that names `min_torch` (for example AMP007, whose replacement spellings appeared in torch 2.4) is turned
off when the configured target is older. Only the release numbers count: "2.4", "2.4.1", "v2.4",
"2.4.0+cu121" and "2.5.0a0+git1234" are all accepted.
"""

from __future__ import annotations

import re
from functools import lru_cache

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
