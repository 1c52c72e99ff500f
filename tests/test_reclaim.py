"""RECLAIMED on the testbed: a puller plays its availability's CPU shares, tells the mapper, and achieves them.

In-thread pullers talk to a raw ROUTER standing in for the mapper (``puller_fakes``), or a real mapper
talks to a scripted puller (``test_testbed_attacks.FakePuller``); loopback, bounded waits, children reaped.
"""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import zmq
from puller_fakes import FakeMapper, ThreadPuller, client_keys, job
from test_testbed import Run, small
from test_testbed_attacks import FakePuller, SecureRun, hello, wait_for
from test_testbed_attacks import client_keys as attack_keys

from adjuster.throttle import Throttle, make_throttle
from adjuster.throttle.accounting import CpuAccountant
from mgst.availability import State
from mgst.availability.trace import TraceAvailability
from mgst.core.events import MachineAvailability
from mgst.core.state import JobStatus
from mgst.model import BagList, Experiment, JobClass, Machine, PolicySpec, SimulationSettings, TestbedSettings
from mgst.sim.loop import Simulation
from mgst.testbed.mapper import Interrupted
from mgst.testbed.messages import READY_BURST, READY_RATE
from mgst.wire import protocol as P
from mgst.wire import security

TOL = 0.08  # timer tolerance on a loaded machine, seconds (as tests/test_puller_v3.py)
UP, RECLAIMED, DOWN = int(State.UP), int(State.RECLAIMED), int(State.DOWN)


@pytest.fixture
def start(mapper: FakeMapper, keydir: Path, ctx: zmq.Context):
    made: list[ThreadPuller] = []

    def _start(**kwargs) -> ThreadPuller:
        p = ThreadPuller(mapper.endpoint, client_keys(keydir), ctx, **kwargs)
        made.append(p)
        return p

    yield _start
    for p in made:
        p.close()


def shares_until(mapper: FakeMapper, kind: type, timeout: float) -> tuple[list[tuple[float, float]], P.Message]:
    """(share, arrival) of every Share until the first ``kind`` (other messages ignored), and it."""
    shares = []
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        got = mapper.recv(left)
        assert got is not None, f"no {kind.__name__} within {timeout} s"
        msg = got[1]
        if type(msg) is kind:
            return shares, msg
        if type(msg) is P.Share:
            shares.append((msg.share, time.monotonic()))
    raise AssertionError(f"no {kind.__name__} within {timeout} s")


class timer_lateness(threading.Thread):  # noqa: N801 (used as a function: starts itself)
    """A thread waking at ``begun + offset`` for each offset, noting how late each wake-up came (seconds)."""

    def __init__(self, begun: float, offsets: tuple[float, ...]):
        super().__init__(daemon=True)
        self.begun, self.offsets = begun, offsets
        self.lateness: list[float] = []
        self.start()

    def run(self) -> None:
        for offset in self.offsets:
            time.sleep(max(0.0, self.begun + offset - time.monotonic()))
            self.lateness.append(time.monotonic() - (self.begun + offset))


# ---------------------------------------------------------------- the puller


def test_the_puller_plays_its_shares_and_tells_the_mapper(mapper: FakeMapper, start) -> None:
    start()
    ident, _ = mapper.expect(P.Hello, 10)
    mapper.welcome(ident)
    mapper.expect(P.Ready)
    mapper.send(ident, P.Begin(("trace", [[0.3, UP, 1.0], [0.4, RECLAIMED, 0.0], [0.3, RECLAIMED, 0.5]])))
    begun = time.monotonic()
    # A control in the same window: a plain thread waking at the same instants. How late it wakes is what
    # the machine's load alone costs a timer now, and the puller is allowed that much more (never less).
    control = timer_lateness(begun, (0.3, 0.7, 1.0, 1.55))
    mapper.send(ident, job(1, work=1.0))
    _, started = mapper.expect(P.Started)
    shares, done = shares_until(mapper, P.Done, 5)
    control.join(5)
    slack = max(control.lateness, default=0.0)
    # 0.3 s at full speed, suspended 0.4 s, 0.15 done in 0.3 s at half, the 0.55 left at full (after the trace,
    # up at the welcome's share): 1.55 s.
    assert [s for s, _ in shares] == [0.0, 0.5, 1.0]
    for (_, at), want in zip(shares, (0.3, 0.7, 1.0)):
        assert want - TOL / 2 <= at - begun <= want + 2 * TOL + slack, (shares, control.lateness)
    assert 1.55 - TOL <= done.finished - started.started <= 1.55 + 2 * TOL + slack, control.lateness
    assert done.ready


