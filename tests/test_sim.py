"""The simulator against queueing theory, and its promises: streams, determinism, drain, records."""

from __future__ import annotations

import dataclasses
import logging
import math

import pytest

from mgst.core.decisions import CancelTimer, SetTimer
from mgst.core.state import JobRecord, JobStatus
from mgst.model import Experiment, FailureModel, Job, JobClass, Machine, PolicySpec, SimulationSettings
from mgst.policies import register
from mgst.policies.base import Policy
from mgst.results import Summary
from mgst.sim.loop import Simulation
from mgst.sim.replication_run import ReplicationRun
from mgst.sim.replications import run_simulation
from mgst.workload.poisson import PoissonWorkload


def experiment(rates, arrival_rates, availability=None, policy="fcfs", failures=None, **sim) -> Experiment:
    """rates: classes x machines."""
    n_machines = len(rates[0])
    availability = availability or [1.0] * n_machines
    return Experiment(
        name="t",
        classes=tuple(JobClass(str(i + 1), a) for i, a in enumerate(arrival_rates)),
        machines=tuple(
            Machine(f"M{j + 1}", tuple(row[j] for row in rates), availability[j]) for j in range(n_machines)
        ),
        policy=PolicySpec(policy),
        failures=failures,
        simulation=SimulationSettings(**sim),
    )


def erlang_c_response(lam: float, mu: float, c: int) -> float:
    """Mean response time of M/M/c (textbook Erlang C)."""
    a = lam / mu
    rho = a / c
    tail = a**c / (math.factorial(c) * (1 - rho))
    p_wait = tail / (sum(a**k / math.factorial(k) for k in range(c)) + tail)
    return p_wait / (c * mu - lam) + 1 / mu


@pytest.mark.parametrize(
    ("lam", "mu", "share", "c"),
    [
        (0.5, 1.0, 1.0, 1),  # M/M/1: W = 1 / (mu - lam) = 2
        (0.5, 2.0, 0.5, 1),  # partial availability: mu_eff = mu' a = 1, so again W = 2
        (1.5, 1.0, 1.0, 2),  # M/M/2, rho = 0.75
    ],
)
def test_mean_response_matches_queueing_theory(lam, mu, share, c):
    exp = experiment([[mu] * c], [lam], [share] * c, horizon=20000.0, warmup=1000.0, replications=6)
    summary, _ = run_simulation(exp, workers=1)
    expected = erlang_c_response(lam, mu * share, c)
    est = summary.overall
    # The 95 % interval should hold the truth; allow a small margin for the rare miss.
    half = (est.high - est.low) / 2
    assert abs(est.mean - expected) <= max(2 * half, 0.03 * expected), (est, expected)
    assert summary.unfinished == 0


def test_utilisation_is_the_offered_load():
    lam, mu = 0.6, 1.0
    exp = experiment([[mu]], [lam], horizon=20000.0, warmup=0.0, replications=4)
    summary, _ = run_simulation(exp, workers=1)
    assert summary.utilisation[0] == pytest.approx(lam / mu, rel=0.03)


def _bag_run(tasks: list[float], machines: dict, horizon: float) -> Summary:
    """One replication of one bag of ``tasks`` (work units) arriving at 0, FCFS."""
    from mgst.config import parse_experiment

    data = {"workload": {"kind": "bag_list", "class_names": ["t"], "bags": [{"at": 0.0, "tasks": [["t", w] for w in
            tasks]}]}, "machines": machines, "policy": {"name": "fcfs"},
            "simulation": {"horizon": horizon, "warmup": 0.0, "replications": 1}}
    summary, _ = run_simulation(parse_experiment(data, "bag"), workers=1)
    return summary


def test_utilisation_is_of_the_machines_cpus():
    # One host, 2 slots and 2 CPUs, three tasks of 10 at rate 1: both CPUs busy over [0, 10], one over [10, 20]:
    # 30 CPU-time units of 40, 75 % (busy time over the run's length alone: 150 %).
    summary = _bag_run([10.0, 10.0, 10.0], {"power": [1.0], "slots": 2, "cpus": 2}, horizon=20.0)
    assert summary.utilisation[0] == pytest.approx(0.75)


