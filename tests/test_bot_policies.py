"""Seed 000's five Bag-of-Tasks schedulers on states built by driving a real core; decisions derived by hand."""

from __future__ import annotations

import heapq
import itertools
import random
from collections import Counter
from collections.abc import Iterable, Sequence

import pytest
from helpers import assigns, make_policy, of, plain, ready_ids

from mgst.core import (
    Assign,
    BagCompleted,
    Cancel,
    Hold,
    JobCompleted,
    JobStatus,
    MachineState,
    Output,
    ReplicaTimedOut,
    Scheduler,
    SetTimer,
)
from mgst.model import Bag, Job, JobClass, Machine
from mgst.policies import names, policy_class
from mgst.policies.base import Policy
from mgst.policies.timeouts import ReplicaTimeouts

POLICIES = ("fcfs_excl", "fcfs_share", "rr", "rr_nrf", "long_idle")


def bot_core(name: str, n_machines: int = 4, seed: int = 0, slots: int = 1, **options) -> Scheduler:
    """A started core over one task class (mean size 10) and ``n_machines`` machines of rate 1, all up, none asking."""
    policy = make_policy(name, options, seed)
    machines = [Machine(f"M{j}", (1.0,), 1.0, slots) for j in range(n_machines)]
    core = Scheduler([JobClass("task", 0.0, 10.0)], machines, policy, check=True)
    core.start(0.0)
    for j in range(n_machines):
        core.machine_up(0.0, j)
    return core


def bag(bag_id: int, t: float, task_ids: Iterable[int]) -> Bag:
    return Bag(bag_id, t, tuple(Job(i, 0, t, 1.0, bag_id) for i in task_ids))


def tasks(outputs: Sequence[Output]) -> list[int]:
    """Job ids of the Assigns, in order."""
    return [a.job.id for a in assigns(outputs)]


def ask(core: Scheduler, t: float, machine: int) -> list[int]:
    """Machine asks at ``t``; the job ids it was given."""
    return tasks(core.machine_ready(t, machine))


def live(core: Scheduler, job_id: int) -> int:
    return len(core.jobs[job_id].replicas)


def ask_bag(core: Scheduler, t: float, machine: int) -> list[int]:
    """Machine asks at ``t``; the bag ids of the tasks it was given (which task of a bag is drawn at random)."""
    return [core.jobs[i].bag.id for i in ask(core, t, machine)]


# ---------------------------------------------------------------- registry and options


def test_the_five_are_registered_with_their_options():
    assert set(POLICIES) <= set(names())
    for name in POLICIES:
        policy = make_policy(name)
        assert policy.incremental is False
        assert policy.resume_from_checkpoint is True
        assert make_policy(name, {"checkpoints": False}).resume_from_checkpoint is False
        assert make_policy(name, {"replicas": 3}).max_replicas == 3
        with pytest.raises(ValueError, match=r"^replicas: must be >= 1"):
            policy_class(name).Options.from_mapping({"replicas": 0})
        with pytest.raises(ValueError, match=r"^replica: unknown option"):
            policy_class(name).Options.from_mapping({"replica": 2})
    # RepThresh: 2 (the paper), except FCFS-Excl's "potentially unlimited" (2**31, documented)
    assert [make_policy(name).max_replicas for name in POLICIES] == [2**31, 2, 2, 2, 2]


def test_jobs_without_a_bag_are_refused():
    core = bot_core("rr")
    with pytest.raises(ValueError, match="schedules Bags of Tasks"):
        core.job_arrived(0.0, Job(1, 0, 0.0))


# ---------------------------------------------------------------- FCFS-Excl


def test_fcfs_excl_replicates_the_oldest_bag_without_limit_and_starves_the_next():
    core = bot_core("fcfs_excl", n_machines=5)
    core.bag_arrived(0.0, bag(1, 0.0, [1]))
    core.bag_arrived(0.5, bag(2, 0.5, [2]))
    # Only bag 1 is ever selected while it is incomplete, and its one task is always a
    # candidate (no replica limit): every machine that asks runs a replica of task 1.
    for j in range(5):
        assert ask(core, 1.0 + j, j) == [1]
    assert live(core, 1) == 5
    assert core.jobs[2].status is JobStatus.QUEUED
    # Replica 1 (on M0) finishes: its 4 siblings are cancelled, bag 1 completes, and M0,
    # asking again, gets bag 2's task, which then takes every machine that asks.
    out = core.replica_done(6.0, 1, ready=True)
    assert of(out, Cancel) == [Cancel(r, r - 1, 1) for r in (2, 3, 4, 5)]
    assert BagCompleted(1) in out
    assert tasks(out) == [2]
    for j in range(1, 5):
        assert ask(core, 7.0, j) == [2]
    assert live(core, 2) == 5
    core.check_invariants()


