"""Nothing an admitted peer sends grows the journal without bound: progress is coalesced, hellos are
rate-limited (docs/security.md, "What a peer can add to the journal")."""

from __future__ import annotations

import dataclasses
import math
import random
import sqlite3
import time
from collections import Counter
from pathlib import Path

import msgpack
import pytest
import zmq
from helpers import computed_spy
from test_testbed import check_every_job_done_once, small
from test_testbed_attacks import FakePuller, SecureRun, client_keys, hello

from mgst.core.events import JobArrived, RunStart
from mgst.core.state import MachineState
from mgst.model import (
    Experiment,
    FailureModel,
    Job,
    JobClass,
    Machine,
    PolicySpec,
    TestbedSettings,
    WeibullGroup,
    WeibullNormalFailures,
)
from mgst.testbed import mapper as mapper_module
from mgst.testbed.admission import HELLO_BURST, HELLO_RATE, TokenBuckets, hello_rate
from mgst.testbed.checkpoints import MIN_INTERVAL, CheckpointCoalescer
from mgst.testbed.clock_offsets import PERIOD
from mgst.testbed.liveness import LIVENESS
from mgst.testbed.mapper import Mapper
from mgst.testbed.messages import READY_BURST, READY_RATE
from mgst.testbed.replay import replay
from mgst.wire import protocol as P
from mgst.wire import security

# ---------------------------------------------------------------- units


def test_a_checkpoint_too_soon_is_held_and_the_latest_recorded_once_its_interval_has_passed():
    c = CheckpointCoalescer(1.0)  # (the experiment's interval: the gate is half of it, 0.5 s)
    assert c.offer(7, 0.1, 100.0)  # the first: at once
    assert not c.offer(7, 0.2, 100.1) and not c.offer(7, 0.3, 100.2)  # too soon: held, the latest kept
    assert c.due(100.4) == []
    assert c.due(100.5) == [(7, 0.3)]
    assert c.due(100.6) == []  # recorded once
    assert not c.offer(7, 0.4, 100.7)  # 0.2 s after the last recorded one (at 100.5)
    assert c.offer(7, 0.5, 101.0)  # its interval has passed: at once, the held 0.4 superseded
    assert c.due(102.0) == []


def test_an_honest_puller_s_checkpoints_are_each_recorded_as_they_come():
    """One per interval, with jitter either way: none is held (held ones reach the core a heartbeat late,
    and are lost at a crash)."""
    rng = random.Random(3)
    c = CheckpointCoalescer(1.0)
    t = 0.0
    for k in range(1, 200):
        t = k * 1.0 + rng.uniform(-0.2, 0.2)
        assert c.offer(5, k / 200, t), k
    assert not c.holding


def test_a_held_checkpoint_is_given_up_before_its_replica_fails_and_only_its_own():
    c = CheckpointCoalescer(10.0)
    assert c.offer(1, 0.1, 0.0) and c.offer(2, 0.1, 0.0)
    assert not c.offer(1, 0.6, 1.0) and not c.offer(2, 0.7, 1.0)
    assert c.take(1) == [(1, 0.6)]  # replica 1 fails: its checkpoint first, whatever the interval
    assert c.take(1) == []
    assert c.take() == [(2, 0.7)]  # the machine goes down: every one it holds
    assert c.due(100.0) == []


def test_the_coalescer_interval_has_a_floor_and_forgets_replicas_that_are_over():
    assert CheckpointCoalescer(0.0).interval == MIN_INTERVAL
    c = CheckpointCoalescer(1.0)
    for r in range(10):
        c.offer(r, 0.5, 0.0)
    c.prune(lambda r: r >= 8, keep=4)
    assert len(c) == 2 and c.offer(3, 0.6, 0.1)  # 3 was forgotten: a new replica to it


def test_hellos_pass_in_a_burst_then_at_the_rate_per_key_and_machine():
    rate = TokenBuckets(burst=3, rate=2.0)
    assert [rate.allow(("k", 0), 10.0) for _ in range(4)] == [True, True, True, False]
    assert rate.allow(("k", 1), 10.0) and rate.allow(("other", 0), 10.0) and rate.allow((None, 0), 10.0)
    assert not rate.allow(("k", 0), 10.4)  # 0.8 of a token
    assert rate.allow(("k", 0), 10.5) and not rate.allow(("k", 0), 10.5)
    # never more than the burst, however long the bucket was left alone
    assert [rate.allow(("k", 0), 1000.0) for _ in range(4)] == [True, True, True, False]