def test_no_request_for_work_while_reclaimed_and_one_when_the_cpu_is_back(mapper: FakeMapper, start) -> None:
    start()
    ident, _ = mapper.expect(P.Hello, 10)
    mapper.welcome(ident)
    mapper.expect(P.Ready)
    mapper.send(ident, job(1, work=30.0))
    mapper.expect(P.Started)
    mapper.send(ident, P.Begin(("trace", [[0.05, UP, 1.0], [0.6, RECLAIMED, 0.0]])))
    _, share = mapper.expect(P.Share)
    assert share.share == 0.0
    mapper.send(ident, P.CancelMsg(1))
    mapper.quiet(0.3)  # its slot is free, but it has no CPU to give: no Ready
    _, share = mapper.expect(P.Share, 2)  # the CPU is back: it says so first...
    assert share.share == 1.0
    _, ready = mapper.expect(P.Ready)  # ...then asks
    assert (ready.share, ready.slots) == (1.0, 1)


def test_back_from_down_into_reclaimed_it_says_its_share_after_the_welcome(mapper: FakeMapper, start) -> None:
    start()
    ident, first = mapper.expect(P.Hello, 10)
    mapper.welcome(ident)
    mapper.expect(P.Ready)
    mapper.send(ident, P.Begin(("trace", [[0.2, DOWN, 0.0], [0.5, RECLAIMED, 0.0]])))
    ident, back = mapper.expect(P.Hello, 5)  # down at once, silent, back after 0.2 s as a new incarnation
    assert back.incarnation != first.incarnation
    mapper.welcome(ident)  # (the welcome's share is a_j = 1; it is reclaimed: share 0)
    _, share = mapper.expect(P.Share)
    assert share.share == 0.0
    mapper.quiet(0.2)  # and no request for work
    _, share = mapper.expect(P.Share, 2)
    assert share.share == 1.0
    mapper.expect(P.Ready)


# ---------------------------------------------------------------- the acceptance run: shares 1, 0.5, 0, 1

SERIES = [[2.0, UP, 1.0], [2.0, RECLAIMED, 0.5], [2.0, RECLAIMED, 0.0]]  # then up at a_j = 1
WORK = 5.0  # CPU seconds (time unit 1 s): 2 in the first period, 1 in the second, none, 2 after: 8 s
MARGIN = 0.25  # seconds left out at each end of a period: message latency, the throttle settling
TOLERANCE = 0.05  # on an achieved share
QUIET = 0.9  # a window where the control process got at least this much of its share is uncontended
# In a contended window, two CPU-bound processes throttled alike are not given the same CPU: beside the test
# suite on 2 cores, the job got 0.72 to 1.07 of what the control got in a window (some 30 windows measured). A
# share played wrong (0.25 for 0.5, 0 for 1, a period shifted by a second) falls below this, or above the share.
CONTENDED_FLOOR = 0.6
ATTEMPTS = 3


def _share_at(t: float, begun: float) -> float:
    k = int((t - begun) // 2.0)
    return SERIES[k][2] if 0 <= k < len(SERIES) else 1.0


class _Sampler(threading.Thread):
    """Samples the CPU seconds of the job's worker and of a control process every 20 ms (the adjuster's CPU
    accounting: user + system of each process, psutil)."""

    def __init__(self, worker: int, control: int):
        super().__init__(daemon=True)
        self.meters = [CpuAccountant(), CpuAccountant()]
        self.meters[0].track(psutil.Process(worker), since_birth=False)
        self.meters[1].track(psutil.Process(control), since_birth=False)
        self.samples: list[tuple[float, float, float]] = []  # (wall, job cpu, control cpu)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.02):
            for m in self.meters:
                m.sample()
            self.samples.append((time.time(), self.meters[0].total(), self.meters[1].total()))

    def fractions(self, start: float, end: float) -> tuple[float, float]:
        """(job, control) CPU per wall second between the first sample at or after ``start`` and the last at
        or before ``end``."""
        inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) < 2:  # (an empty or inverted window: the job ended before it) no figure, which fails a check
            return math.nan, math.nan
        (t0, j0, c0), (t1, j1, c1) = inside[0], inside[-1]
        return (j1 - j0) / (t1 - t0), (c1 - c0) / (t1 - t0)