def test_fcfs_excl_with_a_bound_holds_machines_rather_than_serve_another_bag():
    core = bot_core("fcfs_excl", n_machines=3, replicas=2)
    core.bag_arrived(0.0, bag(1, 0.0, [1]))
    core.bag_arrived(0.0, bag(2, 0.0, [2]))
    assert ask(core, 1.0, 0) == [1]
    assert ask(core, 1.0, 1) == [1]
    assert core.machine_ready(1.0, 2) == [Hold(2)]  # bag 2 waits: the grid is bag 1's
    assert core.jobs[2].status is JobStatus.QUEUED


# ---------------------------------------------------------------- FCFS-Share


def test_fcfs_share_serves_the_oldest_bag_while_it_has_a_candidate_then_the_next():
    core = bot_core("fcfs_share", n_machines=5)
    core.bag_arrived(0.0, bag(1, 0.0, [1]))
    core.bag_arrived(0.5, bag(2, 0.5, [2, 3]))
    # Bag 1's task is a candidate until it has RepThresh = 2 replicas, though bag 2 waits.
    assert ask(core, 1.0, 0) == [1]
    assert ask(core, 2.0, 1) == [1]
    # Bag 1 has no candidate left: bag 2, its waiting tasks first (fewest replicas: 0), either first.
    assert sorted(ask(core, 3.0, 2) + ask(core, 4.0, 3)) == [2, 3]
    assert ask(core, 5.0, 4) in ([2], [3])  # a tie on 1 replica: either
    assert live(core, 2) + live(core, 3) == 3
    core.check_invariants()


def test_fcfs_share_in_one_round_when_the_bag_arrives():
    core = bot_core("fcfs_share", n_machines=5)
    for j in range(5):
        assert core.machine_ready(0.0, j) == [Hold(j)]
    assert tasks(core.bag_arrived(1.0, bag(1, 1.0, [1]))) == [1, 1]
    out = tasks(core.bag_arrived(2.0, bag(2, 2.0, [2, 3])))
    assert out[:2] == [2, 3] and out[2] in (2, 3) and len(out) == 3
    assert ready_ids(core) == []


# ---------------------------------------------------------------- RR


def test_rr_rotates_across_events_skips_bags_without_candidates_and_drops_completed_ones():
    core = bot_core("rr", n_machines=10)
    core.bag_arrived(0.0, bag(1, 0.0, [11, 12, 13, 14, 15]))  # A
    core.bag_arrived(0.1, bag(2, 0.1, [21]))  # B
    core.bag_arrived(0.2, bag(3, 0.2, [31, 32, 33, 34, 35]))  # C
    # One machine asks per event: the turn goes A, B, C, A, B, C, A; then B's only task has
    # two replicas (RepThresh) and B is skipped: C; then A.
    got = [ask_bag(core, 1.0 + j, j) for j in range(9)]
    assert got == [[1], [2], [3], [1], [2], [3], [1], [3], [1]]
    # B's task finishes on M1 (replica 2); its sibling on M4 (replica 5) is cancelled and B
    # completes. A was served last; the bag after A was B, which left the circle: C.
    out = core.replica_done(10.0, 2, ready=True)
    assert of(out, Cancel) == [Cancel(5, 4, 21)]
    assert BagCompleted(2) in out
    assert [core.jobs[i].bag.id for i in tasks(out)] == [3]
    assert ask_bag(core, 11.0, 4) == [1]  # after C: A
    assert ask_bag(core, 12.0, 9) == [3]  # after A: C
    # Each of A's and C's tasks was drawn once (a waiting task has no replica: the fewest).
    assert [live(core, i) for i in (11, 12, 13, 14, 15, 31, 32, 33, 34, 35)] == [1] * 10
    core.check_invariants()


