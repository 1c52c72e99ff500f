"""`mgst simulate`: an experiment file's replications, their summary and their per-job records files."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from mgst.cli.options import (
    OFF_TERMINAL_EVERY_S,
    check_folder,
    check_horizon_warmup,
    check_seed,
    import_policies,
    lengths_not_simulated,
    provenance,
)
from mgst.config import MAX_REPLICATIONS, MAX_WORKERS, ConfigError, load_experiment
from mgst.config.checks import overload_warning, simultaneous_bags_warning

if TYPE_CHECKING:
    from mgst.model import Experiment
    from mgst.results import Summary
    from mgst.sim.overheads import Overheads


def simulate_command(args: argparse.Namespace) -> int:
    import_policies(args)
    names: list[str | None] = list(args.policies) if args.policies else [None]
    for k, name in enumerate(names):
        if name in names[:k]:
            print(f"mgst: error: --policy {name} is given twice", file=sys.stderr)
            return 2
    given = lengths_not_simulated(args.horizon)
    experiments = [load_experiment(args.file, policy=name, lengths_not_used=given) for name in names]
    exp = experiments[0]
    s = exp.simulation
    horizon = s.horizon if args.horizon is None else args.horizon
    warmup = s.warmup if args.warmup is None else args.warmup
    reps = s.replications if args.replications is None else args.replications
    if args.horizon is not None:
        from mgst.config.checks import check_run_length  # noqa: PLC0415

        for e in experiments:  # (a policy's own periods are checked against the run's length)
            check_run_length(e, horizon, "--horizon")
    check_horizon_warmup(horizon, warmup, args.horizon is not None, args.warmup is not None)
    if args.out is not None:
        check_folder("--out", args.out)
        if (args.out / "journal.sqlite").exists():  # (mgst.testbed.store.FILENAME: simulate imports no testbed)
            raise ConfigError("--out", f"{args.out} holds a testbed run, whose summary.csv (and jobs.csv) the "
                                       "simulation would overwrite: choose another folder (a run's simulation beside "
                                       "it is in its summary already)")
        if (args.out / "sweep.json").exists():  # (mgst.sweep.MANIFEST: a sweep's folder, its summary.csv overwritten)
            raise ConfigError("--out", f"{args.out} holds a sweep, whose summary.csv the simulation would overwrite: "
                                       "choose another folder")
    check_seed("--seed", args.seed)
    for key, ok, problem in (
        ("--replications", reps >= 1, "must be >= 1"),
        ("--replications", reps <= MAX_REPLICATIONS, f"must be at most {MAX_REPLICATIONS:,}"),
        ("--workers", args.workers is None or args.workers >= 1, "must be >= 1"),
        ("--workers", args.workers is None or args.workers <= MAX_WORKERS, f"must be at most {MAX_WORKERS:,}"),
        ("--jobs", args.jobs is None or args.out is not None, "needs --out DIR (the folder to write the file into)"),
        ("--jobs", args.jobs != "parquet" or _parquet_available(), _parquet_missing()),
    ):
        if not ok:
            print(f"mgst: error: {key} {problem}", file=sys.stderr)
            return 2
    overheads = None
    if args.overheads is not None:
        overheads = _overheads(args.overheads, exp)
    for warning in (overload_warning(exp), simultaneous_bags_warning(exp),
                    _late_arrivals(exp, horizon, exp.simulation.seed if args.seed is None else args.seed)):
        if warning:
            print(f"mgst: warning: {warning}", file=sys.stderr)
    if len(experiments) == 1:
        summary, written = _simulate(exp, args, args.out, horizon, warmup, reps, overheads)
        if args.json:
            print(json.dumps({**summary.as_dict(), **provenance(args.file)}))
        else:
            from mgst.results import format_table  # noqa: PLC0415

            print(format_table(summary))
            if args.out is not None:
                print(f"wrote {_listing(written)} in {args.out}")
        return 0
    # Several policies: the same jobs for each (the same seed: common random numbers), their means side by side
    from mgst.analysis.policy_comparison import comparison, format_policy_comparison  # noqa: PLC0415

    summaries, wrote = [], []
    for e in experiments:
        out = None if args.out is None else args.out / e.policy.name
        summary, written = _simulate(e, args, out, horizon, warmup, reps, overheads)
        summaries.append(summary)
        if out is not None:
            wrote.append(f"wrote {_listing(written)} in {out}")
    if args.json:
        print(json.dumps({"policies": [x.as_dict() for x in summaries], "comparison": comparison(summaries),
                          **provenance(args.file)}))
    else:
        print(format_policy_comparison(summaries))
        for line in wrote:
            print(line)
    return 0


def _simulate(exp: Experiment, args: argparse.Namespace, out: Path | None, horizon: float, warmup: float, reps: int,
              overheads: Overheads | None) -> tuple[Summary, list[str]]:
    """One policy's replications, its files written into ``out`` (None: none): its summary and the files' names."""
    import time  # noqa: PLC0415

    from mgst.results import write_summary_csv  # noqa: PLC0415 (keeps `mgst --help` fast)
    from mgst.sim.replications import run_simulation  # noqa: PLC0415

    show = not args.quiet and sys.stderr.isatty()
    # Off a terminal, a line now and then, as `mgst sweep` does (a long run's log said nothing until its end)
    logged = not args.quiet and not show
    t0 = last = time.monotonic()

    def progress(done: int, total: int) -> None:
        nonlocal last
        line = f"simulating {exp.name} ({exp.policy.name}): replication {done}/{total}"
        if show:
            print(f"\r{line}", end="", file=sys.stderr, flush=True)
        # (the last line only after earlier ones: a run of seconds says nothing)
        elif logged and ((now := time.monotonic()) - last >= OFF_TERMINAL_EVERY_S or (done == total and last > t0)):
            last = now
            print(f"{line}, {now - t0:.0f} s", file=sys.stderr, flush=True)

    if args.jobs is not None:  # say what it will take before it is taken (the rows go to disk as it runs)
        expected = round(sum(exp.arrival_rates) * horizon * reps)
        if expected:
            print(f"mgst: {_jobs_name(args.jobs)}: about {expected:,} rows expected, {_jobs_estimate(expected)}",
                  file=sys.stderr)
    parts = None
    written: list[str] = []
    if out is not None:
        import tempfile  # noqa: PLC0415

        out.mkdir(parents=True, exist_ok=True)
        if args.jobs is not None:
            _remove_parts_of_dead_runs(out)
            parts = Path(tempfile.mkdtemp(prefix=f"{PARTS_PREFIX}{os.getpid()}-", dir=out))
    try:
        summary, results = run_simulation(
            exp, horizon=horizon, warmup=warmup, replications=reps, seed=args.seed,
            keep_bag_rows=out is not None, jobs_dir=parts, workers=args.workers, progress=progress,
            imports=tuple(args.imports), overheads=overheads,
        )
        if show:
            print(file=sys.stderr)
        if out is not None:
            write_summary_csv(out / "summary.csv", summary)
            written.append("summary.csv")
            if summary.bags is not None:
                from mgst.bot_metrics import write_bags_csv  # noqa: PLC0415

                write_bags_csv(out / "bags.csv", (row for r in results if r.bags for row in r.bags.rows))
                written.insert(0, "bags.csv")
            if parts is not None:
                written.insert(0, _write_simulated_jobs(out, args.jobs, parts, reps, summary.jobs_simulated))
            _note_jobs_files(out, args.jobs, summary.jobs_simulated)
    finally:
        if parts is not None:
            import shutil  # noqa: PLC0415

            shutil.rmtree(parts, ignore_errors=True)
    return summary, written


def _overheads(run_dir: Path, exp: Experiment) -> Overheads:
    """The overheads of the run in ``run_dir`` for ``exp`` (said on stderr); ConfigError naming --overheads if that
    is not a run directory of the same machines. The testbed's modules are imported only here."""
    from mgst.config import ConfigError  # noqa: PLC0415
    from mgst.testbed.overheads import describe, overheads_from_run  # noqa: PLC0415
    from mgst.testbed.store import StoreError  # noqa: PLC0415

    try:
        is_dir = run_dir.is_dir()
    except (OSError, ValueError) as e:  # (a name too long for the file system, a NUL character)
        raise ConfigError("--overheads", f"{str(run_dir)[:200]!r} cannot be read: {getattr(e, 'strerror', None) or e}"
                          ) from None
    if not is_dir:
        raise ConfigError("--overheads", f"{run_dir} is not a folder (a testbed run directory is expected)")
    try:
        overheads = overheads_from_run(run_dir, exp)
    except (StoreError, ValueError) as e:
        raise ConfigError("--overheads", str(e)) from None
    print(f"mgst: {describe(overheads, exp.testbed.time_unit)}", file=sys.stderr)
    return overheads


