"""Per-host statistics the core keeps for policies and results: completions, errors, busy and up time, recent ones."""

from __future__ import annotations

from typing import Final

# How many recent replica outcomes a machine remembers (GridBot-style host statistics).
RECENT: Final = 20
_RECENT_MASK: Final = (1 << RECENT) - 1


class MachineStats:
    """Per-host statistics kept by the core, for policies and for results."""

    __slots__ = (
        "completed", "lost", "cancelled", "timed_out", "failed", "busy_time", "up_time", "failures",
        "suspicions", "completed_by_class", "service_by_class", "recent_bits", "recent_count",
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

    def mean_service(self, job_class: int) -> float | None:
        """Mean sent-to-done time of this class's completed replicas here (None before any)."""
        n = self.completed_by_class[job_class]
        return self.service_by_class[job_class] / n if n else None
