"""Run results: per-replication reductions, their summary, and JSON, CSV and table output."""

from __future__ import annotations

import csv
import gzip
import importlib.util
import io
import math
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mgst.bot_metrics import BAG_SUMMARY_COLUMNS, BagReplication, BagSummary, bag_summary_rows, format_bags
from mgst.core.state import JobRecord
from mgst.intervals import (
    BATCHES,
    STUDENT_T,
    Interval,
    interval_label,
    interval_places,
    is_default,
    mean_ci,
    method_note,
    positive_interval,
)
from mgst.model import Experiment
from mgst.wording import label_width, pad, plural

# The paper's Figure 1 columns, in order; extra columns follow them.
JOB_COLUMNS = (
    "ID", "Secondary ID", "Job Class", "Server", "Date Submitted", "Date Sent",
    "Date Started", "Date Done", "Status", "T/O",
)
JOB_EXTRA_COLUMNS = (
    "Replication", "Response Time", "First Sent", "Attempts", "Requeues", "Size", "Counted",
    # replicas that ran on after the job was done (a policy that lets losers run on), and their machine time: waste
    "Discarded", "Wasted Time",
    "Bag",  # the Bag-of-Tasks id of a task (empty for a job of a class workload)
)

# `mgst simulate --jobs FORMAT`: the per-job file each format writes.
JOB_FORMATS = {"csv": "jobs.csv", "csv.gz": "jobs.csv.gz", "parquet": "jobs.parquet"}
# Mean size of a simulation jobs.csv row, measured on the MGST paper's settings as their files run them
# (lolo-mpd-fe: 764,840 rows, 83.1 MB, 108.6 bytes a row; hihi-mfd-fd: 264,520 rows, 28.4 MB, 107.5), for
# estimates only: longer runs have longer times.
JOB_ROW_BYTES = 108
# Parquet column types; every other column is a string, as in the CSV. Empty CSV fields are nulls.
_INT_COLUMNS = frozenset({"ID", "Secondary ID", "Job Class", "Replication", "Attempts", "Requeues", "Discarded",
                          "Bag"})
_FLOAT_COLUMNS = frozenset(
    {"Date Submitted", "Date Sent", "Date Started", "Date Done", "Response Time", "First Sent", "Size", "Wasted Time"}
)
# What a summary's intervals are made of (Summary.interval): the replications' means, or, for a simulation of one
# replication, the means of its counted jobs in BATCHES windows of equal model time (docs/intervals.md).
REPLICATIONS = "replications"
BATCH_MEANS = "batch means"
PARQUET_MISSING = "parquet needs pyarrow: pip install 'mgst[parquet]' (or pip install 'pyarrow>=14')"


@dataclass(slots=True)
class ReplicationResult:
    """One replication reduced to what the summary needs (small enough to pass between processes)."""

    replication: int
    counts: list[int]  # counted jobs per class
    sums: list[float]  # sum of response times of counted jobs per class
    wait_sums: list[float]  # sum of first-sent minus submitted per class
    end_time: float
    busy: list[float]  # per machine
    up: list[float]  # per machine
    completed: list[int]  # per machine
    failures: list[int]  # per machine
    jobs_total: int  # every job simulated, counted or not
    unfinished: int
    stranded: int = 0  # of unfinished, those left when nothing was left to happen (ReplicationRun.stranded)
    rows: list[tuple] = field(default_factory=list)  # jobs.csv rows, when asked for (keep_rows)
    bags: BagReplication | None = None  # a Bag-of-Tasks workload's bags, reduced
    policy_counts: dict[str, float] = field(default_factory=dict)  # the policy's report() (none: {})
    discarded: list[int] = field(default_factory=list)  # per machine: losers that ran on (waste)
    discarded_time: list[float] = field(default_factory=list)  # per machine: their machine time
    # Per class, per batch (BATCHES windows of equal model time of the counted window): the counted jobs and the sum
    # of their response times, for a batch-means interval (a simulation of one replication: reduce_replication's
    # keep_batches); None otherwise.
    batches: tuple[list[list[int]], list[list[float]]] | None = None

    def mean(self, cls: int | None = None) -> float:
        if cls is None:
            n = sum(self.counts)
            return sum(self.sums) / n if n else math.nan
        return self.sums[cls] / self.counts[cls] if self.counts[cls] else math.nan