@pytest.mark.parametrize(("law", "time_unit"), [
    (FailureModel(50.0, 2.0), 1.0),  # the paper's FE experiments
    (FailureModel(8.0, 2.0), 0.1),  # tests/test_testbed.py's failures
    (FailureModel(1e-6, 1e-6), 1.0),  # every period clamped to the puller's shortest (10 ms)
    (WeibullNormalFailures((WeibullGroup(mttf=2.0, shape=0.5, repair_mean=0.5, repair_sd=0.2),)), 0.05),
])
def test_an_honest_puller_s_hellos_never_hit_the_rate(law, time_unit):
    """A puller restarting on its failure law's draws (each period at least 10 ms wall), a hello per
    restart, after a burst of reconnects (a mapper's restart: a hello each back-off): never refused,
    for an hour or 100,000 restarts."""
    rng = random.Random(7)
    rate = TokenBuckets(HELLO_BURST, hello_rate(law, time_unit))
    assert all(rate.allow(("k", 0), t) for t in (0.0, 0.5, 1.5, 3.5, 7.5))
    t = 7.5
    for _ in range(100_000):
        if isinstance(law, FailureModel):
            up, down = rng.expovariate(1 / law.mean_up), rng.expovariate(1 / law.mean_down)
        else:
            g = law.groups[0]
            up = rng.weibullvariate(g.mttf / math.gamma(1 + 1 / g.shape), g.shape)
            down = max(0.0, rng.gauss(g.repair_mean, g.repair_sd))
        t += max(0.01, up * time_unit) + max(0.01, down * time_unit)
        assert rate.allow(("k", 0), t), t
        if t > 3600:
            break
    assert HELLO_RATE <= hello_rate(law, time_unit) <= 50.0


# ---------------------------------------------------------------- a hostile peer on a real run


def journal_counts(path: Path, machine: int, replicas: set[int]) -> Counter:
    """Events of ``path`` that concern ``machine`` or its ``replicas``, by kind (core inputs by method),
    read independently of mgst's store."""
    counts: Counter = Counter()
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        for kind, data in db.execute("SELECT kind, data FROM events"):
            args = msgpack.unpackb(data, raw=False, use_list=False, strict_map_key=False)
            if kind == "event":  # a core event: (its type's name, model time, its fields)
                name, _, fields = args
                if name.startswith("Machine") and fields and fields[0] == machine:
                    counts[f"core {name}"] += 1
                elif name.startswith("Replica") and fields[0] in replicas:
                    counts[f"core {name}"] += 1
            elif kind in ("clock", "register", "up", "down") and args[0] == machine:
                counts[kind] += 1
            elif kind in ("started", "done", "end") and args[-1 if kind == "end" else 0] in replicas:
                counts[kind] += 1
    return counts


class JournalledRun(SecureRun):
    """SecureRun with a journal in ``out``; the mapper takes a machine for gone after ``liveness`` silent heartbeat
    intervals."""

    def __init__(self, exp, tmp: Path, keys: Path, pullers: list[str], out: Path, liveness: int = LIVENESS):
        super().__init__(exp, tmp, keys, [])
        self.mapper.close()
        self.ctx = zmq.Context()
        self.mapper = Mapper(exp, "tcp://127.0.0.1:0", keys=security.server_keys(keys), seed=11,
                             register_timeout=30.0, context=self.ctx, out=out, liveness=liveness)
        from mgst.testbed.local_run import start_pullers
        self.procs = start_pullers(self.mapper.endpoint, pullers, tmp / "pullers.log", keys=keys)


PROGRESS = 100_000
HELLOS = 10_000
READIES = 10_000


def serve_until_idle(fake: FakePuller, mapper: Mapper, machine: int, timeout: float = 30.0) -> list[int]:
    """Run (at once) every job the mapper sends the fake until its machine asks for nothing, holds nothing
    and has no request held; the replicas served."""
    served: list[int] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        fake.sync(mapper, machine)
        while not fake.inbox.empty():
            msg = fake.inbox.get()
            if type(msg) is P.JobMsg:
                now = time.time()
                fake.send(P.Started(msg.replica, now, now))
                fake.send(P.Done(msg.replica, now, now, now, 1.0, False))
                served.append(msg.replica)
        m = mapper.core.machines[machine]
        if (m.state is not MachineState.READY and not m.replicas and mapper.conns[machine].ready_held is None
                and fake.inbox.empty()):
            return served
        time.sleep(0.05)
    pytest.fail("the fake's machine did not become idle")


