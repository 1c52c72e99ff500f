"""Named, independent, seeded random streams: one per purpose, class and machine.

A stream is identified by (run seed, replication, purpose, index), never by the
order in which streams are created, so a simulation and a testbed run given the
same seed draw the same arrivals and sizes whatever else differs (common random
numbers).
"""

from __future__ import annotations

import enum
import random

import numpy as np

from mgst.draws import ExpStream  # noqa: F401 (its home before mgst/draws.py: importers keep working)


class Purpose(enum.IntEnum):
    ARRIVALS = 0  # index: job class
    SIZES = 1  # index: job class
    FAILURES = 2  # index: machine
    POLICY = 3  # index: 0
    CHECKPOINTS = 4  # index: 0
    # Added for the pluggable models; new members go at the end so existing streams keep their keys.
    BAG_ARRIVALS = 5  # index: 0 (bag inter-arrival times)
    TASK_CLASSES = 6  # index: 0 (class of each task of a bag stream)
    TASK_SIZES = 7  # index: 0 (unit uniform of each task's size)
    REPAIRS = 8  # index: machine (down periods of the Weibull/Normal model; FAILURES gives its up periods)
    STAGING = 9  # index: 0 resume transfers, 1 start transfers
    OVERHEADS = 10  # index: machine (a testbed run's per-job overheads, redrawn: mgst.sim.overheads)
    OVERLAY = 11  # index: grid (the arrival delays of the hosts the overlay asks a grid for: mgst.sim.overlay)
    # index: machine, replication: the model time in ms a testbed host of a sized grid arrived at (its up period)
    OVERLAY_ARRIVALS = 12


def seed_sequence(seed: int, replication: int, purpose: Purpose, index: int = 0) -> np.random.SeedSequence:
    return np.random.SeedSequence(entropy=seed, spawn_key=(replication, int(purpose), index))


def generator(seed: int, replication: int, purpose: Purpose, index: int = 0) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(seed_sequence(seed, replication, purpose, index)))


def python_random(seed: int, replication: int, purpose: Purpose, index: int = 0) -> random.Random:
    """A stdlib Random (fast scalar draws) seeded from the named stream."""
    state = seed_sequence(seed, replication, purpose, index).generate_state(4, dtype=np.uint64)
    return random.Random(int.from_bytes(state.tobytes(), "little"))