@pytest.mark.parametrize("policy", ["fcfs", "lpas_dg"])
def test_a_quiet_run_lasts_until_its_horizon_not_its_last_job(policy):
    """Arrivals go on until the horizon: a run whose last job ended well before it (a low rate, a short horizon) ran
    that long all the same, as a testbed run lasts its duration. Its utilisation was the busy time over the last
    job's end (a helper's run: 2 % where 0.25 % was right), and its machines' up time stopped there. (A bag list that
    ran out ends with its last task: the test below.)"""
    mu, horizon = 2.0, 40.0
    exp = experiment([[mu, mu]], [0.3], policy=policy, horizon=horizon, warmup=0.0, replications=1, seed=3)
    run = Simulation(exp).run()
    assert len(run.jobs) > 5 and max(r.completed for r in run.jobs) < horizon - 5  # (the case: the last job is early)
    assert run.end_time == horizon
    assert [m.up_time for m in run.machines] == [horizon, horizon]
    service = sum(r.job.size / mu for r in run.jobs)  # each job alone on a machine at rate mu, a_j = 1
    summary, _ = run_simulation(exp, workers=1)
    assert sum(summary.utilisation) == pytest.approx(service / horizon)


def test_a_bag_list_that_ran_out_ends_with_its_last_task_not_its_horizon():
    # One host, one task of 10 arriving at 0, a horizon of 40: no arrival was to come, so the run is 10 long, busy
    # all along (a run stretched to its horizon would say 25 %).
    assert _bag_run([10.0], {"power": [1.0]}, horizon=40.0).utilisation[0] == pytest.approx(1.0)


def test_a_job_still_running_at_the_drain_limit_shows_its_machine_and_send_time_in_jobs_csv():
    """Its Server, Secondary ID and dates were empty (the finishing replica's only), so per-machine totals rebuilt
    from the rows missed its time; a testbed run's jobs.csv shows a cut-off job's latest replica."""
    from mgst.results import JOB_COLUMNS, job_rows

    exp = experiment([[1.0, 1.0]], [10.0], horizon=20.0, warmup=0.0, replications=1)  # five times what two can do
    run = Simulation(exp).run()
    assert run.unfinished > 0
    rows = [dict(zip(JOB_COLUMNS, row)) for row in job_rows(exp, run, 0.0, 20.0)]
    running = [(row, rec) for row, rec in zip(rows, run.jobs) if rec.status is JobStatus.RUNNING]
    queued = [row for row, rec in zip(rows, run.jobs) if rec.status is JobStatus.QUEUED]
    assert len(running) == 2 and queued  # (each machine holds one at the limit; the rest never left the queue)
    for row, rec in running:
        (replica,) = rec.replicas.values()
        assert row["Server"] == f"M{replica.machine + 1}" and row["Secondary ID"] == replica.id
        assert float(row["Date Sent"]) == pytest.approx(replica.sent) and row["Date Done"] == ""
    assert {(row["Server"], row["Secondary ID"], row["Date Sent"]) for row in queued} == {("", "", "")}


def test_a_replica_cut_off_by_the_drain_limit_counts_as_busy_time():
    # One host, a task of 100 and a horizon of 10: the drain limit (as long as the horizon) ends the run at 20 with
    # the task still running. The host was busy all along: 100 %, not 0 % (only ended replicas counted).
    summary = _bag_run([100.0], {"power": [1.0]}, horizon=10.0)
    assert summary.unfinished == 1
    assert summary.utilisation[0] == pytest.approx(1.0)


def test_job_sequence_is_the_same_whatever_the_policy():
    """Common random numbers: arrivals and sizes come from the seed alone."""
    a = experiment([[2.0, 1.0], [1.0, 3.0]], [0.8, 0.9], policy="fcfs", horizon=200.0)
    b = dataclasses.replace(a, policy=PolicySpec("lpas_dg"))
    ja = [r.job for r in Simulation(a, replication=3).run().jobs]
    jb = [r.job for r in Simulation(b, replication=3).run().jobs]
    assert ja == jb
    jc = [r.job for r in Simulation(a, replication=4).run().jobs]
    assert ja[:5] != jc[:5]


