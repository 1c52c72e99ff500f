"""A run's drain, in model time: counted from the end of generation, and kept across a crash (a mapper killed in
its drain, even an interrupted run's short one, resumes and drains what was left of it); real pullers, loopback."""

from __future__ import annotations

import itertools
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from test_failure_rebase import clock_starts
from test_resume import count_events, free_port, reap, start_mapper, wait_for

from mgst.cli.testbed_commands import _progress_printer
from mgst.config import load_experiment
from mgst.core.state import JobStatus
from mgst.testbed.live.board import FolderBoard
from mgst.testbed.live.snapshot import LivePublisher
from mgst.testbed.local_run import start_pullers, stop_pullers
from mgst.testbed.mapper import INTERRUPT_DRAIN, Mapper
from mgst.testbed.resume import next_item
from mgst.testbed.run_result import TestbedRun
from mgst.testbed.summary import summarize_testbed
from mgst.wire import protocol as P
from mgst.wire import security
from mgst.workload import make_workload

TIME_UNIT = 0.2
GENERATION_S = 3.0  # 15 model time units of arrivals at twice what the two machines can do: work left to drain
# Arrivals far beyond what the two machines can do: work is left to drain at the end of generation.
OVERLOADED = f"""[workload]
arrival_rates = [6.0]
[machines]
rates = [[0.2, 0.2]]
names = ["M1", "M2"]
[policy]
name = "fcfs"
[testbed]
time_unit = {TIME_UNIT}
duration = {GENERATION_S}
"""
DRAIN_S = 2.0  # the resumed mapper's drain time-out (wall seconds: 10 model time units)
KILLED_AFTER_S = 1.0  # into the drain (5 model time units)


def killed_in_its_drain(tmp_path: Path, into_drain_s: float, resumed_drain_s: float, interrupt: bool = False,
                        stop_resumed: bool = False,
                        progress: Callable[[Mapper], None] | None = None) -> TestbedRun:
    """The overloaded run, by `mgst mapper` with real pullers, SIGKILLed ``into_drain_s`` into its drain (or, with
    ``interrupt``, sent SIGTERM then and killed once the interrupt is committed), then resumed in this process with
    a drain time-out of ``resumed_drain_s`` (with ``stop_resumed``, stopped at once, as two quick signals stop it,
    while it still holds its clock for its pullers): the resumed run. ``progress`` is called from the resumed
    mapper's loop every 0.1 s."""
    exp_file = tmp_path / "exp.toml"
    exp_file.write_text(OVERLOADED)
    keys, out = tmp_path / "keys", tmp_path / "run"
    security.create_keys(keys, ["M1", "M2"])
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    journal = out / "journal.sqlite"
    first = start_mapper([str(exp_file), "--bind", endpoint, "--keys", str(keys), "--out", str(out)])
    pullers: list[subprocess.Popen] = []
    try:
        pullers = start_pullers(endpoint, ["M1", "M2"], tmp_path / "pullers.log", keys=keys)
        wait_for(lambda: count_events(journal, "begin") >= 1, 60, "the run's start", first)
        start = clock_starts(journal)[0]
        time.sleep(max(0.0, start + GENERATION_S + into_drain_s - time.time()))
        wait_for(lambda: count_events(journal, "genend") == 1, 10, "the end of generation", first)  # in its drain
        # (30 s at least: mgst.testbed.run_result)
        if interrupt:
            first.send_signal(signal.SIGTERM)
            # the interrupt committed: killed in its short drain
            wait_for(lambda: count_events(journal, "interrupt") == 1, 10, "the interrupt", first)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        resumed = Mapper(load_experiment(exp_file), endpoint, keys=security.server_keys(keys), out=out, resume=True,
                         drain_timeout=resumed_drain_s, progress=progress, progress_interval=0.1)
        if stop_resumed:
            resumed.stopping = resumed.aborting = True
        run = resumed.run()
        if not stop_resumed:
            assert [p.wait(timeout=30) for p in pullers] == [0, 0]
    finally:
        reap([first, *pullers])
        stop_pullers(pullers)
    assert run.cut_off  # (work was left: the drain ended it)
    done = [jid for jid, rec in run.core.jobs.items() if rec.status is JobStatus.DONE]
    assert len(done) + len(run.cut_off) == len(run.core.jobs) == len(run.journal.jobs)
    assert count_events(journal, "complete") == len(done)  # each done job completed once
    return run


def test_a_run_killed_in_its_drain_drains_what_was_left_of_it(tmp_path: Path, no_children_left) -> None:
    """Killed 1 s into its drain and resumed with a 2 s drain: the run ends 2 s of model time after its generation
    (10 time units), not 2 s after the resume (15); every job is done once, or cut off; what the pullers sent
    before their hellos to the resumed mapper is counted as theirs (superseded), not a stranger's."""
    run = killed_in_its_drain(tmp_path, KILLED_AFTER_S, DRAIN_S)
    generation_end = run.journal.generation_end
    assert generation_end is not None and abs(generation_end - GENERATION_S / TIME_UNIT) < 1.0
    drained = (run.end - run.t0) / TIME_UNIT - generation_end
    assert abs(drained - DRAIN_S / TIME_UNIT) < 2.5, drained  # (a new drain after the resume: 15)
    # what the pullers sent the dead mapper's successor before their hellos (their keys are the machines'): theirs,
    # superseded, not an unregistered (hostile) sender's
    assert run.malformed[P.Drop.SUPERSEDED] > 0 and P.Drop.UNREGISTERED not in run.malformed, run.malformed


