"""The `mgst` command: the only place that writes to the terminal."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from mgst import policies
from mgst.config import ConfigError, load_experiment, overload_warning


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mgst", description="A testbed for desktop-grid scheduling policies.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output on stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("simulate", help="simulate an experiment file and print mean response times")
    p.add_argument("file", type=Path, help="experiment file (TOML)")
    p.add_argument("--horizon", type=float, help="model time during which jobs arrive")
    p.add_argument("--warmup", type=float, help="jobs submitted before this are not counted")
    p.add_argument("--replications", type=int, help="independent replications")
    p.add_argument("--seed", type=int, help="run seed; replication r uses streams derived from (seed, r)")
    p.add_argument("--workers", type=int, help="parallel processes (default: one per core)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.add_argument("--out", type=Path, help="write jobs.csv and summary.csv into this directory")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=_simulate)

    p = sub.add_parser("policies", help="list the policies an experiment file can name")
    p.set_defaults(func=_policies)

    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * args.verbose, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    try:
        return args.func(args)
    except ConfigError as e:
        print(f"mgst: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mgst: interrupted", file=sys.stderr)
        return 130


def _policies(args: argparse.Namespace) -> int:
    for name in policies.names():
        doc = (policies.policy_class(name).__doc__ or "").strip().splitlines()
        print(f"{name:<10} {doc[0] if doc else ''}")
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from mgst.results import write_jobs_csv, write_summary_csv  # noqa: PLC0415 (keeps `mgst --help` fast)
    from mgst.simulate import run_simulation  # noqa: PLC0415

    exp = load_experiment(args.file)
    s = exp.simulation
    horizon = s.horizon if args.horizon is None else args.horizon
    warmup = s.warmup if args.warmup is None else args.warmup
    reps = s.replications if args.replications is None else args.replications
    for key, ok, problem in (
        ("--horizon", horizon > 0, "must be > 0"),
        ("--warmup", 0 <= warmup < horizon, f"must be >= 0 and below the horizon ({horizon:g})"),
        ("--replications", reps >= 1, "must be >= 1"),
        ("--seed", args.seed is None or args.seed >= 0, "must be >= 0"),
        ("--workers", args.workers is None or args.workers >= 1, "must be >= 1"),
    ):
        if not ok:
            print(f"mgst: error: {key} {problem}", file=sys.stderr)
            return 2
    warning = overload_warning(exp)
    if warning:
        print(f"mgst: warning: {warning}", file=sys.stderr)

    show = not args.quiet and sys.stderr.isatty()

    def progress(done: int, total: int) -> None:
        if show:
            print(f"\rsimulating {exp.name}: replication {done}/{total}", end="", file=sys.stderr, flush=True)

    summary, results = run_simulation(
        exp, horizon=horizon, warmup=warmup, replications=reps, seed=args.seed,
        keep_rows=args.out is not None, workers=args.workers, progress=progress,
    )
    if show:
        print(file=sys.stderr)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        write_jobs_csv(args.out / "jobs.csv", (row for r in results for row in r.rows))
        write_summary_csv(args.out / "summary.csv", summary)
    if args.json:
        print(json.dumps(summary.as_dict()))
    else:
        from mgst.results import format_table  # noqa: PLC0415

        print(format_table(summary))
        if args.out is not None:
            print(f"wrote {args.out / 'jobs.csv'} and {args.out / 'summary.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