def test_class_streams_are_independent_of_other_classes():
    one = list(zip(range(1000), PoissonWorkload([1.0, 2.0], seed=7)))
    other = list(zip(range(1000), PoissonWorkload([1.0, 5.0], seed=7)))
    times_one = [j.submitted for _, j in one if j.job_class == 0][:50]
    times_other = [j.submitted for _, j in other if j.job_class == 0][:50]
    assert times_one == times_other


def test_same_seed_same_results_and_workers_do_not_matter():
    exp = experiment([[2.0, 1.0], [1.0, 3.0]], [0.8, 0.9], policy="lpas_dg", horizon=300.0, warmup=30.0,
                     replications=3)
    s1, _ = run_simulation(exp, workers=1)
    s2, _ = run_simulation(exp, workers=2)
    assert s1.overall == s2.overall and s1.classes == s2.classes
    s3, _ = run_simulation(exp, workers=1, seed=2)
    assert s3.overall.mean != s1.overall.mean


def test_every_job_completes_exactly_once_with_failures():
    exp = experiment(
        [[2.0, 1.0, 1.5], [1.0, 3.0, 2.0]], [1.0, 1.2], policy="lpas_dg",
        failures=FailureModel(mean_up=5.0, mean_down=1.0), horizon=500.0,
    )
    sim = Simulation(exp)
    run = sim.run()
    assert run.unfinished == 0
    assert all(r.status is JobStatus.DONE and r.completed >= r.job.submitted for r in run.jobs)
    requeues = sum(r.requeues for r in run.jobs)
    lost = sum(m.lost for m in run.machines)
    assert requeues == lost > 0  # one replica per job: every lost replica sent its job back
    assert sum(m.completed for m in run.machines) == len(run.jobs)
    assert sum(m.failures for m in run.machines) > 0
    sim.core.check_invariants()


def test_wqr_replicas_finish_jobs_once_and_cancel_siblings():
    exp = experiment([[1.0, 1.0, 1.0, 1.0]], [0.5], policy="wqr_ft", horizon=400.0)
    run = Simulation(exp).run()
    assert run.unfinished == 0
    assert all(r.status is JobStatus.DONE for r in run.jobs)
    assert sum(m.completed for m in run.machines) == len(run.jobs)
    assert sum(m.cancelled for m in run.machines) > 0  # light load: spare machines replicate
    assert any(r.attempts > 1 for r in run.jobs)


def test_checkpoints_save_work_lost_to_failures():
    base = dict(policy="wqr_ft", failures=FailureModel(mean_up=2.0, mean_down=0.5), horizon=300.0)
    with_ck = experiment([[0.5]], [0.1], checkpoint_interval=0.2, **base)
    no_ck = experiment([[0.5]], [0.1], **base)
    busy_ck = Simulation(with_ck).run().machines[0].busy_time
    busy_no = Simulation(no_ck).run().machines[0].busy_time
    # Same jobs, same failure times; restarting from checkpoints wastes less machine time.
    assert busy_ck < 0.8 * busy_no


def test_an_overloaded_run_stops_at_the_drain_limit_and_says_so():
    exp = experiment([[1.0]], [4.0], horizon=100.0)  # ~400 units of work, 200 time units
    run = Simulation(exp).run()
    assert run.unfinished > 0
    assert run.end_time == pytest.approx(200.0)


@register
class HoldsEveryTask(Policy):
    """A policy that never gives a task to any machine (each waits), with no timer of its own."""

    name = "test_holds_every_task"
    hooks = frozenset({"choose"})

    def choose(self, view, machine):
        return None


def test_a_run_with_nothing_left_to_happen_says_so_rather_than_blame_the_drain_limit(caplog):
    """Tasks no machine will ever be given: the run ends when its events do (the bag's arrival at t = 1), long
    before the drain limit; the warning said 'at the drain limit t=1.0'."""
    exp = dataclasses.replace(bag_list_experiment([2.0, 3.0]), policy=PolicySpec("test_holds_every_task", {}))
    with caplog.at_level(logging.INFO, logger="mgst.sim.loop"):
        run = Simulation(exp).run()
    assert run.unfinished == run.stranded == 2 and run.end_time == 1.0
    assert "2 jobs still in the system at t=1.0, when nothing was left to happen" in caplog.text, caplog.text
    assert "drain limit" not in caplog.text


