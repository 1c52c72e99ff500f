"""MGST's per-job time-out as a failure detector (SilenceTimeouts), in the core, the simulator and the config."""

from __future__ import annotations

import dataclasses
import math
import tomllib

import pytest
from helpers import make_policy, plain

from mgst.config import ConfigError, parse_experiment
from mgst.core import (
    Assign,
    CancelTimer,
    JobRequeued,
    JobStatus,
    MachineState,
    MachineSuspected,
    Outcome,
    ReplicaTimedOut,
    Scheduler,
    SetTimer,
)
from mgst.model import Job, JobClass, Machine, TestbedSettings
from mgst.policies import build_policy
from mgst.policies.timeouts import SilenceTimeouts
from mgst.sim.loop import Simulation
from mgst.testbed.experiment_codec import from_plain, to_plain

KEY1 = ("silence", 1)


def fcfs_core(factor: float = 3.0, policy: str = "fcfs") -> Scheduler:
    """Class 0 of mean size 10; M0 (rate 2) runs job 1 (size 7) from t = 1; M1 (rate 4) is down.

    Job 1's expected time on M0 is 10 / 2 = 5: its time-out falls at 1 + 3 x 5 = 16.
    """
    p = make_policy(policy)
    p.silence_timeouts = SilenceTimeouts(factor)
    machines = [Machine("M0", (2.0,), 1.0), Machine("M1", (4.0,), 1.0)]
    core = Scheduler([JobClass("c", 1.0, 10.0)], machines, p, check=True)
    core.start(0.0)
    core.job_arrived(0.0, Job(1, 0, 0.0, 7.0))
    assert plain(core.machine_ready(1.0, 0)) == [Assign(core.jobs[1].job, 0, 1, 0.0)]
    return core


def test_a_silent_machine_keeps_its_replica_and_gets_a_timer_at_k_times_the_expected_time():
    core = fcfs_core()
    assert core.machine_silent(4.0, 0) == [SetTimer(KEY1, 16.0)]
    m = core.machines[0]
    assert m.silent and m.state is MachineState.BUSY and list(m.replicas) == [1]
    assert core.jobs[1].status is JobStatus.RUNNING
    core.check_invariants()


def test_the_time_out_gives_the_job_up_and_suspects_the_machine():
    core = fcfs_core()
    core.machine_silent(4.0, 0)
    core.machine_up(5.0, 1)
    out = core.timer_fired(16.0, KEY1)
    job = core.jobs[1]
    assert of_types(out) == [ReplicaTimedOut, JobRequeued, MachineSuspected]
    assert job.status is JobStatus.QUEUED and job.history[0].outcome is Outcome.TIMED_OUT
    m = core.machines[0]
    assert m.state is MachineState.DOWN and m.suspected and not m.silent
    assert m.stats.timed_out == 1 and m.stats.suspicions == 1 and m.stats.failures == 0
    # M1 asks and gets job 1 again
    assert plain(core.machine_ready(17.0, 1)) == [Assign(job.job, 1, 2, 0.0)]
    core.check_invariants()


def test_silent_after_the_deadline_times_out_at_once():
    core = fcfs_core()
    assert core.machine_silent(30.0, 0) == [SetTimer(KEY1, 30.0)]
    assert of_types(core.timer_fired(30.0, KEY1)) == [ReplicaTimedOut, JobRequeued, MachineSuspected]


def test_heard_again_before_the_deadline_cancels_the_time_out():
    core = fcfs_core()
    core.machine_silent(4.0, 0)
    assert core.machine_heard(6.0, 0) == [CancelTimer(KEY1)]
    assert not core.machines[0].silent and core.timers == {}
    # its result comes, and it asks again at once
    out = core.replica_done(8.0, 1, ready=True)
    assert core.jobs[1].status is JobStatus.DONE and core.machines[0].asking == 1
    assert not of_types(out, JobRequeued)


def test_a_silent_machine_is_offered_no_work_until_it_asks_again():
    p = make_policy("fcfs")
    p.silence_timeouts = SilenceTimeouts(3.0)
    core = Scheduler([JobClass("c", 1.0, 10.0)], [Machine("M0", (2.0,), 1.0)], p, check=True)
    core.start(0.0)
    core.machine_ready(0.0, 0)
    assert core.machines[0].asking == 1
    assert core.machine_silent(1.0, 0) == []  # nothing runs there: no timer
    assert core.machines[0].asking == 0
    assert plain(core.job_arrived(2.0, Job(1, 0, 2.0, 7.0))) == []  # not given to the silent machine
    out = core.machine_ready(3.0, 0)  # a request is a sign of life
    assert plain(out) == [Assign(core.jobs[1].job, 0, 1, 0.0)] and not core.machines[0].silent
    core.check_invariants()


