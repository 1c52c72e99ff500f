"""Casanova et al.'s estimates from the present states: a gang whose members are RECLAIMED now, against a
brute-force walk of the members' joint chain."""

from __future__ import annotations

import numpy as np
import pytest

from mgst.papers.casanova.estimates import Estimates

U, R = 0, 1

# Three workers' chains (rows UP, RECLAIMED, DOWN), unlike one another, reclaimed often enough to matter.
CHAINS = (
    ((0.80, 0.15, 0.05), (0.30, 0.65, 0.05), (0.10, 0.00, 0.90)),
    ((0.90, 0.05, 0.05), (0.20, 0.70, 0.10), (0.20, 0.10, 0.70)),
    ((0.70, 0.25, 0.05), (0.40, 0.55, 0.05), (0.05, 0.05, 0.90)),
)


def walk(members: tuple[int, ...], start: dict[int, int], work: int, slots: int = 4000) -> tuple[float, float]:
    """(P, E given success) of ``work`` slots of simultaneous computation by ``members`` from ``start``, by
    pushing the probability of (every member's state, slots computed) forward one slot at a time through the
    members' joint chain (the Kronecker product of their UP/RECLAIMED blocks: a DOWN anywhere leaves it, a
    failure): a slot counts when every member is UP in it. E counts the slots up to and including the last one
    computed (the paper's: 1 + (W - 1) gaps from all UP)."""
    joint = np.ones((1, 1))
    for q in members:
        joint = np.kron(joint, np.array(CHAINS[q])[:2, :2])  # joint state index: member i's state is bit i
    first = np.zeros(joint.shape[0])
    first[sum(start.get(q, U) << (len(members) - 1 - i) for i, q in enumerate(members))] = 1.0
    all_up = 0  # every member UP
    mass = np.zeros((work, joint.shape[0]))  # mass[d]: probability by joint state, d slots computed
    done_at_0 = int(first[all_up] == 1.0)
    if done_at_0 == work:
        return 1.0, 1.0
    mass[done_at_0] = first
    p_done = e_done = 0.0
    for t in range(1, slots):
        moved = mass @ joint
        finishing = moved[work - 1, all_up]
        p_done += finishing
        e_done += finishing * (t + 1)
        up_now = moved[:, all_up].copy()
        moved[:, all_up] = 0.0
        moved[1:, all_up] = up_now[:-1]  # an all-UP slot counts one more
        mass = moved
    return p_done, e_done / p_done


@pytest.mark.parametrize("members, reclaimed, work", [
    ((0,), (0,), 1),
    ((0,), (0,), 4),
    ((0, 1), (1,), 3),
    ((0, 1, 2), (0, 2), 2),
    ((0, 1, 2), (0, 1, 2), 5),
])
def test_a_set_with_reclaimed_members_meets_its_walk(members, reclaimed, work):
    est = Estimates(CHAINS, 3, 0.0, 0.0, exact=True, present=True)
    p, e = est.compute(frozenset(members), float(work), frozenset(reclaimed))
    p_walk, e_walk = walk(members, dict.fromkeys(reclaimed, R), work)
    assert p == pytest.approx(p_walk, rel=1e-9) and e == pytest.approx(e_walk, rel=1e-9)


@pytest.mark.parametrize("members, work", [((0,), 3), ((0, 1, 2), 4)])
def test_from_all_up_the_walk_is_theorem_5_1_exactly_normalised(members, work):
    """The oracle's own check: with nobody RECLAIMED it gives the theorem's (exact) P and E."""
    est = Estimates(CHAINS, 3, 0.0, 0.0, exact=True)
    assert walk(members, {}, work) == pytest.approx(est.compute(frozenset(members), float(work)), rel=1e-9)


def test_a_reclaimed_member_lowers_p_and_raises_e_as_printed_too():
    est = Estimates(CHAINS, 3, 0.0, 0.0, present=True)
    members = frozenset((0, 1))
    p_up, e_up = est.compute(members, 3.0)
    p_rec, e_rec = est.compute(members, 3.0, frozenset((1,)))
    assert p_rec < p_up and e_rec > e_up
    # as printed: E = (E0 + 1 + (W - 1) E_c) / (P0 P_+^(W - 1)), E0 and E_c the unconditioned means
    p0, e0 = est._first(members, frozenset((1,)))
    p_plus, e_c = est._set(members)
    assert p_rec == pytest.approx(p0 * p_plus**2) and e_rec == pytest.approx((e0 + 1 + 2 * e_c) / p_rec)


def test_transfers_of_a_reclaimed_worker_wait_for_it():
    est = Estimates(CHAINS, 3, 5.0, 1.0, present=True)
    up = est.iteration({0: 6.0, 1: 6.0}, {0: 1.0, 1: 1.0})
    rec = est.iteration({0: 6.0, 1: 6.0}, {0: 1.0, 1: 1.0}, reclaimed=frozenset((1,)))
    assert rec[0] < up[0] and rec[1] > up[1]


# Rows UP, RECLAIMED, DOWN. NEVER_DOWN is UP half its slots and never DOWN; FAILS is UP or DOWN, never RECLAIMED.
ALWAYS_UP = ((1.0, 0.0, 0.0), (1.0, 0.0, 0.0), (0.0, 0.0, 1.0))
NEVER_DOWN = ((0.5, 0.5, 0.0), (0.5, 0.5, 0.0), (0.0, 0.0, 1.0))
FAILS = ((0.9, 0.0, 0.1), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))


@pytest.mark.parametrize("exact", [False, True])
def test_a_set_one_of_whose_members_can_fail_is_estimated_by_the_theorem(exact):
    """Theorem 5.1 uses E_u / (1 + E_u) when at least one member can go DOWN: a member that never does (UP in
    every slot) changes nothing. By hand, FAILS alone: P_uu(t) = 0.9^t, E_u = 9, A = 90, P_+ = 0.9, E_c = 0.9;
    W = 3: as printed (1 + 2 * 0.9) / 0.81, exact 1 + 2 * 0.9 / 0.9 = 3."""
    est = Estimates((ALWAYS_UP, FAILS), 2, 0.0, 0.0, exact=exact)
    assert est.p_plus(frozenset((0, 1))) == pytest.approx(0.9, rel=1e-9)
    p, e = est.compute(frozenset((0, 1)), 3.0)
    assert p == pytest.approx(0.81, rel=1e-9)
    assert e == pytest.approx(3.0 if exact else 2.8 / 0.81, rel=1e-9)
    assert (p, e) == pytest.approx(est.compute(frozenset((1,)), 3.0), rel=1e-12)


@pytest.mark.parametrize("exact", [False, True])
def test_a_set_none_of_whose_members_can_fail_takes_its_time_to_gather_its_up_slots(exact):
    """P_+ = 1, and W slots all UP take W slots on workers always UP, and 1 + (W - 1) * 2 on one UP in a slot
    in two at random (from UP, the next UP slot is a geometric wait of mean 2); both together, the same."""
    est = Estimates((ALWAYS_UP, NEVER_DOWN, ALWAYS_UP), 2, 0.0, 0.0, exact=exact)
    assert est.compute(frozenset((0, 2)), 5.0) == pytest.approx((1.0, 5.0))
    assert est.compute(frozenset((1,)), 5.0) == pytest.approx((1.0, 9.0))
    assert est.compute(frozenset((0, 1)), 100.0) == pytest.approx((1.0, 199.0))
    assert est.communication({0: 6.0}) == pytest.approx((1.0, 6.0))
