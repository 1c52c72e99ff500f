"""CPU seconds to build a Casanova ``Estimates``: on a platform not seen before, and on the one just built.

    python benchmarks/bench_casanova_estimates.py              # cell 5,20,2,4 (the shared-memos test's), 5 rounds
    python benchmarks/bench_casanova_estimates.py --cell 10,20,10,0 --rounds 7

Each round clears the kept chain powers (``estimates._chain_powers``) and builds one Estimates (the first on
a platform: every worker's T + 1 products), then builds it again on the same chains (the kept arrays). The
medians are printed with their ratio. That the results do not move is `casanova_digest.py`'s to show.
"""

from __future__ import annotations

import argparse
import statistics
import time

from mgst.papers.casanova import estimates
from mgst.papers.casanova.estimates import Estimates
from mgst.papers.casanova.instance import scenario


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cell", default="5,20,2,4", help="m,n_com,w_min,scenario (seed 1)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    m, n_com, w_min, index = (int(x) for x in args.cell.split(","))
    s = scenario(m, n_com, w_min, 1, index)
    first, again = [], []
    for _ in range(args.rounds):
        estimates._chain_powers.cache_clear()
        t = time.process_time()
        a = Estimates(s.matrices, s.n_com, s.t_prog, s.t_data)
        first.append(time.process_time() - t)
        t = time.process_time()
        Estimates(s.matrices, s.n_com, s.t_prog, s.t_data)
        again.append(time.process_time() - t)
    f, g = statistics.median(first), statistics.median(again)
    print(f"cell {args.cell} (T = {a.T}, {len(s.matrices)} workers), medians of {args.rounds} rounds, CPU s")
    print(f"first on the platform: {f:.4f}   again on it: {g:.4f}   ratio {f / g:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
