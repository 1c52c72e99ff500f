"""The simulator's event queue: a binary min-heap of (time, kind, seq, what) tuples, in C where built.

Two implementations with one interface and one order (tuple order; ``seq`` is
unique, so no two entries tie): :class:`PyEventHeap`, ``heapq`` over a list, and
``mgst.sim._event_heap.EventHeap``, the same heap with the keys unboxed in a C
array, built by setup.py with the compiled modules. :func:`new_event_heap`
gives the C one exactly when the compiled build runs (``mgst.build_info``), so
``MGST_PURE=1`` and a stale build run the heapq one.

This module is not compiled: the simulator sees both through :class:`EventHeap`.
"""

from __future__ import annotations

import functools
import heapq
import operator
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from mgst import build_info

Entry = tuple[float, int, int, Any]  # (time, kind, seq, what): kind orders equal times, seq ties


class EventHeap(Protocol):
    """What the simulator uses of an event heap (a Protocol: compiled code calls either kind alike)."""

    push: Callable[[Entry], None]  # add an entry
    pop: Callable[[], Entry]  # remove and return the least entry (IndexError if empty)
    peek: Callable[[], Entry]  # the least entry, left in place (IndexError if empty)

    def __len__(self) -> int: ...

    def entries(self) -> list[Entry]:
        """A copy of the entries, in no particular order."""
        ...

    def reset(self, entries: Iterable[Entry]) -> None:
        """Hold exactly ``entries``."""
        ...


class PyEventHeap:
    """``heapq`` over a list; ``push`` and ``pop`` are heapq's own functions, bound with partial."""

    __slots__ = ("_heap", "push", "pop", "peek")

    def __init__(self) -> None:
        self._heap: list[Entry] = []
        self.push: Callable[[Entry], None] = functools.partial(heapq.heappush, self._heap)
        self.pop: Callable[[], Entry] = functools.partial(heapq.heappop, self._heap)
        self.peek: Callable[[], Entry] = functools.partial(operator.getitem, self._heap, 0)

    def __len__(self) -> int:
        return len(self._heap)

    def entries(self) -> list[Entry]:
        return list(self._heap)

    def reset(self, entries: Iterable[Entry]) -> None:
        fresh = list(entries)
        heapq.heapify(fresh)
        self._heap[:] = fresh


def new_event_heap() -> EventHeap:
    """The C heap if the compiled build runs, else :class:`PyEventHeap`."""
    if build_info.compiled():
        from mgst.sim._event_heap import EventHeap as CEventHeap  # noqa: PLC0415 (built with the compiled modules)

        return CEventHeap()  # type: ignore[no-any-return]
    return PyEventHeap()
