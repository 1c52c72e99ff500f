"""adjuster.throttle on real processes: CPU-burning children capped by every backend that works here."""

from __future__ import annotations

import gc
import itertools
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from helpers import (
    assert_held_no_more_than,
    assert_share_held,
    cpu_seconds,
    decided,
    is_suspended,
    share_window,
)

from adjuster.throttle import (
    BACKENDS,
    BackendUnavailable,
    DutyThrottle,
    Throttle,
    available_backends,
    backend_problems,
    make_throttle,
)
from adjuster.throttle.cgroup2 import Freezer
from adjuster.throttle.cgroupfs import list_mounts, new_cgroup, own_dir, read_pids, write

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
SETTLE = 0.3  # s after a share change before measuring
# s: any single test that runs longer fails (and its children are still killed). A share is judged on 3 windows
# of 0.6 s (helpers.assert_share_held), and a test judges up to three, with settling waits between.
TEST_TIME_LIMIT = 45

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


def assert_share(backend: str, target: int, throttle: Throttle, share: float) -> None:
    """``target`` gets ``share`` of a CPU, by the kernel's count and by the throttle's, judged against the CPU it
    could get in the same windows (helpers.share_problems): on an idle machine exactly ``share`` (within
    TOLERANCE); on a busy one, never more, and no less than ``share`` of what contention left it."""
    windows = assert_share_held(target, throttle, share, what=f"{backend} at share {share}", tolerance=TOLERANCE)
    for w in windows:
        print(f"\n{backend}: target {share:.2f}  kernel {w.target:.3f}  achieved() {w.throttle:.3f}  "
              f"waited {w.waited:.3f}  held {w.held:.3f}")


def assert_suspended(backend: str, pids: list[int], throttle: Throttle) -> None:
    """Every one of ``pids`` is stopped or frozen, and runs not a nanosecond over a window (however busy the
    machine: contention cannot make a runnable process get nothing)."""
    assert all(is_suspended(pid) for pid in pids), f"{backend}: not suspended: {pids}"
    for pid in pids:
        window = share_window(pid, throttle)
        assert window.target == 0.0 and window.throttle == pytest.approx(0.0, abs=TOLERANCE), (backend, window)


def assert_runs_free(backend: str, pid: int, control: int) -> None:
    """``pid`` is neither stopped nor frozen, and nothing holds it back over a window more than it holds
    ``control``, a spinner never throttled, measured in the same windows: it runs or waits for a CPU all the
    time but for what the machine takes from every process (steal time, interrupts; load is waiting, not held)."""
    assert never_stopped(pid), f"{backend}: {pid} still suspended"
    assert_held_no_more_than(pid, control, what=f"{backend}: still throttled")


def test_a_majority_verdict_stops_measuring_only_when_the_rest_cannot_change_it() -> None:
    """Every sequence of window verdicts: stopping at the first settled prefix gives the verdict of all windows."""
    for of in (1, 2, 3, 4, 5):
        for verdicts in itertools.product((True, False), repeat=of):  # True: a good window
            good = bad = 0
            for ok in verdicts:
                if decided(good, bad, of):
                    break
                good, bad = good + ok, bad + (not ok)
            assert decided(good, bad, of)
            assert (2 * good > of) == (2 * verdicts.count(False) < of), verdicts


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
        if is_suspended(pid):
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
        for share in (-0.01, -0.5, 1.01, math.nan, "half"):
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
    throttle.attach(child.pid)
    for share in (0.5, 0.25, 1.0):  # 1.0: the cap lifted, the whole CPU
        throttle.set_share(share)
        time.sleep(SETTLE)
        assert_share(backend, child.pid, throttle, share)


@pytest.mark.parametrize("backend", BACKENDS)
def test_share_zero_suspends_and_a_share_resumes(backend: str, spawn, new_throttle) -> None:
    """The issue's sequence 1, 0.5, 0, 1: share 0 suspends at once (set_share returns with the child
    stopped or frozen) and the share after it is met again, within TOLERANCE each."""
    throttle = new_throttle(backend)
    child = spawn([sys.executable, "-c", BURN])
    throttle.attach(child.pid)
    for share in (1.0, 0.5, 0.0, 1.0):
        throttle.set_share(share)
        if share == 0.0:
            assert throttle.suspended and is_suspended(child.pid), f"{backend}: set_share(0) returned, not suspended"
            time.sleep(SETTLE)
            assert_suspended(backend, [child.pid], throttle)
            continue
        assert not is_suspended(child.pid)
        time.sleep(SETTLE)
        assert_share(backend, child.pid, throttle, share)


