"""Tests for the CPU-bound executors: puller.spin (kernel, calibrate, SpinWorker) and puller.command (CommandRun).

Every wait is bounded (select/poll with a timeout) and every child is killed and
reaped in a finally/fixture, pass or fail. Timings compare CPU times or ratios,
never absolute wall times: this runs on a shared 2-core VM.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import psutil
import pytest
from helpers import assert_share_held

from adjuster.throttle import available_backends, make_throttle
from puller import command as command_mod
from puller.command import CommandRun
from puller.spin import SpinWorker, WorkerBusy, WorkerDied, calibrate, kernel

BIG = 10**12  # iterations: hours of work, i.e. "until cancelled"


# ---------------------------------------------------------------------- helpers


def readable(fd: int, timeout: float) -> bool:
    ready, _, _ = select.select([fd], [], [], timeout)
    return bool(ready)


def gone(pid: int) -> bool:
    """Exited: no such process, or a zombie nobody has reaped yet (orphans go to a pid 1 we don't control)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(pids: Iterable[int], timeout: float) -> bool:
    pids = list(pids)
    deadline = time.monotonic() + timeout
    while not all(gone(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def wait_until(cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def force_kill(pids: Iterable[int]) -> None:
    """Last-resort cleanup of processes a failed test may have left behind."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def child_cpu(pid: int) -> float:
    try:
        t = psutil.Process(pid).cpu_times()
        return t.user + t.system
    except psutil.NoSuchProcess:
        return 0.0


def read_line(proc: subprocess.Popen[bytes], timeout: float) -> bytes:
    assert proc.stdout is not None
    assert readable(proc.stdout.fileno(), timeout), "no line from the helper process in time"
    return proc.stdout.readline()


@pytest.fixture
def worker() -> Iterator[SpinWorker]:
    w = SpinWorker()
    try:
        yield w
    finally:
        pid = w.pid
        w.close()
        force_kill([pid])


# ---------------------------------------------------------------------- kernel, calibrate


def test_kernel_is_deterministic() -> None:
    assert kernel(10_000) == kernel(10_000)
    assert kernel(10_000) != kernel(10_001)
    assert 0 <= kernel(12_345) < 2**31
    assert kernel(0) == kernel(0)


def test_kernel_time_scales_linearly() -> None:
    def cost(n: int) -> float:
        t0 = time.thread_time()
        kernel(n)
        return time.thread_time() - t0

    # This VM's speed drifts within seconds: judge the median of ratios of back-to-back runs.
    n = 100_000
    ratios = sorted(cost(4 * n) / cost(n) for _ in range(7))
    assert 3.0 < ratios[3] < 5.0, ratios


def test_calibrate_rejects_nonpositive() -> None:
    with pytest.raises(ValueError):
        calibrate(0)


# ---------------------------------------------------------------------- SpinWorker


# A process of its own that calibrates the kernel and runs it when asked, as a puller does beside its SpinWorker: a
# lean interpreter, not this test's (a worker of the suite, whose kernel ran 1.5 times slower than a fresh one's in one
# CI-like run, after a thousand tests).
_REFERENCE = textwrap.dedent("""
    import sys, time
    from puller.spin import calibrate, kernel
    for line in sys.stdin:
        word, _, arg = line.partition(" ")
        if word == "calibrate":
            print(calibrate(float(arg)), flush=True)
        elif word == "run":
            t0 = time.thread_time()
            kernel(int(arg))
            print(time.thread_time() - t0, flush=True)
""")


class ReferenceProcess:
    """The kernel calibrated and run in a fresh process (``_REFERENCE``); each answer awaited for a bounded time."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", _REFERENCE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, cwd=Path(__file__).resolve().parents[1])

    def ask(self, line: str, timeout: float = 20.0) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        assert readable(self.proc.stdout.fileno(), timeout), f"the reference process did not answer {line!r}"
        return float(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


def test_job_burns_the_calibrated_cpu_time(worker: SpinWorker) -> None:
    # This VM's speed drifts by up to 2x within seconds (neighbours on the host), so a calibration
    # and a later job may see different machines. The child's job is therefore compared with the
    # same kernel run in a reference process *at the same time* (two cores): both see the same speed, and
    # a job sized from a calibration must cost what the calibration predicts for it. The two
    # vCPUs may differ too (one shares its core with a neighbour): with two CPUs, the child and
    # the reference swap CPUs between pairs, and the geometric mean of the two placements' medians
    # cancels that difference.
    target = 0.3
    fd = worker.fileno()
    cpus = sorted(os.sched_getaffinity(0))[:2]
    child = psutil.Process(worker.pid)
    reference = ReferenceProcess()
    ratios: dict[int, list[float]] = {0: [], 1: []}
    try:
        for job_id in range(11, 21):  # five pairs per placement: one disturbed pair cannot decide it
            placement = job_id % 2
            if len(cpus) == 2:
                child.cpu_affinity([cpus[placement]])
                psutil.Process(reference.proc.pid).cpu_affinity([cpus[1 - placement]])
            speed = reference.ask("calibrate 0.2")
            assert speed > 1e5
            n = round(target * speed)
            worker.start(n, job_id)
            assert worker.busy and worker.job_id == job_id
            here = reference.ask(f"run {n}")  # the same work, there and now
            assert readable(fd, 10.0), "fileno() never became readable"
            res = worker.result()
            assert res is not None
            got_id, cpu, wall = res
            assert got_id == job_id
            assert wall >= cpu * 0.9  # unthrottled: the child had the CPU nearly all the time
            assert not worker.busy
            ratios[placement].append(cpu / here)
    finally:
        reference.close()
    medians = [sorted(r)[2] for r in ratios.values()]
    ratio = (medians[0] * medians[1]) ** 0.5
    assert 0.7 <= ratio <= 1.3, ratios
    assert worker.fileno() == fd


def test_result_is_none_while_running_and_start_refuses_when_busy(worker: SpinWorker) -> None:
    assert worker.result() is None
    worker.start(BIG, 1)
    assert not readable(worker.fileno(), 0.05)
    assert worker.result() is None
    with pytest.raises(WorkerBusy):
        worker.start(10, 2)
    assert worker.cancel()
    with pytest.raises(ValueError):
        worker.start(-1, 3)
    with pytest.raises(ValueError):
        worker.start(2.5, 3)  # type: ignore[arg-type]


def test_cancel_stops_a_long_job_fast_and_the_worker_goes_on() -> None:
    spawned: list[int] = []
    w = SpinWorker(on_spawn=spawned.append)
    try:
        fd = w.fileno()
        w.start(BIG, 1)
        old = w.pid
        assert wait_until(lambda: child_cpu(old) > 0.05, 10.0), "the job never started computing"
        t0 = time.perf_counter()
        assert w.cancel()
        latency = time.perf_counter() - t0
        assert latency < 0.5, latency
        assert wait_gone([old], 0.5 - latency)
        assert w.pid != old and spawned == [old, w.pid]
        assert not w.busy
        assert w.fileno() == fd  # stable: a poller registered on it needs no change
        assert not w.cancel()  # idle: nothing to cancel
        w.start(1000, 2)
        assert readable(fd, 10.0)
        res = w.result()
        assert res is not None and res[0] == 2
    finally:
        w.close()
        force_kill(spawned)


def test_child_killed_from_outside_is_reported_and_replaced(worker: SpinWorker) -> None:
    worker.start(BIG, 5)
    old = worker.pid
    os.kill(old, signal.SIGKILL)
    assert readable(worker.fileno(), 5.0)
    with pytest.raises(WorkerDied) as err:
        worker.result()
    assert err.value.job_id == 5 and err.value.returncode == -signal.SIGKILL
    assert worker.pid != old and not worker.busy
    worker.start(100, 6)
    assert readable(worker.fileno(), 10.0)
    res = worker.result()
    assert res is not None and res[0] == 6


def test_idle_child_killed_from_outside_is_replaced_at_start(worker: SpinWorker) -> None:
    old = worker.pid
    os.kill(old, signal.SIGKILL)
    assert wait_gone([old], 5.0)
    worker.start(100, 7)  # broken pipe -> a fresh child takes the job
    assert readable(worker.fileno(), 10.0)
    res = worker.result()
    assert res is not None and res[0] == 7
    assert worker.pid != old


def test_close_kills_and_is_idempotent() -> None:
    with SpinWorker() as w:
        w.start(BIG, 1)
        pid = w.pid
    try:
        assert wait_gone([pid], 2.0)
        w.close()
        with pytest.raises(ValueError):
            w.start(10, 2)
        with pytest.raises(ValueError):
            w.fileno()
    finally:
        force_kill([pid])


PARENT = """
import select, subprocess, sys, time
from puller.spin import SpinWorker
w = SpinWorker()
w.start(1, 0)  # a first result: the child is up and watching its parent
select.select([w.fileno()], [], [], 20)
assert w.result()[0] == 0
if {busy}:
    w.start(10**12, 1)
leak = None
if {leak}:  # another process keeps the worker's stdin open: EOF never comes, the ppid check must act
    leak = subprocess.Popen(["sleep", "60"], pass_fds=[w._proc.stdin.fileno()])
print(w.pid, leak.pid if leak else 0, flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize(
    ("busy", "leak"), [(False, False), (True, False), (True, True)], ids=["idle", "busy", "leaked-stdin"]
)
def test_worker_child_exits_when_its_parent_dies(busy: bool, leak: bool) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(PARENT.format(busy=busy, leak=leak))],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[1],
    )
    pids: list[int] = []
    try:
        pids = [int(x) for x in read_line(parent, 20.0).split() if x != b"0"]
        child = pids[0]
        assert not gone(child)
        parent.kill()
        parent.wait(5.0)
        assert wait_gone([child], 5.0), "the worker child outlived its parent"
    finally:
        parent.kill()
        parent.wait(5.0)
        force_kill(pids)


# ---------------------------------------------------------------------- CommandRun


@pytest.fixture(params=["pidfd", "thread"])
def notify(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "thread":
        monkeypatch.setattr(command_mod, "_pidfd_open", None)
    elif command_mod._pidfd_open is None:
        pytest.skip("no os.pidfd_open here")
    return request.param


@pytest.fixture
def runs() -> Iterator[Callable[..., CommandRun]]:
    made: list[CommandRun] = []

    def make(*args: object, **kwargs: object) -> CommandRun:
        run = CommandRun(*args, **kwargs)  # type: ignore[arg-type]
        made.append(run)
        return run

    try:
        yield make
    finally:
        for run in made:
            run.close()


def test_command_exit_code_env_and_cwd(runs: Callable[..., CommandRun], notify: str, tmp_path: Path) -> None:
    code = (
        "import os, sys; assert os.getcwd() == sys.argv[1] and 'PATH' in os.environ;"
        "sys.exit(int(os.environ['MGST_CLASS']))"
    )
    run = runs([sys.executable, "-c", code, str(tmp_path)], {"MGST_CLASS": "3", "MGST_JOB": "17"}, str(tmp_path))
    assert run.notify == notify
    assert readable(run.fileno(), 10.0), "fileno() never became readable"
    assert run.poll() == 3, run.stderr_tail()  # readable implies exited: poll() has the code at once
    assert run.returncode == 3


def test_command_complete_environment(
    runs: Callable[..., CommandRun], notify: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With inherit_env=False, ``env`` is all the program gets (looked up on its PATH); by default it is merged."""
    monkeypatch.setenv("MGST_OUTER", "leak")
    check = ["sh", "-c", 'test "$MGST_X" = 1 && test -z "$MGST_OUTER"']
    run = runs(check, {"PATH": os.environ["PATH"], "MGST_X": "1"}, inherit_env=False)
    assert readable(run.fileno(), 10.0)
    assert run.poll() == 0, run.stderr_tail()
    merged = runs(check, {"MGST_X": "1"})
    assert readable(merged.fileno(), 10.0)
    assert merged.poll() == 1  # MGST_OUTER came through


def test_command_fileno_not_readable_while_running(runs: Callable[..., CommandRun], notify: str) -> None:
    run = runs(["sleep", "60"])
    assert not readable(run.fileno(), 0.1)
    assert run.poll() is None
    run.kill()
    assert readable(run.fileno(), 5.0)
    assert run.poll() == -signal.SIGKILL


def test_command_kill_kills_the_process_tree(runs: Callable[..., CommandRun], notify: str, tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild"
    run = runs(["sh", "-c", f"sleep 60 & echo $! > {pidfile}.tmp && mv {pidfile}.tmp {pidfile}; wait"])
    grandchild = 0
    try:
        assert wait_until(pidfile.exists, 10.0)
        grandchild = int(pidfile.read_text())
        assert not gone(grandchild)
        assert psutil.Process(grandchild).ppid() == run.pid
        run.kill()
        run.kill()  # idempotent
        assert run.poll() == -signal.SIGKILL
        assert wait_gone([run.pid, grandchild], 3.0)
        assert readable(run.fileno(), 1.0)
    finally:
        if grandchild:
            force_kill([grandchild])


def test_command_exit_with_a_leftover_background_child(
    runs: Callable[..., CommandRun], notify: str, tmp_path: Path
) -> None:
    """fileno() reports the program's own exit, even while a background child lives on; close() sweeps it."""
    pidfile = tmp_path / "grandchild"
    run = runs(["sh", "-c", f"sleep 60 & echo $! > {pidfile}.tmp && mv {pidfile}.tmp {pidfile}"])
    grandchild = 0
    try:
        assert wait_until(pidfile.exists, 10.0)
        grandchild = int(pidfile.read_text())
        assert readable(run.fileno(), 10.0)
        assert run.poll() == 0
        assert not gone(grandchild)
        run.close()  # sweeps the group
        assert wait_gone([grandchild], 3.0)
    finally:
        if grandchild:
            force_kill([grandchild])


def test_command_stderr_tail_without_deadlock(runs: Callable[..., CommandRun]) -> None:
    code = "import sys; sys.stderr.write('x' * 1_000_000 + 'caf\\u00e9 END'); sys.stderr.flush()"
    run = runs([sys.executable, "-c", code])
    assert readable(run.fileno(), 10.0)
    assert run.poll() == 0
    tail = run.stderr_tail(100)
    assert tail.endswith("café END") and len(tail.encode()) <= 100
    run.close()
    run.close()  # idempotent
    assert run.stderr_tail(10).endswith("END")
    with pytest.raises(ValueError):
        run.fileno()


def test_command_missing_program_leaks_nothing(notify: str) -> None:
    before = set(os.listdir("/proc/self/fd"))
    with pytest.raises(FileNotFoundError):
        CommandRun(["/nonexistent/mgst-no-such-program"])
    assert set(os.listdir("/proc/self/fd")) <= before


# --- the spin executor under each throttle backend available here ---------------------------------


@pytest.mark.parametrize("backend", available_backends())
@pytest.mark.parametrize("share", [0.5, 0.25])
def test_spin_executor_achieves_the_cpu_share(backend, share):
    """A spin job held at a_j by the adjuster gets that share of a CPU (within 0.05), by the kernel's count and
    the throttle's, judged against what CPU contention left it in the same windows (helpers.share_problems)."""
    speed = calibrate(0.2)
    throttle = make_throttle(backend, name=f"test-spin-{share}")
    worker = SpinWorker(on_spawn=throttle.attach)
    try:
        throttle.set_share(share)
        worker.start(round(60 * speed), job_id=1)  # a minute of full-speed work: outlasts the windows
        assert not readable(worker.fileno(), 0.5)  # let the throttle settle; readable only if the job ended
        assert_share_held(worker.pid, throttle, share, what=f"{backend} at share {share}")
        assert not readable(worker.fileno(), 0), "the job ended: the window measured nothing"
    finally:
        worker.close()
        throttle.close()
