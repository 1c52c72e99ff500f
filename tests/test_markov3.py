"""markov3 availability: the experiment file's keys, the process against the chain it plays, its wire form."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mgst.availability import State, make_process
from mgst.availability.markov3 import Markov3Availability, Markov3Group, long_run
from mgst.availability.registry import process_from_wire, to_wire, wire_problem
from mgst.config import ConfigError, load_experiment

# A desktop machine: mostly up, its owner often takes it back for a while, sometimes it fails.
MATRIX = ((0.95, 0.04, 0.01), (0.20, 0.78, 0.02), (0.10, 0.00, 0.90))
MATRIX_TOML = str([list(r) for r in MATRIX])
BASE = """
[workload]
arrival_rates = [0.5]
[machines]
rates = [[1.0, 1.0, 1.0]]
availability = [1.0, 0.5, 1.0]
[policy]
name = "fcfs"
[simulation]
horizon = 100.0
warmup = 10.0
"""


def load(tmp_path, section: str, machines_extra: str = ""):
    text = BASE.replace("availability = [1.0, 0.5, 1.0]", "availability = [1.0, 0.5, 1.0]\n" + machines_extra)
    path = tmp_path / "exp.toml"
    path.write_text(text + "[availability]\n" + section)
    return load_experiment(path)


def stationary(matrix) -> np.ndarray:
    """pi P = pi, sum pi = 1, solved directly (not by the code under test)."""
    p = np.array(matrix)
    a = np.vstack([p.T - np.eye(3), np.ones(3)])
    pi, *_ = np.linalg.lstsq(a, np.array([0.0, 0.0, 0.0, 1.0]), rcond=None)
    return pi


# ---------------------------------------------------------------- experiment file


def test_one_matrix_for_every_machine(tmp_path):
    exp = load(tmp_path, 'kind = "markov3"\nslot = 60.0\nreclaimed_share = 0.25\n'
                         "matrix = [[0.95, 0.04, 0.01], [0.2, 0.78, 0.02], [0.1, 0.0, 0.9]]\n")
    assert exp.failures == Markov3Availability((Markov3Group(MATRIX, 60.0, 0.25),))


def test_a_matrix_per_group(tmp_path):
    exp = load(tmp_path, 'kind = "markov3"\nslot = 60.0\ngroups = [\n'
                         "  {matrix = [[0.9, 0.1, 0.0], [0.5, 0.5, 0.0], [1.0, 0.0, 0.0]]},\n"
                         "  {matrix = [[0.95, 0.04, 0.01], [0.2, 0.78, 0.02], [0.1, 0.0, 0.9]], slot = 30.0, "
                         "reclaimed_share = 0.5},\n]\n", "group = [2, 1, 2]")
    g1, g2 = exp.failures.groups
    assert (g1.slot, g1.reclaimed_share, g2.slot, g2.reclaimed_share) == (60.0, 0.0, 30.0, 0.5)
    assert to_wire(exp, 0, 7, math.inf) == ("markov3", 30.0, 0.5, *(p for row in MATRIX for p in row), 7)
    assert to_wire(exp, 1, 7, math.inf)[1:3] == (60.0, 0.0)


@pytest.mark.parametrize(("section", "key", "fragment"), [
    ('kind = "markov3"\nmatrix = [[1, 0, 0], [0, 1, 0], [0, 0, 1]]\n', "availability.slot", "missing"),
    ('kind = "markov3"\nslot = 1.0\n', "availability.matrix", "one of the two"),
    ('kind = "markov3"\nslot = 1.0\nmatrix = [[0.5, 0.4, 0.0], [0, 1, 0], [0, 0, 1]]\n', "availability.matrix[0]",
     "sums to 0.9"),
    ('kind = "markov3"\nslot = 1.0\nmatrix = [[1.5, -0.5, 0.0], [0, 1, 0], [0, 0, 1]]\n', "availability.matrix[0]",
     "outside [0, 1]"),
    ('kind = "markov3"\nslot = 1.0\nmatrix = [[1, 0, 0], [0, 1, 0]]\n', "availability.matrix", "3 rows"),
    ('kind = "markov3"\nslot = 1.0\nmatrix = [[1, 0, 0], [0, 1, 0], [0, 0, "x"]]\n', "availability.matrix[2][2]",
     "number"),
    ('kind = "markov3"\nslot = 1.0\nmatrix = [[0.9, 0, 0.1], [0, 1, 0], [0, 0, 1]]\n', "availability.matrix[2]",
     "never leaves DOWN"),  # (machines went down one by one and stayed down, and the run said nothing)
    ('kind = "markov3"\nslot = 1.0\nmatrix = [[0.9, 0.1, 0], [0, 0.5, 0.5], [0, 0, 1]]\n', "availability.matrix[2]",
     "never leaves DOWN"),
    ('kind = "markov3"\nslot = -1.0\nmatrix = [[1, 0, 0], [0, 1, 0], [0, 0, 1]]\n', "availability.slot",
     "positive"),
    ('kind = "markov3"\nslot = 1.0\nreclaimed_share = 2\nmatrix = [[1, 0, 0], [0, 1, 0], [0, 0, 1]]\n',
     "availability.reclaimed_share", "[0, 1]"),
    ('kind = "markov3"\nslot = 1.0\nmean_up = 3\nmatrix = [[1, 0, 0], [0, 1, 0], [0, 0, 1]]\n',
     "availability.mean_up", "a key of kind = 'exponential'"),
    ('kind = "markov3"\nslot = 1.0\ngroups = [{matrix = [[1, 0, 0], [0, 1, 0], [0, 0, 1]], slots = 2}]\n',
     "availability.groups[0].slots", "unknown key"),
])
def test_errors_name_the_key(tmp_path, section, key, fragment):
    with pytest.raises(ConfigError) as err:
        load(tmp_path, section)
    assert err.value.key == key and fragment in err.value.problem, err.value


def test_groups_need_each_machine_s_group(tmp_path):
    section = ('kind = "markov3"\nslot = 1.0\ngroups = [{matrix = [[1, 0, 0], [0, 1, 0], [0, 0, 1]]}, '
               "{matrix = [[1, 0, 0], [0, 1, 0], [0, 0, 1]]}]\n")
    with pytest.raises(ConfigError) as err:
        load(tmp_path, section)
    assert err.value.key == "machines.group"
    exp = load(tmp_path, section, 'group = "cycle"')
    assert [m.attribute("group") for m in exp.machines] == [1, 2, 1]


def test_too_fast_a_chain_is_refused_by_the_run_length_bound(tmp_path):
    with pytest.raises(ConfigError) as err:  # 3 machines x 100 / 1e-6 x ~0.1 changes a slot: ~3e7 > 1e7
        load(tmp_path, f'kind = "markov3"\nslot = 1e-6\nmatrix = {MATRIX_TOML}\n')
    assert err.value.key == "availability.slot" and "failure cycles" in err.value.problem


# ---------------------------------------------------------------- the process


def test_periods_merge_slots_alternate_states_and_carry_the_shares(tmp_path):
    exp = load(tmp_path, f'kind = "markov3"\nslot = 2.0\nreclaimed_share = 0.25\nmatrix = {MATRIX_TOML}\n')
    proc = make_process(exp, 3, 0, 1)  # machine 1: a_j = 0.5
    periods = [proc.next() for _ in range(2000)]
    assert periods[0].state is State.UP  # every machine starts up
    assert all(a.state != b.state for a, b in zip(periods, periods[1:]))  # one period per run of equal slots
    assert all(p.duration > 0 and (p.duration / 2.0).is_integer() for p in periods)  # whole slots
    shares = {State.UP: 0.5, State.RECLAIMED: 0.25, State.DOWN: 0.0}
    assert all(p.cpu_share == shares[p.state] for p in periods)
    assert all(not (a.state is State.DOWN and b.state is State.RECLAIMED) for a, b in zip(periods, periods[1:]))
    # Sojourns are geometric: mean slot / (1 - p_ss), e.g. UP: 2 / 0.05 = 40.
    ups = np.array([p.duration for p in periods if p.state is State.UP])
    assert abs(ups.mean() - 40.0) < 4 * ups.std() / math.sqrt(len(ups))
    # Same seed, same machine: the same periods; another machine: others.
    again = make_process(exp, 3, 0, 1)
    assert [again.next() for _ in range(2000)] == periods
    other = make_process(exp, 3, 0, 2)
    assert [other.next().duration for _ in range(50)] != [p.duration for p in periods[:50]]


def test_long_run_state_fractions_match_the_stationary_distribution():
    """Over 2e6 slots, the fraction of time in each state is within its 99.9 % confidence interval (batch
    means) of pi, solved from pi P = pi here."""
    pi = stationary(MATRIX)
    assert np.allclose(pi @ np.array(MATRIX), pi) and abs(pi.sum() - 1) < 1e-12
    proc = process_from_wire(("markov3", 1.0, 0.0, *(p for row in MATRIX for p in row), 11), 0, 1.0)
    batches, batch_time = 40, 50_000.0
    fractions = np.zeros((batches, 3))
    b, t_in_batch = 0, 0.0
    while b < batches:  # cut the periods at batch boundaries
        p = proc.next()
        left = p.duration
        while left > 0 and b < batches:
            take = min(left, batch_time - t_in_batch)
            fractions[b, p.state] += take / batch_time
            left -= take
            t_in_batch += take
            if t_in_batch >= batch_time:
                b, t_in_batch = b + 1, 0.0
    mean = fractions.mean(axis=0)
    half = 3.29 * fractions.std(axis=0, ddof=1) / math.sqrt(batches)  # 99.9 %
    assert np.all(half < 0.01), half  # precise enough to tell a wrong chain
    assert np.all(np.abs(mean - pi) <= half), (mean, pi, half)
    assert np.allclose(long_run(MATRIX), pi, atol=1e-5)  # what the checks use agrees with it


def test_an_absorbing_state_lasts_for_good():
    proc = process_from_wire(("markov3", 5.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1), 0, 1.0)
    first, second = proc.next(), proc.next()
    assert (first.duration, first.state) == (5.0, State.UP)  # one slot up, then reclaimed for good
    assert (second.duration, second.state, second.cpu_share) == (math.inf, State.RECLAIMED, 0.0)


# ---------------------------------------------------------------- the wire


def good(**changes) -> list:
    form = ["markov3", 60.0, 0.25, *(p for row in MATRIX for p in row), 9]
    for index, value in changes.items():
        form[int(index[1:])] = value
    return form


def test_a_wire_form_plays_the_simulator_s_periods(tmp_path):
    exp = load(tmp_path, f'kind = "markov3"\nslot = 60.0\nreclaimed_share = 0.25\nmatrix = {MATRIX_TOML}\n')
    sim = make_process(exp, 9, 0, 2)
    wire = process_from_wire(list(to_wire(exp, 2, 9, math.inf)), 2, 1.0)  # (a list, as msgpack gives)
    assert [wire.next() for _ in range(200)] == [sim.next() for _ in range(200)]
    assert wire_problem(good()) is None


@pytest.mark.parametrize(("form", "fragment"), [
    (good()[:-1], "seed"),
    (good()[:11] + [9], "(slot, reclaimed_share, the 9 probabilities row by row, seed)"),
    (good(_1=0.0), "slot must be > 0"),
    (good(_1=-60.0), "slot must be > 0"),
    (good(_2=1.5), "reclaimed_share"),
    (good(_3=float("nan")), "non-finite"),
    (good(_3="0.95"), "non-numeric"),
    (good(_3=0.9), "the UP row sums to 0.95"),
    (good(_7=0.5), "the RECLAIMED row sums to 0.72"),
    (good(_9=-0.1, _10=0.1), "the DOWN row has a probability outside [0, 1]"),
    (good(_12=-1), "seed"),
    (good(_12=True), "non-numeric"),
])
def test_hostile_wire_forms_are_refused_with_a_reason(form, fragment):
    problem = wire_problem(form)
    assert problem is not None and fragment in problem, problem
    with pytest.raises(ValueError, match="markov3|seed"):
        process_from_wire(form, 0, 1.0)
