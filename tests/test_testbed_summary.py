"""Batch means, the seed and the warnings of a testbed run's summary, on hand-made runs (no sockets)."""

from __future__ import annotations

import math
import os
import statistics
from collections import Counter
from types import SimpleNamespace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from mgst.intervals import batch_means_ci, mean_ci
from mgst.model import Experiment, Job, JobClass, Machine, PolicySpec
from mgst.testbed.summary import BATCHES, MAX_STALLS_LISTED, oversubscription_warning, summarize_testbed

# ---------------------------------------------------------------- batch_means_ci


def t_half(means: list[float]) -> float:
    k = len(means)
    return float(scipy_stats.t.ppf(0.975, k - 1)) * statistics.stdev(means) / math.sqrt(k)



@pytest.mark.parametrize(("confidence", "n", "table"), [(0.95, 10, 2.262), (0.90, 5, 2.132), (0.99, 3, 9.925)])
def test_mean_ci_uses_students_t_quantile_from_the_table(confidence, n, table):
    # Student-t critical values t(1 - (1 - confidence) / 2, n - 1), as printed in statistics tables.
    # (offset by 100: the Student-t interval is kept only while it stays above 0, docs/intervals.md)
    values = [100.0 + v for v in range(1, n + 1)]
    mean, low, high = mean_ci(values, confidence)
    half = table * statistics.stdev(values) / math.sqrt(n)
    assert mean == pytest.approx(100 + (n + 1) / 2)
    assert (high - mean) == pytest.approx(half, rel=5e-4) and (mean - low) == pytest.approx(half, rel=5e-4)

def test_one_value_per_batch_is_the_ordinary_t_interval():
    values = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0, 5.0, 3.0]
    assert batch_means_ci(values, 10) == pytest.approx(mean_ci(values))


def test_batches_of_equal_size_cover_every_value():
    values = [float(x * x % 7) for x in range(23)]
    # 23 values in 10 batches: sizes 2 or 3, in order, nothing dropped.
    sizes = [2, 2, 2, 3, 2, 2, 3, 2, 2, 3]
    assert sum(sizes) == 23
    means, start = [], 0
    for size in sizes:
        means.append(statistics.fmean(values[start:start + size]))
        start += size
    mean, low, high = batch_means_ci(values, 10)
    assert mean == pytest.approx(statistics.fmean(values))  # every value, not the batch means' mean
    assert (low, high) == pytest.approx((mean - t_half(means), mean + t_half(means)))


def test_fewer_values_than_batches_use_one_value_per_batch():
    mean, low, high = batch_means_ci([11.0, 13.0, 18.0], 10)
    assert mean == pytest.approx(14.0)
    assert (low, high) == pytest.approx((14.0 - t_half([11.0, 13.0, 18.0]), 14.0 + t_half([11.0, 13.0, 18.0])))


def test_too_few_values_give_a_nan_interval():
    assert all(math.isnan(x) for x in batch_means_ci([], 10))
    mean, low, high = batch_means_ci([2.5], 10)
    assert mean == 2.5 and math.isnan(low) and math.isnan(high)
    mean, low, high = batch_means_ci([2.5, 3.5], 1)  # a single batch says nothing about variability
    assert mean == 3.0 and math.isnan(low) and math.isnan(high)
    with pytest.raises(ValueError, match="batches"):
        batch_means_ci([1.0, 2.0], 0)


@settings(max_examples=200, deadline=None, database=None)
@given(
    st.lists(st.floats(0.0, 1e6, allow_nan=False), min_size=2, max_size=200),
    st.integers(2, 20),
)
# hypothesis found it: a mean of 3.3e-324 divided by the log-scale factor underflowed to a low bound of 0
@example(values=[0.0, 5e-324, 5e-324], batches=3)
def test_the_interval_always_contains_the_estimate(values, batches):
    mean, low, high = ci = batch_means_ci(values, batches)
    assert mean == pytest.approx(statistics.fmean(values))
    if ci.method == "student-t":
        assert 0 <= low <= mean <= high
        assert mean - low == pytest.approx(high - mean, abs=1e-9 * max(1.0, abs(mean)))
    elif ci.method == "log-scale":  # where Student-t would reach below 0 (docs/intervals.md)
        assert 0 < low <= mean <= high
    else:
        assert math.isnan(low) and math.isnan(high)


