"""Jobs from a Standard Workload Format trace (Parallel Workloads Archive), as single jobs or per-user bags."""

from __future__ import annotations

import functools
import logging
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from mgst.bounded_read import FileReadError, numbered_lines
from mgst.model import Bag, Job, SwfTrace
from mgst.workload.bags import make_tasks

log = logging.getLogger(__name__)

# Bounds on what a trace may hold: beyond them the file is not a workload this testbed can run
# (MAX_JOBS of mgst.config is the same bound on the jobs of one replication).
MAX_TRACE_JOBS = 10_000_000
MAX_COMMENT_LINES = 100_000
MAX_LINE = 4096  # bytes; a SWF line is 18 numbers (~100 bytes)
MAX_TRACE_BYTES = 2 << 30  # 2 GiB read (decompressed): 10,000,000 jobs of ~100 bytes, and room for comments
FIELDS = 18
# SWF version 2.2, 1-based field numbers (https://www.cs.huji.ac.il/labs/parallel/workload/swf.html)
SUBMIT, RUN, ALLOCATED, REQUESTED, USER, QUEUE = 2, 4, 5, 8, 12, 15
BAG_MODES = ("none", "user")


class SwfError(ValueError):
    """A trace that cannot be read, naming the file and (when it is one line's fault) the line."""

    def __init__(self, path: str, line: int | None, problem: str):
        self.path = path
        self.line = line
        self.problem = problem
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True)
class SwfJobs:
    """The usable jobs of a trace, sorted by submit time (stable: ties keep the file's order).

    Arrays are read-only: the parse is cached and shared by every replication.
    """

    submit: np.ndarray  # seconds, as in the trace
    run: np.ndarray  # seconds
    procs: np.ndarray  # allocated processors (requested when allocated is unknown)
    user: np.ndarray  # int, -1 unknown
    queue: np.ndarray  # int, -1 unknown
    lines: int  # job lines read (kept + skipped)

    def __len__(self) -> int:
        return int(self.submit.size)

    def sizes(self, work_scale: float) -> np.ndarray:
        with np.errstate(over="ignore"):  # (a size past a float's range is inf: the experiment's check refuses it)
            return self.run * self.procs * work_scale

    def times(self, time_scale: float, start: float = 0.0) -> np.ndarray:
        """Model arrival times: (submit - first submit) x time_scale + start."""
        if not len(self):
            return self.submit.copy()
        return (self.submit - self.submit[0]) * time_scale + start


def _parse(path: str) -> SwfJobs:
    submit: list[float] = []
    run: list[float] = []
    procs: list[float] = []
    user: list[int] = []
    queue: list[int] = []
    skipped_run = skipped_procs = skipped_submit = 0
    comments = lines = 0
    try:
        for number, raw in numbered_lines(path, max_line=MAX_LINE, max_lines=MAX_TRACE_JOBS + MAX_COMMENT_LINES,
                                          max_bytes=MAX_TRACE_BYTES):
            try:
                text = raw.decode("ascii").strip()
            except UnicodeDecodeError:
                raise SwfError(path, number, "not ASCII text: not a SWF trace") from None
            if not text or text.startswith(";"):
                comments += 1
                if comments > MAX_COMMENT_LINES:
                    raise SwfError(path, number, f"more than {MAX_COMMENT_LINES} comment or blank lines")
                continue
            lines += 1
            if lines > MAX_TRACE_JOBS:
                raise SwfError(path, number, f"more than {MAX_TRACE_JOBS} jobs; cut the trace")
            fields = text.split()
            if len(fields) != FIELDS:
                raise SwfError(path, number, f"has {len(fields)} fields, a SWF job line has {FIELDS}")
            values = []
            for k, field in enumerate(fields, 1):
                try:
                    value = float(field)
                except ValueError:
                    value = math.nan
                if not math.isfinite(value):
                    raise SwfError(path, number, f"field {k} is not a finite number: {field!r}")
                values.append(value)
            s, r = values[SUBMIT - 1], values[RUN - 1]
            p = values[ALLOCATED - 1] if values[ALLOCATED - 1] >= 1 else values[REQUESTED - 1]
            if s < 0:
                skipped_submit += 1
            elif r <= 0:
                skipped_run += 1
            elif p < 1:
                skipped_procs += 1
            else:
                submit.append(s)
                run.append(r)
                procs.append(p)
                user.append(int(values[USER - 1]))
                queue.append(int(values[QUEUE - 1]))
    except FileReadError as err:
        too_long = err.line is not None
        raise SwfError(path, err.line, f"line {err.problem}: not a SWF trace" if too_long else err.problem) from None
    except OSError as err:
        raise SwfError(path, None, f"cannot read: {err}") from None
    skipped = skipped_submit + skipped_run + skipped_procs
    if skipped:
        log.warning(
            "%s: skipped %d of %d jobs (%d with unknown or non-positive run time, %d with unknown processors, "
            "%d with unknown submit time)", path, skipped, lines, skipped_run, skipped_procs, skipped_submit,
        )
    order = np.argsort(np.asarray(submit), kind="stable")
    arrays = [np.asarray(a)[order] for a in (submit, run, procs, user, queue)]
    for a in arrays:
        a.flags.writeable = False
    return SwfJobs(*arrays, lines=lines)


