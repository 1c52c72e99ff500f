"""Bags of Tasks in the scheduling core: one arrival event, a queue and counters per bag, completion.

A real Scheduler driven by events; every expected value is worked out by hand in the comments.
"""

from __future__ import annotations

from collections.abc import Hashable

import pytest
from helpers import plain

from mgst.core import (
    Assign,
    BagArrived,
    BagCompleted,
    Hold,
    JobCompleted,
    JobRecord,
    JobRequeued,
    JobStatus,
    MachineRecord,
    Scheduler,
)
from mgst.model import Bag, Job, JobClass, Machine
from mgst.policies.base import Decisions, Policy


class Oldest(Policy):
    """The oldest queued job (by submission, then id) the machine can run; records each call."""
    hooks = frozenset({"choose"})

    name = "test-oldest"

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []  # view.queued_count at each choose()

    def choose(self, view: Scheduler, machine: MachineRecord) -> JobRecord | None:
        self.calls.append(view.queued_count)
        waiting = [r for q in view.queues.values() for r in q if machine.rates[r.job_class] > 0]
        return min(waiting, key=lambda r: (r.submitted, r.id)) if waiting else None


class OwnKeys(Oldest):
    """Keys its own queues, so single jobs and bag tasks may share a run."""
    hooks = frozenset({"queue_key"})

    def queue_key(self, job: Job) -> Hashable:
        return ("class", job.job_class) if job.bag is None else ("bag", job.bag)


class Watcher(Policy):
    """Takes matching over, matches nothing, and records what each dispatch was told."""
    hooks = frozenset({"dispatch"})

    name = "test-watcher"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple] = []

    def dispatch(self, view: Scheduler, new_job: JobRecord | None, asking: MachineRecord | None) -> Decisions:
        last = view.last_bag
        self.seen.append((new_job, asking, None if last is None else last.id, view.queued_count))
        return [Hold(m.index) for m in view.ready_machines()]


def make(policy: Policy, n_machines: int = 3, *, ready: bool = True) -> Scheduler:
    """One class, ``n_machines`` one-slot machines at rate 1, each asking for work at t=0 if ``ready``."""
    core = Scheduler([JobClass("c0", 0.0)], [Machine(f"M{j}", (1.0,)) for j in range(n_machines)], policy, check=True)
    core.start(0.0)
    if ready:
        for j in range(n_machines):
            core.machine_ready(0.0, j)
    return core


def bag(bag_id: int, t: float, ids: range | list[int], attributes: tuple = ()) -> Bag:
    return Bag(bag_id, t, tuple(Job(i, 0, t, 1.0, bag_id) for i in ids), attributes)


def ids(core: Scheduler, key: Hashable) -> list[int]:
    q = core.queues.get(key)
    return [] if q is None else [r.id for r in q]


def counters(core: Scheduler, bag_id: int) -> tuple[int, int, int, int]:
    b = core.all_bags[bag_id]
    return b.size, b.queued, b.running_count, b.done


# ---------------------------------------------------------------- arrival


def test_bag_arrival_enqueues_every_task_then_matches_once():
    policy = Oldest()
    core = make(policy)  # M0, M1, M2 asking, in that order
    b = bag(7, 10.0, range(1, 6))
    t1, t2, t3 = b.tasks[:3]
    policy.calls.clear()

    out = core.handle(10.0, BagArrived(b))

    # three ready machines, five tasks: three Assigns, oldest tasks first, in request order
    assert plain(out) == [Assign(t1, 0, 1, 0.0, False), Assign(t2, 1, 2, 0.0, False), Assign(t3, 2, 3, 0.0, False)]
    # one matching pass, which saw all five tasks queued at its first call
    assert policy.calls == [5, 4, 3]
    assert counters(core, 7) == (5, 2, 3, 0)
    rec = core.all_bags[7]
    assert rec.first_dispatch == 10.0 and rec.submitted == 10.0 and rec.completed is None
    assert sorted(rec.running) == [1, 2, 3]
    assert ids(core, 7) == [4, 5]  # a task waits in its bag's queue, keyed by the bag id
    assert list(core.bags) == [7] and core.last_bag is rec
    assert all(core.jobs[i].bag is rec for i in range(1, 6))
    assert core.ready_count == 0
    core.check_invariants()


