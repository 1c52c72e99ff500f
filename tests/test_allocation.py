"""Tests for the LPAS_DG allocation LP (mgst.policies.allocation)."""

from __future__ import annotations

import itertools
import math

import highspy
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from mgst import config
from mgst.policies import allocation
from mgst.policies.allocation import (
    Allocation,
    AllocationError,
    cache_clear,
    cache_info,
    solve_allocation,
)

# MGST paper, HiHi setting: rates are classes x machines.
HIHI_RATES = (
    (2.0, 2.0, 2.0, 2.0, 2.0, 2.0),
    (1.0, 20.0, 3.7, 7.1, 2.4, 8.7),
    (1.0, 20.0, 9.4, 3.7, 7.2, 2.7),
    (1.0, 20.0, 2.8, 5.9, 4.4, 6.3),
)
HIHI_ALPHA = (2.25, 4.50, 7.20, 12.60)


def reference_lambda(rates, alpha, avail) -> float:
    """lambda* from scipy's linprog (variables: delta row-major, then lambda)."""
    r = np.asarray(rates, dtype=float)
    n, m = r.shape
    nv = n * m + 1
    c = np.zeros(nv)
    c[-1] = -1.0  # linprog minimises
    a_ub = np.zeros((n + m, nv))
    b_ub = np.zeros(n + m)
    for i in range(n):  # lambda * alpha_i - sum_j delta_ij * mu_ij <= 0
        a_ub[i, i * m : (i + 1) * m] = -r[i]
        a_ub[i, -1] = alpha[i]
    for j in range(m):
        a_ub[n + j, j : n * m : m] = 1.0  # sum_i delta_ij <= a_j
        b_ub[n + j] = avail[j]
    res = linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=[(0, None)] * nv, method="highs-ipm")
    assert res.status == 0, res.message
    return -res.fun


def assert_feasible(alloc: Allocation, rates, alpha, avail, tol: float = 1e-7) -> None:
    d = np.asarray(alloc.delta, dtype=float)
    r = np.asarray(rates, dtype=float)
    assert d.shape == r.shape
    assert (d >= 0).all()
    served = (d * r).sum(axis=1)
    needed = alloc.lam * np.asarray(alpha, dtype=float)
    assert (served >= needed - tol * np.maximum(1.0, needed)).all(), (served, needed)
    used = d.sum(axis=0)
    assert (used <= np.asarray(avail, dtype=float) + tol).all(), (used, avail)


# --------------------------------------------------------------------- by-hand cases


def test_one_class_one_machine():
    # lambda* = mu * a / alpha = 3 * 0.5 / 0.75 = 2; the whole share is used.
    alloc = solve_allocation(((3.0,),), (0.75,), (0.5,))
    assert alloc.lam == pytest.approx(2.0, rel=1e-12)
    assert alloc.delta[0][0] == pytest.approx(0.5, rel=1e-12)
    assert alloc.eligible() == ((True,),)
    assert alloc.load == pytest.approx(0.5)
    assert not alloc.overloaded


def test_two_by_two_each_class_on_its_own_machine():
    # Each class is 10x faster on its own machine and the loads are equal: the only
    # optimum is delta = I, lambda* = 10 / 2 = 5.
    rates = ((10.0, 1.0), (1.0, 10.0))
    alloc = solve_allocation(rates, (2.0, 2.0), (1.0, 1.0))
    assert alloc.lam == pytest.approx(5.0, rel=1e-9)
    assert alloc.eligible() == ((True, False), (False, True))
    assert alloc.delta[0][1] == 0.0 and alloc.delta[1][0] == 0.0
    assert alloc.delta[0][0] == pytest.approx(1.0) and alloc.delta[1][
        1
    ] == pytest.approx(1.0)


def test_two_by_two_half_available_machine_is_helped_out():
    # Machine 0 only half available: class 0 gets all of it (capacity 5) plus a share t
    # of machine 1; class 1 keeps 1 - t. Balancing 5 + t = 10 (1 - t) gives t = 5/11,
    # lambda* = (5 + 5/11) / 2 = 30/11; class 1 never uses machine 0.
    rates = ((10.0, 1.0), (1.0, 10.0))
    alloc = solve_allocation(rates, (2.0, 2.0), (0.5, 1.0))
    assert alloc.lam == pytest.approx(30 / 11, rel=1e-9)
    assert alloc.eligible() == ((True, True), (False, True))
    assert alloc.delta[0][0] == pytest.approx(0.5)
    assert alloc.delta[0][1] == pytest.approx(5 / 11)
    assert alloc.delta[1][1] == pytest.approx(6 / 11)


