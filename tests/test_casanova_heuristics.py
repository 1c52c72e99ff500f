"""Casanova et al.'s estimates and heuristics (mgst.papers.casanova): closed forms on chains that are never
RECLAIMED, each heuristic's choice on a hand-built state (values worked out in the comments), and the
event-driven proactive check against the per-slot one on random instances."""

from __future__ import annotations

import random

import pytest

from mgst.core.iterations import DOWN, RECLAIMED, UP, Iterations
from mgst.papers.casanova.estimates import CREDITS, Estimates
from mgst.papers.casanova.heuristics import NAMES, PASSIVE, Passive, Proactive, Random, heuristic, score
from mgst.papers.casanova.instance import run, scenario
from mgst.sim.iterations import run_iterations
from tests.iteration_fakes import Script


def never_reclaimed(stay: float):
    """UP stays UP with ``stay``, else DOWN: P_uu(t) = stay^t, so P_+ = stay and (printed) E_c = stay."""
    return ((stay, 0.0, 1.0 - stay), (0.5, 0.4, 0.1), (0.1, 0.0, 0.9))


# Three workers, no transfers, one task: worker 0 fast and flaky, 1 slow and steady, 2 between.
STAYS, WORK = (0.7, 0.999, 0.95), (2.0, 4.0, 2.0)


def estimates(exact: bool = False) -> Estimates:
    return Estimates([never_reclaimed(a) for a in STAYS], 3, 0.0, 0.0, exact=exact)


def app_for(policy, tasks: int = 1) -> Iterations:
    return Iterations(WORK, tasks, 1, 0.0, 0.0, 3, policy)


def test_p_plus_and_e_of_a_chain_never_reclaimed_have_closed_forms():
    est, exact = estimates(), estimates(exact=True)
    for q, a in enumerate(STAYS):
        p_plus, e_c = est._set(frozenset((q,)))
        assert p_plus == pytest.approx(a, abs=1e-9) and e_c == pytest.approx(a, abs=1e-9)
        # printed: E(W) = (1 + (W - 1) a) / a^(W - 1); exact: 1 + (W - 1) E_c / P_+ = W
        assert est.compute(frozenset((q,)), 3.0) == pytest.approx((a * a, (1 + 2 * a) / a**2))
        assert exact.compute(frozenset((q,)), 3.0) == pytest.approx((a * a, 3.0))


@pytest.mark.parametrize("name, exact, elapsed, worker", [
    ("IP", False, 0, 1),  # P = a^(W-1): 0.7, 0.997, 0.95
    ("IE", False, 0, 2),  # (1 + a) / a, (1 + 3a) / a^3, (1 + a) / a: 2.43, 4.01, 2.05
    ("IAY", False, 0, 2),  # P / E: 0.288, 0.249, 0.463
    ("IY", False, 0, 2),  # t = 0: the apparent yield
    ("IY", False, 100, 1),  # P / (100 + E): 0.00683, 0.00959, 0.00931
])
def test_each_passive_heuristic_s_choice_on_a_hand_built_state(name, exact, elapsed, worker):
    policy = heuristic(name, estimates(exact))
    app = app_for(policy)
    app.iteration_start = -float(elapsed)
    assert policy.choose(app, 0.0) == {worker: 1}


def test_exact_e_is_blind_to_reliability_the_printed_one_is_not():
    exact, printed = Passive("IE", estimates(True)), Passive("IE", estimates())
    app = app_for(exact)
    assert exact.evaluate(app, {0: 1})[1] == pytest.approx(exact.evaluate(app, {2: 1})[1]) == pytest.approx(2.0)
    assert printed.evaluate(app, {0: 1})[1] > printed.evaluate(app, {2: 1})[1] + 0.3  # 2.43 against 2.05


def test_a_proactive_heuristic_switches_only_to_a_strictly_better_configuration():
    est = estimates()
    p_ie, e_ip = Proactive("P-IE", est), Proactive("E-IP", est)
    app = app_for(p_ie)
    app.state_changed(0.0, 1, DOWN)  # IE's configuration is worker 2's whatever; make the running one worker 0's
    app._configure(0.0, {0: 1}, "start")
    assert p_ie.reconsider(app, 0.0) == {2: 1}  # IE's fresh pick, P 0.95 > the running 0.7: switch
    app = app_for(e_ip)
    app._configure(0.0, {2: 1}, "start")
    assert e_ip.reconsider(app, 0.0) is None  # IP picks worker 1, E 4.01 > the running 2.05: keep


def test_random_deals_tasks_to_up_workers_only():
    policy = Random(random.Random(5))
    app = app_for(policy, tasks=4)
    app.state_changed(0.0, 0, DOWN)
    app.state_changed(0.0, 2, DOWN)
    assert policy.choose(app, 0.0) == {1: 4}


