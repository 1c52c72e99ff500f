"""Attacks on a CURVE-secured testbed, end to end on loopback with real processes: impostors,
forged and replayed messages, floods. None may change a job's record or stall the run."""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import json
import logging
import queue
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
import zmq
import zmq.utils.monitor
from test_resume import count_events, free_port
from test_testbed import Run, check_every_job_done_once, small

from mgst.core.state import MachineState
from mgst.testbed.gap import measured_causes
from mgst.testbed.local_run import start_pullers, stop_pullers
from mgst.testbed.mapper import Interrupted, Mapper
from mgst.testbed.run_result import TestbedRun
from mgst.testbed.summary import format_requeues, summarize_testbed
from mgst.wire import protocol as P
from mgst.wire import security
from mgst.wire.drops import DropLog

ROOT = Path(__file__).resolve().parents[1]
RUN_LIMIT = 60.0  # seconds any one run may take before the test gives up
DROPS = frozenset(v for k, v in vars(P.Drop).items() if k.isupper())


# ---------------------------------------------------------------- helpers


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out ({timeout:g} s) waiting for {what}")
        time.sleep(0.01)
    return value


def z85_key(keys: Path, name: str) -> str:
    return security.load_public(keys / security.AUTHORIZED / f"{name}.key").decode()


def client_keys(keys: Path, name: str) -> security.ClientKeys:
    return security.client_keys(keys / security.PULLERS / f"{name}.key_secret", keys / f"{security.MAPPER}.key")


def hello(machine: str, holds: int = -1, finished: bool = False) -> P.Hello:
    """A hello holding replica ``holds`` (-1: none), running or (``finished``) finished."""
    held = () if holds < 0 else (holds,)
    return P.Hello(P.PROTOCOL_VERSION, machine, random.getrandbits(62), ("emulate",), 0.0, time.time(), 1,
                   () if finished else held, held if finished else ())


class SecureRun(Run):
    """A CURVE mapper (per-machine keys from ``keys``) in a thread and real pullers for ``pullers``;
    the mapper's context is its own, and everything is reaped on exit."""

    def __init__(self, exp, tmp: Path, keys: Path, pullers: list[str], seed: int = 11):
        self.ctx = zmq.Context()
        self.mapper = Mapper(exp, "tcp://127.0.0.1:0", keys=security.server_keys(keys), seed=seed,
                             register_timeout=30.0, context=self.ctx)
        self.result: TestbedRun | None = None
        self.error: BaseException | None = None
        self.tmp = tmp
        self.procs = start_pullers(self.mapper.endpoint, pullers, tmp / "pullers.log", keys=keys) if pullers else []

    def started(self, timeout: float = 30.0) -> None:
        wait_for(lambda: self.mapper.t0 is not None or not self.thread.is_alive(), timeout, "every puller registered")
        if self.mapper.t0 is None:
            pytest.fail(f"the mapper ended before the run began: {self.error!r}")

    def stop_waiting(self) -> None:
        """Stop the mapper while it still waits for pullers (the run never began): it says so."""
        self.mapper.stopping = True
        with pytest.raises(Interrupted):
            self.wait()

    def __exit__(self, *exc) -> None:
        if self.thread.is_alive() and exc[0] is not None:  # the test failed: stop at once, without draining
            self.mapper.stopping = self.mapper.aborting = True
        super().__exit__(*exc)
        self.ctx.destroy(linger=0)


class _Mark:
    """A place in a fake puller's stream of messages: it sends a heartbeat there and notes its clock."""

    def __init__(self) -> None:
        self.clock = 0.0
        self.sent = threading.Event()


class FakePuller:
    """A scripted puller on a raw DEALER, served by a thread of its own (a socket is used by one thread only).

    ``send`` queues a message (or raw bytes) to go out in order. Once welcomed it sends a Heartbeat every
    0.1 s echoing the mapper's last one, so that the mapper keeps it alive. Messages from the mapper other
    than heartbeats land in ``inbox``; ``expect`` takes the next one of a given type.
    """

    def __init__(self, ctx: zmq.Context, endpoint: str, keys: security.ClientKeys | None, heartbeat: bool = True):
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if keys is not None:
            security.secure_client(self.sock, keys)
        self.sock.connect(endpoint)
        self.heartbeat = heartbeat
        self.outbox: queue.Queue[bytes | _Mark] = queue.Queue()
        self.inbox: queue.Queue[Any] = queue.Queue()
        self.welcome: P.Welcome | None = None
        self.hb_seq = 0
        self.heartbeats = 0  # received from the mapper
        self.mapper_clock = self.mapper_received = -1.0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def send(self, msg: Any) -> None:
        self.outbox.put(msg if isinstance(msg, bytes) else P.encode(msg))

    def expect(self, kind: type, timeout: float = 5.0) -> Any:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = self.inbox.get(timeout=left)
            except queue.Empty:
                break
            if type(msg) is kind:
                return msg
        pytest.fail(f"no {kind.__name__} from the mapper within {timeout:g} s")

    def _heartbeat(self) -> float:
        self.hb_seq += 1
        now = time.time()
        self.sock.send(P.encode(P.Heartbeat(self.hb_seq, now, self.mapper_clock, self.mapper_received)))
        return now

    def _loop(self) -> None:
        next_hb = 0.0
        while not self._stop.is_set():
            while True:
                try:
                    item = self.outbox.get_nowait()
                except queue.Empty:
                    break
                if isinstance(item, _Mark):
                    item.clock = self._heartbeat()
                    item.sent.set()
                else:
                    self.sock.send(item)
            if self.welcome is not None and self.heartbeat and time.time() >= next_hb:
                next_hb = self._heartbeat() + 0.1
            if not self.sock.poll(10):
                continue
            while True:
                try:
                    frame = self.sock.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                msg = P.decode(frame)
                if type(msg) is P.Heartbeat:
                    self.mapper_clock, self.mapper_received = msg.clock, time.time()
                    self.heartbeats += 1
                    continue
                if type(msg) is P.Welcome:
                    self.welcome = msg
                self.inbox.put(msg)

    def sync(self, mapper: Mapper, machine: int, timeout: float = 5.0) -> None:
        """Return once the mapper has handled everything this (registered) fake sent so far. Frames from one
        peer are handled in order, and the mapper keeps the clock of the latest heartbeat: a heartbeat sent
        after all of them, or any later one (later clocks), shows it."""
        mark = _Mark()
        self.outbox.put(mark)
        assert mark.sent.wait(timeout), "the fake puller's thread is stuck"
        wait_for(lambda: mapper.conns[machine].remote_clock >= mark.clock, timeout,
                 "the mapper to read the fake's messages")

    def close(self) -> None:
        self._stop.set()
        self.thread.join(5)
        self.sock.close(linger=0)


