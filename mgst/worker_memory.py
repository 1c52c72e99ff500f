"""Keeps a simulation's records out of the cyclic collector's sight, and frees them in batches once a
process's resident memory has grown by a set amount."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
from collections.abc import Iterator

import psutil

log = logging.getLogger(__name__)

# A simulation's records are reference cycles (a job and its replicas point at each other), and the
# simulator pauses the cyclic collector while it runs. Left to the collector's own schedule, a sweep
# worker's finished cells piled up: 2.0 GB resident after 60 of bench_sweep's cells, and growing.
# Collecting after every run bounds that, but freeing some 800,000 objects takes 0.3 to 1 s: 40 % of
# a 20-cell sweep, and of `mgst simulate` on a paper setting. So a process collects once its resident
# memory has grown by GARBAGE_LIMIT since it last did (or since it imported this module): a quarter of
# its share of the machine's memory (one worker per core), at most 1 GiB. A worker that exits first
# frees everything at once, for nothing.
GARBAGE_LIMIT = min(1 << 30, psutil.virtual_memory().total // (4 * (os.cpu_count() or 1)))  # bytes


def resident_memory() -> int:
    """This process's resident memory, in bytes."""
    return int(psutil.Process().memory_info().rss)


_resident_after_collection = resident_memory()  # before this process's first run


@contextlib.contextmanager
def records_out_of_sight() -> Iterator[None]:
    """Around a run and its reduction: the collector paused, then everything there is frozen (gc.freeze).

    A run makes millions of records that live until it is reduced, then are cyclic garbage. Made while
    the collector was paused, they sit in its youngest generation, and the first collection after it
    is resumed would walk all of them (0.7 s for a run of a million jobs), to free nothing, or all of
    them later at the cost of a full collection (2.2 s). Frozen, no collection walks them, and
    :func:`free_garbage_if_grown`, called before the next run, gives them back to the collector once
    memory has grown: a process that ends after its last run (`mgst simulate`, a pool worker) never
    pays for its records, and one that goes on (`mgst paper`, a test) holds them until then.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def free_garbage_if_grown() -> bool:
    """Before or after a run: collect if resident memory has grown by ``GARBAGE_LIMIT`` since the last
    collection, the records that :func:`records_out_of_sight` froze included.

    True if it collected.
    """
    global _resident_after_collection
    resident = resident_memory()
    if resident - _resident_after_collection <= GARBAGE_LIMIT:
        return False
    gc.unfreeze()  # (whatever else was frozen goes back to the oldest generation, where it was)
    freed = gc.collect()
    _resident_after_collection = resident_memory()
    log.debug("freed %d objects: resident %.0f MB, %.0f MB before", freed,
              _resident_after_collection / 1e6, resident / 1e6)
    return True
