"""The policy's read-only view: the core's records (jobs, machines, queues, bags, timers) and what it may ask of them.

The core changes these records and nothing else does: a policy reads them through the view it
is given in every hook and acts only by returning decisions (mgst.core.hooks). The simulator and
the mapper read the same records through :class:`~mgst.core.scheduler.Scheduler`, which exposes
the view's attributes under the same names.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

from mgst.core.decisions import PolicyError
from mgst.core.ready import ReadyQueue
from mgst.core.state import BagRecord, JobQueue, JobRecord, JobStatus, MachineRecord, MachineState, ReplicaRecord
from mgst.model import JobClass, Machine


class View:
    """What a policy sees. Read it; never change it (only the core does).

    Plain attributes, so that reading one costs an attribute access:

    - ``now``: the model time of the event being handled;
    - ``classes``, ``machines``: the job classes and a :class:`MachineRecord` per machine, by index;
    - ``jobs``: every job ever seen, by id; ``running``: jobs with a live replica, by id;
    - ``queues``: waiting jobs by the policy's queue key (a :class:`JobQueue` each), and
      ``queues_version``, which counts queues added to and removed from it (for policies' caches);
      ``queued_count``: jobs waiting in them;
    - ``bags``: bags not yet complete, in arrival order; ``all_bags``: every bag, by id;
      ``last_bag``: the bag of the latest BagArrived;
    - ``capacity_version``: bumped whenever a machine goes up or down or its CPU share changes;
    - ``timers``: the policy's timers, by key (their due time);
    - ``stale_events``: events that referred to something already over (a late result, ...);
    - ``sizes_known``, ``policy_name``: whether the policy declares ``knows_sizes`` (then :meth:`task_size` answers),
      and its name (for the error when it does not).

    ``live``, ``given_up`` and ``ready_queue`` are the core's indexes; read them through the methods.
    """

    def __init__(self, classes: Sequence[JobClass], machines: Sequence[Machine], ready_queue: ReadyQueue):
        self.now = 0.0
        self.classes: tuple[JobClass, ...] = tuple(classes)
        self.machines: tuple[MachineRecord, ...] = tuple(
            MachineRecord(j, m.name, tuple(m.rates), m.availability, m.slots, dict(m.attributes), m.cpus)
            for j, m in enumerate(machines)
        )
        self.jobs: dict[int, JobRecord] = {}
        self.queues: dict[Hashable, JobQueue] = {}
        self.queues_version = 0
        self.running: dict[int, JobRecord] = {}
        self.bags: dict[int, BagRecord] = {}
        self.all_bags: dict[int, BagRecord] = {}
        self.last_bag: BagRecord | None = None
        self.queued_count = 0
        self.capacity_version = 0
        self.timers: dict[Hashable, float] = {}
        self.stale_events = 0
        self.live: dict[int, ReplicaRecord] = {}  # live replicas, by id
        # Replicas given up on (lost, timed out, or cancelled while their job went on) whose result
        # would still count; one entry per failure or policy cancel, so it stays small.
        self.given_up: dict[int, ReplicaRecord] = {}
        self.ready_queue = ready_queue  # machines asking for work, in request order (the Scheduler's)
        self.sizes_known = False  # the policy declares knows_sizes (set by the Scheduler)
        self.policy_name = ""

    def task_size(self, rec: JobRecord) -> float:
        """The job's size (work at unit rate), for a policy that declares ``knows_sizes``; else PolicyError."""
        if not self.sizes_known:
            raise PolicyError(
                f"policy {self.policy_name or '?'} reads the size of job {rec.job.id} but does not declare "
                "knows_sizes = True (a policy treats sizes as unknown unless it says it knows them)"
            )
        return rec.job.size

    def ready_machines(self) -> list[MachineRecord]:
        """Machines whose request for work is held, oldest request first."""
        machines = self.machines
        return [machines[j] for j in self.ready_queue]

    @property
    def ready_count(self) -> int:
        """Machines asking for work (each for ``asking`` slots)."""
        return len(self.ready_queue)

    def is_ready(self, machine: int) -> bool:
        return machine in self.ready_queue

    def queue(self, key: Hashable) -> JobQueue | None:
        return self.queues.get(key)

    def replica(self, replica_id: int) -> ReplicaRecord | None:
        """A live replica by id."""
        return self.live.get(replica_id)

    def live_replicas(self) -> Iterable[ReplicaRecord]:
        return self.live.values()

    def accepts_result(self, replica_id: int) -> bool:
        """Whether a result for this replica would count: it is live, or it was given up on
        (lost, cancelled, timed out) while its job still waits for a result. A driver checks this
        before it records anything of a reported result, so a replayed report changes nothing."""
        if replica_id in self.live:
            return True
        r = self.given_up.get(replica_id)
        return r is not None and r.job.status is not JobStatus.DONE

    def given_up_replica(self, replica_id: int) -> ReplicaRecord | None:
        """A replica the core gave up on (lost, timed out, cancelled) whose result would still count."""
        r = self.given_up.get(replica_id)
        return r if r is not None and r.job.status is not JobStatus.DONE else None

    def up_machines(self) -> list[MachineRecord]:
        return [m for m in self.machines if m.state is not MachineState.DOWN]
