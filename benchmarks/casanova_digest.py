"""A digest of Casanova runs' results: every heuristic's makespan, iterations and core log (each reconfiguration
and iteration end, with its time and reason) on a fixed set of instances, both trials, both normalisations.

    python benchmarks/casanova_digest.py            # cap 20,000 slots: 272 runs, about 25 s of CPU

A change that must not move a result (a speed-up, a refactor of the drivers) prints the same digest before and
after; docs/benchmarks.md and the commits quote it (a391edc50f645404 on 2026-11-29).
"""

from __future__ import annotations

import argparse
import hashlib
import time

from mgst.papers.casanova.estimates import Estimates
from mgst.papers.casanova.heuristics import NAMES
from mgst.papers.casanova.instance import realisation, run, scenario

# (m, n_com, w_min, scenario, exact): small and large tasks, one port to many, both normalisations, and two
# instances whose runs reach a 20,000-slot cap
INSTANCES = ((5, 5, 1, 0, False), (5, 10, 2, 1, False), (10, 5, 1, 2, False), (10, 20, 3, 3, False),
             (5, 5, 1, 4, True), (10, 10, 5, 0, False), (5, 10, 10, 0, False), (5, 20, 4, 5, False))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap", type=float, default=20_000.0, help="slots before a run counts as failed")
    args = parser.parse_args()
    digest = hashlib.sha256()
    started = time.process_time()
    runs = 0
    for m, n_com, w_min, index, exact in INSTANCES:
        s = scenario(m, n_com, w_min, 1, index)
        est = Estimates(s.matrices, s.n_com, s.t_prog, s.t_data, exact=exact)
        for trial in (0, 1):
            chains = realisation(s, trial, 1)
            for name in NAMES:
                r = run(s, name, trial, 1, exact=exact, estimates=est, chains=chains, cap=args.cap)
                digest.update(repr((m, n_com, w_min, index, trial, name, r.makespan, r.iterations, r.log)).encode())
                runs += 1
    print(f"{digest.hexdigest()[:16]} ({runs} runs, {time.process_time() - started:.1f} s of CPU)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