PARTS_PREFIX = ".jobs-"  # then the writing process's pid, "-", and mkdtemp's random part


def _remove_parts_of_dead_runs(out: Path) -> None:
    """Remove the per-job parts folders that runs killed outright (SIGKILL, a power cut) left in ``out``.

    A folder belongs to the process whose pid its name holds; one whose process is gone is removed
    (its rows were never turned into a jobs file). A live process's folder, a run writing to the
    same place now, is left alone.
    """
    import shutil  # noqa: PLC0415

    for folder in out.glob(f"{PARTS_PREFIX}*-*"):
        pid = folder.name[len(PARTS_PREFIX):].split("-", 1)[0]
        if not pid.isdigit() or not folder.is_dir() or _alive(int(pid)):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        print(f"mgst: removed {folder.name}, the per-job parts an interrupted run (pid {pid}) left in {out}",
              file=sys.stderr)


def _alive(pid: int) -> bool:
    """Whether a process with this pid exists (one we may not signal counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


def _listing(names: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return " and ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else names[0]


def _parquet_available() -> bool:
    from mgst.results import parquet_available  # noqa: PLC0415

    return parquet_available()


def _parquet_missing() -> str:
    from mgst.results import PARQUET_MISSING  # noqa: PLC0415

    return PARQUET_MISSING


def _jobs_name(fmt: str) -> str:
    from mgst.results import JOB_FORMATS  # noqa: PLC0415

    return JOB_FORMATS[fmt]


def _size(n: float) -> str:
    for unit, scale, digits in (("GB", 1e9, 1), ("MB", 1e6, 1), ("kB", 1e3, 0)):
        if n >= scale:
            return f"{n / scale:.{digits}f} {unit}"
    return f"{n:.0f} bytes"


def _jobs_estimate(rows: int) -> str:
    """'about 82 MB as CSV', from the measured mean row size."""
    from mgst.results import JOB_ROW_BYTES  # noqa: PLC0415

    return f"about {_size(rows * JOB_ROW_BYTES)} as CSV"


def _write_simulated_jobs(out: Path, fmt: str, parts: Path, reps: int, rows: int) -> str:
    """Make the jobs file from the replications' parts; say its size (before writing, and after if compressed)."""
    from mgst.results import jobs_csv_size, write_jobs  # noqa: PLC0415
    from mgst.sim.replications import jobs_part  # noqa: PLC0415

    name = _jobs_name(fmt)
    files = [jobs_part(parts, r) for r in range(reps)]
    csv_bytes = jobs_csv_size(files)
    if fmt == "csv":
        print(f"mgst: {name}: {rows:,} rows, {_size(csv_bytes)}", file=sys.stderr, flush=True)
    else:
        print(f"mgst: {name}: {rows:,} rows, {_size(csv_bytes)} as CSV; writing {fmt}", file=sys.stderr, flush=True)
    size = write_jobs(out / name, fmt, files, remove_parts=True)
    if fmt != "csv":
        print(f"mgst: {name}: {_size(size)} written ({size / csv_bytes:.0%} of the CSV)", file=sys.stderr)
    return name