def test_jobs_with_nothing_left_to_happen_are_said_once_in_the_summary_not_blamed_on_the_drain_limit(caplog):
    """Per replication it was a warning line each (100,000 replications: 100,000 lines), and the summary's table
    blamed their total on the drain limit; now the table says it once, with how many replications, and no warning
    is logged by the replications."""
    from mgst.results import format_table  # noqa: PLC0415
    from mgst.sim.replications import run_simulation  # noqa: PLC0415

    exp = dataclasses.replace(bag_list_experiment([2.0, 3.0]), policy=PolicySpec("test_holds_every_task", {}))
    with caplog.at_level(logging.WARNING, logger="mgst"):
        summary, _ = run_simulation(exp, replications=3, workers=1)
    assert not caplog.records, caplog.text
    assert summary.unfinished == summary.stranded == 6 and summary.stranded_replications == 3
    table = format_table(summary)
    assert "WARNING: 6 jobs were still in the system when nothing was left to happen (3 of 3 replications, before " \
           "the drain limit): no machine could take them" in table, table
    assert "drain limit cut" not in table
    assert summary.as_dict()["stranded"] == {"jobs": 6, "replications": 3}


@register
class LooksBack(Policy):
    """FCFS by class, and at each replica's end a timer for 5 time units before then (a deadline already past)."""

    name = "test_looks_back"
    hooks = frozenset({"choose", "on_replica_end", "on_timer"})

    def __init__(self, options=None, rng=None):
        super().__init__(options, rng)
        self.set_at: dict = {}
        self.fired: list = []

    def choose(self, view, machine):
        return next((q.head for q in view.queues.values() if q.head is not None), None)

    def on_replica_end(self, view, replica):
        self.set_at[replica.id] = view.now
        return (SetTimer(replica.id, view.now - 5.0),)

    def on_timer(self, view, key):
        self.fired.append((key, view.now))
        return None


def test_a_timer_set_for_an_earlier_time_fires_at_once_and_model_time_never_goes_back():
    """The simulation fired it at the earlier time, taking the core's clock back (the testbed fires it at once)."""
    exp = dataclasses.replace(experiment([[1.0, 1.0]], [0.5], horizon=200.0), policy=PolicySpec("test_looks_back", {}))
    sim = Simulation(exp)
    sim.run()
    policy = sim.policy
    unfired = policy.set_at.keys() - {key for key, _ in policy.fired}
    assert len(policy.fired) > 50 and all(policy.set_at[key] == max(policy.set_at.values()) for key in unfired)
    assert all(now == policy.set_at[key] for key, now in policy.fired)
    times = [now for _, now in policy.fired]
    assert times == sorted(times)


@register
class CancelsItsTimers(Policy):
    """FCFS; a timer per replica at its start, 5 time units on, cancelled at its end; counts what on_event sees."""

    name = "test_cancels_its_timers"
    hooks = frozenset({"choose", "on_replica_start", "on_replica_end", "on_event"})

    def __init__(self, options=None, rng=None):
        super().__init__(options, rng)
        self.timer_events = 0

    def choose(self, view, machine):
        return next((q.head for q in view.queues.values() if q.head is not None), None)

    def on_replica_start(self, view, replica):
        return (SetTimer(("r", replica.id), view.now + 5.0),)

    def on_replica_end(self, view, replica):
        return (CancelTimer(("r", replica.id)),)

    def on_event(self, view, event):
        self.timer_events += type(event).__name__ == "TimerFired"
        return None


def test_a_cancelled_timer_reaches_the_policy_in_no_hook_as_on_the_testbed():
    """The simulation fired a cancelled timer's entry at its time, and the core handed on_event a TimerFired for it
    (a helper's policy: 101 in the simulation, none on the testbed, whose mapper skips them): now skipped alike."""
    exp = dataclasses.replace(experiment([[1.0, 1.0]], [0.5], horizon=200.0),
                              policy=PolicySpec("test_cancels_its_timers", {}))
    sim = Simulation(exp)
    run = sim.run()
    assert len(run.jobs) > 50 and run.unfinished == 0
    assert sim.policy.timer_events == 0 and sim.core.stale_events == 0