def _model_time(bounds: list[float], available, cpu_seconds: float) -> float:
    """How long ``cpu_seconds`` of CPU take from bounds[0] at the series' shares, period k's capped by
    available(k, lo, hi) (the last period lasts until they are spent)."""
    cpu = 0.0
    for k, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        rate = min(SERIES[k][2] if k < len(SERIES) else 1.0, available(k, lo, hi))
        if k == len(bounds) - 2 or cpu + rate * (hi - lo) >= cpu_seconds:
            return lo + (cpu_seconds - cpu) / rate - bounds[0]
        cpu += rate * (hi - lo)
    raise AssertionError("unreachable")


class _ControlSeries(threading.Thread):
    """Plays the series on the control process from ``begun`` as a puller's slot does: under a throttle of the
    backend the puller takes, made the first time the share falls below 1 (until then the control, like the
    job's worker, is a plain process). The control is then a CPU-bound process held as the job is, in the same
    windows, and what it achieves is what the job can achieve on this machine now."""

    def __init__(self, control: int, begun: float):
        super().__init__(daemon=True)
        self.control, self.begun = control, begun
        self.throttle: Throttle | None = None
        self.stop = threading.Event()
        self.start()

    def run(self) -> None:
        for k, (_, _, share) in enumerate([*SERIES, [0.0, UP, 1.0]]):
            if self.stop.wait(max(0.0, self.begun + 2.0 * k - time.time())):
                return
            if self.throttle is None and share < 1.0:
                self.throttle = make_throttle(name="control")
                self.throttle.attach(self.control)
            if self.throttle is not None:
                self.throttle.set_share(share)

    def close(self) -> None:
        """Stop playing, and release the control (running) from its throttle."""
        self.stop.set()
        self.join(5)
        if self.throttle is not None:
            self.throttle.close()


def _attempt(mapper: FakeMapper, start, control: subprocess.Popen) -> tuple[list[str], bool]:
    """One run of the series on a fresh puller: the problems found, and whether the machine was contended."""
    p = start(executors=("spin",))
    ident, _ = mapper.expect(P.Hello, 10)
    mapper.welcome(ident, executor="spin", heartbeat=20.0)  # (this fake sends none: the puller must not give up)
    mapper.expect(P.Ready)
    mapper.send(ident, P.Begin(("trace", SERIES)))
    begun = time.time()
    series = _ControlSeries(control.pid, begun)
    mapper.send(ident, job(1, work=WORK))
    _, started = mapper.expect(P.Started)
    sampler = _Sampler(p.puller.runner.kits[0].worker.pid, control.pid)
    sampler.start()
    try:
        _, done = shares_until(mapper, P.Done, 60)
    finally:
        sampler.stop.set()
        sampler.join(5)
        series.close()
    p.close()
    mapper.expect(P.Bye)  # (it leaves: the next attempt's puller says hello after it)
    problems, contended = [], False
    end = done.finished
    for k, (lo, hi) in enumerate([(0, 2), (2, 4), (4, 6), (6, end - begun)]):
        target = SERIES[k][2] if k < len(SERIES) else 1.0
        if hi - lo <= 2 * MARGIN:  # the job ended before this window (faster than the model): nothing to sample
            problems.append(f"share {target}: the job was done {end - begun:.2f} s after the series began, before "
                            "this share's window")
            continue
        achieved, control_got = sampler.fractions(begun + lo + MARGIN, begun + hi - MARGIN)
        busy = control_got < QUIET * target
        contended |= busy
        # Never more than the share. Less only in a window where the control, a CPU-bound process throttled
        # alike, got less too: then no less than CONTENDED_FLOOR of what it got.
        floor = CONTENDED_FLOOR * min(target, control_got) if busy else target - TOLERANCE
        if not floor <= achieved <= target + TOLERANCE:
            problems.append(f"share {target}: achieved {achieved:.3f} (a control process got {control_got:.3f})")
    # The model's end: the CPU seconds the job's worker used (the kernel's count), at the series' shares, from the
    # job's start: 8 s on an idle machine whose speed is the calibration's (WORK). Not WORK itself: this VM's speed
    # drifts within seconds, and the same calibrated WORK took 3.7 to 6.0 CPU seconds in runs on an idle machine
    # (a spin job is work, not CPU time: its calibration is judged in test_executors), which moved the end by as
    # much, for nothing the puller did. Never faster than that model. Slower only as far as contention explains:
    # on an uncontended run within 5 %; on a contended one, within the model with each period's share capped by
    # what the control got in it, divided by CONTENDED_FLOOR.
    used = sampler.samples[-1][1] if sampler.samples else math.nan  # (tracked from just after Started to Done)
    if not 0.5 * WORK <= used <= 2 * WORK:  # (a worker that did not do the job's work, or did it twice)
        problems.append(f"the job's worker used {used:.2f} CPU seconds for {WORK} s of calibrated work")
    bounds = [started.started, begun + 2.0, begun + 4.0, begun + 6.0, end]
    took = end - started.started
    ideal = _model_time(bounds, lambda k, lo, hi: 1.0, used)
    capped = _model_time(bounds, lambda k, lo, hi: sampler.fractions(lo, hi)[1], used)
    slowest = capped / CONTENDED_FLOOR if contended else (1 + TOLERANCE) * ideal
    if not (1 - TOLERANCE) * ideal <= took <= slowest:
        problems.append(f"the job took {took:.2f} s; the model says {ideal:.2f} s for the {used:.2f} CPU seconds "
                        f"its worker used ({capped:.2f} s with what a control process got)")
    return problems, contended