def test_rr_a_new_bag_joins_the_circle_at_the_end():
    core = bot_core("rr", n_machines=4)
    core.bag_arrived(0.0, bag(1, 0.0, [11, 12]))
    assert ask_bag(core, 1.0, 0) == [1]  # A served last; the circle is [A]: A again next...
    core.bag_arrived(2.0, bag(2, 2.0, [21]))
    assert ask(core, 3.0, 1) == [21]  # ...but B arrived, and the bag after A is now B
    assert ask_bag(core, 4.0, 2) == [1]
    assert ask(core, 5.0, 3) == [21]


def test_rr_a_bag_completing_behind_the_turn_leaves_it_in_place():
    core = bot_core("rr", n_machines=4)
    core.bag_arrived(0.0, bag(1, 0.0, [11]))  # A
    core.bag_arrived(0.0, bag(2, 0.0, [21, 22]))  # B
    core.bag_arrived(0.0, bag(3, 0.0, [31, 32]))  # C
    assert [ask_bag(core, 1.0, j) for j in range(3)] == [[1], [2], [3]]
    # C was served last: A is next. A's task finishes on M0 and A completes: the turn goes
    # on to the bag after A, B (not C).
    out = core.replica_done(2.0, 1, ready=True)
    assert BagCompleted(1) in out
    assert [core.jobs[i].bag.id for i in tasks(out)] == [2]
    assert ask_bag(core, 3.0, 3) == [3]


# ---------------------------------------------------------------- RR-NRF


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # The first three picks were of bags with nothing running: the turn never moved from
        # A. B lost its only running task: RR-NRF serves B first, without moving the turn,
        # then A (RR), then B (after A).
        ("rr_nrf", [[2], [1], [2]]),
        # RR served A, B, C: the turn is back at A. It goes on: A, B, C.
        ("rr", [[1], [2], [3]]),
    ],
)
def test_rr_nrf_serves_a_bag_with_nothing_running_before_the_turn(name, expected):
    core = bot_core(name, n_machines=6)
    for b in (1, 2, 3):
        core.bag_arrived(0.0, bag(b, 0.0, [10 * b + 1, 10 * b + 2, 10 * b + 3]))
    assert [ask_bag(core, 1.0 + j, j) for j in range(3)] == [[1], [2], [3]]
    core.machine_down(4.0, 1)  # bag 2's task is requeued: bag 2 has no running task
    assert not core.bags[2].running
    assert [ask_bag(core, 5.0 + k, j) for k, j in enumerate((3, 4, 5))] == expected
    core.check_invariants()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # The turn is at D (C was served last). Bags with nothing running: B and D (their
        # machines failed) and E (new). RR-NRF takes them in circular order from the turn,
        # D, E, B, without moving it; then RR resumes at D.
        ("rr_nrf", [4, 5, 2, 4]),
        # RR: D, E, then A (a replica), B.
        ("rr", [4, 5, 1, 2]),
    ],
)
def test_rr_nrf_takes_bags_with_nothing_running_in_circular_order_from_the_turn(name, expected):
    core = bot_core(name, n_machines=11)
    for b in (1, 2, 3, 4):
        core.bag_arrived(0.0, bag(b, 0.0, [10 * b + 1, 10 * b + 2]))
    # RR-NRF: the first four picks are of bags with nothing running (the turn stays at A);
    # then RR from A: A, B, C. RR: A, B, C, D, A, B, C. Either way the same bags are served.
    assert [ask_bag(core, 1.0, j) for j in range(7)] == [[1], [2], [3], [4], [1], [2], [3]]
    for j in (1, 3, 5):  # tasks of B, D, B: B and D have nothing running
        core.machine_down(2.0, j)
    assert not core.bags[2].running and not core.bags[4].running
    core.bag_arrived(3.0, bag(5, 3.0, [51, 52]))
    got = [ask_bag(core, 4.0 + k, j) for k, j in enumerate((7, 8, 9, 10))]
    assert [b for (b,) in got] == expected
    core.check_invariants()


# ---------------------------------------------------------------- LongIdle