def test_bag_counters_follow_tasks_and_the_bag_completes_with_its_last_task():
    core = make(Oldest())
    b = bag(7, 10.0, range(1, 6))
    T = {t.id: t for t in b.tasks}
    core.bag_arrived(10.0, b)  # T1 on M0 (replica 1), T2 on M1 (2), T3 on M2 (3)

    assert core.replica_done(11.0, 1) == [JobCompleted(T[1], 1, 0)]
    assert counters(core, 7) == (5, 2, 2, 1)

    # M1 asks again with its result: it takes T4
    assert plain(core.replica_done(12.0, 2, ready=True)) == [JobCompleted(T[2], 2, 1), Assign(T[4], 1, 4, 0.0, False)]
    assert counters(core, 7) == (5, 1, 2, 2)

    # M2 fails: T3 goes back into its bag's queue, ahead of T5 (same submission, smaller id)
    assert core.machine_down(13.0, 2) == [JobRequeued(T[3], 3, 2, "machine down")]
    assert counters(core, 7) == (5, 2, 1, 2)
    assert ids(core, 7) == [3, 5]
    assert sorted(core.all_bags[7].running) == [4]
    assert core.jobs[3].status is JobStatus.QUEUED and core.jobs[3].requeues == 1
    core.check_invariants()

    assert plain(core.machine_ready(14.0, 0)) == [Assign(T[3], 0, 5, 0.0, False)]
    assert plain(core.machine_ready(15.0, 2)) == [Assign(T[5], 2, 6, 0.0, False)]  # M2 back up
    assert counters(core, 7) == (5, 0, 3, 2)
    assert 7 in core.queues and ids(core, 7) == []  # empty, but the bag is not complete
    assert core.replica_done(16.0, 4) == [JobCompleted(T[4], 4, 1)]
    assert core.replica_done(17.0, 5) == [JobCompleted(T[3], 5, 0)]
    assert counters(core, 7) == (5, 0, 1, 4)
    assert 7 in core.bags and core.all_bags[7].completed is None

    stale = core.stale_events
    assert core.replica_done(18.0, 3) == []  # T3's lost replica, after T3 is done: stale
    assert core.stale_events == stale + 1

    out = core.replica_done(20.0, 6)
    assert out == [JobCompleted(T[5], 6, 2), BagCompleted(7)]
    rec = core.all_bags[7]
    assert rec.completed == 20.0 and rec.is_complete
    assert rec.first_dispatch == 10.0
    assert counters(core, 7) == (5, 0, 0, 5)
    assert 7 not in core.bags and 7 not in core.queues and 7 in core.all_bags
    core.check_invariants()


def test_bag_waits_for_its_first_dispatch():
    core = make(Oldest(), 1, ready=False)
    core.machine_up(0.0, 0)  # up, not asking
    b = bag(1, 10.0, [1, 2])
    assert plain(core.bag_arrived(10.0, b)) == []
    assert core.all_bags[1].first_dispatch is None
    assert counters(core, 1) == (2, 2, 0, 0)
    assert plain(core.machine_ready(15.0, 0)) == [Assign(b.tasks[0], 0, 1, 0.0, False)]
    assert core.all_bags[1].first_dispatch == 15.0
    assert plain(core.replica_done(16.0, 1, ready=True)) == [JobCompleted(b.tasks[0], 1, 0), Assign(b.tasks[1], 0, 2)]
    assert core.all_bags[1].first_dispatch == 15.0  # the first, not the latest
    core.check_invariants()