def test_the_seventeen_heuristics_are_named_as_in_the_paper():
    assert len(NAMES) == 17 and {"Y-IE", "P-IE", "E-IAY", "IE", "RANDOM"} <= set(NAMES)
    with pytest.raises(ValueError):
        heuristic("Q-IE", estimates())


PROACTIVE = [n for n in NAMES if "-" in n]
CLOCK_FREE = [n for n in PROACTIVE if not n.startswith("Y-") and not n.endswith("-IY")]


def test_the_heuristics_whose_check_moves_with_time_alone_name_their_next_look():
    est = estimates()
    assert [n for n in PROACTIVE if Proactive(n, est).clock_dependent] == [
        "P-IY", "E-IY", "Y-IP", "Y-IE", "Y-IY", "Y-IAY"]
    for n in CLOCK_FREE:  # the others look at events alone
        policy = Proactive(n, est)
        app = app_for(policy)
        app.settle(0.0)
        assert app.config and app.next_check(0.0) == float("inf")


@pytest.mark.parametrize("name", PROACTIVE)
def test_checking_at_events_decides_as_checking_every_slot(name):
    """Looked at when something happens and, for a heuristic whose look reads the time, at the slot it names
    (Proactive.next_check), every heuristic switches exactly when it would looked at every slot: on random
    instances of both normalisations, small and large tasks, one port to many, and its makespans and every
    reconfiguration's time and reason are the same. (Each normalisation on four of the eight instances, every
    m from 2 to 5 under both: the suite has no time for sixteen runs a heuristic.)"""
    looks = {"events": 0, "slots": 0}
    for i in range(8):
        s = scenario(2 + i % 4, 1 + i % 3, 1 + 2 * (i % 3), 12, i, p=5 + i % 4)
        exact = i >= 4
        events = run(s, name, i, 3, checks="events", cap=3000, iterations=2, exact=exact)
        slots = run(s, name, i, 3, checks="slots", cap=3000, iterations=2, exact=exact)
        assert events.log == slots.log and events.makespan == slots.makespan
        looks["events"] += events.checks
        looks["slots"] += slots.checks
    assert looks["events"] < looks["slots"]


class EventsOnly(Proactive):
    """A proactive heuristic made to look at events alone."""

    def next_check(self, app, now):
        return float("inf")


@pytest.mark.parametrize("name, m, n_com, w_min, seed, index, p, trial, run_seed", [
    ("P-IY", 5, 3, 2, 12, 23, 8, 23, 3),  # IY's fresh configuration moves with the time
    ("Y-IE", 5, 10, 3, 99, 361, 9, 96, 5),  # Y prefers a fixed candidate as the time grows
])
def test_a_clock_dependent_heuristic_checked_at_events_alone_decides_differently(name, m, n_com, w_min, seed,
                                                                                 index, p, trial, run_seed):
    """Checked only when something happens, the heuristic misses a switch that the per-slot check makes (cases
    found by search), and that the slot its next_check names catches."""
    s = scenario(m, n_com, w_min, seed, index, p=p)
    slots = run(s, name, trial, run_seed, checks="slots", cap=4000, iterations=3)
    assert run(s, name, trial, run_seed, checks="events", cap=4000, iterations=3).log == slots.log
    est = Estimates(s.matrices, s.n_com, s.t_prog, s.t_data)
    app = Iterations([float(w) for w in s.work], s.m, 3, s.t_prog, s.t_data, s.n_com, EventsOnly(name, est))
    from mgst.availability.markov3 import Markov3Group, Markov3Process
    chains = [Markov3Process(Markov3Group(m, 1.0), 1.0, run_seed, trial, q) for q, m in enumerate(s.matrices)]
    events_only = run_iterations(app, chains, cap=4000)
    assert events_only.log != slots.log


def test_passive_heuristics_never_reconsider():
    assert Passive("IE", estimates()).reconsider(app_for(None), 0.0) is None
    assert run_iterations(app_for(Passive("IE", estimates())), [Script()] * 0 or [Script(), Script(), Script()],
                          proactive=False).makespan == 2.0  # worker 2, W = 2


def reference_greedy(policy: Passive, app: Iterations, elapsed: float) -> dict[int, int]:
    """The paper's greedy, written plainly: each task to the UP worker with room whose partial configuration
    scores best, scanning workers in order and keeping the first strictly best."""
    loads: dict[int, int] = {}
    for _ in range(app.tasks):
        best, best_score = -1, 0.0
        for q in app.up():
            if loads.get(q, 0) >= app.max_tasks[q]:
                continue
            trial = dict(loads)
            trial[q] = trial.get(q, 0) + 1
            s = score(policy.name, *policy.evaluate(app, trial), elapsed)
            if best < 0 or s > best_score:
                best, best_score = q, s
        if best < 0:
            break
        loads[best] = loads.get(best, 0) + 1
    return loads


