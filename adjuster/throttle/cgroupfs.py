"""The cgroup filesystem: where the hierarchies are mounted, a process's cgroups, and cgroup file reads and writes."""

from __future__ import annotations

import errno
import itertools
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from adjuster.throttle.base import Unavailable

log = logging.getLogger(__name__)

_seq = itertools.count()  # makes cgroup names unique within this process


@dataclass(frozen=True, slots=True)
class _Mount:
    path: Path
    fstype: str
    options: frozenset[str]


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def list_mounts() -> list[_Mount]:
    try:
        text = Path("/proc/mounts").read_text()
    except OSError:
        return []
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4:
            mounts.append(_Mount(Path(_unescape(fields[1])), fields[2], frozenset(fields[3].split(","))))
    return mounts


def proc_cgroups(pid: int | str = "self") -> dict[str, str]:
    """Controller (or "name=...", or "" for the v2 hierarchy) -> cgroup path, from /proc/<pid>/cgroup."""
    paths: dict[str, str] = {}
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return paths
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                paths[controller] = parts[2]
    return paths


def v1_mount(controller: str) -> Path | None:
    for m in list_mounts():
        if m.fstype == "cgroup" and controller in m.options:
            return m.path
    return None


def own_dir(mount: Path, key: str) -> Path:
    """This process's cgroup directory in the hierarchy mounted at ``mount`` (the mount root if not visible)."""
    rel = proc_cgroups().get(key, "/").lstrip("/")
    candidate = mount / rel
    return candidate if rel and candidate.is_dir() else mount


def words(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def write(path: Path, value: str) -> None:
    """One write(2) of ``value``, as cgroup files require; errors say which file."""
    try:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)
    except OSError as e:
        raise type(e)(e.errno, f"writing {value!r} to {path}: {e.strerror}") from e


def read_pids(path: Path) -> list[int]:
    return [int(w) for w in words(path)]


def probe_mkdir(parent: Path, check: str) -> None:
    """Create and remove a child cgroup to prove we may; ``check`` is a file the child must have."""
    probe = parent / f"mgst-probe-{os.getpid()}-{next(_seq)}"
    try:
        probe.mkdir()
    except OSError as e:
        raise Unavailable(f"cannot create a cgroup under {parent}: {e.strerror}") from None
    try:
        if not (probe / check).exists():
            raise Unavailable(f"a child cgroup of {parent} has no {check}")
    finally:
        try:
            probe.rmdir()
        except OSError as e:
            log.warning("could not remove probe cgroup %s: %s", probe, e.strerror)


def new_cgroup(parent: Path, name: str) -> Path:
    for _ in range(1000):
        path = parent / f"mgst-{name}-{os.getpid()}-{next(_seq)}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"no free cgroup name under {parent}")
