"""Failure injection: when a machine goes down and comes back, in wall time, from the simulator's streams."""

from __future__ import annotations

import math
from typing import Any

from mgst.availability import UpDown
from mgst.availability.exponential import ExponentialUpDown
from mgst.availability.weibull import WeibullNormalUpDown
from mgst.model import FailureModel, WeibullGroup

# The replication whose streams a testbed run shares with its simulation.
REPLICATION = 0
# The shortest up or down period a puller plays, in wall seconds; a shorter draw lasts this long instead.
# Going down and coming back is a new socket, a CURVE handshake, a hello and a welcome: about 1 ms on
# loopback (measured, median; 2.4 ms the worst of 200), a few ms on a LAN. A period shorter than that round
# cannot be played (the machine would be back before the mapper could hear it), and a law drawing periods of
# microseconds made the puller cycle ~700 times a second until ZeroMQ ran out of sockets. At 10 ms a puller
# cycles at most 50 times a second (measured: no socket or descriptor left over). The simulation beside a run
# draws the unclamped law, so the two differ only for laws whose periods, times the time unit, can be this short.
MIN_PERIOD = 0.01


def up_down(failures: Any, machine: int) -> UpDown:
    """The up/down periods (model time) of machine ``machine`` for a welcome's ``failures`` tuple.

    ``("exponential", mean_up, mean_down, seed)`` or ``("weibull", mttf, shape, repair_mean, repair_sd, seed)``,
    drawn as the simulator draws replication 0 of that seed (``mgst.availability``). ValueError, naming
    what is wrong, for anything else (an unknown law, a wrong length, values the law cannot take).
    """
    if not isinstance(failures, list | tuple) or not failures:
        raise ValueError(f"a failure model is a non-empty tuple, not {failures!r:.80}")
    kind, params = failures[0], tuple(failures[1:])
    if not all(isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in params):
        raise ValueError(f"{kind!r:.20} failure model: non-numeric or non-finite parameters {params!r:.80}")
    seed = params[-1] if params else None
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"{kind!r:.20} failure model: the seed must be a natural number, not {seed!r:.40}")
    if kind == "exponential":
        if len(params) != 3:
            raise ValueError(f"an exponential failure model is (mean_up, mean_down, seed), got {params!r:.80}")
        mean_up, mean_down = params[0], params[1]
        if not (mean_up > 0 and mean_down > 0):
            raise ValueError(f"exponential failure model: need mean_up > 0 and mean_down > 0, got {params!r:.80}")
        return ExponentialUpDown(FailureModel(float(mean_up), float(mean_down)), seed, REPLICATION, machine)
    if kind == "weibull":
        if len(params) != 5:
            raise ValueError("a weibull failure model is (mttf, shape, repair_mean, repair_sd, seed), "
                             f"got {params!r:.80}")
        group = WeibullGroup(*(float(x) for x in params[:4]))
        return WeibullNormalUpDown(group, seed, REPLICATION, machine)  # (ValueError for a law it cannot draw)
    raise ValueError(f"unknown failure model {kind!r:.40}; expected 'exponential' or 'weibull'")


class FailureSchedule:
    """Alternating up and down periods for one machine, in wall time.

    The periods are those the simulator draws for machine ``machine`` of replication 0
    with the same seed and law (:func:`up_down`), scaled to wall seconds by
    ``time_unit``: a testbed run and its simulation fail the same machines at the
    same model times. A period shorter than MIN_PERIOD wall seconds lasts MIN_PERIOD.
    The machine starts up at ``now``.
    """

    def __init__(self, failures: Any, machine: int, time_unit: float, now: float):
        if not (isinstance(time_unit, int | float) and math.isfinite(time_unit) and time_unit > 0):
            raise ValueError(f"time_unit must be a positive number of seconds, not {time_unit!r}")
        self.failures = tuple(failures) if isinstance(failures, list | tuple) else failures
        self._periods = up_down(failures, machine)
        self.time_unit = time_unit
        self.down_at = now + self._wall(self._periods.next_up())
        self.up_at = math.inf

    def _wall(self, period: float) -> float:
        """A drawn period (model time) in wall seconds, at least MIN_PERIOD."""
        return max(MIN_PERIOD, period * self.time_unit)

    def go_down(self, now: float) -> float:
        """The machine fails now; returns when it comes back."""
        self.up_at = now + self._wall(self._periods.next_down())
        self.down_at = math.inf
        return self.up_at

    def come_back(self, now: float) -> None:
        self.down_at = now + self._wall(self._periods.next_up())
        self.up_at = math.inf