INTERRUPTED_AFTER_S = 0.5  # into the drain (2.5 model time units)


def test_an_interrupted_run_killed_in_its_short_drain_drains_to_where_it_would_have(
        tmp_path: Path, no_children_left) -> None:
    """Interrupted (SIGTERM) 0.5 s into its drain, which then lasts at most INTERRUPT_DRAIN (4 s), and killed in that
    short drain: the resumed run, with a 10 s drain time-out of its own, drains to 0.5 s + 4 s of model time after
    its generation (22.5 time units), not to its time-out (50); every job is done once, or cut off."""
    run = killed_in_its_drain(tmp_path, INTERRUPTED_AFTER_S, 10.0, interrupt=True)
    generation_end, drain_end = run.journal.generation_end, run.journal.interrupt_drain_end
    assert generation_end is not None and drain_end is not None
    short = (INTERRUPTED_AFTER_S + INTERRUPT_DRAIN) / TIME_UNIT
    assert abs(drain_end - generation_end - short) < 2.5, drain_end - generation_end
    drained = (run.end - run.t0) / TIME_UNIT - generation_end
    assert abs(drained - (drain_end - generation_end)) < 2.5, drained  # (without the interrupt's drain kept: 50)


def test_a_resumed_run_stopped_while_it_holds_its_clock_ends_its_generation_in_wall_time(
        tmp_path: Path, no_children_left) -> None:
    """Killed in its drain, then resumed and stopped at once, before its pullers are back: the run's end of
    generation is wall time (its journal's model time on the run's clock), so its summary's horizon is the run's
    (15 time units), not a model time taken for a wall time (minus the epoch)."""
    run = killed_in_its_drain(tmp_path, KILLED_AFTER_S, DRAIN_S, stop_resumed=True)
    assert run.aborted
    generation_end = run.journal.generation_end
    assert generation_end is not None and abs(generation_end - GENERATION_S / TIME_UNIT) < 1.0
    assert abs(run.generation_end - (run.t0 + generation_end * TIME_UNIT)) < 1e-6, (run.generation_end, run.t0)
    summary, _ = summarize_testbed(run)
    assert summary.horizon == pytest.approx(generation_end)


def test_a_resumed_run_shows_its_clock_still_while_it_waits_for_its_pullers(
        tmp_path: Path, no_children_left, capsys: pytest.CaptureFixture[str]) -> None:
    """While a resumed mapper holds its clock for its pullers, its progress line and its live view say it is
    resuming, at the run's time when it was killed, and that time stands still: it never counts up through the wait
    to jump back when the run goes on (the outage is cut out of the run)."""
    printer = _progress_printer(True)
    live = LivePublisher(FolderBoard(tmp_path))
    seen: list[tuple[bool, float, float, str]] = []  # (resuming, the line's seconds, the live view's, its phase)

    def look(mapper: Mapper) -> None:
        capsys.readouterr()
        printer(mapper)
        line = capsys.readouterr().err.strip()
        snapshot = live.build(mapper, time.time())
        shown = re.match(r"resuming at (\d+) s: waiting for pullers: \d/2 registered$|\s*(\d+) s, ", line)
        assert shown, line
        seconds = float(shown.group(1) or shown.group(2))
        assert shown.group(2) is None or re.search(r"\| up [0-2]/2 \| queued ", line), line  # (machines up, said)
        seen.append((mapper.resuming(), seconds, snapshot["elapsed_s"], snapshot["phase"]))

    killed_in_its_drain(tmp_path, KILLED_AFTER_S, DRAIN_S, progress=look)
    held = [s for s in seen if s[0]]
    assert len(held) >= 2 and any(not s[0] for s in seen), seen  # (the wait was seen, and the run going on after it)
    assert all(phase == "resuming" for *_, phase in held), held
    killed_at = (GENERATION_S + KILLED_AFTER_S)
    assert all(abs(line_s - killed_at) <= 1.0 and live_s == held[0][2] for _, line_s, live_s, _ in held), held
    for before, after in itertools.pairwise(seen):
        assert after[1] >= before[1] and after[2] >= before[2], (before, after)


SPARSE_UNIT = 0.2


