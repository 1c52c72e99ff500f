"""Pullers as Slurm pilot jobs: keys staged in the shared folder (0600 files in 0700 folders), one pilot per free
machine identity submitted with sbatch and recorded, their states read back, and exactly those jobs cancelled."""

from __future__ import annotations

import logging
import os
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path

from mgst.bounded_read import read_text
from mgst.lab import slurm
from mgst.lab.hosts import secret_key_in
from mgst.lab.slurm import JobState, SlurmError, SlurmUsageError
from mgst.lab.slurm_config import SlurmLab
from mgst.wire import security
from mgst.wire.secret_files import SecretFileError, own_folder, write_fresh

log = logging.getLogger(__name__)

JOB_RECORD = "jobs.tsv"  # in the shared folder: "JOB_ID<TAB>MACHINE<TAB>SUBMITTED (epoch s)", one line per pilot
MAX_JOB_RECORD = 16 << 20  # 16 MiB: some 500,000 pilots
JOB_NAME = "mgst-pilot-{machine}"


@dataclass(slots=True)
class Pilot:
    """One recorded pilot: its job, the identity it took, and what Slurm says of it (None: no record left)."""

    job: int
    machine: str
    submitted: float
    state: JobState | None = None

    @property
    def live(self) -> bool:
        """Does it hold its machine identity (queued or running)?"""
        return self.state is not None and self.state.source == "squeue" and self.state.state in slurm.LIVE_STATES


@dataclass(slots=True)
class UpReport:
    submitted: list[Pilot] = field(default_factory=list)
    kept: list[Pilot] = field(default_factory=list)  # identities still held by a live pilot
    waiting: list[str] = field(default_factory=list)  # free identities left for later (max_pilots reached)


def stage_keys(lab: SlurmLab) -> Path:
    """The shared folder's keys/ (the mapper's public key, each machine's key pair), written anew only where they
    changed; SlurmUsageError naming the path if a folder is not the user's own."""
    try:
        own_folder(lab.shared_dir)
        keys = own_folder(lab.shared_dir / "keys")
        pullers = own_folder(keys / security.PULLERS)
        for folder in (lab.shared_dir, keys, pullers):
            os.chmod(folder, 0o700)
        wanted = {keys / f"{security.MAPPER}.key": lab.keys / f"{security.MAPPER}.key"}
        for m in lab.machines:
            wanted[pullers / f"{m}.key_secret"] = secret_key_in(lab.keys, m)
        for target, source in wanted.items():
            data = source.read_bytes()
            if _same(target, data):
                continue
            fresh = target.with_name(target.name + ".new")
            write_fresh(fresh, data)
            os.replace(fresh, target)  # (a pilot starting now reads the old file or the new one, never none)
    except SecretFileError as e:
        raise SlurmUsageError(str(e)) from None
    except OSError as e:
        raise SlurmUsageError(f"cannot stage the keys in {lab.shared_dir}: {e}") from None
    return keys


def _same(path: Path, data: bytes) -> bool:
    try:
        return not path.is_symlink() and path.is_file() and path.stat().st_mode & 0o077 == 0 and \
            path.read_bytes() == data
    except OSError:
        return False


def job_script(lab: SlurmLab, machine: str) -> str:
    """The pilot's batch script (given to sbatch on stdin): it becomes the puller of ``machine``, whose exit code
    is the job's. It holds paths, never a key."""
    keys = lab.shared_dir / "keys"
    argv = [*lab.mgst, "puller", "--connect", lab.connect, "--machine", machine, "--keys", str(keys)]
    if lab.idle_exit is not None:
        argv += ["--idle-exit", f"{lab.idle_exit:g}"]
    argv += list(lab.puller_args)
    return ("#!/bin/sh\n"
            f"# mgst lab: the pilot of machine {machine}\n"
            f"cd {shlex.quote(str(lab.shared_dir))} || exit 2\n"
            f"exec env {' '.join(shlex.quote(w) for w in argv)}\n")


