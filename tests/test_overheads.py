"""A testbed run's per-job overheads: measured from its journal per machine, and held by the simulation's replicas."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest
from helpers import SMALL_TOML, computed_spy

from mgst.cli import main
from mgst.config.experiment import load_experiment
from mgst.model import BagList, Experiment, Job, JobClass, Machine, PolicySpec, SimulationSettings, StagingModel
from mgst.model import TestbedSettings as Testbed
from mgst.sim.loop import Simulation
from mgst.sim.overheads import MIN_SAMPLES, MachineOverheads, Overheads
from mgst.testbed.experiment_codec import to_plain
from mgst.testbed.journal import Journal
from mgst.testbed.local_run import run_local
from mgst.testbed.overheads import measure, overheads_from_run, read_journal
from mgst.testbed.store import FILENAME, RunStore

# --- the estimator, on a journal written by hand ---------------------------------------------------------------

TWO = Experiment(
    name="two", classes=(JobClass("c", 1.0),), machines=(Machine("A", (2.0,)), Machine("B", (4.0,))),
    policy=PolicySpec("fcfs"), testbed=Testbed(time_unit=0.5),
)
A_AHEAD = 5.0  # machine A's clock runs 5 s ahead of the mapper's; B's agrees with it


def write_journal(run_dir: Path) -> None:
    """Three jobs (instants in wall seconds; A's stamped on its own clock, 5 s ahead):

    job 0 (size 1) arrives at 100.000; A asked at 99.990 (mapper 99.995): sent at 100.001, started 100.012,
      computes 1 / 2 = 0.5 units = 0.25 s (+ 3 ms overrun), finished 100.265, the mapper learns at 100.272.
    job 1 (size 2) arrives at 100.100; B asked at 99.980 (mapper 99.990): sent at 100.1005, started 100.111,
      computes 2 / 4 = 0.5 units = 0.25 s (- 1 ms), finished 100.360, learnt at 100.365.
    job 2 (size 1) arrives at 100.200: sent to A on its result's request (t2 = 100.272) at 100.300, started at
      100.311 and lost; resubmitted to B at 100.500 (B's request came with its result), started 100.520,
      finished 100.645, learnt 100.650.
    job 3 (size 1) arrives at 100.700, B waiting since 100.650; the policy decides at 101.500 (0.8 s later: its own
      wait), started 101.510, still running at the end.
    """
    run_dir.mkdir()
    store = RunStore(run_dir / FILENAME, create=True)
    store.set_meta(experiment=to_plain(TWO), seed=1, duration=1.0, time_unit=0.5)
    j = Journal(TWO, store)
    j.clock_sample(0, 99.0, 99.0005 + A_AHEAD, 99.0005 + A_AHEAD, 99.001)  # offset ((5.0005) + (4.9995)) / 2 = 5
    j.began(100.0)
    j.job_arrived(Job(0, 0, 0.0, 1.0), 100.0)
    j.sent(0, 0, 0, 99.990 + A_AHEAD, 99.995, 100.001)
    j.started(0, 100.011 + A_AHEAD, 100.012 + A_AHEAD)
    j.job_arrived(Job(1, 0, 0.2, 2.0), 100.1)
    j.sent(1, 1, 1, 99.980, 99.990, 100.1005)
    j.started(1, 100.110, 100.111)
    j.job_arrived(Job(2, 0, 0.4, 1.0), 100.2)
    j.reported_done(0, 100.011 + A_AHEAD, 100.012 + A_AHEAD, 100.265 + A_AHEAD, 100.272, 1.0)
    j.completed(0, 0, 0)
    j.end("done", 0)
    j.sent(2, 2, 0, 100.265 + A_AHEAD, 100.272, 100.300)
    j.started(2, 100.310 + A_AHEAD, 100.311 + A_AHEAD)
    j.reported_done(1, 100.110, 100.111, 100.360, 100.365, 1.0)
    j.completed(1, 1, 1)
    j.end("done", 1)
    j.end("lost", 2)
    j.requeued(2, 2)
    j.sent(3, 2, 1, 100.360, 100.365, 100.500)
    j.started(3, 100.515, 100.520)
    j.reported_done(3, 100.515, 100.520, 100.645, 100.650, 1.0)
    j.completed(2, 3, 1)
    j.job_arrived(Job(3, 0, 1.4, 1.0), 100.7)
    j.sent(4, 3, 1, 100.645, 100.650, 101.500)
    j.started(4, 101.505, 101.510)
    store.close()


def test_the_overheads_of_a_hand_written_journal(tmp_path: Path) -> None:
    write_journal(tmp_path / "run")
    journal, meta, _ = read_journal(tmp_path / "run")
    a, b = measure(journal, meta["time_unit"])
    # A: job 0 (A waiting when it arrived, decided 1 ms later) pre 100.012 - 100.000 = 12 ms, post 100.272 - 100.265
    #    = 7 ms, overrun 0.253 - 0.25; job 2's first replica, decided on A's request: pre 100.311 - 100.300 = 11 ms
    assert (a.name, sorted(a.pre), a.post, a.overrun) == ("A", pytest.approx([0.011, 0.012]), pytest.approx([0.007]),
                                                          pytest.approx([0.003]))
    # B: job 1 pre 100.111 - 100.100 = 11 ms, post 5 ms, overrun 0.249 - 0.25; job 2's second replica pre 100.520 -
    #    100.500 = 20 ms (the resubmission's instant is not kept), post 5 ms, no overrun; job 3, the policy's wait
    #    left out: 101.510 - 101.500 = 10 ms, no post (still running)
    assert (b.name, sorted(b.pre), b.post, b.overrun) == ("B", pytest.approx([0.010, 0.011, 0.020]),
                                                          pytest.approx([0.005, 0.005]), pytest.approx([-0.001]))


def test_a_puller_s_stamps_beyond_what_the_mapper_saw_are_bounded_by_it(tmp_path: Path) -> None:
    """B claims a job sent at 100.1005 and learnt at 100.365 started 1000 s after it arrived and finished at once: its
    pre-compute delay is at most the 0.265 s from its arrival to its result (not 1000 s), its post-compute delay 0."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    store = RunStore(run_dir / FILENAME, create=True)
    store.set_meta(experiment=to_plain(TWO), seed=1, duration=1.0, time_unit=0.5)
    j = Journal(TWO, store)
    j.began(100.0)
    j.job_arrived(Job(0, 0, 0.2, 2.0), 100.1)
    j.sent(0, 0, 1, 99.980, 99.990, 100.1005)
    j.reported_done(0, 100.110, 1100.111, 1100.112, 100.365, 1.0)
    j.completed(0, 0, 1)
    j.end("done", 0)
    store.close()
    journal, meta, _ = read_journal(run_dir)
    _, b = measure(journal, meta["time_unit"])
    assert b.pre == [pytest.approx(100.365 - 100.1)] and b.post == [0.0]


def test_in_model_time_and_pooled_when_a_machine_has_too_few_jobs(tmp_path: Path, caplog) -> None:
    """Both machines have fewer than MIN_SAMPLES jobs: each takes the values of both, in model time (/ 0.5 s)."""
    assert MIN_SAMPLES > 2
    write_journal(tmp_path / "run")
    with caplog.at_level(logging.WARNING, logger="mgst.sim.overheads"):
        ov = overheads_from_run(tmp_path / "run", TWO)
    for m in ov.machines:
        assert sorted(m.pre) == pytest.approx([0.020, 0.022, 0.022, 0.024, 0.040])
        assert sorted(m.post) == pytest.approx([0.010, 0.010, 0.014])
        assert sorted(m.overrun) == pytest.approx([-0.002, 0.006])
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "machine A has 1 recorded jobs" in lines[0] and "pooled" in lines[0], lines
    assert overheads_from_run(tmp_path / "run", TWO, overrun=False).machines[0].overrun == ()


# --- the simulation, holding the machine -----------------------------------------------------------------------

def one_machine(tasks: list[tuple[float, float]], staging: StagingModel | None = None,
                horizon: float = 10.0) -> Experiment:
    """One machine of rate 1, one job per (arrival, size), each its own bag (FCFS)."""
    return Experiment(
        name="one", classes=(JobClass("T", 0.0),), machines=(Machine("M1", (1.0,)),),
        policy=PolicySpec("fcfs_share"), workload=BagList(tuple((t, ((0, s),)) for t, s in tasks)),
        staging=staging, simulation=SimulationSettings(horizon=horizon, warmup=0.0, replications=1),
    )


def fixed(pre: float, post: float, overrun: float = 0.0) -> Overheads:
    return Overheads((MachineOverheads((pre,), (post,), (overrun,)),))


def responses(exp: Experiment, overheads: Overheads | None) -> list[float]:
    """Each job's (first sent, completed), flat."""
    run = Simulation(exp, overheads=overheads).run()
    return [t for rec in run.jobs for t in (rec.first_sent, rec.completed)]


def test_a_replica_holds_its_machine_before_and_after_computing() -> None:
    """Two jobs of size 1 at t = 0 and 0.5 on one machine of rate 1. Without overheads: done at 1 and 2. With 0.2
    before computing and 0.3 after: the first is done at 0.2 + 1 + 0.3 = 1.5, and the machine, held until then,
    takes the second at 1.5: done at 3.0 (response 2.5 = its wait 1.0 + service 1 + 0.5)."""
    exp = one_machine([(0.0, 1.0), (0.5, 1.0)])
    assert responses(exp, None) == [0.0, 1.0, 1.0, 2.0]
    assert responses(exp, fixed(0.2, 0.3)) == pytest.approx([0.0, 1.5, 1.5, 3.0])
    # an overrun of 0.1 lengthens the computing: 1.6, then 1.6 + 1.6 = 3.2
    assert responses(exp, fixed(0.2, 0.3, 0.1)) == pytest.approx([0.0, 1.6, 1.6, 3.2])


def test_staging_comes_after_the_pre_compute_delay() -> None:
    """Staging of 0.5: 0.2 + 0.5 + 1 + 0.3 = 2.0."""
    exp = one_machine([(0.0, 1.0)], StagingModel(start=(0.5, 0.5)))
    assert responses(exp, fixed(0.2, 0.3)) == pytest.approx([0.0, 2.0])


def test_draws_are_uniform_over_the_machine_s_values() -> None:
    """Pre-compute values 0 and 1, each drawn with probability 1/2: over 400 jobs of size 1 arriving 10 apart
    (none waits), the response is 1 or 2, each about half the time (binomial: 200, sd 10; 60 away is 6 sd)."""
    exp = one_machine([(10.0 * i, 1.0) for i in range(400)], horizon=4000.0)
    times = responses(exp, Overheads((MachineOverheads((0.0, 1.0), (0.0,)),)))
    got = [done - sent for sent, done in zip(times[::2], times[1::2])]
    assert set(got) == {1.0, 2.0}
    assert 140 < got.count(2.0) < 260


# --- the command ---------------------------------------------------------------------------------------------------

def test_bad_run_directories_are_one_line_naming_the_option(tmp_path: Path, capsys) -> None:
    exp = tmp_path / "small.toml"
    exp.write_text(SMALL_TOML)
    (tmp_path / "empty").mkdir()
    write_journal(tmp_path / "other")
    for run_dir, says in ((tmp_path / "missing", "not a folder"), (tmp_path / "empty", "no journal"),
                          (tmp_path / "other", "machines A, B")):
        code = main(["simulate", str(exp), "--overheads", str(run_dir), "--replications", "1", "--workers", "1"])
        err = capsys.readouterr().err
        assert code == 2, err
        assert err.count("\n") == 1 and err.startswith("mgst: error: --overheads: ") and says in err, err


def test_a_real_run_calibrates_its_simulation(tmp_path: Path, capsys, no_children_left) -> None:
    """A small loopback run (two machines, FCFS): its journal gives every machine values, read back by `mgst
    simulate --overheads`, whose replicas then take longer than without (every overhead is >= 0 here but the
    overrun, which the timer keeps within a few ms)."""
    exp_file = tmp_path / "small.toml"
    exp_file.write_text(SMALL_TOML)
    exp = load_experiment(exp_file)
    result = run_local(exp, tmp_path / "run", insecure=True)
    replicas = result.run.journal.replicas.values()
    journal, meta, _ = read_journal(tmp_path / "run")  # as the run left it, read back
    assert meta["time_unit"] == exp.testbed.time_unit
    for j, m in enumerate(measure(journal, meta["time_unit"])):  # one value per replica started, and per result
        assert len(m.pre) == sum(1 for r in replicas if r.machine == j and r.t4 is not None) > 0
        assert len(m.post) == sum(1 for r in replicas if r.machine == j and r.t6 is not None) > 0
        assert all(v >= 0 for v in (*m.pre, *m.post))
    capsys.readouterr()
    args = ["simulate", str(exp_file), "--replications", "2", "--workers", "1", "--json"]
    assert main(args) == 0
    plain = capsys.readouterr().out
    assert main([*args, "--overheads", str(tmp_path / "run")]) == 0
    out = capsys.readouterr()
    assert "mgst: overheads from " in out.err and "pre-compute" in out.err, out.err
    assert json.loads(out.out)["overall"]["mean_response"] > json.loads(plain)["overall"]["mean_response"]


def test_the_overheads_reach_worker_processes() -> None:
    """Replications in two processes draw what they draw in one (the overheads are pickled to the workers)."""
    from mgst.sim.replications import run_simulation  # noqa: PLC0415

    exp = load_experiment(Path(__file__).resolve().parent.parent / "experiments" / "hihi-mfd-fd.toml")
    ov = Overheads(tuple(MachineOverheads((0.01, 0.03), (0.02,)) for _ in exp.machines))
    runs = [run_simulation(exp, horizon=20.0, warmup=2.0, replications=2, workers=w, overheads=ov)[0]
            for w in (1, 2)]
    plain = run_simulation(exp, horizon=20.0, warmup=2.0, replications=2, workers=1)[0]
    assert runs[0].overall == runs[1].overall
    assert runs[0].overall.mean > plain.overall.mean


def test_a_share_change_keeps_what_is_left_of_the_held_delays() -> None:
    """A job of size 10 at t = 0 on a machine of rate 1, 0.5 before computing and 0.25 after; at t = 4 its share
    drops to 0.5. The core counts it computing from 0: 4 done, 6 left at rate 0.5 is 12 more, so 16; its
    post-compute delay follows: 16.25 (the documented approximation: the core took the pre-compute 0.5 for work;
    the job really computed from 0.5, so 3.5 done, and ends at 17.25)."""
    exp = one_machine([(0.0, 10.0)], horizon=1.0)
    run = Simulation(exp, overheads=fixed(0.5, 0.25), drain_limit=100.0, share_changes=[(4.0, 0, 0.5)]).run()
    assert [rec.completed for rec in run.jobs] == pytest.approx([16.25])
    # without the change: 0.5 + 10 + 0.25
    assert [rec.completed for rec in Simulation(exp, overheads=fixed(0.5, 0.25), drain_limit=100.0).run().jobs] == \
        pytest.approx([10.75])


def test_the_core_hears_how_long_a_replica_computed_not_how_long_it_held_its_machine() -> None:
    """With 0.2 before computing, an overrun of 0.1 and 0.3 after, a job of size 1 on a machine of rate 1 reaches the
    core at 1.6, and computed 1.1 (0.2 to 1.3): what the mapper passes on as the puller's t5 - t4, so that LPAS_DG's
    delay correction sees the 0.5 of delays (tau) and its learnt rates the 1.1."""
    spy = computed_spy("fcfs_share")
    exp = dataclasses.replace(one_machine([(0.0, 1.0)]), policy=PolicySpec(spy.name))
    assert responses(exp, fixed(0.2, 0.3, 0.1)) == pytest.approx([0.0, 1.6])
    assert spy.seen == [pytest.approx(1.1)]


def test_a_staged_replica_s_computed_leaves_its_staging_out() -> None:
    """0.2 before, staging 0.5, size 1 at rate 1, 0.3 after: done at 2.0 having computed 1.0 (0.7 to 1.7), as the
    core's own figure counts from the end of staging (it was 1.5, from the end of the pre-compute delay)."""
    spy = computed_spy("fcfs_share")
    exp = dataclasses.replace(one_machine([(0.0, 1.0)], StagingModel(start=(0.5, 0.5))), policy=PolicySpec(spy.name))
    assert responses(exp, fixed(0.2, 0.3)) == pytest.approx([0.0, 2.0])
    assert spy.seen == [pytest.approx(1.0)]
