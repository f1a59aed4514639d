"""The AMP facts layer: everything rules need to know about one module, computed once."""

from amplint.facts.model import Event, EventKind, Frame, FrameKind, Region, RegionState
from amplint.facts.module import ModuleFacts

__all__ = ["Event", "EventKind", "Frame", "FrameKind", "ModuleFacts", "Region", "RegionState"]
