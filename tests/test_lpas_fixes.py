"""LPAS_DG's fixes of MGST section 4.3, one option each: the trigger of each, against numbers worked out by hand.

The three machines of tests/test_lpas_debounce.py: mu' = [[4, 1, 1], [1, 4, 3]] (classes x machines),
alpha = [1, 1], mean sizes 1. All up, delta* = [[1, 0, 3/4], [0, 1, 1/4]]: class 0 runs on M0 and M2,
class 1 on M1 and M2.
"""

from __future__ import annotations

import pytest
from helpers import SMALL_TOML, make_core, make_policy

from mgst.config.experiment import load_experiment
from mgst.core import Assign, MachineState, SetTimer
from mgst.core.decisions import MachineSuspected, ReplicaTimedOut
from mgst.core.state import Outcome
from mgst.model import Job
from mgst.papers.mgst.lpas_fixes import DELAY_MIN_SAMPLES, min_samples
from mgst.papers.mgst.lpas_options import LpasOptions
from mgst.testbed.local_run import run_local

RATES = [[4.0, 1.0, 1.0], [1.0, 4.0, 3.0]]
ALPHA = [1.0, 1.0]
ALL_UP = ((True, False, True), (False, True, True))
ARRIVALS = ("lpas_dg", "arrivals")
RESOLVE = ("lpas_dg", "resolve")
LEARNT = ("lpas_dg", "learnt")


def core_with(options: dict, rates=RATES, alpha=ALPHA):
    return make_core(make_policy("lpas_dg", options), rates, alpha)


class Jobs:
    """Job ids, one after another."""

    def __init__(self) -> None:
        self.next = 0

    def __call__(self, job_class: int, at: float) -> Job:
        self.next += 1
        return Job(self.next, job_class, at, 1.0)


def assigned(outputs) -> list[Assign]:
    return [o for o in outputs if type(o) is Assign]


def run_one(core, jobs: Jobs, machine: int, job_class: int, at: float, holding: float, computed: float | None):
    """A job of ``job_class`` arrives at ``at`` and goes to ``machine`` (asking); its result comes ``holding``
    later, having computed ``computed`` (None: the driver measured nothing); the re-solve it asks for, if
    any (a timer due at once), is fired. Returns the replica id."""
    core.job_arrived(at, jobs(job_class, at))
    (a,) = assigned(core.machine_ready(at, machine))
    out = core.replica_done(at + holding, a.replica, False, computed)
    if LEARNT in core.timers:
        assert SetTimer(LEARNT, at + holding) in out
        solves = core.policy.solves
        core.timer_fired(at + holding, LEARNT)
        assert core.policy.solves == solves + 1
    return a.replica


# ---------------------------------------------------------------------------- the defaults


def test_with_every_fix_off_the_policy_uses_no_new_hook_and_the_files_numbers():
    core = core_with({})
    policy = core.policy
    assert policy.fixes is None
    assert not {"on_event", "on_replica_start", "on_replica_end"} & core.hooks
    assert policy.lp_rates == ((4.0, 1.0, 1.0), (1.0, 4.0, 3.0))
    assert policy.lp_alpha == (1.0, 1.0)
    assert policy.report() == {}


def test_the_beliefs_scale_the_lp_and_the_time_outs():
    core = core_with({"arrival_estimate_scale": 0.8, "rate_estimate_scale": 2.0, "timeout_factor": 3.0})
    policy = core.policy
    assert policy.lp_alpha == pytest.approx((0.8, 0.8))
    assert policy.lp_rates == ((8.0, 2.0, 2.0), (2.0, 8.0, 6.0))
    core.job_arrived(1.0, Job(1, 0, 1.0, 1.0))
    (a,) = assigned(core.machine_ready(1.0, 0))
    # expected time: mean size 1 over the believed 8 (4 x 2) at share 1; timer at sent + 3 x 1/8
    assert core.timers[("timeout", a.replica)] == pytest.approx(1.0 + 3.0 / 8.0)


def test_a_belief_for_one_class_or_one_machine():
    core = core_with({"arrival_estimate_scale": 0.8, "arrival_estimate_class": "c1",
                      "rate_estimate_scale": 1.25, "rate_estimate_machine": "M2"})
    assert core.policy.lp_alpha == pytest.approx((1.0, 0.8))
    assert core.policy.lp_rates == ((4.0, 1.0, 1.25), (1.0, 4.0, 3.75))


