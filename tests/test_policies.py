"""Each built-in policy's decisions on hand-built states; allocations solved by hand."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from helpers import assigns, job, make_core, make_policy, plain, queue_ids, ready_ids

from mgst.core import Assign, Cancel, Hold, JobCompleted, JobRequeued, JobStatus, MachineState
from mgst.model import Job
from mgst.policies import check_options, names, policy_class

ROOT = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------- LPAS_DG
#
# Three machines, two classes, alpha = (1, 1), a = (1, 1, 1); rates mu'_ij:
#
#              M0   M1   M2
#   class 0     4    1    1
#   class 1     1    4    3
#
# Class 0 is fast on M0 only, class 1 on M1 and M2. Give M0 to class 0 and M1 to
# class 1; class 0 (4) then lags class 1 (4 + 3), and the cheapest capacity for it
# is on M2 (it gives up 3 of class 1 per unit there, 4 on M1). With x of M2 for
# class 0: 4 + x = 4 + 3 (1 - x) -> x = 3/4, lambda* = 19/4.
# Dual check: prices y = (3/4, 1/4) (y . alpha = 1) give machine prices
# p = (max(3, 1/4), max(3/4, 1), max(3/4, 3/4)) = (3, 1, 3/4), sum 19/4 = lambda*;
# the pairs (0, M1) and (1, M0) price strictly below their machine, so they are 0
# in every optimum: the optimum is unique and non-degenerate.
#   delta* = [[1, 0, 3/4], [0, 1, 1/4]]
# M1 can run class 0 (rate 1) and M0 class 1 (rate 1), but neither is eligible.

LP_RATES = [[4.0, 1.0, 1.0], [1.0, 4.0, 3.0]]
LP_ALPHA = [1.0, 1.0]


@pytest.fixture(params=["dual", "primal"])
def lp_method(request) -> str:
    """The optimum above is unique, so both simplex variants must give the same eligibility."""
    return request.param


def lpas_core(**options):
    return make_core(make_policy("lpas_dg", options), LP_RATES, LP_ALPHA)


def test_lpas_allocation_and_eligibility(lp_method):
    core = lpas_core(lp_method=lp_method)
    policy = core.policy
    assert policy.allocation.lam == pytest.approx(19 / 4)
    for got, want in zip(policy.allocation.delta, [[1.0, 0.0, 0.75], [0.0, 1.0, 0.25]]):
        assert got == pytest.approx(want, abs=1e-9)
    assert policy.eligible == ((True, False, True), (False, True, True))



def test_an_lpas_subclass_gets_its_own_options_by_default():
    # LpasDG() with no options takes the class's Options, so a subclass may bring its own.
    import dataclasses

    from mgst.papers.mgst.lpas import LpasDG, LpasOptions

    @dataclasses.dataclass(frozen=True)
    class Wider(LpasOptions):
        tolerance: float = 0.25
        note: str = "mine"

    class MyLpas(LpasDG):
        Options = Wider

    p = MyLpas()
    assert type(p.options) is Wider and p.options.note == "mine"
    assert p.lp_options.tolerance == 0.25

def test_lpas_solves_over_up_machines_only():
    # Before any MachineUp every machine is down: nothing is eligible.
    core = make_core(make_policy("lpas_dg"), LP_RATES, LP_ALPHA, up=False)
    assert core.policy.eligible == ((False, False, False), (False, False, False))
    # M0 alone must serve both classes: 4 d0 = lambda, 1 d1 = lambda, d0 + d1 = 1
    # -> lambda* = 4/5, delta*_00 = 1/5, delta*_10 = 4/5.
    core.machine_up(1.0, 0)
    assert core.policy.allocation.lam == pytest.approx(0.8)
    assert core.policy.allocation.delta[0][0] == pytest.approx(0.2)
    assert core.policy.allocation.delta[1][0] == pytest.approx(0.8)
    assert core.policy.eligible == ((True, False, False), (True, False, False))


@pytest.mark.parametrize(
    ("class1_submitted", "expected_class"),
    [
        # at t = 10 on M2 (mu'_0 = 1, mu'_1 = 3), class 0's head has waited 10:
        (6.0, 1),  # 3 * (10 - 6) = 12 > 1 * 10: the younger head of the faster class
        (7.0, 0),  # 3 * (10 - 7) = 9 < 1 * 10: the older head of the slower class
    ],
)
def test_lpas_asking_machine_gets_head_of_class_maximising_rate_times_wait(
    class1_submitted, expected_class, lp_method
):
    core = lpas_core(lp_method=lp_method)  # machines up, none asking: jobs wait
    jobs = {
        0: [job(1, 0, 0.0), job(3, 0, 8.0)],
        1: [job(2, 1, class1_submitted), job(4, 1, 9.0)],
    }
    for jb in sorted(jobs[0] + jobs[1], key=lambda j: j.submitted):
        assert plain(core.job_arrived(jb.submitted, jb)) == []
    out = core.machine_ready(10.0, 2)
    head = jobs[expected_class][0]
    assert plain(out) == [Assign(head, 2, 1, 0.0)]


def test_lpas_plans_and_chooses_in_jobs_per_time_unit_when_classes_differ_in_mean_size(lp_method):
    # LP_RATES are work rates; class 1's jobs are twice as large (X = (1, 2)), so its jobs per time unit are
    # mu = [[4, 1, 1], [0.5, 2, 1.5]]. Class 0 over class 1 by machine: M0 8, M2 2/3, M1 1/2: class 0 takes
    # part of M0 only: 4 y = 2 + 1.5 + 0.5 (1 - y) -> y = 8/9, lambda* = 32/9; M0 serves both, M1 and M2 class 1
    # (with the work rates as jobs per time unit, M0 served class 0 alone and M2 both: above).
    from mgst.core.scheduler import Scheduler  # noqa: PLC0415
    from mgst.model import JobClass, Machine  # noqa: PLC0415

    classes = [JobClass("c0", 1.0, 1.0), JobClass("c1", 1.0, 2.0)]
    machines = [Machine(f"M{j}", (LP_RATES[0][j], LP_RATES[1][j]), 1.0) for j in range(3)]
    core = Scheduler(classes, machines, make_policy("lpas_dg", {"lp_method": lp_method}), check=True)
    core.start(0.0)
    for j in range(3):
        core.machine_up(0.0, j)
    policy = core.policy
    assert policy.lp_rates == ((4.0, 1.0, 1.0), (0.5, 2.0, 1.5))
    assert policy.allocation.lam == pytest.approx(32 / 9)
    assert policy.eligible == ((True, False, False), (True, True, True))
    # M0 at t = 10: class 0's head waited 2 (4 x 2 = 8 jobs' worth), class 1's 10 (0.5 x 10 = 5; in work rates,
    # 1 x 10 = 10 would win)
    core.job_arrived(0.0, Job(1, 1, 0.0, 2.0))
    core.job_arrived(8.0, Job(2, 0, 8.0, 1.0))
    assert plain(assigns(core.machine_ready(10.0, 0))) == [Assign(Job(2, 0, 8.0, 1.0), 0, 1, 0.0)]


def test_the_lp_load_of_a_run_counts_each_class_s_mean_size(tmp_path):
    # One machine at rate 1, classes at 0.3 and 0.2 a time unit of mean sizes 1 and 4: a load of
    # 0.3 + 0.8 = 1.1 (overloaded), not 0.5.
    from mgst.config.experiment import load_experiment  # noqa: PLC0415
    from mgst.sim.replications import run_simulation  # noqa: PLC0415

    f = tmp_path / "sizes.toml"
    f.write_text('[experiment]\nname = "sizes"\n[workload]\narrival_rates = [0.3, 0.2]\ngranularity = [1.0, 4.0]\n'
                 '[machines]\nrates = [[1.0], [1.0]]\n[policy]\nname = "fcfs"\n'
                 '[simulation]\nhorizon = 20.0\nwarmup = 0.0\nreplications = 1\n')
    summary, _ = run_simulation(load_experiment(f), workers=1)
    assert summary.load == pytest.approx(1.1)


def test_lpas_cpu_share_of_the_asking_machine_does_not_change_its_choice():
    # a_j multiplies every class's rate on machine j alike: with M2 at a = 1/2 (still
    # eligible for both classes, see test_lpas_resolves_on_share_change) the choice
    # is the one above: 3 a (10 - 6) = 6 > 1 a 10 = 5.
    core = make_core(make_policy("lpas_dg"), LP_RATES, LP_ALPHA, [1.0, 1.0, 0.5])
    assert core.policy.eligible == ((True, False, True), (False, True, True))
    core.job_arrived(0.0, job(1, 0, 0.0))
    core.job_arrived(6.0, job(2, 1, 6.0))
    assert plain(assigns(core.machine_ready(10.0, 2))) == [Assign(job(2, 1, 6.0), 2, 1, 0.0)]


def test_lpas_resolves_on_share_change(lp_method):
    # M2 at a = 1/2: 4 + x = 4 + 3 (1/2 - x) -> x = 3/8, lambda* = 35/8; delta*_12 = 1/8.
    core = lpas_core(lp_method=lp_method)
    solves = core.policy.solves
    core.cpu_share_changed(1.0, 2, 0.5)
    assert core.policy.solves == solves + 1
    assert core.policy.allocation.lam == pytest.approx(35 / 8)
    assert core.policy.allocation.delta[0][2] == pytest.approx(3 / 8)
    assert core.policy.allocation.delta[1][2] == pytest.approx(1 / 8)


def test_lpas_resolves_when_a_machine_goes_down_and_eligibility_moves(lp_method):
    # M0 down: over M1, M2. Class 0 costs 1/4 of class 1 per unit on M1, 1/3 on M2:
    # class 0 takes all of M2 (1) and x of M1 (x); class 1 gets 4 (1 - x).
    # 1 + x = 4 - 4x -> x = 3/5, lambda* = 8/5. Dual: y = (4/5, 1/5), p = (-, 4/5, 4/5),
    # sum 8/5; (1, M2) prices 3/5 < 4/5: zero. delta* = [[0, 3/5, 1], [0, 2/5, 0]].
    core = lpas_core(lp_method=lp_method)
    solves = core.policy.solves
    core.job_arrived(1.0, job(1, 0, 1.0))
    core.job_arrived(1.0, job(2, 1, 1.0))
    core.machine_ready(2.0, 0)  # takes job 1
    core.job_arrived(3.0, job(3, 0, 3.0))
    assert core.machine_down(4.0, 0) == [JobRequeued(job(1, 0, 1.0), 1, 0, "machine down")]
    policy = core.policy
    assert policy.solves == solves + 1
    assert policy.allocation.lam == pytest.approx(8 / 5)
    assert policy.eligible == ((False, True, True), (False, True, False))
    # M1 now serves class 0: at t = 5, class 0's head (job 1, submitted 1) has 1 * 4,
    # class 1's (job 2, submitted 1) 4 * 4: class 1 still wins on M1...
    assert plain(assigns(core.machine_ready(5.0, 1))) == [Assign(job(2, 1, 1.0), 1, 2, 0.0)]
    # ...and the next time M1 asks only class 0 waits: it gets job 1 (the requeued head).
    assert plain(assigns(core.replica_done(6.0, 2, ready=True))) == [Assign(job(1, 0, 1.0), 1, 3, 0.0)]
    # M2 no longer serves class 1
    core.job_arrived(7.0, job(4, 1, 7.0))
    assert plain(core.machine_ready(8.0, 2)) == [Assign(job(3, 0, 3.0), 2, 4, 0.0)]
    # M0 back: the first allocation again
    core.machine_up(9.0, 0)
    assert policy.eligible == ((True, False, True), (False, True, True))
    assert policy.solves == solves + 2


def test_lpas_ineligible_ready_machine_is_held_and_rotated(lp_method):
    core = lpas_core(lp_method=lp_method)
    assert core.machine_ready(1.0, 1) == [Hold(1)]
    assert core.machine_ready(2.0, 0) == [Hold(0)]
    assert core.machine_ready(3.0, 2) == [Hold(2)]
    assert ready_ids(core) == [1, 0, 2]
    j = job(1, 0, 4.0)
    # M1 has waited longest and can run class 0 (rate 1), but is not eligible for it:
    # it goes to the back and M0, the first eligible machine, gets the job.
    assert plain(core.job_arrived(4.0, j)) == [Assign(j, 0, 1, 0.0)]
    assert ready_ids(core) == [2, 1]
    assert core.machines[1].state is MachineState.READY
    # FCFS, for contrast, gives it to M1
    fcfs = make_core(make_policy("fcfs"), LP_RATES, LP_ALPHA)
    for t, m in enumerate((1, 0, 2), start=1):
        fcfs.machine_ready(float(t), m)
    assert plain(fcfs.job_arrived(4.0, j)) == [Assign(j, 1, 1, 0.0)]


def test_lpas_machine_asking_with_only_ineligible_jobs_is_held():
    core = lpas_core()
    core.job_arrived(0.0, job(1, 1, 0.0))  # class 1: not eligible on M0
    assert core.machine_ready(1.0, 0) == [Hold(0)]
    assert queue_ids(core, 1) == [1]


def test_lpas_periodic_resolve_timer():
    core = make_core(make_policy("lpas_dg", {"resolve_period": 2.5}), LP_RATES, LP_ALPHA)
    assert core.timers == {("lpas_dg", "resolve"): 2.5}
    solves = core.policy.solves
    out = core.timer_fired(2.5, ("lpas_dg", "resolve"))
    assert core.policy.solves == solves + 1
    assert [o.at for o in out] == [5.0]


def test_lpas_nominal_share_option_ignores_reported_shares():
    core = make_core(make_policy("lpas_dg", {"reported_share": False}), LP_RATES, LP_ALPHA)
    core.cpu_share_changed(1.0, 2, 0.5)
    assert core.policy.allocation.lam == pytest.approx(19 / 4)


# ---------------------------------------------------------------- FCFS


def test_fcfs_oldest_job_over_all_classes_goes_to_the_asking_machine():
    core = make_core(make_policy("fcfs"), [[1.0], [1.0]])
    j1, j2, j3 = job(1, 1, 0.0), job(2, 0, 1.0), job(3, 1, 2.0)
    for jb in (j1, j2, j3):
        core.job_arrived(jb.submitted, jb)
    assert plain(core.machine_ready(3.0, 0)) == [Assign(j1, 0, 1, 0.0)]
    assert plain(assigns(core.replica_done(4.0, 1, ready=True))) == [Assign(j2, 0, 2, 0.0)]
    assert plain(assigns(core.replica_done(5.0, 2, ready=True))) == [Assign(j3, 0, 3, 0.0)]


def test_fcfs_skips_classes_the_machine_cannot_run():
    core = make_core(make_policy("fcfs"), [[1.0], [0.0]])
    core.job_arrived(0.0, job(1, 1, 0.0))
    core.job_arrived(1.0, job(2, 0, 1.0))
    assert plain(core.machine_ready(2.0, 0)) == [Assign(job(2, 0, 1.0), 0, 1, 0.0)]
    assert core.replica_done(3.0, 1, ready=True) == [JobCompleted(job(2, 0, 1.0), 1, 0), Hold(0)]


def test_fcfs_arriving_job_goes_to_the_machine_that_has_waited_longest():
    core = make_core(make_policy("fcfs"), [[1.0, 1.0, 1.0]])
    core.machine_ready(1.0, 2)
    core.machine_ready(2.0, 0)
    core.machine_ready(3.0, 1)
    assert [a.machine for a in assigns(core.job_arrived(4.0, job(1, 0, 4.0)))] == [2]
    assert [a.machine for a in assigns(core.job_arrived(5.0, job(2, 0, 5.0)))] == [0]
    assert [a.machine for a in assigns(core.job_arrived(6.0, job(3, 0, 6.0)))] == [1]
    assert core.job_arrived(7.0, job(4, 0, 7.0)) == []


# ---------------------------------------------------------------- WQR-FT


def wqr(n_machines=3, seed=0, **options):
    options.setdefault("replicas", 2)
    return make_core(make_policy("wqr_ft", options, seed), [[1.0] * n_machines])


def test_wqr_options_set_the_replica_limit():
    policy = make_policy("wqr_ft", {"replicas": 2})
    assert policy.max_replicas == 2 and policy.resume_from_checkpoint is True
    assert make_policy("wqr_ft", {"checkpoints": False}).resume_from_checkpoint is False


def test_wqr_free_machine_replicates_a_running_job_at_most_twice():
    core = wqr()
    j1 = job(1, 0, 0.0)
    core.machine_ready(0.0, 0)
    assert plain(core.job_arrived(0.0, j1)) == [Assign(j1, 0, 1, 0.0)]
    assert plain(core.machine_ready(1.0, 1)) == [Assign(j1, 1, 2, 0.0)]  # nothing queued: a replica
    assert core.machine_ready(2.0, 2) == [Hold(2)]  # two replicas already
    assert core.jobs[1].live_replicas == 2
    # a queued job beats a replica
    j2 = job(2, 0, 3.0)
    assert plain(core.job_arrived(3.0, j2)) == [Assign(j2, 2, 3, 0.0)]
    core.check_invariants()


def test_wqr_replicates_the_job_with_fewest_replicas():
    core = wqr(n_machines=4)
    j1, j2 = job(1, 0, 0.0), job(2, 0, 0.0)
    core.machine_ready(0.0, 0)
    core.job_arrived(0.0, j1)
    core.machine_ready(0.0, 1)  # replica of job 1
    core.machine_ready(0.0, 2)
    core.job_arrived(1.0, j2)  # job 2 on M2
    assert plain(core.machine_ready(2.0, 3)) == [Assign(j2, 3, 4, 0.0)]


def test_wqr_first_replica_done_cancels_its_sibling():
    core = wqr()
    j1 = job(1, 0, 0.0)
    core.machine_ready(0.0, 0)
    core.job_arrived(0.0, j1)
    core.machine_ready(1.0, 1)  # replica 2
    out = core.replica_done(3.0, 2)
    assert out == [Cancel(1, 0, 1), JobCompleted(j1, 2, 1)]
    assert core.machines[0].state is MachineState.FREE
    assert core.machines[1].state is MachineState.FREE
    assert core.jobs[1].status is JobStatus.DONE
    assert core.machines[0].stats.cancelled == 1


def test_wqr_machine_choice_is_random_among_ready_machines():
    # Three machines ask (in order 0, 1, 2), then one job arrives: it goes to a
    # random one of them, and its replica to another. FCFS would always pick M0.
    trials = 600
    first, second = Counter(), Counter()
    rng = random.Random(12345)
    for _ in range(trials):
        core = wqr(seed=rng.randrange(2**32))
        for m in range(3):
            core.machine_ready(0.0, m)
        out = assigns(core.job_arrived(1.0, job(1, 0, 1.0)))
        assert len(out) == 2 and out[0].machine != out[1].machine
        first[out[0].machine] += 1
        second[out[1].machine] += 1
    # each machine expects 200 of 600 (sd ~ 11.5): allow about +-5 sd
    for counts in (first, second):
        assert set(counts) == {0, 1, 2}
        assert all(140 <= counts[m] <= 260 for m in range(3)), counts


def test_wqr_random_choice_with_one_shared_rng_too():
    policy = make_policy("wqr_ft", {"replicas": 1}, seed=7)
    picks = Counter()
    for _ in range(300):
        core = make_core(policy, [[1.0] * 3])  # the same policy object, its rng moving on
        for m in range(3):
            core.machine_ready(0.0, m)
        picks[assigns(core.job_arrived(1.0, job(1, 0, 1.0)))[0].machine] += 1
    assert all(60 <= picks[m] <= 140 for m in range(3)), picks


@pytest.mark.parametrize(("checkpoints", "progress"), [(True, 0.5), (False, 0.0)])
def test_wqr_lost_last_replica_requeues_and_resumes_from_best_checkpoint(checkpoints, progress):
    core = wqr(checkpoints=checkpoints)
    j1 = job(1, 0, 0.0)
    core.machine_ready(0.0, 0)
    core.job_arrived(0.0, j1)  # replica 1 on M0
    core.machine_ready(0.5, 1)  # replica 2 on M1
    core.replica_checkpoint(1.0, 1, 0.3)
    core.replica_checkpoint(1.0, 2, 0.5)
    assert core.machine_down(2.0, 0) == []  # replica 2 still runs
    assert core.jobs[1].status is JobStatus.RUNNING
    assert plain(core.machine_down(3.0, 1)) == [JobRequeued(j1, 2, 1, "machine down")]
    assert core.jobs[1].status is JobStatus.QUEUED
    assert plain(core.machine_ready(4.0, 2)) == [Assign(j1, 2, 3, progress)]


def test_wqr_never_runs_a_class_where_its_rate_is_zero():
    core = make_core(make_policy("wqr_ft", {"replicas": 2}), [[1.0, 0.0]])
    j1 = job(1, 0, 0.0)
    core.machine_ready(0.0, 1)
    assert core.job_arrived(0.0, j1) == []
    core.machine_ready(1.0, 0)
    assert ready_ids(core) == [1]
    assert core.jobs[1].replicas and core.replica(1).machine == 0


# ---------------------------------------------------------------- RANDOM


def test_random_picks_only_jobs_the_machine_can_run():
    core = make_core(make_policy("random"), [[1.0], [0.0]])
    core.job_arrived(0.0, job(1, 1, 0.0))
    core.job_arrived(0.0, job(2, 1, 0.0))
    assert plain(core.machine_ready(1.0, 0)) == [Hold(0)]
    j3 = job(3, 0, 2.0)
    assert plain(core.job_arrived(2.0, j3)) == [Assign(j3, 0, 1, 0.0)]


def _chi_square(counts: Counter, keys, n: int) -> float:
    e = n / len(keys)
    return sum((counts[k] - e) ** 2 / e for k in keys)


# chi-square quantiles at p = 0.999 (2 and 4 degrees of freedom): a correct policy
# fails with probability 1/1000 per seed; the seed is fixed, so never.
CHI2_999 = {2: 13.82, 4: 18.47}


def test_random_is_uniform_over_the_jobs_a_machine_can_run():
    # M0 runs class 0 only; M1 runs both. Three class-0 jobs, two class-1 jobs.
    core = make_core(make_policy("random", seed=2024), [[1.0, 1.0], [0.0, 1.0]])
    for jid, cls in ((1, 0), (2, 1), (3, 0), (4, 1), (5, 0)):
        core.job_arrived(float(jid), job(jid, cls, float(jid)))
    policy = core.policy
    n = 3000
    m0 = Counter(policy.choose(core, core.machines[0]).id for _ in range(n))
    assert set(m0) == {1, 3, 5}
    assert _chi_square(m0, [1, 3, 5], n) < CHI2_999[2], m0
    m1 = Counter(policy.choose(core, core.machines[1]).id for _ in range(n))
    assert set(m1) == {1, 2, 3, 4, 5}
    assert _chi_square(m1, [1, 2, 3, 4, 5], n) < CHI2_999[4], m1


def test_random_through_the_core_reaches_every_job():
    picks = Counter()
    rng = random.Random(99)
    for _ in range(400):
        core = make_core(make_policy("random", seed=rng.randrange(2**32)), [[1.0], [1.0]])
        for jid, cls in ((1, 0), (2, 1), (3, 0), (4, 1)):
            core.job_arrived(float(jid), job(jid, cls, float(jid)))
        picks[assigns(core.machine_ready(5.0, 0))[0].job.id] += 1
    assert all(60 <= picks[j] <= 140 for j in (1, 2, 3, 4)), picks


# ---------------------------------------------------------------- options


def test_registry_names():
    assert {"fcfs", "lpas_dg", "random", "wqr_ft"} <= set(names())
    with pytest.raises(KeyError, match="nope"):
        policy_class("nope")


@pytest.mark.parametrize(
    ("name", "options", "match"),
    [
        ("wqr_ft", {"replica": 2}, "replica: unknown option"),
        ("wqr_ft", {"replicas": 2, "chekpoints": True}, "chekpoints: unknown option"),
        ("lpas_dg", {"tolerence": 0.1}, "tolerence: unknown option"),
        ("fcfs", {"anything": 1}, r"anything: unknown option \(options of this policy: none\)"),
        ("random", {"seed": 1}, "seed: unknown option"),
    ],
)
def test_unknown_options_are_named(name, options, match):
    with pytest.raises(ValueError, match=match):
        check_options(name, options)


@pytest.mark.parametrize(
    ("name", "options", "match"),
    [
        ("wqr_ft", {"replicas": "two"}, "replicas: must be a whole number, got the string 'two'"),
        ("wqr_ft", {"replicas": 2.5}, "replicas: must be a whole number, got 2.5"),
        ("wqr_ft", {"replicas": True}, r"replicas: must be a whole number, got true \(a boolean\)"),
        ("wqr_ft", {"replicas": None}, "replicas: must be a whole number, got None"),
        ("wqr_ft", {"checkpoints": 1}, "checkpoints: must be true or false"),
        ("wqr_ft", {"checkpoints": "yes"}, "checkpoints: must be true or false"),
        ("lpas_dg", {"tolerance": "small"}, "tolerance: must be a number, got the string 'small'"),
        ("lpas_dg", {"resolve_period": "10"}, "resolve_period: must be a number or absent, got the string '10'"),
        ("lpas_dg", {"reported_share": 0}, "reported_share: must be true or false"),
        ("lpas_dg", {"lp_method": 1}, "lp_method: must be a string"),
    ],
)
def test_wrongly_typed_options_raise(name, options, match):
    with pytest.raises(ValueError, match=match):
        check_options(name, options)


@pytest.mark.parametrize(
    ("name", "options", "match"),
    [
        ("wqr_ft", {"replicas": 0}, "replicas: must be >= 1"),
        ("lpas_dg", {"tolerance": -1.0}, "tolerance: must be >= 0"),
        ("lpas_dg", {"tolerance": 1.0}, "tolerance: must be >= 0 and < 1"),  # (nothing eligible: 0 jobs, no error)
        ("lpas_dg", {"resolve_period": 0}, "resolve_period: must be a finite number > 0"),
        ("lpas_dg", {"lp_method": "simplex"}, "lp_method"),
    ],
)
def test_out_of_range_options_raise(name, options, match):
    with pytest.raises(ValueError, match=match):
        check_options(name, options)


def test_options_are_coerced_where_lossless():
    opts = policy_class("lpas_dg").Options.from_mapping({"tolerance": 0, "resolve_period": 5, "lp_method": "dual"})
    assert opts.tolerance == 0.0 and isinstance(opts.tolerance, float)
    assert opts.resolve_period == 5.0 and isinstance(opts.resolve_period, float)
    assert policy_class("lpas_dg").Options.from_mapping({"resolve_period": None}).resolve_period is None
    assert policy_class("wqr_ft").Options.from_mapping({"replicas": 3}).replicas == 3


# ---------------------------------------------------------------- the registry

_USER_MODULE = (
    "from mgst.policies import register\n"
    "from mgst.policies.base import Policy\n\n\n"
    "@register\n"
    "class MyFcfs(Policy):\n"
    "    name = {name!r}\n"
    "    hooks = frozenset({{'choose'}})\n\n"
    "    def choose(self, view, machine):\n"
    "        return None\n"
)


def _fresh_python(tmp_path, name: str, script: str) -> subprocess.CompletedProcess:
    """``script`` in a new interpreter (the built-ins not loaded yet), with my_policies.py registering ``name``."""
    (tmp_path / "my_policies.py").write_text(_USER_MODULE.format(name=name))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env=env)


@pytest.mark.parametrize(
    "script",
    [
        "from mgst import policies\npolicies.import_modules(['my_policies'])\nprint(policies.names())\n",
        "import my_policies\nfrom mgst import policies\nprint(policies.names())\n",  # imported by hand
    ],
    ids=["import_modules", "plain-import"],
)
def test_a_user_policy_under_a_builtin_name_is_refused_with_a_clear_message(tmp_path, script):
    p = _fresh_python(tmp_path, "fcfs", script)
    assert p.returncode != 0, p.stdout
    last = p.stderr.strip().splitlines()[-1]
    assert last == (
        "ValueError: policy name 'fcfs' of my_policies.MyFcfs is built in (the policy mgst.policies.fcfs.FCFS); "
        "choose another name"
    ), p.stderr
    # Raised where the user's module registers, not while the built-in loads.
    assert "my_policies.py" in p.stderr and "fcfs.py" not in p.stderr, p.stderr


def test_a_user_policy_under_a_new_name_registers_next_to_the_builtins(tmp_path):
    script = "from mgst import policies\npolicies.import_modules(['my_policies'])\nprint(' '.join(policies.names()))\n"
    p = _fresh_python(tmp_path, "mine", script)
    assert p.returncode == 0, p.stderr
    assert {"fcfs", "lpas_dg", "mine", "random", "wqr_ft"} <= set(p.stdout.split())


def test_two_user_policies_under_one_name_name_both():
    from mgst.policies import register  # noqa: PLC0415
    from mgst.policies.base import Policy  # noqa: PLC0415

    class First(Policy):
        hooks = frozenset({"choose"})
        name = "test_registry_clash"

        def choose(self, view, machine):
            return None

    class Second(First):
        pass

    register(First)
    try:
        with pytest.raises(ValueError, match=r"'test_registry_clash' of .*Second is taken by .*First$"):
            register(Second)
    finally:
        from mgst import policies  # noqa: PLC0415

        del policies._REGISTRY["test_registry_clash"]


def test_lpas_reports_an_unsolvable_allocation_lp_clearly(monkeypatch):
    from mgst.papers.mgst import lpas  # noqa: PLC0415
    from mgst.policies.allocation import AllocationError  # noqa: PLC0415

    def fail(*args):
        raise AllocationError("arrival_rates[0] = 1e+300 is outside the range", "arrival_rates")

    monkeypatch.setattr(lpas, "solve_allocation", fail)
    with pytest.raises(AllocationError, match=r"^lpas_dg at time 0: arrival_rates\[0\] = 1e\+300") as info:
        lpas_core()
    assert info.value.argument == "arrival_rates"


def test_register_given_a_name_says_it_is_a_decorator_without_arguments():
    """@register("mine") failed with "AttributeError: 'str' object has no attribute '__qualname__'"."""
    from mgst.policies import register  # noqa: PLC0415

    with pytest.raises(TypeError, match=r"register\('mine'\): register is a decorator without arguments; give the "
                                        r"class its name \(name = 'mine' in it\)"):
        register("mine")  # type: ignore[arg-type]