def test_class_with_zero_arrival_rate_is_ignored():
    # Class 1 has no arrivals: lambda* = (4 + 2) / 3 = 2 from class 0 alone.
    alloc = solve_allocation(((4.0, 2.0), (9.0, 9.0)), (3.0, 0.0), (1.0, 1.0))
    assert alloc.lam == pytest.approx(2.0, rel=1e-9)
    assert alloc.delta[1] == (0.0, 0.0)


def test_all_arrival_rates_zero_is_unbounded():
    alloc = solve_allocation(((1.0, 2.0),), (0.0,), (1.0, 1.0))
    assert alloc.lam == math.inf
    assert alloc.delta == ((0.0, 0.0),)
    assert alloc.load == 0.0
    assert not alloc.overloaded


# ----------------------------------------------------------------------- HiHi (MGST)


@pytest.mark.parametrize(
    "avail", [(1.0,) * 6, (1.0, 1.0, 1.0, 0.5, 0.5, 0.5)], ids=["all-up", "half-share"]
)
def test_hihi_matches_linprog_and_is_feasible(avail):
    alloc = solve_allocation(HIHI_RATES, HIHI_ALPHA, avail)
    assert alloc.lam == pytest.approx(
        reference_lambda(HIHI_RATES, HIHI_ALPHA, avail), abs=1e-6
    )
    assert_feasible(alloc, HIHI_RATES, HIHI_ALPHA, avail, tol=1e-7)
    # A vertex of this LP has at most (classes + machines) nonzero variables
    # (lambda is one of them).
    nonzero = sum(sum(row) for row in alloc.eligible())
    assert nonzero <= len(HIHI_ALPHA) + len(avail) - 1


# ----------------------------------------------------------------- machines down


def test_machine_down_gets_no_share():
    avail = (1.0, 0.0, 1.0, 1.0, 0.0, 1.0)  # machines 1 (the fast one) and 4 down
    alloc = solve_allocation(HIHI_RATES, HIHI_ALPHA, avail)
    for row in alloc.delta:
        assert row[1] == 0.0 and row[4] == 0.0
    assert alloc.lam == pytest.approx(
        reference_lambda(HIHI_RATES, HIHI_ALPHA, avail), abs=1e-6
    )
    assert_feasible(alloc, HIHI_RATES, HIHI_ALPHA, avail)


def test_all_machines_down():
    alloc = solve_allocation(HIHI_RATES, HIHI_ALPHA, (0.0,) * 6)
    assert alloc.lam == 0.0
    assert alloc.delta == ((0.0,) * 6,) * 4
    assert alloc.overloaded
    assert alloc.load == math.inf
    assert not any(any(row) for row in alloc.eligible())


def test_class_without_any_usable_machine_gives_zero_lambda():
    # Class 1 can only run on machine 1, which is down.
    alloc = solve_allocation(((1.0, 1.0), (0.0, 5.0)), (1.0, 1.0), (1.0, 0.0))
    assert alloc.lam == 0.0
    assert alloc.overloaded


# --------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("rates", "alpha", "avail"),
    [
        (((1.0, 2.0), (3.0,)), (1.0, 1.0), (1.0, 1.0)),  # ragged rates
        ((1.0, 2.0), (1.0,), (1.0, 1.0)),  # rates not a matrix
        ((), (), ()),  # no classes
        (((),), (1.0,), ()),  # no machines
        (((1.0, 2.0),), (1.0, 1.0), (1.0, 1.0)),  # one arrival rate too many
        (((1.0, 2.0),), (1.0,), (1.0,)),  # one availability too few
        (((1.0, -2.0),), (1.0,), (1.0, 1.0)),  # negative rate
        (((1.0, 2.0),), (-1.0,), (1.0, 1.0)),  # negative arrival rate
        (((1.0, 2.0),), (1.0,), (1.0, 1.5)),  # availability > 1
        (((1.0, 2.0),), (1.0,), (1.0, -0.1)),  # availability < 0
        (((1.0, math.nan),), (1.0,), (1.0, 1.0)),  # NaN rate
        (((1.0, math.inf),), (1.0,), (1.0, 1.0)),  # infinite rate
        (((1.0, "x"),), (1.0,), (1.0, 1.0)),  # not a number
    ],
)
def test_bad_input_raises_value_error(rates, alpha, avail):
    with pytest.raises(ValueError):
        solve_allocation(rates, alpha, avail)