# ---------------------------------------------------------------- summarize_testbed on a hand-made run


def experiment(availability=(1.0, 1.0)) -> Experiment:
    return Experiment(
        name="hand-made",
        classes=(JobClass("a", 1.0), JobClass("b", 0.5)),
        machines=tuple(Machine(f"M{j + 1}", (2.0, 2.0), a) for j, a in enumerate(availability)),
        policy=PolicySpec("fcfs"),
    )


def hand_made_run(responses: dict[int, list[float]], achieved: list[list[float]], seed: int = 0):
    """A TestbedRun-like object: class c's jobs are submitted at 1, 2, 3, ... (interleaved
    with the other class's) and take responses[c][k] time units; time unit 1 s, t0 = 0."""
    exp = experiment()
    jobs, replicas = {}, {}
    order = sorted((k, c) for c, rs in responses.items() for k in range(len(rs)))
    for jid, (k, c) in enumerate(order):
        submitted = 1.0 + jid * 0.5
        jobs[jid] = SimpleNamespace(job=Job(jid, c, submitted), submitted=submitted, done_by=jid, replicas=[jid],
                                    timed_out=False, requeues=0, across_outage=False)
        replicas[jid] = SimpleNamespace(replica=jid, job=jid, machine=0, t2=None, t3=submitted + 0.25, t4=None,
                                        t5=None, t6=submitted + responses[c][k])
    machines = [
        SimpleNamespace(name=m.name, share=m.availability, achieved=a, incarnations=[1], registrations=1,
                        reconnections=0, jobs_run=len(a), offset=0.0, rtt=None, periods=[], expelled=None,
                        suspected=set(), left=set())
        for m, a in zip(exp.machines, achieved)
    ]
    return SimpleNamespace(
        experiment=exp, time_unit=1.0, t0=0.0, generation_end=1000.0, end=1010.0, cut_off=[], malformed=Counter(),
        warmup=0.0, seed=seed, security="curve", aborted=False, resumes=[], policy_failure=None, closed=True,
        utc_offset_s=0.0,
        network=None, overlay=None, decision_time=None,
        core=SimpleNamespace(machines=[SimpleNamespace(cpus=1, stats=SimpleNamespace(busy_time=100.0, discarded=0,
                                                                                     discarded_time=0.0))] * 2, jobs={},
                             stale_events=0, all_bags={}, running={}, out_of_queue=list),
        journal=SimpleNamespace(experiment=exp, jobs=jobs, replicas=replicas, machines=machines, delays=lambda: {},
                                outages=[], late_results=0, stalls=[], last_tick=None, requeue_causes={},
                                first_start=None),
    )


def test_a_class_mean_lies_inside_its_interval_even_with_a_slow_last_job():
    # 21 class-a jobs near 1.0 and a last one of 1000: batches over all jobs, cut to 10 of
    # equal size, used to drop that last job from the interval but not from the mean.
    a = [1.0 + 0.01 * (k % 3) for k in range(20)] + [1000.0]
    b = [2.0, 2.5, 3.0, 2.0, 2.5]
    summary, extras = summarize_testbed(hand_made_run({0: a, 1: b}, [[], []]))
    est = summary.classes[0]
    assert est.jobs == 21
    assert est.mean == pytest.approx(statistics.fmean(a))
    assert est.low <= est.mean <= est.high
    assert (est.mean, est.low, est.high) == pytest.approx(batch_means_ci(a, BATCHES))
    assert (summary.classes[1].mean, summary.classes[1].low) == pytest.approx(batch_means_ci(b, BATCHES)[:2])
    overall = summary.overall
    assert overall.jobs == 26 and overall.low <= overall.mean <= overall.high
    assert overall.mean == pytest.approx(statistics.fmean(a + b))
    assert "each class" in extras["ci_method"]


