"""Kondo et al.'s policies (seed 003) on hand-built states, expectations worked out by hand; and a smoke run of each."""

from __future__ import annotations

import heapq
import itertools
import json
import math
import random
import tomllib
from pathlib import Path

import pytest
from helpers import assigns, make_policy, new_core, of
from test_docs_policies import fenced_block, load_example

from mgst import policies
from mgst.cli import main
from mgst.core import Assign, Cancel, PolicyError, Scheduler, SetTimer
from mgst.model import Bag, Job, JobClass, Machine

DATA = Path(__file__).resolve().parent / "data"
KONDO = ("pri_cr", "pri_cr_wait", "pri_history", "excl_s", "excl_pred", "excl_pred_dup", "excl_pred_to")


def bag(tasks: int, at: float, size: float = 100.0, bag_id: int = 0) -> Bag:
    """One application: ``tasks`` identical class-0 tasks of ``size``, submitted at ``at``."""
    return Bag(bag_id, at, tuple(Job(i, 0, at, size, bag_id) for i in range(tasks)))


def platform(name: str, powers: list[float], options=None, ready_at: float | None = 0.0):
    """A started core over hosts of these powers (clock rates), every host up at share 1 from time 0 and, with
    ``ready_at``, asking for work in index order (the ready queue's)."""
    policy = make_policy(name, options)
    core = new_core(policy, [powers])
    core.start(0.0)
    for j in range(len(powers)):
        if ready_at is None:
            core.machine_up(0.0, j, 1.0)
        else:
            core.machine_ready(ready_at, j, 1.0)
    return policy, core


def time_outs(out) -> list[SetTimer]:
    """EXCL-PRED-TO's timers among ``out`` (not the fallback's of every EXCL-PRED)."""
    return [t for t in of(out, SetTimer) if t.key[0] == "excl_pred_to"]


def placed(out) -> list[tuple[int, int]]:
    return [(a.job.id, a.machine) for a in assigns(out)]


def done(core, t: float, machine: int, ready: bool = True):
    """The replica running on ``machine`` completes at ``t``."""
    return core.replica_done(t, core.machines[machine].replica.id, ready=ready)


# ------------------------------------------------------------------ prioritisation


def test_pri_cr_gives_the_tasks_to_the_fastest_ready_hosts_ties_in_ready_queue_order():
    _, core = platform("pri_cr", [1.0, 3.0, 2.0, 3.0])
    assert placed(core.bag_arrived(0.0, bag(3, 0.0))) == [(0, 1), (1, 3), (2, 2)]
    _, fcfs = platform("fcfs", [1.0, 3.0, 2.0, 3.0])  # the baseline: ready-queue order
    assert placed(fcfs.bag_arrived(0.0, bag(3, 0.0))) == [(0, 0), (1, 1), (2, 2)]


def test_pri_cr_fills_every_slot_a_host_asks_for():
    machines = [Machine("slow", (1.0,)), Machine("fast", (3.0,), slots=2)]
    core = Scheduler([JobClass("c0", 1.0)], machines, make_policy("pri_cr"), check=True)
    core.start(0.0)
    core.machine_ready(0.0, 0)
    core.machine_ready(0.0, 1)  # asks for its two slots
    assert placed(core.bag_arrived(0.0, bag(3, 0.0))) == [(0, 1), (1, 1), (2, 0)]


def test_pri_cr_gives_a_requeued_task_to_the_fastest_ready_host():
    _, core = platform("pri_cr", [1.0, 3.0, 2.0])
    core.bag_arrived(0.0, bag(1, 0.0))  # to host 1
    assert placed(core.machine_down(10.0, 1)) == [(0, 2)]  # requeued: host 2 (2.0) before host 0 (1.0)


def test_pri_cr_wait_holds_the_tasks_for_wait_then_assigns_to_the_fastest():
    _, core = platform("pri_cr_wait", [1.0, 2.0, 4.0], ready_at=None)
    core.machine_ready(0.0, 0, 1.0)
    core.machine_ready(0.0, 1, 1.0)
    out = core.bag_arrived(1000.0, bag(2, 1000.0))
    assert not assigns(out)
    assert of(out, SetTimer) == [SetTimer(("pri_cr_wait", 0), 1600.0)]  # the slides' 10 minutes
    assert not assigns(core.machine_ready(1300.0, 2, 1.0))  # the fastest host comes: still waiting
    assert placed(core.timer_fired(1600.0, ("pri_cr_wait", 0))) == [(0, 2), (1, 1)]