@pytest.mark.parametrize("name", PASSIVE)
def test_the_memoised_greedy_builds_what_a_plain_scan_builds(name):
    """The builds memoise each step's options on the loads and who of them holds the program, shared across
    sets of UP workers and across the heuristics of an instance: on random states (who is UP, who holds the
    program, the time spent, ties included by equal workers, and in half the cases each worker's limit mu_q,
    0 included), they choose as the plain scan does."""
    rng = random.Random(7)
    for i in range(6):
        s = scenario(2 + i % 4, 1 + i % 3, 1 + i % 2, 12, i, p=6 + i % 3)
        matrices = list(s.matrices)
        matrices[-1] = matrices[0]  # two workers alike but for the index: ties must go to the lower
        work = [float(w) for w in s.work]
        work[-1] = work[0]
        est = Estimates(matrices, s.n_com, s.t_prog, s.t_data, exact=bool(i % 2))
        policy = Passive(name, est)
        for k in range(40):
            limits = [rng.choice((0, 1, 2, s.m)) for _ in work] if k % 2 else None
            app = Iterations(work, s.m, 1, s.t_prog, s.t_data, s.n_com, policy, max_tasks=limits)
            app.states = [rng.choice((UP, UP, RECLAIMED, DOWN)) for _ in work]
            app.has_program = [rng.random() < 0.4 for _ in work]
            if not app.up():
                continue
            now = float(rng.randrange(0, 400))
            assert policy.choose(app, now) == reference_greedy(policy, app, now)


@pytest.mark.parametrize("name", NAMES)
def test_with_mu_every_heuristic_keeps_each_worker_within_its_tasks(name):
    """mu_q = 2 and m = 5: every configuration spreads over at least three workers, none holding more than two
    tasks, and a proactive heuristic never switches to a configuration that does not hold all five."""
    s = scenario(5, 5, 2, 7, 3, p=8)
    r = run(s, name, 1, 2, cap=20000, iterations=3, mu=2)
    configs = [e.configuration for e in r.log if hasattr(e, "configuration")]
    assert configs and all(sum(x for _, x in c) == 5 and max(x for _, x in c) <= 2 for c in configs)
    assert r.makespan is not None and len(r.log) - len(configs) == 3  # three iterations done


def test_a_proactive_candidate_that_cannot_hold_the_tasks_is_no_candidate():
    est = estimates()
    policy = Proactive("P-IE", est)
    app = Iterations(WORK, 2, 1, 0.0, 0.0, 3, policy, max_tasks=(1, 1, 1))
    app.settle(0.0)
    running = dict(app.config)
    app.state_changed(0.0, next(q for q in range(3) if q not in running), DOWN)
    app.state_changed(0.0, min(running), RECLAIMED)  # one UP worker left: no fresh configuration holds two tasks
    assert policy.candidate(app, 0.0)[0] == {} and policy.reconsider(app, 0.0) is None


@pytest.mark.parametrize("name", PROACTIVE)
def test_checking_at_events_decides_as_every_slot_with_present_states_and_mu(name):
    """The same equality under the other readings: the running configuration estimated from its members' present
    states (a RECLAIMED member lowers its P between events, never within them), each credit for its progress,
    and mu_q = 2."""
    for i in range(4):
        s = scenario(3 + i % 3, 1 + i % 3, 1 + i % 2, 21, i, p=6 + i % 3)
        est = Estimates(s.matrices, s.n_com, s.t_prog, s.t_data, present=True, credit=CREDITS[i % 3])
        for mu in (0, 2):
            events = run(s, name, i, 3, checks="events", cap=3000, iterations=2, estimates=est, mu=mu)
            slots = run(s, name, i, 3, checks="slots", cap=3000, iterations=2, estimates=est, mu=mu)
            assert events.log == slots.log and events.makespan == slots.makespan


def test_the_running_configuration_is_credited_for_its_progress_as_the_reading_says():
    """Worker 2 alone (w = 2, no transfers) has computed 1 of its 2 slots: credited in full it needs 1 slot
    more (P 1, E 1); with its transfers alone credited, or none, it is valued as a fresh one (P = 0.95, E as
    Theorem 5.1 gives for 2 slots); "none" is exactly the fresh evaluation."""
    values = {}
    for credit in CREDITS:
        est = Estimates([never_reclaimed(a) for a in STAYS], 3, 0.0, 0.0, credit=credit)
        policy = Proactive("P-IE", est)
        app = app_for(policy)
        app._configure(0.0, {2: 1}, "start")
        app.progress.apply(1.0, app.gang)  # (one slot computed: the driver's end of slot)
        values[credit] = policy.current(app, 1.0)
        assert credit != "none" or values[credit] == policy.evaluate(app, {2: 1})
    assert values["all"] == pytest.approx((1.0, 1.0))
    assert values["transfers"] == values["none"] == pytest.approx((0.95, (1 + 0.95) / 0.95))
    with pytest.raises(ValueError, match="credit"):
        Estimates([never_reclaimed(0.9)], 1, 0.0, 0.0, credit="some")