def test_a_class_with_one_job_has_no_interval():
    summary, _ = summarize_testbed(hand_made_run({0: [1.0, 2.0, 3.0], 1: [4.0]}, [[], []]))
    assert summary.classes[1].jobs == 1 and summary.classes[1].mean == 4.0
    assert math.isnan(summary.classes[1].low) and math.isnan(summary.classes[1].high)


def test_the_summary_carries_the_runs_seed():
    summary, _ = summarize_testbed(hand_made_run({0: [1.0, 2.0], 1: [1.0, 2.0]}, [[], []], seed=4242))
    assert summary.seed == 4242
    assert summary.as_dict()["seed"] == 4242


def test_a_testbed_summary_says_its_intervals_are_batch_means(tmp_path):
    """One run's intervals are batch means of its jobs: its summary.csv said "replications" (the simulation's word
    for its replications' means) and its summary.json had no interval key."""
    import csv  # noqa: PLC0415

    from mgst.results import write_summary_csv  # noqa: PLC0415

    summary, _ = summarize_testbed(hand_made_run({0: [1.0 + k / 10 for k in range(30)]}, [[], []]))
    write_summary_csv(tmp_path / "summary.csv", summary)
    with open(tmp_path / "summary.csv", newline="") as f:
        labels = {row["Class"]: row["Interval"] for row in csv.DictReader(f)}
    assert labels["Overall"].startswith("batch means") and "replications" not in " ".join(labels.values()), labels
    assert summary.as_dict()["interval"] == "batch means (10 batches of each class's counted jobs, in order)"


def test_machines_short_of_their_cpu_share_are_warned_about():
    run = hand_made_run({0: [1.0, 2.0], 1: [1.0, 2.0]}, [[0.6, 0.64], [0.97, 0.95]])
    _, extras = summarize_testbed(run)
    assert extras["warnings"] == [
        "machine M1 achieved a mean CPU share of 0.62 for the 1.00 requested (over 2 jobs): its jobs ran slower "
        "than the model says, so response times are longer than a simulation's"
    ]
    _, extras = summarize_testbed(hand_made_run({0: [1.0, 2.0], 1: [1.0]}, [[], [0.951]]))
    assert extras["warnings"] == []


# ---------------------------------------------------------------- oversubscription_warning


@pytest.mark.parametrize("executor", ["spin", "command"])
def test_more_cpu_asked_than_the_host_has_is_warned_about(executor):
    message = oversubscription_warning(experiment((1.0, 1.0, 1.0)), executor, cpus=2)
    assert message is not None
    assert f"the 3 {executor} pullers of this local run ask for 3 CPUs in all" in message
    assert "this host has 2" in message
    assert "0.62 and 0.78 for 1.0" in message


def test_no_oversubscription_warning_when_it_fits_or_for_emulate():
    assert oversubscription_warning(experiment((1.0, 1.0, 1.0)), "emulate", cpus=1) is None
    assert oversubscription_warning(experiment((1.0, 0.5, 0.5)), "spin", cpus=2) is None
    assert oversubscription_warning(experiment((1.0, 1.0)), "spin", cpus=2) is None
    with pytest.raises(ValueError, match="executor"):
        oversubscription_warning(experiment(), "spinn", cpus=2)


def test_oversubscription_warning_defaults_to_this_hosts_cpus():
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert oversubscription_warning(experiment((1.0,) * cpus), "spin") is None
    message = oversubscription_warning(experiment((1.0,) * (cpus + 1)), "spin")
    assert message is not None and f"this host has {cpus};" in message