def test_pri_cr_wait_waits_as_its_option_says_and_not_again_for_a_requeued_task():
    _, core = platform("pri_cr_wait", [1.0, 2.0], {"wait": 60.0})
    out = core.bag_arrived(10.0, bag(1, 10.0))
    assert of(out, SetTimer) == [SetTimer(("pri_cr_wait", 0), 70.0)]
    assert placed(core.timer_fired(70.0, ("pri_cr_wait", 0))) == [(0, 1)]
    assert placed(core.machine_down(80.0, 1)) == [(0, 0)]  # requeued: at once, to the host left


STEADY = """
[workload]
kind = "bag_list"
granularity = [300.0]
bags = [{at = 100.0, tasks = [[0, 300.0], [0, 300.0], [0, 300.0]]}]

[machines]
rates = [[2.0, 1.0, 0.5, 0.25]]

[policy]
name = "NAME"

[simulation]
horizon = 2000.0
warmup = 0.0
replications = 1
"""


def steady_makespan(name: str, tmp_path, capsys) -> float:
    """Kondo et al.'s makespan, last completion - submission: the bag's turnaround (mgst's bag "makespan" counts
    from the first dispatch, seed 000's)."""
    path = tmp_path / f"{name}.toml"
    path.write_text(STEADY.replace("NAME", name), encoding="utf-8")
    assert main(["simulate", str(path), "--json", "--quiet", "--workers", "1"]) == 0
    return json.loads(capsys.readouterr().out)["bags"]["avt"]["mean"]


def test_waiting_hurts_on_a_steady_platform(tmp_path, capsys):
    """Hosts always up and idle: every host is ready when the application comes, so the wait gains nothing and
    PRI-CR-WAIT ends exactly its 600 s after PRI-CR (the slowest of the three hosts used, power 0.5: 600 s)."""
    assert steady_makespan("pri_cr", tmp_path, capsys) == 600.0
    assert steady_makespan("pri_cr_wait", tmp_path, capsys) == 1200.0
    assert steady_makespan("fcfs", tmp_path, capsys) == 600.0  # (the same three hosts, in ready-queue order)


def test_pri_history_ranks_by_work_per_availability_interval_from_the_history():
    _, core = platform("pri_history", [1.0, 2.0, 1.5], ready_at=None)
    core.machine_ready(0.0, 0, 1.0)  # A, power 1: up all along at share 1: one open interval, 1000 CPU-s at 1000
    core.machine_ready(0.0, 1, 1.0)  # B, power 2: up 0..100 and 150..250 (100 CPU-s each), back at 990
    core.machine_ready(0.0, 2, 0.5)  # C, power 1.5: up all along at share 0.5: 500 CPU-s at 1000
    core.machine_down(100.0, 1)
    core.machine_up(150.0, 1)
    core.machine_down(250.0, 1)
    core.machine_ready(990.0, 1, 1.0)  # its open interval (10 CPU-s at 1000) is below its mean: not counted
    # expected work per interval: A 1 x 1000 = 1000, C 1.5 x 500 = 750, B 2 x 100 = 200 (PRI-CR: B, C, A)
    assert placed(core.bag_arrived(1000.0, bag(2, 1000.0))) == [(0, 0), (1, 2)]


def test_pri_history_capped_at_task_ranks_hosts_whose_intervals_outlast_a_task_by_clock_rate():
    """The same history as above, tasks of 300: A (1000) and C (750) both deliver a task per interval and go by
    clock rate (C 1.5 before A 1), B's 200 stays below a task and comes last; uncapped, A came first."""
    _, core = platform("pri_history", [1.0, 2.0, 1.5], {"score": "capped_at_task"}, ready_at=None)
    core.machine_ready(0.0, 0, 1.0)
    core.machine_ready(0.0, 1, 1.0)
    core.machine_ready(0.0, 2, 0.5)
    core.machine_down(100.0, 1)
    core.machine_up(150.0, 1)
    core.machine_down(250.0, 1)
    core.machine_ready(990.0, 1, 1.0)
    assert placed(core.bag_arrived(1000.0, bag(3, 1000.0, size=300.0))) == [(0, 2), (1, 0), (2, 1)]