FIELDS = ("machine", "job", "t1_remote", "t2", "t3", "t4r_remote", "t4_remote", "t5_remote", "t6", "achieved_share")


def replica_fields(r: Any) -> dict[str, Any]:
    return {"outcome": r.outcome, **{f: getattr(r, f) for f in FIELDS}}


def assert_only_progressed(before: dict[str, Any], after: dict[str, Any]) -> None:
    """A replica's record may only have gone on legitimately: every field set before is unchanged, and a
    running replica may have finished (done), never failed."""
    for f in FIELDS:
        if before[f] is not None:
            assert after[f] == before[f], (f, before, after)
    if before["outcome"] != "running":
        assert after["outcome"] == before["outcome"], (before, after)
    # (a replicating policy may cancel a running replica when another one wins; nothing else happens to it)
    assert after["outcome"] in ("running", "done", "cancelled"), (before, after)


def but_superseded(drops: Counter) -> dict[str, int]:
    """The drops but those of a real puller's former connection: had a loaded machine stalled the mapper past the
    pullers' liveness, they reconnected, and what they had in flight is no attack."""
    return {reason: n for reason, n in drops.items() if reason != P.Drop.SUPERSEDED}


def job_sequence(run: TestbedRun) -> list[tuple]:
    return [(jid, j.job.job_class, j.job.size, j.job.submitted) for jid, j in sorted(run.journal.jobs.items())]


# ---------------------------------------------------------------- 1. impostors


def test_impostors_are_refused_and_change_nothing(tmp_path, no_children_left):
    """A second puller process named M1 but holding M2's key exits with code 2, counted as NAME_TAKEN, and
    never gets a job; a raw DEALER with an authorized key bound to no machine that says hello as the
    registered M1 gets a fatal Refused, and its later Ready/Started/Done/Failed/Heartbeat/Bye as M1 are
    dropped as UNREGISTERED: M1's registration, key, period and connection are untouched. The attacked run
    has the same job sequence as a control run with the same seed, every job is Done exactly once in both,
    and every job was done by a machine whose only registration is its real puller."""
    keys = tmp_path / "keys"
    names = ["M1", "M2", "M3"]
    security.create_keys(keys, [*names, "X"])
    exp = small(duration=4.0)
    ctx = zmq.Context()
    try:
        (tmp_path / "control").mkdir()
        (tmp_path / "attacked").mkdir()
        # the control runs beside the attacked run (what they share is their job sequence, not their timing)
        with SecureRun(exp, tmp_path / "control", keys, names) as control_run, \
                SecureRun(exp, tmp_path / "attacked", keys, names) as r:
            mapper = r.mapper
            r.started()
            m1 = mapper.journal.machines[0]
            m1_before = (list(m1.incarnations), m1.key, [list(p) for p in m1.periods], mapper.conns[0].identity)
            assert m1.key == z85_key(keys, "M1") and len(m1.incarnations) == 1

            # (a) a real puller process under M1's name with M2's key
            taken = mapper.drops.counts[P.Drop.NAME_TAKEN]
            with open(tmp_path / "impostor.log", "wb") as log:
                impostor = subprocess.Popen(
                    [sys.executable, "-m", "puller", "--connect", mapper.endpoint, "--machine", "M1",
                     "--key", str(keys / "pullers" / "M2.key_secret"), "--mapper-key", str(keys / "mapper.key"),
                     "-v"], stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=ROOT)
            try:
                code = impostor.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pytest.fail("the impostor was not refused for good within 20 s: "
                            + (tmp_path / "impostor.log").read_text()[-2000:])
            finally:
                if impostor.poll() is None:
                    impostor.kill()
                    impostor.wait()
            assert code == 2, (tmp_path / "impostor.log").read_text()[-2000:]
            # (it said the name was "registered by another key", before any puller had registered it)
            assert "machine name 'M1' is bound to another key than this puller's" in (
                tmp_path / "impostor.log").read_text(), (tmp_path / "impostor.log").read_text()[-2000:]
            assert r.thread.is_alive(), "the impostor was to be refused while the run goes on"
            assert mapper.drops.counts[P.Drop.NAME_TAKEN] == taken + 1

            # (b) a raw DEALER with the authorized key X, bound to no name, claiming the registered M1
            x = FakePuller(ctx, mapper.endpoint, client_keys(keys, "X"), heartbeat=False)
            try:
                x.send(hello("M1"))
                refused = x.expect(P.Refused)
                assert refused.fatal
                m1_replicas = [rid for rid, rep in dict(mapper.journal.replicas).items() if rep.machine == 0]
                running = [rid for rid in m1_replicas if mapper.journal.replicas[rid].outcome == "running"]
                rid = (running or m1_replicas)[-1]
                before = replica_fields(mapper.journal.replicas[rid])
                now = time.time()
                for msg in (P.Ready(1.0, now, 1), P.Started(rid, now, now), P.Done(rid, now, now, now, 1.0, True),
                            P.Failed(rid, P.FAIL_ERROR, "forged"), P.Heartbeat(1, now, -1.0, -1.0),
                            P.Bye("M1 leaves (not)")):
                    x.send(msg)
                x.send(hello("M1", holds=rid, finished=True))  # in order after the rest: its answer syncs
                assert x.expect(P.Refused).fatal
                assert x.welcome is None and x.inbox.empty()  # no job, no welcome: nothing but refusals
            finally:
                x.close()
            assert_only_progressed(before, replica_fields(mapper.journal.replicas[rid]))
            assert mapper.drops.counts[P.Drop.NAME_TAKEN] == taken + 3
            assert mapper.drops.counts[P.Drop.UNREGISTERED] == 5  # the Bye of an unknown sender is not counted
            assert (list(m1.incarnations), m1.key, [list(p) for p in m1.periods],
                    mapper.conns[0].identity) == m1_before
            assert mapper.core.machines[0].state is not MachineState.DOWN
            assert len(mapper.by_identity) == 3
            attacked = r.wait()
            control = control_run.wait()
        rows = check_every_job_done_once(attacked, tmp_path / "attacked")
        control_rows = check_every_job_done_once(control, tmp_path / "control")
        assert but_superseded(control.malformed) == {}
    finally:
        ctx.destroy(linger=0)
    assert [p.returncode for p in r.procs] == [0, 0, 0]
    assert but_superseded(attacked.malformed) == {P.Drop.NAME_TAKEN: 3, P.Drop.UNREGISTERED: 5}
    # (c) the same jobs as the control run, each done once, never by an impostor
    assert job_sequence(attacked) == job_sequence(control)
    assert [(x["ID"], x["Job Class"], x["Size"]) for x in rows] == \
        [(x["ID"], x["Job Class"], x["Size"]) for x in control_rows]
    for j, m in enumerate(attacked.journal.machines):
        assert m.key == z85_key(keys, names[j]) and len(m.incarnations) == 1, m
    for job in attacked.journal.jobs.values():
        done_by = attacked.journal.replicas[job.done_by]
        assert done_by.outcome == "done" and done_by.machine in (0, 1, 2)


