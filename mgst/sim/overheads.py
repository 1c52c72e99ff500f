"""The per-job overheads a testbed run measured, as the simulation uses them: per machine, recorded values redrawn."""

from __future__ import annotations

import logging
import math
import random
from dataclasses import dataclass

from mgst.availability import registry as availability
from mgst.availability.grids import QUANTILES
from mgst.model import Experiment
from mgst.streams import Purpose, python_random

log = logging.getLogger(__name__)

# A machine with fewer recorded jobs than this takes the pooled values of every machine instead of its own:
# below about 20 values an empirical distribution has not yet seen its upper tail (a 1-in-20 retransmission,
# say), which is what a bootstrap is there to keep.
MIN_SAMPLES = 20


@dataclass(frozen=True, slots=True)
class MachineOverheads:
    """One machine's recorded overheads, in model time units, one value per job (journal instants, docs/models.md).

    ``pre``: from the decision to the start of computing, t4 - t3, with the mapper's lag in taking the job's arrival
    (t2 -> t3) when it is one (mgst.testbed.overheads.measure);
    ``post``: from the end of computing to the mapper learning it, t6 - t5 (the paper's t5 -> t6 -> t7; the
    machine's next request rides on the result, so this is also its t1 -> t2);
    ``overrun``: how much longer the job computed than the model's size / (mu'_ij a_j), (t5 - t4) - that
    (negative if shorter): the executor's own inaccuracy, empty when not calibrated.
    """

    pre: tuple[float, ...]
    post: tuple[float, ...]
    overrun: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class Overheads:
    """Every machine's overheads, in the experiment's machine order; ``source`` says where they were measured."""

    machines: tuple[MachineOverheads, ...]
    source: str = ""

    def without_overrun(self) -> Overheads:
        """The same, with the executor's overrun left out (the four overheads of the journal alone)."""
        return Overheads(tuple(MachineOverheads(m.pre, m.post) for m in self.machines), self.source)


def pooled(per_machine: list[MachineOverheads], names: list[str]) -> tuple[MachineOverheads, ...]:
    """Each machine's own values, or, with fewer than MIN_SAMPLES jobs recorded, the pooled values of all (said in a
    log line); ValueError if even the pool has no value of a kind the model needs (pre or post)."""
    pool = MachineOverheads(*(tuple(v for m in per_machine for v in getattr(m, kind))
                              for kind in ("pre", "post", "overrun")))
    if not pool.pre or not pool.post:
        raise ValueError("no job was recorded from its start to its result (no t4, or no t5 and t6)")
    out = []
    for name, m in zip(names, per_machine):
        n = min(len(m.pre), len(m.post))
        if n < MIN_SAMPLES:
            log.warning("overheads: machine %s has %d recorded jobs (fewer than %d): it takes the pooled values of "
                        "all machines (%d jobs)", name, n, MIN_SAMPLES, min(len(pool.pre), len(pool.post)))
            m = pool
        out.append(m)
    return tuple(out)


def result_delays(means: list[float], quantiles: int = 256) -> Overheads:
    """Overheads that are only a returned-result delay, exponential of mean ``means[j]`` on machine j (0: none): its
    law's quantiles at (k + 1/2) / ``quantiles``, which the sampler draws uniformly (a grid's ``return_delay``,
    mgst.availability.grids)."""
    machines = []
    for mean in means:
        post = tuple(-mean * math.log(1.0 - (k + 0.5) / quantiles) for k in range(quantiles)) if mean > 0 else (0.0,)
        machines.append(MachineOverheads((0.0,), post))
    return Overheads(tuple(machines), "the grids' returned-result delays")


def grid_return_delays(experiment: Experiment) -> Overheads | None:
    """The returned-result delays of ``experiment``'s grids (mgst.availability.grids) as overheads, or None if it
    has none: what the simulator holds a replica for after it computed, and what the mapper has a puller hold."""
    delays = availability.result_delays(experiment)
    return result_delays(delays, QUANTILES) if delays is not None else None


class _Draw:
    """Uniform draws, with replacement, from one machine's recorded values."""

    __slots__ = ("_rng", "_values", "_n")

    def __init__(self, rng: random.Random, values: tuple[float, ...]):
        self._rng, self._values, self._n = rng, values, len(values)

    def __call__(self) -> float:
        if not self._n:
            return 0.0
        return self._values[int(self._rng.random() * self._n)]


class OverheadSampler:
    """The overheads of one replication's replicas: for each replica, a pre-compute delay, an overrun and a
    post-compute delay drawn (in that order) uniformly from its machine's recorded values, from the machine's own
    stream (OVERHEADS, index: machine), so that no other stream moves and one machine's draws do not depend on
    another's."""

    def __init__(self, overheads: Overheads, seed: int, replication: int = 0):
        self.pre: list[_Draw] = []
        self.overrun: list[_Draw] = []
        self.post: list[_Draw] = []
        for j, m in enumerate(overheads.machines):
            rng = python_random(seed, replication, Purpose.OVERHEADS, j)
            self.pre.append(_Draw(rng, m.pre))
            self.overrun.append(_Draw(rng, m.overrun))
            self.post.append(_Draw(rng, m.post))

    def draw(self, machine: int) -> tuple[float, float, float]:
        """(pre, overrun, post) for a replica that starts on ``machine`` now."""
        return self.pre[machine](), self.overrun[machine](), self.post[machine]()