@pytest.mark.parametrize(("t", "long_idle_bag"), [(6.0, 1), (8.0, 2)])
def test_long_idle_prefers_a_newer_never_started_task_that_waited_longer(t, long_idle_bag):
    # Bag A (tasks 1, 2) arrives at 0; both start at 3 (idle time 3 each, frozen while they
    # run, one replica each: both still candidates). Bag B (task 3) arrives at 4; its task's
    # idle time at t is t - 4. At t = 6: A's 3 > B's 2, A. At t = 8: B's 4 > A's 3, B.
    # FCFS-Share serves A either time (the oldest bag with a candidate).
    for name, expected in (("long_idle", long_idle_bag), ("fcfs_share", 1)):
        core = bot_core(name, n_machines=3)
        core.bag_arrived(0.0, bag(1, 0.0, [1, 2]))
        assert sorted(ask(core, 3.0, 0) + ask(core, 3.0, 1)) == [1, 2]
        core.bag_arrived(4.0, bag(2, 4.0, [3]))
        (got,) = ask(core, t, 2)
        assert core.jobs[got].bag.id == expected, name


def test_long_idle_picks_the_newer_bag_of_a_requeued_task_that_was_idle_longer():
    # Bag A (task 1) arrives at 0 and takes M0 and M3 at once (two replicas: no candidate
    # left in A). Bag B (task 2) arrives at 1; M1 asks at 5: only B has a candidate, task 2
    # starts after 4 idle. M1 fails at 6: task 2 is back in the queue (idle 4, growing).
    # M0 and M3 fail at 7: task 1 is back too (idle 0, growing). At 8, M2 asks: task 1 has
    # been idle 1, task 2 has 4 + 2 = 6: LongIdle serves B. FCFS-Share serves A (oldest
    # bag with a candidate). Both bags' candidates are requeued tasks only.
    for name, expected in (("long_idle", 2), ("fcfs_share", 1)):
        core = bot_core(name, n_machines=4)
        core.bag_arrived(0.0, bag(1, 0.0, [1]))
        assert ask(core, 0.0, 0) == [1]
        assert ask(core, 0.0, 3) == [1]
        core.bag_arrived(1.0, bag(2, 1.0, [2]))
        assert ask(core, 5.0, 1) == [2]
        core.machine_down(6.0, 1)
        core.machine_down(7.0, 0)
        core.machine_down(7.0, 3)
        assert core.jobs[1].status is JobStatus.QUEUED and core.jobs[2].status is JobStatus.QUEUED
        assert ask(core, 8.0, 2) == [expected], name
        core.check_invariants()


def test_long_idle_counts_candidates_only():
    # Task 1 waited 5 before starting, then got its second replica: it is idle 5 but not a
    # candidate (RepThresh 2). Task 2 (bag B, arrived at 6) is idle 2 at 8: B is served,
    # though the longest-idle task of all is A's.
    core = bot_core("long_idle", n_machines=3)
    core.bag_arrived(0.0, bag(1, 0.0, [1]))
    assert ask(core, 5.0, 0) == [1]
    assert ask(core, 5.0, 1) == [1]
    core.bag_arrived(6.0, bag(2, 6.0, [2]))
    assert ask(core, 8.0, 2) == [2]


def test_long_idle_tie_goes_to_the_older_bag():
    # Both bags arrive at 0; nothing started: every task idle 1 at t = 1. A first.
    core = bot_core("long_idle", n_machines=1)
    core.bag_arrived(0.0, bag(1, 0.0, [1]))
    core.bag_arrived(0.0, bag(2, 0.0, [2]))
    assert ask(core, 1.0, 0) == [1]


# ---------------------------------------------------------------- WQR-FT, the fixed part


