"""What must hold of the core's records after every event, checked from the records and the transition table (tests)."""

from __future__ import annotations

from mgst.core.lifecycle import Lifecycle
from mgst.core.state import COMPUTING, WAITING, JobStatus, MachineState, Outcome
from mgst.core.transitions import JOB, MACHINE, REPLICA, state_of, states
from mgst.core.view import View


def check_invariants(view: View, lifecycle: Lifecycle, max_replicas: int) -> None:
    """Raise AssertionError if the records are inconsistent.

    Every record is in a state of the transition table for its kind, and, in check mode, in the
    state its last transition left it in (a change of state made by no transition fails here).
    """
    job_states, replica_states, machine_states = states(JOB), states(REPLICA), states(MACHINE)
    queued = 0
    for key, q in view.queues.items():
        for rec in q:
            assert rec.status is JobStatus.QUEUED, f"queue {key} holds {rec}"
            assert rec.queue_key == key
            assert not rec.replicas, f"queued {rec} has live replicas"
            queued += 1
    assert queued == view.queued_count, (queued, view.queued_count)
    records: list[tuple[str, object]] = []
    for jid, rec in view.jobs.items():
        assert rec.status in job_states, rec
        records.append((JOB, rec))
        if rec.status is JobStatus.RUNNING:
            assert rec.replicas, f"running {rec} has no replica"
            assert jid in view.running
        else:
            assert jid not in view.running
        if rec.status is JobStatus.DONE:  # only losers that run on (the policy lets them) outlive their job
            assert rec.completed is not None and all(r.discarded for r in rec.replicas.values()), rec
        assert len(rec.replicas) <= max_replicas
        assert sum(1 for r in rec.history if r.outcome is Outcome.DONE) == (rec.status is JobStatus.DONE)
        for r in rec.history:
            assert state_of(REPLICA, r) in replica_states, r
            assert r.live == (r.outcome is None), r
            records.append((REPLICA, r))
    for r in view.live.values():
        assert r.live and r.job.replicas.get(r.id) is r
        assert view.machines[r.machine].replicas.get(r.id) is r
    ready = view.ready_queue
    for m in view.machines:
        assert m.state in machine_states, m
        records.append((MACHINE, m))
        assert len(m.replicas) <= m.slots, f"{m} runs {len(m.replicas)} replicas in {m.slots} slots"
        assert 0 <= m.asking <= m.slots - len(m.replicas), (m, m.asking)
        assert (m.state is MachineState.READY) == (m.index in ready) == (m.asking > 0), m
        if m.state is MachineState.BUSY:
            assert m.replicas, m
        if m.state is MachineState.FREE or m.state is MachineState.DOWN:
            assert not m.replicas, m
    ready.check()
    for bag in view.all_bags.values():
        by_status = {s: 0 for s in JobStatus}
        for rec in bag.tasks:
            by_status[rec.status] += 1
        assert bag.queued == by_status[JobStatus.QUEUED], bag
        assert len(bag.running) == by_status[JobStatus.RUNNING], bag
        assert bag.done == by_status[JobStatus.DONE], bag
        assert bag.size == len(bag.tasks)
        done = bag.done == bag.size
        assert done == (bag.completed is not None) == (bag.id not in view.bags), bag
        if done and bag.tasks:
            assert bag.completed == max(rec.completed for rec in bag.tasks)  # type: ignore[type-var]
    if lifecycle.checker is not None:
        lifecycle.checker.check_states(records)
    for m in view.machines:  # the machine rule of mgst.core.progress: at most cpus compute, the others wait
        computing = [r for r in m.replicas.values() if r.phase == COMPUTING]
        waiting = [r for r in m.replicas.values() if r.phase == WAITING]
        assert m.computing == len(computing) <= m.cpus, f"{m} counts {m.computing} computing, has {len(computing)}"
        assert sorted(r.id for r in m.waiting) == sorted(r.id for r in waiting), f"{m} waiting {m.waiting}"
        assert not waiting or m.computing == m.cpus, f"{m} has replicas waiting and a cpu free"
        for r in waiting:
            assert r.rate == 0.0 and r.computing_since is None, r
