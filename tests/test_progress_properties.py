"""Property test of the core's progress in the simulator: random availability (UP, RECLAIMED at any share, DOWN),
bundles (machines holding more replicas than they have cpus) and losers that run on. Whatever hypothesis draws:
no job is lost or completed twice, no machine computes more than its cpus at once, and every replica that delivered
did exactly its work as the integral of its machine's speed over the time it computed, so that it never progressed
while its machine was at share 0 or down (the integral is computed here from the trace, not by the code under test).
The same under GridBot (its bundles bounded by a Concurrency expression, deadlines, speculative replicas, a tail).
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mgst.availability.trace import TraceAvailability
from mgst.core import Scheduler
from mgst.core.state import JobStatus, Outcome
from mgst.model import BagList, Experiment, JobClass, Machine, PolicySpec, SimulationSettings
from mgst.sim.loop import Simulation

HORIZON = 40.0


@st.composite
def periods(draw) -> list[tuple[float, float, str, float]]:
    """A machine's trace: (from, to, state, share) periods, back to back from a random start; UP at 1 elsewhere."""
    out = []
    t = draw(st.sampled_from([0.0, 0.5, 2.0]))
    for _ in range(draw(st.integers(0, 6))):
        length = draw(st.sampled_from([0.5, 1.0, 2.5, 4.0]))
        state = draw(st.sampled_from(["up", "reclaimed", "down"]))
        # (up at share 0 is refused by the trace reader: reclaimed at 0 is a machine that computes nothing)
        share = 0.0 if state == "down" else draw(st.sampled_from([0.0, 0.25, 0.5, 1.0] if state == "reclaimed"
                                                                 else [0.25, 0.5, 1.0]))
        out.append((t, t + length, state, share))
        t += length + draw(st.sampled_from([0.0, 0.0, 1.0]))
    return out


@st.composite
def settings_(draw):
    n = draw(st.integers(1, 3))
    machines = []
    for j in range(n):
        slots = draw(st.integers(1, 3))
        machines.append((f"M{j + 1}", draw(st.sampled_from([0.5, 1.0, 2.0])), slots, draw(st.integers(1, slots))))
    traces = [draw(periods()) for _ in range(n)]
    tasks = draw(st.lists(st.sampled_from([0.5, 1.0, 3.0]), min_size=1, max_size=8))
    at = draw(st.sampled_from([0.0, 1.0, 3.0]))
    return machines, traces, tasks, at, draw(st.booleans()), draw(st.integers(0, 2**16))


def share_at(trace: list[tuple[float, float, str, float]], t: float) -> tuple[str, float]:
    for a, b, state, share in trace:
        if a <= t < b:
            return state, share
    return "up", 1.0


def speed_integral(trace, rate: float, start: float, end: float) -> float:
    """The work a replica computing at its machine's speed from ``start`` to ``end`` does, by the trace."""
    cuts = sorted({start, end, *(x for a, b, *_ in trace for x in (a, b) if start < x < end)})
    total = 0.0
    for a, b in zip(cuts, cuts[1:]):
        state, share = share_at(trace, (a + b) / 2)
        total += rate * (share if state != "down" else 0.0) * (b - a)
    return total


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(s=settings_())
def test_no_job_lost_or_twice_no_more_than_cpus_and_no_progress_without_cpu(tmp_path: Path, s):
    machines, traces, tasks, at, run_on, seed = s
    check_run(tmp_path, machines, traces, tasks, at, run_on, seed,
              PolicySpec("wqr_ft", (("run_on_losers", run_on), ("checkpoints", False))))


