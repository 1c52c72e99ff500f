"""Matching ready machines to queued jobs by the policy's choose(), and applying the policy's decisions."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TYPE_CHECKING, cast

from mgst.core.decisions import Assign, Cancel, CancelTimer, Hold, SetTimer, SuspectDown, TimeOut
from mgst.core.lifecycle import Lifecycle, PolicyError
from mgst.core.state import JobRecord, MachineRecord, MachineState, ReplicaRecord

if TYPE_CHECKING:
    from mgst.core.scheduler import Scheduler


class Matching(Lifecycle):
    """The default matching (:meth:`_match`) and the checks and effects of the policy's decisions."""

    jobs: dict[int, JobRecord]
    timers: dict[Hashable, float]
    _replicating: bool
    _incremental: bool
    _grouped: bool
    _walks: int  # offers of a new job to the ready machines by key, so far
    _refused_in: list[int]  # by key number: the last such offer that the key refused

    def _match(self, new_job: JobRecord | None, asking: MachineRecord | None) -> None:
        """The default matching, for policies that implement only ``choose``.

        Ready machines are offered work in request order, one free slot at a
        time; one that gets nothing goes to the back of the ready queue (the
        rotating server queue of MGST section 4.3.1). For an ``incremental``
        policy that does not replicate, an asking machine alone is offered work,
        and a new job is offered to ready machines from the head until one takes
        something; otherwise (and after any requeue, bag arrival or capacity
        change) every ready machine is offered work. That is exact when choose()
        looks only at the machine and the queues: a machine that got nothing can
        then get something only when a job arrives, and taking jobs away never
        makes another machine eligible.
        """
        ready = self._ready
        replicating = self._replicating
        if not ready.size or (not self.queued_count and not replicating):
            return
        # self.policy.choose and self._start, not local bound methods: compiled, these are native calls
        policy = self.policy
        view = cast("Scheduler", self)  # what the policy sees
        # A replicating choose() changes its answer when a job starts running: not incremental.
        if self._incremental:
            if asking is not None:
                rec = policy.choose(view, asking)
                while rec is not None:
                    self._start(rec, asking)
                    if not asking.asking:
                        return
                    rec = policy.choose(view, asking)  # another free slot
                return
            if new_job is not None:
                # Each ready machine from the head until one takes it; those passed over go to the
                # back, in order: the taker becomes the head (none taking it: all of them, which
                # leaves the order as it was).
                machines = self.machines
                links = ready.links  # the queue is not changed during the walk
                j = ready.head
                # Keys by machine index, read without touching the machine (a cold record at scale):
                # one machine asked per key; once every key among the ready machines has refused,
                # nobody takes it: stop there. Without keys, each machine is asked.
                keys = policy.choose_groups(view) if self._grouped else None
                grouped = keys is not None
                present = ready.keys_present(keys) if keys is not None else -1
                refused_in = self._refused_in  # by key number: the walk in which that key refused
                walk = 0
                if grouped:
                    walk = self._walks = self._walks + 1
                    if len(refused_in) < ready.key_count:
                        refused_in.extend([0] * (ready.key_count - len(refused_in)))
                key = 0
                refusals = 0
                for _ in range(ready.size):
                    link = links[j]
                    if grouped:
                        key = link.key
                        if refused_in[key] == walk:
                            j = link.next
                            continue
                    m = machines[j]
                    rec = policy.choose(view, m)
                    if rec is not None:
                        ready.rotate_to(j)
                        self._start(rec, m)
                        return
                    if grouped:
                        refused_in[key] = walk
                        refusals += 1
                        if refusals == present:
                            return
                    j = link.next
                return
        machines = self.machines
        for j in list(ready):
            m = machines[j]
            while True:
                rec = policy.choose(view, m)
                if rec is None:
                    ready.move_to_end(j)
                    break
                self._start(rec, m)
                if not self.queued_count and not replicating:
                    return
                if not m.asking:
                    break

    # ------------------------------------------------------------------ decisions

    def _apply_all(self, decisions: Iterable | None) -> None:
        if decisions:
            apply = self._apply
            for d in decisions:
                apply(d)

    def _apply(self, d: object) -> None:
        """Check and carry out one decision of the policy."""
        t = type(d)
        if t is Assign:
            self._assign(d)  # type: ignore[arg-type]
        elif t is Hold:
            j = d.machine  # type: ignore[attr-defined]
            if j not in self._ready:
                raise PolicyError(f"hold of machine {j}, which is not asking for work")
            self._ready.move_to_end(j)
        elif t is Cancel:
            self._cancel(self._running_replica(d.replica, "cancel"))  # type: ignore[attr-defined]
        elif t is SetTimer:
            self.timers[d.key] = d.at  # type: ignore[attr-defined]
            self._out.append(d)  # type: ignore[arg-type]
        elif t is CancelTimer:
            if self.timers.pop(d.key, None) is not None:  # type: ignore[attr-defined]
                self._out.append(d)  # type: ignore[arg-type]
        elif t is TimeOut:
            self._time_out(self._running_replica(d.replica, "time-out"))  # type: ignore[attr-defined]
        elif t is SuspectDown:
            j = d.machine  # type: ignore[attr-defined]
            if not 0 <= j < len(self.machines):
                raise PolicyError(f"suspicion of unknown machine {j}")
            m = self.machines[j]
            if m.state is not MachineState.DOWN:
                self._take_down(m, suspected=True)
        else:
            raise PolicyError(f"a policy cannot decide {d!r}")

    def _running_replica(self, replica: int, what: str) -> ReplicaRecord:
        """The live replica a policy's decision names; PolicyError if it is not running."""
        r = self._replicas.get(replica)
        if r is None:
            raise PolicyError(f"{what} of replica {replica}, which is not running")
        return r

    def _assign(self, d: Assign) -> None:
        rec = self.jobs.get(d.job.id)
        if rec is None:
            raise PolicyError(f"assign of unknown job {d.job.id}")
        if not 0 <= d.machine < len(self.machines):
            raise PolicyError(f"assign to unknown machine {d.machine}")
        self._start(rec, self.machines[d.machine])