def stranded_text(jobs: int, replications: int, of: int) -> str:
    """The summary's line for jobs left when nothing was left to happen, in ``replications`` of ``of``."""
    where = "the run" if of == 1 else f"{replications} of {of} replications"
    return (f"{jobs} jobs were still in the system when nothing was left to happen ({where}, before the drain limit): "
            "no machine could take them (down for good, excluded, or refused by every requirement)")


def reduce_replication(
    experiment: Experiment, run: Any, warmup: float, horizon: float, keep_rows: bool, keep_batches: bool = False
) -> ReplicationResult:
    """Reduce a sim.ReplicationRun: count jobs submitted in [warmup, horizon) that completed (``keep_rows``: a run
    that kept its records; ``keep_batches``: and their batches' counts and sums, for a batch-means interval)."""
    counts, sums, waits = run.counted_totals(len(experiment.classes), warmup, horizon)
    rows = list(job_rows(experiment, run, warmup, horizon)) if keep_rows else []
    ms = run.machines
    return ReplicationResult(
        replication=run.replication,
        counts=counts, sums=sums, wait_sums=waits, end_time=run.end_time,
        busy=[m.busy_time for m in ms], up=[m.up_time for m in ms],
        completed=[m.completed for m in ms], failures=[m.failures for m in ms],
        jobs_total=run.jobs_total, unfinished=run.unfinished, stranded=run.stranded, rows=rows,
        discarded=[m.discarded for m in ms], discarded_time=[m.discarded_time for m in ms],
        batches=run.counted_batches(len(experiment.classes), warmup, horizon) if keep_batches else None,
    )


def job_rows(experiment: Experiment, run: Any, warmup: float, horizon: float) -> Iterator[tuple]:
    """A sim.ReplicationRun's jobs.csv rows, one at a time (the rows reduce_replication keeps with keep_rows)."""
    if getattr(run, "streamed_totals", None) is not None and run.jobs_total:
        raise ValueError("this run kept no records: simulate it with keep_records=True for its jobs.csv rows")
    names = [m.name for m in experiment.machines]
    for rec in run.jobs:
        sub = rec.job.submitted
        yield job_row(rec, names, run.replication, warmup <= sub < horizon and rec.completed is not None,
                      run.end_time)


def six_places(x: float) -> str:
    """``x`` for a CSV cell: 6 decimals, or 6 significant digits where those would keep fewer (below 0.001: a job of
    a ten-millionth of a unit was 0.000000)."""
    return f"{x:.6f}" if x == 0 or abs(x) >= 1e-3 else f"{x:.6g}"


def _model_time(t: float | None) -> str:
    return "" if t is None else f"{t:.6f}"


def job_row(rec: JobRecord, machine_names: Sequence[str], replication: int, counted: bool, end: float) -> tuple:
    """One simulation jobs.csv row: Figure 1's columns (Dates in model time), then JOB_EXTRA_COLUMNS; ``end``: the
    run's (a loser still running then is charged to it, as the core charges its machine). A job not done shows its
    latest replica (its machine, id and send time), as a testbed run's jobs.csv does; one never sent, none."""
    fmt = _model_time
    job = rec.job
    done = rec.completed is not None
    response = six_places(rec.completed - job.submitted) if done else ""
    losers = [r for r in rec.history if r.discarded]
    wasted = sum(r.charged_until(end) for r in losers)
    if done:
        replica, machine, sent = rec.done_by, rec.done_on, rec.done_sent
    elif rec.history:
        latest = rec.history[-1]
        replica, machine, sent = latest.id, latest.machine, latest.sent
    else:
        replica, machine, sent = None, None, None
    return (
        job.id, "" if replica is None else replica, job.job_class + 1,
        machine_names[machine] if machine is not None else "",
        fmt(job.submitted), fmt(sent), fmt(sent), fmt(rec.completed),
        rec.status.value, "Yes" if rec.timeouts else "No",
        replication, response, fmt(rec.first_sent), rec.attempts, rec.requeues, six_places(job.size),
        "Yes" if counted else "No", len(losers), six_places(wasted), "" if job.bag is None else job.bag,
    )


@dataclass(frozen=True, slots=True)
class Estimate:
    jobs: int
    mean: float
    low: float
    high: float
    method: str = STUDENT_T  # how the interval was made (mgst.intervals)

    def as_dict(self) -> dict[str, Any]:
        d = {"jobs": self.jobs, "mean_response": _num(self.mean), "ci95": [_num(self.low), _num(self.high)]}
        if not is_default(self.method):
            d["interval_method"] = self.method
        return d


