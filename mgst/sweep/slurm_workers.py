"""A sweep's Dask workers as Slurm jobs, through dask-jobqueue's SLURMCluster; and whether those jobs are still
there (a cluster whose jobs were all cancelled, preempted or timed out ends the sweep, which a rerun resumes)."""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mgst.config import ConfigError

log = logging.getLogger(__name__)

MAX_JOBS = 10_000
# Slurm names (partition, account) and sbatch's --time; Slurm judges the values themselves.
_SLURM_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
_TIME = re.compile(r"^[0-9][0-9:-]{0,15}$")
_MEMORY = re.compile(r"^[0-9]{1,9}(\.[0-9]+)?\s?([kKMGT]i?B)$")
SQUEUE_TIMEOUT = 60.0
# Job states in which a worker job may still come (or be) there.
LIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING",
               "REQUEUE_HOLD", "SIGNALING", "STAGE_OUT", "STOPPED")


@dataclass(frozen=True, slots=True)
class SlurmWorkers:
    """How a sweep's workers are submitted: ``jobs`` Slurm jobs of one single-threaded Dask worker each."""

    jobs: int
    partition: str | None = None
    walltime: str | None = None
    account: str | None = None
    memory: str = "2GB"
    options: tuple[str, ...] = ()  # more #SBATCH directives, e.g. "--qos=short"

    def check(self) -> SlurmWorkers:
        """ConfigError naming the option for a value that cannot be right."""
        if not 1 <= self.jobs <= MAX_JOBS:
            raise ConfigError("--slurm", f"give 1 to {MAX_JOBS} worker jobs")
        for option, value in (("--slurm-partition", self.partition), ("--slurm-account", self.account)):
            if value is not None and not _SLURM_NAME.match(value):
                raise ConfigError(option, "a Slurm name takes letters, digits, '_', '.', '-' (at most 64)")
        if self.walltime is not None and not _TIME.match(self.walltime):
            raise ConfigError("--slurm-time", "give sbatch's --time: minutes, HH:MM:SS or D-HH:MM:SS")
        if not _MEMORY.match(self.memory):
            raise ConfigError("--slurm-memory", "give an amount with its unit, e.g. 2GB or 500MB")
        for o in self.options:
            if not o.startswith("--") or not o.isprintable() or "\n" in o or len(o) > 200:
                raise ConfigError("--slurm-option", f"{o!r}: give one long sbatch option, e.g. --qos=short")
        missing = [t for t in ("sbatch", "squeue", "scancel") if shutil.which(t) is None]
        if missing:  # (before any work: the sweep's first line would come before this one)
            raise ConfigError("--slurm", f"no {', '.join(missing)} on the PATH: run on a Slurm login node")
        return self


def start_cluster(workers: SlurmWorkers, log_dir: Path) -> Any:
    """A SLURMCluster of ``workers.jobs`` worker jobs (each: 1 core, 1 process, 1 thread); ConfigError if
    dask-jobqueue or sbatch is missing, or if Slurm refuses the worker job (its reason)."""
    try:
        from dask_jobqueue import SLURMCluster  # noqa: PLC0415
    except ImportError:
        raise ConfigError("--slurm", "needs the 'dask-jobqueue' package (pip install 'mgst[slurm]')") from None
    missing = [t for t in ("sbatch", "squeue", "scancel") if shutil.which(t) is None]
    if missing:
        raise ConfigError("--slurm", f"no {', '.join(missing)} on the PATH: run on a Slurm login node")
    log_dir.mkdir(parents=True, exist_ok=True)
    cluster = SLURMCluster(cores=1, processes=1, memory=workers.memory, queue=workers.partition,
                           account=workers.account, walltime=workers.walltime,
                           job_extra_directives=list(workers.options), job_name="mgst-sweep",
                           python=sys.executable, log_directory=str(log_dir), silence_logs="error",
                           scheduler_options={"dashboard_address": None})
    try:
        test = subprocess.run(["sbatch", "--test-only"], input=cluster.job_script(), capture_output=True,
                              text=True, timeout=SQUEUE_TIMEOUT, check=False)
        if test.returncode != 0:
            lines = [line for line in test.stderr.splitlines() if line.strip()]
            raise ConfigError("--slurm", f"Slurm refuses the worker job: {(lines or ['no reason given'])[-1]}")
        cluster.scale(jobs=workers.jobs)
    except BaseException:
        cluster.close()
        raise
    return cluster


def job_ids(cluster: Any) -> set[int]:
    """The Slurm job ids the cluster submitted."""
    ids = set()
    for job in list(cluster.workers.values()):
        text = str(getattr(job, "job_id", "") or "")
        if text.isdigit():
            ids.add(int(text))
    return ids


def live_jobs(ids: set[int]) -> set[int]:
    """Those of ``ids`` that squeue lists as pending or running (this user's jobs); all of them if squeue cannot
    say (no verdict on a failed look)."""
    try:
        done = subprocess.run(["squeue", "--me", "--noheader", "--format=%i|%T"], capture_output=True, text=True,
                              timeout=SQUEUE_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ids
    if done.returncode != 0:
        return ids
    live = set()
    for line in done.stdout.splitlines()[:100_000]:
        job, _, state = line.strip().partition("|")
        if job.isdigit() and int(job) in ids and state in LIVE_STATES:
            live.add(int(job))
    return live
