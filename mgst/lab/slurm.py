"""Slurm's own commands (sbatch, squeue, scontrol, scancel, sacct), each bounded in time and output, and the checked
reading of what they print: job ids, states, exit codes."""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mgst.bounded_read import read_bytes
from mgst.wording import printable

log = logging.getLogger(__name__)

COMMAND_TIMEOUT = 60.0  # s: slurmctld answers in well under a second; a busy one in some seconds
MAX_OUTPUT = 4 << 20  # bytes a Slurm command may print (squeue of one user's jobs: some kilobytes)
MAX_JOBCOMP_TAIL = 8 << 20  # the end of a job-completion file read (filetxt: one line per job of the cluster)
MAX_JOB_ID = 2**32  # Slurm's job ids are 32-bit
TOOLS = ("sbatch", "squeue", "scontrol", "scancel")
# Job states in which a pilot holds its machine identity (squeue's long names).
LIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING",
               "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD")
_STATE = re.compile(r"^[A-Z_]{2,32}$")
_FIELD = re.compile(r"(?:^|\s)([A-Za-z]+)=(\S*)")


class SlurmError(Exception):
    """A Slurm command failed, or answered what it should not; the message says why, in one line."""


class SlurmUsageError(SlurmError):
    """What was asked cannot be done on this cluster (no sbatch, a partition or time limit Slurm refuses)."""


@dataclass(frozen=True, slots=True)
class JobState:
    """A job as Slurm reports it: squeue while it is queued or running, else its record once ended."""

    job: int
    state: str  # Slurm's name: PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, PREEMPTED, TIMEOUT, NODE_FAIL, ...
    exit_code: int | None = None  # the batch script's (the puller's) exit code, once ended
    signal: int | None = None
    reason: str = ""  # squeue's reason (pending) or node list (running)
    source: str = "squeue"  # where the state was read: squeue, scontrol, sacct, jobcomp


def require_tools() -> None:
    """SlurmUsageError unless Slurm's commands are on the PATH."""
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        raise SlurmUsageError(f"no {', '.join(missing)} on the PATH: run on a Slurm login node, or load Slurm's "
                              "module (e.g. 'module load slurm')")


def run(argv: list[str], stdin: bytes = b"", timeout: float = COMMAND_TIMEOUT) -> tuple[int, str, str]:
    """``argv`` run with ``stdin``; its exit status, stdout and stderr (at most MAX_OUTPUT each, else SlurmError)."""
    exe = shutil.which(argv[0])
    if exe is None:
        raise SlurmUsageError(f"no {argv[0]} on the PATH")
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            done = subprocess.run([exe, *argv[1:]], input=stdin, stdout=out, stderr=err, timeout=timeout,
                                  check=False)
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{argv[0]} did not answer within {timeout:g} s") from None
        texts = []
        for f in (out, err):
            size = f.seek(0, 2)
            if size > MAX_OUTPUT:
                raise SlurmError(f"{argv[0]} printed more than {MAX_OUTPUT >> 20} MiB: refused")
            f.seek(0)
            texts.append(f.read().decode("utf-8", "replace"))
    return done.returncode, texts[0], texts[1]


def last_error(stderr: str) -> str:
    """The line of a Slurm command's stderr that says why (its last 'error:' line, else its last line)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return printable((errors or lines or ["no message"])[-1], 300)


def job_id(text: str) -> int:
    """The job id of ``sbatch --parsable``'s answer ("123" or "123;cluster")."""
    first = text.strip().split(";", 1)[0]
    if not (first.isascii() and first.isdigit() and 0 < int(first) < MAX_JOB_ID):
        raise SlurmError(f"sbatch answered {printable(text, 100)!r}, not a job id")
    return int(first)


def queued(ids: set[int]) -> dict[int, JobState]:
    """The jobs of ``ids`` that squeue lists as live (pending, running, ...; not those that ended lately): this
    user's jobs, read and checked."""
    if not ids:
        return {}
    code, out, err = run(["squeue", "--me", "--noheader", "--states=all", "--format=%i|%T|%R"])
    if code != 0:
        raise SlurmError(f"squeue: {last_error(err)}")
    found: dict[int, JobState] = {}
    for line in out.splitlines():
        parts = line.strip().split("|", 2)
        if len(parts) != 3 or not parts[0].isdigit() or not _STATE.match(parts[1]):
            continue  # (an array's "123_[1-4]", a line of another format: not a pilot of ours)
        job = int(parts[0])
        if job in ids and parts[1] in LIVE_STATES:
            found[job] = JobState(job, parts[1], reason=printable(parts[2], 200))
    return found