def test_floods_of_progress_and_re_registrations_add_a_bounded_number_of_events(tmp_path, monkeypatch,
                                                                               no_children_left):
    """A fake puller holding M3's own (admitted) key, beside real M1 and M2:
    - checkpoints a replica at 0.1 then at once 0.2, and fails it: the held 0.2 is recorded before the
      failure, and the job goes on from 0.2;
    - sends 100,000 Progress messages for its next replica, then its result: at most one checkpoint
      per interval (0.2 s) is journalled, and the result is recorded as sent;
    - sends 10,000 Ready messages, each changing its share: at most the bucket's burst and rate reach the
      core (the others wait, the latest kept, or are dropped as READY_WHILE_BUSY once it has a job);
    - re-registers 10,000 times (a new incarnation each): at most the bucket's burst and rate are
      admitted, the rest refused (not fatally) and counted, journalling nothing.
    Every event about M3 is counted in the journal with sqlite3: a few thousand at most; every job is
    done exactly once."""
    keys = tmp_path / "keys"
    security.create_keys(keys, ["M1", "M2", "M3"])
    exp = small(policy="fcfs", duration=60.0)
    exp = dataclasses.replace(exp, simulation=dataclasses.replace(exp.simulation, checkpoint_interval=4.0))
    interval = 4.0 * exp.testbed.time_unit  # wall seconds
    out = tmp_path / "run"
    out.mkdir()
    # What this test counts is the journal's events under floods, not how soon a silence is noticed. The fake puller
    # is a thread of the mapper's own process: a pause of the process (a collection, a starved I/O thread on a loaded
    # machine) stops its heartbeats too, and the woken mapper finds nothing unread from it; a CI run so took M3 for
    # gone after 1.17 s. So the mapper here waits 25 intervals (5 s), and the drain after the stop lasts until the
    # real pullers have run what is queued (a loaded machine left 7 queued after the usual 4 s).
    monkeypatch.setattr(mapper_module, "INTERRUPT_DRAIN", 60.0)
    ctx = zmq.Context()
    began = time.monotonic()
    try:
        with JournalledRun(exp, tmp_path, keys, ["M1", "M2"], out, liveness=25) as r:
            mapper = r.mapper
            fake = FakePuller(ctx, mapper.endpoint, client_keys(keys, "M3"))
            try:
                fake.send(hello("M3"))
                fake.expect(P.Welcome)
                r.started()
                # 1. a checkpoint held when its replica fails is recorded first
                fake.send(P.Ready(1.0, time.time(), 1))
                job1 = fake.expect(P.JobMsg, 10)
                now = time.time()
                fake.send(P.Started(job1.replica, now, now))
                fake.send(P.Progress(job1.replica, 0.1))
                fake.send(P.Progress(job1.replica, 0.2))
                fake.send(P.Failed(job1.replica, P.FAIL_ERROR, "a test failure"))
                fake.sync(mapper, 2)
                assert mapper.journal.replicas[job1.replica].outcome == "failed"
                # 2. a flood of progress on its next replica
                fake.send(P.Ready(1.0, time.time(), 1))
                job2 = fake.expect(P.JobMsg, 10)
                now = time.time()
                fake.send(P.Started(job2.replica, now, now))
                began = time.monotonic()
                for i in range(1, PROGRESS + 1):
                    fake.send(P.Progress(job2.replica, 0.99 * i / PROGRESS))
                fake.sync(mapper, 2, timeout=120)
                progress_s = time.monotonic() - began
                now = time.time()
                fake.send(P.Done(job2.replica, job2_t := now - 0.5, job2_t, now, 1.0, False))
                fake.sync(mapper, 2)
                # 3. a flood of requests for work, each changing its share
                began = time.monotonic()
                for i in range(READIES):
                    fake.send(P.Ready(0.5 if i % 2 else 1.0, time.time(), 1))
                fake.sync(mapper, 2, timeout=120)
                ready_s = time.monotonic() - began
                served = serve_until_idle(fake, mapper, 2)
                # 4. a flood of re-registrations
                refused_before = mapper.drops.counts[P.Drop.HELLO_RATE]
                began = time.monotonic()
                for _ in range(HELLOS):
                    fake.send(hello("M3"))
                fake.sync(mapper, 2, timeout=120)
                hellos_s = time.monotonic() - began
                refused = mapper.drops.counts[P.Drop.HELLO_RATE] - refused_before
                mapper.stopping = True
                run = r.wait()
            finally:
                fake.close()
    finally:
        ctx.destroy(linger=0)
    elapsed = time.monotonic() - began
    assert [p.returncode for p in r.procs] == [0, 0]
    check_every_job_done_once(run, tmp_path)
    events = list(RunStoreEvents(out / "journal.sqlite"))
    # the held 0.2 was recorded before the failure; the job's next replica started from it
    at = {e[:3]: i for i, e in enumerate(events)}
    failed = next(i for i, e in enumerate(events) if e[:2] == ("ReplicaFailed", job1.replica))
    assert at[("ReplicaCheckpoint", job1.replica, 0.1)] < at[("ReplicaCheckpoint", job1.replica, 0.2)] < failed
    assert run.core.jobs[job1.job].best_progress >= 0.2
    assert job2.job != job1.job or job2.progress == pytest.approx(0.2)
    # the flood's last checkpoint (held when the result came) was recorded: the mapper read every one
    assert ("ReplicaCheckpoint", job2.replica, 0.99) in at
    # the flood's result, as sent
    r2 = run.journal.replicas[job2.replica]
    assert (r2.outcome, r2.t5_remote, r2.t4_remote) == ("done", now, job2_t)
    # what M3 added to the journal
    counts = journal_counts(out / "journal.sqlite", 2, {job1.replica, job2.replica, *served})
    checkpoints = counts["core ReplicaCheckpoint"]
    # job1: 2; job2: the first at once, one per interval, the last held one at its result (+ timing slack)
    # (the gate is half the interval: at most two per interval)
    assert 2 <= checkpoints <= 2 + 1 + 2 * progress_s / interval + 1 + 2, (checkpoints, progress_s)
    readies = counts["core MachineReady"]
    assert readies <= 2 + READY_BURST + READY_RATE * ready_s + len(served) + 2, (readies, ready_s, served)
    admitted = HELLOS - refused
    assert refused >= HELLOS - HELLO_BURST - HELLO_RATE * hellos_s - 1
    assert counts["register"] <= 1 + admitted
    assert counts["down"] <= admitted and counts["up"] <= admitted + 1
    assert counts["clock"] <= 1 + PERIOD / 0.1 + elapsed / PERIOD + 1  # (the fake heartbeats every 0.1 s)
    total = sum(counts.values())
    assert total <= 3000, (total, counts, progress_s, hellos_s)
    assert len(run.journal.machines[2].periods) <= admitted + 1
    # a replay of the journal rebuilds the same clock estimates and the same corrected instants
    replayed = replay(out)
    try:
        for m, again in zip(run.journal.machines, replayed.journal.machines):
            assert list(m.clock._kept) == list(again.clock._kept) and len(m.clock) > 0
        for rid, x in run.journal.replicas.items():
            y = replayed.journal.replicas[rid]
            assert (x.t1, x.t4r, x.t4, x.t5) == (y.t1, y.t4r, y.t4, y.t5), rid
    finally:
        replayed.store.close()
    print(f"M3 added {total} events: {dict(counts)}; progress flood {progress_s:.1f} s, hellos {hellos_s:.1f} s, "
          f"{refused} refused")