@st.composite
def gridbot_options(draw) -> dict:
    """A GridBot policy: a bundle bound, deadlines, speculative replicas, a tail, evaluated per bag or per job."""
    options = {
        "Concurrency": draw(st.sampled_from(["Host.NumCpus", "2 * Host.NumCpus", "1", "Host.Slots",
                                             "Host.ErrorRate < 0.01 ? 3 : 1", "Bag.Tail ? 1 : 2 * Host.NumCpus"])),
        "ReplicationRequirements": draw(st.sampled_from(["false", "true", "Job.Replicas < 2",
                                                         'anyCompare(">", Job.RunningOn.ErrorRate, 0.1)'])),
        "Rank": draw(st.sampled_from(["Priority", "Host.Speed", "-Job.Replicas", "Host.Nope"])),
        "tail_threshold": draw(st.sampled_from([0, 2, 100])),
        "tail_sticky": draw(st.booleans()),
        "evaluate": draw(st.sampled_from(["bag", "job"])),
        "cycle": draw(st.sampled_from([0.5, 2.0])),
        "max_replicas": draw(st.integers(1, 3)),
    }
    deadline = draw(st.sampled_from([None, 1.0, 3.0]))
    if deadline is not None:
        options["Deadline"] = deadline
    return options


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(s=settings_(), options=gridbot_options())
def test_the_same_under_gridbot_its_bundles_deadlines_and_replicas(tmp_path: Path, s, options):
    machines, traces, tasks, at, run_on, seed = s
    options = {**options, "run_on_losers": run_on}
    check_run(tmp_path, machines, traces, tasks, at, run_on, seed, PolicySpec("gridbot", tuple(options.items())))


def check_run(tmp_path: Path, machines, traces, tasks, at, run_on: bool, seed: int, policy: PolicySpec) -> None:
    path = tmp_path / "trace.csv"
    lines = [f"{name},{a},{b},{state},{share if state != 'down' else ''}"
             for (name, *_), trace in zip(machines, traces) for a, b, state, share in trace]
    # a machine without periods still needs a line: up at 1 for good
    lines += [f"{name},1000,1001,up,1" for (name, *_), trace in zip(machines, traces) if not trace]
    path.write_text("\n".join(lines) + "\n")
    exp = Experiment(
        name="p", classes=(JobClass("T", 0.0, 1.0),),
        machines=tuple(Machine(name, (rate,), 1.0, slots, (), cpus) for name, rate, slots, cpus in machines),
        policy=policy,
        failures=TraceAvailability(str(path), "csv"),
        workload=BagList(((at, tuple((0, size) for size in tasks)),)),
        simulation=SimulationSettings(horizon=HORIZON, warmup=0.0, replications=1, seed=seed),
    )
    sim = Simulation(exp, drain_limit=1000.0)
    # the core in check mode: every transition it makes is looked up in its table (mgst.core.transitions)
    sim.core = Scheduler(exp.classes, exp.machines, sim.policy, exp.staging, check=True)
    sim.core.report_holds = sim.core.report_completions = False
    run = sim.run()
    sim.core.check_invariants()

    assert run.unfinished == 0  # every machine comes back up at 1 for good: every task is done
    for rec in run.jobs:
        assert rec.status is JobStatus.DONE
        assert sum(r.outcome is Outcome.DONE for r in rec.history) == 1, rec.history  # completed exactly once
        assert all(r.outcome is not Outcome.DISCARDED or r.discarded for r in rec.history)
        if not run_on:
            assert not any(r.discarded for r in rec.history)

    for j, (name, rate, slots, cpus) in enumerate(machines):
        replicas = [r for rec in run.jobs for r in rec.history if r.machine == j]
        # computing intervals: from its start of computing (after staging or a wait) to its end
        spans = [(r.computing_since, r.ended) for r in replicas if r.computing_since is not None]
        for t, _ in spans:  # at each start, how many compute (an interval is [start, end))
            assert sum(1 for a, b in spans if a <= t < b) <= cpus, (name, spans)
        held = [(r.sent, r.ended) for r in replicas]
        for t, _ in held:
            assert sum(1 for a, b in held if a <= t < b) <= slots, (name, held)
        for r in replicas:
            if r.outcome in (Outcome.DONE, Outcome.DISCARDED):  # it did its whole work, and only while it had CPU
                work = speed_integral(traces[j], rate, r.computing_since, r.ended)
                assert abs(work - r.job.job.size) <= 1e-9 * max(1.0, r.job.job.size) + 1e-9, (name, r, work)