def test_bad_input_as_lists_raises_value_error():
    with pytest.raises(ValueError, match="availability"):
        solve_allocation([[1.0, 2.0]], [1.0], [1.0])


@pytest.mark.parametrize(
    ("rates", "alpha", "argument", "where"),
    [
        (((1.0,),), (1e300,), "arrival_rates", "arrival_rates[0] = 1e+300"),
        (((1.0, 1e-300),), (1.0,), "rates", "rates[0][1] = 1e-300"),
        (((1.0,), (1e15,)), (1.0, 1.0), "rates", "rates[1][0] = 1e+15"),
    ],
)
def test_coefficients_outside_the_solvers_range_raise_a_clear_value_error(rates, alpha, argument, where):
    with pytest.raises(AllocationError) as info:
        solve_allocation(rates, alpha, (1.0,) * len(rates[0]))
    assert isinstance(info.value, ValueError)
    assert info.value.argument == argument
    assert str(info.value).startswith(where)
    assert "outside the range" in str(info.value)


def test_unused_tiny_rates_do_not_matter():
    # A class with arrival rate 0 and a machine that is down put no coefficient in the LP.
    alloc = solve_allocation(((1.0, 1e-300), (1e-300, 1.0)), (1.0, 0.0), (1.0, 0.0))
    assert alloc.lam == pytest.approx(1.0)


class _FailingHighs:
    def __init__(self, pass_status, model_status=None):
        self.pass_status = pass_status
        self.model_status = model_status

    def passModel(self, *args):  # noqa: N802 (HiGHS's name)
        return self.pass_status

    def run(self):
        pass

    def getModelStatus(self):  # noqa: N802
        return self.model_status

    def modelStatusToString(self, status):  # noqa: N802
        return "Time limit reached"


@pytest.mark.parametrize(
    ("highs", "match"),
    [
        (_FailingHighs(highspy.HighsStatus.kError), "rejected the allocation LP"),
        (_FailingHighs(highspy.HighsStatus.kOk, highspy.HighsModelStatus.kTimeLimit), "Time limit reached"),
    ],
)
def test_solver_failures_raise_allocation_error_not_runtime_error(monkeypatch, highs, match):
    cache_clear()
    monkeypatch.setattr(allocation, "_highs", lambda method="dual": highs)
    with pytest.raises(AllocationError, match=match) as info:
        solve_allocation(((1.0, 2.0),), (1.5,), (1.0, 1.0))
    assert "rates and arrival rates from 1 to 2" in str(info.value)
    cache_clear()


def test_every_lp_with_rates_in_the_configs_bounds_solves():
    """config.MIN_RATE and config.MAX_RATE rely on this: at the corners of the box every LP
    solves, feasible to HiGHS's tolerance (1e-7); short of 1000x overload (a lower bound on
    lambda* >= 1e-3) it is also optimal and serves every class its lambda* alpha_i, to 1e-6
    relative."""
    lo, hi = config.MIN_RATE, config.MAX_RATE
    for a0, a1, r00, r01, r10, r11 in itertools.product((lo, 1.0, hi), repeat=6):
        for avail, method in itertools.product(((1.0, 1e-3), (1.0, 1.0)), ("dual", "primal")):
            rates, alpha = ((r00, r01), (r10, r11)), (a0, a1)
            alloc = solve_allocation(rates, alpha, avail, method)
            assert 0 < alloc.lam < math.inf
            assert_feasible(alloc, rates, alpha, avail)
            # Each class on half of the machine that runs it fastest: a lower bound on lambda*.
            alone = min(max(r * a for r, a in zip(row, avail)) / (2 * x) for row, x in zip(rates, alpha))
            if alone >= 1e-3:
                assert alloc.lam >= alone * (1 - 1e-6), (rates, alpha, avail, alloc)
                served = (np.asarray(alloc.delta) * np.asarray(rates)).sum(axis=1)
                assert (served >= alloc.lam * np.asarray(alpha) * (1 - 1e-6)).all(), (rates, alpha, avail, alloc)


