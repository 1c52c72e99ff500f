"""Solve the LPAS_DG allocation LP (max lambda over CPU-share matrices delta) with HiGHS dual simplex."""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

import highspy
import numpy as np

__all__ = ["Allocation", "AllocationError", "cache_clear", "cache_info", "solve_allocation"]

#: Bound on the memory of each of the two memos of (rates, arrival_rates, availability) instances, in
#: bytes, each entry's size estimated from its dimensions (:func:`_entry_bytes`). A long testbed run
#: re-solves on every change of availability and seldom sees a vector twice: an lru_cache of 4,096
#: entries took 0.2-1 GiB at 1,000 machines (47 KiB to 260 KiB each with their keys, by tracemalloc, at
#: 4 classes), and at 64 MiB the memo alone grew a 100-puller mapper by about 0.5 MB a minute, most of
#: the growth bench_mapper_memory.py measured. 4 MiB keeps every plan of the paper's simulations (the
#: most a replication memoises is 206 plans, 1.5 MB, lolo-mpd-fe and lohi-mfd-fe) and bounds the testbed's.
CACHE_BYTES = 4 * 2**20
#: Instances with more entries (classes x machines) are solved each time, not memoised: a big grid
#: seldom repeats an availability vector, and 4,096 of its solutions would take gigabytes.
MEMO_MAX_ENTRIES = 4096
#: Above this many LP columns (useful class-machine pairs) the LP is solved by interior point with
#: crossover, which also ends on a vertex: simplex time grows about quadratically with the grid
#: (about 10 s at 10,000 machines x 4 classes, against 0.3 s).
LARGE_LP_COLUMNS = 2000

_INF = highspy.kHighsInf
# HiGHS's default small_matrix_value and large_matrix_value: it drops or rejects LP
# coefficients (rates, arrival rates) outside this range.
_SMALLEST = 1e-9
_LARGEST = 1e15
_COLWISE = int(highspy.MatrixFormat.kColwise)
_MAXIMIZE = int(highspy.ObjSense.kMaximize)


class AllocationError(ValueError):
    """The allocation LP cannot be solved for these numbers; ``argument`` names the input
    to blame ("rates", "arrival_rates") when one is, else None."""

    def __init__(self, message: str, argument: str | None = None):
        super().__init__(message)
        self.argument = argument


@dataclass(frozen=True, slots=True)
class Allocation:
    """Optimum of the allocation LP: ``lam`` = lambda*, ``delta`` = delta* (classes x machines).

    ``delta`` is a basic (vertex) optimum, as LPAS_DG expects: the policy only uses
    which entries are (non)zero, see :meth:`eligible`.
    """

    lam: float
    delta: tuple[tuple[float, ...], ...]

    def eligible(self, tol: float = 1e-9) -> tuple[tuple[bool, ...], ...]:
        """``[i][j]`` is True iff delta*_ij > ``tol``: machine j may serve class i."""
        return tuple(tuple(d > tol for d in row) for row in self.delta)

    @property
    def load(self) -> float:
        """1 / lambda* (inf if lambda* <= 0): the fraction of the capacity the workload needs."""
        return 1.0 / self.lam if self.lam > 0 else math.inf

    @property
    def overloaded(self) -> bool:
        """True iff lambda* <= 1, i.e. the available machines cannot carry the arrival rates."""
        return self.lam <= 1


# Below this largest CPU share the LP is solved scaled up (_solve): no experiment's machines all give less.
TINY_CAPACITY = 2.0 ** -10