def test_a_machine_that_goes_down_is_no_longer_silent_and_its_timer_is_harmless():
    core = fcfs_core()
    core.machine_silent(4.0, 0)
    core.machine_down(5.0, 0)  # the driver learnt it another way: the replica is lost at once
    assert not core.machines[0].silent and core.jobs[1].status is JobStatus.QUEUED
    assert core.timer_fired(16.0, KEY1) == []
    stale = core.stale_events
    core.machine_silent(6.0, 0)  # silent while down: stale
    assert core.stale_events == stale + 1


def test_lpas_dg_passes_the_silence_timers_on():
    core = fcfs_core(policy="lpas_dg")
    core.machine_silent(4.0, 0)
    assert of_types(core.timer_fired(16.0, KEY1)) == [ReplicaTimedOut, JobRequeued, MachineSuspected]


def test_a_suspended_replica_never_times_out():
    core = fcfs_core()
    core.cpu_share_changed(2.0, 0, 0.0)
    assert core.machine_silent(4.0, 0) == []


def of_types(out: list, kind: type | None = None) -> list:
    return [type(o) for o in out] if kind is None else [o for o in out if type(o) is kind]


@pytest.mark.parametrize("factor", [0.0, -1.0, math.inf, math.nan])
def test_factor_must_be_positive_and_finite(factor):
    with pytest.raises(ValueError, match="factor"):
        SilenceTimeouts(factor)


# ---------------------------------------------------------------------------- the experiment and the simulator

def failing(detection: str, factor: float = 3.0):
    """Two classes on four machines that fail every ~30 time units for ~3."""
    return parse_experiment_text(f"""
[experiment]
name = "failing"
[workload]
arrival_rates = [1.0, 0.5]
[machines]
rates = [[2.0, 1.0, 1.5, 1.0], [1.0, 2.0, 1.5, 1.0]]
[policy]
name = "fcfs"
[failures]
mean_up = 30.0
mean_down = 3.0
[simulation]
horizon = 3000.0
warmup = 0.0
replications = 1
[testbed]
detection = "{detection}"
timeout_factor = {factor}
""")


def test_the_experiment_file_names_a_bad_detection():
    text = to_text_with_detection("gossip")
    with pytest.raises(ConfigError, match="testbed.detection"):
        parse_experiment_text(text)


def to_text_with_detection(value: str) -> str:
    return f"""
[experiment]
name = "x"
[workload]
arrival_rates = [1.0]
[machines]
rates = [[2.0]]
[policy]
name = "fcfs"
[testbed]
detection = "{value}"
"""


def parse_experiment_text(text: str):
    return parse_experiment(tomllib.loads(text), "test")


def test_detection_round_trips_through_the_store_codec():
    exp = failing("timeout")
    assert exp.testbed.detection == "timeout"
    assert from_plain(to_plain(exp)) == exp
    plain = to_plain(failing("heartbeat"))
    assert len(plain["testbed"]) == 5  # a default run's store reads as before detection existed


def test_build_policy_attaches_the_piece_only_for_timeout_detection():
    import random

    assert build_policy(failing("heartbeat"), random.Random(0)).silence_timeouts is None
    piece = build_policy(failing("timeout", 4.0), random.Random(0)).silence_timeouts
    assert isinstance(piece, SilenceTimeouts) and piece.factor == 4.0


def test_simulated_time_out_detection_gives_jobs_up_no_earlier_than_k_times_their_expected_time():
    exp = failing("timeout")
    sim = Simulation(exp)
    run = sim.run()
    assert run.unfinished == 0
    jobs = run.jobs
    assert all(j.status is JobStatus.DONE for j in jobs)
    timed_out = [r for j in jobs for r in j.history if r.outcome is Outcome.TIMED_OUT]
    assert len(timed_out) > 10  # failures happen every ~30 units on each of 4 machines over 3000
    for r in timed_out:
        rate = exp.machines[r.machine].rates[r.job.job.job_class]
        expected = exp.classes[r.job.job.job_class].granularity * (1.0 - r.progress) / rate
        assert r.ended >= r.sent + 3.0 * expected - 1e-9
    # every failure is noticed by a time-out or by the machine coming back, never at once
    assert sum(m.failures for m in run.machines) == 0


def test_time_out_detection_costs_the_jobs_a_failure_hits():
    def hit_response(detection: str) -> float:
        run = Simulation(failing(detection)).run()
        hit = [j for j in run.jobs if any(r.outcome is not Outcome.DONE for r in j.history)]
        assert len(hit) > 50
        return sum(j.completed - j.job.submitted for j in hit) / len(hit)

    # The same arrivals and failures: a job lost with its machine waits for its time-out (or the
    # machine's comeback) before it is resubmitted, instead of not at all (about 4.0 against 2.6).
    assert hit_response("timeout") > 1.3 * hit_response("heartbeat")


def test_a_heartbeat_experiment_simulates_as_before_detection_existed():
    exp = failing("heartbeat")
    plain = dataclasses.replace(exp, testbed=TestbedSettings())
    a, b = Simulation(exp).run(), Simulation(plain).run()
    assert [(j.job.id, j.completed) for j in a.jobs] == [(j.job.id, j.completed) for j in b.jobs]
    assert sum(m.failures for m in a.machines) > 10

