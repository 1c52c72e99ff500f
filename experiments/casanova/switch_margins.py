"""How the 12 proactive heuristics decide: looks that could switch, switches, and the margin they kept by.

A proactive heuristic C-H looks at the running configuration and H's fresh one; where the two differ, it
switches when the fresh one is strictly better by criterion C (mgst.papers.casanova.heuristics.Proactive).
This counts, per heuristic over a slice of instances, the looks where they differed, the switches, the
configurations lost to a DOWN member, and by how much the running configuration won when it was kept
(relative margin of C). A heuristic whose kept looks are near-ties would change its behaviour with a small
change of how the running configuration is valued; one whose looks are won by wide margins would not.

    python experiments/casanova/switch_margins.py --m 5 --n-com 10 --w-min 1,3,5 --scenarios 0,1,2,3,4
"""

from __future__ import annotations

import argparse
import collections
import math
import sys

from mgst.core.iterations import Iterations, Reconfigured
from mgst.papers.casanova.estimates import Estimates
from mgst.papers.casanova.heuristics import NAMES, Proactive, score
from mgst.papers.casanova.instance import ITERATIONS, realisation, scenario
from mgst.sim.iterations import run_iterations

MARGINS = ((0.01, "kept by < 1 %"), (0.1, "1-10 %"), (math.inf, "> 10 %"))


class Counted(Proactive):
    """C-H as shipped, counting what each look decided (the decision itself is the parent's)."""

    def __init__(self, name: str, estimates: Estimates, counts: collections.Counter):
        super().__init__(name, estimates)
        self.counts = counts

    def reconsider(self, app: Iterations, now: float) -> dict[int, int] | None:
        decision = super().reconsider(app, now)
        fresh, (p2, e2) = self.candidate(app, now)
        if fresh and fresh != app.config:
            self.counts["differed"] += 1
            if decision is not None:
                self.counts["switched"] += 1
            else:
                elapsed = now - app.iteration_start
                pc, ec = self.current(app, now)
                c, c2 = score(self.criterion, pc, ec, elapsed), score(self.criterion, p2, e2, elapsed)
                margin = (c - c2) / abs(c) if c != 0 and math.isfinite(c) else math.inf
                self.counts[next(label for bound, label in MARGINS if margin < bound)] += 1
        return decision


def ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",")]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=5)
    parser.add_argument("--n-com", type=int, default=10)
    parser.add_argument("--w-min", type=ints, default=[1, 3, 5])
    parser.add_argument("--scenarios", type=ints, default=[0, 1, 2, 3, 4])
    parser.add_argument("--trial", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cap", type=float, default=200_000.0, help="slots (the paper's 1,000,000 is slow here)")
    args = parser.parse_args(argv)
    names = [n for n in NAMES if "-" in n]
    counts = {n: collections.Counter() for n in names}
    makespans = {n: 0.0 for n in names}
    instances = 0
    for w_min in args.w_min:
        for index in args.scenarios:
            s = scenario(args.m, args.n_com, w_min, args.seed, index)
            chains = realisation(s, args.trial, args.seed)
            est = Estimates(s.matrices, s.n_com, s.t_prog, s.t_data)
            instances += 1
            for name in names:
                policy = Counted(name, est, counts[name])
                app = Iterations([float(w) for w in s.work], s.m, ITERATIONS, s.t_prog, s.t_data, s.n_com, policy)
                out = run_iterations(app, [r.replay() for r in chains], cap=args.cap, proactive=True)
                makespans[name] += out.makespan
                for entry in out.log:
                    if isinstance(entry, Reconfigured) and entry.why == "down":
                        counts[name]["lost to DOWN"] += 1
    labels = ["differed", "switched", *(label for _, label in MARGINS), "lost to DOWN"]
    print(f"m = {args.m}, n_com = {args.n_com}, w_min {args.w_min}, scenarios {args.scenarios}, trial {args.trial}: "
          f"{instances} instances, {ITERATIONS} iterations each")
    print("| heuristic | " + " | ".join(labels) + " | mean makespan |")
    print("|---" * (len(labels) + 2) + "|")
    for name in names:
        c = counts[name]
        print(f"| {name} | " + " | ".join(str(c[label]) for label in labels)
              + f" | {makespans[name] / instances:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
