"""The guardian of a puller's command jobs: what its pipe's lines list is killed when the pipe ends, nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import psutil

import puller.guardian as guardian_module
from puller.guardian import Guardian, serve


def sleeper() -> subprocess.Popen:
    """A process in a group (and session) of its own, as a command job runs."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)


def test_serve_kills_the_listed_groups_at_the_pipe_end_and_ignores_garbage() -> None:
    listed, released = sleeper(), sleeper()
    try:
        r, w = os.pipe()
        done = threading.Event()
        thread = threading.Thread(target=lambda: (serve(r), done.set()), daemon=True)
        thread.start()
        lines = (b"+%d\n-%d\n+%d\n" % (released.pid, released.pid, listed.pid)
                 + b"+\n+x12\n*5\n+1\n+0\n-\n" + b"9" * 100 + b"\n+-3\n")
        for i in range(0, len(lines), 7):  # in pieces, as a pipe may deliver them
            os.write(w, lines[i:i + 7])
        assert not done.wait(0.2), "the guardian ended before its pipe did"
        assert listed.poll() is None and released.poll() is None
        os.close(w)
        assert done.wait(10), "the guardian did not end with its pipe"
        assert listed.wait(10) == -9
        assert released.poll() is None, "a released group was killed"
        os.close(r)
    finally:
        for p in (listed, released):
            p.kill()
            p.wait()


def test_the_guardian_process_ends_on_close_killing_only_what_is_still_listed() -> None:
    job, other = sleeper(), sleeper()
    guardian = Guardian()
    try:
        process = psutil.Process(guardian.pid)
        for _ in range(1000):  # a group listed and released many times over (as a slot's jobs come and go)
            guardian.watch(other.pid)
            guardian.release(other.pid)
        guardian.watch(job.pid)
        guardian.close()  # reaps it
        assert not process.is_running()
        assert job.wait(10) == -9
        assert other.poll() is None, "a released group was killed"
    finally:
        guardian.close()
        for p in (job, other):
            p.kill()
            p.wait()


def kill_and_await_zombie(pid: int) -> None:
    """SIGKILL the guardian process ``pid`` and wait until it is dead (a zombie: only its Guardian may reap it)."""
    process = psutil.Process(pid)
    os.kill(pid, 9)
    deadline = time.monotonic() + 10
    while process.status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "SIGKILL did not end the guardian"
        time.sleep(0.01)


def test_a_guardian_killed_on_its_own_is_reaped_and_another_guards_the_live_groups(caplog) -> None:
    """Killed behind the puller's back, the guardian is noticed at the next line, reaped, and started again
    with the groups still live: the one watched before the kill too, which the new guardian never heard of."""
    before, after, released = sleeper(), sleeper(), sleeper()
    guardian = Guardian()
    try:
        guardian.watch(before.pid)
        guardian.watch(released.pid)
        first = guardian.pid
        assert first is not None
        kill_and_await_zombie(first)
        guardian.release(released.pid)  # the write that finds it dead
        second = guardian.pid
        assert second is not None and second != first, "no guardian was started in place of the dead one"
        assert not psutil.pid_exists(first), "the dead guardian was not reaped"
        assert "guardian of command jobs: it is gone" in caplog.text and "starting another (1 of" in caplog.text
        guardian.watch(after.pid)
        guardian.close()  # the pipe ends, as at the puller's death
        assert not psutil.pid_exists(second)
        assert before.wait(10) == -9, "a group watched before the restart was forgotten"
        assert after.wait(10) == -9
        assert released.poll() is None, "a group released at the restart was killed"
    finally:
        guardian.close()
        for p in (before, after, released):
            p.kill()
            p.wait()


def test_a_guardian_that_keeps_dying_is_not_started_for_ever(caplog, monkeypatch) -> None:
    monkeypatch.setattr(guardian_module, "MAX_RESTARTS", 1)
    guardian = Guardian()
    for restarts in (1, 1):
        pid = guardian.pid
        assert pid is not None
        kill_and_await_zombie(pid)
        guardian.watch(2**22 + 1)  # (never a real group: pids stay below 2**22 on Linux)
        assert guardian.restarts == restarts
        assert not psutil.pid_exists(pid), "the dead guardian was not reaped"
        if guardian.pid is None:
            break
    assert guardian.pid is None, "a guardian was started past MAX_RESTARTS"
    assert "a puller killed now would leave its jobs" in caplog.text
    guardian.watch(2**22 + 2)  # no guardian: the puller goes on
    guardian.close()  # idempotent
    guardian.close()


def test_a_guardian_that_could_not_be_started_is_tried_again_at_the_next_job(caplog, monkeypatch) -> None:
    """No process could be made when the puller began (a user at their process limit, for a moment): the next job
    watched starts a guardian, which is told of it and kills it when the pipe ends."""
    real_popen = subprocess.Popen
    refusals = [OSError(11, "Resource temporarily unavailable")]

    def popen(*args, **kwargs):
        if refusals:
            raise refusals.pop()
        return real_popen(*args, **kwargs)

    job = sleeper()
    monkeypatch.setattr(guardian_module.subprocess, "Popen", popen)  # (the subprocess module itself)
    guardian = Guardian()
    try:
        assert guardian.pid is None and "cannot start a guardian" in caplog.text
        guardian.watch(job.pid)
        assert guardian.pid is not None, "no guardian was tried again"
        assert guardian.restarts == 1 and "it could not be started; starting another (1 of" in caplog.text
        guardian.close()
        assert job.wait(10) == -9, "the job watched when the guardian was started again was not guarded"
    finally:
        guardian.close()
        job.kill()
        job.wait()