# ---------------------------------------------------------------- 2. forged and replayed messages


def forgeries(rid: int) -> list[Any]:
    now = time.time()
    return [P.Done(rid, now, now, now, 1.0, False), P.Failed(rid, P.FAIL_ERROR, "forged"),
            P.Failed(rid, P.FAIL_REFUSED, "forged refusal"), P.Started(rid, now, now)]


def test_forged_reports_on_other_machines_replicas_change_nothing(tmp_path, no_children_left):
    """A fake puller registered legitimately as M3 (its own key) sends Done, Failed (error and refused) and
    Started for replicas of M1 and M2, running and finished ones, and for a replica that does not exist:
    every one is dropped as NOT_ITS_REPLICA; no field of those replicas that was set before changes, none
    of them ends failed, no job done before changes hands, and every job is Done exactly once."""
    keys = tmp_path / "keys"
    security.create_keys(keys, ["M1", "M2", "M3"])
    exp = small(policy="fcfs", duration=4.0)
    ctx = zmq.Context()
    before: dict[int, dict[str, Any]] = {}
    try:
        with SecureRun(exp, tmp_path, keys, ["M1", "M2"]) as r:
            mapper = r.mapper
            fake = FakePuller(ctx, mapper.endpoint, client_keys(keys, "M3"))
            try:
                fake.send(hello("M3"))
                assert fake.expect(P.Welcome).machine == 2
                r.started()
                time.sleep(0.5)
                sent = 0
                done_before: dict[int, int] = {}
                for rounds in range(1, 11):  # every 0.2 s for 2 s at most (of 4)
                    reps = dict(mapper.journal.replicas)
                    done_before.update({jid: j.done_by for jid, j in dict(mapper.journal.jobs).items()
                                        if j.done_by is not None})
                    others = [rid for rid, x in reps.items() if x.machine != 2]
                    assert others, "no replica to forge reports for"
                    running = [rid for rid in others if reps[rid].outcome == "running"][-4:]
                    finished = [rid for rid in others if reps[rid].outcome == "done"][-4:]
                    for rid in running + finished:
                        before.setdefault(rid, replica_fields(reps[rid]))  # the first sight: before any forgery
                    for rid in [*running, *finished, max(reps) + 1000]:
                        for msg in forgeries(rid):
                            fake.send(msg)
                            sent += 1
                    targets = Counter(rec["outcome"] for rec in before.values())
                    if rounds >= 5 and targets["running"] >= 4:
                        break
                    time.sleep(0.2)
                fake.sync(mapper, 2)
                assert targets["running"] >= 2 and targets["done"] >= 10, targets
                assert but_superseded(mapper.drops.counts) == {P.Drop.NOT_ITS_REPLICA: sent}
                for rid, rec in before.items():
                    assert_only_progressed(rec, replica_fields(mapper.journal.replicas[rid]))
                assert fake.inbox.empty()  # no job, no cancel for the forger
                assert mapper.core.machines[2].state is not MachineState.DOWN
                assert mapper.conns[0].refusals == mapper.conns[1].refusals == 0
                run = r.wait()
            finally:
                fake.close()
    finally:
        ctx.destroy(linger=0)
    assert [p.returncode for p in r.procs] == [0, 0]
    check_every_job_done_once(run, tmp_path)
    assert but_superseded(run.malformed) == {P.Drop.NOT_ITS_REPLICA: sent}
    for rid, rec in before.items():
        assert_only_progressed(rec, replica_fields(run.journal.replicas[rid]))
    assert not [x for x in run.journal.replicas.values() if x.outcome != "done"]
    for jid, rid in done_before.items():
        assert run.journal.jobs[jid].done_by == rid
    assert all(len(m.incarnations) == 1 and not any(p[1] for p in m.periods) for m in run.journal.machines)