def test_a_belief_scaled_alike_everywhere_plans_as_the_truth():
    # max lambda s.t. sum_j delta_ij mu_ij >= lambda alpha_i: scaling every alpha (or every mu) by c scales
    # lambda by 1/c (or c) and leaves delta* alone, so LPAS_DG decides as without the mis-estimate.
    truth = core_with({}).policy
    for options in ({"arrival_estimate_scale": 1 / 1.2}, {"rate_estimate_scale": 1.25}):
        believed = core_with(options).policy
        flat = [d for row in believed.allocation.delta for d in row]
        assert flat == pytest.approx([d for row in truth.allocation.delta for d in row])
        assert believed.eligible == truth.eligible


@pytest.mark.parametrize(("options", "key"), [
    ({"arrival_check_period": 0.0}, "arrival_check_period"),
    ({"arrival_threshold": -0.1}, "arrival_threshold"),
    ({"rate_threshold": float("nan")}, "rate_threshold"),
    ({"timeout_factor": float("inf")}, "timeout_factor"),
    ({"server_choice": "fastest"}, "server_choice"),
    ({"resolve_on_events": False}, "resolve_on_events"),  # without resolve_period: never re-solved
    ({"resolve_on_events": False, "resolve_period": 5.0, "resolve_debounce": 1.0}, "resolve_on_events"),
    ({"arrival_estimate_scale": 0.0}, "arrival_estimate_scale"),
    ({"rate_estimate_scale": -1.0}, "rate_estimate_scale"),
])
def test_bad_values_name_their_key(options, key):
    with pytest.raises(ValueError, match=f"^{key}: "):
        LpasOptions.from_mapping(options)


# ---------------------------------------------------------------------------- 1: arrival rates


def test_how_many_samples_an_estimate_needs():
    # (2 / threshold)^2, at least the floor: the relative standard error 1/sqrt(n) is then half the threshold
    assert [min_samples(t, 10) for t in (0.1, 0.2, 0.3, 1.0)] == [400, 100, 45, 10]


def arrivals_then_check(rate0: float, period: float = 400.0, checks: int = 1):
    """Class 0 arrives at ``rate0`` (evenly spaced), class 1 at its estimate 1, for ``checks`` periods;
    the arrival check fires at the end of each. Returns the core and the solves at each check. (With the
    default threshold, 10 %, a class's rate is trusted from 400 arrivals: one period of class 1.)"""
    core = core_with({"arrival_check_period": period})
    jobs = Jobs()
    solves = [core.policy.solves]
    for k in range(checks):
        start = k * period
        for c, rate in ((0, rate0), (1, 1.0)):
            n = round(rate * period)
            for m in range(n):
                core.job_arrived(start + m * period / n, jobs(c, start + m * period / n))
        out = core.timer_fired(start + period, ARRIVALS)
        assert SetTimer(ARRIVALS, start + 2 * period) in out  # the next check
        solves.append(core.policy.solves)
    return core, solves


def test_arrivals_25_percent_above_the_estimate_re_solve_once_with_the_observed_rate():
    core, solves = arrivals_then_check(1.25, checks=2)
    # 500 arrivals of class 0 in 400: 1.25, 25 % above 1 (> 10 %): one solve, with alpha = (1.25, 1);
    # at the second check 1,000 in 800 is still 1.25, the rate the LP now uses: no solve.
    assert solves == [solves[0], solves[0] + 1, solves[0] + 1]
    assert core.policy.lp_alpha == pytest.approx((1.25, 1.0))
    assert core.policy.report()["solves_arrivals"] == 1


def test_arrivals_5_percent_above_the_estimate_do_not_re_solve():
    core, solves = arrivals_then_check(1.05, checks=2)
    assert solves == [solves[0]] * 3
    assert core.policy.lp_alpha == (1.0, 1.0)


def test_too_few_arrivals_keep_the_estimate():
    # Threshold 50 %: a rate is trusted from 16 arrivals. In 10: 9 of class 0 (0.9), 20 of class 1 (2.0,
    # 100 % off): the solve takes class 1's observed rate and keeps class 0's estimate.
    core = core_with({"arrival_check_period": 10.0, "arrival_threshold": 0.5})
    jobs = Jobs()
    for m in range(9):
        core.job_arrived(m * 1.0, jobs(0, m * 1.0))
    for m in range(20):
        core.job_arrived(m * 0.5, jobs(1, m * 0.5))
    core.timer_fired(10.0, ARRIVALS)
    assert core.policy.lp_alpha == pytest.approx((1.0, 2.0))