@register
class TakesAJobOut(Policy):
    """FCFS, but takes the first job to wait while every machine is busy out of its queue, through the view."""

    name = "test_takes_a_job_out"
    hooks = frozenset({"choose", "on_event"})

    def __init__(self, options=None, rng=None):
        super().__init__(options, rng)
        self.taken = None

    def choose(self, view, machine):
        return next((q.head for q in view.queues.values() if q.head is not None), None)

    def on_event(self, view, event):
        if self.taken is None:
            for q in view.queues.values():
                if q.head is not None:
                    self.taken = q.head.id
                    q.remove(q.head)
                    break
        return None


def test_a_job_a_policy_took_out_of_its_queue_fails_the_run_naming_the_policy():
    """It was never run, and the run said only that a job was left "no machine could take" (the testbed: one job
    cut off), with no word of the policy: a job lost, silently."""
    from mgst.policies.failure import PolicyFailed  # noqa: PLC0415
    from mgst.sim.replications import run_simulation  # noqa: PLC0415

    exp = dataclasses.replace(experiment([[1.0]], [0.9], horizon=100.0), policy=PolicySpec("test_takes_a_job_out", {}))
    with pytest.raises(PolicyFailed, match=r"^the policy 'test_takes_a_job_out' failed at model time .* PolicyError: "
                                           r"1 job \(\d+\) waiting in no queue at the run's end: the policy took "
                                           "them out of the view's queues"):
        run_simulation(exp, replications=1, workers=1, warmup=10.0)


def test_no_job_arrives_after_the_horizon():
    exp = experiment([[1.0]], [0.01], horizon=1.0)
    run = Simulation(exp).run()
    assert all(r.job.submitted < 1.0 for r in run.jobs)


def bag_list_experiment(tasks, staging=None, checkpoint_interval=None, options=None) -> Experiment:
    """One machine of rate 2 (work per time unit), one bag at t = 1 with tasks of the given sizes."""
    from mgst.model import BagList  # noqa: PLC0415

    return Experiment(
        name="b", classes=(JobClass("T", 0.0, 10.0),), machines=(Machine("M1", (2.0,)),),
        policy=PolicySpec("fcfs_share", options or {}), workload=BagList(((1.0, tuple((0, s) for s in tasks)),)),
        staging=staging,
        simulation=SimulationSettings(horizon=5.0, warmup=0.0, replications=1, checkpoint_interval=checkpoint_interval),
    )


def test_a_share_change_moves_a_running_replica_and_zero_suspends_it():
    # A task of 10 units of work starts at t = 1 at rate 2: it would end at 6. At t = 2 (2 units done)
    # the share drops to 0.5 (rate 1): 8 left. At t = 4 (6 left) it is suspended; at t = 7 it resumes at
    # full share (rate 2): done at 7 + 6 / 2 = 10.
    exp = bag_list_experiment([10.0])
    run = Simulation(exp, drain_limit=100.0, share_changes=[(2.0, 0, 0.5), (4.0, 0, 0.0), (7.0, 0, 1.0)]).run()
    (job,) = run.jobs
    assert job.completed == pytest.approx(10.0)
    assert run.bags[0].completed == job.completed



