"""A policy that fails during a testbed run (its code raises, or it breaks a rule of the core): the run stops at
once, says which policy failed where, with the policy's own traceback, writes what it did (each job once), exits 3;
its journal exports, and a resume says it is over. A policy that replays otherwise than it ran is named, and its
journal neither exported nor resumed. Real pullers, loopback."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DURATION_S = 30.0  # of job generation: the run stops long before

# Two policies a researcher might write, each failing after a few jobs: one raises in a hook when a replica ends
# (the core is fed a puller's message), one assigns to a machine that is not asking (the core is fed an arrival).
POLICIES = '''
from mgst.core import Assign, SetTimer
from mgst.policies import register
from mgst.policies.base import Policy


class HeadFirst(Policy):
    """FCFS by class queue: the head of the first queue that has one (not registered: the base of those below)."""

    def choose(self, view, machine):
        for queue in view.queues.values():
            if queue.head is not None:
                return queue.head
        return None


@register
class RaisesInAHook(HeadFirst):
    """FCFS, then a KeyError in on_replica_end at the fifth replica that ends."""
    name = "raises_in_a_hook"
    hooks = frozenset({"choose", "on_replica_end"})

    def __init__(self, options=None, rng=None):
        super().__init__(options, rng)
        self.ended = 0

    def on_replica_end(self, view, replica):
        self.ended += 1
        if self.ended == 5:
            return {}["a key the policy forgot"]  # the researcher's bug
        return None


@register
class FailsToStart(Policy):
    """FCFS whose start hook raises, before the run begins."""
    name = "fails_to_start"
    hooks = frozenset({"start", "choose"})

    def start(self, view):
        raise RuntimeError("no plan")

    def choose(self, view, machine):
        return None


@register
class DecidesOtherwiseLater(HeadFirst):
    """FCFS; once CHANGED is set (its code changed since the run, or it drew on something but its inputs and its
    random stream), it leaves every machine idle."""
    name = "decides_otherwise_later"
    hooks = frozenset({"choose"})

    def choose(self, view, machine):
        import os
        if os.environ.get("CHANGED"):
            return None
        return super().choose(view, machine)


@register
class FcfsThatChangesLater(HeadFirst):
    """FCFS; once the module sets CHANGED (its code changed after the run), it raises when a replica ends."""
    name = "fcfs_that_changes_later"
    hooks = frozenset({"choose", "on_replica_end"})

    def on_replica_end(self, view, replica):
        import os
        if os.environ.get("CHANGED"):
            raise AssertionError("a check added since")
        return None


@register
class ReturnsAJob(HeadFirst):
    """Returns the head's Job, not its JobRecord (a researcher's slip)."""
    name = "returns_a_job"
    hooks = frozenset({"choose"})

    def choose(self, view, machine):
        head = super().choose(view, machine)
        return None if head is None else head.job


class SetsATimerAtTheThirdEnd(HeadFirst):
    """FCFS, and a timer (key, at) of the subclass's once the third replica ends (not registered)."""
    hooks = frozenset({"choose", "on_replica_end", "on_timer"})

    def __init__(self, options=None, rng=None):
        super().__init__(options, rng)
        self.ended = 0

    def on_replica_end(self, view, replica):
        self.ended += 1
        if self.ended == 3:
            yield SetTimer(*self.timer(view))  # the timer at fault

    def on_timer(self, view, key):
        return None


@register
class SetsASetAsTimerKey(SetsATimerAtTheThirdEnd):
    """A timer keyed by a frozenset (no journal keeps it)."""
    name = "sets_a_set_as_timer_key"

    def timer(self, view):
        return frozenset({"tick"}), view.now + 1.0


@register
class RearmsATimerForNow(HeadFirst):
    """FCFS, and a timer for now, set in its start and again whenever it fires (the researcher forgot the period):
    model time could never move on."""
    name = "rearms_a_timer_for_now"
    hooks = frozenset({"start", "choose", "on_timer"})

    def start(self, view):
        return (SetTimer("tick", view.now),)

    def on_timer(self, view, key):
        return (SetTimer("tick", view.now),)  # the period forgotten


