"""`mgst sweep` and `mgst paper`: grids of simulations, and the MGST paper's settings beside its tables."""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from pathlib import Path

from mgst.cli.options import (
    OFF_TERMINAL_EVERY_S,
    check_experiments_folder,
    check_folder,
    check_horizon_warmup,
    check_seed,
    file_digest,
    folder_name,
    import_policies,
    lengths_not_simulated,
    sweep_made_by,
)
from mgst.config import MAX_REPLICATIONS, MAX_WORKERS, ConfigError, load_experiment
from mgst.wording import plural

# The memory of a Slurm worker job when --slurm-memory is not given.
SLURM_MEMORY = "2GB"


def _finite(x: float | None) -> float | None:
    """``x``, or None where JSON has no number for it (NaN, an infinity)."""
    return x if x is not None and math.isfinite(x) else None


def paper_command(args: argparse.Namespace) -> int:
    from mgst.config.checks import check_run_length  # noqa: PLC0415
    from mgst.intervals import BATCHES  # noqa: PLC0415
    from mgst.papers.mgst.tables import PAPER, agrees, deviation  # noqa: PLC0415
    from mgst.results import REPLICATIONS  # noqa: PLC0415
    from mgst.sim.replications import run_simulation  # noqa: PLC0415

    import_policies(args)
    names = args.settings or list(PAPER)
    unknown = [n for n in names if n not in PAPER]
    if unknown:
        print(f"mgst: error: not a setting of the paper: {', '.join(unknown)}; known: {', '.join(PAPER)}",
              file=sys.stderr)
        return 2
    twice = [n for k, n in enumerate(names) if n in names[:k]]
    if twice:  # (it was simulated and printed twice)
        print(f"mgst: error: setting {twice[0]} is given twice", file=sys.stderr)
        return 2
    check_experiments_folder(args.experiments)
    check_seed("--seed", args.seed)
    for key, value, least, most in (("--replications", args.replications, 1, MAX_REPLICATIONS),
                                    ("--workers", args.workers, 1, MAX_WORKERS)):
        if value is not None and value < least:
            raise ConfigError(key, f"must be >= {least}")
        if value is not None and most is not None and value > most:
            raise ConfigError(key, f"must be at most {most:,}")
    given = lengths_not_simulated(args.horizon)
    experiments = {name: load_experiment(args.experiments / f"{name}.toml", lengths_not_used=given) for name in names}
    for exp in experiments.values():  # every setting checked before the first is simulated
        s = exp.simulation
        if args.horizon is not None:
            check_run_length(exp, args.horizon, "--horizon")
        check_horizon_warmup(s.horizon if args.horizon is None else args.horizon,
                             s.warmup if args.warmup is None else args.warmup,
                             args.horizon is not None, args.warmup is not None)
    report = []
    for name in names:
        exp = experiments[name]
        summary, _ = run_simulation(exp, horizon=args.horizon, warmup=args.warmup,
                                    replications=args.replications, seed=args.seed, workers=args.workers,
                                    imports=tuple(args.imports))
        paper = PAPER[name]
        rows = []
        for label, est, interval in zip(
            [*summary.class_names, "Overall"], [*summary.classes, summary.overall], paper.simulation
        ):
            counted = est.jobs > 0  # (no job counted: no figure to set beside the paper's, in or out)
            rows.append({"class": label, "mgst": est.mean, "ci95": [est.low, est.high], "paper": list(interval),
                         "deviation": deviation(est.mean, interval),
                         "agrees": agrees(est.mean, interval) if counted else None})
        # what reruns it: the seed and warm-up with the horizon and replications, and the file's digest (an edited
        # file of the same name runs other jobs)
        report.append({"setting": name, "table": paper.table, "note": paper.note, "rows": rows,
                       "replications": summary.replications, "horizon": summary.horizon, "warmup": summary.warmup,
                       "seed": summary.seed, "experiment_sha256": file_digest(args.experiments / f"{name}.toml")})
        if summary.interval != REPLICATIONS:  # (one replication: batch means, as mgst simulate --json says it)
            report[-1]["interval"] = f"{summary.interval} ({BATCHES} windows of equal model time of the counted jobs)"
        # The paper's figures are LPAS_DG's: a file of --experiments running another policy is set beside them,
        # saying so (the same words in --json, where the paper's own files write no such key)
        other = "" if exp.policy.name == "lpas_dg" else f"{exp.policy.name}, beside the paper's lpas_dg"
        if other:
            report[-1]["policy"] = other
        if not args.json:
            print(f"{name} (paper Table {paper.table}): {plural(summary.replications, 'replication')} x "
                  f"{summary.horizon:g} time units (warm-up {summary.warmup:g}), seed {summary.seed}"
                  + (f"; {other}" if other else ""))
            method = (f" ({summary.interval} of up to {BATCHES} windows)"  # (a window with no job counted has none)
                      if summary.interval != REPLICATIONS else "")
            heading = "95 % CI" + method
            width = max(18, len(heading) + 2)  # (the interval's column: its heading, or "(no job counted)")
            print(f"  {'class':<8}{'mgst':>8}  {heading:<{width}}{'paper':<14}{'off':>7}")
            for r in rows:
                lo, hi = r["ci95"]
                interval = (f"({lo:.3f}, {hi:.3f})" if not math.isnan(lo) else
                            "(no job counted)" if r["agrees"] is None else "(too few reps)" if not method
                            else "(too few batches)")  # (that counted jobs of the class)
                mine, off = ((f"{r['mgst']:>8.3f}", f"{r['deviation']:>+6.1%}") if r["agrees"] is not None
                             else (f"{'n/a':>8}", f"{'':>6}"))
                print(f"  {r['class']:<8}{mine}  {interval:<{width}}({r['paper'][0]:.2f}, {r['paper'][1]:.2f})  {off}"
                      f"{'  <- outside' if r['agrees'] is False else ''}")
            if paper.note:
                print(f"  note: {paper.note}")
    if args.json:  # (JSON has no NaN: an interval of one replication, say, is null)
        print(json.dumps({"settings": [{**setting, "rows": [{**r, "mgst": _finite(r["mgst"]),
                                                             "ci95": [_finite(x) for x in r["ci95"]],
                                                             "deviation": _finite(r["deviation"])}
                                                            for r in setting["rows"]]}
                                       for setting in report]}, allow_nan=False))
    else:
        bad = sum(r["agrees"] is False for s in report for r in s["rows"])
        total = sum(len(s["rows"]) for s in report)
        missing = sum(r["agrees"] is None for s in report for r in s["rows"])
        print(f"{bad} of {plural(total, 'figure')} outside the paper's interval and 5 % of its midpoint"
              + (f"; {missing} without a figure (no job counted: lengthen --horizon)" if missing else ""))
    return 0


