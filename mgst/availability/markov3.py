"""Casanova et al.'s three-state availability: a per-slot Markov chain over UP, RECLAIMED and DOWN, per machine group.

Time is cut into slots of ``slot`` model time units; at each slot boundary the machine
moves from state s to state t with probability ``matrix[s][t]`` (rows and columns in
the order UP, RECLAIMED, DOWN). Consecutive slots in one state are one period: its
length is a geometric number of slots (p = 1 - matrix[s][s]), and the state after it
is drawn from row s without s. Every machine starts UP at t = 0 and draws from its own
stream (``FAILURES``, machine index). UP computes at the machine's a_j, RECLAIMED at
``reclaimed_share`` (0: suspended), DOWN loses the machine's work.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mgst.availability.kind import (
    WIRE_REPLICATION,
    AvailabilityKind,
    ConfigHost,
    group_of,
    is_number,
    numeric_law_problem,
)
from mgst.availability.process import AvailabilityProcess, Period, State
from mgst.model import AvailabilityModel, Experiment
from mgst.streams import Purpose, generator

# A row of the matrix may sum to 1 within this: hand-written decimals (0.9 + 0.05 + 0.05) are off by ~1e-16;
# a row off by more is a typo, refused (in the experiment file and on the wire).
ROW_TOLERANCE = 1e-6
MAX_GROUPS = 10_000
GROUP_KEYS = ("matrix", "slot", "reclaimed_share")
# The long-run distribution is the Cesaro mean of the chain's first 2**CESARO_DOUBLINGS slots from UP (by
# repeated squaring): the stationary distribution of an irreducible chain to about 1e-6, and a defined
# answer for a reducible or periodic one. Only the checks use it (overload warning, run-length bound).
CESARO_DOUBLINGS = 20

Matrix = tuple[tuple[float, float, float], tuple[float, float, float], tuple[float, float, float]]


@dataclass(frozen=True, slots=True)
class Markov3Group:
    """One machine group's chain."""

    matrix: Matrix  # matrix[s][t]: P(next slot in t | this slot in s), states UP, RECLAIMED, DOWN
    slot: float  # model time units per slot
    reclaimed_share: float = 0.0  # the CPU share while RECLAIMED (0: suspended)


@dataclass(frozen=True, slots=True)
class Markov3Availability(AvailabilityModel):
    """Per-group three-state chains; machine j follows the group its ``group`` attribute names."""

    groups: tuple[Markov3Group, ...]


class Markov3Process:
    """One machine's periods under ``group``'s chain, starting UP at t = 0."""

    __slots__ = ("_rng", "_group", "_state", "_table")

    def __init__(self, group: Markov3Group, up_share: float, seed: int, replication: int, machine: int):
        self._rng = generator(seed, replication, Purpose.FAILURES, machine)
        self._group = group
        self._state = State.UP
        # Per state, worked out once: the states it may move to with their probabilities, their sum, its share.
        self._table = {s: self._leaving(s, up_share) for s in State}

    def _leaving(self, s: State, up_share: float) -> tuple[list[tuple[State, float]], float, float]:
        g = self._group
        others = [(State(t), p) for t, p in enumerate(g.matrix[s]) if t != s and p > 0]
        share = up_share if s is State.UP else g.reclaimed_share if s is State.RECLAIMED else 0.0
        return others, sum(p for _, p in others), share

    def next(self) -> Period:
        s = self._state
        others, leave, share = self._table[s]
        if leave <= 0:  # absorbing: this state for good
            return Period(math.inf, s, share)
        slots = int(self._rng.geometric(min(1.0, leave)))
        u = self._rng.random() * leave
        nxt = others[-1][0]
        for t, p in others:
            if u < p:
                nxt = t
                break
            u -= p
        self._state = nxt
        return Period(slots * self._group.slot, s, share)


def long_run(matrix: Matrix) -> np.ndarray:
    """The long-run fraction of slots in each state from UP (the Cesaro mean; see CESARO_DOUBLINGS)."""
    p = np.array(matrix, dtype=float)
    power, total = p, np.eye(3)  # P^n and sum_{k < n} P^k, n = 1
    for _ in range(CESARO_DOUBLINGS):
        total = total + total @ power
        power = power @ power
    return total[0] / total[0].sum()


def _row_problem(row: Any) -> str | None:
    if not isinstance(row, list | tuple) or len(row) != 3 or not all(is_number(p) for p in row):
        return "must be 3 numbers (to UP, RECLAIMED, DOWN)"
    if not all(0 <= p <= 1 for p in row):
        return f"has a probability outside [0, 1]: {list(row)!r:.80}"
    if abs(sum(row) - 1.0) > ROW_TOLERANCE:
        return f"sums to {sum(row):.9g}, not 1"
    return None


