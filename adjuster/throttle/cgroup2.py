"""The cgroup v2 backend: cpu.max in a child cgroup, measured by its cpu.stat; share 0 by its freezer."""

from __future__ import annotations

import errno
import logging
import os
import time
from pathlib import Path

from adjuster.throttle.base import BackendUnavailable, Unavailable
from adjuster.throttle.cgroup import CFS_PERIOD_US, MIN_QUOTA_US, CgroupThrottle
from adjuster.throttle.cgroupfs import list_mounts, own_dir, probe_mkdir, proc_cgroups, v1_mount, words, write

log = logging.getLogger(__name__)

# How long set_share(0) waits for the kernel to report the cgroup frozen ("frozen 1" in cgroup.events).  Each
# task freezes at its next return to user space: within microseconds when it computes, and when its sleep ends
# when it waits in the kernel (an uninterruptible disk read, say).  Past this the wait ends with a WARNING, and
# the kernel freezes the rest when it can.
FREEZE_WAIT_S = 1.0
_FREEZE_POLL_S = 0.001  # cgroup.events is read this often while waiting (one busy task froze in 0.5 ms here)


def cgroup2_layout(probe: bool) -> tuple[Path, Path]:
    """(mount root, parent cgroup with the cpu controller enabled for its children)."""
    mounts = [m.path for m in list_mounts() if m.fstype == "cgroup2"]
    if not mounts:
        raise Unavailable("no cgroup2 hierarchy is mounted (see /proc/mounts)")
    mount = mounts[0]
    here = own_dir(mount, "")
    for parent in (here, *here.parents):
        if "cpu" in words(parent / "cgroup.subtree_control"):
            break
        if parent == mount:
            raise Unavailable(_cgroup2_why_no_cpu(mount))
    else:  # pragma: no cover - here is always under mount
        raise Unavailable(_cgroup2_why_no_cpu(mount))
    if not os.access(parent, os.W_OK):
        raise Unavailable(f"{parent} is not writable by this user (uid {os.getuid()})")
    if probe:
        probe_mkdir(parent, "cpu.max")
    return mount, parent


def _cgroup2_why_no_cpu(mount: Path) -> str:
    controllers = words(mount / "cgroup.controllers")
    if "cpu" not in controllers:
        v1 = v1_mount("cpu")
        bound = f"; it is bound to the cgroup v1 hierarchy at {v1}" if v1 is not None else ""
        return (
            f"the cpu controller is not available in the cgroup2 hierarchy at {mount} "
            f"(its cgroup.controllers lists: {' '.join(controllers) or 'nothing'}){bound}"
        )
    return (
        f"the cpu controller is not enabled for child cgroups here (cgroup.subtree_control of {mount} lacks "
        f"'cpu'); `echo +cpu > {mount}/cgroup.subtree_control` would change the machine's cgroup setup, "
        "so mgst leaves it to the administrator"
    )


class Cgroup2Throttle(CgroupThrottle):
    """cgroup v2: a child cgroup (under the nearest ancestor of ours that enables the cpu controller for its
    children) with ``cpu.max`` = "<share * period> <period>" (period CFS_PERIOD_US), or "max <period>" when share is 1.

    Processes leave the way they came: back to the cgroup each was in when attached (v2 forbids processes in
    a non-root cgroup that hands controllers down, so "the parent" is not always a valid home).

    ``achieved()`` counts ``usage_usec`` of the cgroup's ``cpu.stat``: the CPU time (user + system) of every task
    while it was inside, including descendants that have exited.

    Share 0 freezes the cgroup (``Freezer``); on a kernel without ``cgroup.freeze`` (before 5.2) it stops its
    processes with SIGSTOP, as cgroup v1 does.
    """

    backend = "cgroup2"

    def __init__(self, name: str = "mgst") -> None:
        try:
            mount, parent = cgroup2_layout(probe=False)
        except Unavailable as e:
            raise BackendUnavailable(self.backend, str(e)) from None
        super().__init__(name)
        self._mount = mount
        try:
            self._dir = self._create(parent, mount)
            write(self._dir / "cpu.max", f"max {CFS_PERIOD_US}")
        except OSError as e:
            raise self._fail(e) from e
        self._freezer = Freezer(self._dir) if Freezer.supported(self._dir) else None

    def _remember_home(self, pid: int) -> None:
        rel = proc_cgroups(pid).get("")
        if rel is not None:
            home = self._mount / rel.lstrip("/")
            if home not in self.paths:
                self._cg.home_of[pid] = home

    def _set_quota(self, share: float) -> None:
        quota = "max" if share >= 1.0 else str(max(MIN_QUOTA_US, round(share * CFS_PERIOD_US)))
        write(self._dir / "cpu.max", f"{quota} {CFS_PERIOD_US}")

    def _suspend(self) -> None:
        if self._freezer is None:
            super()._suspend()
        else:
            self._freezer.freeze()

    def _resume(self) -> None:
        if self._freezer is None:
            super()._resume()
        else:
            self._freezer.thaw()

    def _cpu_seconds(self) -> float:
        for line in (self._dir / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        raise OSError(errno.EIO, f"no usage_usec in {self._dir / 'cpu.stat'}")


class Freezer:
    """The cgroup v2 freezer of one cgroup (``cgroup.freeze``, Linux 5.2+): share 0 without signals.

    Chosen over SIGSTOP where the kernel has it: it freezes the whole cgroup at once, a child forked meanwhile
    included (no chasing of forks); the job cannot see it (no stopped child for its parent, no SIGCONT of its
    own undoes it); and SIGKILL still kills a frozen task, so a cancelled job ends at once.  (cgroup v1's
    freezer is not used: its frozen tasks cannot be killed until thawed, and it is a hierarchy of its own.)
    A process moved into a frozen cgroup freezes; one moved out thaws.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.requested = False  # cgroup.freeze was set to 1 and not back to 0

    @staticmethod
    def supported(path: Path) -> bool:
        return (path / "cgroup.freeze").exists()

    def freeze(self, wait: float = FREEZE_WAIT_S) -> bool:
        """Freeze every task of the cgroup; True once the kernel says they all are (within ``wait`` seconds)."""
        write(self.path / "cgroup.freeze", "1")
        self.requested = True
        deadline = time.monotonic() + wait
        while not self.frozen():
            if time.monotonic() >= deadline:
                log.warning("cgroup %s not frozen after %.1f s (a task waiting in the kernel?)", self.path, wait)
                return False
            time.sleep(_FREEZE_POLL_S)
        return True

    def thaw(self) -> None:
        if self.requested:
            write(self.path / "cgroup.freeze", "0")
            self.requested = False

    def frozen(self) -> bool:
        """The kernel's word: every task of the cgroup is frozen (``frozen 1`` in cgroup.events)."""
        return "frozen 1" in (self.path / "cgroup.events").read_text().splitlines()
