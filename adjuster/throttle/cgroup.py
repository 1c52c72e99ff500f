"""What the two cgroup backends share: the child cgroups one throttle creates, fills, empties and removes."""

from __future__ import annotations

import abc
import errno
import logging
import time
import weakref
from pathlib import Path

import psutil

from adjuster.throttle.base import BackendUnavailable, Throttle
from adjuster.throttle.cgroupfs import new_cgroup, read_pids, write
from adjuster.throttle.suspend import StoppedSet

log = logging.getLogger(__name__)

# CFS bandwidth control (Documentation/scheduler/sched-bwc.rst): a group may run `quota` us of CPU per `period` us,
# summed over all its threads and CPUs, so quota = share * period caps the group at `share` of ONE CPU.
# 20 ms, not the kernel's default 100 ms: a throttled task can burn a whole period's quota in one burst,
# so a job of a few tenths of a second measured against a 100 ms period gets well over its share (seen:
# 0.6 for 0.5); at 20 ms the burst is 10 ms. Testbed jobs last 0.1-1 s.
CFS_PERIOD_US = 20_000
MIN_QUOTA_US = 1_000  # the kernel rejects quotas below 1 ms (min_cfs_quota_period): shares below 0.05 round up
# Share 0 is therefore no quota: the smallest one still runs the job 1 ms in every 20 ms period (0.05 of a CPU;
# 0.001 even at the longest period, 1 s).  It suspends instead: SIGSTOP (suspend.py), or cgroup v2's freezer.


class _CgroupSet:
    """The cgroup directories one throttle created, where their processes go back to, and the processes it
    stopped for share 0.  Closing it (the finalizer's job too) resumes those, thaws and unlimits the
    directories, moves every remaining process out and removes the directories."""

    def __init__(self) -> None:
        self.homes: dict[Path, list[Path]] = {}  # created cgroup -> where its leftovers go, in order of preference
        self.home_of: dict[int, Path] = {}  # cgroup v2: each attached process's original cgroup
        self.stopped = StoppedSet()  # share 0 by SIGSTOP
        self.closed = False

    def evict(self, pid: int, child: Path) -> None:
        """Move ``pid`` out of ``child`` (into the first home that accepts it)."""
        own = self.home_of.get(pid)
        homes = [own, *self.homes[child]] if own is not None else self.homes[child]
        errors = []
        for home in homes:
            if home == child or not home.is_dir():
                continue
            try:
                write(home / "cgroup.procs", str(pid))
                return
            except ProcessLookupError:
                return
            except OSError as e:
                errors.append(str(e))
        log.warning("could not move process %d out of %s: %s", pid, child, "; ".join(errors) or "no home cgroup")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.stopped.resume()
        for child in reversed(list(self.homes)):
            self._remove(child)

    def _remove(self, child: Path) -> None:
        # Lift the limit first: a task moved out while its group is throttled can stay unscheduled
        # (seen here for 0.3-0.6 s and more) until the kernel unthrottles that group, and removing the
        # group may leave nothing to do it. Lifting the limit unthrottles the group's queues at once.
        # Thawed too (cgroup v2's freezer, share 0): moving a task out would thaw it, but not one forked meanwhile.
        for knob, unlimited in (("cpu.cfs_quota_us", "-1"), ("cpu.max", "max"), ("cgroup.freeze", "0")):
            try:
                write(child / knob, unlimited)
            except OSError:
                pass  # not this hierarchy's knob, or already gone
        deadline = time.monotonic() + 2.0
        while True:
            for pid in read_pids(child / "cgroup.procs"):
                self.evict(pid, child)
            try:
                child.rmdir()
                log.debug("removed cgroup %s", child)
                return
            except FileNotFoundError:
                return
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() > deadline:
                    log.error("could not remove cgroup %s: %s", child, e.strerror)
                    return
                time.sleep(0.01)  # a process forked while we moved its parent; go round again


class CgroupThrottle(Throttle):
    """What the two cgroup backends share: a set of child cgroups that processes are written into.

    A positive share is the backend's quota (``_set_quota``); share 0 suspends with SIGSTOP every process of
    the cgroup, looking again until none is left running (``suspend.StoppedSet``), unless the backend has a
    freezer (``_suspend``/``_resume``).
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._cg = _CgroupSet()
        self._finalizer = weakref.finalize(self, self._cg.close)

    @property
    def paths(self) -> tuple[Path, ...]:
        """The cgroup directories this throttle created (gone after close())."""
        return tuple(self._cg.homes)

    def _create(self, parent: Path, *fallbacks: Path) -> Path:
        path = new_cgroup(parent, self.name)
        self._cg.homes[path] = [parent, *fallbacks]
        log.debug("created cgroup %s", path)
        return path

    def _fail(self, exc: OSError) -> BackendUnavailable:
        self.close()
        return BackendUnavailable(self.backend, str(exc))

    def _remember_home(self, pid: int) -> None:
        """Hook: note where ``pid`` came from before it is moved (cgroup v2)."""

    @abc.abstractmethod
    def _set_quota(self, share: float) -> None:
        """Cap the cgroup at ``share`` > 0 of one CPU (1 lifts the cap)."""

    def _apply_share(self, share: float) -> None:
        if share == 0.0:
            self._suspend()
            return
        self._set_quota(share)  # first, so that what resumes runs at its new share at once
        self._resume()

    def _members(self) -> list[int]:
        return read_pids(self.paths[0] / "cgroup.procs")

    def _suspend(self) -> None:
        """Stop every process in the cgroup (again: also those attached or forked since)."""
        self._cg.stopped.stop_all(self._members)

    def _resume(self) -> None:
        self._cg.stopped.resume()

    def attach(self, pid: int) -> None:
        root = self._check_pid(pid)
        self._require_open()
        self._remember_home(pid)
        for path in self.paths:
            try:
                write(path / "cgroup.procs", str(pid))
            except ProcessLookupError:
                raise ProcessLookupError(f"process {pid} exited before it could be attached") from None
        # Children forked from now on inherit the cgroup; move the ones that already exist (twice round, for
        # any forked by a descendant while we moved it).
        for _ in range(3):
            inside = set(read_pids(self.paths[0] / "cgroup.procs"))
            try:
                outside = [c.pid for c in root.children(recursive=True) if c.pid not in inside]
            except psutil.NoSuchProcess:
                break
            if not outside:
                break
            for child in outside:
                self._remember_home(child)
                for path in self.paths:
                    try:
                        write(path / "cgroup.procs", str(child))
                    except ProcessLookupError:
                        break
        if self._share == 0.0:
            self._suspend()  # it joins the suspended ones now
        log.debug("%s throttle %s: attached %d", self.backend, self.name, pid)

    def detach(self, pid: int) -> None:
        self._require_open()
        try:
            pids = {pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))}
        except psutil.NoSuchProcess:
            pids = {pid}
        for path in self.paths:
            for member in set(read_pids(path / "cgroup.procs")) & pids:
                self._cg.evict(member, path)  # (out of a frozen cgroup v2: thawed by the move)
        self._cg.stopped.resume(pids)
        for member in pids:
            self._cg.home_of.pop(member, None)
        log.debug("%s throttle %s: detached %d", self.backend, self.name, pid)