@pytest.mark.parametrize("name", POLICIES)
def test_the_candidate_with_fewest_replicas_is_chosen_and_repthresh_is_kept(name):
    # RepThresh 3, one bag of tasks 1 and 2, machines asking one per event.
    core = bot_core(name, n_machines=8, replicas=3)
    core.bag_arrived(0.0, bag(1, 0.0, [1, 2]))
    pair = ask(core, 1.0, 0) + ask(core, 1.0, 1)  # the waiting tasks first (0 replicas), either first
    assert sorted(pair) == [1, 2]
    pair = ask(core, 1.0, 2) + ask(core, 1.0, 3)  # a tie on 1 replica, then the other task
    assert sorted(pair) == [1, 2]
    # A machine running task 2 fails: task 1 has 2 replicas, task 2 has 1. Both are
    # candidates (< 3); the next machine gets task 2, the one with fewer.
    on_task_2 = next(r.machine for r in core.jobs[2].replicas.values())
    assert core.machine_down(2.0, on_task_2) == []
    assert ask(core, 3.0, 4) == [2]
    pair = ask(core, 3.0, 5) + ask(core, 3.0, 6)
    assert sorted(pair) == [1, 2]
    assert (live(core, 1), live(core, 2)) == (3, 3)
    assert core.machine_ready(4.0, 7) == [Hold(7)]  # RepThresh reached: held
    core.check_invariants()


def _requeue_one(core: Scheduler) -> int:
    """Bag 1 (tasks 1-4) arrives; M0 takes a task and fails: that task is requeued (it has a
    checkpoint), the other three never started. The requeued task's id."""
    core.bag_arrived(0.0, bag(1, 0.0, [1, 2, 3, 4]))
    (first,) = ask(core, 1.0, 0)
    core.replica_checkpoint(2.0, 1, 0.5)
    core.machine_down(3.0, 0)
    assert core.jobs[first].status is JobStatus.QUEUED and core.jobs[first].attempts == 1
    return first


@pytest.mark.parametrize("name", POLICIES)
def test_a_waiting_task_is_drawn_uniformly_requeued_or_never_started(name):
    # Seed 000: the task with the fewest running replicas, "in case of tie, random selection".
    # A bag's waiting tasks all have none: one requeued and three never started are drawn each
    # with p = 1/4. Over 200 seeds the requeued one is drawn 50 times on average (sd 6.1); mgst's
    # old rule (requeued first) drew it every time. Every task is also drawn first about 50 times.
    requeued = 0
    first = Counter()
    for seed in range(200):
        core = bot_core(name, n_machines=2, seed=seed)
        again = _requeue_one(core)
        first[again] += 1
        (got,) = ask(core, 4.0, 1)
        requeued += got == again
        assert core.jobs[got].bag.id == 1
    assert 25 <= requeued <= 75, requeued
    assert set(first) == {1, 2, 3, 4} and min(first.values()) >= 25, first


@pytest.mark.parametrize("name", POLICIES)
def test_requeued_first_restarts_requeued_tasks_then_the_others_in_order(name):
    # The option keeps mgst's rule before issue 20: the queue's head, i.e. requeued tasks first
    # (in submission order), then never-started ones in submission order. No task is drawn.
    for seed in range(5):
        core = bot_core(name, n_machines=6, seed=seed, requeued_first=True)
        core.bag_arrived(0.0, bag(1, 0.0, [1, 2, 3, 4]))
        assert ask(core, 1.0, 0) + ask(core, 1.0, 1) == [1, 2]
        core.machine_down(2.0, 1)  # task 2 requeued
        core.machine_down(2.0, 0)  # task 1 requeued
        assert [ask(core, 3.0, j) for j in (2, 3, 4, 5)] == [[1], [2], [3], [4]]


def test_the_task_draw_uses_the_policy_stream_only():
    # Reproducible from the policy's seed, and the global random module is never drawn from.
    def picks(seed: int) -> list[int]:
        core = bot_core("rr", n_machines=8, seed=seed)
        core.bag_arrived(0.0, bag(1, 0.0, range(1, 21)))
        return [t for j in range(8) for t in ask(core, 1.0, j)]

    random.seed(12345)
    state = random.getstate()
    a = picks(7)
    assert random.getstate() == state
    assert picks(7) == a and len(set(a)) == 8
    assert any(picks(s) != a for s in range(8, 12))  # another seed, another draw


@pytest.mark.parametrize("name", POLICIES)
def test_machine_choice_is_uniform_over_asking_machines(name):
    # Four machines ask and are held; a bag of one task arrives. The first replica goes to a
    # machine drawn uniformly: over 100 seeds each machine is drawn first at least once
    # (a fixed machine would miss 3 of them; a uniform draw misses one with p < 1e-12).
    first = Counter()
    for seed in range(100):
        core = bot_core(name, n_machines=4, seed=seed)
        for j in range(4):
            core.machine_ready(0.0, j)
        out = assigns(core.bag_arrived(1.0, bag(1, 1.0, [1])))
        machines = [a.machine for a in out]
        assert len(set(machines)) == len(machines) == (4 if name == "fcfs_excl" else 2)
        first[machines[0]] += 1
    assert set(first) == {0, 1, 2, 3}, first


