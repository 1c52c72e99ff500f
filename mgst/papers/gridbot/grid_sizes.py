"""Each grid's size over time under GridBot's overlay (grids with ``start_hosts``): one simulated replication's hosts
up per grid at chosen times, as a table, and a PNG beside the bags' incomplete jobs.

``python -m mgst.papers.gridbot.grid_sizes experiments/gridbot/overlay.toml [--replication R] [--every S] [--png P]``
prints the table (docs/reproduction-gridbot.md, "A grid's size over time"); ``--costs N`` prints instead each bag's
turnaround and the host-hours up over N replications, for the file and its variants.
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mgst.model import Experiment
from mgst.sim.loop import Simulation
from mgst.sim.overlay import GridSample

HOUR = 3600.0


@dataclass(frozen=True)
class SizeRun:
    """One replication's grid sizes (the overlay's samples, by grid, in time order), its bags' incomplete jobs over
    time ((time, incomplete) steps per bag, from its completions), and the time the run ended."""

    samples: dict[str, list[GridSample]]
    incomplete: dict[int, list[tuple[float, int]]]
    end: float


def simulate_sizes(experiment: Experiment, replication: int = 0) -> SizeRun:
    """Run one replication and keep its grids' sizes; ValueError if no grid of it has a size (``start_hosts``)."""
    sim = Simulation(experiment, replication=replication)
    if not sim.overlay_grids:
        raise ValueError("no grid of this experiment grows with the overlay: give a grid start_hosts "
                         "([availability] kind = \"grids\")")
    run = sim.run()
    overlay = sim.overlay
    assert overlay is not None
    samples: dict[str, list[GridSample]] = {g.name: [] for g in overlay.grids}
    for s in overlay.samples:
        samples[s.grid].append(s)
    incomplete: dict[int, list[tuple[float, int]]] = {}
    for bag in run.bags:
        ends = sorted(rec.completed for rec in run.jobs if rec.bag is bag and rec.completed is not None)
        steps = [(bag.submitted, bag.size)] + [(t, bag.size - i - 1) for i, t in enumerate(ends)]
        incomplete[bag.id] = steps
    return SizeRun(samples, incomplete, run.end_time)


def up_at(samples: Sequence[GridSample], t: float) -> int:
    """The grid's hosts up at its last sample at or before ``t`` (0 before the first)."""
    i = bisect.bisect_right([s.time for s in samples], t)
    return samples[i - 1].up if i else 0


def incomplete_at(steps: Sequence[tuple[float, int]], t: float) -> int | None:
    """A bag's incomplete jobs at ``t`` (None before it arrived)."""
    i = bisect.bisect_right([s[0] for s in steps], t)
    return steps[i - 1][1] if i else None