@functools.lru_cache(maxsize=4)
def _cached(path: str, mtime_ns: int, size: int) -> SwfJobs:
    return _parse(path)


def read_swf(path: str | os.PathLike) -> SwfJobs:
    """The usable jobs of the trace at ``path`` (``.gz`` is read compressed); raises SwfError.

    A job is skipped, and counted in one logged warning, when its submit time or its run
    time is unknown (-1) or its run time is not positive, or when neither its allocated
    (field 5) nor its requested (field 8) processor count is known. A malformed line
    (not 18 numbers, too long, not ASCII) is an error naming the file and the line.
    """
    p = os.fspath(path)
    try:
        st = os.stat(p)
    except OSError as err:
        raise SwfError(p, None, f"cannot read: {err.strerror or err}") from None
    return _cached(p, st.st_mtime_ns, st.st_size)


class SwfWorkload:
    """The jobs of a SwfTrace in submit order.

    Job size = run time x processors x work_scale (work at unit rate: the trace's CPU
    seconds); submitted = (submit - first submit) x time_scale + start. Every job is of
    class 0: SWF queue numbers mean something different in every log and the experiment
    fixes its classes before the trace is read, so no mapping is assumed.
    ``bags = "user"``: consecutive jobs (in submit order) of one known user with the same
    submit time form one bag (a job of unknown user, -1, is a bag of its own); every item
    is then a Bag, with attributes user, queue (of its first job), application size, tasks.
    """

    def __init__(self, spec: SwfTrace, start: float = 0.0):
        if spec.bags not in BAG_MODES:
            raise ValueError(f"bags must be one of {', '.join(BAG_MODES)}, got {spec.bags!r}")
        jobs = read_swf(spec.path)
        self._times = jobs.times(spec.time_scale, start).tolist()
        self._sizes = jobs.sizes(spec.work_scale).tolist()
        self._user = jobs.user.tolist()
        self._queue = jobs.queue.tolist()
        if spec.bags == "user" and len(jobs):
            same = (jobs.user[1:] == jobs.user[:-1]) & (jobs.submit[1:] == jobs.submit[:-1]) & (jobs.user[1:] >= 0)
            self._starts = [0, *(np.flatnonzero(~same) + 1).tolist(), len(jobs)]
        else:
            self._starts = None
        self._index = 0  # next job (or bag, with bags)
        self._job_id = 0

    def peek_time(self) -> float:
        if self._starts is not None:
            if self._index >= len(self._starts) - 1:
                return math.inf
            return self._times[self._starts[self._index]]
        return self._times[self._index] if self._index < len(self._times) else math.inf

    def next(self) -> Job | Bag:
        if self.peek_time() == math.inf:
            raise StopIteration("the trace is exhausted")
        if self._starts is None:
            i = self._index
            self._index += 1
            self._job_id += 1
            return Job(i, 0, self._times[i], self._sizes[i])
        lo, hi = self._starts[self._index], self._starts[self._index + 1]
        t = self._times[lo]
        tasks = make_tasks(self._job_id, [0] * (hi - lo), t, self._sizes[lo:hi], self._index)
        attributes = (
            ("user", self._user[lo]), ("queue", self._queue[lo]),
            ("application_size", float(sum(self._sizes[lo:hi]))), ("tasks", hi - lo),
        )
        bag = Bag(self._index, t, tasks, attributes)
        self._index += 1
        self._job_id += hi - lo
        return bag

    def __iter__(self) -> Iterator[Job | Bag]:
        while self.peek_time() < math.inf:
            yield self.next()
