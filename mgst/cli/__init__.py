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

# `mgst simulate --jobs` formats: mgst.results.JOB_FORMATS's keys (not imported here: keeps `mgst --help` fast)
SIMULATE_JOB_FORMATS = ("csv", "csv.gz", "parquet")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mgst", description="A testbed for desktop-grid scheduling policies.")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output on stderr")
    parser.add_argument("--version", action=_Version,
                        help="print the version and which build runs (compiled with mypyc, or pure Python)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("simulate", help="simulate an experiment file and print mean response times")
    p.add_argument("file", type=Path, help="experiment file (TOML)")
    p.add_argument("--horizon", type=float, help="model time during which jobs arrive")
    p.add_argument("--warmup", type=float, help="jobs submitted before this are not counted")
    p.add_argument("--replications", type=int, help="independent replications")
    p.add_argument("--seed", type=int, help="run seed; replication r uses streams derived from (seed, r)")
    p.add_argument("--workers", type=int, help="parallel processes (default: one per core)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="write summary.csv (and bags.csv for a bag workload) into this directory")
    p.add_argument("--jobs", nargs="?", const="csv", choices=SIMULATE_JOB_FORMATS, metavar="FORMAT",
                   help="with --out, also write one row per job: csv (the default), csv.gz or parquet (needs "
                        "pyarrow: pip install 'mgst[parquet]'); a paper setting makes up to 765,000 rows, 83 MB "
                        "as CSV")
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

    p = sub.add_parser("sweep", help="run a paper's grid of simulations (policies x settings x replications)")
    p.add_argument("file", type=Path, help="sweep file (TOML), e.g. experiments/bot/anglano-sweep.toml")
    p.add_argument("--workers", type=int, help="local processes (default: one per core)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="run cells on this Dask scheduler (tcp://host:port)")
    p.add_argument("--out", type=Path, help="output folder; a sweep run again in it skips finished cells "
                                            "(default: runs/sweep-NAME, or runs/sweep-NAME-quick)")
    p.add_argument("--replications", type=int, help="replications per cell (overrides the file)")
    p.add_argument("--only", action="append", default=[], metavar="COLUMN=VALUE[,VALUE]",
                   help="run only the cells with these values (repeatable), e.g. --only policy=rr,rr_nrf")
    p.add_argument("--quick", action="store_true", help="apply the file's [quick] preset")
    p.add_argument("--cell", metavar="MODULE:FUNCTION",
                   help="the function computing a cell (default mgst.bot_metrics:simulate_cell)")
    p.add_argument("--no-plots", action="store_true", help="write sweep.csv and summary.csv only")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=_sweep)

    p = sub.add_parser("run", help="a testbed run on this machine (pullers on loopback), beside the simulation")
    _testbed_arguments(p)
    p.set_defaults(func=_run)

    p = sub.add_parser("mapper", help="the mapper of a testbed run: pullers connect to it")
    _testbed_arguments(p)
    p.add_argument("--bind", default="tcp://*:5555", help="ZeroMQ endpoint to bind (default tcp://*:5555)")
    p.add_argument("--keys", type=Path, metavar="DIR",
                   help="key folder made by 'mgst keys': the mapper's key pair and authorized/ puller keys")
    p.add_argument("--resume", type=Path, metavar="DIR",
                   help="continue the run journalled in DIR (its mapper died); pullers reconnect by themselves")
    p.add_argument("--register-timeout", type=float, default=300.0,
                   help="seconds to wait for every machine's puller (default 300)")
    p.add_argument("--farewell", type=float, default=None,
                   help="seconds to answer late pullers with 'run over' after the run (default: enough for a "
                        "failed machine to come back, at most 60)")
    p.set_defaults(func=_mapper)

    p = sub.add_parser("keys", help="make CURVE key pairs for a lab: the mapper's and the pullers'")
    p.add_argument("folder", type=Path, help="where to put them (created)")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--pullers", nargs="+", metavar="NAME", help="one key pair per puller name")
    who.add_argument("--experiment", type=Path, metavar="FILE", help="one key pair per machine of this file")
    who.add_argument("--lab", action="store_true", help="one key pair shared by every puller")
    p.add_argument("--force", action="store_true", help="replace existing keys")
    p.set_defaults(func=_keys)

    p = sub.add_parser("export", help="write a run directory's CSVs and summary from its journal")
    p.add_argument("folder", type=Path, help="the run directory (holds journal.sqlite)")
    p.add_argument("--json", action="store_true", help="print only the summary JSON on stdout")
    p.set_defaults(func=_export)

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
    from mgst.mapper import Interrupted  # noqa: PLC0415
    from mgst.security import KeyFileError, SecurityError  # noqa: PLC0415
    from mgst.store import StoreError  # noqa: PLC0415

    try:
        return args.func(args)
    except (ConfigError, SecurityError, KeyFileError, StoreError) as e:
        print(f"mgst: error: {e}", file=sys.stderr)
        return 2
    except Interrupted as e:
        print(f"mgst: {e}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("mgst: interrupted", file=sys.stderr)
        return 130


def version_line() -> str:
    """E.g. "mgst 0.1.0 (compiled: mypyc)" or "mgst 0.1.0 (pure Python: MGST_PURE=1)"."""
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    from mgst import build_info  # noqa: PLC0415

    try:
        number = version("mgst")
    except PackageNotFoundError:  # run from a source tree that is not installed
        number = "(not installed)"
    return f"mgst {number} ({build_info.build()})"


class _Version(argparse.Action):
    """--version, with the version looked up only when asked (reading the metadata takes some 30 ms)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, help: str | None = None):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_line())
        parser.exit()


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
    p.add_argument("--insecure", action="store_true",
                   help="no authentication or encryption (for a closed lab network; logged, and noted in "
                        "summary.json)")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import a module that registers policies of its own (repeatable)")


def _check_testbed_args(args: argparse.Namespace, exp) -> None:
    """Exit-2 errors for the testbed options, before anything starts."""
    from mgst.config import check_testbed_overrides  # noqa: PLC0415

    check_testbed_overrides(exp, args.duration, args.time_unit)
    if args.seed is not None and args.seed < 0:
        raise ConfigError("--seed", "must be >= 0")


def _import_policies(args: argparse.Namespace) -> None:
    try:
        policies.import_modules(args.imports)
    except (ImportError, ValueError) as e:
        raise ConfigError("--import", str(e)) from None


def _stop_on_signals(mapper) -> None:
    """SIGINT and SIGTERM: the first ends generation and drains; a second stops at once."""
    import signal  # noqa: PLC0415

    def handler(signum, _frame) -> None:
        if mapper.stopping:
            mapper.aborting = True
            print("\nmgst: stopping now (the journal is consistent)", file=sys.stderr)
        else:
            mapper.stopping = True
            print(f"\nmgst: {signal.Signals(signum).name}: no more jobs; draining (again to stop now)",
                  file=sys.stderr)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


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
    from mgst.testbed import oversubscription_warning  # noqa: PLC0415

    _import_policies(args)
    exp = load_experiment(args.file)
    _check_testbed_args(args, exp)
    out = args.out or _default_out(exp.name)
    _check_new_out(out)
    for warning in (overload_warning(exp), oversubscription_warning(exp, args.executor or exp.testbed.executor)):
        if warning:
            print(f"mgst: warning: {warning}", file=sys.stderr)
    result = run_local(exp, out, duration=args.duration, time_unit=args.time_unit, seed=args.seed,
                       executor=args.executor, progress=_progress_printer(not args.quiet), insecure=args.insecure,
                       imports=tuple(args.imports), on_mapper=_stop_on_signals)
    if not args.quiet and sys.stderr.isatty():
        print(file=sys.stderr)
    if args.json:
        print(json.dumps(result.summary))
        return 0
    if result.testbed.bags is not None:
        from mgst.analysis.compare import format_bag_comparison  # noqa: PLC0415

        print(format_bag_comparison(result.testbed, result.simulation))
    else:
        print(format_comparison(result.testbed, result.simulation))
    d = result.summary["delays"]["communication_delay_s"]
    if d["median"] is not None:
        print(f"communication delay (sent -> started): median {d['median'] * 1e3:.2f} ms, "
              f"p99 {d['p99'] * 1e3:.2f} ms over {d['n']} jobs")
    extra = result.summary
    print(f"jobs: {extra['jobs_generated']} generated, {extra['jobs_done']} done, {len(extra['cut_off'])} cut off, "
          f"{extra['requeues']} resubmitted, {extra['timeouts']} timed out")
    _print_warnings(extra)
    files = "bags.csv" if result.testbed.bags is not None else "comparison.png"
    print(f"wrote {out}/: journal.sqlite jobs.csv machines.csv summary.csv summary.json {files} pullers.log")
    return 0


def _print_warnings(summary: dict) -> None:
    for w in summary.get("warnings", []):
        print(f"mgst: warning: {w}", file=sys.stderr)


def _check_new_out(out: Path) -> None:
    from mgst.store import FILENAME  # noqa: PLC0415

    if (out / FILENAME).exists():
        raise ConfigError("--out", f"{out} already holds a run (continue it with 'mgst mapper FILE --resume {out}', "
                                   "or choose another folder)")


def _mapper(args: argparse.Namespace) -> int:
    from mgst import security  # noqa: PLC0415
    from mgst.mapper import Mapper  # noqa: PLC0415
    from mgst.results import format_table  # noqa: PLC0415
    from mgst.testbed import summarize_testbed, write_testbed_outputs  # noqa: PLC0415

    _import_policies(args)
    exp = load_experiment(args.file)
    try:
        security.check_endpoint(args.bind, bind=True)
    except ValueError as e:
        raise ConfigError("--bind", str(e)) from None
    if args.resume is not None:
        given = [o for o, v in (("--duration", args.duration), ("--time-unit", args.time_unit), ("--seed", args.seed),
                                ("--executor", args.executor), ("--out", args.out)) if v is not None]
        if given:
            raise ConfigError(given[0], "cannot be given with --resume: the run keeps the settings it started with")
        out = args.resume
    else:
        _check_testbed_args(args, exp)
        out = args.out or _default_out(exp.name)
        _check_new_out(out)
    if args.register_timeout <= 0 or not args.register_timeout < 1e7:
        raise ConfigError("--register-timeout", "must be a positive number of seconds")
    keys = security.server_keys(args.keys) if args.keys is not None else None
    farewell = args.farewell
    if farewell is None:
        f = exp.failures
        tu = args.time_unit or exp.testbed.time_unit
        farewell = min(60.0, 2.0 + (5 * f.mean_down * tu if f is not None else 0.0))
    try:
        mapper = Mapper(exp, args.bind, duration=args.duration, time_unit=args.time_unit, seed=args.seed,
                        register_timeout=args.register_timeout, executor=args.executor,
                        progress=_progress_printer(not args.quiet), keys=keys, insecure=args.insecure, out=out,
                        resume=args.resume is not None, imports=tuple(args.imports), farewell=farewell)
    except ValueError as e:
        if type(e) is not ValueError:
            raise
        raise ConfigError("--resume" if args.resume is not None else "(mapper)", str(e)) from None
    _stop_on_signals(mapper)
    print(f"mgst mapper: listening on {mapper.endpoint} ({mapper.security}) for {len(exp.machines)} pullers "
          f"({', '.join(m.name for m in exp.machines)}); journal {out}/journal.sqlite", file=sys.stderr)
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
        print(f"wrote {out}/: journal.sqlite jobs.csv machines.csv summary.csv summary.json")
    _print_warnings(d)
    return 0


def _keys(args: argparse.Namespace) -> int:
    from mgst import security  # noqa: PLC0415

    if args.experiment is not None:
        names = [m.name for m in load_experiment(args.experiment).machines]
    else:
        names = args.pullers or []
    try:
        written = security.create_keys(args.folder, names, lab=args.lab, overwrite=args.force)
    except ValueError as e:
        raise ConfigError("--pullers", str(e)) from None
    f = args.folder
    print(f"wrote {len(written)} files into {f}/ ({'kept existing keys' if not written else 'new keys'})")
    print(f"  head node: mgst mapper FILE --keys {f}   (uses {f}/mapper.key_secret and {f}/authorized/*.key)")
    who = "each" if not args.lab else "every"
    key = "pullers/NAME.key_secret" if not args.lab else f"pullers/{security.LAB}.key_secret"
    print(f"  {who} lab machine: copy {f}/mapper.key and {f}/{key} into a folder KEYS there, then")
    print("    mgst puller --connect tcp://HEAD-NODE:5555 --machine NAME --keys KEYS")
    print("  secret keys (*.key_secret) are readable by their owner only: copy them over ssh, never by mail")
    return 0


def _export(args: argparse.Namespace) -> int:
    from mgst.export import export_run  # noqa: PLC0415
    from mgst.results import format_table  # noqa: PLC0415

    _, summary, d = export_run(args.folder)
    if args.json:
        print(json.dumps(d))
    else:
        print(format_table(summary))
        print(f"wrote {args.folder}/: jobs.csv machines.csv summary.csv summary.json")
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


def _sweep(args: argparse.Namespace) -> int:
    import importlib  # noqa: PLC0415
    import os  # noqa: PLC0415
    import signal  # noqa: PLC0415
    import time  # noqa: PLC0415

    from mgst.sweep import SweepError, run_sweep  # noqa: PLC0415
    from mgst.sweep_file import load_sweep  # noqa: PLC0415

    spec = load_sweep(args.file, quick=args.quick, replications=args.replications, only=args.only)
    if args.workers is not None and args.workers < 1:
        raise ConfigError("--workers", "must be >= 1")
    if args.workers is not None and args.scheduler is not None:
        raise ConfigError("--workers", "cannot be given with --scheduler: the cluster has its own workers")
    cell_fn = None
    if args.cell is not None:
        module, _, name = args.cell.partition(":")
        try:
            cell_fn = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError) as e:
            raise ConfigError("--cell", f"cannot load {args.cell!r}: {e}") from None
    out = args.out or Path("runs") / f"sweep-{spec.name}{'-quick' if args.quick else ''}"
    tty = sys.stderr.isatty()
    last = [0.0]

    def clock(s: float) -> str:
        s = int(s)
        return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"

    def progress(p) -> None:
        now = time.monotonic()
        if args.quiet or (not tty and now - last[0] < 10 and p.done < p.total):
            return
        last[0] = now
        eta = clock(p.eta) if p.eta is not None else "-"
        failed = f", {p.failed} failed" if p.failed else ""
        line = f"sweep {spec.name}: {p.done}/{p.total} cells{failed} | elapsed {clock(p.elapsed)} | ETA {eta}"
        print(f"\r{line:<90}" if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)

    def stop(signum, _frame) -> None:  # SIGTERM stops the sweep as Ctrl-C does
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    where = args.scheduler or f"{args.workers or os.cpu_count() or 1} local processes"
    if not args.quiet:
        print(f"mgst sweep: {spec.name} ({spec.scenario.name}), {len(spec.cells())} cells on {where}, into {out}/",
              file=sys.stderr)
    try:
        result = run_sweep(spec, out, workers=args.workers or os.cpu_count() or 1, scheduler=args.scheduler,
                           cell_fn=cell_fn, progress=progress, plots=not args.no_plots,
                           # the simulations' own warnings (jobs left at the drain limit: the unbounded
                           # column says it) would bury the progress line; -v shows them
                           worker_log_level=None if args.verbose else logging.ERROR)
    except KeyboardInterrupt:
        if tty and not args.quiet:
            print(file=sys.stderr)
        print(f"mgst: interrupted; finished cells are in {out}/sweep.csv: run the same command again to go on",
              file=sys.stderr)
        return 130
    except SweepError as e:
        if tty and not args.quiet:
            print(file=sys.stderr)
        print(f"mgst: error: {e}", file=sys.stderr)
        return 1
    if tty and not args.quiet:
        print(file=sys.stderr)
    r = result
    print(f"{spec.name}: {r.total} cells, {r.skipped} done before, {r.computed} run now ({len(r.failed)} failed) "
          f"in {r.elapsed:.1f} s")
    unbounded = [s for s in r.summary if s["unbounded"]]
    if unbounded:
        print(f"unbounded: {len(unbounded)} of {len(r.summary)} cells (summary.csv column 'unbounded')")
    for cell, message in r.failed[:5]:
        print(f"mgst: failed: {'/'.join(cell.key)}: {message}", file=sys.stderr)
    if len(r.failed) > 5:
        print(f"mgst: ... and {len(r.failed) - 5} more failed cells (sweep.csv column 'error'); they run again "
              "next time", file=sys.stderr)
    print(f"wrote {out}/: sweep.csv summary.csv" + (f" and {len(r.plots)} plots in plots/" if r.plots else ""))
    return 1 if r.failed else 0


def _simulate(args: argparse.Namespace) -> int:
    from mgst.results import write_summary_csv  # noqa: PLC0415 (keeps `mgst --help` fast)
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
    if args.horizon is not None:
        from mgst.config import check_run_length  # noqa: PLC0415

        check_run_length(exp, horizon, "--horizon")
    for key, ok, problem in (
        ("--horizon", horizon > 0, "must be > 0"),
        ("--warmup", 0 <= warmup < horizon, f"must be >= 0 and below the horizon ({horizon:g})"),
        ("--replications", reps >= 1, "must be >= 1"),
        ("--seed", args.seed is None or args.seed >= 0, "must be >= 0"),
        ("--workers", args.workers is None or args.workers >= 1, "must be >= 1"),
        ("--jobs", args.jobs is None or args.out is not None, "needs --out DIR (the folder to write the file into)"),
        ("--jobs", args.jobs != "parquet" or _parquet_available(), _parquet_missing()),
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

    if args.jobs is not None:  # say what it will take before it is taken (the rows go to disk as it runs)
        expected = round(sum(exp.arrival_rates) * horizon * reps)
        if expected:
            print(f"mgst: {_jobs_name(args.jobs)}: about {expected:,} rows expected, {_jobs_estimate(expected)}",
                  file=sys.stderr)
    parts = None
    if args.out is not None:
        import tempfile  # noqa: PLC0415

        args.out.mkdir(parents=True, exist_ok=True)
        if args.jobs is not None:
            parts = Path(tempfile.mkdtemp(prefix=".jobs-", dir=args.out))
    try:
        summary, results = run_simulation(
            exp, horizon=horizon, warmup=warmup, replications=reps, seed=args.seed,
            keep_bag_rows=args.out is not None, jobs_dir=parts, workers=args.workers, progress=progress,
            imports=tuple(args.imports),
        )
        if show:
            print(file=sys.stderr)
        written = []
        if args.out is not None:
            write_summary_csv(args.out / "summary.csv", summary)
            written.append("summary.csv")
            if summary.bags is not None:
                from mgst.bot_metrics import write_bags_csv  # noqa: PLC0415

                write_bags_csv(args.out / "bags.csv", (row for r in results if r.bags for row in r.bags.rows))
                written.insert(0, "bags.csv")
            if parts is not None:
                written.insert(0, _write_simulated_jobs(args.out, args.jobs, parts, reps, summary.jobs_simulated))
            _note_jobs_files(args.out, args.jobs, summary.jobs_simulated)
    finally:
        if parts is not None:
            import shutil  # noqa: PLC0415

            shutil.rmtree(parts, ignore_errors=True)
    if args.json:
        print(json.dumps(summary.as_dict()))
    else:
        from mgst.results import format_table  # noqa: PLC0415

        print(format_table(summary))
        if args.out is not None:
            print(f"wrote {_listing(written)} in {args.out}")
    return 0


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
    from mgst.simulate import jobs_part  # noqa: PLC0415

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


if __name__ == "__main__":
    sys.exit(main())
