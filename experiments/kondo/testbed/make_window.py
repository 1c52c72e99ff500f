"""Write this folder's Kondo testbed experiments: one window of an SDSC-like platform (mgst.traces) for N hosts,
and one experiment file per policy, each one bag of T tasks of S minutes submitted after H seconds of history.

The platform is a folder written by ``mgst traces generate`` (``--platform``), or, by default, the one that
``mgst traces generate sdsc --seed 1`` writes (220 hosts, 28 days), generated here; its first N hosts are kept.

The trace window (``window.csv``) holds the N hosts' intervals clipped to [start - H, start - H + WINDOW) in
trace seconds (a trace starts on a Monday 00:00); the experiment files replay it from ``offset = start - H``, so
model time H is the business-hours instant ``start``. After the window a host is up at its a_j, on the testbed
and in the simulation alike. Each host's machine power is clock_ghz / 1.5 (a 1.5 GHz host does a task of size
300, 5 minutes, in 300 s), and its clock rate is the attribute clock_ghz. Usage, from the repository root:

    mgst traces generate sdsc --out /tmp/sdsc --seed 1          # (or let this script generate it)
    MGST_PURE=1 python experiments/kondo/testbed/make_window.py --platform /tmp/sdsc [--hosts 32] [--start 122400]

then ``mgst run experiments/kondo/testbed/fcfs.toml`` (run_testbed.py runs every policy and tabulates).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))  # this tree's mgst, whatever the current folder

from mgst.availability.trace_files import Interval, write_csv_trace  # noqa: E402
from mgst.traces.platform import generate_platform, read_platform  # noqa: E402

DAY = 86400.0
REFERENCE_GHZ = 1.5  # a machine's power is its clock rate over this (the seed's "dedicated 1.5 GHz host")
# Trace seconds of the default start: Tuesday 10:00, an hour into the second business day.
TUESDAY_10 = DAY + 10 * 3600.0
# How much of the trace the window keeps after the history starts (s): longer than any makespan these
# experiments reach (about 2,000 s for 5-minute tasks), so every failure of the run comes from the trace.
WINDOW = 4 * 3600.0
# The hosts of the platform generated (mgst traces generate's default): the window keeps the first N of them.
PLATFORM_HOSTS = 220
PLATFORM_DAYS = 28
# [testbed] duration (wall s): generation ends with the bag anyway; this bound only has to come after it, at
# any time unit a user gives (--time-unit 0.1 puts the bag at 30 s of wall time).
DURATION = 60.0
# The policies, with the [policy] table each file gets (name first).
POLICIES = {"fcfs": {"name": "fcfs"}, "excl-pred-to": {"name": "excl_pred_to"}}


def clip(intervals: list[Interval], start: float, end: float) -> list[Interval]:
    """The intervals cut to [start, end)."""
    return [Interval(max(iv.start, start), min(iv.end, end), iv.state, iv.share)
            for iv in intervals if iv.end > start and iv.start < end]


def experiment_text(name: str, policy: dict[str, str], clocks: dict[str, float], offset: float, history: float,
                    tasks: int, size: float, time_unit: float, seed: int) -> str:
    powers = ", ".join(f"{c / REFERENCE_GHZ:.6g}" for c in clocks.values())
    names = ", ".join(f'"{h}"' for h in clocks)
    ghz = ", ".join(f"{c:g}" for c in clocks.values())
    bag = ", ".join(f"[0, {size:g}]" for _ in range(tasks))
    table = "\n".join(f'{k} = "{v}"' for k, v in policy.items())
    n = len(clocks)
    return f"""# A Kondo application on the testbed (docs/testbed.md, "Kondo application on the testbed"): {n}
# hosts of an SDSC-like platform replay window.csv, one bag of {tasks} tasks of {size / 60:g} minutes arrives
# after {history:g} s of history. Written by make_window.py; `mgst run` this file.

[experiment]
name = "{name}"
description = "Kondo application: {tasks} tasks of {size / 60:g} min on {n} SDSC-like hosts, {policy['name']}"

[workload]
kind = "bag_list"
granularity = [{size:g}]
bags = [{{at = {history:g}, tasks = [{bag}]}}]

[machines]
power = [{powers}]
names = [{names}]
attributes = {{clock_ghz = [{ghz}]}}

[availability]
kind = "trace"
file = "window.csv"
offset = {offset:g}  # trace seconds at model time 0; the bag arrives at trace second {offset + history:g}

[policy]
{table}

[simulation]
horizon = {WINDOW:g}  # (`mgst simulate` of this file: the bag, then a drain as long; `mgst run` drains to its end)
warmup = 0.0
replications = 1
seed = {seed}

[testbed]
time_unit = {time_unit:g}  # wall s per model s: a task runs {size * time_unit:g} s on a 1.5 GHz puller
duration = {DURATION:g}  # wall seconds of generation at most: enough for the bag at any time unit; the run ends with it
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--platform", type=Path, help="a platform folder (mgst traces generate); default: generate one")
    p.add_argument("--kind", default="sdsc", help="the kind of the platform generated (mgst.traces)")
    p.add_argument("--hosts", type=int, default=32, help="N, the pullers (default 32)")
    p.add_argument("--tasks", type=int, help="T (default N)")
    p.add_argument("--minutes", type=float, default=5.0, help="task size, minutes on a dedicated 1.5 GHz host")
    p.add_argument("--start", type=float, default=TUESDAY_10, help="trace seconds when the bag arrives")
    p.add_argument("--history", type=float, default=300.0, help="H: seconds of trace played before the bag")
    p.add_argument("--time-unit", type=float, default=0.01, help="wall seconds per model second")
    p.add_argument("--seed", type=int, default=1, help="the seed of the platform generated (and of the runs)")
    p.add_argument("--out", type=Path, default=HERE)
    args = p.parse_args()
    if args.platform is not None:
        platform = read_platform(args.platform)
    else:  # (mgst traces generate's defaults: a host's intervals depend on the platform's days too)
        platform = generate_platform(args.kind, hosts=PLATFORM_HOSTS, days=PLATFORM_DAYS, seed=args.seed)
    hosts = list(platform.clock_ghz)[: args.hosts]
    if len(hosts) < args.hosts:
        raise SystemExit(f"the platform has {len(hosts)} hosts; --hosts asks for {args.hosts}")
    offset = args.start - args.history
    if offset < 0 or offset + WINDOW > platform.span:
        raise SystemExit(f"the window [{offset:g}, {offset + WINDOW:g}) is not inside the trace [0, {platform.span:g})")
    window = {h: clip(platform.intervals[h], offset, offset + WINDOW) for h in hosts}
    clocks = {h: platform.clock_ghz[h] for h in hosts}
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv_trace(window, args.out / "window.csv")
    tasks = args.tasks if args.tasks is not None else args.hosts
    for file, policy in POLICIES.items():
        text = experiment_text(f"kondo-{file}", policy, clocks, offset, args.history, tasks,
                               args.minutes * 60.0, args.time_unit, args.seed)
        (args.out / f"{file}.toml").write_text(text)
    print(f"wrote {args.out}/window.csv ({args.hosts} hosts of {platform.name}, seed {platform.seed}, trace seconds "
          f"{offset:g} to {offset + WINDOW:g}) and {', '.join(f'{f}.toml' for f in POLICIES)}")


if __name__ == "__main__":
    main()
