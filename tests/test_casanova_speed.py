"""The Casanova cell's speed work changes no result: makespans recorded before it (the sweep's rows of a fixed
slice), a replayed realisation equal to a fresh draw, and the shared memos equal to a fresh Estimates per run."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from mgst.availability.markov3 import Markov3Group, Markov3Process
from mgst.papers.casanova.estimates import Estimates
from mgst.papers.casanova.heuristics import NAMES
from mgst.papers.casanova.instance import realisation, run, scenario
from mgst.papers.casanova.scenario import SCENARIO, simulate_cell
from mgst.scenarios.scenario import RunSettings
from mgst.sim.replay import Recording

OPTIONS = {"exact": False, "cap": 1_000_000.0, "iterations": 10, "processors": 20}
# sweep.csv rows of `mgst sweep experiments/casanova/casanova-sweep.toml --replications 2 --only m=5,10
# --only n_com=5,20 --only w_min=1,3 --only scenario=0` run before the speed work: (n_com, trial) -> makespans
# in NAMES' order (IP, IE, IY, IAY, P-IP, ..., Y-IAY, RANDOM), m = 5, w_min = 1, scenario 0
BEFORE = {
    (5, 0): (403, 391, 377, 295, 291, 300, 343, 192, 361, 300, 171, 192, 291, 300, 308, 192, 914),
    (5, 1): (155, 75, 75, 75, 155, 75, 75, 75, 155, 75, 75, 75, 155, 75, 75, 75, 695),
    (20, 0): (291, 219, 293, 273, 291, 219, 293, 273, 291, 232, 293, 273, 291, 219, 293, 273, 721),
}


def test_a_cell_gives_the_makespans_it_gave_before_the_speed_work():
    for (n_com, trial), makespans in BEFORE.items():
        exp = SCENARIO.build({"m": "5", "n_com": str(n_com), "w_min": "1", "scenario": "0"}, RunSettings(0, 0, 0),
                             1, trial, OPTIONS)
        out = simulate_cell(exp, trial)
        assert tuple(out[f"makespan_{h}"] for h in NAMES) == makespans, (n_com, trial)


def test_a_replayed_realisation_is_the_chain_s_own_draw_for_every_replay():
    s = scenario(5, 5, 1, 1, 0)
    recording = realisation(s, 3, 1)[7]
    first, second = recording.replay(), recording.replay()
    fresh = Markov3Process(Markov3Group(s.matrices[7], 1.0), 1.0, 1, 3, 7)
    drawn = [fresh.next() for _ in range(300)]
    assert [first.next() for _ in range(300)] == drawn  # drawn on demand by the first
    assert [second.next() for _ in range(300)] == drawn  # read back by the second
    assert len(recording.periods) == 300
    assert isinstance(recording, Recording)


def test_shared_memos_decide_as_a_fresh_estimate_per_run():
    s = scenario(5, 20, 2, 1, 4)
    shared = Estimates(s.matrices, s.n_com, s.t_prog, s.t_data)
    chains = realisation(s, 0, 1)
    for h in NAMES:
        alone = run(s, h, 0, 1, iterations=3, estimates=Estimates(s.matrices, s.n_com, s.t_prog, s.t_data))
        together = run(s, h, 0, 1, iterations=3, estimates=shared, chains=chains)
        assert (together.makespan, together.log) == (alone.makespan, alone.log), h


@settings(max_examples=10, deadline=None)
@given(h=st.sampled_from(("P-IP", "E-IE", "Y-IAY", "P-IY", "E-IY", "Y-IY")), m=st.sampled_from([5, 10]),
       n_com=st.sampled_from([1, 5, 20]),
       w_min=st.integers(1, 3), index=st.integers(0, 9), trial=st.integers(0, 9))
def test_a_derived_greedy_build_decides_as_a_build_from_scratch(h, m, n_com, w_min, index, trial):
    """A heuristic derives its greedy build from its last one where the workers that changed could not change
    it (heuristics._came, Passive._unchanged, Proactive._iy_derived): its run decides as with every build made
    from scratch, on random instances, reconfiguration by reconfiguration (each run with memos of its own). The
    proactive heuristics build at every look, IY's also at the slots its horizon names: the passive ones only
    when a configuration breaks, with the same code."""
    s = scenario(m, n_com, w_min, 1, index)
    chains = realisation(s, trial, 1)
    derived = run(s, h, trial, 1, iterations=3, cap=2000.0, chains=chains,
                  estimates=Estimates(s.matrices, s.n_com, s.t_prog, s.t_data))
    fresh = run(s, h, trial, 1, iterations=3, cap=2000.0, chains=chains,  # nothing derived: each build anew
                estimates=Estimates(s.matrices, s.n_com, s.t_prog, s.t_data, derive=False))
    assert (derived.makespan, derived.log) == (fresh.makespan, fresh.log)