@register
class RearmsATimerAHairLater(RearmsATimerForNow):
    """The same, a hair later each time: model time crawls (10^14 fires to a horizon of 200), and no instant
    repeats for the core's check of one."""
    name = "rearms_a_timer_a_hair_later"

    def on_timer(self, view, key):
        return (SetTimer("tick", view.now + 1e-12),)


@register
class SetsANanTimer(SetsATimerAtTheThirdEnd):
    """A timer for NaN."""
    name = "sets_a_nan_timer"

    def timer(self, view):
        return "later", view.now * float("nan")  # a time worked out from nothing


@register
class HangsInChoose(HeadFirst):
    """FCFS until model time 2, then a choice that never returns (it says STUCK on stderr first)."""
    name = "hangs_in_choose"
    hooks = frozenset({"choose"})

    def choose(self, view, machine):
        if view.now > 2.0:
            import sys
            import time
            print("STUCK", file=sys.stderr, flush=True)
            while True:
                time.sleep(0.01)
        return super().choose(view, machine)


@register
class AssignsToABusyMachine(Policy):
    """Sends every new job to machine 0, asking or not."""
    name = "assigns_to_a_busy_machine"
    hooks = frozenset({"dispatch"})

    def dispatch(self, view, new_job, asking):
        if new_job is not None:
            yield Assign(new_job.job, 0)