def RunStoreEvents(path: Path):
    """Core events as (type name, *fields) and other events as (kind, *args), in order."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        for kind, data in db.execute("SELECT kind, data FROM events ORDER BY seq"):
            args = msgpack.unpackb(data, raw=False, use_list=False, strict_map_key=False)
            yield (args[0], *args[2]) if kind == "event" else (kind, *args)


def _run_with_puller_m1(mapper: Mapper, slots: int = 1) -> tuple[bytes, float]:
    """Start ``mapper``'s run by hand with puller M1 registered (``slots`` slots); its identity and the time."""
    ident, now = b"puller-M1", time.time()
    mapper.feed(now, RunStart())
    mapper.messages.hello(ident, P.Hello(P.PROTOCOL_VERSION, "M1", 1, ("emulate",), 0.0, now, slots, (), ()), None, now)
    mapper._begin(now)
    return ident, now


def _one_machine(policy: str = "fcfs", time_unit: float = 1.0) -> Experiment:
    """One class, one machine M1, ``policy``: the experiment the mapper is driven by hand on below."""
    return Experiment(name="one", classes=(JobClass("1", 1.0),), machines=(Machine("M1", (1.0,), 1.0),),
                      policy=PolicySpec(policy), testbed=TestbedSettings(time_unit=time_unit, duration=10.0))


def _two_slots() -> Experiment:
    """One class, one machine M1 with two slots, FCFS, no time-outs."""
    return Experiment(name="two-slots", classes=(JobClass("1", 1.0),),
                      machines=(Machine("M1", (1.0,), 1.0, slots=2),), policy=PolicySpec("fcfs"),
                      testbed=TestbedSettings(time_unit=1.0, duration=10.0, timeout_factor=0.0))


def _job_sent(mapper: Mapper, job: Job, t: float) -> None:
    """``job`` arrives at ``t`` (journalled, then fed): the core sends it to an asking machine."""
    mapper.journal.job_arrived(job, t)
    mapper.feed(t, JobArrived(job))


def _one_result_reported(mapper: Mapper) -> tuple[bytes, float, P.Done]:
    """M1 registered, asking, sent job 0, and its result reported asking for more (at now + 0.2): M1's identity,
    the time and that Done, to replay."""
    ident, now = _run_with_puller_m1(mapper)
    mapper.messages.handle(ident, P.Ready(1.0, now, 1), now)
    _job_sent(mapper, Job(0, 0, 0.0, 1.0), now)
    (replica,) = mapper.core.machines[0].replicas
    done = P.Done(replica, now, now, now + 0.1, 1.0, True)
    mapper.messages.handle(ident, done, now + 0.2)
    return ident, now, done


