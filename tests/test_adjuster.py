"""adjuster.throttle on real processes: CPU-burning children capped by every backend that works here."""

from __future__ import annotations

import gc
import math
import os
import signal
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from adjuster.throttle import (
    BACKENDS,
    BackendUnavailable,
    DutyThrottle,
    Throttle,
    available_backends,
    backend_problems,
    make_throttle,
)

BURN = "while True: pass"
# The child waits for a line, then forks a burning grandchild, prints its pid and waits for it.
FORK_ON_GO = textwrap.dedent(
    """
    import subprocess, sys
    sys.stdin.readline()
    g = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    print(g.pid, flush=True)
    g.wait()
    """
)
TOLERANCE = 0.05  # absolute, in shares of one CPU
WINDOW = 0.6  # s: six duty periods, so every window holds whole cycles; psutil's 10 ms ticks are 0.017 of it
SETTLE = 0.3  # s after a share change before measuring
TEST_TIME_LIMIT = 25  # s: any single test that runs longer fails (and its children are still killed)

AVAILABLE = available_backends()


# --------------------------------------------------------------------------------------------------------------
# Fixtures: every child is killed and reaped, every throttle closed, every test bounded in time


@pytest.fixture(autouse=True)
def time_limit() -> Iterator[None]:
    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"test ran longer than {TEST_TIME_LIMIT} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(TEST_TIME_LIMIT)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def spawn() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start children; at teardown resume, kill and reap them and every descendant they left."""
    children: list[subprocess.Popen[str]] = []

    def start(args: list[str], **kwargs: object) -> subprocess.Popen[str]:
        proc = subprocess.Popen(args, text=True, start_new_session=True, **kwargs)  # type: ignore[call-overload]
        children.append(proc)
        return proc

    yield start
    for proc in children:
        kill_tree(proc)


def kill_tree(proc: subprocess.Popen[str]) -> None:
    try:
        descendants = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        descendants = []
    # Descendants first, so that their parent (our child, resumed) reaps them rather than leaving orphans;
    # SIGKILL works on stopped processes too.
    for group in (descendants, [proc]):
        for p in group:
            for sig in (signal.SIGCONT, signal.SIGKILL):
                try:
                    os.kill(p.pid, sig)
                except ProcessLookupError:
                    pass
        if group is descendants:
            psutil.wait_procs(descendants, timeout=1)
    proc.wait(timeout=5)
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            stream.close()


@pytest.fixture
def new_throttle(spawn: object) -> Iterator[Callable[[str], Throttle]]:
    """make_throttle(backend), skipped with the reason when the backend is unavailable; closed at teardown
    (before the children are killed: this fixture depends on ``spawn``)."""
    made: list[Throttle] = []

    def make(backend: str) -> Throttle:
        try:
            throttle = make_throttle(backend, name="test")
        except BackendUnavailable as e:
            pytest.skip(str(e))
        made.append(throttle)
        return throttle

    yield make
    for throttle in made:
        throttle.close()


def cpu_seconds(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


def measure(throttle: Throttle, proc: psutil.Process, windows: int) -> tuple[float, float]:
    """Medians over short windows of (throttle.achieved(), psutil's own share for ``proc``)."""
    achieved, independent = [], []
    for _ in range(windows):
        c0 = cpu_seconds(proc)
        w0 = time.monotonic()
        throttle.reset_measure()
        time.sleep(WINDOW)
        achieved.append(throttle.achieved())
        independent.append((cpu_seconds(proc) - c0) / (time.monotonic() - w0))
    return statistics.median(achieved), statistics.median(independent)


def is_stopped(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except psutil.NoSuchProcess:
        return False


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.002)
    return condition()


def never_stopped(pid: int, during: float = 0.3) -> bool:
    deadline = time.monotonic() + during
    while time.monotonic() < deadline:
        if is_stopped(pid):
            return False
        time.sleep(0.005)
    return True


# --------------------------------------------------------------------------------------------------------------
# Which backends work


def test_backends_expected_here_are_available() -> None:
    problems = backend_problems()
    assert list(problems) == list(BACKENDS)
    assert AVAILABLE == [b for b in BACKENDS if problems[b] is None]
    assert "duty" in AVAILABLE, problems["duty"]
    cpu_v1 = Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us")
    if os.geteuid() == 0 and cpu_v1.exists():  # the lab machine: a writable cgroup v1 cpu hierarchy
        assert "cgroup1" in AVAILABLE, problems["cgroup1"]


def test_auto_picks_the_best_available_backend() -> None:
    with make_throttle() as throttle:
        assert throttle.backend == AVAILABLE[0]


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b not in AVAILABLE] or ["none"])
def test_unavailable_backend_says_which_and_why(backend: str) -> None:
    if backend == "none":
        pytest.skip("every backend is available here")
    with pytest.raises(ValueError, match=backend) as info:
        make_throttle(backend)
    assert isinstance(info.value, BackendUnavailable)
    assert info.value.reason and info.value.reason in str(info.value)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown throttle backend 'cgroup3'"):
        make_throttle("cgroup3")
    with pytest.raises(ValueError, match="name"):
        make_throttle("duty", name="../escape")
    with DutyThrottle() as throttle:
        for share in (0, -0.5, 1.01, math.nan, "half"):
            with pytest.raises(ValueError, match="share"):
                throttle.set_share(share)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="calling process"):
            throttle.attach(os.getpid())
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        with pytest.raises(ProcessLookupError):
            throttle.attach(gone.pid)
    with pytest.raises(RuntimeError, match="closed"):
        throttle.set_share(0.5)