'''

EXPERIMENT = """[experiment]
name = "failing-policy"
[workload]
arrival_rates = [1.0]
[machines]
rates = [[1.0, 1.0]]
[policy]
name = "{policy}"
[simulation]
replications = 1
[testbed]
time_unit = 0.2
duration = {duration}
"""


def _mgst(tmp_path: Path, *args: str, timeout: float = 120, **env_vars: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), **env_vars}
    return subprocess.run([sys.executable, "-m", "mgst", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=tmp_path, env=env)


def _run(tmp_path: Path, policy: str, duration: float) -> tuple[Path, Path, subprocess.CompletedProcess]:
    """`mgst run --json` of EXPERIMENT with ``policy`` (of POLICIES) for ``duration`` s: the experiment file, the run's
    folder, the process."""
    (tmp_path / "failing_policies.py").write_text(POLICIES)
    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT.format(policy=policy, duration=duration))
    out = tmp_path / "run"
    p = _mgst(tmp_path, "run", str(exp), "--import", "failing_policies", "--out", str(out), "--no-live", "--quiet",
              "--json")
    return exp, out, p


def _run_to_its_end(tmp_path: Path, policy: str, duration: float) -> tuple[Path, Path, dict]:
    """_run, which must end well: the experiment file, the run's folder, its summary."""
    exp, out, p = _run(tmp_path, policy, duration)
    assert p.returncode == 0, p.stderr[-3000:]
    return exp, out, json.loads(p.stdout)


@pytest.mark.parametrize(("policy", "event", "error", "line"), [
    ("raises_in_a_hook", "ReplicaDone", "KeyError: 'a key the policy forgot'", "# the researcher's bug"),
    ("assigns_to_a_busy_machine", "JobArrived", "PolicyError: assign to machine M1, which is not asking for work",
     "yield Assign(new_job.job, 0)"),
    # (the mapper took it without a word, and the simulation beside then failed, blamed on mgst)
    ("sets_a_nan_timer", "ReplicaDone", "PolicyError: SetTimer later at nan: a timer's time must be a finite number",
     "yield SetTimer(*self.timer(view))"),
])
def test_a_policy_that_fails_stops_the_run_which_writes_what_it_did_and_exits_3(
        tmp_path: Path, no_children_left, policy: str, event: str, error: str, line: str) -> None:
    exp, out, p = _run(tmp_path, policy, DURATION_S)
    assert p.returncode == 3, p.stderr[-3000:]
    said = f"the policy '{policy}' failed at model time"
    assert said in p.stderr and f"handling {event}: {error}" in p.stderr, p.stderr[-3000:]
    assert line in p.stderr, p.stderr[-3000:]  # the policy's own traceback, down to its line
    assert "the run was stopped there, and what it did is written in" in p.stderr
    summary = json.loads(p.stdout)
    assert summary["policy_failure"].startswith(said) and error in summary["policy_failure"]
    assert summary["duration_s"] < DURATION_S / 2, summary["duration_s"]  # stopped, not generating on to the end
    assert "it is not simulated beside" in " ".join(summary["warnings"]) and summary.get("simulation") is None
    with open(out / "jobs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    ids = [int(r["ID"]) for r in rows]
    assert len(ids) == len(set(ids)) == summary["jobs_generated"] >= 1  # every job once, none lost
    assert sum(r["Status"] == "Done" for r in rows) == summary["jobs_done"]

    # the journal alone gives the same run (its replay stops where the policy failed), and it is over
    before = (out / "jobs.csv").read_text()
    e = _mgst(tmp_path, "export", str(out), "--json")
    assert e.returncode == 0, e.stderr[-3000:]
    assert json.loads(e.stdout)["policy_failure"] == summary["policy_failure"]
    assert (out / "jobs.csv").read_text() == before
    # without the policy's module on Python's path: one line saying which module and how, not a traceback
    elsewhere = subprocess.run([sys.executable, "-m", "mgst", "export", str(out)], capture_output=True, text=True,
                               timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert elsewhere.returncode == 2 and "Traceback" not in elsewhere.stderr, elsewhere.stderr[-3000:]
    assert elsewhere.stderr.strip().splitlines() == [
        f"mgst: error: {out / 'journal.sqlite'}: the run imported the module 'failing_policies' for its policy, which "
        "does not import here (ModuleNotFoundError: No module named 'failing_policies'): run this with the module's "
        "folder on Python's path (PYTHONPATH=FOLDER), as the run was"], elsewhere.stderr
    assert (out / "jobs.csv").read_text() == before
    r = _mgst(tmp_path, "run", str(exp), "--import", "failing_policies", "--resume", str(out))
    assert r.returncode == 0 and "is already finished" in r.stderr, r.stderr[-3000:]
    if policy == "raises_in_a_hook":
        _check_a_journal_that_goes_on_after_its_policy_failed(tmp_path, exp, out)


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize(("policy", "error", "line"), [
    ("raises_in_a_hook", "KeyError: 'a key the policy forgot'", "# the researcher's bug"),
    ("assigns_to_a_busy_machine", "PolicyError: assign to machine M1, which is not asking for work",
     "yield Assign(new_job.job, 0)"),
    # (compiled, the core's check, not a cast of mypyc's that read as the core's TypeError)
    ("returns_a_job", "PolicyError: choose() returned Job Job(id=", None),
    ("sets_a_set_as_timer_key", "PolicyError: SetTimer key frozenset({'tick'}) (frozenset) is not a timer key",
     "yield SetTimer(*self.timer(view))"),
    # (the simulation's own "an event's time is NaN", blamed on mgst, where the testbed took it without a word)
    ("sets_a_nan_timer", "PolicyError: SetTimer later at nan: a timer's time must be a finite number",
     "yield SetTimer(*self.timer(view))"),
    # (it hung, in both drivers: the simulation's loop at model time 0 for ever)
    ("rearms_a_timer_for_now", "PolicyError: timer tick fired 1,000 times at model time 0: the policy sets it again",
     None),
    # (the simulation crawled at 10^-12 a fire, silently, for ever)
    ("rearms_a_timer_a_hair_later", "PolicyError: the policy's timers fired 1,000,000 times while model time moved "
     "from 0 to 9.99999", None),
])
def test_a_policy_that_fails_in_simulation_is_said_as_on_the_testbed_and_exits_3(
        tmp_path: Path, policy: str, error: str, line: str | None, workers: int) -> None:
    """`mgst simulate` of a policy that fails: the policy's own traceback (not a worker process's wrapping of it),
    then one line saying which policy failed, at what model time of which replication, and why; exit 3, as a testbed
    run's policy failure. The same rules as on the testbed (a timer key no journal keeps is the policy's error in
    both)."""
    (tmp_path / "failing_policies.py").write_text(POLICIES)
    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT.format(policy=policy, duration=DURATION_S))
    p = _mgst(tmp_path, "simulate", str(exp), "--import", "failing_policies", "--horizon", "200", "--warmup", "0",
              "--replications", "2", "--workers", str(workers))
    assert p.returncode == 3, p.stderr[-3000:]
    last = p.stderr.rstrip("\n").splitlines()[-1]
    assert re.fullmatch(rf"mgst: error: the policy '{policy}' failed at model time [0-9.]+ of replication [01]: "
                        rf"{re.escape(error)}.*", last), last
    assert "_RemoteTraceback" not in p.stderr and "concurrent.futures" not in p.stderr, p.stderr[-3000:]
    assert line is None or line in p.stderr, p.stderr[-3000:]  # the policy's own traceback, down to its line


def _check_a_journal_that_goes_on_after_its_policy_failed(tmp_path: Path, exp: Path, out: Path) -> None:
    """The run in ``out`` (its policy failed), as a journal with inputs after the one where its policy failed (a
    mapper of before this stop went on, its core half-way through that input) and no end: export rebuilds the run up
    to the failure and says how many inputs it left out; a resume of it (its mapper died before ending it) is
    refused saying why."""
    with sqlite3.connect(out / "journal.sqlite") as db:  # two more inputs after the failure, and no end of the run
        last = db.execute("SELECT max(seq) FROM events WHERE kind = 'event'").fetchone()[0]
        columns = [c[1] for c in db.execute("PRAGMA table_info(events)")]
        row = dict(zip(columns, db.execute("SELECT * FROM events WHERE seq = ?", (last,)).fetchone()))
        top = db.execute("SELECT max(seq) FROM events").fetchone()[0]
        for k in (1, 2):
            db.execute(f"INSERT INTO events ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                       [top + k if c == "seq" else row[c] for c in columns])
        db.execute("DELETE FROM meta WHERE key IN ('ended', 'drops', 'policy_failure')")
    e = _mgst(tmp_path, "export", str(out), "--json")
    assert e.returncode == 0, e.stderr[-3000:]
    assert "the run is rebuilt up to there (2 later inputs left out)" in e.stderr, e.stderr[-3000:]
    assert "KeyError: 'a key the policy forgot'" in json.loads(e.stdout)["policy_failure"]
    r = _mgst(tmp_path, "run", str(exp), "--import", "failing_policies", "--resume", str(out))
    assert r.returncode == 2, r.stderr[-3000:]
    assert "a run cannot go on from there" in r.stderr and "Traceback" not in r.stderr, r.stderr[-3000:]


def test_a_policy_that_re_arms_a_timer_for_now_fails_on_the_testbed_too(tmp_path: Path, no_children_left) -> None:
    """The mapper hung: its loop fired the timer again and again at one model time, never back to its sockets, and
    a signal could not stop it. Now the core refuses it as the policy's error, as in simulation (above): exit 3,
    soon, saying why."""
    _, out, p = _run(tmp_path, "rearms_a_timer_for_now", DURATION_S)
    assert p.returncode == 3, p.stderr[-3000:]
    assert re.search(r"the policy 'rearms_a_timer_for_now' failed at model time [0-9.]+, handling TimerFired: "
                     r"PolicyError: timer tick fired 1,000 times at model time", p.stderr), p.stderr[-3000:]
    assert json.loads(p.stdout)["duration_s"] < DURATION_S / 2
    assert "PolicyError: timer tick fired" in json.loads((out / "summary.json").read_text())["policy_failure"]


def test_a_policy_that_never_returns_is_said_and_a_third_interrupt_ends_the_run_inside_it(
        tmp_path: Path, no_children_left) -> None:
    """The mapper's loop sees no interrupt while the policy holds it: the second one said "stopping now" and nothing
    stopped (nor a third, nor SIGTERM: only SIGKILL). The second says the policy holds the run now, and a third ends
    it inside the policy, as a policy that fails ends it: exit 3, the pullers stopped, the results written. Its
    replay (mgst export) stops before that input: it ran the policy into it again, and hung."""
    from helpers import read_until  # noqa: PLC0415

    from mgst.cli.testbed_commands import POLICY_STUCK_S  # noqa: PLC0415

    (tmp_path / "failing_policies.py").write_text(POLICIES)
    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT.format(policy="hangs_in_choose", duration=DURATION_S))
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    proc = subprocess.Popen([sys.executable, "-m", "mgst", "run", str(exp), "--import", "failing_policies", "--out",
                             str(out), "--no-live", "--quiet"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            cwd=tmp_path, env=env)
    try:
        read_until(proc, "STUCK", 60)
        time.sleep(POLICY_STUCK_S + 0.5)  # (the policy holds the run for longer than that: what the second says)
        proc.send_signal(signal.SIGINT)
        read_until(proc, "no more jobs; draining", 30)
        proc.send_signal(signal.SIGINT)
        read_until(proc, "the policy 'hangs_in_choose' has not returned for", 30)
        proc.send_signal(signal.SIGINT)
        said = read_until(proc, "ending the run inside the policy", 30)
        assert f"it stops as a run whose policy fails does, what it did written in {out}" in said, said
        assert proc.wait(timeout=60) == 3
        rest = proc.stderr.read().decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    stuck = ": PolicyStuck: it did not return in "
    assert "the policy 'hangs_in_choose' failed at model time" in rest and stuck in rest, rest[-3000:]
    assert "the run was ended inside it (a third interrupt)" in rest, rest[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert stuck in summary["policy_failure"], summary["policy_failure"]
    with open(out / "jobs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len({r["ID"] for r in rows}) == len(rows) == summary["jobs_generated"] >= 1  # every job once
    before = (out / "jobs.csv").read_text()
    e = _mgst(tmp_path, "export", str(out), "--json", timeout=60)  # (it hung, in the policy again)
    assert e.returncode == 0, e.stderr[-3000:]
    assert json.loads(e.stdout)["policy_failure"] == summary["policy_failure"]
    assert "the run is rebuilt up to there" in e.stderr, e.stderr[-3000:]
    assert (out / "jobs.csv").read_text() == before


def test_a_policy_that_fails_in_its_start_ends_the_run_before_it_begins(tmp_path: Path, no_children_left) -> None:
    """The policy's start raises (fed once the pullers registered, so that it sees them up, as in the simulation):
    exit 3 saying so, no job run and no journal kept; the pullers' log, which says they registered and were sent
    away, is kept (an empty one is removed, and the folder with it)."""
    (tmp_path / "failing_policies.py").write_text(POLICIES)
    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT.format(policy="fails_to_start", duration=DURATION_S))
    out = tmp_path / "run"
    p = _mgst(tmp_path, "run", str(exp), "--import", "failing_policies", "--out", str(out), "--no-live", "--quiet")
    assert p.returncode == 3, p.stderr[-3000:]
    assert "the policy 'fails_to_start' failed at model time 0.000, handling RunStart: RuntimeError: no plan" \
        in p.stderr and "the run did not begin: no job was run, and no journal kept" in p.stderr, p.stderr[-3000:]
    assert 'raise RuntimeError("no plan")' in p.stderr  # (its traceback)
    assert sorted(x.name for x in out.iterdir()) == ["pullers.log"]  # (no journal: a rerun into it is not refused)
    assert "registered" in (out / "pullers.log").read_text()


def test_export_of_a_run_that_ended_well_but_no_longer_replays_leaves_its_results_alone(
        tmp_path: Path, no_children_left) -> None:
    """A run that ended without a failure, whose policy raises when its journal is replayed (its code changed since):
    `mgst export` refuses (exit 2, one line) and leaves jobs.csv and summary.json as they were, rather than writing
    the run cut short at the replay's failure; a resume is refused as over."""
    exp, out, summary = _run_to_its_end(tmp_path, "fcfs_that_changes_later", 1.0)
    assert summary["policy_failure"] is None
    # an input the core refused, journalled (a share outside [0, 1]): the mapper dropped it, and so does the replay
    from mgst.core.events import MachineAvailability  # noqa: PLC0415
    from mgst.testbed.core_events import to_plain  # noqa: PLC0415
    from mgst.testbed.store import RunStore  # noqa: PLC0415

    jobs_csv = (out / "jobs.csv").read_bytes()
    store = RunStore(out / "journal.sqlite", create=False)
    try:
        last = max(args[1] for kind, args in store.events() if kind == "event")  # (at the last input's model time)
        name, fields = to_plain(MachineAvailability(0, 1, 2.0))
        store.append("event", (name, last, fields))
        store.commit()
    finally:
        store.close()
    e = _mgst(tmp_path, "export", str(out))
    assert e.returncode == 0, e.stderr[-3000:]
    assert (out / "jobs.csv").read_bytes() == jobs_csv
    before = {name: (out / name).read_bytes() for name in ("jobs.csv", "summary.json")}
    e = _mgst(tmp_path, "export", str(out), CHANGED="1")
    assert e.returncode == 2, e.stderr[-3000:]
    assert "the journal does not replay as the run went" in e.stderr and "AssertionError: a check added since" \
        in e.stderr and "Traceback" not in e.stderr, e.stderr[-3000:]
    assert {name: (out / name).read_bytes() for name in before} == before


def test_an_input_the_core_refuses_stays_the_input_s_fault_and_a_core_bug_is_named_the_core_s() -> None:
    """handled(): a CPU share outside [0, 1] (a broken peer's) is an InputError, as it was (the message handler counts
    it and the run goes on), not a policy's failure; an exception raised in the core's own modules names the core."""
    from mgst.config import load_experiment  # noqa: PLC0415
    from mgst.core.decisions import InputError  # noqa: PLC0415
    from mgst.core.events import CpuShareChanged, MachineAvailability, MachineReady  # noqa: PLC0415
    from mgst.policies.failure import PolicyFailed  # noqa: PLC0415
    from mgst.testbed.policy_failure import handled  # noqa: PLC0415
    from mgst.testbed.replay import make_core  # noqa: PLC0415

    exp = load_experiment(ROOT / "experiments" / "hihi-mfd-fd.toml")
    core = make_core(exp, 1)
    handled(core, 0.0, MachineReady(0, None, 1))
    with pytest.raises(InputError, match="outside"):
        handled(core, 1.0, MachineAvailability(0, 1, 2.0))
    with pytest.raises(InputError):
        handled(core, 1.0, CpuShareChanged(0, -0.5))
    from mgst.core.decisions import PolicyError  # noqa: PLC0415
    from mgst.core.ready import ReadyQueue  # noqa: PLC0415

    try:
        ReadyQueue().remove(5)  # (an exception raised in the core's own code, as a bug of the core's would be)
    except KeyError as e:
        in_the_core = e
    try:
        {}["x"]  # (one raised in a policy's code: here)
    except KeyError as e:
        in_the_policy = e
    assert str(PolicyFailed("fcfs", "MachineReady", 2.0, in_the_core)).startswith(
        "the scheduling core (a bug of mgst's, with the policy 'fcfs': please report it) failed at model time 2.000")
    assert str(PolicyFailed("fcfs", "MachineReady", 2.0, in_the_policy)).startswith("the policy 'fcfs' failed")
    assert str(PolicyFailed("fcfs", "JobArrived", 2.0, PolicyError("x"))).startswith("the policy 'fcfs' failed")


def test_a_simulation_run_raises_what_the_policy_raised_and_run_simulation_says_which_policy_failed(
        tmp_path: Path) -> None:
    """The library's contract: Simulation.run raises the policy's own exception (its callers, a sweep's cells or a
    researcher's script, see what they would without mgst around it); run_simulation, which mgst simulate runs,
    raises PolicyFailed saying which policy failed, when and in which replication, picklable from a worker."""
    import pickle  # noqa: PLC0415

    from mgst.config import load_experiment  # noqa: PLC0415
    from mgst.policies import import_modules  # noqa: PLC0415
    from mgst.policies.failure import PolicyFailed  # noqa: PLC0415
    from mgst.sim.loop import Simulation  # noqa: PLC0415
    from mgst.sim.replications import run_simulation  # noqa: PLC0415

    module = f"failing_policies_{os.getpid()}"  # (one registration per process: a name may be registered once)
    (tmp_path / f"{module}.py").write_text(POLICIES)
    sys.path.insert(0, str(tmp_path))
    try:
        if module not in sys.modules:
            import_modules([module])
        exp = tmp_path / "exp.toml"
        exp.write_text(EXPERIMENT.format(policy="raises_in_a_hook", duration=DURATION_S))
        experiment = load_experiment(exp)
        with pytest.raises(KeyError, match="a key the policy forgot"):
            Simulation(experiment, replication=0, horizon=200.0).run()
        with pytest.raises(PolicyFailed) as failed:
            run_simulation(experiment, horizon=200.0, warmup=0.0, replications=1, workers=1)
    finally:
        sys.path.remove(str(tmp_path))
    said = str(failed.value)
    assert re.fullmatch(r"the policy 'raises_in_a_hook' failed at model time [0-9.]+ of replication 0: KeyError: "
                        r"'a key the policy forgot'", said), said
    again = pickle.loads(pickle.dumps(failed.value))
    assert str(again) == said and again.policy_at_fault and "# the researcher's bug" in again.details


def test_a_policy_that_replays_otherwise_than_it_ran_is_named_and_its_journal_neither_exported_nor_resumed(
        tmp_path: Path, no_children_left) -> None:
    """A run whose policy, fed the run's inputs again, decides otherwise than it did (its code changed, or it drew on
    the clock, the global random, a set's order): `mgst export` says which replica the replay departs at and why,
    exits 2 and leaves the run's files as they are; a resume of it (its mapper died) is refused saying the same, before
    it listens. The same journal exports when the policy decides as it did."""
    exp, out, summary = _run_to_its_end(tmp_path, "decides_otherwise_later", 4.0)
    assert summary["jobs_done"] >= 1
    before = (out / "jobs.csv").read_text()
    same = _mgst(tmp_path, "export", str(out))
    assert same.returncode == 0 and "otherwise" not in same.stderr, same.stderr[-3000:]
    assert (out / "jobs.csv").read_text() == before

    departs = (r"journal does not replay as the run went: at model time [0-9.e+-]+, the run sent replica \d+ "
               r"\(job \d+\) to M[12], where the replay did not; the policy 'decides_otherwise_later' does not decide "
               r"the same from the same inputs")
    changed = _mgst(tmp_path, "export", str(out), CHANGED="1")
    assert changed.returncode == 2 and "Traceback" not in changed.stderr, changed.stderr[-3000:]
    assert re.search(departs, changed.stderr), changed.stderr
    assert "what the run wrote is left as it is" in changed.stderr, changed.stderr
    assert (out / "jobs.csv").read_text() == before

    with sqlite3.connect(out / "journal.sqlite") as db:  # its mapper died before the end
        db.execute("DELETE FROM meta WHERE key IN ('ended', 'drops')")
    r = _mgst(tmp_path, "run", str(exp), "--import", "failing_policies", "--resume", str(out), CHANGED="1")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert f"cannot resume {out}: " in r.stderr and re.search(departs, r.stderr), r.stderr[-3000:]


def test_a_replay_departs_where_a_decision_and_the_run_s_record_of_it_differ() -> None:
    """mgst.testbed.departures, given inputs, decisions and records by hand: each record the run made of a decision (a
    replica sent, a job completed, requeued or given up on, a replica cancelled) must name one of the replay's, matched
    once and by what it names, whatever the order; a decision of the replay left without a record at the log's end is
    a departure too, but for those of the last input and of the inputs fed inside it (a log cut short, a salvage, may
    end there); the first departure is said with both sides, at the model time of the input."""
    from test_testbed import small  # noqa: PLC0415

    from mgst.core.decisions import Assign, Cancel, JobCompleted, JobRequeued, ReplicaTimedOut  # noqa: PLC0415
    from mgst.core.events import JobArrived, MachineDown, ReplicaComputing, ReplicaDone  # noqa: PLC0415
    from mgst.model import Job  # noqa: PLC0415
    from mgst.testbed.departures import Departures  # noqa: PLC0415

    exp = small(machines=3)  # M1, M2, M3
    job7, job8 = Job(7, 0, 0.0, 1.0), Job(8, 0, 0.0, 1.0)
    sent4, sent5 = ("sent", (4, 7, 1, None, None, 0.0)), ("sent", (5, 8, 2, None, None, 0.0))

    def departures(records: list[tuple[str, tuple]], *, cut: bool = False) -> str | None:
        """An arrival sending 4 and 5 (each followed by the ReplicaComputing fed inside it), then a done and a down
        deciding the rest; ``records`` after them, or (``cut``) the log ending inside the first input, before 5 is
        sent."""
        d = Departures(exp, "p")
        d.fed(JobArrived(job7), 1.0, [Assign(job7, 1, 4), Assign(job8, 2, 5)])
        for kind, args in [sent4, ("event", ReplicaComputing(4)), *([] if cut else [sent5, ("event",
                                                                                          ReplicaComputing(5))])]:
            if kind == "event":
                d.fed(args, 1.0, [])
            else:
                d.recorded(kind, args)
        if not cut:
            d.fed(ReplicaDone(4), 2.5, [JobCompleted(job7, 4, 1), JobRequeued(job8, 5, 2, "down"), Cancel(5, 2, 8),
                                        ReplicaTimedOut(5, 2, 8)])
            d.fed(MachineDown(0), 3.0, [])
            for kind, args in records:
                d.recorded(kind, args)
        d.finish()
        if d.found is None:
            return None
        assert d.found.endswith("; the policy 'p' does not decide the same from the same inputs (a policy must draw "
                                "only on its inputs and the random stream it is given: not on the clock, Python's "
                                "global random, or the order of a set of strings, which changes from process to "
                                "process), or its code (or mgst's) changed since the run, or the journal was edited")
        return d.found[:d.found.index("; the policy")]

    everything = [("end", ("cancelled", 5)), ("timeout", (8,)), ("requeue", (8,)), ("complete", (7, 4, 1))]
    assert departures(everything) is None  # (in another order than decided)
    assert departures([], cut=True) is None  # (the log ends inside its last input: the records it owes are not asked)
    assert departures([("sent", (5, 9, 0, None, None, 0.0))]) == (
        "at model time 3, the run sent replica 5 (job 9) to M1, where the replay did not")  # (matched once)
    assert departures([("complete", (7, 4, 2))]) == (
        "at model time 3, the run completed job 7 with replica 4 on M3, where the replay completed it on M2")
    assert departures([("complete", (9, 4, 1))]) == (
        "at model time 3, the run completed job 9 with replica 4 on M2, where the replay completed it as job 7 on M2")
    assert departures([*everything, ("requeue", (8,))]) == (
        "at model time 3, the run requeued job 8, where the replay did not")
    assert departures([("timeout", (7,))]) == (
        "at model time 3, the run gave up (a time-out) on job 7, where the replay did not")
    assert departures([("end", ("cancelled", 4))]) == (
        "at model time 3, the run cancelled replica 4, where the replay did not")
    assert departures([("end", ("done", 4)), ("end", ("lost", 5))]) == (  # (not the replay's decisions: not checked)
        "at model time 2.5, the replay completed job 7 with replica 4 on M2, which the run did not")
    assert departures(everything[1:]) is None  # (a cancel's record is the journal's only while its replica runs)
    assert departures(everything[:2] + everything[3:]) == (
        "at model time 2.5, the replay requeued job 8, which the run did not")


def test_every_prefix_of_a_run_s_journal_replays_as_the_run_went(tmp_path: Path, no_children_left) -> None:
    """A journal cut after any of its events (a salvage keeps the events before the damage) replays without a departure,
    whatever input the cut falls in: a run whose replicas stage for no time, so that each dispatch feeds the core
    ReplicaComputing in the middle of carrying out its own input."""
    from mgst.testbed.replay import replay  # noqa: PLC0415

    exp, out = tmp_path / "exp.toml", tmp_path / "run"
    exp.write_text(EXPERIMENT.format(policy="fcfs", duration=2.0) + "[staging]\nstart = [0.0, 0.0]\n")
    p = _mgst(tmp_path, "run", str(exp), "--out", str(out), "--no-live", "--quiet", "--json")
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout)["jobs_done"] >= 3
    with sqlite3.connect(out / "journal.sqlite") as db:
        events = db.execute("SELECT count(*) FROM events").fetchone()[0]
    cut = tmp_path / "cut"
    for keep in range(1, events + 1):
        cut.mkdir(exist_ok=True)
        shutil.copy(out / "journal.sqlite", cut / "journal.sqlite")
        with sqlite3.connect(cut / "journal.sqlite") as db:
            last = db.execute("SELECT seq FROM events ORDER BY seq LIMIT 1 OFFSET ?", (keep - 1,)).fetchone()[0]
            db.execute("DELETE FROM events WHERE seq > ?", (last,))
        replayed = replay(cut)
        replayed.store.close()
        assert replayed.diverged is None, (keep, replayed.diverged)
        shutil.rmtree(cut)