@pytest.mark.parametrize("name", POLICIES)
@pytest.mark.parametrize(("checkpoints", "progress"), [(True, 0.5), (False, 0.0)])
def test_a_replica_resumes_from_the_best_checkpoint_after_a_loss(name, checkpoints, progress):
    core = bot_core(name, n_machines=3, checkpoints=checkpoints)
    core.bag_arrived(0.0, bag(1, 0.0, [1]))
    assert ask(core, 0.0, 0) == [1]  # replica 1
    assert ask(core, 0.0, 1) == [1]  # replica 2
    core.replica_checkpoint(1.0, 1, 0.3)
    core.replica_checkpoint(1.0, 2, 0.5)
    core.machine_down(2.0, 0)
    core.machine_down(2.0, 1)  # both lost: task 1 is back in the queue, best checkpoint 0.5
    assert plain(assigns(core.machine_ready(3.0, 2))) == [Assign(core.jobs[1].job, 2, 3, progress)]


@pytest.mark.parametrize(
    ("name", "options"),
    [("fcfs_excl", {"replicas": 2}), ("fcfs_share", {}), ("rr", {}), ("rr_nrf", {}), ("long_idle", {})],
)
def test_the_loop_stops_with_machines_held_when_no_bag_has_a_candidate(name, options):
    core = bot_core(name, n_machines=5, **options)
    for j in range(5):
        core.machine_ready(0.0, j)
    out = tasks(core.bag_arrived(1.0, bag(1, 1.0, [1, 2])))
    assert sorted(out) == [1, 1, 2, 2]  # every task at RepThresh 2: nothing more to start
    (held,) = ready_ids(core)
    assert core.machines[held].state is MachineState.READY
    assert core.replica_checkpoint(2.0, 1, 0.5) == []
    assert core.machine_ready(3.0, held) == [Hold(held)]
    core.check_invariants()


def test_a_machine_with_two_slots_never_runs_two_replicas_of_one_task():
    core = bot_core("fcfs_share", n_machines=1, slots=2)
    core.bag_arrived(0.0, bag(1, 0.0, [1]))
    assert ask(core, 1.0, 0) == [1]  # one slot used; the other asks, held
    assert core.machines[0].asking == 1
    assert ask(core, 2.0, 0) == []
    assert tasks(core.bag_arrived(3.0, bag(2, 3.0, [2]))) == [2]  # another task: the slot takes it
    core.check_invariants()


def test_a_machine_that_cannot_run_the_class_is_never_given_it(caplog):
    policy = make_policy("rr")
    machines = [Machine("M0", (1.0, 0.0)), Machine("M1", (1.0, 1.0))]
    core = Scheduler([JobClass("a", 0.0), JobClass("b", 0.0)], machines, policy, check=True)
    core.start(0.0)
    core.bag_arrived(0.0, Bag(1, 0.0, (Job(1, 1, 0.0, 1.0, 1),)))  # class b: M0 cannot run it
    assert plain(core.machine_ready(1.0, 0)) == [Hold(0)]
    # The task drawn for M0 and not placed went back to the bag's never-started tasks (no rebuild).
    assert plain(assigns(core.machine_ready(2.0, 1))) == [Assign(core.jobs[1].job, 1, 1, 0.0)]
    assert "out of step" not in caplog.text


def test_a_list_of_never_started_tasks_out_of_step_is_rebuilt(caplog):
    # Every never-started task leaves the queue through the policy's draw, which keeps its list
    # exact; were one assigned by other means, the next draw would notice, rebuild, and go on.
    core = bot_core("rr", n_machines=4)
    core.bag_arrived(0.0, bag(1, 0.0, [1, 2, 3, 4]))
    first = ask(core, 1.0, 0)
    core.policy._unstarted[1].pop()  # a waiting task lost from the list
    got = first + ask(core, 2.0, 1) + ask(core, 3.0, 2) + ask(core, 4.0, 3)
    assert sorted(got) == [1, 2, 3, 4]
    assert "out of step" in caplog.text
    core.check_invariants()


