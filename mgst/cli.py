"""The `mgst` command: the only place that writes to the terminal."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from mgst import policies
from mgst.config import ConfigError, load_experiment, overload_warning
from mgst.model import EXECUTORS


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
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import a module that registers policies of its own (repeatable)")
    p.set_defaults(func=_simulate)

    p = sub.add_parser("paper", help="simulate the MGST paper's settings and set them beside its tables")
    p.add_argument("settings", nargs="*", help="setting names, e.g. hihi-mfd-fd (default: all in the paper)")
    p.add_argument("--experiments", type=Path, default=Path("experiments"), help="folder of the experiment files")
    p.add_argument("--horizon", type=float)
    p.add_argument("--warmup", type=float)
    p.add_argument("--replications", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--workers", type=int)
    p.add_argument("--json", action="store_true", help="one JSON object: every figure and verdict")
    p.set_defaults(func=_paper)

    p = sub.add_parser("run", help="a testbed run on this machine (pullers on loopback), beside the simulation")
    _testbed_arguments(p)
    p.set_defaults(func=_run)

    p = sub.add_parser("mapper", help="the mapper of a testbed run: pullers connect to it")
    _testbed_arguments(p)
    p.add_argument("--bind", default="tcp://*:5555", help="ZeroMQ endpoint to bind (default tcp://*:5555)")
    p.add_argument("--register-timeout", type=float, default=300.0,
                   help="seconds to wait for every machine's puller (default 300)")
    p.set_defaults(func=_mapper)

    p = sub.add_parser("puller", help="a puller daemon: runs jobs for a mapper")
    from puller.cli import add_arguments  # noqa: PLC0415

    add_arguments(p)
    p.set_defaults(func=_puller)

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


def _testbed_arguments(p: argparse.ArgumentParser) -> None:
    """The options `mgst run` and `mgst mapper` share."""
    p.add_argument("file", type=Path, help="experiment file (TOML)")
    p.add_argument("--duration", type=float, help="seconds of job generation (default: the file's [testbed])")
    p.add_argument("--time-unit", type=float, help="wall seconds per model time unit")
    p.add_argument("--seed", type=int, help="run seed (the simulation's replication 0 gets the same jobs)")
    p.add_argument("--executor", choices=list(EXECUTORS),
                   help="how pullers run jobs (default: the file's [testbed] executor, else emulate)")
    p.add_argument("--out", type=Path, help="output directory (default: runs/NAME-DATE-TIME)")
    p.add_argument("--json", action="store_true", help="print only the summary JSON on stdout")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _default_out(name: str) -> Path:
    import time  # noqa: PLC0415

    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def _progress_printer(enabled: bool):
    """A mapper progress callback: one refreshed line on stderr (the paper's monitoring)."""
    from mgst.core.state import JobStatus  # noqa: PLC0415

    def show(mapper) -> None:
        if not enabled:
            return
        core = mapper.core
        n = len(core.classes)
        queued, running, done, wait, waited = [0] * n, [0] * n, [0] * n, [0.0] * n, [0] * n
        for rec in core.jobs.values():
            c = rec.job.job_class
            if rec.status is JobStatus.QUEUED:
                queued[c] += 1
            elif rec.status is JobStatus.RUNNING:
                running[c] += 1
            else:
                done[c] += 1
            if rec.first_sent is not None:
                wait[c] += rec.first_sent - rec.job.submitted
                waited[c] += 1
        if mapper.t0 is None:
            line = f"waiting for pullers: {mapper.registered()}/{len(mapper.conns)} registered"
        else:
            import time  # noqa: PLC0415

            elapsed = time.time() - mapper.t0
            left = max(0.0, mapper.duration - elapsed)
            fmt = "/".join
            line = (f"{elapsed:5.0f} s, {left:4.0f} s left | queued {fmt(map(str, queued))} | running "
                    f"{fmt(map(str, running))} | done {fmt(map(str, done))} | mean wait "
                    f"{fmt(f'{w / k:.2f}' if k else '-' for w, k in zip(wait, waited))}")
        end = "\r" if sys.stderr.isatty() else "\n"
        print(f"{line:<110}", end=end, file=sys.stderr, flush=True)

    return show


def _run(args: argparse.Namespace) -> int:
    from mgst.analysis.compare import format_comparison  # noqa: PLC0415
    from mgst.local import run_local  # noqa: PLC0415

    exp = load_experiment(args.file)
    warning = overload_warning(exp)
    if warning:
        print(f"mgst: warning: {warning}", file=sys.stderr)
    out = args.out or _default_out(exp.name)
    result = run_local(exp, out, duration=args.duration, time_unit=args.time_unit, seed=args.seed,
                       executor=args.executor, progress=_progress_printer(not args.quiet))
    if not args.quiet and sys.stderr.isatty():
        print(file=sys.stderr)
    if args.json:
        print(json.dumps(result.summary))
        return 0
    print(format_comparison(result.testbed, result.simulation))
    d = result.summary["delays"]["communication_delay_s"]
    if d["median"] is not None:
        print(f"communication delay (sent -> started): median {d['median'] * 1e3:.2f} ms, "
              f"p99 {d['p99'] * 1e3:.2f} ms over {d['n']} jobs")
    extra = result.summary
    print(f"jobs: {extra['jobs_generated']} generated, {extra['jobs_done']} done, {len(extra['cut_off'])} cut off, "
          f"{extra['requeues']} resubmitted, {extra['timeouts']} timed out")
    print(f"wrote {out}/: jobs.csv machines.csv summary.csv summary.json comparison.png pullers.log")
    return 0


def _mapper(args: argparse.Namespace) -> int:
    from mgst.mapper import Mapper  # noqa: PLC0415
    from mgst.results import format_table  # noqa: PLC0415
    from mgst.testbed import summarize_testbed, write_testbed_outputs  # noqa: PLC0415

    exp = load_experiment(args.file)
    out = args.out or _default_out(exp.name)
    mapper = Mapper(exp, args.bind, duration=args.duration, time_unit=args.time_unit, seed=args.seed,
                    register_timeout=args.register_timeout, executor=args.executor,
                    progress=_progress_printer(not args.quiet))
    import signal  # noqa: PLC0415

    signal.signal(signal.SIGTERM, lambda *_: setattr(mapper, "stopping", True))
    print(f"mgst mapper: listening on {mapper.endpoint} for {len(exp.machines)} pullers "
          f"({', '.join(m.name for m in exp.machines)})", file=sys.stderr)
    try:
        run = mapper.run()
    except TimeoutError as e:
        print(f"mgst: error: {e}", file=sys.stderr)
        return 1
    summary, extras = summarize_testbed(run)
    d = write_testbed_outputs(run, summary, extras, out)
    if args.json:
        print(json.dumps(d))
    else:
        print(format_table(summary))
        print(f"wrote {out}/: jobs.csv machines.csv summary.csv summary.json")
    return 0


def _puller(args: argparse.Namespace) -> int:
    from puller.cli import run  # noqa: PLC0415

    return run(args)


def _paper(args: argparse.Namespace) -> int:
    from mgst.analysis.paper import PAPER, agrees, deviation  # noqa: PLC0415
    from mgst.simulate import run_simulation  # noqa: PLC0415

    names = args.settings or list(PAPER)
    unknown = [n for n in names if n not in PAPER]
    if unknown:
        print(f"mgst: error: not a setting of the paper: {', '.join(unknown)}; known: {', '.join(PAPER)}",
              file=sys.stderr)
        return 2
    report = []
    for name in names:
        exp = load_experiment(args.experiments / f"{name}.toml")
        summary, _ = run_simulation(exp, horizon=args.horizon, warmup=args.warmup,
                                    replications=args.replications, seed=args.seed, workers=args.workers)
        paper = PAPER[name]
        rows = []
        for label, est, interval in zip(
            [*summary.class_names, "Overall"], [*summary.classes, summary.overall], paper.simulation
        ):
            rows.append({"class": label, "mgst": est.mean, "ci95": [est.low, est.high], "paper": list(interval),
                         "deviation": deviation(est.mean, interval), "agrees": agrees(est.mean, interval)})
        report.append({"setting": name, "table": paper.table, "note": paper.note, "rows": rows,
                       "replications": summary.replications, "horizon": summary.horizon})
        if not args.json:
            print(f"{name} (paper Table {paper.table}): {summary.replications} x {summary.horizon:g} time units")
            print(f"  {'class':<8}{'mgst':>8}  {'95 % CI':<16}{'paper':<14}{'off':>7}")
            for r in rows:
                lo, hi = r["ci95"]
                print(f"  {r['class']:<8}{r['mgst']:>8.3f}  ({lo:.3f}, {hi:.3f})  "
                      f"({r['paper'][0]:.2f}, {r['paper'][1]:.2f})  {r['deviation']:>+6.1%}"
                      f"{'' if r['agrees'] else '  <- outside'}")
            if paper.note:
                print(f"  note: {paper.note}")
    if args.json:
        print(json.dumps({"settings": report}))
    else:
        bad = sum(not r["agrees"] for s in report for r in s["rows"])
        total = sum(len(s["rows"]) for s in report)
        print(f"{bad} of {total} figures outside the paper's interval and 5 % of its midpoint")
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from mgst.results import write_jobs_csv, write_summary_csv  # noqa: PLC0415 (keeps `mgst --help` fast)
    from mgst.simulate import run_simulation  # noqa: PLC0415

    try:
        policies.import_modules(args.imports)
    except (ImportError, ValueError) as e:
        print(f"mgst: error: --import: {e}", file=sys.stderr)
        return 2
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
        keep_rows=args.out is not None, workers=args.workers, progress=progress, imports=tuple(args.imports),
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