def test_replayed_results_change_nothing_and_a_busy_ready_keeps_its_replica(tmp_path, no_children_left):
    """A fake puller registered as M3 takes a job (Ready, JobMsg, Started, Done with ready=True) and is given
    the next one; it then replays its first Done five times with other times, still asking for work: the
    journal's record of the first replica (t4, t5, t6, share, outcome) does not change, each replay counts
    FINISHED_REPLICA and READY_WHILE_BUSY, and the replica it now runs is neither dropped nor doubled: it
    still runs, and finishes normally when the fake reports it; replays of that Done are dropped too."""
    keys = tmp_path / "keys"
    security.create_keys(keys, ["M1", "M2", "M3"])
    exp = small(policy="fcfs", duration=4.0)
    ctx = zmq.Context()
    try:
        with SecureRun(exp, tmp_path, keys, ["M1", "M2"]) as r:
            mapper = r.mapper
            counts = mapper.drops.counts
            fake = FakePuller(ctx, mapper.endpoint, client_keys(keys, "M3"))
            try:
                fake.send(hello("M3"))
                fake.expect(P.Welcome)
                r.started()
                fake.send(P.Ready(1.0, time.time(), 1))
                job1 = fake.expect(P.JobMsg, 10)
                got1 = time.time()
                fake.send(P.Started(job1.replica, got1, got1))
                time.sleep(0.02)
                fin1 = time.time()
                fake.send(P.Done(job1.replica, got1, got1, fin1, 1.0, True))
                job2 = fake.expect(P.JobMsg, 10)  # the Done asked for more
                r1 = mapper.journal.replicas[job1.replica]
                rec1 = replica_fields(r1)
                assert rec1["outcome"] == "done" and rec1["t5_remote"] == fin1 and rec1["t6"] is not None
                assert mapper.journal.jobs[job1.job].done_by == job1.replica
                assert but_superseded(counts) == {}  # (M1's and M2's former connections: no attack, see but_superseded)

                for k in range(1, 6):  # replays, with other times, asking for work while busy
                    t = time.time() + 10 * k
                    fake.send(P.Done(job1.replica, t, t, t + 1, 0.5, True))
                got2 = time.time()
                fake.send(P.Started(job2.replica, got2, got2))
                fake.sync(mapper, 2)
                assert replica_fields(r1) == rec1
                assert mapper.journal.jobs[job1.job].done_by == job1.replica
                assert but_superseded(counts) == {P.Drop.FINISHED_REPLICA: 5, P.Drop.READY_WHILE_BUSY: 5}
                r2 = mapper.journal.replicas[job2.replica]
                assert r2.outcome == "running" and r2.t4_remote == got2 and r2.t6 is None
                m3 = mapper.core.machines[2]
                assert m3.state is MachineState.BUSY and m3.replica is not None and m3.replica.id == job2.replica
                assert fake.inbox.empty()  # no third job, no cancel

                fin2 = time.time()
                fake.send(P.Done(job2.replica, got2, got2, fin2, 1.0, False))  # done; asks for nothing more
                for k in range(1, 4):
                    t = time.time() + 10 * k
                    fake.send(P.Done(job2.replica, t, t, t + 1, 0.5, False))
                fake.sync(mapper, 2)
                rec2 = replica_fields(r2)
                assert rec2["outcome"] == "done" and rec2["t5_remote"] == fin2 and rec2["t4_remote"] == got2
                assert mapper.journal.jobs[job2.job].done_by == job2.replica
                assert but_superseded(counts) == {P.Drop.FINISHED_REPLICA: 8, P.Drop.READY_WHILE_BUSY: 5}
                assert fake.inbox.empty()
                run = r.wait()
            finally:
                fake.close()
    finally:
        ctx.destroy(linger=0)
    assert [p.returncode for p in r.procs] == [0, 0]
    check_every_job_done_once(run, tmp_path)
    assert but_superseded(run.malformed) == {P.Drop.FINISHED_REPLICA: 8, P.Drop.READY_WHILE_BUSY: 5}
    assert replica_fields(run.journal.replicas[job1.replica]) == rec1
    assert replica_fields(run.journal.replicas[job2.replica]) == rec2
    assert run.journal.machines[2].jobs_run == 2 and run.core.machines[2].stats.completed == 2



def test_a_job_sent_as_its_puller_reconnected_is_resubmitted_and_said_why(tmp_path, no_children_left):
    """A puller that reconnects (a new connection, the same incarnation: the mapper was silent past its liveness)
    never reads what was sent on the connection it left. Its hello says what it holds; a job sent and not held
    goes back to the queue, journalled "unheld", and the run says why it was resubmitted: summary.json's
    requeues_by_cause, the line a run prints, and a measured cause of the gap. The job is then done once."""
    keys = tmp_path / "keys"
    security.create_keys(keys, ["M1", "M2", "M3"])
    exp = small(policy="fcfs", duration=4.0)
    ctx = zmq.Context()
    incarnation = random.getrandbits(62)

    def again() -> P.Hello:
        return P.Hello(P.PROTOCOL_VERSION, "M3", incarnation, ("emulate",), 0.0, time.time(), 1, (), ())

    try:
        with SecureRun(exp, tmp_path, keys, ["M1", "M2"]) as r:
            mapper = r.mapper
            left = FakePuller(ctx, mapper.endpoint, client_keys(keys, "M3"))
            back = FakePuller(ctx, mapper.endpoint, client_keys(keys, "M3"), heartbeat=False)
            try:
                left.send(again())
                left.expect(P.Welcome)
                r.started()
                left.send(P.Ready(1.0, time.time(), 1))
                sent = left.expect(P.JobMsg, 10)  # never started: as if it were in flight when the puller left
                left.close()
                back.send(again())  # the same incarnation on a new connection, holding nothing
                back.expect(P.Welcome)
                wait_for(lambda: mapper.journal.replicas[sent.replica].outcome != "running", 10,
                         "the replica judged after the hello")
                assert mapper.journal.replicas[sent.replica].outcome == "unheld"
                assert mapper.journal.jobs[sent.job].requeues == 1
                # (a real puller of a loaded machine may reconnect too, its sends in flight unheld as well: counted)
                assert mapper.journal.requeue_causes["unheld"] >= 1
                assert len(mapper.journal.machines[2].incarnations) == 1  # a reconnection, not a new puller
                run = r.wait()
            finally:
                left.close()
                back.close()
    finally:
        ctx.destroy(linger=0)
    check_every_job_done_once(run, tmp_path)
    assert run.journal.jobs[sent.job].done_by is not None
    testbed, extras = summarize_testbed(run)
    unheld = sum(1 for r in run.journal.replicas.values() if r.outcome == "unheld")
    assert unheld >= 1 and extras["requeues_by_cause"]["unheld"] == unheld, extras["requeues_by_cause"]
    assert extras["requeues"] == sum(extras["requeues_by_cause"].values())
    m3 = extras["machines_detail"][2]  # one puller, registered once, back once on a new connection
    assert (m3["machine"], m3["registrations"], m3["reconnections"]) == ("M3", 1, 1), m3
    assert format_requeues(1, extras["requeues_by_cause"]) == (
        "1 resubmitted (1 sent as their puller reconnected, never received)")
    (cause,) = [c for c in measured_causes(run, testbed) if c.kind == "unheld"]
    assert cause.figures["jobs"] == unheld and cause.text.startswith(
        f"{unheld} {'job' if unheld == 1 else 'jobs'} sent to pullers as they reconnected"), cause.text


# ---------------------------------------------------------------- 3. floods

FLOOD = 100_000  # garbage messages from an authorized key
KEYLESS = 3_000  # messages from a socket without CURVE


