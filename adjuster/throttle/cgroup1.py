"""The cgroup v1 backend: CFS bandwidth control in the cpu hierarchy, measured by cpuacct (or psutil without it)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import psutil

from adjuster.throttle.accounting import CpuAccountant
from adjuster.throttle.base import BackendUnavailable, Unavailable
from adjuster.throttle.cgroup import CFS_PERIOD_US, MIN_QUOTA_US, CgroupThrottle
from adjuster.throttle.cgroupfs import own_dir, probe_mkdir, read_pids, v1_mount, write

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Cg1Layout:
    cpu_parent: Path
    acct_parent: Path | None  # None: cpuacct is not mounted; the same as cpu_parent when co-mounted


def cgroup1_layout(probe: bool) -> _Cg1Layout:
    mount = v1_mount("cpu")
    if mount is None:
        raise Unavailable("no cgroup v1 hierarchy with the cpu controller is mounted (see /proc/mounts)")
    parent = own_dir(mount, "cpu")
    if not (parent / "cpu.cfs_quota_us").exists():
        raise Unavailable(f"{parent} has no cpu.cfs_quota_us (kernel without CONFIG_CFS_BANDWIDTH?)")
    if not os.access(parent, os.W_OK):
        raise Unavailable(f"{parent} is not writable by this user (uid {os.getuid()})")
    acct_mount = v1_mount("cpuacct")
    acct_parent = None if acct_mount is None else own_dir(acct_mount, "cpuacct")
    if probe:
        probe_mkdir(parent, "cpu.cfs_quota_us")
        if acct_parent is not None and acct_parent != parent:
            probe_mkdir(acct_parent, "cpuacct.usage")
    return _Cg1Layout(parent, acct_parent)


class Cgroup1Throttle(CgroupThrottle):
    """cgroup v1: a child of this process's cgroup in the cpu hierarchy, capped by CFS bandwidth control.

    The cgroup is ``mgst-<name>-<our pid>-<n>`` with ``cpu.cfs_period_us`` = CFS_PERIOD_US and ``cpu.cfs_quota_us`` =
    share * period (-1 when share is 1; at least 1000).  When cpuacct is mounted as its own hierarchy a cgroup of
    the same name is made there too, and processes are written into both.

    ``achieved()`` counts ``cpuacct.usage``: the CPU time (user + system) of every task while it was inside the
    cgroup, including descendants that have exited.  Without cpuacct it falls back to psutil (see DutyThrottle).
    """

    backend = "cgroup1"

    def __init__(self, name: str = "mgst") -> None:
        try:
            layout = cgroup1_layout(probe=False)
        except Unavailable as e:
            raise BackendUnavailable(self.backend, str(e)) from None
        super().__init__(name)
        self._acct_dir: Path | None = None
        self._acct: CpuAccountant | None = None
        try:
            self._cpu_dir = self._create(layout.cpu_parent)
            write(self._cpu_dir / "cpu.cfs_period_us", str(CFS_PERIOD_US))
            write(self._cpu_dir / "cpu.cfs_quota_us", "-1")
            if layout.acct_parent == layout.cpu_parent:
                self._acct_dir = self._cpu_dir  # cpu,cpuacct co-mounted
            elif layout.acct_parent is not None:
                self._acct_dir = self._create(layout.acct_parent)
        except OSError as e:
            raise self._fail(e) from e
        if self._acct_dir is None:
            log.debug("cgroup1: cpuacct is not mounted; measuring with psutil")
            self._acct = CpuAccountant()

    def _set_quota(self, share: float) -> None:
        quota = -1 if share >= 1.0 else max(MIN_QUOTA_US, round(share * CFS_PERIOD_US))
        write(self._cpu_dir / "cpu.cfs_quota_us", str(quota))

    def _cpu_seconds(self) -> float:
        if self._acct_dir is not None:
            return int((self._acct_dir / "cpuacct.usage").read_text()) / 1e9
        assert self._acct is not None
        for pid in read_pids(self._cpu_dir / "cgroup.procs"):
            try:
                self._acct.track(psutil.Process(pid), since_birth=True)
            except psutil.NoSuchProcess:
                pass
        self._acct.sample()
        return self._acct.total()
