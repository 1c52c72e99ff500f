"""The paper's analytical approximations (its section V): P_+, E_c and E^(S)(W) of a set of workers, and the
coarser estimate of a configuration's communications, from each worker's 3-state availability chain.

For a worker q, P_uu^(q)(t) = (M_q^t)[0, 0] with M_q the UP/RECLAIMED block of its chain: the chance that it is
UP at t without having been DOWN since 0; for a set S, the product over S. Then E_u(S) = sum_{t>0} P_uu^(S)(t),
A(S) = sum_{t>0} t P_uu^(S)(t), P_+ = E_u / (1 + E_u), E_c = A (1 - P_+) / (1 + E_u), and Theorem 5.1 as
printed: E^(S)(W) = (1 + (W - 1) E_c) / P_+^(W - 1). E_c is the unconditioned mean (it counts failed gaps as
0); ``exact=True`` takes the conditional one, E_c / P_+, and E^(S)(W) = 1 + (W - 1) E_c / P_+: the mean time
of W slots of computation given that they succeed, which is blind to reliability. The sums are cut at a
horizon T past which the tail is below ``eps`` (the proof's bound, from the block's largest eigenvalue).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import lru_cache

import numpy as np

Matrix = Sequence[Sequence[float]]
MAX_HORIZON = 200_000
BUILDS_KEPT = 1 << 16


def horizon(matrices: Sequence[Matrix], eps: float = 1e-12) -> int:
    """Slots T after which every worker's P_uu (and so every set's) sums to less than ``eps`` (the proof's T)."""
    lam = max(float(max(abs(np.linalg.eigvals(np.array(m, dtype=float)[:2, :2])))) for m in matrices)
    if lam >= 1.0:
        return MAX_HORIZON
    t = 1
    while t < MAX_HORIZON and lam**t * (t / (1 - lam) + lam / (1 - lam) ** 2) > eps:
        t *= 2
    return min(t, MAX_HORIZON)


class Estimates:
    """P and E of configurations on one platform (the workers' chains), the master's n_com, T_prog and T_data."""

    def __init__(self, matrices: Sequence[Matrix], n_com: int, t_prog: float, t_data: float,
                 exact: bool = False, eps: float = 1e-12):
        self.n_com, self.t_prog, self.t_data, self.exact = n_com, t_prog, t_data, exact
        self.T = horizon(matrices, eps)
        uu, nd = [], []
        for m in matrices:
            block = np.array(m, dtype=float)[:2, :2]
            p = np.empty((self.T + 1, 2))  # row t: (M^t)[0, :], from UP at 0
            row = np.array([1.0, 0.0])
            for t in range(self.T + 1):
                p[t] = row
                row = row @ block
            uu.append(p[:, 0].copy())
            nd.append(p.sum(axis=1))  # not DOWN by t
        self.uu = np.array(uu)  # uu[q, t] = P_uu^(q)(t)
        self.nd = np.array(nd)  # nd[q, t] = P_ND^(q)(t)
        self._ts = np.arange(self.T + 1, dtype=float)
        self._set = lru_cache(maxsize=1 << 16)(self._set_uncached)
        # (P, E) of a configuration given as its sorted (worker, transfer need, load) triples: a pure function of
        # the triples (the sums over needs are of whole slots, exact in any order), so memoised; the heuristics
        # of one instance share it, and a heuristic checked every slot asks for the same ones again and again.
        self.configuration = lru_cache(maxsize=1 << 18)(self._configuration_uncached)
        # Heuristics' greedy configurations by what they depend on (mgst.papers.casanova.heuristics), shared
        # by the heuristics of one instance; each emptied when it reaches BUILDS_KEPT.
        self.builds: dict[tuple, dict[int, int]] = {}
        # A greedy step's options (what each worker the next task may go to is worth), likewise.
        self.steps: dict[tuple, dict[int, object]] = {}

    def _set_uncached(self, members: frozenset[int]) -> tuple[float, float]:
        """(P_+, E_c) of a set: E_c as printed, or divided by P_+ when ``exact``."""
        prod = np.prod(self.uu[sorted(members), 1:], axis=0)
        e_u = float(prod.sum())
        a = float((self._ts[1:] * prod).sum())
        p_plus = e_u / (1.0 + e_u) if self.nd[sorted(members), -1].max() < 1.0 - 1e-15 else 1.0
        e_c = a * (1.0 - p_plus) / (1.0 + e_u)
        if self.exact and p_plus > 0:
            e_c /= p_plus
        return p_plus, e_c

    def _configuration_uncached(self, members: tuple[tuple[int, float, float], ...],
                                work: float | None = None) -> tuple[float, float]:
        return self.iteration({q: n for q, n, _ in members}, {q: load for q, _, load in members}, work)

    def p_plus(self, members: frozenset[int]) -> float:
        return self._set(members)[0]

    def compute(self, members: frozenset[int], work: float) -> tuple[float, float]:
        """(probability of success, expected time) of ``work`` slots of simultaneous computation by ``members``."""
        if work <= 0:
            return 1.0, 0.0
        p_plus, e_c = self._set(members)
        if self.exact:
            return p_plus ** (work - 1), 1.0 + (work - 1) * e_c
        if p_plus <= 0:
            return 0.0, math.inf
        return p_plus ** (work - 1), (1.0 + (work - 1) * e_c) / p_plus ** (work - 1)

    def communication(self, needs: Mapping[int, float]) -> tuple[float, float]:
        """(P_comm, E_comm) of a configuration whose workers need ``needs[q]`` slots of transfers."""
        busy = [n for n in needs.values() if n > 0]
        if not busy:
            return 1.0, 0.0
        e = max(self.compute(frozenset((q,)), n)[1] for q, n in needs.items() if n > 0)
        if len(needs) > self.n_com:
            e = max(e, sum(busy) / self.n_com)
        t = min(self.T, math.ceil(e)) if e < math.inf else self.T
        return float(np.prod(self.nd[sorted(needs), t])), e

    def iteration(self, needs: Mapping[int, float], loads: Mapping[int, float],
                  work: float | None = None) -> tuple[float, float]:
        """(P, E) of an iteration: communications then ``work`` (default: the largest load) of computation."""
        p_comm, e_comm = self.communication(needs)
        p_comp, e_comp = self.compute(frozenset(loads), max(loads.values()) if work is None else work)
        return p_comm * p_comp, e_comm + e_comp


def paper_matrix(rng: np.random.Generator) -> tuple[tuple[float, float, float], ...]:
    """The paper's experimental chain: P_xx ~ U[0.90, 0.99] per state, each other entry 0.5 (1 - P_xx)."""
    diag = rng.uniform(0.90, 0.99, size=3)
    return tuple(tuple(float(diag[i]) if i == j else 0.5 * (1.0 - float(diag[i])) for j in range(3))
                 for i in range(3))


__all__ = ["BUILDS_KEPT", "Estimates", "horizon", "paper_matrix"]
