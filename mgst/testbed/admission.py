"""Who may register under a machine's name, and how often: the rules a mapper applies to each hello."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from mgst.availability import registry as availability
from mgst.model import Experiment, Failures
from mgst.wire.protocol import Drop


@dataclass(frozen=True, slots=True)
class Holder:
    """What the mapper knows of a machine's name when a hello for it arrives."""

    bound_key: str | None  # the key the name was first registered with (None: never, or no CURVE)
    incarnations: tuple[int, ...]  # every incarnation registered under the name, the current one last
    identity: bytes | None  # the connection that holds the name now (None: nobody)
    live: bool  # that connection was heard from within the liveness window
    key_shared: bool  # the hello's key is bound to another machine's name too (a shared lab key)


@dataclass(frozen=True, slots=True)
class Refusal:
    drop: str  # a Drop reason, for the counters
    reason: str  # for the puller and the log
    fatal: bool


def admit(name: str, holder: Holder, key: str | None, incarnation: int, identity: bytes) -> Refusal | None:
    """None if the hello may register ``name``, else why not.

    1. A name is bound to the key that first registered it: another key is refused for good.
    2. An incarnation that a newer one replaced is refused for good: it is a duplicate
       puller that lost the name (this is what stops two pullers with the same key
       from taking the name from each other in turn).
    3. A new incarnation from another connection while the holder is alive is, with a
       key of its own, the machine restarting (its old work is gone). Without CURVE, or
       with a key shared by several machines, a restart cannot be told from a second
       puller under the same name: it is refused for now, and admitted once the
       holder has fallen silent.
    """
    if holder.bound_key is not None and key != holder.bound_key:
        return Refusal(Drop.NAME_TAKEN, f"machine name {name!r} is bound to another key than this puller's (the "
                                        "machine's own key file's, or the first key that registered the name): give "
                                        "the puller its machine's key, or its own name", True)
    if incarnation in holder.incarnations[:-1]:
        return Refusal(Drop.RETIRED, f"a newer puller has taken machine name {name!r}; is a second puller "
                                     "running under this name?", True)
    current = holder.incarnations[-1] if holder.incarnations else None
    if (holder.identity is not None and holder.identity != identity and current != incarnation and holder.live
            and (key is None or holder.key_shared)):
        return Refusal(Drop.NAME_TAKEN, f"machine name {name!r} is held by another live puller; a second "
                                        "puller under the same name is refused (retrying)", False)
    return None


# Hellos a key may send for one machine name (per name alone without CURVE): a token bucket of
# HELLO_BURST, refilled at hello_rate() a second. An honest puller says hello once per incarnation and,
# without an answer, again after a back-off that starts at 0.5 s and doubles; an injected failure makes a
# new incarnation. So the rate is 4 / the failure law's mean up-and-down cycle (wall), at least HELLO_RATE
# (a hello every 0.2 s: an experiment without failures, or with slow ones), at most one per
# SHORTEST_CYCLE. The burst absorbs a mapper's restart, a network blip, a cluster of short periods. A
# peer that re-registers faster is refused (not fatally) and journals nothing; each admitted hello
# costs at most 5 + 3 x slots journal events.
HELLO_BURST = 20.0
HELLO_RATE = 5.0
# Two of the puller's shortest failure periods (adjuster.failures.MIN_PERIOD, 10 ms): the fastest an
# injected failure law can make a puller restart, whatever its means.
SHORTEST_CYCLE = 0.02


def hello_rate(failures: Failures | None, time_unit: float, experiment: Experiment | None = None) -> float:
    """Hellos a second per (key, machine) that an honest puller under ``failures`` never exceeds (``experiment``:
    the machines, for a law that differs by machine, e.g. a trace)."""
    if failures is None:
        return HELLO_RATE
    cycle = availability.shortest_cycle(failures, experiment)  # type: ignore[arg-type]
    cycle_s = max(cycle * time_unit, SHORTEST_CYCLE)
    return min(1.0 / SHORTEST_CYCLE, max(HELLO_RATE, 4.0 / cycle_s))


class TokenBuckets:
    """Token buckets, one per key: :meth:`allow` says whether one more may pass (and spends it).

    For hellos the key is (CURVE key, machine): known names only, so memory is bounded by the
    experiment and the authorized keys, and a key naming a machine spends its own bucket for it,
    never the machine's own puller's.
    """

    __slots__ = ("burst", "rate", "_buckets")

    def __init__(self, burst: float = HELLO_BURST, rate: float = HELLO_RATE):
        self.burst = burst
        self.rate = rate
        self._buckets: dict[Hashable, tuple[float, float]] = {}  # -> (tokens, when)

    def allow(self, key: Hashable, now: float) -> bool:
        tokens, when = self._buckets.get(key, (self.burst, now))
        tokens = min(self.burst, tokens + max(0.0, now - when) * self.rate)
        allowed = tokens >= 1.0
        self._buckets[key] = (tokens - 1.0 if allowed else tokens, now)
        return allowed
