"""GridBot's overlay on the testbed (mgst/testbed/overlay.py): a grid with start_hosts starts with those hosts' pullers
alone; the mapper takes the simulator's overlay turns on its own core and starts a granted host's puller; a puller
that gets no work leaves by itself (--idle-exit); the grid never holds more than max_hosts; and the wire form of a
sized grid's host plays from its arrival. Also: what cannot follow the overlay (mgst mapper, a resume) says so,
naming the key."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from grid_properties import most_at_once

from mgst.availability.registry import overlay_grids, to_wire
from mgst.config import ConfigError, load_experiment, parse_experiment
from mgst.core.state import JobStatus, MachineState
from mgst.testbed.beside import format_beside
from mgst.testbed.export import export_run
from mgst.testbed.local_run import run_local
from mgst.testbed.overlay import MapperOverlay, first_hosts, idle_exit

pytest.importorskip("classad2", reason="GridBot's expressions need the htcondor wheel's classad2 (the test extra)")

TIME_UNIT = 0.01  # a task of 100 takes 1 s on a speed-1 host
IDLE_LEAVE = 200.0  # 2 s with no work: the puller leaves
MAX_HOSTS = 3
SECOND_BAG = 1600.0  # the first bag is done by about 400 (by 800 on a loaded machine); its hosts left 200 after

EXPERIMENT = f"""
[experiment]
name = "overlay-testbed"
[workload]
kind = "bag_list"
class_names = ["job"]
granularity = [750.0]
[[workload.bags]]
at = 0.0
tasks = {{count = 12, size = [100.0, 100.0], seed = 1}}
[[workload.bags]]
at = {SECOND_BAG}
tasks = {{count = 12, size = [100.0, 100.0], seed = 2}}
[machines]
power = {{value = 1.0, count = 6}}
group = {{sizes = [1, 5]}}
[availability]
kind = "grids"
[[availability.grids]]
name = "static"
preset = "cluster"
[[availability.grids]]
name = "tech"
preset = "cluster"
start_hosts = 1
max_hosts = {MAX_HOSTS}
request_every = 50.0
idle_leave = {IDLE_LEAVE}
[policy]
name = "gridbot"
[simulation]
horizon = 100000.0
warmup = 0.0
replications = 1
seed = 3
[testbed]
time_unit = {TIME_UNIT}
duration = 20.0
"""


def test_a_sized_grid_grows_shrinks_and_grows_again_with_real_pullers(tmp_path: Path, no_children_left):
    """Bounded: the first pullers register within the mapper's 60 s, the run generates for 15 s and drains for at
    most its drain time-out; run_local stops and reaps every puller it started, those the overlay started too."""
    path = tmp_path / "overlay.toml"
    path.write_text(EXPERIMENT)
    exp = load_experiment(path)
    out = tmp_path / "run"
    beside = run_local(exp, out)  # keyed: a late puller uses its own key as the first ones do
    run = beside.run
    journal, core = run.journal, run.core

    # every task done exactly once
    done = Counter(r.job for r in journal.replicas.values() if r.outcome == "done")
    assert sorted(done) == sorted(journal.jobs) and len(done) == 24 and set(done.values()) == {1}
    assert all(rec.status is JobStatus.DONE for rec in core.jobs.values()) and run.cut_off == []

    # the static grid's machine registered once and stayed up; only the sized grid's machines came and went
    static, sized = journal.machines[0], journal.machines[1:]
    assert len(static.incarnations) == 1 and [p[1] for p in static.periods] == [None]
    # never more than max_hosts of the sized grid up at once (the journal's up periods, in wall time)
    assert most_at_once((start, end) for m in sized for start, end in m.periods) <= MAX_HOSTS

    # the overlay's own record of its turns: within the maximum at each; grown to it during the first bag; down to
    # no host between the bags (all left idle, the start host too); grown again for the second bag
    with open(out / "grid_sizes.csv", newline="") as f:
        read = list(csv.DictReader(f))
    rows = [(float(r["Time"]), int(r["Up"]), int(r["Granted"]), r["Demand"] == "1") for r in read
            if r["Source"] == "testbed"]
    assert {r["Source"] for r in read} == {"testbed", "simulation"} and {r["Grid"] for r in read} == {"tech"}
    assert rows and all(up + granted <= MAX_HOSTS for _, up, granted, _ in rows)
    assert [t for t, *_ in rows] == [50.0 * k for k in range(len(rows))]  # one turn per request_every, none missed
    first = [up for t, up, _, _ in rows if t < SECOND_BAG]
    peak = first.index(MAX_HOSTS)
    assert 0 in first[peak:], f"no host left idle between the bags: {first}"
    assert any(up >= 1 for t, up, _, _ in rows if t > SECOND_BAG), rows
    assert rows[0][3] and any(demand for t, _, _, demand in rows if t >= SECOND_BAG)

    # the hosts that left said why, in their own words; a machine that came back registered again
    log = (out / "pullers.log").read_text()
    assert log.count("(--idle-exit)") >= MAX_HOSTS, log[-2000:]
    assert any(len(m.incarnations) >= 2 for m in sized), [m.incarnations for m in sized]
    # ...and a host that left is not a failed one: its period ends 'left' in machine_periods.csv, and machines.csv
    # counts no down period (this grid has no failures; each of its hosts was booked as failed each time it left)
    with open(out / "machine_periods.csv", newline="") as f:
        endings = Counter(r["Ended By"] for r in csv.DictReader(f))
    assert endings["left"] >= MAX_HOSTS and endings["down"] == 0, endings
    with open(out / "machines.csv", newline="") as f:
        machines = list(csv.DictReader(f))
    assert {r["Down Periods"] for r in machines} == {"0"}, machines
    assert {r["State At End"] for r in machines} <= {"up", "left"}, machines
    # the simulation beside it ran the same overlay: both bags done there too, each set beside the testbed's; the
    # two overlays' sizes side by side, in grid_sizes.csv and summary.json, and said in a line
    makespans = beside.summary["bag_makespans"]
    assert [b["bag"] for b in makespans] == [0, 1] and all(b["simulation"] > 0 for b in makespans), makespans
    sides = beside.summary["overlay"]["tech"]
    assert sides["max_hosts"] == MAX_HOSTS and sides["testbed"]["most_up"] == MAX_HOSTS
    # every grant started its puller (the cluster has no queue wait: at most the last, if the run ended at once)
    tb = sides["testbed"]
    assert tb["lapsed"] == 0 and tb["requests"] - 1 <= tb["started"] <= tb["requests"], tb
    assert sides["simulation"]["most_up"] == MAX_HOSTS and sides["simulation"]["requests"] >= MAX_HOSTS
    assert f"overlay, grid 'tech' (at most {MAX_HOSTS} hosts): {sides['testbed']['requests']} hosts asked for on " \
           f"the testbed, {sides['simulation']['requests']} in simulation" in format_beside(beside)
    # `mgst export` writes the summary again from the journal, which has no record of the overlay's turns: it
    # keeps the section the run wrote
    exported = export_run(out)
    assert exported.summary["overlay"] == beside.summary["overlay"]
    assert json.loads((out / "summary.json").read_text())["overlay"] == beside.summary["overlay"]


def test_the_first_hosts_and_each_pullers_idle_exit():
    exp = parse_experiment(_data(), "x")
    grids = overlay_grids(exp)
    assert first_hosts(exp, grids) == [0, 1]  # the static machine, and the sized grid's first (start_hosts = 1)
    assert idle_exit(grids, 6, TIME_UNIT) == [None] + [IDLE_LEAVE * TIME_UNIT] * 5


class FakePullers:
    """The processes' side of a testbed overlay, by hand: which machines were launched, which pullers run, and how
    many times each machine registered."""

    def __init__(self) -> None:
        self.launched: list[int] = []
        self.running: set[int] = set()
        self.registered = Counter()

    def launch(self, j: int) -> None:
        self.launched.append(j)
        self.running.add(j)

    def register(self, machines: list, j: int) -> None:
        self.registered[j] += 1
        machines[j] = SimpleNamespace(state=MachineState.READY)


def overlay_by_hand() -> tuple[MapperOverlay, FakePullers, list]:
    # the cluster preset: no queue wait. Machines 1-5 are the sized grid's; machine 1 starts up (with machine 0).
    exp = parse_experiment(_data(), "x")
    fake = FakePullers()
    overlay = MapperOverlay(overlay_grids(exp), 6, 3, object(), fake.launch, fake.running.__contains__,
                             fake.registered.__getitem__)
    machines = [SimpleNamespace(state=MachineState.READY if j < 2 else MachineState.DOWN) for j in range(6)]
    return overlay, fake, machines


BUSY = SimpleNamespace(bags={}, queued_count=5)  # queued work, no bag: every grid may take it
IDLE = SimpleNamespace(bags={}, queued_count=0)


def test_a_granted_host_counts_until_its_puller_registers_and_arrives_after_its_delay():
    overlay, fake, machines = overlay_by_hand()
    launched = fake.launched
    overlay.due(0.0, machines, BUSY)
    assert launched == [] and overlay.next_at() == 0.0  # granted at 0, arriving at once: the next call starts it
    overlay.due(0.0, machines, BUSY)
    assert len(launched) == 1 and overlay.next_at() == 50.0
    # its puller has not registered by the next turns: it still counts, so the grid asks for one more, not two
    overlay.due(100.0, machines, BUSY)
    overlay.due(100.0, machines, BUSY)
    assert len(launched) == 2 and len(set(launched)) == 2
    overlay.due(200.0, machines, BUSY)
    assert len(launched) == 2  # 1 up + 2 granted: the maximum
    for j in launched:
        fake.register(machines, j)
    overlay.due(300.0, machines, IDLE)  # registered; nothing queued: no request
    assert len(launched) == 2 and not any(overlay.overlay.granted)
    # one of them leaves (down again): the next turn with work asks for one of the free machines
    machines[launched[0]] = SimpleNamespace(state=MachineState.DOWN)
    overlay.due(350.0, machines, BUSY)
    overlay.due(350.0, machines, BUSY)
    assert len(launched) == 3 and overlay.overlay.requests == [3] and overlay.lapsed_by_grid == [0]


def test_a_grant_lapses_when_its_puller_dies_before_it_registers_and_not_when_it_registered_and_left():
    overlay, fake, machines = overlay_by_hand()
    overlay.due(0.0, machines, BUSY)
    overlay.due(0.0, machines, BUSY)
    first = fake.launched[0]
    overlay.due(50.0, machines, BUSY)
    overlay.due(50.0, machines, BUSY)
    second = fake.launched[1]
    fake.running.discard(first)  # died at its start: never registered
    fake.registered[second] += 1  # registered, and left again before the overlay looked (still down)
    fake.running.discard(second)
    overlay.due(60.0, machines, IDLE)
    assert overlay.lapsed_by_grid == [1] and not any(overlay.overlay.granted)
    # the grid holds 1 up (its start host), no grant: the next turn with work asks again, and may take either
    overlay.due(100.0, machines, BUSY)
    overlay.due(100.0, machines, BUSY)
    assert len(fake.launched) == 3 and overlay.overlay.requests == [3]


def test_a_sized_hosts_wire_form_plays_one_up_period_from_its_arrival_then_down():
    d = _data()
    d["availability"]["grids"][1].update(preset="collaborative", join=0.0)
    exp = parse_experiment(d, "x")
    until = 100000.0
    forms = {since: to_wire(exp, 2, 3, until, since) for since in (0.0, 500.0, 2500.0)}
    ups = []
    for since, (kind, periods) in forms.items():
        assert kind == "trace"
        up, *rest = periods
        assert up[1] == 0 and up[0] > 0  # UP first, from the arrival
        if rest:  # preempted before the end: down to the end (the overlay may grant the machine again)
            assert len(rest) == 1 and rest[0][1] != 0
            assert up[0] + rest[0][0] == pytest.approx(until + 1.0 - since)
        ups.append(up[0])
    assert len(set(ups)) == 3  # each arrival draws its own up period
    assert to_wire(exp, 2, 3, until, 500.0) == forms[500.0]  # and the same one for the same arrival


def test_what_cannot_follow_the_overlay_says_so_naming_the_key(tmp_path: Path):
    path = tmp_path / "overlay.toml"
    path.write_text(EXPERIMENT)
    exp = load_experiment(path)
    with pytest.raises(ConfigError) as e:
        run_local(exp, tmp_path / "run", resume=True)
    assert e.value.key == "availability.grids[1].start_hosts"
    out = subprocess.run([sys.executable, "-m", "mgst", "mapper", str(path), "--bind", "tcp://127.0.0.1:0",
                          "--insecure", "--out", str(tmp_path / "m")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "availability.grids[1].start_hosts" in out.stderr and "mgst run" in out.stderr, out.stderr
    assert not (tmp_path / "m").exists()


def _data() -> dict:
    import tomllib

    return tomllib.loads(EXPERIMENT)


def test_a_regranted_machines_lingering_puller_goes_at_once_with_its_children(tmp_path: Path, no_children_left):
    # a preempted client's puller plays DOWN to the run's end; when the overlay grants its machine again, launch
    # stops it at once, with what it started (its process group), before the new puller starts
    from mgst.testbed.local_run import LocalPullers

    pullers = LocalPullers("tcp://127.0.0.1:9", [f"M{j}" for j in range(3)], tmp_path / "pullers.log", None,
                           (), [1, 1, 1], None, [None, None, 5.0])
    old = subprocess.Popen(["sh", "-c", "sleep 600 & wait"], process_group=0)
    pullers.procs.append(old)
    pullers.machine_of.append(2)
    try:
        child = wait_for_child(old.pid)
        assert pullers.alive(2) and not pullers.alive(1)
        pullers.launch(2)
        assert old.poll() is not None  # gone, and reaped
        with pytest.raises(psutil.NoSuchProcess):  # its child too (an orphan would outlive any reaping of ours)
            child.wait(10)
            child.status()
        assert pullers.alive(2) and pullers.machine_of == [2, 2]
        argv = " ".join(psutil.Process(pullers.procs[-1].pid).cmdline())
        assert "--machine M2" in argv and "--idle-exit 5.0" in argv, argv
    finally:
        pullers.stop(grace=0.0, down=frozenset())
    assert all(p.poll() is not None for p in pullers.procs)


def wait_for_child(pid: int) -> psutil.Process:
    """The one child of process ``pid``, once it has started it (at most 10 s)."""
    parent = psutil.Process(pid)
    for _ in range(1000):
        children = parent.children()
        if children:
            return children[0]
        time.sleep(0.01)
    raise AssertionError(f"process {pid} started no child in 10 s")


@pytest.mark.parametrize("ended", [False, True], ids=["stopped", "finished"])
def test_resuming_an_overlay_run_says_how_to_have_its_results_or_that_it_finished(tmp_path: Path, ended: bool):
    """An overlay run is not resumed (its pullers were started by the run that stopped): the refusal names the key
    and `mgst export`, which writes what the run did; and a finished one is said to be finished, as any finished
    run is (the refusal came first, so a run killed after its end could not have its results from --resume)."""
    from mgst.testbed.experiment_codec import to_plain  # noqa: PLC0415
    from mgst.testbed.resume import RunOver  # noqa: PLC0415
    from mgst.testbed.store import RunStore  # noqa: PLC0415

    exp = parse_experiment(_data(), "x")
    out = tmp_path / "run"
    out.mkdir()
    store = RunStore(out / "journal.sqlite", create=True)
    store.set_meta(experiment=to_plain(exp), seed=3, duration=20.0, time_unit=TIME_UNIT, **({"ended": 1.0}
                                                                                              if ended else {}))
    store.close()
    if ended:
        with pytest.raises(RunOver):
            run_local(exp, out, resume=True)
    else:
        with pytest.raises(ConfigError) as e:
            run_local(exp, out, resume=True)
        assert e.value.key == "availability.grids[1].start_hosts" and f"'mgst export {out}'" in str(e.value)