def _note_jobs_files(out: Path, fmt: str | None, rows: int) -> None:
    """Say that per-job records were not written, and how to get them; and which jobs files in ``out`` are
    left from an earlier run (they are not this run's)."""
    from mgst.results import JOB_FORMATS  # noqa: PLC0415

    if fmt is None:
        print(f"mgst: per-job records not written ({rows:,} rows, {_jobs_estimate(rows)}): add --jobs "
              f"(jobs.csv), --jobs csv.gz or --jobs parquet to write them", file=sys.stderr)
    stale = [name for f, name in JOB_FORMATS.items() if f != fmt and (out / name).exists()]
    if stale:
        print(f"mgst: note: {_listing(stale)} in {out} "
              f"{'are' if len(stale) > 1 else 'is'} from an earlier run, not this one", file=sys.stderr)


def _late_arrivals(exp: Experiment, horizon: float, seed: int) -> str | None:
    """A warning if a finite workload (a bag list, a job trace) has arrivals at or after the horizon, which no
    replication simulates (replication 0's workload counted), else None."""
    from mgst.workload import late_arrivals  # noqa: PLC0415

    counts = late_arrivals(exp, horizon, seed)
    if counts is None:
        return None
    late, total = counts
    return (f"{late} of the workload's {total} arrivals come at or after the horizon ({horizon:g}): they are not "
            "simulated; give a longer --horizon (a finite workload's run ends when its last task is done anyway)")