@dataclass(frozen=True, slots=True)
class Summary:
    experiment: str
    mode: str
    policy: str
    class_names: tuple[str, ...]
    classes: tuple[Estimate, ...]
    overall: Estimate
    mean_wait: tuple[float, ...]  # per class: submitted -> first sent
    machine_names: tuple[str, ...]
    utilisation: tuple[float, ...]  # per machine: busy time / (run length x its cpus), mean over replications
    replications: int
    horizon: float
    warmup: float
    seed: int
    load: float | None  # 1 / lambda* of the allocation LP
    jobs_simulated: int
    unfinished: int
    elapsed_s: float
    # Of unfinished, the jobs left when nothing was left to happen, and in how many replications (not in the JSON
    # when none: a run the drain limit cut, or none left)
    stranded: int = 0
    stranded_replications: int = 0
    bags: BagSummary | None = None  # a Bag-of-Tasks workload's AVT, makespan, waiting, RWT
    # The policy's counts (Policy.report), summed over replications; {} for most policies (not in the JSON then)
    policy_counts: dict[str, float] = field(default_factory=dict)
    # Losers that ran on after their job was done, over every replication (None: none did; not in the JSON then)
    waste: Waste | None = None
    # What the intervals are made of: the replications' means, or (one replication) batch means of its jobs
    interval: str = REPLICATIONS
    # The overload warning (mgst.config.checks) where the workload exceeds the grid's capacity in the long run: no
    # steady state, so the means and their intervals grow with the horizon (None: not overloaded; not in the JSON)
    overloaded: str | None = None
    # Each replication's mean response (nan: no job counted), per class then overall, in replication order: a policy
    # compared on the same jobs is compared replication by replication (paired); () where not kept (a testbed run)
    replication_means: tuple[tuple[float, ...], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "experiment": self.experiment,
            "mode": self.mode,
            "policy": self.policy,
            "classes": [
                {"class": i + 1, "name": name, **est.as_dict(), "mean_wait": _num(w)}
                for i, (name, est, w) in enumerate(zip(self.class_names, self.classes, self.mean_wait))
            ],
            "overall": self.overall.as_dict(),
            "machines": [
                {"machine": name, "utilisation": _num(u)} for name, u in zip(self.machine_names, self.utilisation)
            ],
            "replications": self.replications,
            "horizon": self.horizon,
            "warmup": self.warmup,
            "seed": self.seed,
            "load": _num(self.load) if self.load is not None else None,
            "jobs_simulated": self.jobs_simulated,
            "unfinished": self.unfinished,
            "elapsed_s": round(self.elapsed_s, 3),
            "jobs_per_s": round(self.jobs_simulated / self.elapsed_s) if self.elapsed_s > 0 else None,
            "time_unit": "model",
        }
        if self.bags is not None:
            d["bags"] = self.bags.as_dict()
        if self.overloaded is not None:
            d["overloaded"] = self.overloaded
        if self.policy_counts:
            d["policy_counts"] = {k: _num(v) for k, v in self.policy_counts.items()}
        if self.waste is not None:
            d["waste"] = self.waste.as_dict()
        if self.stranded:
            d["stranded"] = {"jobs": self.stranded, "replications": self.stranded_replications}
        if self.interval != REPLICATIONS:  # (the replications' means: no key, as before)
            # (a testbed run batches each class's jobs in their order, mgst.testbed.summary; a simulation, model time)
            of = ("batches of each class's counted jobs, in order" if self.mode == "testbed"
                  else "windows of equal model time of the counted jobs")
            d["interval"] = f"{self.interval} ({BATCHES} {of})"
        return d


@dataclass(frozen=True, slots=True)
class Waste:
    """Replicas that ran on after a sibling had done their job (the policy lets losers run on), whatever their end,
    and the machine time they held (model time; a wait on the host for a CPU not counted): GridBot's waste."""

    replicas: int
    machine_time: float
    busy_time: float  # every replica's machine time, for the share

    @property
    def share_of_busy(self) -> float:
        return self.machine_time / self.busy_time if self.busy_time > 0 else math.nan

    def as_dict(self) -> dict[str, Any]:
        return {"replicas": self.replicas, "machine_time": _num(self.machine_time),
                "share_of_busy_time": _num(self.share_of_busy)}

    def line(self) -> str:
        return (f"waste: {plural(self.replicas, 'replica')} kept after their job was done (losers run on), "
                f"{self.machine_time:.6g} time units of machine time charged until each ended (its result, a failure "
                f"or its time-out; {100 * self.share_of_busy:.1f} % of busy time)")


