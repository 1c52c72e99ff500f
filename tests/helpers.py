"""Small builders shared by the tests: experiments by hand, outputs by type, a child's stderr read."""

from __future__ import annotations

import importlib
import random
import select
import subprocess
import time
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import pytest

from mgst.core import Assign, Hold, JobRecord, MachineRecord, Output, Scheduler
from mgst.model import Job, JobClass, Machine
from mgst.policies import policy_class
from mgst.policies.base import Decisions, Policy


def make_policy(name: str, options: Mapping[str, Any] | None = None, seed: int = 0) -> Policy:
    """A registered policy, with options as an experiment file spells them and a seeded rng."""
    cls = policy_class(name)
    return cls(cls.Options.from_mapping(options or {}), random.Random(seed))


def new_core(
    policy: Policy,
    rates: Sequence[Sequence[float]],
    arrival_rates: Sequence[float] | None = None,
    availability: Sequence[float] | None = None,
) -> Scheduler:
    """A Scheduler, not started; ``rates`` is classes x machines (mu'_ij, as the papers print it).

    In check mode: every transition it makes is checked against mgst.core.transitions' table."""
    n_machines = len(rates[0])
    arrival_rates = arrival_rates if arrival_rates is not None else [1.0] * len(rates)
    availability = availability if availability is not None else [1.0] * n_machines
    classes = [JobClass(f"c{i}", a) for i, a in enumerate(arrival_rates)]
    machines = [
        Machine(f"M{j}", tuple(row[j] for row in rates), availability[j]) for j in range(n_machines)
    ]
    return Scheduler(classes, machines, policy, check=True)


def make_core(
    policy: Policy,
    rates: Sequence[Sequence[float]],
    arrival_rates: Sequence[float] | None = None,
    availability: Sequence[float] | None = None,
    *,
    up: bool = True,
    now: float = 0.0,
) -> Scheduler:
    """A started Scheduler (see new_core); with ``up``, every machine is brought up at ``now``
    (MachineUp: free, not asking). The outputs of start and of the MachineUps are dropped."""
    core = new_core(policy, rates, arrival_rates, availability)
    core.start(now)
    if up:
        for j in range(len(core.machines)):
            core.machine_up(now, j)
    return core


def job(id: int, cls: int = 0, t: float = 0.0) -> Job:
    return Job(id, cls, t)


def of(outputs: Iterable[Output], kind: type) -> list:
    """The outputs of one type, in order."""
    return [o for o in outputs if type(o) is kind]


def assigns(outputs: Iterable[Output]) -> list[Assign]:
    return of(outputs, Assign)


def queue_ids(core: Scheduler, key: Hashable = 0) -> list[int]:
    """Ids of the jobs waiting in queue ``key``, head first."""
    q = core.queue(key)
    return [] if q is None else [r.id for r in q]


def ready_ids(core: Scheduler) -> list[int]:
    return [m.index for m in core.ready_machines()]


class Scripted(Policy):
    """A test policy that never matches by itself; it yields whatever a test puts in ``todo``.

    ``todo`` is handed to the core (and emptied) after the next event, through on_event.
    """
    hooks = frozenset({"on_event"})

    name = "test-scripted"

    def __init__(self) -> None:
        super().__init__()
        self.todo: list = []

    def on_event(self, view: Scheduler, event: Any) -> Decisions:
        todo, self.todo = self.todo, []
        return todo


class Greedy(Policy):
    """Oldest queued job first; when none waits, the oldest running job (a replica).

    ``incremental = False``: its answer changes when a job starts running, which
    the core's incremental matching does not look for. ``limit_aware = False``
    makes it ignore max_replicas, to provoke the core's check.
    """
    hooks = frozenset({"choose"})

    name = "test-greedy"
    incremental = False

    def __init__(self, max_replicas: int = 2, limit_aware: bool = True) -> None:
        super().__init__()
        self.max_replicas = max_replicas
        self.limit_aware = limit_aware

    def choose(self, view: Scheduler, machine: MachineRecord) -> JobRecord | None:
        heads = [q.head for q in view.queues.values() if q.head is not None]
        if heads:
            return min(heads, key=lambda r: (r.submitted, r.id))
        running = sorted(view.running.values(), key=lambda r: (r.submitted, r.id))
        for rec in running:
            if not self.limit_aware or rec.live_replicas < self.max_replicas:
                return rec
        return None


class Gang(Policy):
    """Gang allocation (Casanova et al.'s iterations): run N jobs at once on N enrolled machines.

    Nothing starts until every enrolled machine asks and N jobs wait; then one
    Assign per machine, oldest jobs first, each machine taking the oldest job it
    can run (if some machine can run none, nobody starts). Otherwise every asking
    machine is held.
    """
    hooks = frozenset({"dispatch"})

    name = "test-gang"

    def __init__(self, members: tuple[int, ...]):
        super().__init__()
        self.members = members
        self.dispatches = 0

    def dispatch(self, view: Scheduler, new_job: JobRecord | None, asking: MachineRecord | None) -> Decisions:
        self.dispatches += 1
        n = len(self.members)
        if all(view.is_ready(j) for j in self.members) and view.queued_count >= n:
            waiting = sorted((r for q in view.queues.values() for r in q), key=lambda r: (r.submitted, r.id))
            plan = []
            for j in self.members:
                rates = view.machines[j].rates
                rec = next((r for r in waiting if rates[r.job_class] > 0 and r not in plan), None)
                if rec is None:
                    break
                plan.append(rec)
            if len(plan) == n:
                for rec, j in zip(plan, self.members):
                    yield Assign(rec.job, j)
                return
        for m in view.ready_machines():
            yield Hold(m.index)


def read_until(proc: subprocess.Popen, text: str, timeout: float) -> str:
    """What ``proc`` writes on stderr up to the line holding ``text`` (bounded in time)."""
    seen = ""
    deadline = time.monotonic() + timeout
    while text not in seen:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([proc.stderr], [], [], left)[0]:
            pytest.fail(f"no {text!r} from the process; it said {seen[-2000:]!r}")
        line = proc.stderr.readline()
        if not line:
            pytest.fail(f"the process ended before saying {text!r}: {seen[-2000:]!r}")
        seen += line
    return seen


def c_twin_params(module: str, attribute: str, python_twin: Any, what: str) -> tuple[Any, list]:
    """``module.attribute`` of one of mgst's C modules, or None where it is not built, and the
    parameters [python_twin, the C one (skipped where not built)] for tests of both."""
    try:  # built with the compiled modules; tested directly whichever build runs
        c_version = getattr(importlib.import_module(module), attribute)
    except ImportError:
        c_version = None
    needs_c = pytest.mark.skipif(c_version is None, reason=f"{what} is not built here (pip install -e .)")
    return c_version, [python_twin, pytest.param(c_version, marks=needs_c, id="c")]
