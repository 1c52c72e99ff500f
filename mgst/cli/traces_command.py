"""`mgst traces generate KIND --out DIR` and `mgst traces summary PATH`: trace-driven platforms (docs/traces.md)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from mgst.cli.options import check_folder, check_seed
from mgst.config import ConfigError

DEFAULT_TASK_MINUTES = "5,15,35"  # mgst traces summary's task lengths, as Kondo et al.'s
KINDS = ("sdsc", "homogeneous", "lri-wisc", "gimps")  # mgst.traces.generator.KINDS (not imported: `mgst --help`)
MAX_STARTS = 10_000_000  # task starts a summary draws (each costs a few numpy operations)
MAX_TASK_LENGTHS = 50
MAX_TASK_MINUTES = 36_525 * 1440  # a task no longer than the longest trace a summary covers (100 years)


def add_traces_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="traces_command", required=True, metavar="{generate,summary}")
    q = sub.add_parser("generate", help="write a synthetic SDSC-like platform: availability.csv, hosts.csv, "
                                        "platform.json (docs/traces.md)")
    q.add_argument("kind", choices=KINDS, help="the clock-rate distribution (the availability law is the same)")
    q.add_argument("--out", type=Path, required=True, metavar="DIR", help="the platform's folder (made)")
    q.add_argument("--hosts", type=int, default=220, help="hosts (default 220)")
    q.add_argument("--days", type=int, default=28, help="days from a Monday 00:00 (default 28)")
    q.add_argument("--seed", type=int, default=1, help="the platform's seed (default 1); one seed's four kinds "
                                                       "share their availability")
    q.add_argument("--fta", action="store_true", help="also write availability.fta, the Failure Trace Archive's "
                                                      "event_trace format (no CPU share)")
    q = sub.add_parser("summary", help="summarise a trace: hosts, availability by hour, up/down durations, task "
                                       "failure rates")
    q.add_argument("path", type=Path, metavar="PATH", help="a platform folder, or a trace file")
    q.add_argument("--format", choices=("csv", "fta"), help="the trace's format (default: from the file's name; in a "
                                                            "folder, availability.csv before availability.fta)")
    q.add_argument("--hosts-file", type=Path, metavar="FILE", help="the machine file (host,clock_ghz) of a trace "
                                                                   "file (a folder's own is hosts.csv)")
    q.add_argument("--task-minutes", metavar="D,D,...",
                   help="task lengths, minutes of dedicated wall time at share 1 (default 5,15,35)")
    q.add_argument("--starts", type=int, default=200_000, help="random business-hours task starts (default 200000)")
    q.add_argument("--seed", type=int, default=1, help="seed of the starts (default 1)")
    q.add_argument("--png", type=Path, metavar="FILE", help="also draw the summary to this PNG")
    q.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")


def traces_command(args: argparse.Namespace) -> int:
    if args.traces_command == "generate":
        return _generate(args)
    return _summary(args)


def _generate(args: argparse.Namespace) -> int:
    from mgst.traces.platform import (  # noqa: PLC0415
        AVAILABILITY_CSV,
        AVAILABILITY_FTA,
        HOSTS_CSV,
        MAX_DAYS,
        MAX_HOSTS,
        PLATFORM_JSON,
        PlatformTooLarge,
        check_platform,
        write_generated_platform,
    )

    if not 1 <= args.hosts <= MAX_HOSTS:
        raise ConfigError("--hosts", f"give 1 to {MAX_HOSTS:,} hosts")
    if not 1 <= args.days <= MAX_DAYS:
        raise ConfigError("--days", f"give 1 to {MAX_DAYS} days")
    check_seed("--seed", args.seed)
    try:
        check_platform(args.kind, args.hosts, args.days)  # (before the folder is made)
    except PlatformTooLarge as e:
        raise ConfigError("--hosts", str(e)) from None
    check_folder("--out", args.out)
    mine = [name for name in (AVAILABILITY_CSV, HOSTS_CSV, AVAILABILITY_FTA, PLATFORM_JSON)
            if (args.out / name).exists() or (args.out / name).is_symlink()]
    if mine:  # (a trace of the user's own is never overwritten)
        raise ConfigError("--out", f"{args.out} already holds {', '.join(mine)}: give a new folder, or remove them")
    try:
        periods = write_generated_platform(args.kind, args.out, hosts=args.hosts, days=args.days, seed=args.seed,
                                           fta=args.fta)
    except PlatformTooLarge as e:
        raise ConfigError("--hosts", str(e)) from None
    out = args.out
    size = (out / AVAILABILITY_CSV).stat().st_size
    print(f"{out}: {args.kind}, {args.hosts} hosts, {args.days} days, seed {args.seed}: {periods:,} intervals "
          f"({size / 1e6:.1f} MB in {AVAILABILITY_CSV})")
    return 0


def _task_minutes(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        raise ConfigError("--task-minutes", f"give comma-separated minutes, e.g. 5,15,35, got {text[:40]!r}") from None
    if not values or len(values) > MAX_TASK_LENGTHS or not all(0 < v <= MAX_TASK_MINUTES for v in values):
        raise ConfigError("--task-minutes", f"give 1 to {MAX_TASK_LENGTHS} positive lengths of at most "
                                            f"{MAX_TASK_MINUTES:,} minutes (100 years), got {text[:40]!r}")
    if len(set(values)) != len(values):  # (each length is a row of the summary: twice would print it twice)
        raise ConfigError("--task-minutes", f"{next(v for v in values if values.count(v) > 1):g} is given twice, "
                                            f"got {text[:40]!r}")
    return values


def _summary(args: argparse.Namespace) -> int:
    from mgst.availability.trace_files import TraceError  # noqa: PLC0415
    from mgst.traces.calendar import NoBusinessHours  # noqa: PLC0415
    from mgst.traces.platform import load_platform  # noqa: PLC0415
    from mgst.traces.summary import TooLargeToSummarise, summarise  # noqa: PLC0415

    minutes = _task_minutes(DEFAULT_TASK_MINUTES if args.task_minutes is None else args.task_minutes)
    if not 1 <= args.starts <= MAX_STARTS:
        raise ConfigError("--starts", f"give 1 to {MAX_STARTS:,} starts")
    check_seed("--seed", args.seed)
    if not args.path.exists():
        raise ConfigError("PATH", f"{args.path} does not exist")
    if args.png is not None:
        if args.png.suffix.lower() != ".png":
            raise ConfigError("--png", f"{args.png}: give a file name ending in .png")
        if args.png.is_dir():
            raise ConfigError("--png", f"{args.png} is a folder; give a file's name")
        check_folder("--png", args.png.parent)
    try:
        platform = load_platform(args.path, fmt=args.format, hosts_file=args.hosts_file)
    except TraceError as e:
        blamed = "--hosts-file" if args.hosts_file is not None and e.path == str(args.hosts_file) else "PATH"
        raise ConfigError(blamed, str(e)) from None
    if not platform.intervals:
        raise ConfigError("PATH", f"{args.path}: the trace has no host")
    try:
        summary = summarise(platform, minutes, starts=args.starts, seed=args.seed)
    except TooLargeToSummarise as e:  # (checked before any work)
        raise ConfigError("PATH", f"{args.path}: {e}") from None
    except NoBusinessHours as e:  # (no business hours far enough before the trace's end for the longest task)
        if args.task_minutes is not None:  # (given: the longest task is what does not fit)
            raise ConfigError("--task-minutes", f"{e}") from None
        raise ConfigError("PATH", f"{args.path}: {e} (a trace shorter than a weekday's 09:00-17:00 has no task "
                                  "start to summarise: shorter tasks, --task-minutes, fit in less)") from None
    if args.png is not None:
        from mgst.traces.summary_plot import write_summary_png  # noqa: PLC0415

        try:
            args.png.parent.mkdir(parents=True, exist_ok=True)  # (check_folder made it, tried, and removed it)
            write_summary_png(platform, summary, args.png)
        except OSError as e:
            raise ConfigError("--png", f"cannot write {args.png}: {e.strerror or e}") from None
    if args.json:
        json.dump(_nan_as_null(summary), sys.stdout, allow_nan=False)  # (NaN is no JSON: a strict reader refuses it)
        print()
    else:
        print(_text(summary))
    return 0


def _text(s: dict) -> str:
    lines = [f"{s['name']}: {s['hosts']} hosts, {s['span_days']:g} days"]
    c = s["clock_ghz"]
    if c is not None:
        lines.append(f"clock rates (GHz): mean {c['mean']:.3f}, sd {c['sd']:.3f}, min {c['min']:g}, p10 {c['p10']:g}, "
                     f"median {c['median']:g}, p90 {c['p90']:g}, max {c['max']:g}")
    else:
        lines.append("clock rates: unknown (no machine file)")
    lines.append("hour   weekday up  CPU share   weekend up  CPU share")
    ph = s["per_hour"]

    def cell(v: float | None) -> str:
        return f"{v:10.3f}" if v is not None else f"{'-':>10}"

    for h in range(24):
        lines.append(f"{h:02d}:00 {cell(ph['weekday_up_fraction'][h])} {cell(ph['weekday_cpu_share'][h])}  "
                     f"{cell(ph['weekend_up_fraction'][h])} {cell(ph['weekend_cpu_share'][h])}")
    lines.append("durations (min)  count      mean      p10      p50      p90      p99")
    for name, row in s["durations"].items():
        if row["count"]:
            lines.append(f"{name:<15} {row['count']:>6,} {row['mean_min']:>9.2f} {row['q10_min']:>8.2f} "
                         f"{row['q50_min']:>8.2f} {row['q90_min']:>8.2f} {row['q99_min']:>8.2f}")
        else:
            lines.append(f"{name:<15} {0:>6}")
    lines.append(f"failure rates ({s['failure_rates_note']}):")
    for r in s["failure_rates"]:
        lines.append(f"  {r['task_minutes']:g} min: {100 * r['rate']:.2f} % [{100 * r['low']:.2f}, "
                     f"{100 * r['high']:.2f}] ({r['failures']:,} of {r['starts']:,} starts)")
    return "\n".join(lines)


def _nan_as_null(value: Any) -> Any:
    """``value`` with every NaN (a rate of no start: no task could start) as None, in its dicts and lists."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _nan_as_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nan_as_null(v) for v in value]
    return value