def waste_of(discarded: Iterable[int], discarded_time: Iterable[float], busy: Iterable[float]) -> Waste | None:
    """The waste of machines' totals (None when no loser ran on)."""
    n = sum(discarded)
    return Waste(n, sum(discarded_time), sum(busy)) if n else None


def _num(x: float) -> float | None:
    """JSON has no NaN: undefined values become null; 6 decimals, or 6 significant digits where those would keep
    fewer (a mean of a ten-millionth of a unit was 0.0)."""
    if x is None or math.isnan(x) or math.isinf(x):
        return None
    return float(six_places(x))


def summarize(
    experiment: Experiment, results: Sequence[ReplicationResult], *, mode: str, horizon: float,
    warmup: float, seed: int, load: float | None, elapsed_s: float,
) -> Summary:
    n = len(experiment.classes)
    batches = results[0].batches if len(results) == 1 else None
    classes = []
    for c in range(n):
        ci = mean_ci([r.mean(c) for r in results if r.counts[c]])
        if batches is not None:
            ci = _batch_means(results[0].mean(c), batches[0][c], batches[1][c])
        classes.append(Estimate(sum(r.counts[c] for r in results), *ci, ci.method))
    ci = mean_ci([r.mean() for r in results if sum(r.counts)])
    if batches is not None:
        ci = _batch_means(results[0].mean(), [sum(k) for k in zip(*batches[0])], [sum(x) for x in zip(*batches[1])])
    overall = Estimate(sum(sum(r.counts) for r in results), *ci, ci.method)
    waits = tuple(  # a class no job of which was measured has no mean wait (null in JSON), not 0
        sum(r.wait_sums[c] for r in results) / jobs if (jobs := sum(r.counts[c] for r in results)) else math.nan
        for c in range(n)
    )
    util = tuple(  # of the machine's CPUs: a host of two CPUs busy on both all the time is at 100 %
        sum(r.busy[j] / (r.end_time * m.computing_slots) for r in results if r.end_time > 0) / max(1, len(results))
        for j, m in enumerate(experiment.machines)
    )
    return Summary(
        experiment=experiment.name, mode=mode, policy=experiment.policy.name,
        class_names=tuple(c.name for c in experiment.classes), classes=tuple(classes), overall=overall,
        mean_wait=waits, machine_names=tuple(m.name for m in experiment.machines), utilisation=util,
        replications=len(results), horizon=horizon, warmup=warmup, seed=seed, load=load,
        jobs_simulated=sum(r.jobs_total for r in results), unfinished=sum(r.unfinished for r in results),
        stranded=sum(r.stranded for r in results), stranded_replications=sum(1 for r in results if r.stranded),
        elapsed_s=elapsed_s, policy_counts=sum_counts(r.policy_counts for r in results),
        waste=waste_of((k for r in results for k in r.discarded), (t for r in results for t in r.discarded_time),
                       (b for r in results for b in r.busy)),
        interval=BATCH_MEANS if batches is not None else REPLICATIONS,
        replication_means=(*(tuple(r.mean(c) for r in results) for c in range(n)), tuple(r.mean() for r in results)),
    )


def _batch_means(mean: float, counts: Sequence[int], sums: Sequence[float]) -> Interval:
    """One replication's interval of ``mean`` from its batches' mean response times (a batch without a job has
    none), about the mean as the replication summed it."""
    return positive_interval(mean, [s / k for s, k in zip(sums, counts) if k], 0.95, "batches")


