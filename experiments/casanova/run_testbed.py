"""Casanova et al.'s heuristics on the testbed: 20 gang members on loopback, each makespan beside its simulation.

One scenario of the paper's experiment (m, n_com, w_min and a scenario index, drawn from the seed as the sweep
draws it), each heuristic for 10 iterations with real gang members (one process per worker, each following its
own markov3 chain) and real transfers over ZeroMQ, secured with CURVE (throw-away keys, one per member, in a
folder of mode 0700 removed after the run; --insecure goes without, logged), then the simulation of the same
chain realisation. Prints one line per heuristic and writes them as JSON with --json. Usage, from the repository
root:

    python experiments/casanova/run_testbed.py --m 5 --n-com 5 --w-min 1 --scenario 0 --time-unit 0.2 \
        --heuristics Y-IE,IE [--json runs/casanova-testbed.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

from mgst.papers.casanova.heuristics import NAMES
from mgst.papers.casanova.instance import CAP, ITERATIONS, PROCESSORS, scenario
from mgst.testbed.casanova_beside import BYTES_PER_SLOT, run_beside
from mgst.testbed.gang_run import MemberLost
from mgst.wire import security
from mgst.wire.gang_protocol import MAX_TRANSFER

ACCEPTANCE = 0.15  # each makespan within 15 % of its simulation's


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--m", type=int, default=5, choices=(5, 10), help="tasks per iteration")
    p.add_argument("--n-com", type=int, default=5, choices=(5, 10, 20), help="transfers at once")
    p.add_argument("--w-min", type=int, default=1, choices=range(1, 11), metavar="1..10", help="the fastest speed")
    p.add_argument("--scenario", type=int, default=0, choices=range(10), metavar="0..9", help="scenario index")
    p.add_argument("--seed", type=int, default=1, help="the sweep's seed (experiments/casanova: 1)")
    p.add_argument("--processors", type=int, default=PROCESSORS, help="gang members (the paper: 20)")
    p.add_argument("--iterations", type=int, default=ITERATIONS)
    p.add_argument("--time-unit", type=float, default=0.2, help="wall seconds a slot lasts")
    p.add_argument("--bytes-per-slot", type=int, default=BYTES_PER_SLOT, help="bytes a slot of transfer carries")
    p.add_argument("--heuristics", default="Y-IE,IE", help="comma-separated, of " + ", ".join(NAMES))
    p.add_argument("--cap", type=float, default=CAP, help="slots after which a run is a failure")
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--insecure", action="store_true",
                   help="no authentication or encryption between the mapper and its members (logged on both sides)")
    args = p.parse_args(argv)
    heuristics = args.heuristics.split(",")
    bad = [h for h in heuristics if h not in NAMES]
    problem = (f"--heuristics: unknown {', '.join(bad)}" if bad else
               "--processors must be in [1, 1000] and at least --m" if not args.m <= args.processors <= 1000 else
               "--iterations must be in [1, 1000]" if not 1 <= args.iterations <= 1000 else
               "--time-unit must be in [0.01, 60] s" if not 0.01 <= args.time_unit <= 60 else
               f"--bytes-per-slot must be in [1, {MAX_TRANSFER // 50}]"
               if not 1 <= args.bytes_per_slot <= MAX_TRANSFER // 50 else
               "--cap must be in [1, 1e6]" if not 1 <= args.cap <= CAP else None)
    if problem:
        p.exit(2, f"error: {problem}\n")
    args.heuristics = heuristics
    return args


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    logging.basicConfig(level=logging.INFO if os.environ.get("MGST_GANG_VERBOSE") else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    s = scenario(args.m, args.n_com, args.w_min, args.seed, args.scenario, p=args.processors)
    rows = []
    for h in args.heuristics:
        began = time.time()
        try:
            b = run_beside(s, h, args.seed, args.time_unit, args.bytes_per_slot, args.iterations, args.cap,
                           insecure=args.insecure)
        except (MemberLost, TimeoutError, security.KeyFileError) as e:
            print(f"error: {h}: {e}", file=sys.stderr)
            return 1
        r = b.testbed
        diff = b.difference
        rows.append({"heuristic": h, "testbed": r.makespan, "simulated": b.simulated, "difference": diff,
                     "within": diff is not None and abs(diff) <= ACCEPTANCE, "late_reports": r.late,
                     "transfers": r.transfers, "bytes": r.bytes_sent, "most_moving": r.most_moving,
                     "n_com": args.n_com, "drops": r.drops, "run_wall_s": round(r.wall_s, 1),
                     "total_wall_s": round(time.time() - began, 1)})
        print(f"{h:7} testbed {r.makespan} slots, simulated {b.simulated}: "
              + (f"{100 * diff:+.1f} %" if diff is not None else "a failure on one side")
              + f" ({r.transfers} transfers, {r.bytes_sent} bytes, at most {r.most_moving} at once of n_com "
                f"{args.n_com}; {r.late} late reports; {r.wall_s:.0f} s)", flush=True)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"scenario": {"m": args.m, "n_com": args.n_com, "w_min": args.w_min,
                                                      "index": args.scenario, "seed": args.seed,
                                                      "time_unit": args.time_unit,
                                                      "bytes_per_slot": args.bytes_per_slot,
                                                      "security": "none (--insecure)" if args.insecure else "curve"},
                                         "rows": rows}, indent=1) + "\n", encoding="utf-8")
    return 0 if all(row["within"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