@pytest.mark.parametrize("backend", BACKENDS)
def test_share_zero_holds_descendants_and_newcomers(backend: str, spawn, new_throttle) -> None:
    """At share 0 a grandchild is suspended with its parent, and a process attached meanwhile joins them at
    once; a partial share after 0 holds them all at it."""
    throttle = new_throttle(backend)
    child = spawn([sys.executable, "-c", FORK_ON_GO], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    throttle.attach(child.pid)
    child.stdin.write("go\n")
    child.stdin.flush()
    grandchild = int(child.stdout.readline())
    throttle.set_share(0.0)
    late = spawn([sys.executable, "-c", BURN])
    throttle.attach(late.pid)
    assert is_suspended(late.pid), f"{backend}: a process attached at share 0 runs"
    time.sleep(SETTLE)
    assert_suspended(backend, [child.pid, grandchild, late.pid], throttle)
    throttle.detach(late.pid)
    assert not is_suspended(late.pid), f"{backend}: detached at share 0, still suspended"
    late.kill()
    throttle.set_share(0.25)
    time.sleep(SETTLE)
    assert_share(backend, grandchild, throttle, 0.25)


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
    assert_share(f"{backend}, grandchild forked {fork}", grandchild.pid, throttle, 0.5)


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


@pytest.mark.parametrize("share", [0.2, 0.0])
@pytest.mark.parametrize("backend", BACKENDS)
def test_close_releases_everything(backend: str, share: float, spawn, new_throttle) -> None:
    throttle = new_throttle(backend)
    child = spawn([sys.executable, "-c", BURN])
    throttle.attach(child.pid)
    throttle.set_share(share)
    time.sleep(0.35)
    paths = getattr(throttle, "paths", ())
    assert all(p.is_dir() for p in paths)
    throttle.close()
    throttle.close()  # twice is fine
    assert not is_suspended(child.pid)  # at once: close() resumed before returning
    assert not [p for p in paths if p.exists()], "cgroup directories left behind"
    if paths:  # back in the cgroup the test runs in
        ours = Path("/proc/self/cgroup").read_text()
        theirs = Path(f"/proc/{child.pid}/cgroup").read_text()
        assert theirs == ours
    with pytest.raises(RuntimeError, match="closed"):
        throttle.set_share(0.5)
    assert_runs_free(backend, child.pid, control=spawn([sys.executable, "-c", BURN]).pid)
    child.kill()
    assert child.wait(timeout=5) == -signal.SIGKILL  # and it is reaped


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
@pytest.mark.parametrize("share", [0.1, 0.0])
def test_detach_releases_the_process(backend: str, share: float, spawn, new_throttle) -> None:
    throttle = new_throttle(backend)
    kept, released = spawn([sys.executable, "-c", BURN]), spawn([sys.executable, "-c", BURN])
    throttle.attach(kept.pid)
    throttle.attach(released.pid)
    throttle.set_share(share)
    time.sleep(0.3)
    if backend == "duty" or share == 0.0:
        assert wait_until(lambda: is_suspended(released.pid), 1.0)
    throttle.detach(released.pid)
    for path in getattr(throttle, "paths", ()):
        assert released.pid not in {int(w) for w in (path / "cgroup.procs").read_text().split()}
    assert throttle.share == share and (share > 0 or is_suspended(kept.pid)), "the one kept is held still"
    kept.kill()  # (it would take its share of the CPU the released one is measured on)
    kept.wait(timeout=5)
    assert_runs_free(backend, released.pid, control=spawn([sys.executable, "-c", BURN]).pid)


def test_duty_close_in_a_stop_phase_resumes(spawn) -> None:
    child = spawn([sys.executable, "-c", BURN])
    throttle = DutyThrottle(name="test")
    try:
        throttle.attach(child.pid)
        throttle.set_share(0.05)  # stopped 95 % of the time
        assert wait_until(lambda: is_suspended(child.pid), 2.0), "the duty cycle never stopped the child"
    finally:
        throttle.close()
    assert not is_suspended(child.pid)  # at once: close() resumed before returning
    assert never_stopped(child.pid)


def test_duty_resumes_when_the_throttle_is_collected(spawn) -> None:
    child = spawn([sys.executable, "-c", BURN])
    throttle: DutyThrottle | None = DutyThrottle(name="test")
    try:
        assert throttle is not None
        throttle.attach(child.pid)
        throttle.set_share(0.05)
        assert wait_until(lambda: is_suspended(child.pid), 2.0)
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


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_controller_that_crashes_at_share_zero_leaves_nothing_suspended(backend: str, spawn) -> None:
    """The puller exiting with a suspended job: its throttles' atexit hook resumes every process."""
    if backend not in AVAILABLE:
        pytest.skip(f"{backend} is unavailable here: {backend_problems()[backend]}")
    child = spawn([sys.executable, "-c", BURN])
    controller = textwrap.dedent(
        f"""
        from adjuster.throttle import make_throttle
        THROTTLE = make_throttle({backend!r}, name="test")
        THROTTLE.attach({child.pid})
        THROTTLE.set_share(0.0)
        print("suspended", *getattr(THROTTLE, "paths", ()), flush=True)
        raise RuntimeError("controller crashed")
        """
    )
    run = subprocess.run([sys.executable, "-c", controller], capture_output=True, text=True, timeout=15)
    assert run.returncode != 0 and "controller crashed" in run.stderr, run.stderr[-2000:]
    said, *paths = run.stdout.split()
    assert said == "suspended"
    assert not is_suspended(child.pid) and never_stopped(child.pid)
    ran = cpu_seconds(child.pid)
    assert wait_until(lambda: cpu_seconds(child.pid) > ran, 5.0), "resumed, yet it does not run"
    assert not [p for p in paths if Path(p).exists()], "cgroup directories left behind"


def test_cgroup2_freezer_suspends_resumes_and_lets_sigkill_through(spawn) -> None:
    """Share 0 of the cgroup2 backend, on any writable cgroup v2 (here also where the backend itself is not
    available, its cpu controller being bound to cgroup v1): frozen tasks run not at all, a process moved in
    freezes and one moved out thaws, thawing resumes them, and SIGKILL ends a frozen task (a cancel)."""
    mounts = [m.path for m in list_mounts() if m.fstype == "cgroup2"]
    if not mounts:
        pytest.skip("no cgroup2 hierarchy is mounted")
    parent = own_dir(mounts[0], "")
    try:
        path = new_cgroup(parent, "test-freezer")
    except OSError as e:
        pytest.skip(f"cannot create a cgroup under {parent}: {e.strerror}")
    freezer = Freezer(path)
    try:
        if not Freezer.supported(path):
            pytest.skip("this kernel has no cgroup.freeze (before Linux 5.2)")
        kept, moved = spawn([sys.executable, "-c", BURN]), spawn([sys.executable, "-c", BURN])
        write(path / "cgroup.procs", str(kept.pid))
        assert freezer.freeze() and is_suspended(kept.pid)
        write(path / "cgroup.procs", str(moved.pid))  # into a frozen cgroup: it freezes
        assert wait_until(freezer.frozen, 1.0) and is_suspended(moved.pid)
        before = {pid: cpu_seconds(pid) for pid in (kept.pid, moved.pid)}
        time.sleep(SETTLE)
        assert {pid: cpu_seconds(pid) for pid in before} == before, "a frozen task ran"
        write(parent / "cgroup.procs", str(moved.pid))  # out of it: it thaws
        assert not is_suspended(moved.pid)
        assert wait_until(lambda: cpu_seconds(moved.pid) > before[moved.pid], 5.0), "moved out, still frozen"
        freezer.thaw()
        assert not is_suspended(kept.pid)
        assert wait_until(lambda: cpu_seconds(kept.pid) > before[kept.pid], 5.0), "thawed, yet it does not run"
        assert freezer.freeze()
        kept.kill()
        assert kept.wait(timeout=5) == -signal.SIGKILL  # killed while frozen, and reaped
    finally:
        freezer.thaw()
        for pid in read_pids(path / "cgroup.procs"):
            write(parent / "cgroup.procs", str(pid))
        path.rmdir()