def test_pri_history_refuses_an_unknown_score():
    with pytest.raises(ValueError, match="^score: must be one of interval_work, capped_at_task"):
        make_policy("pri_history", {"score": "per_second"})


def test_pri_history_without_history_falls_back_to_clock_rates():
    _, core = platform("pri_history", [1.0, 3.0, 2.0])
    assert placed(core.bag_arrived(0.0, bag(2, 0.0))) == [(0, 1), (1, 2)]  # every host delivered 0 so far


# ------------------------------------------------------------------ exclusion by a fixed threshold

# Clock rates 1, 2, 3, 4, 0.5, 1.5: mean 12 / 6 = 2; squared deviations 1, 0, 1, 4, 2.25, 0.25 sum to 8.5;
# population sd sqrt(8.5 / 6) = 1.19024; EXCL-S.5's threshold 2 - 0.5 x 1.19024 = 1.40488: hosts 0 (1.0) and
# 4 (0.5) are below it, host 5 (1.5) is not. EXCL-S1's, 2 - 1.19024 = 0.80976: host 4 alone.
EXCL_POWERS = [1.0, 2.0, 3.0, 4.0, 0.5, 1.5]


@pytest.mark.parametrize("kept_order", ["fastest", "ready"])
def test_excl_s_never_assigns_to_a_host_below_the_threshold(kept_order):
    policy, core = platform("excl_s", EXCL_POWERS, {"kept_order": kept_order})
    used = placed(core.bag_arrived(0.0, bag(6, 0.0)))
    # the hosts kept, fastest first (PRI-CR) or in ready-queue order
    assert used == ([(0, 3), (1, 2), (2, 1), (3, 5)] if kept_order == "fastest" else [(0, 1), (1, 2), (2, 3), (3, 5)])
    t = 100.0
    while core.bags:  # every completion frees a host that asks again; hosts 0 and 4 ask all along
        running = sorted(j for j in range(6) if core.machines[j].replica is not None)
        assert running and not {0, 4} & set(running)
        t += 10.0
        used += placed(done(core, t, running[0]))
    assert {m for _, m in used} == {1, 2, 3, 5} and len(used) == 6
    assert policy.report() == {"excluded_hosts": 2}


def test_excl_s_serves_the_hosts_it_keeps_fastest_first_by_default():
    """The slides build exclusion on prioritisation: EXCL-S is PRI-CR over the hosts above its threshold."""
    _, core = platform("excl_s", EXCL_POWERS)
    assert placed(core.bag_arrived(0.0, bag(3, 0.0))) == [(0, 3), (1, 2), (2, 1)]
    _, pri_cr = platform("pri_cr", EXCL_POWERS)
    assert placed(pri_cr.bag_arrived(0.0, bag(3, 0.0))) == [(0, 3), (1, 2), (2, 1)]


def test_excl_s_threshold_follows_its_sd_option():
    policy, core = platform("excl_s", EXCL_POWERS, {"sd": 1.0, "kept_order": "ready"})
    assert placed(core.bag_arrived(0.0, bag(6, 0.0))) == [(0, 0), (1, 1), (2, 2), (3, 3), (4, 5)]
    assert policy.threshold == pytest.approx(0.80976, abs=1e-5)


@pytest.mark.parametrize("power, hosts", [(0.9, 7), (1.2 / 1.5, 220), (0.1, 3), (1.0, 5)])
def test_excl_s_on_hosts_of_one_clock_rate_excludes_none(power, hosts):
    """Every host at the mean is kept (the spread is 0). Summed in floating point, seven hosts of 0.9 had a mean of
    0.9000000000000001, above each of them: all seven were excluded, and the tasks waited to the drain limit."""
    policy, core = platform("excl_s", [power] * hosts, {"sd": 0.5})
    assert len(placed(core.bag_arrived(0.0, bag(3, 0.0)))) == 3
    assert policy.report() == {"excluded_hosts": 0}


