"""The paper's analytical approximations (its section V): P_+, E_c and E^(S)(W) of a set of workers, and the
coarser estimate of a configuration's communications, from each worker's 3-state availability chain.

For a worker q, P_uu^(q)(t) = (M_q^t)[0, 0] with M_q the UP/RECLAIMED block of its chain: the chance that it is
UP at t without having been DOWN since 0; for a set S, the product over S. Then E_u(S) = sum_{t>0} P_uu^(S)(t),
A(S) = sum_{t>0} t P_uu^(S)(t), P_+ = E_u / (1 + E_u), E_c = A (1 - P_+) / (1 + E_u), and Theorem 5.1 as
printed: E^(S)(W) = (1 + (W - 1) E_c) / P_+^(W - 1). E_c is the unconditioned mean (it counts failed gaps as
0); ``exact=True`` takes the conditional one, E_c / P_+, and E^(S)(W) = 1 + (W - 1) E_c / P_+: the mean time
of W slots of computation given that they succeed, which is blind to reliability. The sums are cut at a
horizon T past which the tail is below ``eps`` (the proof's bound, from the block's largest eigenvalue). A set none
of whose members can go DOWN has P_+ = 1, as the theorem says, and E_c its mean return time to all UP.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import lru_cache

import numpy as np

Matrix = Sequence[Sequence[float]]
MAX_HORIZON = 200_000
CREDITS = ("all", "transfers", "none")
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
                 exact: bool = False, present: bool = False, credit: str = "all", eps: float = 1e-12,
                 derive: bool = True):
        if credit not in CREDITS:
            raise ValueError(f"credit must be one of {', '.join(CREDITS)}, got {credit!r}")
        self.n_com, self.t_prog, self.t_data, self.exact = n_com, t_prog, t_data, exact
        # How a proactive heuristic values the running configuration (mgst.papers.casanova.heuristics): from its
        # members' present states or all UP; crediting its progress in transfers and computation (all), in
        # transfers alone, or none (valued as a fresh one on the same workers, the programs they hold counted).
        self.present, self.credit = present, credit
        self.T = horizon(matrices, eps)
        platform = tuple(tuple(tuple(float(x) for x in row) for row in m) for m in matrices)
        self.uu, self.nd, self.ru, self.rnd = _chain_powers(platform, self.T)  # read-only
        # Each worker's stationary share of UP on its UP/RECLAIMED block, read for workers that never go DOWN
        # (the block is then a chain of its own): P_ru / (P_ur + P_ru), or 1 for one that never leaves UP.
        self._up_share = tuple(m[1][0] / (m[0][1] + m[1][0]) if m[0][1] + m[1][0] > 0.0 else 1.0
                               for m in platform)
        self._ts = np.arange(self.T + 1, dtype=float)
        self._returns = lru_cache(maxsize=1 << 16)(self._returns_uncached)
        self._set = lru_cache(maxsize=1 << 16)(self._set_uncached)
        self._first = lru_cache(maxsize=1 << 16)(self._first_uncached)
        # (P, E) of a configuration given as its sorted (worker, transfer need, load) triples: a pure function of
        # the triples (the sums over needs are of whole slots, exact in any order), so memoised; the heuristics
        # of one instance share it, and a heuristic checked every slot asks for the same ones again and again.
        self.configuration = lru_cache(maxsize=1 << 18)(self._configuration_uncached)
        # Heuristics' greedy configurations by what they depend on (mgst.papers.casanova.heuristics), shared
        # by the heuristics of one instance; each emptied when it reaches BUILDS_KEPT.
        self.builds: dict[tuple, tuple[dict[int, int], tuple | None]] = {}  # (loads, the greedy's steps)
        # A greedy step's options (what each worker the next task may go to is worth), likewise.
        self.steps: dict[tuple, dict[int, object]] = {}
        # Whether a heuristic may derive a greedy build from its last one where what changed cannot change it
        # (the same builds, fewer made); False makes each anew, to compare the two.
        self.derive = derive

    def _returns_uncached(self, members: frozenset[int]) -> tuple[float, float]:
        """(U, A) of a set all UP at 0: U the sum over t > 0 of P(all UP at t, none DOWN by t), A the same sum
        weighted by t (Theorem 5.1's E_u and the numerator of its mean)."""
        prod = np.prod(self.uu[sorted(members), 1:], axis=0)
        return float(prod.sum()), float((self._ts[1:] * prod).sum())

    def _set_uncached(self, members: frozenset[int]) -> tuple[float, float]:
        """(P_+, E_c) of a set: E_c as printed, or divided by P_+ when ``exact``."""
        if self.nd[sorted(members), -1].min() >= 1.0 - 1e-15:
            # No member can go DOWN: P_+ = 1 (the theorem's "otherwise"), and its E_c formula, derived for a set
            # that can fail, would give 0. A gap between two common UP slots is then the set's mean return time
            # to all UP, 1 / its stationary share of all UP (Kac's lemma; the members' chains are independent).
            share = math.prod(self._up_share[q] for q in members)
            return 1.0, 1.0 / share if share > 0.0 else math.inf
        e_u, a = self._returns(members)
        p_plus = e_u / (1.0 + e_u)
        e_c = a * (1.0 - p_plus) / (1.0 + e_u)
        if self.exact and p_plus > 0:
            e_c /= p_plus
        return p_plus, e_c

    def _first_uncached(self, members: frozenset[int], reclaimed: frozenset[int]) -> tuple[float, float]:
        """(P0, E0) of a set some of whose members are RECLAIMED at 0 (the others UP): the chance that all are
        UP together at some t > 0 before any goes DOWN, and the first such t's mean (unconditioned, as printed's
        E_c; given success when ``exact``). By renewal on the set's returns to all UP: F_s(z) = U_s(z) / (1 +
        U(z)), with U_s and U the sums of P(all UP at t, no DOWN) from the present states and from all UP."""
        up = sorted(members - reclaimed)
        rec = sorted(reclaimed)
        from_now = np.prod(self.uu[up, 1:], axis=0) * np.prod(self.ru[rec, 1:], axis=0)
        e_u, a = self._returns(members)
        e_s, a_s = float(from_now.sum()), float((self._ts[1:] * from_now).sum())
        p0 = e_s / (1.0 + e_u)
        e0 = a_s / (1.0 + e_u) - e_s * a / (1.0 + e_u) ** 2
        if self.exact and p0 > 0:
            e0 /= p0
        return p0, e0

    def _configuration_uncached(self, members: tuple[tuple[int, float, float], ...],
                                work: float | None = None, reclaimed: frozenset[int] = frozenset()
                                ) -> tuple[float, float]:
        return self.iteration({q: n for q, n, _ in members}, {q: load for q, _, load in members}, work, reclaimed)

    def p_plus(self, members: frozenset[int]) -> float:
        return self._set(members)[0]

    def compute(self, members: frozenset[int], work: float,
                reclaimed: frozenset[int] = frozenset()) -> tuple[float, float]:
        """(probability of success, expected time) of ``work`` slots of simultaneous computation by ``members``,
        all UP at 0 (Theorem 5.1), or with ``reclaimed`` of them RECLAIMED at 0: the first common UP slot is
        then awaited (:meth:`_first`) before the ``work`` slots, each counted as the theorem counts a gap."""
        if work <= 0:
            return 1.0, 0.0
        p_plus, e_c = self._set(members)
        p0, e0, start = 1.0, 0.0, 1.0
        if reclaimed & members:
            p0, e0 = self._first(members, reclaimed & members)
            start = e0 + 1.0
        if self.exact:
            return p0 * p_plus ** (work - 1), start + (work - 1) * e_c
        if p_plus <= 0 or p0 <= 0:
            return 0.0, math.inf
        p = p0 * p_plus ** (work - 1)
        return p, (start + (work - 1) * e_c) / p

    def communication(self, needs: Mapping[int, float],
                      reclaimed: frozenset[int] = frozenset()) -> tuple[float, float]:
        """(P_comm, E_comm) of a configuration whose workers need ``needs[q]`` slots of transfers (``reclaimed``:
        those RECLAIMED at 0, the others UP)."""
        busy = [n for n in needs.values() if n > 0]
        if not busy:
            return 1.0, 0.0
        e = max(self.compute(frozenset((q,)), n, reclaimed)[1] for q, n in needs.items() if n > 0)
        if len(needs) > self.n_com:
            e = max(e, sum(busy) / self.n_com)
        t = min(self.T, math.ceil(e)) if e < math.inf else self.T
        up = sorted(q for q in needs if q not in reclaimed)
        rec = sorted(q for q in needs if q in reclaimed)
        return float(np.prod(self.nd[up, t]) * np.prod(self.rnd[rec, t])), e

    def iteration(self, needs: Mapping[int, float], loads: Mapping[int, float],
                  work: float | None = None, reclaimed: frozenset[int] = frozenset()) -> tuple[float, float]:
        """(P, E) of an iteration: communications then ``work`` (default: the largest load) of computation.
        ``reclaimed``: the workers RECLAIMED now (the others UP); the computation starts from them only when no
        transfer is left (after the transfers, every worker is taken as UP, as the paper does)."""
        p_comm, e_comm = self.communication(needs, reclaimed)
        comm_left = any(n > 0 for n in needs.values())
        p_comp, e_comp = self.compute(frozenset(loads), max(loads.values()) if work is None else work,
                                      frozenset() if comm_left else reclaimed)
        return p_comm * p_comp, e_comm + e_comp


@lru_cache(maxsize=2)
def _chain_powers(platform: tuple[tuple[tuple[float, ...], ...], ...], T: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For each worker's chain, (M^t)'s UP/RECLAIMED rows for t in 0..T: P_uu, not DOWN by t, and the same from
    RECLAIMED at 0, as arrays [q, t]. A pure function of the chains, kept for the last platforms (a cell's runs,
    and tests, build Estimates on one platform again and again; each costs T small products per worker)."""
    uu, nd, ru, rnd = [], [], [], []
    for m in platform:
        block = np.array(m, dtype=float)[:2, :2]
        p = np.empty((T + 1, 2, 2))  # p[t, i]: (M^t)[i, :], from UP (i = 0) or RECLAIMED (1) at 0
        for i in (0, 1):
            row = np.eye(2)[i]
            for t in range(T + 1):
                p[t, i] = row
                row = row @ block
        uu.append(p[:, 0, 0].copy())
        nd.append(p[:, 0].sum(axis=1))  # not DOWN by t
        ru.append(p[:, 1, 0].copy())
        rnd.append(p[:, 1].sum(axis=1))
    out = (np.array(uu),  # uu[q, t] = P_uu^(q)(t)
           np.array(nd),  # nd[q, t] = P_ND^(q)(t)
           np.array(ru),  # ru[q, t]: UP at t without DOWN since 0, from RECLAIMED at 0
           np.array(rnd))  # rnd[q, t]: not DOWN by t, from RECLAIMED at 0
    for a in out:
        a.flags.writeable = False  # shared by every Estimates of the platform
    return out


def paper_matrix(rng: np.random.Generator) -> tuple[tuple[float, float, float], ...]:
    """The paper's experimental chain: P_xx ~ U[0.90, 0.99] per state, each other entry 0.5 (1 - P_xx)."""
    diag = rng.uniform(0.90, 0.99, size=3)
    return tuple(tuple(float(diag[i]) if i == j else 0.5 * (1.0 - float(diag[i])) for j in range(3))
                 for i in range(3))


__all__ = ["BUILDS_KEPT", "CREDITS", "Estimates", "horizon", "paper_matrix"]