# -------------------------------------------------------------------------- memo


def test_memo_and_non_tuple_inputs():
    cache_clear()
    avail = (1.0, 1.0, 1.0, 0.5, 0.5, 0.5)
    first = solve_allocation(HIHI_RATES, HIHI_ALPHA, avail)
    again = solve_allocation(HIHI_RATES, HIHI_ALPHA, avail)
    assert again is first
    info = cache_info()
    assert info.hits == 1 and info.misses == 1
    # Lists and numpy arrays are accepted and hit the same memo entry.
    assert (
        solve_allocation([list(r) for r in HIHI_RATES], list(HIHI_ALPHA), list(avail))
        is first
    )
    assert (
        solve_allocation(np.array(HIHI_RATES), np.array(HIHI_ALPHA), np.array(avail))
        is first
    )


def test_eligible_tolerance():
    alloc = Allocation(lam=1.5, delta=((0.5, 1e-10), (0.0, 2e-9)))
    assert alloc.eligible() == ((True, False), (False, True))
    assert alloc.eligible(tol=1e-8) == ((True, False), (False, False))
    assert alloc.load == pytest.approx(1 / 1.5)
    assert Allocation(lam=1.0, delta=()).overloaded


# ------------------------------------------------------------- property: vs linprog


@st.composite
def instances(draw):
    n = draw(st.integers(1, 4))
    m = draw(st.integers(1, 6))
    rate = st.floats(0.1, 20.0, allow_nan=False, allow_infinity=False)
    rates = tuple(tuple(draw(rate) for _ in range(m)) for _ in range(n))
    alpha = tuple(
        draw(st.one_of(st.just(0.0), st.floats(0.05, 20.0, allow_nan=False)))
        for _ in range(n)
    )
    avail = tuple(
        draw(
            st.one_of(st.just(0.0), st.just(1.0), st.floats(0.0, 1.0, allow_nan=False))
        )
        for _ in range(m)
    )
    return rates, alpha, avail


@settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(instances())
# a machine whose share is near HiGHS's absolute tolerances: lambda came back 50 % above the optimum (solved scaled)
@example((((1.0,), (1.0,), (1.0,), (1.0,)), (0.0, 0.0, 0.0625, 0.125), (1.192092896e-07,)))
@example((((1.0,),), (1.0,), (5e-324,)))  # a subnormal share: its scale must not overflow
def test_property_matches_linprog(inst):
    rates, alpha, avail = inst
    assume(any(a > 0 for a in alpha))
    alloc = solve_allocation(rates, alpha, avail)
    expected = reference_lambda(rates, alpha, avail)
    assert alloc.lam == pytest.approx(expected, rel=1e-6, abs=1e-7)
    assert_feasible(alloc, rates, alpha, avail)
    d = np.asarray(alloc.delta)
    assert (d[:, np.asarray(avail) == 0] == 0).all()
    assert (d[np.asarray(alpha) == 0, :] == 0).all()


# ------------------------------------------------- large grids: identical machines merged


def assert_vertex(alloc: Allocation, rates, alpha, avail, tol: float = 1e-9) -> None:
    """delta (with lambda) is a basic solution: its nonzero variables' columns in the tight rows are independent."""
    d = np.asarray(alloc.delta)
    r = np.asarray(rates, dtype=float)
    n, m = r.shape
    nonzero = [(i, j) for i in range(n) for j in range(m) if d[i, j] > tol]
    served = (d * r).sum(axis=1)
    tight_classes = [i for i in range(n) if abs(served[i] - alloc.lam * alpha[i]) <= 1e-7 * max(1.0, served[i])]
    tight_machines = [j for j in range(m) if abs(d[:, j].sum() - avail[j]) <= 1e-9]
    rows = len(tight_classes) + len(tight_machines)
    a = np.zeros((rows, len(nonzero) + 1))  # the nonzero deltas, then lambda
    for col, (i, j) in enumerate(nonzero):
        if i in tight_classes:
            a[tight_classes.index(i), col] = r[i, j]
        if j in tight_machines:
            a[len(tight_classes) + tight_machines.index(j), col] = 1.0
    for row, i in enumerate(tight_classes):
        a[row, -1] = -alpha[i]
    assert np.linalg.matrix_rank(a) == len(nonzero) + 1, (len(nonzero), rows)