def size_table(run: SizeRun, times: Sequence[float]) -> str:
    """A Markdown table: per time (hours), each sized grid's hosts up and each bag's incomplete jobs."""
    grids = list(run.samples)
    bags = sorted(run.incomplete)
    head = ["hour", *grids, *(f"bag {b} incomplete" for b in bags)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in times:
        cells = [f"{t / HOUR:g}"] + [str(up_at(run.samples[g], t)) for g in grids]
        for b in bags:
            n = incomplete_at(run.incomplete[b], t)
            cells.append("-" if n is None else f"{n:,}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# The variants of an overlay file the cost table sets beside it: the grids' sizes as the file gives them, every grid
# with all its hosts from the start, and one size parameter changed.
COST_VARIANTS: tuple[tuple[str, dict[str, Any] | None], ...] = (
    ("overlay (the file)", {}),
    ("fixed (no `start_hosts`)", None),
    ("`idle_leave = 60`", {"idle_leave": 60.0}),
    ("`idle_leave = 3600`", {"idle_leave": 3600.0}),
    ("`request_every` x 4", {"request_every": 4.0}),
)


def with_sizes(experiment: Experiment, change: dict[str, Any] | None) -> Experiment:
    """The file's sized grids changed: ``None`` drops their sizes (all hosts from the start); ``request_every`` is a
    factor, ``idle_leave`` a value."""
    spec = experiment.failures
    grids = []
    for g in spec.grids:  # type: ignore[union-attr]
        if g.size is not None:
            if change is None:
                g = dataclasses.replace(g, size=None)
            else:
                size = g.size
                if "idle_leave" in change:
                    size = dataclasses.replace(size, idle_leave=change["idle_leave"])
                if "request_every" in change:
                    size = dataclasses.replace(size, request_every=size.request_every * change["request_every"])
                g = dataclasses.replace(g, size=size)
        grids.append(g)
    return dataclasses.replace(experiment, failures=dataclasses.replace(spec, grids=tuple(grids)))


def cost_table(experiment: Experiment, replications: int) -> str:
    """A Markdown table: per variant (COST_VARIANTS), each bag's turnaround (mean ± sd over ``replications``), the
    host-hours up on the file's sized grids, and the share of them busy."""
    sized = {j for g in Simulation(experiment).overlay_grids for j in g.machines}
    if not sized:
        raise ValueError("no grid of this experiment grows with the overlay: give a grid start_hosts")
    n_bags = 0
    rows = []
    for label, change in COST_VARIANTS:
        exp = with_sizes(experiment, change)
        turnarounds: dict[int, list[float]] = {}
        up = busy = 0.0
        for r in range(replications):
            sim = Simulation(exp, replication=r)
            run = sim.run()
            for bag in run.bags:
                if bag.completed is not None:
                    turnarounds.setdefault(bag.id, []).append(bag.completed - bag.submitted)
            for j in sized:
                st = sim.core.machines[j].stats
                up += st.up_time
                busy += st.busy_time
        n_bags = max(n_bags, len(turnarounds))
        cells = [f"{statistics.mean(ts) / HOUR:.2f} ± {statistics.stdev(ts) / HOUR if len(ts) > 1 else 0.0:.2f} h"
                 for _, ts in sorted(turnarounds.items())]
        rows.append((label, cells, up / HOUR / replications, busy / up if up else 0.0))
    head = ["grids", *(f"bag {b} turnaround" for b in range(n_bags)), "host-hours up", "busy / up"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, cells, hours, share in rows:
        lines.append("| " + " | ".join([label, *cells, f"{hours:,.0f}", f"{share:.2f}"]) + " |")
    return "\n".join(lines)


def write_png(run: SizeRun, path: Path, title: str) -> Path:
    """Hosts up per grid against hours (top) and incomplete jobs per bag (bottom)."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.5, 5.4), sharex=True)
    for name, samples in run.samples.items():
        top.step([s.time / HOUR for s in samples], [s.up for s in samples], where="post", label=name)
    top.set_ylabel("hosts up")
    top.legend(fontsize=8)
    top.set_title(title, fontsize=10)
    for b, steps in sorted(run.incomplete.items()):
        bottom.step([t / HOUR for t, _ in steps], [n for _, n in steps], where="post", label=f"bag {b}")
    bottom.set_ylabel("incomplete jobs")
    bottom.set_xlabel("hours")
    bottom.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """The command: the table of an experiment file's grid sizes (``error:`` and exit 2 for bad input)."""
    from mgst.config import ConfigError, load_experiment  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m mgst.papers.gridbot.grid_sizes",
                                     description="Each grid's hosts up over time under GridBot's overlay.")
    parser.add_argument("file", help="an experiment file with grids that have start_hosts")
    parser.add_argument("--replication", type=int, default=0)
    parser.add_argument("--every", type=float, default=HOUR, help="table rows this many time units apart")
    parser.add_argument("--png", type=Path, help="also draw the sizes and the bags' incomplete jobs here")
    parser.add_argument("--costs", type=int, metavar="N",
                        help="instead, the cost table: each bag's turnaround and the host-hours up over N "
                             "replications, for the file and its variants (fixed grids, idle_leave, request_every)")
    args = parser.parse_args(argv)
    if (not 0 <= args.replication < 10_000 or not 1.0 <= args.every <= 1e9
            or (args.costs is not None and not 1 <= args.costs <= 1000)):
        print("error: --replication must be in [0, 10000), --every in [1, 1e9] and --costs in [1, 1000]",
              file=sys.stderr)
        return 2
    try:
        experiment = load_experiment(args.file)
        if args.costs is not None:
            print(cost_table(experiment, args.costs))
            return 0
        run = simulate_sizes(experiment, args.replication)
    except (ConfigError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    times = [k * args.every for k in range(int(run.end // args.every) + 2)]
    print(size_table(run, times))
    if args.png is not None:
        print(f"wrote {write_png(run, args.png, experiment.name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