def test_events_at_one_instant_come_in_kind_order_around_an_arrival():
    """At t = 2 a replica completes, a policy timer is due, a bag arrives and a CPU share changes: the
    simulator takes them in that order (completions, timers, arrivals, share changes), the next arrival
    being held out of the event heap."""
    from mgst.core.decisions import SetTimer  # noqa: PLC0415
    from mgst.model import BagList  # noqa: PLC0415
    from mgst.papers.anglano.bot import FcfsShare  # noqa: PLC0415
    from mgst.policies import register  # noqa: PLC0415

    @register
    class EventOrder(FcfsShare):
        """FCFS-share, noting every event it sees, with a timer of its own at t = 2."""
        hooks = frozenset({"start", "on_event", "on_timer"})

        name = "test-event-order"

        def __init__(self, options=None, rng=None):
            super().__init__(options, rng)
            self.seen = []

        def start(self, view):
            return [*(super().start(view) or ()), SetTimer("mine", 2.0)]

        def on_timer(self, view, key):
            return () if key == "mine" else super().on_timer(view, key)

        def on_event(self, view, event):
            self.seen.append((view.now, type(event).__name__))
            return ()

    exp = dataclasses.replace(
        bag_list_experiment([2.0]), policy=PolicySpec("test-event-order"),
        workload=BagList(((1.0, ((0, 2.0),)), (2.0, ((0, 4.0),)))),  # rate 2: the first task ends at t = 2
    )
    sim = Simulation(exp, drain_limit=100.0, share_changes=[(2.0, 0, 0.5)])
    run = sim.run()
    at_two = [kind for when, kind in sim.policy.seen if when == 2.0]
    assert at_two == ["ReplicaDone", "TimerFired", "BagArrived", "CpuShareChanged"]
    # The second task starts at t = 2 at share 0.5 (rate 1): done at 6.
    assert sorted(j.completed for j in run.jobs) == pytest.approx([2.0, 6.0])


def test_a_bag_completes_with_its_last_task_and_staging_delays_a_resumed_replica():
    from mgst.model import StagingModel  # noqa: PLC0415

    # Two tasks on one machine (rate 2): 4 then 6 units of work: done at 1 + 2 = 3, then 3 + 3 = 6.
    # (requeued_first: the tasks start in the listed order, not in a random one.)
    in_order = {"requeued_first": True}
    run = Simulation(bag_list_experiment([4.0, 6.0], options=in_order), drain_limit=100.0).run()
    done = sorted(j.completed for j in run.jobs)
    assert done == pytest.approx([3.0, 6.0])
    assert run.bags[0].completed == pytest.approx(6.0) and run.bags[0].first_dispatch == 1.0
    # Staging applies to every replica with a start range U[2, 2]: each computes 2 later.
    staged = bag_list_experiment([4.0, 6.0], staging=StagingModel(start=(2.0, 2.0)), options=in_order)
    run = Simulation(staged, drain_limit=100.0).run()
    assert sorted(j.completed for j in run.jobs) == pytest.approx([5.0, 10.0])


def test_dropping_dead_heap_entries_changes_no_result():
    # WQR-FT with 3 replicas and failures: every finished job leaves its cancelled siblings'
    # completions in the heap. Dropping them as soon as possible must change nothing.
    exp = experiment(((1.0, 2.0, 1.5, 0.8),), (2.0,), policy="wqr_ft",
                     failures=FailureModel(mean_up=40.0, mean_down=4.0), horizon=400.0)
    exp = dataclasses.replace(exp, policy=PolicySpec("wqr_ft", {"replicas": 3}))

    def schedule(stale_min: int) -> tuple[list, int]:
        sim = Simulation(exp)
        sim.stale_min = stale_min
        run = sim.run()
        jobs = [(j.job.id, j.completed, j.done_on, [(r.machine, r.outcome, r.ended) for r in j.history])
                for j in run.jobs]
        return jobs, sim.dropped_entries

    kept, none = schedule(10**9)
    dropped, some = schedule(0)
    assert none == 0 and some > 100  # it did drop something
    assert dropped == kept


def test_lpas_asking_one_machine_per_eligible_set_changes_no_result(monkeypatch):
    # LPAS_DG asks one ready machine per set of eligible classes when a job arrives
    # (Policy.choose_groups); a subclass that overrides choose() is asked machine by
    # machine. With failures (requeues, re-solves) and a periodic re-solve, the two
    # must give the same schedule, job by job.
    from mgst import policies
    from mgst.papers.mgst.lpas import LpasDG

    class AskedOneByOne(LpasDG):
        hooks = frozenset({"choose"})
        name = "test-lpas-one-by-one"

        def choose(self, view, machine):
            return super().choose(view, machine)

    policies.names()  # the built-ins first, so that the patched registry keeps them
    monkeypatch.setitem(policies._REGISTRY, AskedOneByOne.name, AskedOneByOne)
    rates = ((4.0, 1.0, 1.0, 2.0), (1.0, 4.0, 3.0, 0.5), (2.0, 2.0, 0.0, 3.0))
    rates = tuple(row * 12 for row in rates)  # 48 machines, four kinds
    base = experiment(rates, (9.0, 9.0, 6.0), failures=FailureModel(mean_up=30.0, mean_down=3.0),
                      horizon=300.0)

    def schedule(name: str) -> tuple[list, int]:
        exp = dataclasses.replace(base, policy=PolicySpec(name, {"resolve_period": 50.0}))
        sim = Simulation(exp)
        run = sim.run()
        jobs = [(j.job.id, j.completed, j.done_on, [(r.machine, r.outcome, r.ended) for r in j.history])
                for j in run.jobs]
        return jobs, sim.core.matcher.grouped

    grouped, yes = schedule("lpas_dg")
    one_by_one, no = schedule(AskedOneByOne.name)
    assert yes and not no
    assert len(grouped) > 2000 and sum(len(j[3]) > 1 for j in grouped) > 10  # failures did requeue
    assert grouped == one_by_one