# --------------------------------------------------------------------------------------------------------------
# The share is imposed, and measured right


@pytest.mark.parametrize("backend", BACKENDS)
def test_share_is_imposed_and_measured(backend: str, spawn, new_throttle) -> None:
    throttle = new_throttle(backend)
    child = spawn([sys.executable, "-c", BURN])
    proc = psutil.Process(child.pid)
    throttle.attach(child.pid)
    for share in (0.5, 0.25):
        throttle.set_share(share)
        time.sleep(SETTLE)
        achieved, independent = measure(throttle, proc, windows=5)
        print(f"\n{backend}: target {share:.2f}  achieved {achieved:.3f}  psutil {independent:.3f}")
        assert achieved == pytest.approx(share, abs=TOLERANCE), f"{backend} achieved() at share {share}"
        assert independent == pytest.approx(share, abs=TOLERANCE), f"{backend} psutil at share {share}"
    throttle.set_share(1.0)
    time.sleep(0.2)
    achieved, independent = measure(throttle, proc, windows=3)
    print(f"{backend}: target 1.00  achieved {achieved:.3f}  psutil {independent:.3f}")
    # Lifted: far above the 0.5 + TOLERANCE a half share allows. Not 0.9: a neighbour on this shared
    # 2-core VM took 10 % of the CPU from the unthrottled child once (0.896), with nothing throttling it.
    assert achieved > 0.8 and independent > 0.8


