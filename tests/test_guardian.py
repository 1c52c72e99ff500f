"""The guardian of a puller's command jobs: what its pipe's lines list is killed when the pipe ends, nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import psutil

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


def test_a_guardian_killed_on_its_own_is_reaped_and_the_puller_goes_on(caplog) -> None:
    guardian = Guardian()
    pid = guardian.pid
    assert pid is not None
    process = psutil.Process(pid)
    os.kill(pid, 9)
    deadline = time.monotonic() + 10
    while process.status() != psutil.STATUS_ZOMBIE:  # dead, not reaped: the Guardian must reap it
        assert time.monotonic() < deadline, "SIGKILL did not end the guardian"
        time.sleep(0.01)
    guardian.watch(2**22 + 1)  # (never a real group: pids stay below 2**22 on Linux)
    assert guardian.pid is None, "a write to a dead guardian went unnoticed"
    assert "guardian of command jobs is gone" in caplog.text
    assert not psutil.pid_exists(pid), "the dead guardian was not reaped"
    guardian.close()  # idempotent