@pytest.mark.parametrize("wait", [-1.0, math.inf, math.nan])
def test_pri_cr_wait_refuses_a_wait_that_is_negative_or_never_ends(wait):
    # (an infinite wait was taken: no task ever started, and the run ended at its drain limit)
    with pytest.raises(ValueError, match="^wait: must be a number of seconds >= 0"):
        make_policy("pri_cr_wait", {"wait": wait})


def test_excl_s_refuses_a_negative_sd_and_an_unknown_order():
    with pytest.raises(ValueError, match="^sd: must be a number >= 0"):
        make_policy("excl_s", {"sd": -1.0})
    with pytest.raises(ValueError, match="^kept_order: must be one of fastest, ready, got 'slowest'"):
        make_policy("excl_s", {"kept_order": "slowest"})


# ------------------------------------------------------------------ exclusion by predicted makespan


def test_excl_pred_takes_a_host_that_finishes_exactly_at_the_predicted_end():
    # Five tasks of 17.732 at 1.058 on hosts of power 3, 1.5, 4, 1, 0.5, always up. r is their mean power, 2 (in
    # floats 2.0000000000000004: a sum over the hosts divided by the time), so the predicted end E = 1.058 + 17.732 / 2
    # = 9.924. At 1.058 only H2 (4: done at 5.491) and H0 (3: at 6.969) can finish by E. At 5.491 H2 can again, at
    # exactly E (5.491 + 4.433): the rule is inclusive, so it takes the third task; then no host can (the fallback),
    # and the ready hosts take the last two fastest first, H1 (1.5) and H3 (1): the last ends at 5.491 + 17.732 =
    # 23.223, a makespan of 22.165. With the float's E one ulp short, H2 was excluded at 5.491 and H4 (0.5) took a
    # task: 39.897.
    from mgst.config import parse_experiment
    from mgst.sim.replications import run_simulation

    data = {"workload": {"kind": "bag_list", "bags": [{"at": 1.058, "tasks": [[0, 17.732]] * 5}]},
            "machines": {"power": [3.0, 1.5, 4.0, 1.0, 0.5], "names": ["H0", "H1", "H2", "H3", "H4"]},
            "availability": {"kind": "always"}, "policy": {"name": "excl_pred"},
            "simulation": {"horizon": 1000.0, "warmup": 0.0, "replications": 1, "seed": 1}}
    summary, _ = run_simulation(parse_experiment(data, "tie"), workers=1)
    assert summary.bags.makespan.mean == pytest.approx(22.165)


def test_excl_pred_excludes_hosts_that_cannot_finish_by_the_predicted_makespan():
    policy, core = platform("excl_pred", [2.0, 1.0, 0.5, 0.25])
    # at 100, from the history: r = (2 + 1 + 0.5 + 0.25) x 100 / (100 x 4) = 0.9375; makespan ceil(4/4) x 100 / r =
    # 106.67; a task takes 50, 100, 200 and 400 s on the hosts: hosts 2 and 3 are excluded
    assert placed(core.bag_arrived(100.0, bag(4, 100.0))) == [(0, 0), (1, 1)]
    report = policy.report()
    assert report["predicted_makespan"] == pytest.approx(100.0 / 0.9375)
    assert report["predicted_rate"] == pytest.approx(0.9375)
    assert (report["excluded_hosts"], report["predictions"], report["replicas_started"]) == (2, 1, 0)
    assert placed(done(core, 150.0, 0)) == [(2, 0)]  # 150 + 50 <= 206.67: host 0 may take another
    # host 0 fails at 160: task 2 goes back. 160 + 50 is past the predicted end, 206.67: every host of the
    # platform is excluded, so the prediction no longer says which: the fallback, PRI-CR, gives the waiting tasks
    # to the ready hosts fastest first (never a deadlock)
    assert placed(core.machine_down(160.0, 0)) == [(2, 2), (3, 3)]