def solve_allocation(
    rates: Sequence[Sequence[float]],
    arrival_rates: Sequence[float],
    availability: Sequence[float],
    method: str = "dual",
) -> Allocation:
    """Solve the LPAS_DG allocation LP for the machines given::

        maximise  lambda
        s.t.      sum_j delta_ij * rates[i][j] >= lambda * arrival_rates[i]   for every class i
                  sum_i delta_ij <= availability[j]                           for every machine j
                  delta_ij >= 0, lambda >= 0

    ``rates`` is classes x machines (nominal rates mu'), ``arrival_rates`` has one entry
    per class (alpha), ``availability`` one CPU share in [0, 1] per machine (0 for a
    machine that is down).

    Results are memoised on the arguments (least recently used first out, within ``CACHE_BYTES``) when they
    are hashable, i.e. tuples, as simulations pass them; other sequences (lists, numpy
    arrays) are converted first.

    Special cases, without calling the solver:

    * every arrival rate is 0: lambda is unbounded, ``lam = inf`` and delta is all zeros;
    * some class with a positive arrival rate has no available machine with a positive
      rate (in particular: every machine is down): ``lam = 0`` and delta is all zeros
      (the LP then says nothing about delta).

    Entries of delta that cannot matter are exactly 0: classes with arrival rate 0,
    machines with availability 0, and pairs with rate 0.

    ``method`` is the simplex variant, "dual" or "primal". Both return an optimal
    vertex, but when the LP has several optimal vertices (common: identical
    machines make the optimal face wide) they may return different ones, with
    different zeros in delta: LPAS_DG's eligibility then depends on the choice.

    A grid of more than ``LARGE_LP_COLUMNS`` class-machine pairs is first merged: machines with
    the same rates and availability become one LP column per class, with their summed
    availability, and each merged share is then spread over its machines, filling one before the
    next, each class's machines spread over the kind's (see :func:`_spread`). The result is an
    optimal vertex of the whole LP, and the LP of a grid of a few machine kinds stays small however many
    machines there are.

    Raises ValueError for malformed input, and AllocationError (a ValueError) for a
    positive rate or arrival rate outside the range HiGHS takes ([1e-9, 1e15)) or an
    LP that HiGHS rejects or does not solve to optimality.
    """
    if method not in _STRATEGIES:
        raise ValueError(f"method must be one of {', '.join(_STRATEGIES)}, got {method!r}")
    entries = len(rates) * len(availability)
    if entries > LARGE_LP_COLUMNS:
        r, alpha, a = _validate(rates, arrival_rates, availability)
        merged = _solve_merging_identical_machines(r, alpha, a, method)
        if merged is not None:
            return merged
        if entries > MEMO_MAX_ENTRIES:
            return _solve(r, alpha, a, method)
    key = (rates, arrival_rates, availability)
    try:
        hash(key)
    except TypeError:
        r, alpha, a = _validate(rates, arrival_rates, availability)
        key = (tuple(map(tuple, r.tolist())), tuple(alpha.tolist()), tuple(a.tolist()))
    return _solve_cached(*key, method)


def cache_info() -> MemoInfo:
    """Hit/miss statistics of the :func:`solve_allocation` memo."""
    return _solve_cached.cache_info()


def cache_clear() -> None:
    """Empty the :func:`solve_allocation` memo."""
    _solve_cached.cache_clear()
    _solve_merged_cached.cache_clear()


# --------------------------------------------------------------------------- the memo

_R = TypeVar("_R")
# A float (24 bytes) and the tuple slot that points to it (8).
_FLOAT_BYTES = 32
# A tuple's header, a memo entry's key tuple, its ordered-dict node and the Allocation object.
_ENTRY_OVERHEAD = 512


class MemoInfo(NamedTuple):
    hits: int
    misses: int
    currsize: int  # entries
    bytes: int  # their estimated size
    budget: int


def _entry_bytes(classes: int, machines: int) -> int:
    """An upper estimate of one memo entry's memory: its key (rates, arrival rates, availability) and
    its plan (delta), each float counted with its tuple slot, plus a tuple header per row."""
    floats = 2 * classes * machines + classes + machines
    return floats * _FLOAT_BYTES + (2 * classes + 3) * 56 + _ENTRY_OVERHEAD


class _ByteBoundedMemo(Generic[_R]):
    """Memoises ``solve(rates, arrival_rates, availability, method)`` on its (hashable) arguments,
    evicting the least recently used entries once their estimated size passes ``budget`` bytes.
    Thread-safe (the solver runs outside the lock; two threads may solve the same instance once each)."""

    def __init__(self, solve: Callable[..., _R], budget: int):
        self._solve = solve
        self.budget = budget
        self._entries: OrderedDict[Hashable, tuple[_R, int]] = OrderedDict()
        self._bytes = 0
        self._hits = self._misses = 0
        self._lock = threading.Lock()

    def __call__(self, rates: Sequence[Sequence[float]], arrival_rates: Sequence[float],
                 availability: Sequence[float], method: str) -> _R:
        key = (rates, arrival_rates, availability, method)
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                self._hits += 1
                return entry[0]
            self._misses += 1
        result = self._solve(rates, arrival_rates, availability, method)
        size = _entry_bytes(len(rates), len(availability))
        if size > self.budget:
            return result
        with self._lock:
            if key not in self._entries:
                self._entries[key] = (result, size)
                self._bytes += size
                while self._bytes > self.budget:
                    _, (_, old) = self._entries.popitem(last=False)
                    self._bytes -= old
        return result

    def cache_info(self) -> MemoInfo:
        with self._lock:
            return MemoInfo(self._hits, self._misses, len(self._entries), self._bytes, self.budget)

    def cache_clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = self._hits = self._misses = 0