def sum_counts(counts: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Policy counts summed by name, in the order names first appear."""
    total: dict[str, float] = {}
    for c in counts:
        for k, v in c.items():
            total[k] = total.get(k, 0) + v
    return total


def format_table(summary: Summary) -> str:
    """A readable table like the paper's Table 2: class, mean response, 95 % CI."""

    def ci(e: Estimate, row: int) -> str:
        # (a class some replications counted no job of: its mean and interval are over those that did, said)
        means = summary.replication_means[row] if row < len(summary.replication_means) else ()
        used = sum(1 for m in means if not math.isnan(m))
        of = f" [{used} of {summary.replications} replications]" if 0 < used < len(means) else ""
        if math.isnan(e.low):
            return (method_note(e.method).strip() or "(n/a)") + of
        places = interval_places(e.mean, e.low, e.high)
        return f"({e.low:.{places}f}, {e.high:.{places}f})" + method_note(e.method) + of

    width = label_width(summary.class_names, 10)
    lines = [
        f"{summary.experiment}: {summary.policy}, {summary.mode}, {plural(summary.replications, 'replication')} "
        f"x {summary.horizon:g} time units (warm-up {summary.warmup:g}), seed {summary.seed}",
        f"{pad('Class', width)}{'Jobs':>10}{'Mean resp.':>12}  95 % CI"
        + (f" ({summary.interval} of up to {BATCHES} windows)" if summary.interval != REPLICATIONS else ""),
    ]
    def mean(e: Estimate) -> str:  # no job measured: no mean (nan in the data)
        places = interval_places(e.mean, e.low, e.high) + 1 if not math.isnan(e.low) else 4
        # (a space before it, however many places it takes: 40.0000000000001 was 4 jobs of a mean of 1e-13)
        return f" {e.mean:>11.{places}f}" if e.jobs else f"{'n/a':>12}"

    for k, (name, e) in enumerate(zip(summary.class_names, summary.classes)):
        if e.jobs or summary.bags is None:  # a bag workload's unused task classes are left out
            lines.append(f"{pad(name, width)}{e.jobs:>10}{mean(e)}  {ci(e, k)}")
    e = summary.overall
    lines.append(f"{pad('Overall', width)}{e.jobs:>10}{mean(e)}  {ci(e, len(summary.classes))}")
    util = ", ".join(f"{n} {u:.0%}" for n, u in zip(summary.machine_names, summary.utilisation))
    lines.append(f"Utilisation: {util}")
    if summary.load is not None:
        lines.append(f"LP load (1/lambda*, every machine up at its a_j: failures and traces aside): {summary.load:.1%}")
    if summary.overloaded is not None:
        lines.append(f"WARNING: {summary.overloaded}; {OVERLOADED_NOTE}")
    if not e.jobs and summary.bags is None:
        if summary.mode == "testbed":  # (a run stopped early, by its policy's failure or an interrupt, say)
            lines.append("WARNING: no job completed after the warm-up: no mean response to report")
        else:
            lines.append("WARNING: no job completed after the warm-up in any replication: no mean response to report; "
                         "lengthen --horizon (or shorten --warmup)")
    if summary.stranded:
        lines.append(f"WARNING: {stranded_text(summary.stranded, summary.stranded_replications, summary.replications)}")
    if cut := summary.unfinished - summary.stranded:
        lines.append(f"WARNING: {cut} jobs were still in the system when the drain limit cut the run")
    if summary.bags is not None:
        lines.append(format_bags(summary.bags))
    if summary.policy_counts:
        counts = ", ".join(f"{k} {v:g}" for k, v in summary.policy_counts.items())
        lines.append(f"Policy ({summary.policy}, summed over replications): {counts}")
    if summary.waste is not None:
        lines.append(summary.waste.line())
    return "\n".join(lines)


def write_jobs_csv(path: Path, rows: Iterable[tuple]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(JOB_COLUMNS + JOB_EXTRA_COLUMNS)
        w.writerows(rows)


def write_job_rows(path: Path, rows: Iterable[tuple]) -> None:
    """A part of a jobs file: rows as jobs.csv has them, without the header (see :func:`write_jobs`)."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows(rows)


def parquet_available() -> bool:
    return importlib.util.find_spec("pyarrow") is not None


def _jobs_header() -> bytes:
    header = io.StringIO()
    csv.writer(header).writerow(JOB_COLUMNS + JOB_EXTRA_COLUMNS)
    return header.getvalue().encode("utf-8")


def jobs_csv_size(parts: Sequence[Path]) -> int:
    """The size in bytes of the jobs.csv that :func:`write_jobs` makes of these parts."""
    return len(_jobs_header()) + sum(os.path.getsize(p) for p in parts)


def write_jobs(path: Path, fmt: str, parts: Sequence[Path], *, remove_parts: bool = False) -> int:
    """Write a jobs file in ``fmt`` (a key of JOB_FORMATS) from parts written by :func:`write_job_rows`, in
    order; return its size in bytes.

    Every format has the same header and rows: ``csv`` is the parts after the header, ``csv.gz`` the same
    compressed (gzip), ``parquet`` (pyarrow; zstd) the same columns typed: integers, floats holding exactly the
    CSV's six-decimal values, strings, and nulls where the CSV field is empty. Rows are streamed, so memory
    does not grow with their number. The file appears under its name only once complete.
    ``remove_parts`` deletes each part once copied (the disk then holds one part beyond the file).
    """
    if fmt not in JOB_FORMATS:
        raise ValueError(f"unknown jobs format {fmt!r}; known: {', '.join(JOB_FORMATS)}")
    tmp = path.with_name(path.name + ".partial")
    try:
        if fmt == "parquet":
            _write_parquet(tmp, parts, remove_parts)
        else:
            with open(tmp, "wb") as raw:
                # mtime 0 and the plain name: the same rows give the same bytes
                out = gzip.GzipFile(JOB_FORMATS["csv"], "wb", 6, raw, mtime=0) if fmt == "csv.gz" else raw
                with out:
                    out.write(_jobs_header())
                    for part in parts:
                        with open(part, "rb") as f:
                            shutil.copyfileobj(f, out, 1 << 20)
                        if remove_parts:
                            os.remove(part)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path.stat().st_size


def _write_parquet(path: Path, parts: Sequence[Path], remove_parts: bool) -> None:
    try:
        import pyarrow as pa  # noqa: PLC0415 (optional: the parquet extra)
        import pyarrow.csv as pacsv  # noqa: PLC0415
        import pyarrow.parquet as pq  # noqa: PLC0415
    except ImportError:
        raise ImportError(PARQUET_MISSING) from None
    names = JOB_COLUMNS + JOB_EXTRA_COLUMNS
    schema = pa.schema([
        (c, pa.int64() if c in _INT_COLUMNS else pa.float64() if c in _FLOAT_COLUMNS else pa.string())
        for c in names
    ])
    read = pacsv.ReadOptions(column_names=list(names), block_size=16 << 20)  # about 150,000 rows a row group
    convert = pacsv.ConvertOptions(
        column_types={f.name: f.type for f in schema}, null_values=[""], strings_can_be_null=False,
        quoted_strings_can_be_null=False,
    )
    # Floats split by byte before zstd, the other columns dictionary-encoded: about half the CSV's size
    floats = [c for c in names if c in _FLOAT_COLUMNS]
    others = [c for c in names if c not in _FLOAT_COLUMNS]
    with pq.ParquetWriter(path, schema, compression="zstd", use_dictionary=others,
                          use_byte_stream_split=floats) as w:
        for part in parts:
            if os.path.getsize(part) > 0:  # else no rows (pyarrow reads no empty CSV)
                with pacsv.open_csv(part, read_options=read, convert_options=convert) as reader:
                    for batch in reader:
                        w.write_batch(batch)
            if remove_parts:
                os.remove(part)


# summary.csv of Poisson classes: ``Interval`` says how each row's interval was made (mgst.intervals.interval_label),
# ``Overloaded`` whether the workload exceeds the grid's capacity (no steady state: the means grow with the horizon)
SUMMARY_COLUMNS = ("Experiment", "Mode", "Policy", "Class", "Jobs", "Mean Response", "CI95 Low", "CI95 High",
                   "Mean Wait", "Interval", "Overloaded")
# The table's line under an overloaded run's figures
OVERLOADED_NOTE = "no steady state: these means and intervals grow with the horizon and estimate nothing beyond it"


def write_summary_csv(path: Path, summary: Summary, *more: Summary) -> None:
    """Mean response per class and overall; for a bag workload, its AVT, makespan, waiting and RWT instead. ``more``:
    summaries of the same workload whose rows follow (a testbed run's simulation, its Mode saying which)."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(SUMMARY_COLUMNS if summary.bags is None else BAG_SUMMARY_COLUMNS)
        for s in (summary, *more):
            w.writerows(_summary_rows(s))


def _summary_rows(summary: Summary) -> list[list[Any]]:
    """One summary's rows of summary.csv (SUMMARY_COLUMNS; a bag workload's, BAG_SUMMARY_COLUMNS)."""
    if summary.bags is not None:
        return bag_summary_rows(summary.experiment, summary.mode, summary.policy, summary.bags)
    overloaded = "Yes" if summary.overloaded is not None else "No"
    rows: list[list[Any]] = [
        [summary.experiment, summary.mode, summary.policy, name, e.jobs, _fmt(e.mean), _fmt(e.low), _fmt(e.high),
         _fmt(wait), interval_label(summary.interval, e.method), overloaded]
        for name, e, wait in zip(summary.class_names, summary.classes, summary.mean_wait)
    ]
    e = summary.overall
    rows.append([summary.experiment, summary.mode, summary.policy, "Overall", e.jobs, _fmt(e.mean), _fmt(e.low),
                 _fmt(e.high), "", interval_label(summary.interval, e.method), overloaded])
    return rows


def _fmt(x: float) -> str:
    return "" if math.isnan(x) else six_places(x)