@pytest.mark.parametrize("name", ["excl_pred", "excl_pred_dup", "excl_pred_to"])
def test_excl_pred_falls_back_by_a_timer_when_no_event_comes(name):
    """The fast host fails for good and nothing else happens: at the moment no host could finish a task by the
    predicted end, a timer lets the excluded slow host work (without it, the task waited forever)."""
    _, core = platform(name, [1.0, 0.1])
    out = core.bag_arrived(0.0, bag(2, 0.0))
    # at 0 no history: r = the rate now, (1 + 0.1) / 2 = 0.55; the end ceil(2/2) x 100 / 0.55 = 181.82; a task takes
    # 100 s on host 0 and 1,000 s on host 1 (excluded); no host can finish by the end from 181.82 - 100 = 81.82 on
    assert placed(out) == [(0, 0)]
    (fallback,) = [t for t in of(out, SetTimer) if t.key == ("excl_pred_fallback", 0)]
    assert fallback.at == pytest.approx(100 / 0.55 - 100) and fallback.at + 100.0 > 100 / 0.55
    assert not assigns(core.machine_down(50.0, 0))  # task 0 back in the queue; host 1 still excluded
    assert placed(core.timer_fired(fallback.at, fallback.key)) == [(0, 1)]


def test_excl_pred_predicts_again_after_exactly_n_completions():
    policy, core = platform("excl_pred", [1.0, 1.0, 1.0])
    core.bag_arrived(100.0, bag(7, 100.0))
    # r = 1 (every host up at share 1): ceil(7/3) x 100 / 1 = 300 s, the end at 400
    assert policy.predictions[0][0] == 400.0
    done(core, 200.0, 0)
    done(core, 210.0, 1)
    assert policy.report()["predictions"] == 1  # N - 1 = 2 completions: not yet
    done(core, 220.0, 2)  # the N-th: 4 tasks left, r still 1: 220 + ceil(4/3) x 100 = 420
    assert policy.report()["predictions"] == 2
    assert policy.predictions[0][0] == 420.0
    assert policy.report()["predicted_makespan"] == 300.0  # the first prediction stays the one reported


def test_excl_pred_refuses_jobs_without_a_bag_naming_itself():
    _, core = platform("excl_pred", [1.0])
    with pytest.raises(ValueError, match="policy excl_pred schedules Bags of Tasks"):
        core.job_arrived(0.0, Job(0, 0, 0.0, 10.0))


