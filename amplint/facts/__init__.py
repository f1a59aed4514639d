"""The AMP facts layer: everything rules need to know about one module, computed once.

Its names are loaded when first asked for (`from amplint.facts import ModuleFacts` imports the model then), so that
a run importing a module of the layer for one helper (the configuration reads `amplint.facts.versions`) does not
load the rest: a clean file is screened out without it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from amplint.facts.model import Event, Frame, FrameKind, Region, RegionState
    from amplint.facts.module import ModuleFacts

_HOMES = {"Event": "model", "Frame": "model", "FrameKind": "model", "Region": "model",
          "RegionState": "model", "ModuleFacts": "module"}
__all__ = ["Event", "Frame", "FrameKind", "ModuleFacts", "Region", "RegionState"]


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'amplint.facts' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"amplint.facts.{home}"), name)
    globals()[name] = value
    return value
