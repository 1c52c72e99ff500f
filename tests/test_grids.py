"""Several grids (mgst/availability/grids.py): the presets' documented figures (preemption loses about 10 % of
40-minute jobs on a collaborative grid), each grid's hosts joining after their queue wait, at their own speed, with
the grid's returned-result delay; machines named into grids by group; GridPolicy keeping a bag on the grids it
selects; bad keys refused naming the key; the wire form a puller plays; and, whatever hypothesis draws, no job lost
or completed twice and no host computing more than its CPUs under GridBot on grids."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
from grid_properties import DRAIN, bags_surely_finish, check_run, run_checked
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mgst.availability.grids import KIND, PRESETS, GridProcess
from mgst.availability.process import State
from mgst.availability.trace import KIND as TRACE
from mgst.config import ConfigError, parse_experiment
from mgst.sim.loop import Simulation

GRIDS = [{"name": "osg", "preset": "collaborative"}, {"name": "superlink", "preset": "community"},
         {"name": "technion", "preset": "cluster"}]


def data(tasks: int = 20, grids: list[dict[str, Any]] | None = None, sizes: list[int] | None = None,
         **policy: Any) -> dict[str, Any]:
    grids = GRIDS if grids is None else grids
    sizes = [2] * len(grids) if sizes is None else sizes
    return {
        "workload": {"kind": "bag_list", "class_names": ["job"], "granularity": [750.0],
                     "bags": [{"at": 0.0, "tasks": {"count": tasks, "size": [600.0, 900.0], "seed": 1}}]},
        "machines": {"power": {"value": 1.0, "count": sum(sizes)}, "group": {"sizes": sizes}},
        "availability": {"kind": "grids", "grids": grids},
        "policy": {"name": "gridbot", **policy},
        "simulation": {"horizon": 500000.0, "warmup": 0.0, "replications": 1, "seed": 3},
    }


def test_the_collaborative_preset_loses_about_ten_percent_of_40_minute_jobs():
    # A job of 2,400 s is lost when the up period it starts in ends first. Up periods are exponential, so a job
    # started at any point of one outlives it with probability exp(-2400 / mean_up): 0.90 on a reliable host;
    # the 2 % unreliable hosts (mean up 1,800 s) lose 74 %. Over 4,000 hosts' up periods, the share shorter than
    # 2,400 s is 0.98 x 0.0999 + 0.02 x 0.736 = 0.1126 (sd about 0.003 over 12,000 periods).
    g = PRESETS["collaborative"]
    expected = (1 - g.unreliable) * (1 - math.exp(-2400 / g.mean_up)) + \
        g.unreliable * (1 - math.exp(-2400 / g.unreliable_mean_up))
    assert abs(expected - 0.1126) < 0.0005
    ups = []
    for machine in range(4000):
        proc = GridProcess(g, 1.0, 7, 0, machine)
        for _ in range(6):
            p = proc.next()
            if p.state is State.UP:
                ups.append(p.duration)
    assert len(ups) == 12000
    short = sum(d < 2400 for d in ups) / len(ups)
    assert abs(short - expected) < 0.012, short


def test_a_host_waits_in_its_grids_queue_then_runs_at_its_own_speed():
    # collaborative: DOWN for the queue wait first (mean 900 s), then UP at a share drawn in [0.5, 1]; the cluster:
    # UP at once and for good, at full speed
    g = PRESETS["collaborative"]
    firsts = [GridProcess(g, 1.0, 1, 0, j).next() for j in range(2000)]
    assert all(p.state is State.DOWN for p in firsts)
    assert abs(sum(p.duration for p in firsts) / 2000 - g.join) < 0.1 * g.join
    shares = [GridProcess(g, 1.0, 1, 0, j) for j in range(500)]
    ups = [(p.next(), p.next())[1] for p in shares]
    assert all(p.state is State.UP and 0.5 <= p.cpu_share <= 1.0 for p in ups)
    assert max(p.cpu_share for p in ups) - min(p.cpu_share for p in ups) > 0.4
    cluster = GridProcess(PRESETS["cluster"], 1.0, 1, 0, 0).next()
    assert cluster == (math.inf, State.UP, 1.0)


def test_machines_are_put_into_grids_by_group_and_carry_their_grids_name():
    exp = parse_experiment(data(sizes=[3, 1, 2]), "x")
    assert [m.attribute("grid") for m in exp.machines] == ["osg"] * 3 + ["superlink"] + ["technion"] * 2
    named = data(sizes=[1, 1, 1])
    named["machines"]["group"] = ["technion", "osg", "superlink"]
    exp = parse_experiment(named, "x")
    assert [m.attribute("grid") for m in exp.machines] == ["technion", "osg", "superlink"]


@pytest.mark.parametrize("where, value, key, words", [
    ("grid", {"preset": "volunteer"}, "availability.grids[0].preset", "unknown preset 'volunteer'"),
    ("grid", {"speed": [0.0, 1.0]}, "availability.grids[0].speed", "0 < low <= high <= 1"),
    ("grid", {"speed": 0.5}, "availability.grids[0].speed", "[low, high]"),
    ("grid", {"unreliable": 1.5}, "availability.grids[0].unreliable", "in [0, 1]"),
    ("grid", {"return_delay": -1}, "availability.grids[0].return_delay", "in [0,"),
    ("grid", {"mean_up": 0}, "availability.grids[0].mean_up", "positive"),
    ("grid", {"mean_up": -math.inf}, "availability.grids[0].mean_up", "positive"),
    ("grid", {"speeds": [0.5, 1]}, "availability.grids[0].speeds", "unknown key"),
    ("grid", {"name": "superlink"}, "availability.grids[0].name", "earlier grid"),
    ("grid", {"rename": "g\u0007"}, "availability.grids[0].name", "must be printable text"),  # (it was taken)
    ("grid", {"rename": " g"}, "availability.grids[0].name", "must not begin or end with a space"),
    ("grid", {"rename": "g" * 65}, "availability.grids[0].name", "at most 64"),
    ("sizes", [2, 2], "machines.group.sizes", "must be 3 numbers"),
    ("sizes", [2, 2, 1], "machines.group.sizes", "adds up to 5 machines but there are 6"),
])
def test_a_bad_grid_key_is_refused_naming_it(where, value, key, words):
    d = data()
    if where == "grid":
        d["availability"]["grids"] = copy.deepcopy(GRIDS)
        if "name" in value:  # (a name taken by an earlier grid: the second grid takes the first's)
            d["availability"]["grids"][1]["name"] = "osg"
            key = "availability.grids[1].name"
        elif "rename" in value:  # (the first grid's name, and each machine's group naming it)
            old = d["availability"]["grids"][0]["name"]
            d["availability"]["grids"][0]["name"] = value["rename"]
            group = d["machines"].get("group")
            if isinstance(group, list):
                d["machines"]["group"] = [value["rename"] if g == old else g for g in group]
        else:
            d["availability"]["grids"][0].update(value)
    else:
        d["machines"]["group"] = {"sizes": value}
    with pytest.raises(ConfigError) as err:
        parse_experiment(d, "x", "x.toml")
    assert err.value.key == key, str(err.value)
    assert words in str(err.value), str(err.value)


def test_a_toml_inf_is_never_as_the_string_inf_is():
    # mean_up = inf is TOML's own float: "never fails", as "inf" says (it was refused: "must be a positive number")
    for value in ("inf", math.inf):
        d = data()
        d["availability"]["grids"] = copy.deepcopy(GRIDS)
        d["availability"]["grids"][0].update(mean_up=value, unreliable_mean_up=value)
        grid = parse_experiment(d, "x", "x.toml").failures.grids[0]
        assert (grid.mean_up, grid.unreliable_mean_up) == (math.inf, math.inf)
    # an exponential law has no infinite mean: said with what machines that never fail are
    exponential = {"workload": {"arrival_rates": [1.0]}, "machines": {"rates": [[2.0]]}, "policy": {"name": "fcfs"}}
    for value in ("inf", math.inf):
        exponential["availability"] = {"kind": "exponential", "mean_up": value, "mean_down": 1.0}
        with pytest.raises(ConfigError) as err:
            parse_experiment(exponential, "x", "x.toml")
        assert err.value.key == "availability.mean_up" and 'kind = "always"' in str(err.value), str(err.value)


def test_a_group_named_by_a_grid_that_does_not_exist_is_refused():
    d = data(sizes=[1, 1, 1])
    d["machines"]["group"] = ["osg", "egee", "technion"]
    with pytest.raises(ConfigError) as err:
        parse_experiment(d, "x", "x.toml")
    assert err.value.key == "machines.group[1]" and "names no group" in str(err.value)


def test_grid_policy_keeps_a_bag_on_the_grids_it_selects():
    run = Simulation(parse_experiment(data(GridPolicy='Grid.Name == "technion"'), "x")).run()
    exp = parse_experiment(data(), "x")
    used = {exp.machines[r.machine].attribute("grid") for rec in run.jobs for r in rec.history}
    assert used == {"technion"} and run.unfinished == 0


def test_the_returned_result_delay_holds_each_result_back():
    # one cluster host (UP at once, speed 1), one job of size 600..900: it completes when it has computed (its
    # size), plus the grid's return delay when there is one (a quantile of Exp(mean 500): between 0.98 and 3,100)
    def completion(delay: float) -> tuple[float, float]:
        d = data(tasks=1, grids=[{"name": "c", "preset": "cluster", "return_delay": delay}], sizes=[1])
        run = Simulation(parse_experiment(d, "x")).run()
        rec = run.jobs[0]
        return rec.completed, rec.job.size

    done, size = completion(0.0)
    assert done == pytest.approx(size)
    done, size = completion(500.0)
    assert 500 * -math.log(1 - 0.5 / 256) - 1e-6 <= done - size <= 500 * -math.log(0.5 / 256) + 1e-6


def test_the_wire_form_is_the_hosts_periods_as_a_trace():
    exp = parse_experiment(data(sizes=[2, 2, 2]), "x")
    spec = exp.failures
    form = KIND.to_wire(spec, exp, 0, 3, 50000.0)
    assert form[0] == "trace" and TRACE.wire_problem(form) is None
    proc = KIND.process(spec, exp, 3, 0, 0)
    for duration, state, share in form[1][:-1]:  # (the last one is cut at the run's end)
        p = proc.next()
        assert (duration, state, share) == pytest.approx((p.duration, int(p.state), p.cpu_share))
    played = TRACE.from_wire(form, 0, 1.0)
    assert played.next().state is State.DOWN  # the collaborative host's wait to join


@st.composite
def grid_settings(draw) -> dict[str, Any]:
    grids = []
    for g, preset in enumerate(draw(st.lists(st.sampled_from(sorted(PRESETS)), min_size=1, max_size=3))):
        grid: dict[str, Any] = {"name": f"g{g}", "preset": preset}
        if draw(st.booleans()):
            grid.update(join=draw(st.sampled_from([0.0, 50.0, 300.0])),
                        mean_up=draw(st.sampled_from([200.0, 1000.0, 5000.0])),
                        mean_down=draw(st.sampled_from([50.0, 400.0])),
                        unreliable=draw(st.sampled_from([0.0, 0.5])),
                        return_delay=draw(st.sampled_from([0.0, 30.0, 300.0])))
        grids.append(grid)
    sizes = [draw(st.integers(1, 3)) for _ in grids]
    slots = draw(st.integers(1, 3))
    d = data(tasks=draw(st.integers(1, 12)), grids=grids, sizes=sizes,
             Concurrency=draw(st.sampled_from(["Host.NumCpus", "2 * Host.NumCpus", "Host.Slots"])),
             ReplicationRequirements=draw(st.sampled_from(["false", "true", "Job.Replicas < 2"])),
             Deadline=draw(st.sampled_from([300.0, 3000.0, 1e9])), tail_threshold=draw(st.sampled_from([0, 3, 50])),
             run_on_losers=draw(st.booleans()), cycle=60.0)
    d["machines"].update(slots=slots, cpus=draw(st.integers(1, slots)))
    d["simulation"]["seed"] = draw(st.integers(0, 1000))
    if draw(st.booleans()):
        d["testbed"] = {"detection": "timeout", "timeout_factor": 3.0}
    return d


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(d=grid_settings())
def test_on_any_grids_no_job_is_lost_or_done_twice_and_no_host_computes_more_than_its_cpus(d):
    exp, _, run = run_checked(d)
    check_run(exp, run, bags_surely_finish(exp, exp.simulation.horizon + DRAIN))


@pytest.mark.parametrize("tasks, key, words", [
    ({"count": 0, "size": [1.0, 2.0]}, "workload.bags[0].tasks.count", ">= 1"),
    ({"count": 3, "size": [2.0, 1.0]}, "workload.bags[0].tasks.size", "low <= high"),
    ({"count": 3}, "workload.bags[0].tasks.size", "missing"),
    ({"count": 3, "size": [1.0, 2.0], "seeds": 1}, "workload.bags[0].tasks.seeds", "unknown key"),
    ({"count": 3, "size": [1.0, 2.0], "class": "other"}, "workload.bags[0].tasks.class", "unknown class"),
])
def test_drawn_tasks_are_checked_naming_the_key(tasks, key, words):
    d = data()
    d["workload"]["bags"][0]["tasks"] = tasks
    with pytest.raises(ConfigError) as err:
        parse_experiment(d, "x", "x.toml")
    assert err.value.key == key and words in str(err.value), str(err.value)


def test_drawn_tasks_are_the_same_for_a_seed_and_within_their_range():
    bags = [parse_experiment(data(tasks=50), "x").workload.bags[0][1] for _ in range(2)]
    assert bags[0] == bags[1] and len(bags[0]) == 50
    assert all(c == 0 and 600.0 <= size <= 900.0 for c, size in bags[0])
