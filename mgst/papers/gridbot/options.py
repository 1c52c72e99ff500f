"""The [policy] keys of GridBot: every bag's expressions unless its own attributes give them, and the mechanisms'
parameters (docs/policies.md, "GridBot")."""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from mgst.papers.gridbot.classads import DEADLINE, POLICY_ATTRIBUTES, parse_attribute
from mgst.policies.base import PolicyOptions

Expression = str | int | float | bool  # a ClassAd expression's text, or a literal


@dataclasses.dataclass(frozen=True)
class GridBotOptions(PolicyOptions):
    """The [policy] keys of ``gridbot`` (docs/policies.md, "GridBot"); each expression is parsed when checked."""

    JobRequirements: Expression = "true"
    Rank: Expression = "Priority"
    Concurrency: Expression = "Host.NumCpus"
    Deadline: Expression | None = None  # none: a replica never expires
    ReplicationRequirements: Expression = "false"
    GridPolicy: Expression = "true"
    cycle: float = 60.0  # model time between two replication cycles (Algorithm 2)
    max_replicas: int = 5  # the most replicas of one job that exist at once (live and pending)
    tail_threshold: int = 100  # a bag is in its tail while its queue holds fewer jobs than this
    tail_sticky: bool = False  # once in its tail, a bag stays there (no flapping)
    replicate_below: int | None = None  # ReplicationRequirements is evaluated only below this queue (None: tail's)
    run_on_losers: bool = True  # a job's other replicas run on once it is done: their results discarded (waste)
    evaluate: str = "bag"  # "bag": a bag's waiting tasks evaluated once, as its queue's head; "job": each of them
    # at equal Rank, a bag's pending replicas before its waiting tasks (False: its waiting tasks first). GridBot
    # enqueues replicas only while the bag's queue runs low because otherwise "the replicated and not yet
    # replicated jobs would contend for the resources": replicas are not behind every waiting task
    replicas_first: bool = True
    checkpoints: bool = False  # a new replica resumes from the job's best checkpoint (GridBot's restart from scratch)
    # what the overlay (grids with start_hosts) counts as work queued for a grid: "queue", a bag's waiting tasks and
    # the replicas the cycle enqueued (GridBot's job queue holds both); "tasks", its waiting tasks alone
    overlay_demand: str = "queue"

    # Periodic timers: a run's length over each is checked against MAX_JOBS when an experiment is read.
    period_options: ClassVar[tuple[str, ...]] = ("cycle",)

    def validate(self) -> None:
        try:
            for name in POLICY_ATTRIBUTES:
                value = getattr(self, name)
                if value is None:
                    if name != DEADLINE:
                        raise ValueError(f"{name}: needs an expression")
                    continue
                try:
                    parse_attribute(name, value)
                except ValueError as err:
                    raise ValueError(f"{name}: {err}") from None
        except ImportError as err:
            raise ValueError(f"the gridbot policy cannot run here: {err}") from None
        if not (self.cycle > 0.0 and math.isfinite(self.cycle)):
            raise ValueError(f"cycle: must be a positive number of time units, got {self.cycle}")
        if self.max_replicas < 1:
            raise ValueError(f"max_replicas: must be >= 1, got {self.max_replicas}")
        if self.tail_threshold < 0:
            raise ValueError(f"tail_threshold: must be >= 0, got {self.tail_threshold}")
        if self.replicate_below is not None and self.replicate_below < 0:
            raise ValueError(f"replicate_below: must be >= 0, got {self.replicate_below}")
        if self.evaluate not in ("bag", "job"):
            raise ValueError(f"evaluate: must be 'bag' or 'job', got {self.evaluate!r}")
        if self.overlay_demand not in ("queue", "tasks"):
            raise ValueError(f"overlay_demand: must be 'queue' (waiting tasks and enqueued replicas) or 'tasks', "
                             f"got {self.overlay_demand!r}")