class RssSampler:
    """The RSS of a process, sampled every 50 ms by a thread, with the wall time of each sample."""

    def __init__(self, pid: int):
        self.proc = psutil.Process(pid)
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.time(), self.proc.memory_info().rss))
            except psutil.Error:
                return
            self._stop.wait(0.05)

    def between(self, a: float, b: float) -> list[int]:
        return [rss for t, rss in self.samples if a <= t <= b]

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(5)


def stamp(iso: str) -> float:
    """A wall time of the CSVs (ISO, local time) in seconds since the epoch."""
    return dt.datetime.fromisoformat(iso).timestamp()


def garbage(n: int, seed: int = 5) -> list[bytes]:
    """``n`` frames of 16..64 random bytes (almost all not msgpack at all; a few are, but no message)."""
    rng = random.Random(seed)
    return [rng.randbytes(rng.randint(16, 64)) for _ in range(n)]


# Of the dispatches during a flood, the share whose delay from the puller's free instant must be within its bound: the
# rest may have waited for a core. CI (three test workers on two cores, pure Python) once had two requests 129 ms from
# their pullers' t1 to dispatch at the flood's start, with a scheduling delay (read to decision) of 11 ms: the puller
# or the mapper waiting for the CPU before the request was read, not the flood, which it read in 2.3 s.
WITHIN_SHARE = 0.95
# ... and none may wait this long: a flood that held requests or arrivals (a receive pass without its bound, a peer not
# fair-queued) holds them while the rest of it is read, a second or more.
STARVED_S = 0.5


def within_but_stalls(delays: list[float], bound: float, what: str) -> None:
    """WITHIN_SHARE of ``delays`` within ``bound`` seconds, and every one within STARVED_S."""
    late = [d for d in delays if d >= bound]
    assert len(late) <= (1 - WITHIN_SHARE) * len(delays), f"{what}: {len(late)} of {len(delays)} over {bound} s: " \
                                                             f"{sorted(delays)[-10:]}"
    assert max(delays) < STARVED_S, f"{what}: held {max(delays):.3f} s, as if behind the flood: {sorted(delays)[-10:]}"