# ---------------------------------------------------------------------------- 2: processing rates


RATE_SAMPLES = 100  # a rate is trusted from (2 / 0.2)^2 completions at a 20 % threshold


def learn_rate(factor: float, samples: int = RATE_SAMPLES):
    """Class-0 jobs on M0 whose measured compute times say M0 runs class 0 at 4 x ``factor``; returns the
    core and the solves after each completion. The holding time (3) is far from the compute time: the
    policy must learn from the compute time."""
    core = core_with({"rate_threshold": 0.2})
    jobs = Jobs()
    solves = []
    for k in range(samples):
        run_one(core, jobs, 0, 0, 10.0 * k, 3.0, 1.0 / (4.0 * factor))
        solves.append(core.policy.solves)
    return core, solves


def test_completions_30_percent_slower_re_solve_with_the_learnt_rate():
    core, solves = learn_rate(0.7)
    first = solves[0]
    # nothing is learnt below 100 completions; the 100th says 2.8, 30 % below 4: one solve
    assert solves[:-1] == [first] * (RATE_SAMPLES - 1)
    assert solves[-1] == first + 1
    assert core.policy.lp_rates[0][0] == pytest.approx(2.8)
    assert core.policy.lp_rates[0][1:] == (1.0, 1.0)  # the others keep their estimates
    assert core.policy.report()["solves_rates"] == 1


def test_the_re_solve_a_completion_asks_for_offers_work_to_every_ready_machine():
    # Two machines: M0 runs class 0 at 4 (believed), M1 class 1 at 4, each 1 the other class. Planned:
    # class 0 on M0, class 1 on M1. M0 turns out to run class 0 at 0.2: then (hand-solved) lambda* = 1
    # with M1 all class 0 and M0 all class 1. M1 waits, idle, while a class-0 job is queued; the re-solve
    # is a timer, after which the core's full pass gives M1 that job.
    core = core_with({"rate_threshold": 0.2}, rates=[[4.0, 1.0], [1.0, 4.0]])
    jobs = Jobs()
    for k in range(RATE_SAMPLES - 1):
        run_one(core, jobs, 0, 0, 10.0 * k, 5.0, 5.0)
    assert core.policy.eligible == ((True, False), (False, True))
    at = 10.0 * RATE_SAMPLES
    core.job_arrived(at, jobs(0, at))
    (a,) = assigned(core.machine_ready(at, 0))
    waiting = jobs(0, at + 1.0)
    core.job_arrived(at + 1.0, waiting)
    assert not assigned(core.machine_ready(at + 1.0, 1))  # M1 is not eligible for class 0
    out = core.replica_done(at + 5.0, a.replica, False, 5.0)
    assert SetTimer(LEARNT, at + 5.0) in out and not assigned(out)
    (b,) = assigned(core.timer_fired(at + 5.0, LEARNT))
    assert (b.job.id, b.machine) == (waiting.id, 1)
    assert core.policy.eligible == ((False, True), (True, False))
    assert core.policy.lp_rates[0][0] == pytest.approx(0.2)


def test_completions_5_percent_slower_do_not_re_solve():
    core, solves = learn_rate(0.95, RATE_SAMPLES + 5)
    assert solves == [solves[0]] * len(solves)
    assert core.policy.lp_rates[0][0] == 4.0


def test_the_core_records_the_compute_time_given_or_its_own():
    core = core_with({})
    jobs = Jobs()
    given = run_one(core, jobs, 0, 0, 1.0, 0.5, 0.2)
    own = run_one(core, jobs, 0, 0, 2.0, 0.5, None)
    history = {r.id: r for rec in core.jobs.values() for r in rec.history}
    assert history[given].computed == 0.2  # the driver's measure
    assert history[own].computed == pytest.approx(0.5)  # sent (it computes at once) to result


# ---------------------------------------------------------------------------- 3: delay