def test_a_bag_with_a_task_caught_in_a_mapper_outage_is_not_counted():
    """Jobs caught in an outage were left out of the means (their times include it), but their bags were counted:
    a resumed bag run's makespans came out at a seventh of an undisturbed bag's. Both bags here are done at the same
    times; the one with a task across the outage is listed, and not counted."""
    from mgst.core.state import BagRecord  # noqa: PLC0415
    from mgst.testbed.summary import testbed_bags  # noqa: PLC0415

    bags = {}
    for b in (0, 1):
        rec = BagRecord(b, 10.0 * b, b, {})
        rec.size, rec.first_dispatch, rec.completed = 2, 10.0 * b + 1.0, 10.0 * b + 5.0
        bags[b] = rec
    jobs = {jid: SimpleNamespace(job=Job(jid, 0, 10.0 * (jid // 2), bag=jid // 2), across_outage=(jid == 3))
            for jid in range(4)}
    run = SimpleNamespace(generation_end=100.0, t0=0.0, time_unit=1.0, warmup=0.0,
                          core=SimpleNamespace(all_bags=bags), journal=SimpleNamespace(jobs=jobs),
                          experiment=SimpleNamespace(workload=None))  # (a stream of bags: it went on)
    reduced = testbed_bags(run, keep_rows=True)
    assert reduced.bags_counted == 1 and reduced.makespan == [4.0]
    assert [row[-1] for row in reduced.rows] == ["Yes", "No"]


def test_a_bag_the_summary_does_not_count_is_said_so_beside_its_makespan():
    """The bag lines `mgst run` prints and summary.json's bag_makespans say which bags the summary counts: a
    resumed run's bag caught in the outage showed a makespan 31 % short of the simulation's, unexplained."""
    from mgst.testbed.finite_workload import bag_makespans, format_bag_makespans  # noqa: PLC0415

    def row(bag: int, makespan: str, counted: str) -> tuple:  # (bags.csv's columns, mgst.bot_metrics.bag_row)
        return (0, bag, "0.000000", "1.000000", makespan, makespan, "1.000000", makespan, 3, 3, 0, "0", "0", counted)

    rows = bag_makespans([row(0, "70.000000", "No"), row(1, "100.000000", "Yes")],
                         [row(0, "100.000000", "Yes"), row(1, "100.000000", "Yes")])
    assert [r["counted"] for r in rows] == [False, True]
    lines = format_bag_makespans(rows)
    assert lines[0].endswith("(-30.0 %); not counted (before the warm-up, or caught in a mapper outage)")
    assert lines[1].endswith("(+0.0 %)")


def test_the_journal_keeps_the_mapper_s_stalls_and_the_summary_lists_them():
    """A silence of STALL s or more between the mapper's notes that it is alive, in a run under way, is a stall of
    its loop, kept in seconds into the run; silences before the run begins, shorter ones and a resumed mapper's
    outage are not."""
    from mgst.testbed.journal import STALL, Journal

    journal = Journal(experiment())
    journal.tick(10.0)
    journal.tick(10.0 + STALL + 5.0)  # waiting for pullers: no run yet
    journal.began(20.0)
    for wall in (20.5, 21.0, 21.0 + STALL - 0.01, 30.0, 30.5):
        journal.tick(wall)
    assert journal.stalls == [(21.0 + STALL - 0.01 - 20.0, 30.0 - (21.0 + STALL - 0.01))]
    journal.resumed(100.0, 69.5)  # an outage of 69.5 s, cut out of the run's clock, then the wait for pullers
    journal.tick(100.5)
    journal.tick(101.0 + STALL)  # (held: model time stands still, nothing waits)
    journal.began(95.0)  # the clock runs again at 105.0, model time 10.0
    journal.tick(105.0)
    journal.tick(105.0 + STALL)
    assert journal.stalls[1:] == [(10.0, STALL)]
    run = hand_made_run({0: [1.0, 2.0], 1: [1.0, 2.0]}, [[1.0], [1.0]])
    run.journal.stalls, run.journal.last_tick = journal.stalls, journal.last_tick
    _, extras = summarize_testbed(run)
    assert extras["mapper_stalls"] == {"count": 2, "total_s": round(sum(s for _, s in journal.stalls), 6), "longest": [
        {"at_s": round(at, 6), "seconds": round(s, 6)} for at, s in journal.stalls]}
    run.journal.stalls = [(float(i), 2.0 + i % 7) for i in range(100)]  # 14 of 8 s, 14 of 7 s, ...
    listed = summarize_testbed(run)[1]["mapper_stalls"]
    assert listed["count"] == 100 and MAX_STALLS_LISTED == 20
    assert sorted(s["seconds"] for s in listed["longest"]) == [7.0] * 6 + [8.0] * 14  # the longest
    assert [s["at_s"] for s in listed["longest"]] == sorted(s["at_s"] for s in listed["longest"])  # as they came
    run.journal.stalls, run.journal.last_tick = [], None  # no note at all (a run without a journal file)
    assert summarize_testbed(run)[1]["mapper_stalls"] is None


def test_the_run_s_first_silence_counts_from_its_begin():
    """A stall right after the run begins counts from the begin, even though the loop's note of that turn was
    stamped a little before the begin's own stamp."""
    from mgst.testbed.journal import STALL, Journal

    journal = Journal(experiment())
    journal.tick(19.9)
    journal.began(20.0)
    journal.tick(19.95)  # the begin turn's note, stamped with the turn's time
    journal.tick(20.0 + STALL + 1.0)
    assert journal.stalls == [(0.0, STALL + 1.0)]


def test_the_report_of_a_run_cut_off_with_jobs_running_counts_them_running():
    # Five jobs generated, three done, two still running when the run was interrupted (the core's running jobs):
    # report.html's end counts say 2 running and 0 queued (it said 0 running and 2 queued, against jobs.csv).
    from mgst.core.state import MachineState
    from mgst.testbed.report import report_snapshot

    run = hand_made_run({0: [1.0, 2.0, 3.0], 1: [1.0, 2.0]}, [[1.0], [1.0]])
    run.core.machines = [SimpleNamespace(cpus=1, state=MachineState.BUSY, cpu_share=1.0,
                                         stats=SimpleNamespace(busy_time=1.0, discarded=0, discarded_time=0.0))
                         for _ in range(2)]
    run.core.running, run.core.queued_count = {3: object(), 4: object()}, 0
    for r in run.journal.replicas.values():
        r.outcome, r.machine = "done", 0
    jobs = report_snapshot(run, {"jobs_done": 3, "jobs_generated": 5})["jobs"]
    assert (jobs["generated"], jobs["done"], jobs["running"], jobs["queued"]) == (5, 3, 2, 0)


def test_the_testbed_s_utilisation_is_of_each_machine_s_cpus():
    # Busy 100 s of a 1,010 s run (time unit 1 s): 9.9 % of one CPU, 5.0 % of two.
    run = hand_made_run({0: [1.0]}, [[1.0], [1.0]])
    run.core.machines = [SimpleNamespace(cpus=cpus, stats=SimpleNamespace(busy_time=100.0, discarded=0,
                                                                          discarded_time=0.0)) for cpus in (1, 2)]
    summary, _ = summarize_testbed(run)
    assert summary.utilisation == pytest.approx((100.0 / 1010.0, 100.0 / 2020.0))


def test_a_testbed_run_whose_response_times_grow_says_it_has_no_steady_state():
    """A run the testbed's overheads overload (docs/fidelity.md: the model's 0.2 became 7 to 29) printed a batch-means
    interval as if of a steady state; its windows now say its response times grew, as a simulation's do."""
    rising = [1.0 + 0.05 * k for k in range(200)]  # 1 to 11 across the run
    steady = [1.0 + 0.3 * ((k * 7) % 5) for k in range(200)]
    for responses, grows in ((rising, True), (steady, False)):
        run = hand_made_run({0: responses, 1: []}, [[], []])
        run.generation_end = 101.0  # (submitted at 1, 1.5, ..., 100.5: the ten windows hold 20 each)
        testbed, extras = summarize_testbed(run)
        assert (testbed.overloaded is not None) is grows, testbed.overloaded
        assert ("overloaded" in extras or "overloaded" in testbed.as_dict()) is grows
        if grows:
            assert testbed.overloaded.startswith("response times grow through the run under this policy")