def test_a_cpu_series_is_achieved_and_the_job_ends_when_the_model_says(no_children_left, mapper, start) -> None:
    """Shares 1, 0.5, 0 and 1 (2 s each): each achieved within 0.05 (CPU accounting of the spin worker) and the
    job done within 5 % of the model's time for the CPU its worker used, on an uncontended machine. On a busy one
    (CI: 2 shared cores) a control process spinning in the same windows, under a throttle of the same backend
    playing the same series as a slot does, measures what a throttled CPU-bound process can get, and a contended
    window is judged against it (see CONTENDED_FLOOR); never above the share, never faster than the model. (An
    unthrottled control once got 0.74 of a CPU where the throttled job got 0.39 of its 0.5: a quota is met less
    well than a fair share under contention.) A failing run is tried again (at most 3 times), and the test fails
    when every run fails."""
    control = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    seen = []
    try:
        for _ in range(ATTEMPTS):
            problems, contended = _attempt(mapper, start, control)
            if not problems:
                return
            # Any failing attempt is tried again: a puller that plays the series wrong fails every attempt. (CI
            # once saw an uncontended attempt end 5.6 % early, 7.55 s for 8.00: the machine's speed, which the model
            # now takes from the worker's CPU time.)
            seen.append((problems, "contended" if contended else "uncontended"))
        pytest.fail(f"{ATTEMPTS} attempts, all failing: {seen}")
    finally:
        control.kill()
        control.wait(5)


# ---------------------------------------------------------------- the mapper


def _registered(tmp_path: Path, ctx: zmq.Context):
    keys = tmp_path / "keys"
    security.create_keys(keys, ["M1", "M2"])
    run = SecureRun(small(machines=2), tmp_path, keys, [])  # (M2 never registers: the run never begins)
    fake = FakePuller(ctx, run.mapper.endpoint, attack_keys(keys, "M1"))
    return run, fake