def test_delay_correction_multiplies_the_rates_by_p():
    core = core_with({"delay_correction": True})
    jobs = Jobs()
    solves = core.policy.solves
    # M0 holds each class-0 job 0.5 and computes it 0.25: tau_0 = 0.25 once DELAY_MIN_SAMPLES are in
    for k in range(DELAY_MIN_SAMPLES):
        assert core.policy.solves == solves
        run_one(core, jobs, 0, 0, float(k), 0.5, 0.25)
    assert core.policy.solves == solves + 1
    # p = (1/mu) / (1/mu + tau): class 0 on M0, 1/4 over 1/4 + 1/4 = 0.5; class 1 on M0, 1 over 1.25 = 0.8
    assert core.policy.lp_rates[0][0] == pytest.approx(4.0 * 0.5)
    assert core.policy.lp_rates[1][0] == pytest.approx(1.0 * 0.8)
    assert core.policy.lp_rates[0][1:] == (1.0, 1.0)  # no delay measured on M1 and M2: p = 1
    assert core.policy.report()["solves_delay"] == 1


def test_no_delay_no_correction():
    core = core_with({"delay_correction": True})
    jobs = Jobs()
    solves = core.policy.solves
    for k in range(DELAY_MIN_SAMPLES + 2):
        run_one(core, jobs, 0, 0, float(k), 0.25, 0.25)  # holding = compute: tau = 0, p = 1
    assert core.policy.solves == solves
    assert core.policy.lp_rates[0][0] == 4.0


def test_a_share_other_than_the_lp_s_does_not_re_solve_the_delay_at_every_completion():
    """reported_share off: the LP plans M0 at its nominal a_j = 1 while it reports 0.5. The same tau_0 = 0.25 as
    above re-solves once; at the reported share p_00 would be 0.5 / 0.75, a third above the 0.5 the LP used, which
    re-solved at every completion after."""
    core = core_with({"delay_correction": True, "reported_share": False})
    core.cpu_share_changed(0.0, 0, 0.5)
    jobs = Jobs()
    solves = core.policy.solves
    for k in range(DELAY_MIN_SAMPLES + 3):
        run_one(core, jobs, 0, 0, float(k), 0.75, 0.5)  # computes 1 / (4 x 0.5) = 0.5, holds 0.75: tau 0.25
    assert core.policy.solves == solves + 1
    assert core.policy.lp_rates[0][0] == pytest.approx(4.0 * 0.5)  # p at a_j = 1: 0.25 / (0.25 + 0.25)


# ---------------------------------------------------------------------------- 4: time-outs


def timed_out_on_m0():
    """A class-0 job on M0 at 1 (expected 1/4): with factor 3 its time-out is due at 1.75; it fires."""
    core = core_with({"timeout_factor": 3.0})
    core.job_arrived(1.0, Job(1, 0, 1.0, 1.0))
    (a,) = assigned(core.machine_ready(1.0, 0))
    assert core.timers[("timeout", a.replica)] == pytest.approx(1.75)
    out = core.timer_fired(1.75, ("timeout", a.replica))
    assert ReplicaTimedOut(a.replica, 0, 1) in out
    assert MachineSuspected(0) in out
    assert core.machines[0].state is MachineState.DOWN and core.machines[0].suspected
    assert core.policy.report()["timeouts"] == 1
    return core, a.replica


def test_a_late_result_that_counts_is_one_false_suspicion_and_costs_the_replicas_started_since():
    core, rid = timed_out_on_m0()
    (b,) = assigned(core.machine_ready(1.8, 2))  # the requeued job starts on M2 at 1.8
    core.replica_done(2.0, rid, True)  # M0 delivers at 2.0: its result wins, M2's replica is cancelled
    report = core.policy.report()
    assert report["false_suspicions"] == 1
    assert report["false_suspicion_machine_time"] == pytest.approx(0.2)  # M2's 1.8 to 2.0
    assert core.machines[0].state is not MachineState.DOWN  # back with its result


def test_a_late_result_after_the_job_was_done_is_a_false_suspicion_that_lost_its_whole_run():
    core, rid = timed_out_on_m0()
    (b,) = assigned(core.machine_ready(1.8, 2))
    core.replica_done(1.9, b.replica, True)  # M2 finishes the job first
    core.replica_done(2.0, rid, True)  # M0's result no longer counts (a stale event)
    report = core.policy.report()
    assert report["false_suspicions"] == 1
    assert report["false_suspicion_machine_time"] == pytest.approx(1.0)  # M0 ran it from 1.0 to 2.0 for nothing


