"""One mapper at a time per run folder: an exclusive lock on a file beside the journal, held while it writes it."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from mgst.testbed.store import StoreError

LOCK_FILE = ".mapper.lock"  # in the run folder; its lock (not the file) says a mapper is writing the run


class RunBusy(StoreError):
    """Another process holds the run folder's lock: a mapper is writing its journal."""


def lock_run(folder: Path) -> int:
    """Take ``folder``'s lock for this process (released when the returned descriptor is closed, or the process
    ends, however it ends); RunBusy, naming the holder's pid, if a mapper holds it. Two mappers writing one
    journal (a --resume of a run whose mapper still runs) would each add the other's jobs again. The holder's pid
    is noted in the file by :func:`note_holder`, once it goes on to write the run (a resume of a finished run
    writes nothing)."""
    path = folder / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _pid_in(fd)
        os.close(fd)
        raise RunBusy(f"{folder}: a mapper{f' (pid {holder})' if holder else ''} is writing this run: wait for it "
                      "to end, or stop it, before resuming it") from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def note_holder(fd: int) -> None:
    """Write this process's pid in the lock file of ``fd`` (lock_run's): a second mapper's refusal names it."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def run_locked(folder: Path) -> bool | None:
    """Whether a mapper holds ``folder``'s lock now (None: the folder has no lock file, a run of before locks)."""
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # (releases the shared lock, if it was taken)
    return False


def _pid_in(fd: int) -> int | None:
    with contextlib.suppress(OSError, ValueError):
        return int(os.pread(fd, 32, 0).decode("ascii").strip() or 0) or None
    return None


__all__ = ["LOCK_FILE", "RunBusy", "lock_run", "note_holder", "run_locked"]
