"""Tightly-coupled iterations on the core (mgst.core.iterations, gang.py, link.py) driven slot-exactly by
mgst.sim.iterations: hand-built cases whose times are worked out in the comments, and hypothesis properties."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mgst.core.gang import Gang
from mgst.core.iterations import DOWN, RECLAIMED, UP, IterationDone, Iterations
from mgst.core.link import MasterLink
from mgst.sim.iterations import run_iterations
from tests.iteration_fakes import Script, Spread


def done_times(run) -> list[float]:
    return [e.time for e in run.log if type(e) is IterationDone]


def test_one_always_up_worker_completes_each_iteration_when_the_model_says():
    # w = 3, m = 2 tasks, T_prog = 5, T_data = 1, n_com = 1. Iteration 1: program 5 + data 2 x 1, then 2 x 3
    # slots of computation: 13. Later ones keep the program: data 2 + computation 6 = 8 each: 21, 29.
    app = Iterations([3.0], 2, 3, 5.0, 1.0, 1, Spread())
    run = run_iterations(app, [Script()], proactive=False)
    assert done_times(run) == [13.0, 21.0, 29.0] and run.makespan == 29.0


def test_a_reclaimed_member_stalls_the_whole_gang_by_exactly_its_length():
    # w = (2, 3), one task each, no transfers: the gang needs 3 slots, so alone it ends at 3.
    base = run_iterations(Iterations([2.0, 3.0], 2, 1, 0.0, 0.0, 1, Spread()), [Script(), Script()],
                          proactive=False)
    assert base.makespan == 3.0
    for start, length in ((1, 2), (1, 1), (2, 5)):  # the fast member RECLAIMED for `length` slots
        app = Iterations([2.0, 3.0], 2, 1, 0.0, 0.0, 1, Spread())
        script = Script([(UP, start), (RECLAIMED, length), (UP, 1)])
        run = run_iterations(app, [script, Script()], proactive=False)
        assert run.makespan == 3.0 + length


def test_a_down_member_loses_the_iteration_and_the_program():
    # w = (1, 1), T_prog = 2, n_com = 2: both programs land at 2; worker 1 goes DOWN at 2 (its program, just
    # received, is lost). The iteration restarts on worker 0 alone (2 tasks, program kept): 2 slots, ends at 4.
    app = Iterations([1.0, 1.0], 2, 1, 2.0, 0.0, 2, Spread())
    run = run_iterations(app, [Script(), Script([(UP, 2), (DOWN, 5), (UP, 1)])], proactive=False)
    assert [(e.configuration, e.why) for e in run.log if type(e) is not IterationDone] == [
        (((0, 1), (1, 1)), "start"), (((0, 2),), "down")]
    assert run.makespan == 4.0 and app.has_program == [True, False]


def test_a_down_member_loses_computation_already_done():
    # w = (4, 4), no transfers: the gang computes 3 of its 4 slots, then worker 1 goes DOWN at 3. Worker 0
    # restarts from scratch with both tasks: 8 slots from 3: 11 (not 3 + 1 + 4).
    app = Iterations([4.0, 4.0], 2, 1, 0.0, 0.0, 2, Spread())
    run = run_iterations(app, [Script(), Script([(UP, 3), (DOWN, 50), (UP, 1)])], proactive=False)
    assert run.makespan == 11.0


def test_n_com_one_serialises_transfers():
    # Three workers, one task each, T_prog = 2, n_com = 1: programs land at 2, 4, 6; then 1 slot: 7.
    run = run_iterations(Iterations([1.0] * 3, 3, 1, 2.0, 0.0, 1, Spread()), [Script() for _ in range(3)],
                         proactive=False)
    assert run.makespan == 7.0
    run = run_iterations(Iterations([1.0] * 3, 3, 1, 2.0, 0.0, 3, Spread()), [Script() for _ in range(3)],
                         proactive=False)
    assert run.makespan == 3.0  # n_com = 3: all at once


def test_a_reclaimed_worker_s_transfer_pauses_and_gives_its_port_away():
    # n_com = 1, T_prog = 3, two workers. Worker 0 is RECLAIMED in slots 1-2: its program (1 of 3 done) pauses
    # and worker 1's takes the port from 1 to 4; worker 0's resumes at 4 and lands at 6; 1 slot: 7.
    app = Iterations([1.0, 1.0], 2, 1, 3.0, 0.0, 1, Spread())
    run = run_iterations(app, [Script([(UP, 1), (RECLAIMED, 2), (UP, 1)]), Script()], proactive=False)
    assert run.makespan == 7.0


def test_data_is_kept_while_the_configuration_holds_the_worker_and_the_program_until_down():
    link = MasterLink(2)
    assert [t.key for t in link.moving()] == []
    app = Iterations([1.0, 1.0], 2, 1, 4.0, 1.0, 2, Spread())
    app.settle(0.0)
    assert app.comm_left(0, 0.0) == 5.0 and app.comm_left(1, 3.0) == 2.0  # program 4 + data 1; 2 left at 3
    app.state_changed(3.0, 1, RECLAIMED)
    assert app.comm_left(1, 10.0) == 2.0  # paused


def test_a_gang_is_a_rate_rule_for_any_policy():
    gang = Gang("g", [(0, 2, 3.0), (1, 1, 4.0)], 0.0)  # loads 6 and 4: the gang needs 6
    assert gang.work == 6.0 and gang.paces() == {0: 1.0, 1: 4.0 / 6.0}
    assert list(gang.rates(0.0))[0][2] == 0.0  # not ready
    gang.ready = True
    assert list(gang.rates(0.0))[0][2] == 1.0
    gang.member_state(1, RECLAIMED)
    assert not gang.computes()
    gang.member_state(1, DOWN)
    gang.member_state(1, UP)
    assert gang.lost and not gang.computes()
    with pytest.raises(ValueError):
        Gang("g", [(0, 1, 1.0), (0, 1, 1.0)], 0.0)


# ---------------------------------------------------------------- properties


class Watched(Iterations):
    """Iterations that check the model's invariants every time the rules are applied."""

    completed: list = []

    def _refresh(self, now: float) -> None:
        super()._refresh(now)
        moving = [t for t in self.link.queue.values() if t.activity.rate > 0]
        assert len(moving) <= self.link.n_com
        assert all(self.states[t.worker] == UP for t in moving)
        assert all(self.states[q] != DOWN for q in self.data_held)  # data held by a DOWN worker is gone
        gang = self.gang
        if gang is not None and gang.activity.rate > 0:
            assert all(self.states[q] == UP for q in self.config)
            assert all(self.has_program[q] and self.data_held[q] == x for q, x in self.config.items())

    def ended(self, now, key):
        assert key not in self.completed  # nothing completes twice
        self.completed.append(key)
        return super().ended(now, key)