def test_a_suspicion_followed_by_the_machines_failure_is_not_false():
    core, rid = timed_out_on_m0()
    core.machine_down(2.0, 0)
    core.machine_ready(3.0, 0)
    report = core.policy.report()
    assert report["timeouts"] == 1 and report["false_suspicions"] == 0


def test_a_replica_that_ends_in_time_cancels_its_time_out():
    core = core_with({"timeout_factor": 3.0})
    jobs = Jobs()
    rid = run_one(core, jobs, 0, 0, 1.0, 0.5, 0.5)
    assert ("timeout", rid) not in core.timers
    assert core.policy.report()["timeouts"] == 0


# ---------------------------------------------------------------------------- 5: server choice


@pytest.mark.parametrize(("choice", "machine"), [("fcfs", 2), ("lpas", 0)])
def test_server_choice(choice, machine):
    # M2 asks before M0; both are eligible for class 0. FCFS: M2, the older request. LPAS: the one that
    # serves class 0 fastest, M0 (mu' a = 4 against 1). M1 asks first but is not eligible for class 0.
    core = core_with({"server_choice": choice})
    for j in (1, 2, 0):
        assert not assigned(core.machine_ready(0.5, j))
    (a,) = assigned(core.job_arrived(1.0, Job(1, 0, 1.0, 1.0)))
    assert a.machine == machine
    # the ready queue was M1, M2, M0; M1, offered first, cannot take it and goes to the back. FCFS: M2 takes
    # it. LPAS: M2 was first sent to the back (held), then M0 takes it.
    assert [m.index for m in core.ready_machines()] == ([0, 1] if choice == "fcfs" else [2, 1])


# ---------------------------------------------------------------------------- 6: T_system


def test_periodic_only_re_solves_at_the_period_not_at_a_machine_down():
    core = core_with({"resolve_on_events": False, "resolve_period": 10.0})
    policy = core.policy
    core.timer_fired(10.0, RESOLVE)
    assert policy.eligible == ALL_UP
    solves = policy.solves
    core.machine_down(11.0, 2)  # classes 0 and 1 keep M0 and M1: nothing starves, nothing is solved
    assert policy.solves == solves
    assert policy.eligible == ALL_UP
    out = core.timer_fired(20.0, RESOLVE)
    assert policy.solves == solves + 1
    assert SetTimer(RESOLVE, 30.0) in out
    assert policy.eligible == ((True, False, False), (False, True, False))


def test_periodic_only_still_solves_at_once_when_a_class_would_starve():
    core = core_with({"resolve_on_events": False, "resolve_period": 10.0})
    policy = core.policy
    core.timer_fired(10.0, RESOLVE)
    solves = policy.solves
    core.machine_down(11.0, 0)  # class 0 keeps M2
    assert policy.solves == solves
    core.machine_down(12.0, 2)  # class 0 has no eligible machine up, and M1 could run it
    assert policy.solves == solves + 1
    assert policy.eligible[0] == (False, True, False)


# ---------------------------------------------------------------------------- on the testbed


def test_on_the_testbed_the_policy_learns_the_pullers_compute_time(tmp_path, no_children_left):
    """A small real run (loopback pullers, emulated jobs): every result the core took carries the compute time
    the puller measured, t5 - t4 in model time, not the core's sent-to-result time, which adds the delays;
    the fixes' counts reach summary.json, beside the simulation's."""
    text = SMALL_TOML.replace('name = "fcfs"', 'name = "lpas_dg"\ndelay_correction = true')
    exp = tmp_path / "small.toml"
    exp.write_text(text)
    result = run_local(load_experiment(exp), tmp_path / "run", insecure=True, replications=2)
    journal, core = result.run.journal, result.run.core
    unit = result.run.time_unit
    done = [r for rec in core.jobs.values() for r in rec.history if r.outcome is Outcome.DONE]
    assert len(done) >= 10
    for r in done:
        log = journal.replicas[r.id]
        assert r.computed == pytest.approx((log.t5_remote - log.t4_remote) / unit)
        assert r.computed < r.ended - r.sent  # the delays (t3 to t4, t5 to t6) are left out
    assert result.summary["policy_counts"]["solves"] >= 1
    assert "policy_counts" in result.summary["simulation"]