def test_floods_neither_stall_the_mapper_nor_reach_it_without_a_key(tmp_path, no_children_left):
    """`mgst mapper` as a process with three real pullers kept busy (fcfs, load 0.85): an authorized key
    sends 100,000 garbage frames as fast as the mapper takes them, and a socket without CURVE sends
    thousands of well-formed messages. While the mapper reads the flood (until it answers a hello sent
    after it), every dispatch to a ready puller is decided within 100 ms of both the job and the puller's
    request being there (jobs.csv's Scheduling Delay); from the puller's own free instant t1, 95 % are within
    100 ms and reach the puller within 150 ms, and none waits half a second (WITHIN_SHARE, STARVED_S); no puller
    is declared down; the mapper's RSS grows by less than
    100 MB. The drop counters are keyed by Drop reasons only and count every garbage frame (all are read:
    a DEALER blocks at its high-water mark, it does not drop), and nothing of the keyless sockets: their
    handshake fails, so their messages (which would count as UNREGISTERED, UNKNOWN_MACHINE or NAME_TAKEN)
    never reach the mapper."""
    names = ["M1", "M2", "M3"]
    keys, out = tmp_path / "keys", tmp_path / "out"
    security.create_keys(keys, [*names, "X"])
    exp_file = tmp_path / "flood.toml"
    exp_file.write_text("[workload]\narrival_rates = [2.55]\n[machines]\nrates = [[1.0, 1.0, 1.0]]\n"
                        "[policy]\nname = \"fcfs\"\n[testbed]\ntime_unit = 0.05\nduration = 10.0\n")
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    frames = garbage(FLOOD)
    keyless_msgs = [P.encode(m) for m in (P.Ready(1.0, 0.0, 1), hello("M9"), hello("M1"))] * (KEYLESS // 3)
    mapper = subprocess.Popen(
        [sys.executable, "-m", "mgst", "mapper", str(exp_file), "--bind", endpoint, "--keys", str(keys),
         "--out", str(out), "--json", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    pullers: list[subprocess.Popen] = []
    ctx = zmq.Context()
    sampler = None
    try:
        pullers = start_pullers(endpoint, names, tmp_path / "pullers.log", keys=keys)
        journal = out / "journal.sqlite"
        wait_for(lambda: count_events(journal, "begin") or mapper.poll() is not None, 30, "the run to begin")
        assert mapper.poll() is None, mapper.communicate()[1][-3000:]
        began = time.time()  # (within ~10 ms of the mapper's model time 0)
        time.sleep(1.0)  # the pullers at work
        sampler = RssSampler(mapper.pid)
        time.sleep(0.5)

        # Without a key the CURVE handshake fails, and libzmq discards what was queued on the connection;
        # it queues nothing more on that socket until a handshake succeeds: a few fresh sockets it is.
        keyless: list[zmq.Socket] = []
        monitor = None
        queued = 0
        while queued < KEYLESS and len(keyless) < 50:
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDHWM, 2 * KEYLESS)
            if monitor is None:
                monitor = sock.get_monitor_socket()
            sock.connect(endpoint)
            keyless.append(sock)
            for m in keyless_msgs[queued:]:
                try:
                    sock.send(m, zmq.NOBLOCK)
                except zmq.Again:
                    break
                queued += 1

        flooder = ctx.socket(zmq.DEALER)
        flooder.setsockopt(zmq.LINGER, 0)
        flooder.setsockopt(zmq.SNDTIMEO, 2000)  # ms: a mapper that stops reading ends the flood
        security.secure_client(flooder, client_keys(keys, "X"))
        flooder.connect(endpoint)
        flood_start = time.time()
        sent = 0
        for frame in frames:
            try:
                flooder.send(frame)
            except zmq.Again:
                break
            sent += 1
            if sent % 1000 == 0 and time.time() - flood_start > 15:
                break
        sent_at = time.time()
        # Frames from one peer are handled in order: the answer to a last, wrong-version hello means the
        # mapper has read the whole flood (much of which waited in socket buffers after the last send).
        flooder.send(P.encode(P.Hello(P.PROTOCOL_VERSION + 1, "M1", 1, ("emulate",), 0.0, 0.0, 1, (), ())))
        assert flooder.poll(30_000), "the mapper never answered after the flood"
        flood_end = time.time()
        assert isinstance(P.decode(flooder.recv()), P.Refused)
        time.sleep(0.5)
        sampler.stop()

        events = []
        while monitor.poll(100):
            events.append(zmq.utils.monitor.recv_monitor_message(monitor)["event"])
        keyless[0].disable_monitor()
        monitor.close(linger=0)
        for sock in keyless:
            sock.close(linger=0)
        flooder.close(linger=0)

        stdout, stderr = mapper.communicate(timeout=60)
        assert mapper.returncode == 0, stderr[-3000:]
        codes = [p.wait(timeout=15) for p in pullers]
    finally:
        if sampler is not None:
            sampler.stop()
        for p in [mapper, *pullers]:
            if p.poll() is None:
                p.kill()
            p.wait()
        stop_pullers(pullers)
        ctx.destroy(linger=0)
    assert codes == [0, 0, 0], (tmp_path / "pullers.log").read_text()[-3000:]
    summary = json.loads(stdout)
    assert flood_end < began + summary["duration_s"], "the flood was to be read while jobs were generated"

    # (i) dispatches during the flood
    with open(out / "jobs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["Status"] for r in rows} == {"Done"} and summary["jobs_done"] == summary["jobs_generated"] == len(rows)
    during = [float(r["Scheduling Delay (s)"]) for r in rows
              if r["Scheduling Delay (s)"]
              and flood_start <= stamp(r["Date Sent"]) <= flood_end]
    assert len(during) >= 10, f"only {len(during)} jobs dispatched during the flood"
    worst = max(during)
    # The scheduling delay starts when the mapper read the puller's request; a request left waiting behind
    # the flood would show from the puller's own instant (t1, on the mapper's clock) instead.
    gaps = [stamp(r["Date Sent"]) - max(stamp(r["Puller Free (t1)"]), stamp(r["Date Submitted"])) for r in rows
            if r["Puller Free (t1)"] and flood_start <= stamp(r["Date Sent"]) <= flood_end]
    assert len(gaps) == len(during)
    # ... and the decision (t3) is made before the job goes out: from free to holding the job, on the puller
    e2e = [stamp(r["Puller Received"]) - max(stamp(r["Puller Free (t1)"]), stamp(r["Date Submitted"]))
           for r in rows if r["Puller Free (t1)"] and flood_start <= stamp(r["Date Sent"]) <= flood_end]
    # (ii) no puller declared down
    with open(out / "machines.csv", newline="") as f:
        machines = list(csv.DictReader(f))
    assert [m["Machine"] for m in machines] == names
    assert all(m["Down Periods"] == "0" and m["Registrations"] == "1" for m in machines), machines
    assert [m["down_periods"] for m in summary["machines_detail"]] == [0, 0, 0]
    # (iii) memory
    base = sampler.between(flood_start - 0.5, flood_start)
    flood_rss = sampler.between(flood_start, flood_end + 0.5)
    assert base and flood_rss
    growth = max(flood_rss) - max(base)
    # (iv) drop counters
    drops = summary["malformed_messages"]
    assert set(drops) <= DROPS, drops
    total = sum(drops.values())
    print(f"flood: {sent} frames sent in {sent_at - flood_start:.2f} s, read by {flood_end - flood_start:.2f} s "
          f"({sent / (flood_end - flood_start):.0f}/s), "
          f"{total} counted {dict(drops)}; {len(during)} dispatches during it, worst scheduling delay "
          f"{worst * 1000:.1f} ms (from the puller's t1: {max(gaps) * 1000:.1f} ms, "
          f"to the puller's receipt: {max(e2e) * 1000:.1f} ms); "
          f"RSS {max(base) / 2**20:.1f} MB before, +{growth / 2**20:.1f} MB at most; "
          f"keyless: {queued} queued on {len(keyless)} sockets, monitor events {[e.name for e in events]}")
    assert sent == FLOOD, f"the flood was cut short after {sent} frames: the mapper stopped reading"
    # The mapper's own part, from reading a request to the decision going out: every one. A receive pass without its
    # bound shows here (170 ms measured with RECEIVE_BATCH unbounded, 8-11 ms with it).
    assert worst < 0.1, sorted(during)[-10:]
    # From the puller's free instant (or the job's arrival): this adds the puller's side and the host's scheduling, so
    # most, not all (within_but_stalls)
    within_but_stalls(gaps, 0.1, "from the puller's t1 (or the job's arrival) to its dispatch")
    within_but_stalls(e2e, 0.15, "from the puller's t1 (or the job's arrival) to the puller's receipt")

    assert growth < 100 * 2**20
    # every garbage frame read and counted (a DEALER blocks at its HWM, it does not drop), and none more:
    # the keyless messages would add UNREGISTERED, UNKNOWN_MACHINE or NAME_TAKEN
    assert drops.pop(P.Drop.VERSION) == 1  # the closing hello
    assert sum(drops.values()) == sent, drops
    assert not {P.Drop.UNREGISTERED, P.Drop.UNKNOWN_MACHINE, P.Drop.NAME_TAKEN} & set(drops), drops
    assert queued == len(keyless_msgs) == KEYLESS, (queued, len(keyless))
    handshake_failed = {zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
                        zmq.EVENT_HANDSHAKE_FAILED_AUTH}
    assert handshake_failed & set(events) and zmq.EVENT_HANDSHAKE_SUCCEEDED not in events, events


# ---------------------------------------------------------------- found by these tests, then fixed


def test_a_heartbeat_flood_from_a_registered_peer_grows_nothing(tmp_path, no_children_left):
    """A registered puller (its own key) sends 20,000 heartbeats as fast as it can, each a consistent
    NTP exchange it made up: the mapper keeps at most one clock sample (memory, and an event in the
    journal) per heartbeat it sent that puller, so a peer cannot grow the mapper's state message by
    message. (The run never begins: M2 never registers; the mapper is stopped while waiting.)"""
    keys = tmp_path / "keys"
    security.create_keys(keys, ["M1", "M2"])
    ctx = zmq.Context()
    try:
        with SecureRun(small(machines=2), tmp_path, keys, []) as r:
            fake = FakePuller(ctx, r.mapper.endpoint, client_keys(keys, "M1"))
            try:
                fake.send(hello("M1"))
                fake.expect(P.Welcome)
                for i in range(20_000):
                    now = time.time()
                    fake.send(P.Heartbeat(i, now, now - 0.001, now))
                fake.sync(r.mapper, 0, timeout=30)
                samples, sent = r.mapper.journal.machines[0].clock.samples, fake.heartbeats
            finally:
                fake.close()
            r.stop_waiting()
    finally:
        ctx.destroy(linger=0)
    assert samples <= sent + 2, f"{samples} clock samples kept for {sent} heartbeats the mapper sent"


def test_a_flood_of_refused_hellos_is_logged_at_a_bounded_rate(tmp_path, caplog, no_children_left):
    """An admitted key (X, bound to no machine) sends 3,000 hellos naming the registered M1: each is refused
    and counted as NAME_TAKEN, and the log says so at a bounded rate, as for every other drop, so that a
    peer cannot flood the head node's log (or stall a mapper whose stderr is a pipe read too slowly)."""
    keys = tmp_path / "keys"
    security.create_keys(keys, ["M1", "M2", "X"])
    caplog.set_level(logging.WARNING)
    ctx = zmq.Context()
    n = 3000
    try:
        with SecureRun(small(machines=2), tmp_path, keys, []) as r:
            m1 = FakePuller(ctx, r.mapper.endpoint, client_keys(keys, "M1"))
            x = FakePuller(ctx, r.mapper.endpoint, client_keys(keys, "X"), heartbeat=False)
            try:
                m1.send(hello("M1"))
                m1.expect(P.Welcome)
                for _ in range(n):
                    x.send(hello("M1"))
                wait_for(lambda: r.mapper.drops.counts[P.Drop.NAME_TAKEN] >= n, 30, "every hello refused")
            finally:
                m1.close()
                x.close()
            r.stop_waiting()
    finally:
        ctx.destroy(linger=0)
    logged = [rec for rec in caplog.records if rec.name.startswith("mgst") and rec.levelno >= logging.WARNING]
    assert len(logged) <= 20, f"{len(logged)} log lines for {n} refused hellos"


def test_a_machine_name_is_bound_to_its_authorized_key_before_it_registers(tmp_path, no_children_left):
    """With per-machine keys, authorized/M1.key binds the name M1 from the start: another admitted key (X)
    cannot take M1 before M1's own puller registers, and M1's own key then registers normally."""
    keys = tmp_path / "keys"
    security.create_keys(keys, ["M1", "M2", "X"])
    ctx = zmq.Context()
    try:
        with SecureRun(small(machines=2), tmp_path, keys, []) as r:
            x = FakePuller(ctx, r.mapper.endpoint, client_keys(keys, "X"), heartbeat=False)
            m1 = FakePuller(ctx, r.mapper.endpoint, client_keys(keys, "M1"))
            try:
                x.send(hello("M1"))
                refused = x.expect(P.Refused)
                assert refused.fatal and "another key" in refused.reason
                m1.send(hello("M1"))
                m1.expect(P.Welcome)
            finally:
                x.close()
                m1.close()
            r.stop_waiting()
    finally:
        ctx.destroy(linger=0)


def test_a_refused_handshake_is_logged_with_its_key_once_a_minute(tmp_path, caplog):
    """A puller started with another key folder's keys never gets in, and the mapper says so: one warning naming
    the key's fingerprint, not one per retry (five handshakes); another unknown key gets its own line."""
    from mgst.testbed.router import Router  # noqa: PLC0415

    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    security.create_keys(ours, ["M1"])
    security.create_keys(theirs, ["M1", "M2"])
    ctx = zmq.Context()
    router = Router("tcp://127.0.0.1:0", security.server_keys(ours), ctx, 1)
    provider = router._auth.credentials_providers[security.ZAP_DOMAIN]
    caplog.set_level(logging.WARNING, logger="mgst.wire.security")
    sockets = []
    try:
        for k, name in enumerate(["M1"] * 5 + ["M2"]):
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sockets.append(sock)
            pair = zmq.auth.load_certificate(str(theirs / security.PULLERS / f"{name}.key_secret"))
            sock.curve_publickey, sock.curve_secretkey = pair
            sock.curve_serverkey = zmq.auth.load_certificate(str(ours / "mapper.key"))[0]
            sock.connect(router.endpoint)
            with contextlib.suppress(zmq.Again):  # (a DEALER whose handshake failed has no peer: a blocking send hung)
                sock.send(b"hello", zmq.NOBLOCK)
            deadline = time.monotonic() + 10
            while provider.refused <= k:  # (the ZAP thread has answered this handshake)
                assert time.monotonic() < deadline, "no handshake refused within 10 s"
                time.sleep(0.01)
        assert router.socket.poll(100) == 0  # nothing got through
    finally:
        for sock in sockets:
            sock.close(linger=0)
        router.close(linger_ms=0)  # (its handshake watch too: a monitor socket left open holds ctx.term() for ever)
        ctx.term()
    lines = [r.getMessage() for r in caplog.records if "refused a CURVE handshake" in r.getMessage()]
    prints = [security.fingerprint(zmq.auth.load_certificate(str(theirs / security.PULLERS / f"{n}.key_secret"))[0])
              for n in ("M1", "M2")]
    assert len(lines) == 2 and prints[0] in lines[0] and prints[1] in lines[1], lines


def test_what_a_reconnected_puller_left_in_flight_is_superseded_not_hostile(tmp_path, no_children_left, caplog):
    """A puller that reconnects (a new socket, the same incarnation: after a stall of the mapper longer than its
    liveness) may have heartbeats in flight on its old connection, read after its new hello. Those are dropped as
    SUPERSEDED, not counted as an unregistered (hostile) sender, and change nothing; a stranger's are still
    UNREGISTERED. One former connection is remembered per machine: after a second reconnect, the first one's
    messages are a stranger's again, though it holds M1's key (M1 is registered on another connection: a second
    connection with a live machine's key is an impostor's, warned of)."""
    keys = tmp_path / "keys"
    security.create_keys(keys, ["M1", "M2"])
    ctx = zmq.Context()
    incarnation = random.getrandbits(62)

    def again() -> P.Hello:
        return P.Hello(P.PROTOCOL_VERSION, "M1", incarnation, ("emulate",), 0.0, time.time(), 1, (), ())

    def counts() -> tuple[int, int]:
        c = r.mapper.drops.counts
        return c[P.Drop.SUPERSEDED], c[P.Drop.UNREGISTERED]

    fakes: list[FakePuller] = []
    try:
        with SecureRun(small(machines=2), tmp_path, keys, []) as r:
            try:
                first, second, third = (FakePuller(ctx, r.mapper.endpoint, client_keys(keys, "M1"), heartbeat=False)
                                        for _ in range(3))
                stranger = FakePuller(ctx, r.mapper.endpoint, client_keys(keys, "M2"), heartbeat=False)
                fakes += [first, second, third, stranger]
                first.send(again())
                first.expect(P.Welcome)
                old = r.mapper.conns[0].identity
                second.send(again())
                second.expect(P.Welcome)
                new = r.mapper.conns[0].identity
                assert new != old and r.mapper.by_identity == {new: 0}
                assert counts() == (0, 0)
                now = time.time()
                for i in range(3):
                    first.send(P.Heartbeat(i + 1, now, -1.0, -1.0))
                first.send(P.Ready(1.0, now, 1))
                stranger.send(P.Ready(1.0, now, 1))  # M2 never said hello: a stranger
                wait_for(lambda: sum(counts()) >= 5, 10, "the five messages read")
                assert counts() == (4, 1)
                assert r.mapper.by_identity == {new: 0} and r.mapper.conns[0].identity == new
                assert len(r.mapper.journal.machines[0].incarnations) == 1  # one registration, the same incarnation

                third.send(again())
                third.expect(P.Welcome)
                second.send(P.Heartbeat(1, time.time(), -1.0, -1.0))  # the one just replaced: superseded
                caplog.clear()
                first.send(P.Heartbeat(9, time.time(), -1.0, -1.0))  # two connections ago: forgotten, a stranger's

                def warned() -> bool:  # (the mapper's thread counts a drop, then logs it: both are awaited)
                    return any(rec.levelno == logging.WARNING and "unregistered sender" in rec.getMessage()
                               for rec in list(caplog.records))

                wait_for(lambda: sum(counts()) >= 7 and warned(), 10, "the two messages read, the stranger's warned of")
                assert counts() == (5, 2)
                assert r.mapper.by_identity == {r.mapper.conns[0].identity: 0}
            finally:
                for fake in fakes:
                    fake.close()
            r.stop_waiting()
    finally:
        ctx.destroy(linger=0)


def _dealer(ctx: zmq.Context, endpoint: str, keys: security.ClientKeys, routing_id: bytes) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.ROUTING_ID, routing_id)  # libzmq lets a peer choose its routing id
    # once only: a connection refused because the id is still taken must not come back later, and deliver
    sock.setsockopt(zmq.RECONNECT_IVL, -1)
    security.secure_client(sock, keys)
    sock.connect(endpoint)
    return sock


def test_a_peer_that_takes_a_dropped_machine_s_routing_id_cannot_speak_as_it(tmp_path):
    """M1's puller drops without a bye; before the mapper notices, a peer with another admitted key (X, bound to
    no machine) connects under M1's routing id, which libzmq hands it once the old connection is gone. What it
    says (a heartbeat, a request for work) carries X's key, not M1's: dropped as WRONG_KEY, and M1 stays as it
    was (not heard, not asking). Before, it was M1 for the mapper: kept alive, sent M1's jobs, its results taken.
    The mapper is driven by hand (its loop would race the takeover)."""
    keys = tmp_path / "keys"
    security.create_keys(keys, ["M1", "M2", "X"])
    ctx = zmq.Context()
    mapper = Mapper(small(machines=2), "tcp://127.0.0.1:0", keys=security.server_keys(keys), context=ctx)
    sockets: list[zmq.Socket] = []
    routing_id = b"\x01victim-id"

    def receive(timeout_s: float) -> bool:
        if not mapper.router.socket.poll(int(timeout_s * 1000)):
            return False
        mapper.messages.receive_some(10)
        return True

    try:
        victim = _dealer(ctx, mapper.endpoint, client_keys(keys, "M1"), routing_id)
        sockets.append(victim)
        victim.send(P.encode(hello("M1")))
        assert receive(10.0) and mapper.conns[0].identity == routing_id
        seen = mapper.conns[0].last_seen
        victim.close(linger=0)
        # The attacker retries until libzmq lets it have the id (it refuses a second connection under an id in use)
        deadline = time.monotonic() + 20.0
        while time.monotonic() < deadline:
            attacker = _dealer(ctx, mapper.endpoint, client_keys(keys, "X"), routing_id)
            sockets.append(attacker)
            attacker.send(P.encode(P.Heartbeat(1, time.time(), -1.0, -1.0)))
            if receive(0.5):
                break
        else:
            pytest.fail("libzmq never gave the attacker the routing id")
        attacker.send(P.encode(P.Ready(1.0, time.time(), 1)))
        assert receive(5.0)
        assert mapper.drops.counts[P.Drop.WRONG_KEY] == 2
        assert mapper.conns[0].last_seen == seen and mapper.core.machines[0].asking == 0
    finally:
        for s in sockets:
            s.close(linger=0)
        mapper.close()
        ctx.destroy(linger=0)


def test_quiet_drops_cannot_keep_a_warning_out_of_the_log(caplog) -> None:
    """Drops logged below WARNING (a machine's superseded connection) have a log budget of their own: a peer that
    floods them cannot use up the one warnings are logged from (and hide an impostor's)."""
    now = [0.0]
    drops = DropLog(logging.getLogger("test.drops"), burst=3, period=5.0, clock=lambda: now[0])
    with caplog.at_level(logging.DEBUG, logger="test.drops"):
        for _ in range(50):
            drops.drop(P.Drop.SUPERSEDED, "M1", "Heartbeat", level=logging.DEBUG)
        drops.drop(P.Drop.UNREGISTERED, "connection 00ff", "Done")
        for _ in range(5):
            drops.drop(P.Drop.UNREGISTERED, "connection 00ff", "Done")
        now[0] = 5.0
        drops.drop(P.Drop.UNREGISTERED, "connection 00ff", "Done")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    quiet = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(quiet) == 3 and len(warnings) == 4, (quiet, warnings)  # each its burst of 3, then one per period
    assert "unregistered sender" in warnings[0] and "(3 more dropped since the last line)" in warnings[-1]
    assert drops.counts == {P.Drop.SUPERSEDED: 50, P.Drop.UNREGISTERED: 7}
