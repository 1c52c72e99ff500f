"""Each grid's size over time under GridBot's overlay (grids with ``start_hosts``): one simulated replication's hosts
up per grid at chosen times, as a table, and a PNG beside the bags' incomplete jobs.

``python -m mgst.papers.gridbot.grid_sizes experiments/gridbot/overlay.toml [--replication R] [--every S] [--png P]``
prints the table (docs/reproduction-gridbot.md, "A grid's size over time").
"""

from __future__ import annotations

import argparse
import bisect
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

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
    args = parser.parse_args(argv)
    if not 0 <= args.replication < 10_000 or not 1.0 <= args.every <= 1e9:
        print("error: --replication must be in [0, 10000) and --every in [1, 1e9]", file=sys.stderr)
        return 2
    try:
        experiment = load_experiment(args.file)
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
