"""A function's mixed-precision events in source order, as rules ask about them at each of many places: the
last scaled backward before a place, a scaler's steps, updates and `unscale_` calls after or before one (of one
optimizer, or of any), the optimizers a scaler steps or unscales. Built once per function, found by bisection,
so that N questions cost N lookups, not N scans of the function."""

from __future__ import annotations

import bisect
from typing import Iterator

from amplint.facts.model import Event, EventKind
from amplint.facts.module import ModuleFacts


class Ordered:
    """Events in source order, searched by bisection of their indexes."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.indexes: list[int] = []

    def add(self, event: Event) -> None:
        self.events.append(event)
        self.indexes.append(event.index)

    def last_before(self, index: int) -> Event | None:
        position = bisect.bisect_left(self.indexes, index) - 1
        return self.events[position] if position >= 0 else None

    def first_after(self, index: int) -> Event | None:
        position = bisect.bisect_right(self.indexes, index)
        return self.events[position] if position < len(self.events) else None

    def after(self, index: int) -> Iterator[Event]:
        """The events after `index`, in order (read lazily: most searches end soon)."""
        for position in range(bisect.bisect_right(self.indexes, index), len(self.events)):
            yield self.events[position]


_EMPTY = Ordered()


class FunctionEvents:
    """One function's events, keyed for the questions asked at each of its places (see the module's docstring)."""

    def __init__(self, events: list[Event], facts: ModuleFacts) -> None:
        self._backwards = Ordered()
        self._by_key: dict[tuple, Ordered] = {}  # (kind, scaler) and (kind, scaler, optimizer) -> events
        self._optimizers: dict[str | None, set[str]] = {}  # scaler -> the optimizers it steps or unscales
        for event in events:
            if event.kind is EventKind.BACKWARD and event.scaled:
                self._backwards.add(event)
            optimizers = [event.optimizer]
            if event.kind is EventKind.SCALER_UNSCALE:
                # `for opt in (opt_a, opt_b): scaler.unscale_(opt)` unscales each of them; over values not known
                # (`self.optimizers`), any optimizer (None)
                optimizers = facts.loop_values(event.optimizer, event.frame) or optimizers
            keys = [(event.kind, event.scaler)] + [(event.kind, event.scaler, o) for o in dict.fromkeys(optimizers)]
            for key in keys:
                self._by_key.setdefault(key, Ordered()).add(event)
            if event.optimizer and event.kind in (EventKind.SCALER_STEP, EventKind.SCALER_UNSCALE):
                self._optimizers.setdefault(event.scaler, set()).add(event.optimizer)
        self._scaler_events: dict[str | None, Ordered] = {}  # steps and updates of each scaler, in order
        for event in events:
            if event.kind in (EventKind.SCALER_STEP, EventKind.SCALER_UPDATE):
                self._scaler_events.setdefault(event.scaler, Ordered()).add(event)

    def _of(self, kind: EventKind, scaler: str | None, *optimizer: str | None) -> Ordered:
        return self._by_key.get((kind, scaler, *optimizer), _EMPTY)

    def last_scaled_backward(self, index: int) -> Event | None:
        return self._backwards.last_before(index)

    def first_after(self, kind: EventKind, scaler: str | None, index: int, *optimizer: str | None) -> Event | None:
        """The first event of `kind` of `scaler` after `index` (of that optimizer, when one is given)."""
        return self._of(kind, scaler, *optimizer).first_after(index)

    def optimizers(self, scaler: str | None) -> set[str]:
        """The optimizers `scaler` steps or unscales in the function."""
        return set(self._optimizers.get(scaler, ()))

    def stepped_after(self, clip: Event, scaler: str | None) -> list[str]:
        """The optimizers `scaler.step(...)` steps after the clip and before the scaler's next `update()`, in
        order: the only ones whose gradients the clip can still affect."""
        found: list[str] = []
        for event in self._scaler_events.get(scaler, _EMPTY).after(clip.index):
            if event.kind is EventKind.SCALER_UPDATE:
                break
            if event.optimizer and event.optimizer not in found:
                found.append(event.optimizer)
        return found

    def unscale_between(self, scaler: str | None, optimizers: set[str | None] | None, start: int,
                        end: int) -> Event | None:
        """The first `scaler.unscale_(...)` after `start` and before `end`, of one of `optimizers` (None among
        them: an unscale_ of no named optimizer; `optimizers` None: of any optimizer)."""
        if optimizers is None:
            found = self.first_after(EventKind.SCALER_UNSCALE, scaler, start)
        else:
            firsts = [self.first_after(EventKind.SCALER_UNSCALE, scaler, start, o) for o in optimizers]
            found = min((e for e in firsts if e is not None), key=lambda e: e.index, default=None)
        return found if found is not None and found.index < end else None

    def last_update_before(self, scaler: str | None, index: int) -> int:
        """The index of the scaler's last `update()` before `index` (-1: none in the function)."""
        update = self._of(EventKind.SCALER_UPDATE, scaler).last_before(index)
        return update.index if update is not None else -1

    def unscaled_before(self, scaler: str | None, optimizer: str | None, index: int) -> bool:
        """Is there an `unscale_` of this optimizer before `index` with no `update()` between it and `index`? A
        second `unscale_` would raise `unscale_() has already been called on this optimizer since the last
        update().`"""
        update = self._of(EventKind.SCALER_UPDATE, scaler).last_before(index)
        since = update.index if update is not None else -1
        return self.unscale_between(scaler, {optimizer, None}, since, index) is not None