def record_of(job: int) -> JobState | None:
    """An ended job's state and exit code: from sacct (where the cluster keeps accounting), else scontrol (for
    MinJobAge after its end), else the job-completion file (jobcomp/filetxt); None if none has it."""
    code, out, _ = run(["sacct", "--noheader", "--parsable2", "--allocations", f"--jobs={job}",
                        "--format=JobID,State,ExitCode"]) if shutil.which("sacct") else (1, "", "")
    if code == 0:
        for line in out.splitlines():
            parts = line.split("|")
            if len(parts) == 3 and parts[0] == str(job):
                state = parts[1].split(" ", 1)[0]
                exit_code, signal = _exit_code(parts[2])
                if _STATE.match(state):
                    return JobState(job, state, exit_code, signal, source="sacct")
    code, out, _ = run(["scontrol", "--oneliner", "show", "job", str(job)])
    if code == 0:
        found = _record(out, job, "scontrol")
        if found is not None:
            return found
    path = jobcomp_file()
    if path is not None:
        try:
            data = read_tail(path, MAX_JOBCOMP_TAIL)
        except OSError as e:
            log.debug("%s: cannot read the job-completion file: %s", path, e)
            return None
        for line in reversed(data.splitlines()):
            if f"JobId={job} " in line:
                return _record(line, job, "jobcomp")
    return None


def jobcomp_file() -> Path | None:
    """The cluster's job-completion file, if it keeps one (JobCompType=jobcomp/filetxt) and it can be read."""
    code, out, _ = run(["scontrol", "show", "config"])
    if code != 0:
        return None
    conf = dict(re.findall(r"^(\w+)\s*=\s*(.*?)\s*$", out, re.M))
    if conf.get("JobCompType") != "jobcomp/filetxt" or not conf.get("JobCompLoc", "").startswith("/"):
        return None
    return Path(conf["JobCompLoc"])


def read_tail(path: Path, max_bytes: int) -> str:
    """The last ``max_bytes`` of a text file (whole lines)."""
    with path.open("rb") as f:
        size = f.seek(0, 2)
        if size <= max_bytes:
            f.seek(0)
            return read_bytes(path, max_bytes).decode("utf-8", "replace")
        f.seek(size - max_bytes)
        return f.read(max_bytes).decode("utf-8", "replace").split("\n", 1)[-1]


def _record(text: str, job: int, source: str) -> JobState | None:
    fields = dict(_FIELD.findall(text))
    if fields.get("JobId") != str(job):
        return None
    state = fields.get("JobState", "")
    if not _STATE.match(state):
        return None
    exit_code, signal = _exit_code(fields.get("ExitCode", ""))
    return JobState(job, state, exit_code, signal, reason=printable(fields.get("Reason", ""), 200), source=source)


def _exit_code(text: str) -> tuple[int | None, int | None]:
    """Slurm's "CODE:SIGNAL"."""
    m = re.fullmatch(r"(\d{1,3}):(\d{1,3})", text.strip())
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def cancel(ids: list[int]) -> None:
    """scancel the jobs ``ids`` (SIGTERM to their steps, then SIGKILL after the cluster's KillWait)."""
    if not ids:
        return
    code, _, err = run(["scancel", *(str(i) for i in ids)])
    if code != 0:
        raise SlurmError(f"scancel: {last_error(err)}")


# What a pilot's end says: the puller's exit codes (docs/puller.md) as the job's ExitCode, and the states Slurm
# gives a job it ended itself. A pilot that ended any other way than COMPLETED lost its machine: DOWN for the mapper.
PULLER_EXITS = {0: "the run is over, or no work for idle_exit",
                2: "refused by the mapper, or could not start (its log says why)",
                69: "never reached the mapper, or lost it and no bye came (its mapper down?): its log says why",
                75: "the mapper paused the run and did not resume it"}
SLURM_ENDS = {"CANCELLED": "cancelled (scancel): its machine went DOWN for the mapper",
              "PREEMPTED": "preempted: its machine went DOWN for the mapper",
              "TIMEOUT": "reached its time limit: its machine went DOWN for the mapper",
              "NODE_FAIL": "its node failed: its machine went DOWN for the mapper",
              "OUT_OF_MEMORY": "out of memory: its machine went DOWN for the mapper",
              "BOOT_FAIL": "its node did not boot", "DEADLINE": "past its deadline"}


def describe(state: JobState) -> str:
    """One line saying what a pilot's job state means."""
    if state.state in ("COMPLETED", "FAILED") and state.exit_code is not None:
        meaning = PULLER_EXITS.get(state.exit_code, "an unexpected exit code")
        return f"{state.state} (exit {state.exit_code}: {meaning})"
    if state.state in SLURM_ENDS:
        return f"{state.state} ({SLURM_ENDS[state.state]})"
    if state.state == "PENDING":
        return f"PENDING ({state.reason})" if state.reason else "PENDING"
    if state.state == "RUNNING":
        return f"RUNNING on {state.reason}" if state.reason else "RUNNING"
    return state.state