def test_the_mapper_s_core_learns_the_puller_s_share(tmp_path, no_children_left) -> None:
    ctx = zmq.Context()
    try:
        run, fake = _registered(tmp_path, ctx)
        with run as r:
            try:
                first = hello("M1")
                fake.send(first)
                fake.expect(P.Welcome)
                m = r.mapper.core.machines[0]
                fake.send(P.Share(0.0))
                fake.sync(r.mapper, 0)
                assert m.cpu_share == 0.0
                fake.send(P.Share(0.25))
                fake.sync(r.mapper, 0)
                assert m.cpu_share == 0.25
                for bad in (1.5, -0.1, float("nan"), "1"):  # refused by the protocol, saying why
                    fake.send(P.encode(P.Share(bad)))  # (encode does not check)
                fake.sync(r.mapper, 0)
                assert m.cpu_share == 0.25 and r.mapper.drops.counts[P.Drop.BAD_VALUE] == 4
                # Reconnecting (same incarnation, e.g. after the mapper fell silent): the welcome's share, a_j,
                # holds unless the puller says otherwise, as the puller takes it.
                fake.send(first._replace(clock=time.time()))
                fake.expect(P.Welcome)
                fake.sync(r.mapper, 0)
                assert m.cpu_share == r.mapper.experiment.machines[0].availability == 0.5
            finally:
                fake.close()
            r.mapper.stopping = True
            with pytest.raises(Interrupted):
                r.wait()
    finally:
        ctx.destroy(linger=0)


def test_a_share_flood_reaches_the_core_at_a_bounded_rate_and_the_latest_wins(tmp_path, no_children_left) -> None:
    ctx = zmq.Context()
    n = 5000
    try:
        run, fake = _registered(tmp_path, ctx)
        with run as r:
            try:
                fake.send(hello("M1"))
                fake.expect(P.Welcome)
                applied = []
                core_input = r.mapper.messages.feed

                def counting(now, event):
                    if type(event) is MachineAvailability:
                        applied.append(event.cpu_share)
                    return core_input(now, event)

                r.mapper.messages.feed = counting  # the puller messages feed the core its shares
                began = time.monotonic()
                for i in range(n):
                    fake.send(P.Share(0.0 if i % 2 else 1.0))
                fake.send(P.Share(0.5))
                fake.sync(r.mapper, 0, timeout=30)
                wait_for(lambda: r.mapper.core.machines[0].cpu_share == 0.5, 5, "the latest share, at a heartbeat")
                took = time.monotonic() - began
            finally:
                fake.close()
            r.mapper.stopping = True
            with pytest.raises(Interrupted):
                r.wait()
    finally:
        ctx.destroy(linger=0)
    assert len(applied) <= READY_BURST + READY_RATE * took + 1, (len(applied), took)
    assert applied[-1] == 0.5


# ---------------------------------------------------------------- end to end


def test_a_reclaimed_machine_s_job_ends_when_the_simulation_says(tmp_path, no_children_left) -> None:
    """A mapper and a puller process replaying a trace: the puller reports its reclaimed period, the mapper's
    core follows it, and the job ends at the model time the simulation (and a hand computation) gives."""
    (tmp_path / "trace.csv").write_text("M1,1,3,reclaimed,0\n")
    exp = Experiment(
        name="reclaim", classes=(JobClass("T", 0.0, 4.0),), machines=(Machine("M1", (1.0,)),),
        policy=PolicySpec("fcfs_share"), failures=TraceAvailability(str(tmp_path / "trace.csv"), "csv"),
        workload=BagList(((0.5, ((0, 4.0),)),)),
        simulation=SimulationSettings(horizon=2.0, warmup=0.0, replications=1),
        testbed=TestbedSettings(time_unit=0.5, duration=1.0, timeout_factor=10.0),
    )
    # From 0.5, 0.5 units of work by 1; suspended until 3; the 3.5 left end at 6.5.
    (simulated,) = Simulation(exp, drain_limit=100.0).run().jobs
    assert simulated.completed == 6.5
    run = Run(exp, tmp_path)
    changes = []
    core_input = run.mapper.messages.feed

    def spy(now, event):
        if type(event) is MachineAvailability:
            changes.append((run.mapper.model_now(now), (event.machine, int(event.state), event.cpu_share)))
        return core_input(now, event)

    run.mapper.messages.feed = spy  # the puller messages feed the core its shares
    with run as r:
        result = r.wait()
    (job,) = result.core.jobs.values()
    assert job.status is JobStatus.DONE and len(job.history) == 1
    assert [args for _, args in changes] == [(0, 1, 0.0), (0, 0, 1.0)]  # (machine, RECLAIMED|UP, share)
    assert [t for t, _ in changes] == [pytest.approx(1.0, abs=0.2), pytest.approx(3.0, abs=0.2)]
    assert job.completed == pytest.approx(6.5, rel=TOLERANCE)