def sparse_run(tmp_path: Path, rate: float, duration_s: float, seed: int, drain_s: float,
               stop_after: float | None = None,
               progress: Callable[[Mapper], None] | None = None) -> tuple[TestbedRun, list[float]]:
    """A run of a few arrivals, seconds apart (``rate`` a time unit, for ``duration_s`` wall seconds), on a machine so
    slow that a job may outlast the run (work is left to drain), with a drain time-out of ``drain_s``; with
    ``stop_after``, interrupted (``Mapper.stopping``, as a signal does) that many time units after its last arrival;
    ``progress`` is called from the mapper's loop every 0.1 s.
    The run, and the arrival times before the horizon (from the workload itself, not from the run)."""
    exp_file = tmp_path / "exp.toml"
    exp_file.write_text(f"""[workload]
arrival_rates = [{rate}]
[machines]
rates = [[0.01]]
names = ["M1"]
[policy]
name = "fcfs"
[testbed]
time_unit = {SPARSE_UNIT}
duration = {duration_s}
""")
    exp = load_experiment(exp_file)
    horizon = duration_s / SPARSE_UNIT
    workload = make_workload(exp, seed, 0)
    arrivals = []
    while (job := next_item(workload)) is not None and job.submitted < horizon:
        arrivals.append(job.submitted)
    assert arrivals
    keys, out = tmp_path / "keys", tmp_path / "run"
    security.create_keys(keys, ["M1"])
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    mapper = Mapper(exp, endpoint, seed=seed, keys=security.server_keys(keys), out=out, drain_timeout=drain_s,
                    progress=progress, progress_interval=0.1)
    pullers: list[subprocess.Popen] = []
    stopper: threading.Thread | None = None
    done = threading.Event()
    ran = False
    try:
        pullers = start_pullers(endpoint, ["M1"], tmp_path / "pullers.log", keys=keys)
        if stop_after is not None:
            def stop() -> None:  # at its time in the run's clock (which starts once the puller is registered)
                while mapper.clock.t0 is None and not done.wait(0.01):
                    pass
                if mapper.clock.t0 is not None:
                    at = mapper.clock.t0 + (arrivals[-1] + stop_after) * SPARSE_UNIT
                    if not done.wait(max(0.0, at - time.time())):
                        mapper.stopping = True
            stopper = threading.Thread(target=stop, daemon=True)
            stopper.start()
        ran = True
        run = mapper.run()
        assert [p.wait(timeout=30) for p in pullers] == [0]
    finally:
        done.set()
        if stopper is not None:
            stopper.join(5)
        if not ran:
            mapper.close()
        reap(pullers)
        stop_pullers(pullers)
    return run, arrivals


def test_the_drain_counts_from_the_end_of_generation_not_from_the_last_arrival(
        tmp_path: Path, no_children_left) -> None:
    """Arrivals seconds apart, the last well before the horizon: the run drains its 1 s time-out after the end of
    generation (the horizon), as its resumed self and the simulation beside it count it, not 1 s after the last
    arrival, which ends before the horizon (drained 0)."""
    drain_s, duration_s = 1.0, 6.0
    live = LivePublisher(FolderBoard(tmp_path))
    phases: list[tuple[float, str]] = []  # (model time, the live view's phase)

    def look(mapper: Mapper) -> None:
        now = time.time()
        phases.append((mapper.model_now(now), live.build(mapper, now)["phase"]))

    run, arrivals = sparse_run(tmp_path, 0.1, duration_s, 2, drain_s, progress=look)
    # (the setting shows the difference: the last arrival's drain would end before the horizon)
    horizon = duration_s / SPARSE_UNIT
    assert arrivals[-1] < horizon - 2 * drain_s / SPARSE_UNIT, arrivals
    assert abs(run.end - run.generation_end - drain_s) < 0.5, run.end - run.generation_end
    assert run.cut_off  # (the drain timed out)
    # the live view says "draining" from the end of generation, not from the last arrival
    gap = [phase for at, phase in phases if arrivals[-1] + 1.0 < at < horizon - 1.0]
    drain = [phase for at, phase in phases if at > horizon + 0.5]
    assert gap and set(gap) == {"generating"}, phases
    assert drain and set(drain) == {"draining"}, phases


def test_an_interrupt_after_the_last_arrival_ends_generation_then(tmp_path: Path, no_children_left) -> None:
    """Interrupted 3 time units (0.6 s) after its last arrival, 15 s and more before its horizon: generation ends at the
    interrupt and the run drains INTERRUPT_DRAIN (4 s) from there, not until the horizon."""
    duration_s = 20.0
    run, arrivals = sparse_run(tmp_path, 0.02, duration_s, 27, 30.0, stop_after=3.0)
    assert arrivals[-1] < 0.25 * duration_s / SPARSE_UNIT, arrivals  # (the horizon is far: 15 s at least)
    generation_end = run.journal.generation_end
    assert generation_end is not None and abs(generation_end - (arrivals[-1] + 3.0)) < 2.5, generation_end
    assert abs(run.generation_end - (run.t0 + generation_end * SPARSE_UNIT)) < 1e-6
    drained = run.end - run.generation_end
    assert abs(drained - INTERRUPT_DRAIN) < 1.0, drained  # (without: until the horizon, 15 s and more)
    assert run.cut_off  # (the drain timed out)
