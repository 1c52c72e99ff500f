"""Unpredictable automatic routing ids for this process's ROUTER sockets (libzmq draws them from an unseeded rand())."""

from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger(__name__)

_seeded = False


def seed_routing_ids() -> None:
    """Seed the C library's ``rand()`` from the OS, once per process, before a ROUTER socket is made.

    A ROUTER numbers the peers that choose no routing id from a start that libzmq draws with ``rand()``, which
    nothing seeds: every process would hand out the same ids in the same order. A peer that may choose its own id
    (libzmq lets any connected peer) could then take the ids the mapper is about to hand out, and libzmq aborts the
    whole process when an automatic id collides with a taken one. Seeded, the next automatic id is one of 2^32.
    """
    global _seeded
    if _seeded:
        return
    try:
        libc = ctypes.CDLL(None)
        libc.srand(ctypes.c_uint(int.from_bytes(os.urandom(4), "little")))
    except (OSError, AttributeError) as e:  # no C library with srand in this process: ids stay predictable
        log.warning("could not seed the C library's rand() (%s): ROUTER routing ids are predictable", e)
    _seeded = True


__all__ = ["seed_routing_ids"]