def test_a_done_asking_for_work_after_a_held_ready_counts_both(ctx):
    """A Ready held by the rate, then a Done(ready=True): the puller counts the Ready's slots plus the one
    the Done frees. The mapper must too, whatever the held Ready would say when applied later (it would
    take the count back down, or be a "repeat"): else one slot stays idle for the rest of the run. The
    mapper is driven message by message (no loop, no pullers): its decisions stay in its outbox."""
    mapper = Mapper(_two_slots(), "tcp://127.0.0.1:0", context=ctx)
    try:
        ident, now = _run_with_puller_m1(mapper, slots=2)
        m = mapper.core.machines[0]
        mapper.messages.handle(ident, P.Ready(1.0, now, 2), now)
        _job_sent(mapper, Job(0, 0, 0.0, 1.0), now)  # it runs job 0 in one slot
        (replica,) = m.replicas
        assert m.asking == 1
        # changes of share, more than the burst: the last ones are held
        for k in range(int(READY_BURST) + 5):
            mapper.messages.handle(ident, P.Ready(0.5 if k % 2 else 1.0, now, 1), now)
        held = mapper.conns[0].ready_held
        assert held is not None and held[0].slots == 1
        mapper.messages.handle(ident, P.Done(replica, now, now, now + 0.1, 1.0, True), now)  # the puller counts 2
        assert m.asking == 2 and mapper.conns[0].ready_held is None
        later = now + 10.0  # a heartbeat, once the rate allows: nothing held is left to take the count down
        mapper.messages.handle(ident, P.Heartbeat(1, later, -1.0, -1.0), later)
        assert m.asking == 2
    finally:
        mapper.close()


def test_a_puller_s_failure_reason_reaches_the_mapper_s_log_escaped(ctx, caplog):
    """A Failed's reason and a Bye's are the puller's text: its terminal controls (here one that retitles the
    window and one that clears the screen) must not reach the operator's terminal raw, in the WARNING the mapper
    logs by default."""
    exp = _one_machine()
    hostile = "no\x1b]0;owned\x07\x1b[2J\r\nWARNING forged line"
    mapper = Mapper(exp, "tcp://127.0.0.1:0", context=ctx)
    try:
        ident, now = _run_with_puller_m1(mapper)
        mapper.messages.handle(ident, P.Ready(1.0, now, 1), now)
        _job_sent(mapper, Job(0, 0, 0.0, 1.0), now)
        (replica,) = mapper.core.machines[0].replicas
        with caplog.at_level("INFO", logger="mgst"):
            mapper.messages.handle(ident, P.Failed(replica, P.FAIL_ERROR, hostile), now)
            mapper.messages.handle(ident, P.Bye(hostile), now)
        said = [r.getMessage() for r in caplog.records if "owned" in r.getMessage()]
        assert len(said) == 2, said
        assert not any(c in text for text in said for c in "\x1b\x07\r\n"), said
    finally:
        mapper.close()


def test_a_puller_s_compute_time_is_believed_only_within_the_time_its_replica_was_out(ctx):
    """A policy learns rates from the puller's t5 - t4 (LPAS_DG's rate_threshold): a puller claiming a job computed
    longer than the mapper saw it out would steer it. Job 0 out from `now`, its result at now + 2: a claim of 1 s
    is taken, one of 1000 s is counted as a bad value and replaced by the core's own figure (2 s: sent to result),
    and the result itself counts in both cases."""
    spy = computed_spy("fcfs")
    exp = _one_machine(spy.name, time_unit=0.5)
    mapper = Mapper(exp, "tcp://127.0.0.1:0", context=ctx)
    try:
        ident, now = _run_with_puller_m1(mapper)
        m = mapper.core.machines[0]
        for job_id, claimed in ((0, 1.0), (1, 1000.0)):
            t = now + 10.0 * job_id
            mapper.messages.handle(ident, P.Ready(1.0, t, 1), t)
            _job_sent(mapper, Job(job_id, 0, t, 1.0), t)
            (replica,) = m.replicas
            bad_before = mapper.drops.counts[P.Drop.BAD_VALUE]
            mapper.messages.handle(ident, P.Done(replica, t, t, t + claimed, 1.0, False), t + 2.0)
            assert mapper.drops.counts[P.Drop.BAD_VALUE] - bad_before == (1 if claimed > 2.0 else 0)
        # in model time (0.5 s a unit): 1 s claimed is 2 units; 1000 s is refused, the core's 2 s is 4 units
        assert spy.seen == [pytest.approx(2.0), pytest.approx(4.0)]
        assert [mapper.core.jobs[k].status.name for k in (0, 1)] == ["DONE", "DONE"]
    finally:
        mapper.close()


def test_a_replayed_result_asking_for_work_feeds_the_core_nothing_more(ctx):
    """A puller replays its first result, asking for work, 500 times: the result counted once, each replay is
    dropped, and none reaches the core or the journal (a MachineReady each, before: 20,000 replays made 20,004
    events). The first one's request for work still counts."""
    exp = _one_machine()
    mapper = Mapper(exp, "tcp://127.0.0.1:0", context=ctx)
    try:
        ident, now, done = _one_result_reported(mapper)
        m = mapper.core.machines[0]
        assert mapper.core.jobs[0].status.name == "DONE" and m.state is MachineState.READY and m.asking == 1
        fed: list[str] = []
        feed = mapper.messages.feed
        mapper.messages.feed = lambda t, e: (fed.append(type(e).__name__), feed(t, e))[1]
        for _ in range(500):
            mapper.messages.handle(ident, done, now + 0.3)
        assert fed == []
        assert mapper.drops.counts[P.Drop.FINISHED_REPLICA] == 500
        assert m.state is MachineState.READY and m.asking == 1
    finally:
        mapper.close()


