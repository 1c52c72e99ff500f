"""The cgroup v2 backend: cpu.max in a child cgroup, measured by its cpu.stat."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from adjuster.throttle.base import BackendUnavailable, Unavailable
from adjuster.throttle.cgroup import CFS_PERIOD_US, MIN_QUOTA_US, CgroupThrottle
from adjuster.throttle.cgroupfs import list_mounts, own_dir, probe_mkdir, proc_cgroups, v1_mount, words, write


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

    def _remember_home(self, pid: int) -> None:
        rel = proc_cgroups(pid).get("")
        if rel is not None:
            home = self._mount / rel.lstrip("/")
            if home not in self.paths:
                self._cg.home_of[pid] = home

    def _apply_share(self, share: float) -> None:
        quota = "max" if share >= 1.0 else str(max(MIN_QUOTA_US, round(share * CFS_PERIOD_US)))
        write(self._dir / "cpu.max", f"{quota} {CFS_PERIOD_US}")

    def _cpu_seconds(self) -> float:
        for line in (self._dir / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        raise OSError(errno.EIO, f"no usage_usec in {self._dir / 'cpu.stat'}")
