"""One sweep at a time in a folder: an exclusive lock on a file in it, held while the sweep runs (two at once
would each rewrite sweep.csv with their own rows at the end, and one's would be lost)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from mgst.config import ConfigError

LOCK = ".sweep.lock"  # in the sweep's folder; it holds the pid of the sweep that has it


@contextlib.contextmanager
def one_sweep_at_a_time(out: Path) -> Iterator[None]:
    """Hold the lock of folder ``out`` (made if need be) while the block runs; ConfigError naming --out if another
    sweep holds it. The kernel releases it when the holder ends, however it ends (killed too)."""
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
            raise ConfigError("--out", f"another sweep is running into {out} (pid {holder}): run slices of a sweep "
                                       "one after the other into a folder, or at once into folders of their own"
                              ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)  # (the lock goes with it)