def test_lost_task_goes_back_to_its_own_bag_queue():
    core = make(Oldest(), 1)
    b1, b2 = bag(1, 0.0, [1, 2]), bag(2, 1.0, [3, 4])
    assert plain(core.bag_arrived(0.0, b1)) == [Assign(b1.tasks[0], 0, 1, 0.0, False)]
    assert core.bag_arrived(1.0, b2) == []
    assert (ids(core, 1), ids(core, 2)) == ([2], [3, 4])
    assert core.machine_down(2.0, 0) == [JobRequeued(b1.tasks[0], 1, 0, "machine down")]
    assert (ids(core, 1), ids(core, 2)) == ([1, 2], [3, 4])
    assert counters(core, 1) == (2, 2, 0, 0) and counters(core, 2) == (2, 2, 0, 0)
    core.check_invariants()


def test_late_result_of_a_requeued_task_completes_it_and_its_bag():
    core = make(Oldest(), 1)
    b = bag(5, 0.0, [1])
    core.bag_arrived(0.0, b)  # replica 1 on M0
    core.machine_down(2.0, 0)  # T1 requeued
    assert counters(core, 5) == (1, 1, 0, 0)
    out = core.replica_done(3.0, 1)  # M0 had finished it after all
    assert out == [JobCompleted(b.tasks[0], 1, 0), BagCompleted(5)]
    assert core.all_bags[5].completed == 3.0
    assert counters(core, 5) == (1, 0, 0, 1)
    assert ids(core, 5) == [] and 5 not in core.queues and 5 not in core.bags
    core.check_invariants()


def test_empty_bag_completes_on_arrival():
    core = make(Oldest())
    out = core.bag_arrived(5.0, Bag(3, 5.0, ()))
    assert out == [BagCompleted(3)]
    rec = core.all_bags[3]
    assert rec.completed == 5.0 and rec.size == 0 and rec.first_dispatch is None
    assert 3 not in core.bags and 3 not in core.queues
    assert [m.index for m in core.ready_machines()] == [0, 1, 2]  # still asking, nothing to run
    core.check_invariants()


def test_bag_arriving_twice_is_stale_and_changes_nothing():
    core = make(Oldest(), 1, ready=False)
    b = bag(7, 10.0, range(1, 6))
    assert core.bag_arrived(10.0, b) == []
    stale = core.stale_events
    assert core.bag_arrived(11.0, bag(7, 11.0, range(10, 13))) == []
    assert core.stale_events == stale + 1
    assert counters(core, 7) == (5, 5, 0, 0)
    assert ids(core, 7) == [1, 2, 3, 4, 5] and core.all_bags[7].submitted == 10.0
    assert sorted(core.jobs) == [1, 2, 3, 4, 5]
    core.check_invariants()


def test_bag_arriving_again_after_completion_is_still_stale():
    core = make(Oldest(), 1)
    core.bag_arrived(0.0, bag(1, 0.0, [1]))
    assert core.replica_done(1.0, 1) == [JobCompleted(Job(1, 0, 0.0, 1.0, 1), 1, 0), BagCompleted(1)]
    stale = core.stale_events
    assert core.bag_arrived(2.0, bag(1, 2.0, [2])) == []
    assert core.stale_events == stale + 1
    assert 2 not in core.jobs and core.all_bags[1].completed == 1.0


def test_bag_attributes_and_last_bag():
    core = make(Oldest(), 1, ready=False)
    core.bag_arrived(0.0, bag(1, 0.0, [1], (("user", "u1"), ("size", 3))))
    core.bag_arrived(1.0, bag(2, 1.0, [2]))
    assert core.all_bags[1].attributes == {"user": "u1", "size": 3}
    assert core.all_bags[2].attributes == {}
    assert core.last_bag is core.all_bags[2]
    assert list(core.bags) == [1, 2]  # arrival order