def sweep_command(args: argparse.Namespace) -> int:
    import importlib  # noqa: PLC0415
    import os  # noqa: PLC0415
    import signal  # noqa: PLC0415
    import time  # noqa: PLC0415

    from mgst.sweep import SweepError, run_sweep  # noqa: PLC0415
    from mgst.sweep.spec import load_sweep  # noqa: PLC0415

    import_policies(args)
    if args.out is not None:
        check_folder("--out", args.out)
    spec = load_sweep(args.file, quick=args.quick, replications=args.replications, only=args.only,
                      options=args.option)
    if args.workers is not None and not 1 <= args.workers <= MAX_WORKERS:
        raise ConfigError("--workers", "must be >= 1" if args.workers < 1 else f"must be at most {MAX_WORKERS:,}")
    if args.workers is not None and args.scheduler is not None:
        raise ConfigError("--workers", "cannot be given with --scheduler: the cluster has its own workers")
    slurm = None
    if args.slurm is not None:
        from mgst.sweep.slurm_workers import SlurmWorkers  # noqa: PLC0415

        if args.workers is not None or args.scheduler is not None:
            raise ConfigError("--slurm", "cannot be given with --workers or --scheduler: its jobs are the workers")
        slurm = SlurmWorkers(args.slurm, args.slurm_partition, args.slurm_time, args.slurm_account,
                             args.slurm_memory or SLURM_MEMORY, tuple(args.slurm_option)).check()
    elif any(getattr(args, o) for o in ("slurm_partition", "slurm_time", "slurm_account", "slurm_memory",
                                         "slurm_option")):
        raise ConfigError("--slurm", "the --slurm-... options need --slurm JOBS")
    if args.scheduler is not None:
        from mgst.sweep.dask_engine import check_scheduler  # noqa: PLC0415

        check_scheduler(args.scheduler)
    cell_fn = None
    if args.cell is not None:
        module, _, name = args.cell.partition(":")
        try:
            cell_fn = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError) as e:
            raise ConfigError("--cell", f"cannot load {args.cell!r}: {e}") from None
    if args.imports:  # each worker imports them before its cells (a spawned or a Dask worker has not)
        import functools  # noqa: PLC0415

        from mgst.sweep.runner import default_cell  # noqa: PLC0415

        cell_fn = functools.partial(_cell_with_imports, tuple(args.imports),
                                    cell_fn or spec.scenario.cell or default_cell)
    out = args.out or Path("runs") / f"sweep-{folder_name(spec.name)}{'-quick' if args.quick else ''}"
    tty = sys.stderr.isatty()
    last = [0.0]

    def clock(s: float) -> str:
        s = int(s)
        return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"

    def progress(p) -> None:
        now = time.monotonic()
        if args.quiet or (not tty and now - last[0] < OFF_TERMINAL_EVERY_S and p.done < p.total):
            return
        last[0] = now
        eta = clock(p.eta) if p.eta is not None else "-"
        failed = f", {p.failed} failed" if p.failed else ""
        line = f"sweep {spec.name}: {p.done}/{plural(p.total, 'cell')}{failed} | elapsed {clock(p.elapsed)} | ETA {eta}"
        print(f"\r{line:<90}" if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)

    def stop(signum, _frame) -> None:  # SIGTERM stops the sweep as Ctrl-C does
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    where = (plural(args.slurm, "Slurm worker job") if slurm is not None else args.scheduler) or plural(
        args.workers or os.cpu_count() or 1, "local process", "local processes")
    if not args.quiet:
        print(f"mgst sweep: {spec.name} ({spec.scenario.name}), {plural(len(spec.cells()), 'cell')} on {where}, "
              f"into {out}/",
              file=sys.stderr)
    try:
        result = run_sweep(spec, out, workers=args.workers or os.cpu_count() or 1, scheduler=args.scheduler,
                           cell_fn=cell_fn, cell_name=args.cell, progress=progress, plots=not args.no_plots,
                           slurm=slurm, made_by=sweep_made_by(args.file, args.quick),
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
    except OSError as e:  # (a file of the folder that cannot be written: read-only, the disk full)
        if tty and not args.quiet:
            print(file=sys.stderr)
        print(f"mgst: error: cannot write {e.filename or out}: {e.strerror or e}; the cells finished are kept in "
              f"{out}/sweep.csv: once it can be written, run the same command again to go on", file=sys.stderr)
        return 1
    if tty and not args.quiet:
        print(file=sys.stderr)
    r = result
    print(f"{spec.name}: {plural(r.total, 'cell')}, {r.skipped} done before, {r.computed} run now "
          f"({len(r.failed)} failed) "
          f"in {r.elapsed:.1f} s")
    unbounded = [s for s in r.summary if s["unbounded"]]
    if unbounded:
        print(f"unbounded: {len(unbounded)} of {plural(len(r.summary), 'setting')} (a row of summary.csv: the cells "
              "of one setting over its replications; column 'unbounded')")
    undecided = [s for s in r.summary if s["undecided"]]
    if undecided:
        print(f"undecided at this horizon: {len(undecided)} of {plural(len(r.summary), 'setting')} (their backlog "
              "grows over a window too short to tell; summary.csv column 'verdict'; run a longer horizon)")
    for cell, message in r.failed[:5]:
        print(f"mgst: failed: {'/'.join(cell.key)}: {message}", file=sys.stderr)
    if len(r.failed) > 5:
        print(f"mgst: ... and {len(r.failed) - 5} more failed cells (sweep.csv column 'error'); they run again "
              "next time", file=sys.stderr)
    print(f"wrote {out}/: sweep.csv summary.csv{_plots_written(r.plots, out)}")
    return 1 if r.failed else 0


def _plots_written(plots: list[Path], out: Path) -> str:
    """" and N plots in plots/", then the files a scenario writes beside sweep.csv (a paper's tables and figures), by
    name: where each really is (Casanova's were counted as plots in plots/, which stayed empty)."""
    from mgst.sweep.runner import PLOTS  # noqa: PLC0415

    in_plots = [p for p in plots if p.parent == out / PLOTS]
    text = f" and {plural(len(in_plots), 'plot')} in {PLOTS}/" if in_plots else ""
    beside = [str(p.relative_to(out)) if p.is_relative_to(out) else str(p) for p in plots if p not in in_plots]
    return text + (f"{',' if text else ' and'} {' '.join(beside)}" if beside else "")


def _cell_with_imports(imports: tuple[str, ...], cell_fn, experiment, replication: int):
    """In a sweep's worker: import the --import modules (their policies registered), then compute the cell."""
    from mgst import policies  # noqa: PLC0415

    policies.import_modules(imports)
    return cell_fn(experiment, replication)