def _kinds_repeated(m: int, shares: tuple[float, ...]):
    """HiHi's six machine kinds repeated to m machines, with shares cycling through ``shares``."""
    rates = tuple(tuple(row[j % 6] for j in range(m)) for row in HIHI_RATES)
    avail = tuple(shares[(j // 6) % len(shares)] for j in range(m))
    alpha = tuple(x * m / 6 for x in HIHI_ALPHA)
    return rates, alpha, avail


@pytest.mark.parametrize("shares", [(1.0,), (1.0, 0.5, 0.0), (0.3, 0.3, 0.9, 0.0, 1.0)])
def test_a_large_grid_of_few_machine_kinds_is_optimal_feasible_and_a_vertex(shares):
    rates, alpha, avail = _kinds_repeated(703, shares)  # 2,812 class-machine pairs: merged
    assert len(rates) * len(avail) > allocation.LARGE_LP_COLUMNS
    alloc = solve_allocation(rates, alpha, avail, "primal")
    assert alloc.lam == pytest.approx(reference_lambda(rates, alpha, avail), rel=1e-7)
    assert_feasible(alloc, rates, alpha, avail, tol=1e-9)
    assert_vertex(alloc, rates, alpha, avail)
    d = np.asarray(alloc.delta)
    assert (d[:, np.asarray(avail) == 0] == 0).all()
    # Each kind fills its machines one after another: at most classes - 1 of them share out their time.
    for kind in {(avail[j], tuple(r[j] for r in rates)) for j in range(len(avail))}:
        members = [j for j in range(len(avail)) if (avail[j], tuple(r[j] for r in rates)) == kind]
        assert sum((d[:, members] > 1e-9).sum(axis=0) > 1) <= len(rates) - 1


def test_a_large_grid_merges_to_a_small_memoised_lp():
    cache_clear()
    rates, alpha, avail = _kinds_repeated(5000, (1.0, 0.5))
    first = solve_allocation(rates, alpha, avail, "dual")
    again = solve_allocation(rates, alpha, avail, "dual")
    assert first == again
    merged = allocation._solve_merged_cached.cache_info()
    assert (merged.misses, merged.hits) == (1, 1)
    assert (len(first.delta), len(first.delta[0])) == (4, 5000)




def test_a_large_grid_of_distinct_machines_is_solved_whole():
    rng = np.random.default_rng(7)
    m = 600
    rates = tuple(tuple(rng.uniform(0.5, 20.0, m).tolist()) for _ in range(4))
    avail = tuple(rng.uniform(0.2, 1.0, m).tolist())
    alloc = solve_allocation(rates, HIHI_ALPHA, avail, "primal")
    assert alloc.lam == pytest.approx(reference_lambda(rates, HIHI_ALPHA, avail), rel=1e-7)
    assert_feasible(alloc, rates, HIHI_ALPHA, avail, tol=1e-9)
    assert_vertex(alloc, rates, HIHI_ALPHA, avail)


def test_the_vertex_check_rejects_an_optimum_averaged_over_identical_machines():
    rates, alpha, avail = _kinds_repeated(703, (1.0,))
    alloc = solve_allocation(rates, alpha, avail, "primal")
    d = np.asarray(alloc.delta)
    for k in range(6):  # each kind's machines share its classes evenly: optimal, feasible, not a vertex
        d[:, k::6] = d[:, k::6].mean(axis=1, keepdims=True)
    averaged = Allocation(lam=alloc.lam, delta=tuple(map(tuple, d.tolist())))
    assert_feasible(averaged, rates, alpha, avail, tol=1e-9)
    with pytest.raises(AssertionError):
        assert_vertex(averaged, rates, alpha, avail)


def test_each_class_of_a_merged_kind_is_spread_over_the_kinds_machines():
    # Laid in index order, a class's machines would be a run of neighbours, which every job of
    # another class offered to the ready queue (in index order at first) walks past.
    rates, alpha, avail = _kinds_repeated(6000, (1.0,))
    d = np.asarray(solve_allocation(rates, alpha, avail, "primal").delta)
    for k in range(6):
        members = np.arange(k, 6000, 6)  # the kind's machines, by rank
        for i in range(len(rates)):
            ranks = np.nonzero(d[i, members] > 1e-9)[0]
            if ranks.size < 10:
                continue
            spacing = members.size / ranks.size
            assert ranks[0] < 2 * spacing and ranks[-1] > members.size - 1 - 2 * spacing, (k, i)
            assert np.diff(ranks).max() <= 2 * spacing + 1, (k, i, np.diff(ranks).max(), spacing)


def test_solving_prints_nothing_in_a_fresh_interpreter():
    """HiGHS's banner ("Running HiGHS ...") must not reach stdout: it would corrupt `mgst paper --json`.

    A fresh interpreter, because each thread makes its HiGHS instances once; both the simplex and
    the interior-point (large LP) instances are made.
    """
    import subprocess
    import sys

    code = (
        "from mgst.policies.allocation import solve_allocation, LARGE_LP_COLUMNS\n"
        "solve_allocation(((1.0, 2.0), (2.0, 1.0)), (1.0, 1.0), (1.0, 1.0))\n"
        "m = LARGE_LP_COLUMNS + 1\n"
        "solve_allocation((tuple(1.0 + j / m for j in range(m)),), (1.0,), (1.0,) * m)\n"  # no two alike
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""


def test_the_memo_evicts_by_bytes_least_recently_used_first():
    """A budget of three 2x3 entries: the fourth instance evicts the least recently used one (solved
    again when asked), never the one just used, and the estimated bytes never pass the budget."""
    calls: list[tuple] = []

    def solve(rates, alpha, avail, method):
        calls.append(avail)
        return ("plan", avail)

    size = allocation._entry_bytes(2, 3)
    memo = allocation._ByteBoundedMemo(solve, 3 * size + size // 2)
    rates, alpha = ((1.0, 2.0, 3.0), (3.0, 2.0, 1.0)), (1.0, 1.0)
    a, b, c, d = ((1.0, 1.0, x) for x in (0.1, 0.2, 0.3, 0.4))
    for avail in (a, b, c):
        assert memo(rates, alpha, avail, "dual") == ("plan", avail)
    memo(rates, alpha, a, "dual")  # a is now the most recently used: b is the oldest
    memo(rates, alpha, d, "dual")
    info = memo.cache_info()
    assert (info.currsize, info.bytes, info.hits, info.misses) == (3, 3 * size, 1, 4)
    assert calls == [a, b, c, d]
    memo(rates, alpha, a, "dual")  # kept
    memo(rates, alpha, b, "dual")  # evicted: solved again
    assert calls == [a, b, c, d, b]
    assert memo.cache_info().bytes <= memo.budget
    memo.cache_clear()
    assert memo.cache_info() == (0, 0, 0, 0, memo.budget)


def test_a_memo_too_small_for_an_entry_keeps_nothing_and_changes_no_result(monkeypatch):
    """Solved through a memo with room for one small entry, the plans equal those solved afresh."""
    cache_clear()
    monkeypatch.setattr(allocation._solve_cached, "budget", allocation._entry_bytes(len(HIHI_RATES), 6))
    plans = {}
    for avail in ((1.0,) * 6, (0.5,) * 6, (1.0, 0.0, 1.0, 0.5, 0.5, 0.5), (1.0,) * 6):
        plans[avail] = solve_allocation(HIHI_RATES, HIHI_ALPHA, avail)
        assert plans[avail] == allocation._solve(*allocation._validate(HIHI_RATES, HIHI_ALPHA, avail))
        assert cache_info().currsize <= 1 and cache_info().bytes <= allocation._solve_cached.budget
    assert cache_info().hits == 0  # (1.0,) * 6 was evicted by the two after it
    cache_clear()