def test_a_time_stamp_decades_off_the_mapper_s_clock_is_dropped_and_nothing_overflows(ctx):
    """A puller stamping its messages 1.7e308 s (finite, so the protocol takes it) made the clock offset infinite
    and the run's CSV writer crash at the end, which `mgst export` could not get past. Stamps more than
    MAX_CLOCK_SKEW off the mapper's clock are dropped as bad values; an estimate never takes a non-finite
    sample; a timestamp no calendar has is written empty."""
    from mgst.testbed.clock_offsets import OffsetEstimator  # noqa: PLC0415
    from mgst.testbed.local_time import wall_iso  # noqa: PLC0415
    from mgst.testbed.messages import MAX_CLOCK_SKEW  # noqa: PLC0415

    exp = _one_machine()
    mapper = Mapper(exp, "tcp://127.0.0.1:0", context=ctx)
    try:
        ident, now = _run_with_puller_m1(mapper)
        m = mapper.core.machines[0]
        for far in (1.7e308, now + 2 * MAX_CLOCK_SKEW, now - 2 * MAX_CLOCK_SKEW):
            mapper.messages.handle(ident, P.Heartbeat(1, far, -1.0, -1.0), now)
            mapper.messages.handle(ident, P.Ready(1.0, far, 1), now)
        assert mapper.drops.counts[P.Drop.BAD_VALUE] == 6 and m.state is not MachineState.READY
        mapper.messages.handle(ident, P.Ready(1.0, now + 3600.0, 1), now)  # an hour off: a lab without NTP
        assert m.state is MachineState.READY
    finally:
        mapper.close()
    estimator = OffsetEstimator()
    estimator.add(0.0, 1.7e308, 1.7e308, 1.0)  # ((t2 - t1) + (t3 - t4)) / 2 overflows
    assert len(estimator) == 0 and estimator.offset == 0.0
    assert wall_iso(1e300, 0.0) == "" and wall_iso(-math.inf, 3600.0) == ""


@pytest.mark.parametrize("share", [P.Share(0.5, 1), P.Share(0.0, 0)], ids=["reclaimed", "share 0"])
def test_a_replayed_result_asking_for_work_while_the_machine_has_no_cpu_to_give_feeds_nothing(ctx, share):
    """Reclaimed by its owner, or at CPU share 0, a machine asks for no slot, so it is never READY: a replayed
    result asking for work was never a repeat, and each fed the core (and the journal) a MachineReady that changed
    nothing: 20,000 replays, 20,000 events. Now it is a repeat, as is a Ready at the same share."""
    exp = _one_machine()
    mapper = Mapper(exp, "tcp://127.0.0.1:0", context=ctx)
    try:
        ident, now, done = _one_result_reported(mapper)
        m = mapper.core.machines[0]
        mapper.messages.handle(ident, share, now + 0.3)
        assert (m.cpu_share, m.reclaimed, m.asking) == (share.share, bool(share.state), 0)
        fed: list[str] = []
        feed = mapper.messages.feed
        mapper.messages.feed = lambda t, e: (fed.append(type(e).__name__), feed(t, e))[1]
        for k in range(500):
            mapper.messages.handle(ident, done, now + 0.4 + k)  # (1 s apart: never held back by the rate)
            mapper.messages.handle(ident, P.Ready(share.share, now + 0.4 + k, 1), now + 0.4 + k)
        assert fed == [] and m.asking == 0
        mapper.messages.handle(ident, P.Share(1.0, 0), now + 600.0)  # given back: it asks again, and that counts
        mapper.messages.handle(ident, P.Ready(1.0, now + 600.0, 1), now + 600.0)
        assert fed == ["MachineAvailability", "MachineReady"] and m.asking == 1
    finally:
        mapper.close()


def test_a_puller_whose_queue_is_full_is_unreachable_and_said_so_at_a_bounded_rate(ctx, caplog):
    """A puller that keeps sending but reads nothing fills its queue at the mapper: every later send fails with
    EAGAIN, its jobs and cancels lost in silence while it stayed registered and alive (only EHOSTUNREACH, a peer
    gone, counted), and each failure was a log line. Now a full queue makes its machine unreachable (down, with
    heartbeat detection: its replicas go back to the queue), and the lines come at most one per period."""
    exp = _one_machine()
    mapper = Mapper(exp, "tcp://127.0.0.1:0", context=ctx)
    try:
        ident, now = _run_with_puller_m1(mapper)
        mapper.messages.handle(ident, P.Ready(1.0, now, 1), now)
        _job_sent(mapper, Job(0, 0, 0.0, 1.0), now)
        assert mapper.core.jobs[0].status.name == "RUNNING"
        with caplog.at_level("INFO", logger="mgst"):
            for _ in range(1000):
                mapper._undeliverable(ident, 0, zmq.ZMQError(zmq.EAGAIN))
            mapper.unreachable.judge(time.time(), False)  # (as the loop does once what waits is read)
        assert mapper.core.machines[0].state is MachineState.DOWN and mapper.conns[0].identity is None
        assert mapper.core.jobs[0].status.name == "QUEUED"
        lines = [r.getMessage() for r in caplog.records if "could not send" in r.getMessage()]
        assert len(lines) == 1 and mapper.send_failures == 1000
    finally:
        mapper.close()


