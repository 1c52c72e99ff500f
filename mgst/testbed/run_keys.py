"""The throw-away key folder of a run on this machine: named with the run's pid, removed at the run's end, and
those of runs that died (SIGKILL leaves no end to remove them) removed by the next run."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil

from mgst.wire import security

log = logging.getLogger(__name__)

# In the temporary folder: mgst-keys-PID-RANDOM, PID the run's process (mkdtemp adds the random part).
PREFIX = "mgst-keys-"
_NAME = re.compile(rf"^{re.escape(PREFIX)}(\d{{1,10}})-")


def make_key_folder() -> Path:
    """A new key folder for this process's run (mode 0700, this user's; mkdtemp)."""
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))


@contextlib.contextmanager
def throwaway_keys(names: list[str]) -> Iterator[Path]:
    """A key folder for this run (security.create_keys: the mapper's pair and one per name), made after removing
    the folders of runs that died, and removed when the block ends, however it ends."""
    remove_stale()
    folder = make_key_folder()
    try:
        security.create_keys(folder, names)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def remove_stale(base: Path | None = None) -> list[Path]:
    """Remove the key folders under ``base`` (the temporary folder) of runs whose process is gone; only folders
    of this user's own (never a symlink, never another user's), and never this process's (a run of its own may
    be using one). The folders removed."""
    folder = Path(tempfile.gettempdir()) if base is None else base
    try:
        entries = list(os.scandir(folder))
    except OSError as e:
        log.warning("cannot look for key folders left by runs that died in %s: %s", folder, e.strerror)
        return []
    removed = []
    for entry in entries:
        m = _NAME.match(entry.name)
        if m is None:
            continue
        pid = int(m.group(1))
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or pid == os.getpid() or psutil.pid_exists(pid):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)  # (fd-based on Linux: never follows a symlink inside)
        removed.append(Path(entry.path))
    if removed:
        log.warning("removed %d key folders left by runs that died: %s", len(removed),
                    " ".join(p.name for p in removed))
    return removed
