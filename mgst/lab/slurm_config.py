"""The `[slurm]` section of a hosts file -> SlurmLab: pullers as Slurm pilot jobs (format in docs/lab.md)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mgst.lab.hosts import (
    DEFAULT_MGST,
    MANAGED_PULLER_OPTIONS,
    OWN_PULLER_OPTIONS,
    HostsFileError,
    check_connect,
    check_keys,
    has_secret_key,
    local_path,
    machine_names,
    words,
)

# A partition or an account: Slurm's names (letters, digits, '_', '-', '.'); never starting with '-'.
_SLURM_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
# sbatch --time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS (Slurm itself judges the value: --test-only).
_TIME = re.compile(r"^[0-9][0-9:-]{0,15}$|^(UNLIMITED|INFINITE)$")
# sbatch options mgst gives itself: extra options may not repeat them.
MANAGED_SBATCH_OPTIONS = ("--job-name", "-J", "--output", "-o", "--error", "-e", "--parsable", "--partition", "-p",
                          "--time", "-t", "--account", "-A", "--array", "-a", "--wrap", "--test-only")
MAX_PILOTS = 4096
MIN_SUBMIT_INTERVAL, MAX_SUBMIT_INTERVAL = 0.0, 3600.0
DEFAULT_SUBMIT_INTERVAL = 1.0
DEFAULT_SHARED_DIR = "mgst-slurm"
_SLURM_KEYS = ("machines", "shared_dir", "partition", "time_limit", "account", "sbatch_args", "mgst", "puller_args",
               "idle_exit", "max_pilots", "submit_interval")


@dataclass(frozen=True, slots=True)
class SlurmLab:
    """A hosts file with a [slurm] section: the mapper, the key folder, and how pilots are submitted."""

    path: Path
    connect: str
    keys: Path
    machines: tuple[str, ...]  # the identities pilots take, one pilot each at a time
    shared_dir: Path  # on a file system the compute nodes share: keys (0600 in 0700 folders), logs, the job record
    partition: str | None
    time_limit: str | None
    account: str | None
    sbatch_args: tuple[str, ...]
    mgst: tuple[str, ...]
    puller_args: tuple[str, ...]
    idle_exit: float | None  # a pilot with no work this long leaves (s); None: it stays until the run is over
    max_pilots: int  # pilots pending or running at once
    submit_interval: float  # seconds between two submissions of the overlay


def parse_slurm(data: Mapping[str, Any], path: Path) -> SlurmLab:
    """Validate a hosts file's [lab] and [slurm] tables (``data``, parsed TOML); HostsFileError naming the key."""
    where = str(path)
    base = path.parent

    def fail(key: str, problem: str) -> HostsFileError:
        return HostsFileError(key, problem, where)

    lab, connect = check_connect(data, fail)
    keys = check_keys(lab, base, fail)
    t = data["slurm"]
    if not isinstance(t, Mapping):
        raise fail("slurm", "must be a table")
    for k in t:
        if k not in _SLURM_KEYS:
            raise fail(f"slurm.{k}", f"unknown key (known: {', '.join(_SLURM_KEYS)})")
    machines = machine_names(t.get("machines"), "slurm.machines", fail)
    for m in machines:
        if not has_secret_key(keys, m):
            raise fail("slurm.machines", f"{keys} has no key pair for {m} (make it with 'mgst keys')")
    shared = t.get("shared_dir", DEFAULT_SHARED_DIR)
    if not isinstance(shared, str) or not shared or not shared.isprintable():
        raise fail("slurm.shared_dir", "must be a folder's path")
    shared_dir = local_path(shared, base)
    if ".." in Path(shared).parts or len(shared_dir.resolve().parts) < 3:  # (made mode 700: not /, /home, /etc)
        raise fail("slurm.shared_dir", f"{shared!r}: name a folder of its own for the pilots (it is made mode 700), "
                                       "two folders deep or more; no '..'")
    if shared_dir.exists() and not shared_dir.is_dir():
        raise fail("slurm.shared_dir", f"{shared_dir} is a file; a folder is expected")
    names = {}
    for k in ("partition", "account"):
        v = t.get(k)
        if v is not None and (not isinstance(v, str) or not _SLURM_NAME.match(v)):
            raise fail(f"slurm.{k}", "a Slurm name takes letters, digits, '_', '.', '-' (at most 64)")
        names[k] = v
    time_limit = t.get("time_limit")
    if time_limit is not None and (not isinstance(time_limit, str) or not _TIME.match(time_limit)):
        raise fail("slurm.time_limit", "give sbatch's --time: minutes, \"HH:MM:SS\" or \"D-HH:MM:SS\"")
    sbatch_args = words(t.get("sbatch_args", []), "slurm.sbatch_args", fail)
    for a in sbatch_args:
        name = a.split("=", 1)[0]
        if not a.startswith("-"):  # sbatch takes its first word that is not an option as the script to run
            raise fail("slurm.sbatch_args", f"{a!r}: give options only, each one word (\"--mem=1G\"): sbatch takes a "
                                            "word that is not an option as the script to run")
        # (sbatch takes a unique prefix of a long option, and short options bundled: -vo FILE is -v -o FILE)
        managed = [o for o in MANAGED_SBATCH_OPTIONS if o.startswith("--") and len(name) > 3 and o.startswith(name)]
        shorts = set(name[1:]) if not name.startswith("--") else set()
        if name in MANAGED_SBATCH_OPTIONS or managed or shorts & set("JoeptAa"):
            said = name if not managed or name == managed[0] else f"{name} (that is {managed[0]})"
            raise fail("slurm.sbatch_args", f"{said} is given by mgst lab itself (or by a key of [slurm])")
    mgst = words(t.get("mgst", list(DEFAULT_MGST)), "slurm.mgst", fail)
    if not mgst or mgst[0].startswith("-"):
        raise fail("slurm.mgst", "give the command that runs mgst on the compute nodes, e.g. \"mgst\"")
    puller_args = words(t.get("puller_args", []), "slurm.puller_args", fail)
    for a in puller_args:
        name = a.split("=", 1)[0]
        managed = [o for o in (*MANAGED_PULLER_OPTIONS, "--idle-exit")
                   if name == o or (len(name) > 2 and o.startswith(name) and name not in OWN_PULLER_OPTIONS)]
        if name.startswith("--") and managed:
            raise fail("slurm.puller_args", f"{name} is given by mgst lab itself (idle_exit is a key of [slurm])")
    idle = t.get("idle_exit")
    if idle is not None and (not isinstance(idle, (int, float)) or isinstance(idle, bool) or not math.isfinite(idle)
                             or not idle > 0):
        raise fail("slurm.idle_exit", "must be a positive number of seconds")
    max_pilots = t.get("max_pilots", len(machines))
    if (not isinstance(max_pilots, int) or isinstance(max_pilots, bool)
            or not 1 <= max_pilots <= min(MAX_PILOTS, len(machines))):
        raise fail("slurm.max_pilots", f"must be a whole number in 1..{min(MAX_PILOTS, len(machines))} (one pilot "
                                       "per machine identity at most)")
    interval = t.get("submit_interval", DEFAULT_SUBMIT_INTERVAL)
    if (not isinstance(interval, (int, float)) or isinstance(interval, bool) or not math.isfinite(interval)
            or not MIN_SUBMIT_INTERVAL <= interval <= MAX_SUBMIT_INTERVAL):
        raise fail("slurm.submit_interval", f"must be {MIN_SUBMIT_INTERVAL:g} to {MAX_SUBMIT_INTERVAL:g} seconds")
    return SlurmLab(path, connect, keys, machines, shared_dir, names["partition"], time_limit, names["account"],
                    sbatch_args, mgst, puller_args, float(idle) if idle is not None else None, max_pilots,
                    float(interval))