def test_a_request_for_work_while_a_resumed_run_s_clock_stands_still_is_held_until_it_runs(ctx):
    """A resumed mapper holds model time while its pullers come back; work it sent them meanwhile started and ended
    at one model instant (a resumed bag run: 50 replicas sent and 39 jobs done so, makespans of a seventh). A
    request made meanwhile is held, and made once the clock runs again."""
    exp = _one_machine()
    mapper = Mapper(exp, "tcp://127.0.0.1:0", context=ctx)
    try:
        ident, now = _run_with_puller_m1(mapper)
        m = mapper.core.machines[0]
        _job_sent(mapper, Job(0, 0, 0.0, 1.0), now)  # queued: nobody asks
        mapper.clock.hold(5.0, now + 1.0)  # (as Resume.prepare holds it)
        mapper.messages.handle(ident, P.Ready(1.0, now + 1.0, 1), now + 1.0)
        assert m.asking == 0 and mapper.core.jobs[0].status.name == "QUEUED"
        mapper.messages.handle(ident, P.Heartbeat(1, now + 30.0, -1.0, -1.0), now + 30.0)  # not at a heartbeat either
        assert m.asking == 0 and mapper.conns[0].ready_held is not None
        mapper.clock.run_on(now + 31.0)
        mapper.messages.release_held_requests(now + 31.0)
        assert mapper.core.jobs[0].status.name == "RUNNING" and mapper.conns[0].ready_held is None
    finally:
        mapper.close()


def test_a_puller_that_says_hello_again_asks_afresh_and_its_request_never_crosses_a_job_sent_on_the_old_one(ctx):
    """A puller that lost the mapper (it fell silent, as on a busy machine) says hello again on a new connection and,
    welcomed, asks for its free slots again. The request its previous connection made is over with that
    registration: a job the core sent on it would cross the new request, read as "ready while busy" and counted as a
    broken peer (a CI run's control run, with no attacker, counted one). Between the hello and the new request,
    nothing is sent to it; the new request gets the job."""
    exp = _one_machine()
    mapper = Mapper(exp, "tcp://127.0.0.1:0", context=ctx)
    try:
        old, now = _run_with_puller_m1(mapper)
        m = mapper.core.machines[0]
        mapper.messages.handle(old, P.Ready(1.0, now, 1), now)
        assert m.asking == 1
        new = b"puller-M1-again"  # same incarnation, holding nothing, on a new socket
        mapper.messages.hello(new, P.Hello(P.PROTOCOL_VERSION, "M1", 1, ("emulate",), 0.0, now + 1.0, 1, (), ()),
                              None, now + 1.0)
        _job_sent(mapper, Job(0, 0, 0.0, 1.0), now + 1.0)  # between the welcome and the puller's new request
        assert mapper.core.jobs[0].status.name == "QUEUED" and not m.replicas
        mapper.messages.handle(new, P.Ready(1.0, now + 1.1, 1), now + 1.1)  # what a welcomed puller does
        assert mapper.core.jobs[0].status.name == "RUNNING" and len(m.replicas) == 1
        assert dict(mapper.drops.counts) == {}
    finally:
        mapper.close()


def _hello_m1(mapper: Mapper, identity: bytes, incarnation: int, at: float, slots: int = 1,
              holds: tuple[int, ...] = ()) -> None:
    mapper.messages.hello(identity, P.Hello(P.PROTOCOL_VERSION, "M1", incarnation, ("emulate",), 0.0, at, slots,
                                            holds, ()), None, at)


def test_a_restarted_puller_s_hello_is_welcomed_while_its_old_connection_s_failure_waits_to_be_judged(ctx):
    """Without keys, a new incarnation of a machine whose connection is live is refused (its name is taken). A
    connection a send found gone is not live, though its verdict waits for what is read: the restarted puller
    (down by its failure law, up again) is welcomed, not refused and left down for a back-off."""
    mapper = Mapper(_one_machine(), "tcp://127.0.0.1:0", context=ctx)
    try:
        old, now = _run_with_puller_m1(mapper)
        mapper._undeliverable(old, 0, zmq.ZMQError(zmq.EHOSTUNREACH))  # its socket closed as it went down
        _hello_m1(mapper, b"puller-M1-restarted", 2, now + 0.1)  # read before the verdict
        assert dict(mapper.drops.counts) == {}
        assert mapper.conns[0].identity == b"puller-M1-restarted" and mapper.conns[0].incarnation == 2
        mapper.unreachable.judge(now + 0.1, False)  # its old connection's failure: void, replaced
        assert mapper.core.machines[0].state is not MachineState.DOWN
    finally:
        mapper.close()