@pytest.mark.parametrize("fork", ["after attach", "before attach"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_grandchild_is_throttled(backend: str, fork: str, spawn, new_throttle) -> None:
    throttle = new_throttle(backend)
    child = spawn([sys.executable, "-c", FORK_ON_GO], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    if fork == "after attach":
        throttle.attach(child.pid)
        throttle.set_share(0.5)
    child.stdin.write("go\n")
    child.stdin.flush()
    grandchild = psutil.Process(int(child.stdout.readline()))
    assert grandchild.ppid() == child.pid
    if fork == "before attach":
        throttle.attach(child.pid)
        throttle.set_share(0.5)
    time.sleep(SETTLE)
    achieved, independent = measure(throttle, grandchild, windows=3)
    print(f"\n{backend}, grandchild forked {fork}: target 0.50  achieved {achieved:.3f}  psutil {independent:.3f}")
    assert achieved == pytest.approx(0.5, abs=TOLERANCE)
    assert independent == pytest.approx(0.5, abs=TOLERANCE)


@pytest.mark.parametrize("backend", BACKENDS)
def test_achieved_counts_descendants_that_exited(backend: str, spawn, new_throttle) -> None:
    throttle = new_throttle(backend)
    script = FORK_ON_GO.replace("while True: pass", "import time\\nwhile time.process_time() < 0.4: pass")
    script += "print('done', flush=True)\nsys.stdin.readline()\n"
    child = spawn([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    throttle.attach(child.pid)
    time.sleep(0.2)  # let the child start up outside the window
    throttle.reset_measure()
    w0 = time.monotonic()
    child.stdin.write("go\n")
    child.stdin.flush()
    grandchild = int(child.stdout.readline())
    assert child.stdout.readline().strip() == "done"  # the grandchild burnt 0.4 s of CPU, exited, was reaped
    assert not psutil.pid_exists(grandchild) or psutil.Process(grandchild).ppid() != child.pid
    used = throttle.achieved() * (time.monotonic() - w0)
    assert 0.38 <= used <= 0.4 + 0.3, f"{backend} counted {used:.3f} CPU s"


# --------------------------------------------------------------------------------------------------------------
# Nothing is left behind


@pytest.mark.parametrize("backend", BACKENDS)
def test_close_releases_everything(backend: str, spawn, new_throttle) -> None:
    throttle = new_throttle(backend)
    child = spawn([sys.executable, "-c", BURN])
    throttle.attach(child.pid)
    throttle.set_share(0.2)
    time.sleep(0.35)
    paths = getattr(throttle, "paths", ())
    assert all(p.is_dir() for p in paths)
    throttle.close()
    throttle.close()  # twice is fine
    assert never_stopped(child.pid)
    assert not [p for p in paths if p.exists()], "cgroup directories left behind"
    if paths:  # back in the cgroup the test runs in
        ours = Path("/proc/self/cgroup").read_text()
        theirs = Path(f"/proc/{child.pid}/cgroup").read_text()
        assert theirs == ours
    proc = psutil.Process(child.pid)
    c0 = cpu_seconds(proc)
    time.sleep(0.3)
    assert cpu_seconds(proc) - c0 > 0.15, "no longer throttled after close()"
    with pytest.raises(RuntimeError, match="closed"):
        throttle.set_share(0.5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_process_that_exits_is_dropped(backend: str, spawn, new_throttle) -> None:
    throttle = new_throttle(backend)
    child = spawn([sys.executable, "-c", BURN])
    throttle.attach(child.pid)
    throttle.set_share(0.5)
    time.sleep(0.3)
    child.kill()
    child.wait(timeout=5)
    time.sleep(0.25)  # a few duty cycles with the process gone
    assert 0.0 <= throttle.achieved() <= 1.0
    throttle.detach(child.pid)  # a dead process is fine to detach
    throttle.set_share(0.3)
    throttle.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_detach_releases_the_process(backend: str, spawn, new_throttle) -> None:
    throttle = new_throttle(backend)
    kept, released = spawn([sys.executable, "-c", BURN]), spawn([sys.executable, "-c", BURN])
    throttle.attach(kept.pid)
    throttle.attach(released.pid)
    throttle.set_share(0.1)
    time.sleep(0.3)
    if backend == "duty":
        assert wait_until(lambda: is_stopped(released.pid), 1.0)
    throttle.detach(released.pid)
    assert never_stopped(released.pid, during=0.2)
    proc = psutil.Process(released.pid)
    c0 = cpu_seconds(proc)
    time.sleep(0.3)
    assert cpu_seconds(proc) - c0 > 0.15, "still throttled after detach()"
    for path in getattr(throttle, "paths", ()):
        assert released.pid not in {int(w) for w in (path / "cgroup.procs").read_text().split()}


def test_duty_close_in_a_stop_phase_resumes(spawn) -> None:
    child = spawn([sys.executable, "-c", BURN])
    throttle = DutyThrottle(name="test")
    try:
        throttle.attach(child.pid)
        throttle.set_share(0.05)  # stopped 95 % of the time
        assert wait_until(lambda: is_stopped(child.pid), 2.0), "the duty cycle never stopped the child"
    finally:
        throttle.close()
    assert not is_stopped(child.pid)  # at once: close() resumed before returning
    assert never_stopped(child.pid)


def test_duty_resumes_when_the_throttle_is_collected(spawn) -> None:
    child = spawn([sys.executable, "-c", BURN])
    throttle: DutyThrottle | None = DutyThrottle(name="test")
    try:
        assert throttle is not None
        throttle.attach(child.pid)
        throttle.set_share(0.05)
        assert wait_until(lambda: is_stopped(child.pid), 2.0)
        throttle = None  # dropped without close(): the finalizer resumes the child
        gc.collect()
        assert never_stopped(child.pid)
    finally:
        if throttle is not None:
            throttle.close()


def test_duty_resumes_when_the_controller_crashes(spawn) -> None:
    child = spawn([sys.executable, "-c", BURN])
    controller = textwrap.dedent(
        f"""
        import time, psutil
        from adjuster.throttle import DutyThrottle
        THROTTLE = DutyThrottle()
        THROTTLE.attach({child.pid})
        THROTTLE.set_share(0.05)
        deadline = time.monotonic() + 5
        while psutil.Process({child.pid}).status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
            time.sleep(0.002)
        print(psutil.Process({child.pid}).status(), flush=True)
        raise RuntimeError("controller crashed")
        """
    )
    run = subprocess.run([sys.executable, "-c", controller], capture_output=True, text=True, timeout=15)
    assert run.returncode != 0 and "controller crashed" in run.stderr
    assert run.stdout.strip() == psutil.STATUS_STOPPED  # it was stopped when the controller died
    assert never_stopped(child.pid)
