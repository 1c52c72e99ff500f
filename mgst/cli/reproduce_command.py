"""`mgst reproduce PAPER [--quick]`: run a paper's slice with the sweep runner or the simulator, print each claim's
verdict (mgst.papers.reproduction holds what each paper runs and how it judges)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mgst.cli.options import check_experiments_folder, check_folder, file_digest, sweep_made_by
from mgst.config import MAX_WORKERS, ConfigError, load_experiment
from mgst.papers import reproduction
from mgst.papers.reproduction import NOT_CHECKED, VERDICTS, Claim, Reproduction, SimulationSlice, SweepSlice
from mgst.wording import plural

SLICE_FILE = "slice.json"  # a simulation slice's settings, beside its summary.json: what a rerun may skip


def add_reproduce_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paper", nargs="?", metavar="PAPER",
                   help="the paper whose claims to check (mgst, anglano, kondo, ...); without it, list them")
    p.add_argument("--quick", action="store_true", help="a smaller slice (seconds), deciding fewer claims")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="output folder; the same command again skips what is done (default: runs/reproduce-PAPER, "
                        "or runs/reproduce-PAPER-quick)")
    p.add_argument("--experiments", type=Path, default=Path("experiments"), metavar="DIR",
                   help="folder of the experiment and sweep files (default: experiments)")
    p.add_argument("--workers", type=int, help="local processes (default: one per core)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="set one of the sweep scenario's options over its file's (repeatable; a TOML value), "
                        "e.g. --option 'credit=\"none\"' for a reading the paper's reproduction doc compares; "
                        "papers whose slices are sweeps only")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")


def reproduce_command(args: argparse.Namespace) -> int:
    if args.paper is None:
        return _list()
    if args.paper not in reproduction.names():
        raise ConfigError("PAPER", f"no reproduction of {args.paper!r}; known: {', '.join(reproduction.names())}")
    if args.workers is not None and not 1 <= args.workers <= MAX_WORKERS:
        raise ConfigError("--workers", "must be >= 1" if args.workers < 1 else f"must be at most {MAX_WORKERS:,}")
    check_experiments_folder(args.experiments)
    repro = reproduction.get(args.paper)
    slices = repro.quick_slices if args.quick else repro.slices
    options = tuple(args.option)
    if options and not all(isinstance(s, SweepSlice) for s in slices):
        raise ConfigError("--option", f"{repro.name}'s reproduction simulates experiment files, whose settings are "
                                      "not options: --option sets a sweep scenario's options")
    out = args.out or Path("runs") / (f"reproduce-{repro.name}{'-quick' if args.quick else ''}"
                                      + "".join(f"-{_slug(o)}" for o in options))
    check_folder("--out", out)
    loaded = [_load(s, args.experiments, options) for s in slices]  # every file checked before any work
    workers = args.workers or os.cpu_count() or 1
    say = (lambda text: None) if args.quiet else (lambda text: print(f"mgst reproduce: {text}", file=sys.stderr))

    def stop(signum, _frame) -> None:  # SIGTERM stops the run as Ctrl-C does (what finished is kept)
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGTERM, stop)
    try:
        return _reproduce(args, repro, out, loaded, workers, say)
    finally:
        signal.signal(signal.SIGTERM, before)


def _reproduce(args: argparse.Namespace, repro: Reproduction, out: Path, loaded: list[Any], workers: int,
               say: Callable[[str], None]) -> int:
    """Run the slices not yet done into ``out``, then judge and print the claims."""
    slices = repro.quick_slices if args.quick else repro.slices
    options = tuple(args.option)
    t0 = time.perf_counter()
    failed: list[str] = []
    minutes = repro.quick_minutes if args.quick else repro.minutes
    say(f"{repro.name}{' --quick' if args.quick else ''}: {plural(len(slices), 'slice')} on "
        f"{plural(workers, 'local process', 'local processes')}, into {out}/ ({minutes} on 2 cores)")
    try:
        for s, what in zip(slices, loaded):
            if isinstance(s, SweepSlice):
                failed += _run_sweep(s, what, out / s.name, workers, say, args.verbose, options, str(args.experiments))
            else:
                _run_simulation(s, what, out / s.name, workers, say, str(args.experiments))
    except KeyboardInterrupt:
        print(f"mgst: interrupted; what finished is kept in {out}/: run the same command again to go on",
              file=sys.stderr)
        return 130
    except _SliceFailed as e:
        print(f"mgst: error: {e}", file=sys.stderr)
        return 1
    claims = _in_folder(repro.judge({s.name: out / s.name for s in slices}), str(args.experiments))
    print(f"{repro.title}")
    commands = repro.commands(args.quick, options, str(args.experiments))
    print(f"{'--quick slice' if args.quick else 'slice'}: " + "; ".join(f"`{c}`" for c in commands)
          + f"; {time.perf_counter() - t0:.0f} s, results in {out}/")
    for c in claims:
        print("\n".join(c.lines()))
    counts = {v: sum(c.verdict == v for c in claims) for v in VERDICTS}
    print(f"{plural(len(claims), 'claim')}: " + ", ".join(f"{v} {n}" for v, n in counts.items() if n)
          + (f" ({repro.doc} has the full runs)" if counts[NOT_CHECKED] else ""))
    for message in failed[:5]:
        print(f"mgst: failed: {message}", file=sys.stderr)
    if failed:
        print(f"mgst: {plural(len(failed), 'cell')} failed (sweep.csv column 'error'): they run again next time; "
              "the verdicts above are without them", file=sys.stderr)
        return 1
    return 0


def _in_folder(claims: list[Claim], folder: str) -> list[Claim]:
    """``claims`` with the commands their figures give (the full runs: `mgst sweep experiments/...`) in the folder of
    --experiments, as the slice's own commands are: pasted from elsewhere, `experiments/...` is no file."""
    if folder == "experiments":
        return claims

    def moved(figure: str) -> str:
        figure = figure.replace("mgst sweep experiments/", f"mgst sweep {folder}/")
        return re.sub(r"`mgst paper ([^`]*)`", lambda m: f"`mgst paper {m.group(1)} --experiments {folder}`", figure)

    return [dataclasses.replace(c, figure=moved(c.figure)) for c in claims]