periods = st.lists(st.tuples(st.sampled_from([UP, RECLAIMED, DOWN]), st.integers(1, 6)), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(scripts=st.lists(periods, min_size=1, max_size=5), n_com=st.integers(1, 3), m=st.integers(1, 4),
       work=st.integers(1, 3), t_prog=st.integers(0, 3), t_data=st.integers(0, 2), reuse_data=st.booleans())
def test_no_gang_computes_with_a_member_not_up_transfers_stay_within_n_com_nothing_completes_twice(
        scripts, n_com, m, work, t_prog, t_data, reuse_data):
    scripts = [s + [(UP, 1)] for s in scripts]  # each ends UP for good: the run finishes
    app = Watched([float(work + q) for q in range(len(scripts))], m, 3, t_prog, t_data, n_com, Spread(),
                  reuse_data=reuse_data)
    app.completed = []
    run = run_iterations(app, [Script(s) for s in scripts], cap=10_000, proactive=False)
    assert run.makespan is not None and run.makespan < math.inf
    assert [e.index for e in run.log if type(e) is IterationDone] == [0, 1, 2]


class Shuffler(Spread):
    """Proactive, erratically: at each check, a random configuration over the UP workers (or none)."""

    proactive = True

    def __init__(self, seed: int):
        super().__init__()
        import random

        self.rng = random.Random(seed)

    def reconsider(self, app, now):
        up = app.up()
        if not up or self.rng.random() < 0.5:
            return None
        config: dict[int, int] = {}
        for _ in range(app.tasks):
            q = self.rng.choice(up)
            config[q] = config.get(q, 0) + 1
        return config


@settings(max_examples=60, deadline=None)
@given(scripts=st.lists(periods, min_size=1, max_size=5), n_com=st.integers(1, 3), m=st.integers(1, 4),
       t_prog=st.integers(0, 3), t_data=st.integers(0, 2), seed=st.integers(0, 10**6), reuse_data=st.booleans())
def test_the_invariants_hold_under_any_sequence_of_reconfigurations(scripts, n_com, m, t_prog, t_data, seed,
                                                                     reuse_data):
    """Configurations replaced at random (workers kept, dropped, given more or fewer tasks mid-transfer)."""
    scripts = [s + [(UP, 1)] for s in scripts]
    app = Watched([float(1 + q) for q in range(len(scripts))], m, 2, t_prog, t_data, n_com, Shuffler(seed),
                  reuse_data=reuse_data)
    app.completed = []
    run = run_iterations(app, [Script(s) for s in scripts], cap=200, checks="slots")
    assert run.iterations == len([e for e in run.log if type(e) is IterationDone]) <= 2
    for q, held in app.data_held.items():
        assert held <= app.config.get(q, 0)


class Asking(Spread):
    """Spread, counting the proactive looks it was given."""

    looks = 0

    def reconsider(self, app, now: float) -> None:
        self.looks += 1
        return None


def test_an_instant_hands_the_ends_before_the_changes_and_checks_only_when_asked():
    """Both drivers' order (Iterations.instant): a gang that ends at the boundary where a member goes DOWN
    completed in the slot before, so the iteration counts; handed the other way round, it would be lost."""
    policy = Asking()
    app = Iterations([2.0, 2.0], 2, 2, 0.0, 0.0, 2, policy)
    app.settle(0.0)
    key = app.gang.key
    app.instant(1.0, [], [], check=False)
    assert policy.looks == 0
    app.instant(2.0, [key], [(1, DOWN)], check=True)
    assert [e.time for e in app.log if type(e) is IterationDone] == [2.0]
    assert app.config == {0: 2} and app.states[1] == DOWN and policy.looks == 1  # settled, then looked at
    app.instant(3.0, [key], [], check=False)  # an end no longer running is skipped
    assert app.done == 1
    second = app.gang.key
    app.instant(6.0, [second], [(0, RECLAIMED)], check=True)  # the last iteration: no look once finished
    assert app.finished() and policy.looks == 1


class OnePerWorker(Spread):
    """Passive: one task on each of the first m UP workers (mu_q = 1)."""

    def choose(self, app, now: float) -> Mapping[int, int]:
        up = app.up()
        assert len(up) >= app.tasks, "asked for a configuration the UP workers cannot hold"
        return dict.fromkeys(up[: app.tasks], 1)


def test_with_one_task_per_worker_a_configuration_waits_until_enough_workers_are_up():
    # mu_q = 1, m = 2, w = 2, no transfers: worker 1 goes DOWN at 1 for 3 slots, losing the gang; worker 0 alone
    # cannot hold two tasks, so nobody is configured until worker 1 is UP again at 4; 2 slots of computation: 6.
    app = Iterations([2.0, 2.0], 2, 1, 0.0, 0.0, 1, OnePerWorker(), max_tasks=(1, 1))
    run = run_iterations(app, [Script(), Script([(UP, 1), (DOWN, 3), (UP, 1)])], proactive=False)
    assert [(e.time, e.configuration, e.why) for e in run.log if type(e) is not IterationDone] == [
        (0.0, ((0, 1), (1, 1)), "start"), (4.0, ((0, 1), (1, 1)), "down")]
    assert run.makespan == 6.0
    assert not app.room() or app.states == [UP, UP]
    app.states[1] = DOWN
    assert not app.room()


def test_workers_whose_limits_cannot_hold_an_iteration_are_refused_at_once():
    # The paper assumes sum mu_q >= m: with fewer places than tasks no configuration can ever be formed, and a run
    # would wait for ever (each heuristic's makespan NaN) rather than say so.
    with pytest.raises(ValueError, match="sum to 1, fewer than the 2 tasks"):
        Iterations([1.0], 2, 1, 0.0, 0.0, 1, OnePerWorker(), max_tasks=(1,))
    with pytest.raises(ValueError, match="one limit mu_q >= 0 per worker"):
        Iterations([1.0, 1.0], 2, 1, 0.0, 0.0, 1, OnePerWorker(), max_tasks=(2,))


class Naming(Spread):
    """Passive: a configuration that names a worker the platform does not have."""

    def choose(self, app, now: float) -> Mapping[int, int]:
        return {len(app.states): app.tasks}


def test_a_configuration_naming_a_worker_that_does_not_exist_is_refused_in_words():
    app = Iterations([1.0, 1.0], 2, 1, 0.0, 0.0, 1, Naming())
    with pytest.raises(ValueError, match="on UP workers within their limits: {2: 2}"):
        run_iterations(app, [Script(), Script()], proactive=False)


def test_a_worker_whose_chain_starts_reclaimed_is_seen_reclaimed_by_the_first_choice():
    # m = 1, w = (1, 3), T_prog = T_data = 1: worker 0 is RECLAIMED for its first 50 slots, so the first choice
    # sees only worker 1 UP: program, data, 3 slots of computation, done at 5 (on worker 0 it would be 53).
    app = Iterations([1.0, 3.0], 1, 1, 1.0, 1.0, 1, Spread())
    run = run_iterations(app, [Script([(RECLAIMED, 50), (UP, 1)]), Script()], proactive=False)
    assert [(e.time, e.configuration) for e in run.log if type(e) is not IterationDone] == [(0.0, ((1, 1),))]
    assert run.makespan == 5.0


@pytest.mark.parametrize("reuse_data, makespan", [(False, 26.0), (True, 24.0)])
def test_with_reuse_data_a_survivor_of_a_down_keeps_its_data_for_the_next_configuration(reuse_data, makespan):
    # w = 4, one task per worker (mu_q = 1), T_prog = 3, T_data = 2, n_com = 1: worker 0's program and data end at 5,
    # worker 1's at 10; they compute from 10. Worker 1 goes DOWN at 12 for 3 slots: nothing can be configured until
    # it is UP at 15. The paper's section VI: worker 0 "has already received task data, can reuse that data": then
    # worker 1's program 15-18 and data 18-20, computation 20-24. mgst's default re-sends worker 0's data first
    # (15-17), and worker 1's come after it: computation 22-26.
    app = Iterations([4.0, 4.0], 2, 1, 3.0, 2.0, 1, OnePerWorker(), max_tasks=(1, 1), reuse_data=reuse_data)
    run = run_iterations(app, [Script(), Script([(UP, 12), (DOWN, 3), (UP, 1)])], proactive=False)
    assert [(e.time, e.configuration, e.why) for e in run.log if type(e) is not IterationDone] == [
        (0.0, ((0, 1), (1, 1)), "start"), (15.0, ((0, 1), (1, 1)), "down")]
    assert run.makespan == makespan


def test_with_reuse_data_a_survivor_that_goes_down_before_the_next_configuration_loses_what_it_kept():
    # w = 2, one task per worker (mu_q = 1), T_data = 1, no program, n_com = 1: worker 0's data is in at 1, worker 1's
    # at 2; they compute from 2. Worker 1 goes DOWN at 3 (UP at 5): worker 0 keeps its message. But worker 0 goes DOWN
    # itself at 4 (UP at 5): what it kept goes with it. At 5 both are configured again and both receive their data,
    # one after the other (5-6, 6-7), then compute 7-9. (Had worker 0 kept it: 5-6 for worker 1, then 6-8.)
    app = Iterations([2.0, 2.0], 2, 1, 0.0, 1.0, 1, OnePerWorker(), max_tasks=(1, 1), reuse_data=True)
    chains = [Script([(UP, 4), (DOWN, 1), (UP, 1)]), Script([(UP, 3), (DOWN, 2), (UP, 1)])]
    run = run_iterations(app, chains, proactive=False)
    assert [(e.time, e.configuration) for e in run.log if type(e) is not IterationDone] == [
        (0.0, ((0, 1), (1, 1))), (5.0, ((0, 1), (1, 1)))]
    assert run.makespan == 9.0