def test_a_failed_send_to_a_puller_s_new_connection_is_judged_though_its_old_one_failed_first(ctx):
    """A send to the old connection fails, the puller's hello on a new one is read, and a send to that one fails
    too before the verdict: the old failure is void (replaced), the new one takes the machine down."""
    mapper = Mapper(_one_machine(), "tcp://127.0.0.1:0", context=ctx)
    try:
        old, now = _run_with_puller_m1(mapper)
        mapper._undeliverable(old, 0, zmq.ZMQError(zmq.EHOSTUNREACH))
        _hello_m1(mapper, b"puller-M1-again", 1, now + 0.1)
        mapper._undeliverable(b"puller-M1-again", 0, zmq.ZMQError(zmq.EHOSTUNREACH))
        mapper.unreachable.judge(now + 0.2, False)
        assert mapper.core.machines[0].state is MachineState.DOWN and mapper.conns[0].identity is None
    finally:
        mapper.close()


def test_a_replica_a_reconnected_puller_lacks_goes_back_to_the_queue_not_onto_its_old_request(ctx):
    """A two-slot machine asking for one more slot reconnects without the replica the mapper sent it: the
    replica is lost and its job requeued, after the old request is withdrawn, so the job waits for the puller's
    new request instead of being sent on the old one (crossing that request, which then asks for more slots
    than are free)."""
    mapper = Mapper(_two_slots(), "tcp://127.0.0.1:0", context=ctx)
    try:
        old, now = _run_with_puller_m1(mapper, slots=2)
        m = mapper.core.machines[0]
        mapper.messages.handle(old, P.Ready(1.0, now, 2), now)
        _job_sent(mapper, Job(0, 0, 0.0, 1.0), now)
        assert m.asking == 1 and len(m.replicas) == 1
        _hello_m1(mapper, b"puller-M1-again", 1, now + 1.0, slots=2)  # holding nothing: the job never reached it
        assert mapper.core.jobs[0].status.name == "QUEUED" and m.asking == 0 and not m.replicas
        stale = mapper.core.stale_events
        mapper.messages.handle(b"puller-M1-again", P.Ready(1.0, now + 1.1, 2), now + 1.1)
        assert mapper.core.jobs[0].status.name == "RUNNING" and m.asking == 1
        assert mapper.core.stale_events == stale and dict(mapper.drops.counts) == {}
    finally:
        mapper.close()


def test_a_drain_where_nothing_can_run_is_said_once(caplog):
    """Jobs queued that no machine takes (a requirement no host meets), every machine up and asking: the drain
    waited for its limit (50 times the longest job: ten minutes) with 'queued 140 | running 0' and no word why."""
    import logging  # noqa: PLC0415
    from types import SimpleNamespace  # noqa: PLC0415

    from mgst.core.state import MachineState  # noqa: PLC0415
    from mgst.testbed.lasting import Lasting  # noqa: PLC0415
    from mgst.testbed.mapper import STUCK_DRAIN, Mapper  # noqa: PLC0415

    machines = [SimpleNamespace(state=MachineState.READY, asking=1) for _ in range(3)]
    core = SimpleNamespace(queued_count=140, running={}, timers={}, machines=machines)
    fake = SimpleNamespace(core=core, _stuck=Lasting(STUCK_DRAIN))
    with caplog.at_level(logging.WARNING, logger="mgst.testbed.mapper"):
        for t in (0.0, STUCK_DRAIN / 2, STUCK_DRAIN - 0.1):
            Mapper._say_if_nothing_runs(fake, 100.0 + t, 700.0)
        assert not caplog.records
        core.timers = {"resolve": 1.0}  # (the policy waits on a timer: something may yet happen)
        Mapper._say_if_nothing_runs(fake, 100.0 + STUCK_DRAIN, 700.0)
        assert not caplog.records and fake._stuck.since is None
        core.timers = {}
        for t in (0.0, STUCK_DRAIN, STUCK_DRAIN + 1.0, 2 * STUCK_DRAIN):
            Mapper._say_if_nothing_runs(fake, 200.0 + t, 700.0)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].startswith("140 jobs queued, none running, and every machine up and asking"), said
    assert f"for {STUCK_DRAIN:.0f} s of the drain" in said[0] and "470 s from now" in said[0], said
    machines[0].state, fake._stuck.said, fake._stuck.since = MachineState.DOWN, False, 0.0  # (one may come back)
    Mapper._say_if_nothing_runs(fake, 300.0, 700.0)
    assert fake._stuck.since is None