class Markov3Kind(AvailabilityKind):
    """``kind = "markov3"``: ``matrix`` (3 x 3) or ``groups = [{matrix = ..., slot = ..., reclaimed_share = ...}]``,
    ``slot``, ``reclaimed_share`` (default 0; a group's own keys override them).

    Wire: ``("markov3", slot, reclaimed_share, p00, p01, p02, p10, ..., p22, seed)``, the machine's group.
    """

    name = "markov3"
    spec_type = Markov3Availability
    keys = ("kind", "matrix", "groups", "slot", "reclaimed_share")
    grouped = True

    # ---------------------------------------------------------------- experiment file and store

    def from_config(self, host: ConfigHost, table: Mapping[str, Any], section: str
                    ) -> tuple[Markov3Availability, str]:
        slot = _slot(host, table["slot"], f"{section}.slot") if "slot" in table else None
        share = _share(host, table["reclaimed_share"], f"{section}.reclaimed_share") \
            if "reclaimed_share" in table else 0.0
        if ("matrix" in table) == ("groups" in table):
            raise host.error(f"{section}.matrix", f"give {section}.matrix (every machine) or {section}.groups "
                                                  "(one per machine group), one of the two")
        if "matrix" in table:
            if slot is None:
                raise host.error(f"{section}.slot", "missing (required with a matrix: model time units per slot)")
            group = Markov3Group(_matrix(host, table["matrix"], f"{section}.matrix"), slot, share)
            return Markov3Availability((group,)), f"{section}.slot"
        key = f"{section}.groups"
        raw = host.nonempty_list(table["groups"], key, "tables {matrix = [...], slot = ...} (one per machine group)")
        if len(raw) > MAX_GROUPS:
            raise host.error(key, f"has {len(raw)} groups; at most {MAX_GROUPS} are allowed")
        groups = []
        for g, entry in enumerate(raw):
            gkey = f"{key}[{g}]"
            if not isinstance(entry, Mapping):
                raise host.error(gkey, f"must be a table {{matrix = [...], slot = ...}}, got {host.describe(entry)}")
            for k in entry:
                if k not in GROUP_KEYS:
                    raise host.error(f"{gkey}.{k}", f"unknown key{host.suggest(k, GROUP_KEYS)}")
            matrix = _matrix(host, host.require(entry, gkey, "matrix"), f"{gkey}.matrix")
            gslot = _slot(host, entry["slot"], f"{gkey}.slot") if "slot" in entry else slot
            if gslot is None:
                raise host.error(f"{gkey}.slot", f"missing (give it here or as {section}.slot)")
            gshare = _share(host, entry["reclaimed_share"], f"{gkey}.reclaimed_share") \
                if "reclaimed_share" in entry else share
            groups.append(Markov3Group(matrix, gslot, gshare))
        return Markov3Availability(tuple(groups)), key

    def to_plain(self, spec: Markov3Availability) -> Any:
        return {"kind": self.name, "groups": [[[list(r) for r in g.matrix], g.slot, g.reclaimed_share]
                                              for g in spec.groups]}

    def from_plain(self, plain: Any) -> Markov3Availability:
        return Markov3Availability(tuple(Markov3Group(tuple(tuple(r) for r in m), slot, share)  # type: ignore[arg-type]
                                         for m, slot, share in plain["groups"]))

    def group_count(self, spec: Markov3Availability) -> int:
        return len(spec.groups)

    # ---------------------------------------------------------------- simulation and wire

    def group(self, spec: Markov3Availability, experiment: Experiment, machine: int) -> Markov3Group:
        return spec.groups[group_of(experiment, machine, len(spec.groups))]

    def process(self, spec: Markov3Availability, experiment: Experiment, seed: int, replication: int,
                machine: int) -> AvailabilityProcess:
        group = self.group(spec, experiment, machine)
        return Markov3Process(group, experiment.machines[machine].availability, seed, replication, machine)

    def to_wire(self, spec: Markov3Availability, experiment: Experiment, machine: int, seed: int,
                until: float, since: float = 0.0) -> tuple:
        g = self.group(spec, experiment, machine)
        return (self.name, g.slot, g.reclaimed_share, *(p for row in g.matrix for p in row), seed)

    def wire_problem(self, form: Sequence[Any]) -> str | None:
        problem = numeric_law_problem(self.name, form, "a markov3 model is (slot, reclaimed_share, the 9 "
                                                       "probabilities row by row, seed)", 12)
        if problem is not None:
            return problem
        if not form[1] > 0:
            return f"markov3 model: the slot must be > 0, got {form[1]!r:.40}"
        if not 0 <= form[2] <= 1:
            return f"markov3 model: reclaimed_share must be in [0, 1], got {form[2]!r:.40}"
        for s, name in enumerate(State):
            row_problem = _row_problem(form[3 + 3 * s: 6 + 3 * s])
            if row_problem is not None:
                return f"markov3 model: the {name.name} row {row_problem}"
        if _down_for_good(form[3:6], form[6:9], form[9:12]):  # (an experiment file cannot give one either)
            return "markov3 model: DOWN never leaves DOWN, which UP leads to: the machine would go down for good"
        return None

    def wire_times(self, form: Sequence[Any]) -> tuple[float, ...]:
        return (form[1],)

    def from_wire(self, form: Sequence[Any], machine: int, share: float) -> AvailabilityProcess:
        problem = self.wire_problem(form)
        if problem is not None:
            raise ValueError(problem)
        rows = [tuple(float(p) for p in form[3 + 3 * s: 6 + 3 * s]) for s in range(3)]
        group = Markov3Group((rows[0], rows[1], rows[2]), float(form[1]), float(form[2]))  # type: ignore[arg-type]
        return Markov3Process(group, share, form[12], WIRE_REPLICATION, machine)

    # ---------------------------------------------------------------- long-run figures

    def capacity(self, spec: Markov3Availability, experiment: Experiment) -> tuple[list[float], str]:
        fractions = []
        for j, m in enumerate(experiment.machines):
            g = self.group(spec, experiment, j)
            pi = long_run(g.matrix)
            fractions.append(float(pi[State.UP] + pi[State.RECLAIMED] * g.reclaimed_share / m.availability))
        return fractions, (" (availabilities scaled by each machine's long-run share of slots UP, plus RECLAIMED "
                           f"at its share, {min(fractions):.3f} to {max(fractions):.3f}, because of the markov3 "
                           "availability)")

    def cycles(self, spec: Markov3Availability, experiment: Experiment, length: float) -> tuple[float, str]:
        rates = {g: _changes_per_slot(g.matrix) / g.slot for g in spec.groups}
        total = sum(length * rates[self.group(spec, experiment, j)] for j in range(len(experiment.machines)))
        return total, "the chains' state changes per slot (sum_s pi_s (1 - p_ss)) / slot"

    def shortest_cycle(self, spec: Markov3Availability, experiment: Experiment) -> float:
        cycles = []
        for g in spec.groups:
            pi = long_run(g.matrix)
            downs_per_slot = pi[State.DOWN] * (1.0 - g.matrix[State.DOWN][State.DOWN])
            cycles.append(g.slot / downs_per_slot if downs_per_slot > 0 else math.inf)
        return min(cycles)

    def longest_down(self, spec: Markov3Availability, experiment: Experiment) -> float:
        downs = []
        for g in spec.groups:
            stay = g.matrix[State.DOWN][State.DOWN]
            reached = long_run(g.matrix)[State.DOWN] > 0
            downs.append(0.0 if not reached else math.inf if stay >= 1 else g.slot / (1.0 - stay))
        return max(downs)