def sbatch_argv(lab: SlurmLab, machine: str, *, test_only: bool = False) -> list[str]:
    argv = ["sbatch", "--parsable", f"--job-name={JOB_NAME.format(machine=machine)}",
            f"--output={lab.shared_dir / machine}-%j.log"]
    if lab.partition is not None:
        argv.append(f"--partition={lab.partition}")
    if lab.time_limit is not None:
        argv.append(f"--time={lab.time_limit}")
    if lab.account is not None:
        argv.append(f"--account={lab.account}")
    argv += list(lab.sbatch_args)
    if test_only:
        argv.append("--test-only")
    return argv


def check_submission(lab: SlurmLab) -> None:
    """``sbatch --test-only`` of a pilot: SlurmUsageError with Slurm's reason if the cluster would refuse it (a
    partition that does not exist, a time limit it does not take, an account unknown), nothing submitted."""
    slurm.require_tools()
    machine = lab.machines[0]
    code, _, err = slurm.run(sbatch_argv(lab, machine, test_only=True), job_script(lab, machine).encode())
    if code != 0:
        raise SlurmUsageError(f"Slurm refuses the pilots' job: {slurm.last_error(err)}")


def submit(lab: SlurmLab, machine: str) -> Pilot:
    """One pilot for ``machine``, submitted and recorded."""
    code, out, err = slurm.run(sbatch_argv(lab, machine), job_script(lab, machine).encode())
    if code != 0:
        raise SlurmError(f"sbatch: {slurm.last_error(err)}")
    pilot = Pilot(slurm.job_id(out), machine, time.time())
    with (lab.shared_dir / JOB_RECORD).open("a", encoding="utf-8") as f:
        f.write(f"{pilot.job}\t{machine}\t{pilot.submitted:.3f}\n")
    log.info("%s: pilot job %d submitted", machine, pilot.job)
    return pilot


def recorded(lab: SlurmLab) -> list[Pilot]:
    """The pilots the job record holds, in submission order (lines that are not a pilot of this lab: skipped)."""
    path = lab.shared_dir / JOB_RECORD
    try:
        text = read_text(path, MAX_JOB_RECORD)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as e:
        raise SlurmError(f"{path}: cannot read the job record: {e}") from None
    pilots, seen = [], set()
    names = set(lab.machines)
    for line in text.splitlines():
        parts = line.split("\t")
        if (len(parts) == 3 and parts[0].isascii() and parts[0].isdigit() and 0 < int(parts[0]) < slurm.MAX_JOB_ID
                and parts[1] in names and int(parts[0]) not in seen):
            try:
                submitted = float(parts[2])
            except ValueError:
                continue
            pilots.append(Pilot(int(parts[0]), parts[1], submitted))
            seen.add(int(parts[0]))
    return pilots


def with_states(pilots: list[Pilot], *, records: bool = False) -> list[Pilot]:
    """``pilots`` with their states: squeue's for the live ones; with ``records``, the ended ones' records too."""
    live = slurm.queued({p.job for p in pilots})
    for p in pilots:
        p.state = live.get(p.job)
        if p.state is None and records:
            p.state = slurm.record_of(p.job)
    return pilots


def free_identities(lab: SlurmLab, pilots: list[Pilot]) -> list[str]:
    """The machines no live pilot holds, in the file's order."""
    held = {p.machine for p in pilots if p.live}
    return [m for m in lab.machines if m not in held]


def up(lab: SlurmLab, count: int | None = None) -> UpReport:
    """A pilot for each free identity, up to ``max_pilots`` live at once (or ``count`` more)."""
    check_submission(lab)
    stage_keys(lab)
    pilots = with_states(recorded(lab))
    report = UpReport(kept=[p for p in pilots if p.live])
    room = lab.max_pilots - len(report.kept)
    if count is not None:
        room = min(room, count)
    free = free_identities(lab, pilots)
    for m in free[:max(0, room)]:
        report.submitted.append(submit(lab, m))
    report.waiting = free[max(0, room):]
    return report


def down(lab: SlurmLab) -> list[Pilot]:
    """scancel every live pilot of this lab's record (no other job); the pilots cancelled."""
    slurm.require_tools()
    live = [p for p in with_states(recorded(lab)) if p.live]
    slurm.cancel([p.job for p in live])
    return live