class _SliceFailed(RuntimeError):
    """A slice could not be run to its end (a sweep's worker process died); what finished is kept."""


def _list() -> int:
    for name in reproduction.names():
        r = reproduction.get(name)
        print(f"{name}: {r.title}")
        print(f"  `mgst reproduce {name}` ({r.minutes} on 2 cores): {r.checks}")
        print(f"  `mgst reproduce {name} --quick` ({r.quick_minutes}): " + ", ".join(r.commands(quick=True)))
        print(f"  full runs: {r.doc}")
    return 0


def _slug(option: str) -> str:
    """KEY=VALUE as a folder name's part: credit="none" -> credit-none."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "", option.replace("=", "-", 1))[:40] or "option"


def _load(s: SweepSlice | SimulationSlice, experiments: Path, options: tuple[str, ...] = ()) -> Any:
    """The slice's sweep spec or experiment, read and checked (a ConfigError names the file and key)."""
    path = experiments / s.file
    if not path.is_file():
        raise ConfigError("--experiments", f"{path} is not a file: the folder must hold the repository's "
                                           "experiments/ files")
    if isinstance(s, SweepSlice):
        from mgst.sweep.spec import load_sweep  # noqa: PLC0415

        return load_sweep(path, quick=s.quick, replications=s.replications, only=s.only, options=options)
    experiment = load_experiment(path)
    if s.policy is not None and experiment.policy.name != s.policy:
        raise ConfigError("--experiments", f"{path} runs policy {experiment.policy.name!r}; this reproduction judges "
                                           f"{s.policy}'s claims on it: give the paper's file")
    return experiment


def _run_sweep(s: SweepSlice, spec: Any, folder: Path, workers: int, say, verbose: int,
               options: tuple[str, ...] = (), experiments: str = "experiments") -> list[str]:
    """The sweep slice's cells not yet in ``folder/sweep.csv``, run; the failed cells' messages."""
    from mgst.sweep import SweepError, run_sweep  # noqa: PLC0415

    last = [0.0]

    def progress(p) -> None:
        now = time.monotonic()
        if now - last[0] >= 10 or p.done == p.total:
            last[0] = now
            say(f"{s.name}: {p.done}/{plural(p.total, 'cell')}, {p.elapsed:.0f} s")

    say(f"{s.name}: `{s.command(options, experiments)}` into {folder}/")
    try:
        result = run_sweep(spec, folder, workers=workers, progress=progress, plots=False,
                           worker_log_level=None if verbose else logging.ERROR,
                           made_by=sweep_made_by(Path(experiments) / s.file, s.quick))
    except SweepError as e:  # a worker died: not the user's input, and the cells finished are kept
        raise _SliceFailed(f"{s.name}: {e}") from None
    return [f"{'/'.join(cell.key)}: {message}" for cell, message in result.failed]


def _run_simulation(s: SimulationSlice, experiment: Any, folder: Path, workers: int, say,
                    experiments: str = "experiments") -> None:
    """The simulation slice into ``folder/summary.json``, unless it holds one of the same settings."""
    from mgst.sim.replications import run_simulation  # noqa: PLC0415

    # (the file's content too: a slice run on an edited file, or another --experiments folder's, is not done)
    digest = file_digest(Path(experiments) / s.file)
    wanted = {"file": s.file, "sha256": digest, **s.overrides()}
    done = folder / SLICE_FILE
    if (folder / "summary.json").is_file() and done.is_file():
        try:
            if json.loads(done.read_text(encoding="utf-8")) == wanted:
                say(f"{s.name}: done before")
                return
        except ValueError:
            pass
    overrides = s.overrides()
    reps = overrides.get("replications", experiment.simulation.replications)
    t0 = time.perf_counter()
    summary, _ = run_simulation(experiment, workers=min(workers, int(reps)), **overrides)
    folder.mkdir(parents=True, exist_ok=True)
    _write(folder / "summary.json", json.dumps(summary.as_dict(), indent=1) + "\n")
    _write(done, json.dumps(wanted) + "\n")  # last: a run stopped before it is done again
    say(f"{s.name}: `{s.command(experiments)}` {time.perf_counter() - t0:.1f} s")


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