def _changes_per_slot(matrix: Matrix) -> float:
    pi = long_run(matrix)
    return float(sum(pi[s] * (1.0 - matrix[s][s]) for s in range(3)))


def _slot(host: ConfigHost, value: Any, key: str) -> float:
    return host.bounded(value, key, 0.0, host.max_time, "time units (per slot)")


def _share(host: ConfigHost, value: Any, key: str) -> float:
    v = host.number(value, key)
    if not 0 <= v <= 1:
        raise host.error(key, f"must be a CPU share in [0, 1], got {v:g}")
    return v


def _matrix(host: ConfigHost, value: Any, key: str) -> Matrix:
    if not isinstance(value, list) or len(value) != 3:
        raise host.error(key, f"must be 3 rows (from UP, RECLAIMED, DOWN) of 3 probabilities, got "
                              f"{host.describe(value)}")
    rows = []
    for s, row in enumerate(value):
        if isinstance(row, list) and len(row) == 3:
            row = [host.number(p, f"{key}[{s}][{t}]") for t, p in enumerate(row)]
        problem = _row_problem(row)
        if problem is not None:
            raise host.error(f"{key}[{s}]", f"(from {State(s).name}) {problem}")
        rows.append(tuple(float(p) for p in row))
    if _down_for_good(*rows):  # (its capacity then has no steady state: the overload warning misled)
        raise host.error(f"{key}[2]", "(from DOWN) never leaves DOWN, which UP leads to: a machine that goes down "
                                      "would stay down for the rest of the run; give DOWN a way back to UP or "
                                      "RECLAIMED")
    return (rows[0], rows[1], rows[2])  # type: ignore[return-value]


def _down_for_good(up: Sequence[float], reclaimed: Sequence[float], down: Sequence[float]) -> bool:
    """Whether a chain that starts UP can reach DOWN, and DOWN never leaves: a machine down for good."""
    reaches_down = up[2] > 0.0 or (up[1] > 0.0 and reclaimed[2] > 0.0)  # (every machine starts UP)
    return down[2] >= 1.0 and reaches_down


KIND = Markov3Kind()