def test_dispatch_after_a_bag_arrival_sees_no_new_job_and_the_bag_as_last_bag():
    policy = Watcher()
    core = make(policy, 2)
    policy.seen.clear()
    core.bag_arrived(4.0, bag(9, 4.0, [1, 2, 3]))
    assert policy.seen == [(None, None, 9, 3)]  # called once, with all three tasks queued
    assert counters(core, 9) == (3, 3, 0, 0)


def test_a_lone_task_starts_its_bag_and_joins_it_later_while_not_complete():
    core = make(Oldest(), 1, ready=False)
    core.job_arrived(2.0, Job(1, 0, 2.0, 1.0, 9))
    core.job_arrived(3.0, Job(2, 0, 3.0, 1.0, 9))
    rec = core.all_bags[9]
    assert (rec.submitted, rec.size, rec.queued) == (2.0, 2, 2)
    assert ids(core, 9) == [1, 2]
    core.check_invariants()


def test_task_for_a_completed_bag_is_rejected():
    core = make(Oldest(), 1)
    core.bag_arrived(0.0, bag(1, 0.0, [1]))
    core.replica_done(1.0, 1)
    with pytest.raises(ValueError, match="complete"):
        core.job_arrived(2.0, Job(2, 0, 2.0, 1.0, 1))


def test_task_naming_another_bag_is_rejected():
    core = make(Oldest(), 1)
    with pytest.raises(ValueError, match="belongs to bag 8"):
        core.bag_arrived(0.0, Bag(1, 0.0, (Job(1, 0, 0.0, 1.0, 8),)))
    assert 1 not in core.all_bags and not core.jobs


# ---------------------------------------------------------------- bags and single jobs


def test_single_job_after_bags_with_the_default_queue_key_is_a_clear_error():
    core = make(Oldest(), 1, ready=False)
    core.bag_arrived(0.0, bag(1, 0.0, [1]))
    with pytest.raises(ValueError, match="mixing bags and single jobs needs a policy with its own queue_key"):
        core.job_arrived(1.0, Job(2, 0, 1.0))


def test_bag_after_single_jobs_with_the_default_queue_key_is_a_clear_error():
    core = make(Oldest(), 1, ready=False)
    core.job_arrived(0.0, Job(1, 0, 0.0))
    with pytest.raises(ValueError, match="mixing bags and single jobs needs a policy with its own queue_key"):
        core.bag_arrived(1.0, bag(1, 1.0, [2]))


def test_rejected_bag_leaves_the_core_as_it_was():
    core = make(Oldest(), 1, ready=False)
    core.job_arrived(0.0, Job(1, 0, 0.0))
    with pytest.raises(ValueError):
        core.bag_arrived(1.0, bag(0, 1.0, [2]))
    assert ids(core, 0) == [1]
    assert not core.all_bags and not core.bags
    core.check_invariants()


def test_a_policy_with_its_own_queue_key_may_mix_bags_and_single_jobs():
    core = make(OwnKeys(), 1, ready=False)
    core.machine_up(0.0, 0)
    j1 = Job(1, 0, 0.0)
    b = bag(4, 1.0, [2, 3])
    core.job_arrived(0.0, j1)
    core.bag_arrived(1.0, b)
    assert plain(ids(core, ("class", 0))) == [1] and ids(core, ("bag", 4)) == [2, 3]
    assert plain(core.machine_ready(2.0, 0)) == [Assign(j1, 0, 1, 0.0, False)]
    assert plain(core.replica_done(3.0, 1, ready=True)) == [JobCompleted(j1, 1, 0), Assign(b.tasks[0], 0, 2)]
    assert counters(core, 4) == (2, 1, 1, 0)
    assert plain(core.replica_done(4.0, 2, ready=True)) == [JobCompleted(b.tasks[0], 2, 0), Assign(b.tasks[1], 0, 3)]
    assert core.replica_done(5.0, 3) == [JobCompleted(b.tasks[1], 3, 0), BagCompleted(4)]
    assert core.all_bags[4].completed == 5.0 and 4 not in core.bags
    core.check_invariants()