def test_a_kondo_policy_is_refused_a_workload_without_bags_when_the_file_is_loaded(tmp_path, capsys):
    text = (DATA / "kondo_tiny.toml").read_text(encoding="utf-8")
    start = text.index("[workload]")
    end = text.index("[machines]")
    poisson = text[:start] + "[workload]\narrival_rates = [0.01]\ngranularity = [300.0]\n\n" + text[end:]
    path = tmp_path / "poisson.toml"
    path.write_text(poisson.replace("kondo_tiny.csv", str(DATA / "kondo_tiny.csv")), encoding="utf-8")
    assert main(["simulate", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "policy.name: policy excl_pred_to schedules one application, a Bag of Tasks" in err
    assert "Traceback" not in err


# ------------------------------------------------------------------ replication


@pytest.mark.parametrize(("tasks", "replicas"), [(4, 0), (3, 1), (2, 2), (1, 1)])
def test_excl_pred_dup_replicates_only_on_ready_hosts_the_waiting_tasks_leave(tasks, replicas):
    policy, core = platform("excl_pred_dup", [1.0, 1.0, 1.0, 1.0])
    # r = 1, makespan ceil(tasks/4) x 100 = 100: every host can finish by it, none is excluded
    out = core.bag_arrived(100.0, bag(tasks, 100.0))
    firsts = [(i, i) for i in range(tasks)]
    assert placed(out)[:tasks] == firsts
    extra = placed(out)[tasks:]
    assert len(extra) == replicas  # 4 hosts - tasks, at most one more replica per task (cap 2)
    assert {m for _, m in extra} == set(range(tasks, tasks + replicas))
    assert all(len(r.replicas) <= 2 for r in core.running.values())
    assert policy.report()["replicas_started"] == replicas


def test_excl_pred_dup_cancels_the_loser():
    _, core = platform("excl_pred_dup", [1.0, 1.0])
    out = core.bag_arrived(100.0, bag(1, 100.0))
    assert placed(out) == [(0, 0), (0, 1)]
    out = done(core, 200.0, 1, ready=False)
    assert [c.machine for c in of(out, Cancel)] == [0]
    assert not core.bags


def test_excl_pred_to_replicates_at_the_predicted_makespan_and_never_beyond_two():
    policy, core = platform("excl_pred_to", [1.0, 1.0, 1.0])
    out = core.bag_arrived(100.0, bag(2, 100.0))
    # r = 1, makespan ceil(2/3) x 100 = 100: the time-out at 200; host 2 is left idle (no replica before it)
    assert placed(out) == [(0, 0), (1, 1)]
    assert time_outs(out) == [SetTimer(("excl_pred_to", 0), 200.0)]
    assert not assigns(core.cpu_share_changed(120.0, 1, 0.25))  # task 1 slows down; nothing is due yet
    assert not assigns(done(core, 190.0, 0))  # task 0 done; host 0 asks: nothing waits
    out = core.timer_fired(200.0, ("excl_pred_to", 0))
    assert placed(out) == [(1, 2)]  # task 1 not done: one replica, on the ready host that asked first
    assert len(core.jobs[1].replicas) == 2
    assert not assigns(core.cpu_share_changed(210.0, 2, 0.5))  # host 0 still asks: task 1 has its 2 replicas
    assert not assigns(core.timer_fired(200.0, ("excl_pred_to", 0)))  # (a replayed timer: stale)
    assert policy.report()["replicas_started"] == 1
    out = done(core, 300.0, 2, ready=False)  # the replica on host 2 delivers first: the one on host 1 is cancelled
    assert [c.machine for c in of(out, Cancel)] == [1]
    assert not core.bags


def test_excl_pred_to_moves_its_time_out_when_it_predicts_again():
    _, core = platform("excl_pred_to", [1.0, 1.0])
    out = core.bag_arrived(0.0, bag(4, 0.0))
    # at 0 no history: r = the rate now, 1; ceil(4/2) x 100 = 200
    assert time_outs(out) == [SetTimer(("excl_pred_to", 0), 200.0)]
    done(core, 100.0, 0)
    out = done(core, 110.0, 1)  # N = 2 completions: 2 tasks left, r = 1: 110 + 100 = 210
    assert time_outs(out) == [SetTimer(("excl_pred_to", 0), 210.0)]


# ------------------------------------------------------------------ other workloads: several bags, slots, failures


def drive(policy, seed: int) -> Scheduler:
    """A small event loop: five hosts (powers 0.5 to 2, some of two slots), eight bags of mixed sizes arriving
    over time, hosts failing and coming back, timers firing; the invariants are checked after every event."""
    rng = random.Random(seed)
    machines = [Machine(f"M{j}", (rng.choice((0.5, 1.0, 2.0)),), 1.0, rng.choice((1, 2))) for j in range(5)]
    core = Scheduler([JobClass("task", 0.0, 4.0)], machines, policy, check=True)
    heap: list = []
    seq = itertools.count()
    running: dict[int, int] = {}  # replica -> machine, as the hosts really run them

    def push(t: float, kind: str, arg) -> None:
        heapq.heappush(heap, (t, next(seq), kind, arg))

    def handle(now: float, outputs) -> None:
        for o in outputs:
            if isinstance(o, Assign):
                running[o.replica] = o.machine
                push(now + o.job.size / machines[o.machine].rates[0], "done", o.replica)
            elif isinstance(o, Cancel):
                running.pop(o.replica, None)
            elif isinstance(o, SetTimer):
                push(o.at, "timer", o.key)

    t, first = 0.0, 0
    for b in range(8):
        t += rng.expovariate(1 / 5)
        n = rng.randint(1, 7)
        push(t, "bag", Bag(b, t, tuple(Job(first + i, 0, t, rng.uniform(1.0, 8.0), b) for i in range(n))))
        first += n
    for j in range(5):
        push(0.0, "up", j)
    handle(0.0, core.start(0.0))
    while heap:
        now, _, kind, arg = heapq.heappop(heap)
        if kind == "bag":
            out = core.bag_arrived(now, arg)
        elif kind == "up":
            out = core.machine_ready(now, arg)
            if now < t:
                push(now + rng.expovariate(1 / 12), "down", arg)
        elif kind == "down":
            for rid in [r for r, m in running.items() if m == arg]:
                del running[rid]
            out = core.machine_down(now, arg)
            push(now + rng.expovariate(1 / 3), "up", arg)
        elif kind == "done":
            if running.pop(arg, None) is None:
                continue  # cancelled, or lost with its host
            out = core.replica_done(now, arg, ready=True)
        else:
            out = core.timer_fired(now, arg)
        handle(now, out)
        core.check_invariants()
        assert all(len(r.replicas) <= policy.max_replicas for r in core.running.values())
    return core


@pytest.mark.parametrize("name", KONDO)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_each_policy_completes_several_bags_on_failing_hosts_with_slots(name, seed):
    core = drive(make_policy(name, {"wait": 2.0} if name == "pri_cr_wait" else None), seed)
    assert not core.bags and all(r.status.name == "DONE" for r in core.jobs.values())


# ------------------------------------------------------------------ every policy, in a simulation of a trace


@pytest.mark.parametrize("name", ("fcfs", *KONDO))
def test_each_policy_runs_an_application_on_a_trace(name, tmp_path, capsys):
    text = (DATA / "kondo_tiny.toml").read_text(encoding="utf-8")
    path = tmp_path / "kondo.toml"
    path.write_text(text.replace('name = "excl_pred_to"', f'name = "{name}"')
                    .replace('"kondo_tiny.csv"', json.dumps(str(DATA / "kondo_tiny.csv"))), encoding="utf-8")
    assert main(["simulate", str(path), "--json", "--quiet", "--workers", "1"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["bags"]["verdict"] == "bounded" and summary["bags"]["tasks"] == 4
    assert summary["bags"]["makespan"]["mean"] > 0.0
    if name.startswith("excl_pred"):
        # at 1000, from the trace: H1 delivered 2 x 1000, H2 1.6 x 800, H3 1 x 700, H4 0.8 x 500, H5 0.4 x 1000,
        # H6 0.2 x 100: r = 4800 / 6000 = 0.8; ceil(4/6) x 300 / 0.8 = 375
        assert summary["policy_counts"]["predicted_makespan"] == 375.0
        assert summary["policy_counts"]["predictions"] == 1


# ------------------------------------------------------------------ the worked Kondo-style example of docs/policies.md


@pytest.fixture(scope="module")
def kondo_example():
    """Section 9's Kondo-style example (exclusion by history), run from the doc's own code block."""
    yield from load_example("kondo-policy-example", "mgst_docs_kondo_policy_example")


def test_the_kondo_example_is_under_40_lines_and_registers(kondo_example):
    lines = fenced_block("kondo-policy-example", "python").split("\n")
    assert len(lines) < 40, len(lines)
    assert policies.policy_class(kondo_example.name) is kondo_example
    snippet = tomllib.loads(fenced_block("kondo-policy-example-experiment", "toml"))
    assert snippet["policy"]["name"] == kondo_example.name


def example_platform(cls):
    """Hosts of power 2, 1 and 0.5, up at share 1 from 0. Host 0's intervals deliver 40 CPU-s each (0..40,
    60..100; its open one, 290..300, has delivered 10 < 40 at 300): 2 x 40 = 80 < 100, too short for a task.
    Host 1's one interval delivered 150: 1 x 150 >= 100. Host 2 has never gone down: no interval has ended."""
    core = Scheduler([JobClass("c0", 1.0)], [Machine(f"M{j}", (p,)) for j, p in enumerate([2.0, 1.0, 0.5])], cls(),
                     check=True)
    core.start(0.0)
    for j in range(3):
        core.machine_ready(0.0, j, 1.0)
    for t, event, j in ((40.0, "down", 0), (60.0, "up", 0), (100.0, "down", 0), (150.0, "down", 1),
                        (160.0, "up", 1), (290.0, "up", 0)):
        core.machine_down(t, j) if event == "down" else core.machine_ready(t, j, 1.0)
    return core


def test_the_kondo_example_passes_over_hosts_whose_intervals_are_too_short(kondo_example):
    core = example_platform(kondo_example)
    assert placed(core.bag_arrived(300.0, bag(2, 300.0))) == [(0, 1), (1, 2)]  # PRI-CR would start with host 0
    core.check_invariants()


def test_the_kondo_example_needs_knows_sizes(kondo_example):
    undeclared = type("Undeclared", (kondo_example,), {"knows_sizes": False})
    core = example_platform(undeclared)
    with pytest.raises(PolicyError, match="does not declare knows_sizes"):
        core.bag_arrived(300.0, bag(2, 300.0))