# ---------------------------------------------------------------- a random drive


def _startable(core: Scheduler, bags) -> bool:
    """Whether some asking machine could start a replica of a task of ``bags``: a task not done
    with fewer than RepThresh live replicas, none of them on that machine (every rate is > 0)."""
    limit = core.policy.max_replicas
    asking = {m.index for m in core.ready_machines()}
    for b in bags:
        for rec in b.tasks:
            if rec.status is JobStatus.QUEUED and asking:
                return True
            if rec.status is JobStatus.RUNNING and len(rec.replicas) < limit:
                if asking - {r.machine for r in rec.replicas.values()}:
                    return True
    return False


def _check_rules(core: Scheduler, name: str) -> None:
    bags = list(core.bags.values())
    # The loop runs while a machine asks and a (selectable) bag has a candidate it can take.
    selectable = bags[:1] if name == "fcfs_excl" else bags
    assert not _startable(core, selectable), "a machine is held while a candidate waits for it"
    if name == "fcfs_excl" and bags:
        assert all(r.job.bag is bags[0] for r in core.live_replicas()), "FCFS-Excl ran a task of a newer bag"
    # The policy's list of a bag's never-started tasks is exactly those still waiting (waiting_task).
    for b in bags:
        kept = getattr(core.policy, "_unstarted", {}).get(b.id)
        if kept is not None:
            assert sorted(t.id for t in kept) == sorted(
                t.id for t in b.tasks if not t.attempts and t.status is JobStatus.QUEUED), b


def with_timeouts(cls: type[Policy], factor: float, suspect: bool) -> type[Policy]:
    """``cls`` with a ReplicaTimeouts piece, its hooks forwarded."""

    class Timed(cls):  # type: ignore[valid-type, misc]
        hooks = frozenset({"on_replica_start", "on_replica_end", "on_timer"})
        def __init__(self, options=None, rng=None):
            super().__init__(options, rng)
            self.timeouts = ReplicaTimeouts(factor, suspect=suspect)

        def on_replica_start(self, view, replica):
            return self.timeouts.on_replica_start(view, replica)

        def on_replica_end(self, view, replica):
            return [*super().on_replica_end(view, replica), *self.timeouts.on_replica_end(view, replica)]

        def on_timer(self, view, key):
            return self.timeouts.on_timer(view, key)

    return Timed