def test_counted_totals_count_the_jobs_submitted_in_the_window_that_completed():
    # Hand-made records (warm-up 10, horizon 100): the window is [10, 100), and a job counts once done.
    def record(job_id, cls, submitted, first_sent=None, completed=None):
        rec = JobRecord(Job(job_id, cls, submitted), cls, submitted)
        rec.first_sent, rec.completed = first_sent, completed
        return rec

    jobs = [
        record(0, 0, 9.5, 9.5, 12.0),  # before the warm-up
        record(1, 0, 10.0, 11.0, 14.0),  # at the warm-up: counted (response 4, wait 1)
        record(2, 1, 50.0, 50.0, 50.5),  # counted (0.5, 0)
        record(3, 1, 60.0, 62.0),  # sent, never completed
        record(4, 0, 99.0, 101.0, 103.0),  # counted (4, 2): completes after the horizon
        record(5, 1, 100.0, 100.0, 101.0),  # at the horizon: not counted
        record(6, 0, 20.0, 20.25, 21.0),  # counted (1, 0.25)
    ]
    run = ReplicationRun(replication=0, end_time=110.0, jobs=jobs, machines=[], unfinished=1, bags=[])
    counts, sums, waits = run.counted_totals(3, 10.0, 100.0)
    assert counts == [3, 1, 0]
    assert sums == [9.0, 0.5, 0.0]
    assert waits == [3.25, 0.0, 0.0]


def test_a_reduction_sums_in_job_order():
    # The sums make the published figures, so they must be the ones a loop in job order makes, bit for
    # bit: an exact sum (math.fsum) gives 0.6 and 1.0000000000000002e16, and so does adding the small
    # responses first to the second class's.
    def record(job_id, cls, response):
        rec = JobRecord(Job(job_id, cls, 0.0), cls, 0.0)
        rec.first_sent, rec.completed = 0.0, response
        return rec

    jobs = [record(0, 0, 0.1), record(1, 0, 0.2), record(2, 0, 0.3),
            record(3, 1, 1e16), record(4, 1, 1.0), record(5, 1, 1.0)]
    run = ReplicationRun(replication=0, end_time=1.0, jobs=jobs, machines=[], unfinished=0, bags=[])
    _, sums, _ = run.counted_totals(2, 0.0, 1.0)
    assert sums == [0.6000000000000001, 1e16]  # in order: (0.1 + 0.2) + 0.3; 1e16 + 1 is 1e16, twice


def test_jobs_left_at_the_drain_limit_are_said_once_not_per_replication(tmp_path):
    """An overloaded setting of many replications printed one warning line per replication (2,116 of them at
    100,000 replications, --quiet or not); the summary's table says their total, once."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    f = tmp_path / "over.toml"
    f.write_text('[workload]\narrival_rates = [2.0]\n[machines]\nrates = [[1.0]]\n[policy]\nname = "fcfs"\n'
                 "[simulation]\nhorizon = 50.0\nwarmup = 5.0\nreplications = 6\n")
    p = subprocess.run([sys.executable, "-m", "mgst", "simulate", str(f), "--workers", "2", "--quiet"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "still in the system" not in p.stderr, p.stderr
    assert "jobs were still in the system when the drain limit cut the run" in p.stdout, p.stdout
    assert "nothing was left to happen" not in p.stdout