# --------------------------------------------------------------------------- internals


def _validate(
    rates: Sequence[Sequence[float]],
    arrival_rates: Sequence[float],
    availability: Sequence[float],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return (rates, arrival_rates, availability) as float arrays, or raise ValueError."""
    r = _as_array(rates, "rates")
    if r.ndim != 2 or r.shape[0] == 0 or r.shape[1] == 0:
        raise ValueError(
            f"rates must be a non-empty classes x machines matrix, got shape {r.shape}"
        )
    n, m = r.shape
    alpha = _as_array(arrival_rates, "arrival_rates")
    if alpha.shape != (n,):
        raise ValueError(
            f"arrival_rates must have one entry per class ({n}), got shape {alpha.shape}"
        )
    a = _as_array(availability, "availability")
    if a.shape != (m,):
        raise ValueError(
            f"availability must have one entry per machine ({m}), got shape {a.shape}"
        )
    for name, arr in (("rates", r), ("arrival_rates", alpha), ("availability", a)):
        if not np.isfinite(arr).all():
            raise ValueError(f"{name} must be finite, got {arr.tolist()}")
        if (arr < 0).any():
            raise ValueError(f"{name} must be >= 0, got {arr.tolist()}")
    if (a > 1).any():
        raise ValueError(f"availability must be in [0, 1], got {a.tolist()}")
    return r, alpha, a


def _as_array(values: object, name: str) -> np.ndarray:
    try:
        return np.array(values, dtype=float)
    except (TypeError, ValueError) as exc:  # ragged rows, non-numbers
        raise ValueError(
            f"{name} must be a rectangular array of numbers: {exc}"
        ) from None


_local = threading.local()


# HiGHS simplex_strategy values; "ipm" is interior point with crossover (for large LPs).
_STRATEGIES = {"dual": 1, "primal": 4}


# highspy's Highs() registers its Python callbacks in its constructor, and HiGHS (1.16 at least)
# writes its banner, "Running HiGHS ...", to stdout at that first call, before output_flag can be
# turned off: it would corrupt `mgst paper --json`. The C++ class underneath, which highspy.Highs
# extends, has every method used here and prints nothing until it runs with output on. None of the
# callbacks is used.
_QUIET_HIGHS: type = getattr(getattr(highspy, "_core", None), "_Highs", highspy.Highs)


def _highs(method: str = "dual") -> highspy.Highs:  # (or its C++ base class: _QUIET_HIGHS)
    """This thread's quiet, deterministic HiGHS instance for the given simplex variant."""
    h = getattr(_local, method, None)
    if h is None:
        h = _QUIET_HIGHS()
        if method == "ipm":
            solver: tuple[tuple[str, object], ...] = (("solver", "ipm"), ("run_crossover", "on"))
        else:
            # tiny LPs; and the basis comes straight from simplex
            solver = (("solver", "simplex"), ("simplex_strategy", _STRATEGIES[method]), ("presolve", "off"))
        for option, value in (
            ("output_flag", False),
            *solver,
            ("threads", 1),
            ("parallel", "off"),
            ("random_seed", 0),
        ):
            if h.setOptionValue(option, value) != highspy.HighsStatus.kOk:
                raise RuntimeError(f"HiGHS rejected option {option}={value!r}")
        setattr(_local, method, h)
    return h


def _solve_validated(
    rates: Sequence[Sequence[float]],
    arrival_rates: Sequence[float],
    availability: Sequence[float],
    method: str,
) -> Allocation:
    return _solve(*_validate(rates, arrival_rates, availability), method)


_solve_cached = _ByteBoundedMemo(_solve_validated, CACHE_BYTES)


def _solve(r: np.ndarray, alpha: np.ndarray, a: np.ndarray, method: str = "dual") -> Allocation:
    n, m = r.shape
    active = alpha > 0
    if not active.any():
        return _zeros(math.inf, n, m)
    top = float(a.max()) if a.size else 0.0
    if 0.0 < top < TINY_CAPACITY:
        # Capacities near HiGHS's absolute tolerances (1e-7) come back wrong (a share of 1.2e-7 gave a lambda 50 %
        # above the optimum): solved scaled up by a power of two, exact both ways, as the LP is linear in (a, delta,
        # lambda).
        # top * 2**k in [0.5, 1); at most 2**1000 a step (a subnormal share needs two), so that no scale overflows
        scale = math.ldexp(1.0, min(-math.frexp(top)[1], 1000))
        scaled = _solve(r, alpha, a * scale, method)
        return Allocation(lam=scaled.lam / scale,
                          delta=tuple(tuple(d / scale for d in row) for row in scaled.delta))

    # Only pairs (i, j) that can contribute get a column: active class, machine up,
    # positive rate. The others are fixed at 0, which keeps the optimum a vertex.
    useful = (r > 0) & active[:, None] & (a > 0)[None, :]
    if not useful[active].any(axis=1).all():
        return _zeros(0.0, n, m)  # some class cannot be served at all: lambda* = 0
    ii, jj = np.nonzero(useful)
    k = ii.size
    _check_coefficients(r[ii, jj], "rates", lambda b: f"[{ii[b]}][{jj[b]}]")
    _check_coefficients(alpha[active], "arrival_rates", lambda b: f"[{np.nonzero(active)[0][b]}]")
    classes = np.nonzero(active)[0]

    # Columns 0..k-1: delta_ij; column k: lambda. Rows 0..n-1: classes (>= 0);
    # rows n..n+m-1: machines (<= a_j). Column-wise matrix.
    index = np.empty(2 * k + classes.size, dtype=np.int32)
    value = np.empty(2 * k + classes.size, dtype=np.float64)
    index[0 : 2 * k : 2] = ii
    index[1 : 2 * k : 2] = n + jj
    value[0 : 2 * k : 2] = r[ii, jj]
    value[1 : 2 * k : 2] = 1.0
    index[2 * k :] = classes
    value[2 * k :] = -alpha[classes]
    start = np.arange(0, 2 * k + 3, 2, dtype=np.int32)
    start[-1] = index.size

    num_col = k + 1
    num_row = n + m
    cost = np.zeros(num_col)
    cost[k] = 1.0
    row_lower = np.zeros(num_row)
    row_lower[n:] = -_INF
    row_upper = np.full(num_row, _INF)
    row_upper[n:] = a

    # The array overload of passModel (see help(highspy.Highs.passModel)) takes the
    # numpy buffers as they are; filling a HighsLp converts them element by element,
    # which cost ~60 us more per solve (4 x 21).
    h = _highs("ipm" if k > LARGE_LP_COLUMNS else method)
    status = h.passModel(
        num_col,
        num_row,
        index.size,
        _COLWISE,
        _MAXIMIZE,
        0.0,  # objective offset
        cost,
        np.zeros(num_col),  # column lower bounds
        np.full(num_col, _INF),  # column upper bounds
        row_lower,
        row_upper,
        start,
        index,
        value,
        np.zeros(num_col, dtype=np.int32),  # integrality: all continuous
    )
    if status != highspy.HighsStatus.kOk:
        raise AllocationError(f"the HiGHS solver rejected the allocation LP ({_span(r, alpha)})")
    h.run()
    status = h.getModelStatus()
    if status != highspy.HighsModelStatus.kOptimal:
        raise AllocationError(
            f"the HiGHS solver did not solve the allocation LP to optimality: "
            f"{h.modelStatusToString(status)} ({_span(r, alpha)})"
        )

    x = np.asarray(h.getSolution().col_value, dtype=np.float64)
    delta = np.zeros((n, m))
    delta[ii, jj] = np.maximum(x[:k], 0.0)  # clip round-off below the lower bound
    return Allocation(lam=float(x[k]), delta=tuple(map(tuple, delta.tolist())))


def _solve_merging_identical_machines(
    r: np.ndarray, alpha: np.ndarray, a: np.ndarray, method: str
) -> Allocation | None:
    """Solve with identical machines (same rates and availability) merged into one LP column per class.

    None if no two machines are identical.
    """
    kinds, first, kind_of = np.unique(np.vstack([a, r]).T, axis=0, return_index=True, return_inverse=True)
    if len(kinds) == a.size:
        return None
    order = np.argsort(first)  # kinds in order of their first machine: the merged LP does not depend on sorting
    first = first[order]
    kind_of = np.argsort(order)[kind_of.ravel()]
    count = np.bincount(kind_of, minlength=first.size)
    merged_r, merged_a = r[:, first], a[first] * count
    if merged_r.size <= MEMO_MAX_ENTRIES:
        merged = _solve_merged_cached(tuple(map(tuple, merged_r.tolist())), tuple(alpha.tolist()),
                                      tuple(merged_a.tolist()), method)
    else:
        merged = _solve(merged_r, alpha, merged_a, method)
    if not merged.lam > 0 or math.isinf(merged.lam):
        return _zeros(merged.lam, *r.shape)
    return Allocation(lam=merged.lam, delta=_spread(np.asarray(merged.delta), kind_of, a))


def _solve_merged(
    rates: tuple[tuple[float, ...], ...],
    arrival_rates: tuple[float, ...],
    capacity: tuple[float, ...],
    method: str,
) -> Allocation:
    """The merged LP of :func:`_solve_merging_identical_machines` (capacities may exceed 1)."""
    return _solve(np.array(rates), np.array(arrival_rates), np.array(capacity), method)


# (memoised: the merged LP of a grid of a few kinds is small, and repeats)
_solve_merged_cached = _ByteBoundedMemo(_solve_merged, CACHE_BYTES)


def _spread(merged_delta: np.ndarray, kind_of: np.ndarray, a: np.ndarray) -> tuple[tuple[float, ...], ...]:
    """Spread each kind's merged shares over its machines, filling one machine before the next.

    Kind k's classes, in index order, lay their shares end to end on [0, count_k * a_k]; the p-th
    machine along that line owns [p * a_k, (p + 1) * a_k] and gets of each class the length of the
    overlap. At most count_k + classes - 1 entries of a kind are nonzero, and the classes shared by a
    machine chain one to the next: a vertex. The machines are laid along the line in van der Corput
    order of their rank within the kind (0, 1/2, 1/4, 3/4, ...), so that each class's machines are
    spread over the kind's, not a run of neighbours: the ready queue starts in index order, and a job
    offered to it walks past every machine of a run that cannot take it.
    """
    n, m = merged_delta.shape[0], kind_of.size
    delta = np.zeros((n, m))
    for k in range(merged_delta.shape[1]):
        members = np.nonzero(kind_of == k)[0]
        share = a[members[0]]
        if share <= 0.0:
            continue
        members = members[np.argsort(_van_der_corput(members.size), kind="stable")]
        ends = np.cumsum(merged_delta[:, k])  # class i's shares end here on the kind's line
        starts = ends - merged_delta[:, k]
        low = np.arange(members.size) * share  # the p-th machine's span: [low[p], low[p] + share]
        overlap = np.minimum(ends[:, None], low[None, :] + share) - np.maximum(starts[:, None], low[None, :])
        overlap[overlap <= 1e-12 * share] = 0.0  # touching spans, and round-off
        delta[:, members] = overlap
    return tuple(map(tuple, delta.tolist()))


def _van_der_corput(count: int) -> np.ndarray:
    """The first ``count`` points of the base-2 van der Corput sequence: 0, 1/2, 1/4, 3/4, 1/8, ..."""
    p = np.arange(count, dtype=np.int64)
    points = np.zeros(count)
    scale = 0.5
    while p.any():
        points += (p & 1) * scale
        p >>= 1
        scale /= 2
    return points


def _check_coefficients(values: np.ndarray, name: str, where: Callable[[int], str]) -> None:
    """AllocationError naming the first of ``values`` (LP coefficients) outside what HiGHS takes;
    ``where(b)`` says where the b-th value comes from."""
    bad = np.nonzero((values < _SMALLEST) | (values >= _LARGEST))[0]
    if bad.size:
        b = int(bad[0])
        raise AllocationError(
            f"{name}{where(b)} = {values[b]:g} is outside the range the LP solver (HiGHS) takes for "
            f"rates, [{_SMALLEST:g}, {_LARGEST:g}); rescale the time unit or check for a typo",
            name,
        )


def _span(r: np.ndarray, alpha: np.ndarray) -> str:
    positive = np.concatenate([r[r > 0], alpha[alpha > 0]])
    return f"rates and arrival rates from {positive.min():g} to {positive.max():g}"


def _zeros(lam: float, n: int, m: int) -> Allocation:
    return Allocation(lam=lam, delta=((0.0,) * m,) * n)