def drive(policy: Policy, seed: int, n_machines: int = 6, n_bags: int = 10) -> tuple[Scheduler, list[Output]]:
    """A small discrete-event run: bags arrive, replicas run for size / rate and checkpoint
    halfway, machines fail and come back, timers fire. The invariants are checked after
    every event. A replica the core gave up on because of a time-out keeps running (its
    result may come late); one lost with its machine never reports."""
    rng = random.Random(seed)
    machines = [
        Machine(f"M{j}", (rng.choice((0.5, 1.0, 2.0)),), 1.0, rng.choice((1, 1, 2))) for j in range(n_machines)
    ]
    core = Scheduler([JobClass("task", 0.0, 4.0)], machines, policy, check=True)
    heap: list = []
    seq = itertools.count()

    def push(t: float, kind: str, *data) -> None:
        heapq.heappush(heap, (t, next(seq), kind, data))

    t, task_id = 0.0, 0
    for b in range(n_bags):
        t += rng.expovariate(1 / 3)
        size = rng.randint(1, 6)
        push(t, "bag", Bag(b, t, tuple(Job(task_id + i, 0, t, rng.expovariate(1 / 4), b) for i in range(size))))
        task_id += size
    horizon = t
    up = [False] * n_machines
    running: dict[int, int] = {}  # replicas the machines really run -> machine
    for j in range(n_machines):
        push(0.0, "up", j)
    log: list[Output] = []

    def handle(now: float, outputs: list[Output]) -> None:
        log.extend(outputs)
        for o in outputs:
            if type(o) is Assign:
                running[o.replica] = o.machine
                rate = machines[o.machine].rates[0]
                left = (1.0 - o.progress) * o.job.size / rate
                push(now + left, "done", o.replica)
                push(now + left / 2, "checkpoint", o.replica, o.progress + (1.0 - o.progress) / 2)
            elif type(o) is Cancel:
                running.pop(o.replica, None)
            elif type(o) is SetTimer:
                push(o.at, "timer", o.key)

    handle(0.0, core.start(0.0))
    while heap:
        now, _, kind, data = heapq.heappop(heap)
        if kind == "bag":
            out = core.bag_arrived(now, data[0])
        elif kind == "up":
            up[data[0]] = True
            out = core.machine_ready(now, data[0])
            if now < horizon:
                push(now + rng.expovariate(1 / 15), "down", data[0])
        elif kind == "down":
            j = data[0]
            for rid in [rid for rid, m in running.items() if m == j]:
                del running[rid]
            up[j] = False
            out = core.machine_down(now, j)
            push(now + rng.expovariate(1 / 4), "up", j)
        elif kind == "done":
            if running.pop(data[0], None) is None:
                continue  # cancelled, or lost with its machine
            out = core.replica_done(now, data[0], ready=True)
        elif kind == "checkpoint":
            if data[0] not in running:
                continue
            out = core.replica_checkpoint(now, data[0], data[1])
        else:
            out = core.timer_fired(now, data[0])
        handle(now, out)
        core.check_invariants()
        _check_rules(core, policy.name)
        # A machine that is up asks for every slot it really has free and the core does not
        # know it asks for (after a cancellation, a suspicion, a stale result...).
        for j, m in enumerate(core.machines):
            busy = sum(1 for mj in running.values() if mj == j)
            if up[j] and m.state is not MachineState.READY and busy < m.slots and m.free_slots:
                handle(now, core.machine_ready(now, j))
                core.check_invariants()
                _check_rules(core, policy.name)
    assert not core.bags, f"bags left incomplete: {list(core.bags.values())}"
    return core, log


def _is_candidate(rec, limit: int) -> bool:
    return rec.status is JobStatus.QUEUED or (rec.status is JobStatus.RUNNING and len(rec.replicas) < limit)


def _reference(name: str, view: Scheduler, limit: int, passed_over: set[int]):
    """The bag the paper's rule selects, by brute force over every task (selections without state)."""
    bags = [b for b in view.bags.values() if b.id not in passed_over]
    with_candidates = [b for b in bags if any(_is_candidate(t, limit) for t in b.tasks)]
    if name == "fcfs_excl":
        first = next(iter(view.bags.values()), None)
        return first if first in with_candidates else None
    if name == "fcfs_share":
        return with_candidates[0] if with_candidates else None
    # long_idle: the largest idle time over candidates; ties to the older bag (max keeps the first)
    return max(
        with_candidates, key=lambda b: max(t.idle(view.now) for t in b.tasks if _is_candidate(t, limit)), default=None
    )


def checked(cls: type[Policy]) -> type[Policy]:
    """``cls`` whose every selection is compared with :func:`_reference` (stateless selections only)."""

    class Checked(cls):  # type: ignore[valid-type, misc]
        selections = 0

        def select(self, view):
            bag = super().select(view)
            assert bag is _reference(self.name, view, self.max_replicas, self._blocked), (bag, view.now)
            type(self).selections += 1
            return bag

    return Checked


@pytest.mark.parametrize("name", POLICIES)
@pytest.mark.parametrize("timeouts", [None, (2.0, False), (2.0, True)], ids=["plain", "timeout", "suspect"])
def test_random_drive_keeps_the_invariants_and_completes_every_bag(name, timeouts):
    cls = policy_class(name)
    if name in ("fcfs_excl", "fcfs_share", "long_idle"):
        cls = checked(cls)
    if timeouts is not None:
        cls = with_timeouts(cls, *timeouts)
    for seed in range(4):
        policy = cls(cls.Options.from_mapping({}), random.Random(seed))
        core, log = drive(policy, seed)
        done = Counter(o.job.id for o in log if type(o) is JobCompleted)
        assert set(done) == set(core.jobs) and set(done.values()) == {1}
        assert len([o for o in log if type(o) is BagCompleted]) == len(core.all_bags)
        if timeouts is not None and seed == 0:
            assert any(type(o) is ReplicaTimedOut for o in log)
    assert getattr(cls, "selections", 1) > 0
