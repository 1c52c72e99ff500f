"""Per-host statistics the core keeps for policies and results: completions, errors, busy and up time, recent ones."""

from __future__ import annotations

import math
from typing import Final

# How many recent replica outcomes a machine remembers (GridBot-style host statistics).
RECENT: Final = 20
_RECENT_MASK: Final = (1 << RECENT) - 1
# A model day, for jobs_today: model time in seconds (as Kondo et al.'s traces and GridBot's statistics have it).
DAY: Final = 86400.0


class MachineStats:
    """Per-host statistics kept by the core, for policies and for results."""

    __slots__ = (
        "completed", "lost", "cancelled", "timed_out", "failed", "busy_time", "up_time", "failures",
        "suspicions", "completed_by_class", "service_by_class", "recent_bits", "recent_count", "discarded",
        "discarded_time", "discarded_results", "day", "jobs_in_day",
    )

    def __init__(self, n_classes: int):
        self.completed = 0  # replicas that completed their job
        self.lost = 0  # replicas that ended without a result: machine down, failed or timed out
        self.cancelled = 0  # replicas cancelled (siblings of a finished replica, ...)
        self.timed_out = 0  # of which: replicas the policy gave up on
        self.failed = 0  # of which: replicas that failed while the machine stayed up
        self.busy_time = 0.0  # model time spent running replicas, whatever their fate
        self.up_time = 0.0  # model time up, counted at each down event and at close()
        self.failures = 0  # times the machine went down
        self.suspicions = 0  # times a policy declared it suspected down (not counted in failures)
        # Replicas that ran on after their job was done (a policy that lets losers run on) and ended here, however
        # they ended, and the machine time they held (sent to end, less any wait for a CPU): the waste.
        self.discarded = 0
        self.discarded_time = 0.0
        self.discarded_results = 0  # of which: losers that delivered (a success of the host's, not a used one)
        # Replicas started on the host during model day ``day`` (days of DAY time units from time 0): JobsToday.
        self.day = 0
        self.jobs_in_day = 0
        self.completed_by_class = [0] * n_classes
        self.service_by_class = [0.0] * n_classes  # sum of sent->done times of completed replicas
        # The last RECENT outcomes (see note_outcome), as bits, the latest in bit 0: 1 is a result.
        # Two ints, not a deque: a deque is a 600-byte block per machine, cold at every append.
        self.recent_bits = 0
        self.recent_count = 0

    def note_outcome(self, result: bool) -> None:
        """A replica ended here with a result (True) or an error (False)."""
        self.recent_bits = ((self.recent_bits << 1) | (1 if result else 0)) & _RECENT_MASK
        if self.recent_count < RECENT:
            self.recent_count += 1

    @property
    def recent(self) -> tuple[bool, ...]:
        """The last RECENT outcomes, oldest first: True for a result, False for an error."""
        bits = self.recent_bits
        return tuple(bool(bits >> i & 1) for i in range(self.recent_count - 1, -1, -1))

    @property
    def errors(self) -> int:
        """Replicas that ended badly here: lost, timed out or failed (cancelled ones are not its fault)."""
        return self.lost

    @property
    def error_rate(self) -> float:
        """Errors over replicas that ended with a result or an error (0 before any)."""
        n = self.completed + self.errors
        return self.errors / n if n else 0.0

    @property
    def recent_successes(self) -> int:
        """Results among the last RECENT replicas that ended with a result or an error."""
        return self.recent_bits.bit_count()

    @property
    def successes(self) -> int:
        """Replicas that delivered a result here: those that completed their job, and losers that delivered."""
        return self.completed + self.discarded_results

    def started(self, now: float) -> None:
        """A replica started here at ``now`` (for jobs_today)."""
        day = int(now // DAY) if now >= 0.0 else 0
        if day != self.day:
            self.day, self.jobs_in_day = day, 0
        self.jobs_in_day += 1

    def jobs_today(self, now: float) -> int:
        """Replicas started here during the model day that holds ``now`` (days of DAY time units from time 0)."""
        return self.jobs_in_day if (int(now // DAY) if now >= 0.0 else 0) == self.day else 0

    @property
    def mean_turnaround(self) -> float | None:
        """Mean sent-to-result time of the replicas that completed their job here (None before any)."""
        n = self.completed
        return sum(self.service_by_class) / n if n else None

    def mean_service(self, job_class: int) -> float | None:
        """Mean sent-to-done time of this class's completed replicas here (None before any)."""
        n = self.completed_by_class[job_class]
        return self.service_by_class[job_class] / n if n else None


# A host's availability states as the history counts them (MachineHistory.time_in): up with CPU to give, at a CPU
# share of 0 (its owner took it all: suspended), down (failed, not yet joined, or suspected), and reclaimed by its
# owner at a share above 0 (its running work goes on, slowly; it asks for no new work).
UP: Final = "up"
SUSPENDED: Final = "suspended"
DOWN: Final = "down"
RECLAIMED: Final = "reclaimed"
_STATES: Final = (UP, SUSPENDED, DOWN, RECLAIMED)  # MachineHistory's state index -> name


class MachineHistory:
    """A host's availability history, kept by the core (Lifecycle) for every policy to read.

    From model time 0, when the history begins with the host DOWN (not yet joined), it counts the time
    spent in each state (UP with a CPU share > 0, SUSPENDED at share 0, DOWN, RECLAIMED at a share > 0) and
    the periods in each (:meth:`periods`: the transitions into it), the CPU delivered (the
    integral of the share over time: CPU-seconds; times the host's rate, work), and, per availability
    interval (from the host's coming up to its going down; a suspicion ends one too), how many ended and
    the CPU each delivered (their sum and sum of squares: bounded memory). Completions and losses are
    the host's :class:`MachineStats`, read through it. The accessors take ``now``: the open state and
    the open interval count up to it. Pure bookkeeping: nothing in the core reads it.
    """

    __slots__ = (
        "stats", "state", "share", "mark", "times", "cpu", "interval_start", "interval_cpu0", "intervals",
        "interval_sum", "interval_sumsq", "reclaimed", "entered",
    )

    def __init__(self, stats: MachineStats, share: float):
        self.stats = stats
        self.state = 2  # an index into _STATES: DOWN
        self.share = share  # the CPU share last noted (kept while down: the next up may not say one)
        self.mark = 0.0  # when the counts below were last brought up to date
        self.times = [0.0, 0.0, 0.0, 0.0]  # time in each state, by index, until ``mark``
        self.entered = [0, 0, 1, 0]  # periods begun in each state, by index (the first: DOWN, at 0)
        self.reclaimed = False  # its owner has it (RECLAIMED), whatever its share
        self.cpu = 0.0  # CPU delivered until ``mark``
        self.interval_start = 0.0  # when the open availability interval began (if up)
        self.interval_cpu0 = 0.0  # ``cpu`` when it began
        self.intervals = 0  # availability intervals ended
        self.interval_sum = 0.0  # CPU delivered in them: sum, and sum of squares
        self.interval_sumsq = 0.0

    def _advance(self, now: float) -> None:
        dt = now - self.mark
        if dt > 0.0:
            state = self.state
            times = self.times
            times[state] = times[state] + dt
            if state == 0 or state == 3:
                self.cpu += self.share * dt
            self.mark = now

    def _enter(self, state: int) -> None:
        if state != self.state:
            self.state = state
            entered = self.entered
            entered[state] = entered[state] + 1

    def _up_state(self) -> int:
        return 1 if self.share <= 0.0 else 3 if self.reclaimed else 0

    def up(self, now: float, share: float) -> None:
        """The host came up (a new availability interval begins) at CPU share ``share``."""
        self._advance(now)
        self.share = share
        self.reclaimed = False
        self._enter(self._up_state())
        self.interval_start = now
        self.interval_cpu0 = self.cpu

    def down(self, now: float) -> None:
        """The host went down (or was suspected): its availability interval ends."""
        self._advance(now)
        if self.state != 2:
            d = self.cpu - self.interval_cpu0
            self.intervals += 1
            self.interval_sum += d
            self.interval_sumsq += d * d
            self._enter(2)

    def set_share(self, now: float, share: float) -> None:
        """The host's CPU share changed (while down: noted for its next interval)."""
        self._advance(now)
        self.share = share
        if self.state != 2:
            self._enter(self._up_state())

    def set_reclaimed(self, now: float, reclaimed: bool) -> None:
        """Its owner took it back (RECLAIMED) or gave it again (UP), at the share last noted."""
        self._advance(now)
        self.reclaimed = reclaimed
        if self.state != 2:
            self._enter(self._up_state())

    # ------------------------------------------------------------------ reading it

    @property
    def is_up(self) -> bool:
        return self.state != 2

    def delivered(self, now: float) -> float:
        """CPU-seconds delivered from time 0 to ``now`` (times the host's rate for a class: work of that class)."""
        state = self.state
        if (state == 0 or state == 3) and now > self.mark:
            return self.cpu + self.share * (now - self.mark)
        return self.cpu

    def time_in(self, state: str, now: float) -> float:
        """Time spent in ``state`` (UP, SUSPENDED, DOWN or RECLAIMED) from time 0 to ``now``."""
        if state not in _STATES:
            raise ValueError(f"unknown availability state {state!r}; the states are {', '.join(_STATES)}")
        i = _STATES.index(state)
        t = self.times[i]
        if i == self.state and now > self.mark:
            t += now - self.mark
        return t

    def open_interval(self, now: float) -> float:
        """CPU delivered so far in the open availability interval (0 while down)."""
        return self.delivered(now) - self.interval_cpu0 if self.state != 2 else 0.0

    def mean_delivered_per_interval(self, now: float) -> float | None:
        """The CPU a host delivers per availability interval, by its history (None: never up).

        The mean over the intervals that ended; the open one counts (as if it ended now) only when it has
        delivered more than that mean already, or when none has ended: a host just back up is not
        marked down for the few seconds its new interval has lasted.
        """
        n = self.intervals
        open_cpu = self.open_interval(now)
        if n and (self.state == 2 or open_cpu <= self.interval_sum / n):
            return self.interval_sum / n
        if self.state == 2:
            return None
        return (self.interval_sum + open_cpu) / (n + 1)

    def sd_delivered_per_interval(self) -> float | None:
        """The population standard deviation of the CPU delivered per ended interval (None before one ended)."""
        n = self.intervals
        if not n:
            return None
        mean = self.interval_sum / n
        return math.sqrt(max(0.0, self.interval_sumsq / n - mean * mean))

    def periods(self, state: str) -> int:
        """Periods the host began in ``state`` (UP, SUSPENDED, DOWN or RECLAIMED) so far: its transitions into it
        (the first period, DOWN from time 0, counts)."""
        if state not in _STATES:
            raise ValueError(f"unknown availability state {state!r}; the states are {', '.join(_STATES)}")
        return self.entered[_STATES.index(state)]

    @property
    def completed(self) -> int:
        """Replicas that completed their job here."""
        return self.stats.completed

    @property
    def errors(self) -> int:
        """Replicas that ended badly here (lost, failed, timed out): MachineStats.errors."""
        return self.stats.errors

    @property
    def successes(self) -> int:
        """Replicas that delivered a result here (MachineStats.successes)."""
        return self.stats.successes

    @property
    def recent_successes(self) -> int:
        """Results among the host's last RECENT replica outcomes."""
        return self.stats.recent_successes

    def jobs_today(self, now: float) -> int:
        """Replicas started here during the model day of ``now`` (MachineStats.jobs_today)."""
        return self.stats.jobs_today(now)

    @property
    def mean_turnaround(self) -> float | None:
        """Mean sent-to-result time of the replicas that completed their job here (None before any)."""
        return self.stats.mean_turnaround

    @property
    def lost(self) -> int:
        """Replicas that ended here without a result: machine down, failed or timed out."""
        return self.stats.lost
