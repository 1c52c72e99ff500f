"""The policy's side of every event: its hooks after the event, matching by its choose() (or its dispatch), and
the checks and effects of its decisions."""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Final

from mgst.core.decisions import Assign, Cancel, CancelTimer, Hold, Output, SetTimer, SuspectDown, TimeOut, shown
from mgst.core.events import Event
from mgst.core.hooks import PolicyError, PolicyHooks, uses_groups
from mgst.core.lifecycle import Lifecycle
from mgst.core.state import JobRecord, MachineRecord, MachineState, ReplicaRecord
from mgst.core.transitions import MACHINE
from mgst.core.view import View
from mgst.model import Job

# The decisions a policy returns (Matcher.apply), by type: one returned alone is a mistake apply_all names.
_DECISIONS: Final = frozenset({Assign, Hold, Cancel, SetTimer, CancelTimer, TimeOut, SuspectDown})
_JOB: Final = Job  # (a static compiled: the imported name would be a module dict lookup at each Assign)


class Matcher:
    """Runs the policy after each event (:meth:`after_event`): the hooks it declares, then the matching,
    the default one (:meth:`match`) or its dispatch; checks and applies its decisions (:meth:`apply`)."""

    def __init__(self, view: View, lifecycle: Lifecycle, policy: PolicyHooks, hooks: frozenset[str]):
        self.view = view
        self.lifecycle = lifecycle
        self.policy = policy
        self.machines = view.machines  # the view's (the same object)
        self.ready = view.ready_queue
        # The hooks the policy declares, looked up once. on_event: the event object is made only then.
        self.listening = "on_event" in hooks
        self.on_start = "start" in hooks
        self.on_capacity = "on_capacity_change" in hooks
        self.on_timer = "on_timer" in hooks
        self.on_silent = "on_machine_silent" in hooks
        self.on_heard = "on_machine_heard" in hooks
        self.choosing = "choose" in hooks  # neither it nor dispatch: nothing is ever assigned
        # None: the core matches, asking policy.choose().
        self.dispatch: Callable[[View, JobRecord | None, MachineRecord | None], Any] | None = (
            policy.dispatch if "dispatch" in hooks else None
        )
        if "on_replica_end" in hooks:  # ended and started replicas wait there for the hooks
            lifecycle.ended = []
        if "on_replica_start" in hooks:
            lifecycle.started = []
        # What match needs of the policy, looked up once (class attributes of the policy).
        self.replicating = policy.max_replicas > 1
        # A replicating choose() changes its answer when a job starts running: not incremental.
        self.incremental = policy.incremental and not self.replicating
        # Ask one ready machine per choose_groups() key when offering a new job (PolicyHooks.choose_groups).
        self.grouped = uses_groups(type(policy), hooks)
        self.walks = 0  # offers of a new job to the ready machines by key, so far
        self.refused_in: list[int] = []  # by key number: the last such offer that the key refused
        # Report Hold(machine) when an asking machine gets nothing; a driver with no use for it (the
        # simulator) turns it off.
        self.report_holds = True
        # Before start(), events only set up the initial state (machines up and asking, jobs
        # queued): no policy hook runs and nothing is matched, so that a policy that plans on
        # capacity changes (LPAS_DG's LP) plans once, in start(), not once per machine.
        self.begun = False
        self.dispatched_version = -1

    # ------------------------------------------------------------------ after each event

    def start(self) -> None:
        """The policy sets itself up and dispatches, once, over the state the events so far have set up."""
        self.begun = True
        self.lifecycle.requeued = False
        self.dispatched_version = self.view.capacity_version
        if self.on_start:
            self.apply_all(self.policy.start(self.view))
        self.dispatch_now(None, None)

    def after_event(
        self, event: Event | None, new_job: JobRecord | None, asking: MachineRecord | None, quiet: bool
    ) -> list[Output]:
        """Run the policy's hooks after an event and return the event's outputs.

        ``event`` is made only for a policy that declares ``on_event`` (None otherwise).
        ``new_job`` or ``asking`` tell the policy's dispatch that the event's only
        effect on matching was that one job entered a queue or that one machine
        started asking, so that it may look at just that. ``quiet`` events
        (checkpoints, staging over) change nothing a dispatch could use.
        """
        lifecycle = self.lifecycle
        if not self.begun:  # setting up the initial state: the policy sees it all in start()
            return lifecycle.out
        policy = self.policy
        view = self.view
        if lifecycle.ended:
            self.replica_hooks()
        if self.listening:
            assert event is not None
            self.apply_all(policy.on_event(view, event))
        if view.capacity_version != self.dispatched_version:
            self.dispatched_version = view.capacity_version
            if self.on_capacity:
                self.apply_all(policy.on_capacity_change(view))
            new_job = asking_hint = None  # eligibility may have changed: look at everything
        elif lifecycle.requeued:
            new_job = asking_hint = None  # a job is back in a queue: any ready machine may take it
        elif quiet:
            return lifecycle.out
        else:
            asking_hint = asking
        lifecycle.requeued = False
        # dispatch_now, inlined: this runs after nearly every event
        if self.dispatch is not None:
            self.apply_all(self.dispatch(view, new_job, asking_hint))
        elif self.choosing:
            self.match(new_job, asking_hint)
        if lifecycle.started or lifecycle.ended:
            self.replica_hooks()
        if asking is not None and self.report_holds and asking.index in self.ready:
            lifecycle.out.append(Hold(asking.index))
        return lifecycle.out

    def dispatch_now(self, new_job: JobRecord | None, asking: MachineRecord | None) -> None:
        """Matching: the policy's dispatch if it declares one, else the core's by its choose(); then the
        replica hooks, for the replicas it started and ended."""
        if self.dispatch is not None:
            self.apply_all(self.dispatch(self.view, new_job, asking))
        elif self.choosing:
            self.match(new_job, asking)
        lifecycle = self.lifecycle
        if lifecycle.started or lifecycle.ended:
            self.replica_hooks()

    def replica_hooks(self) -> None:
        """Deliver ended and started replicas to the policy until its decisions end or start no more."""
        policy = self.policy
        lifecycle = self.lifecycle
        view = self.view
        while lifecycle.ended or lifecycle.started:
            ended, started = lifecycle.ended, lifecycle.started
            if ended:
                lifecycle.ended = []
                for r in ended:
                    self.apply_all(policy.on_replica_end(view, r))
            if started:
                lifecycle.started = []
                for r in started:
                    self.apply_all(policy.on_replica_start(view, r))

    def timer(self, key: Hashable) -> None:
        if self.on_timer:
            self.apply_all(self.policy.on_timer(self.view, key))

    def silent(self, m: MachineRecord) -> None:
        if self.on_silent:
            self.apply_all(self.policy.on_machine_silent(self.view, m))

    def heard(self, m: MachineRecord) -> None:
        m.silent = False
        if self.on_heard:
            self.apply_all(self.policy.on_machine_heard(self.view, m))

    # ------------------------------------------------------------------ matching

    def match(self, new_job: JobRecord | None, asking: MachineRecord | None) -> None:
        """The default matching, for policies that declare ``choose`` (and not ``dispatch``).

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
        ready = self.ready
        view = self.view
        replicating = self.replicating
        if not ready.size or (not view.queued_count and not replicating):
            return
        # self.policy.choose and self.lifecycle.start, not local bound methods: compiled, these are native calls
        policy = self.policy
        lifecycle = self.lifecycle
        if self.incremental:
            if asking is not None:
                rec = policy.choose(view, asking)
                while rec is not None:
                    lifecycle.start(rec, asking)
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
                keys = policy.choose_groups(view) if self.grouped else None
                grouped = keys is not None
                present = ready.keys_present(keys) if keys is not None else -1
                refused_in = self.refused_in  # by key number: the walk in which that key refused
                walk = 0
                if grouped:
                    walk = self.walks = self.walks + 1
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
                        lifecycle.start(rec, m)
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
                lifecycle.start(rec, m)
                if not view.queued_count and not replicating:
                    return
                if not m.asking:
                    break

    # ------------------------------------------------------------------ decisions

    def apply_all(self, decisions: Iterable | None) -> None:
        if decisions:
            if type(decisions) in _DECISIONS:  # one decision (a NamedTuple), whose fields would be taken for decisions
                raise PolicyError(f"a hook returned one decision, {decisions!r}, where a list of decisions is "
                                  f"expected: return [{type(decisions).__name__}(...)], or yield it")
            apply = self.apply
            for d in decisions:
                try:
                    apply(d)
                except PolicyError as e:  # a decision broke a rule: from a generator, raised where it yielded it,
                    throw = getattr(decisions, "throw", None)  # so that the traceback shows the policy's own line
                    if throw is not None:
                        try:
                            throw(e)
                        except StopIteration:  # (it caught the error and returned: the error stands)
                            pass
                    raise  # (also when it caught the error and yielded on: what it yields then is not carried out)

    def apply(self, d: object) -> None:
        """Check and carry out one decision of the policy."""
        t = type(d)
        fields: Any = d  # (its fields read untyped: checked here, not met by a compiled cast)
        lifecycle = self.lifecycle
        if t is Assign:
            self._assign(d)  # type: ignore[arg-type]
        elif t is Hold:
            j = decided_index(fields[0], "machine", "Hold")
            if j not in self.ready:
                raise PolicyError(f"hold of machine {j}, which is not asking for work")
            self.ready.move_to_end(j)
        elif t is Cancel:
            lifecycle.cancel(self._running_replica(decided_index(fields[0], "replica", "Cancel"), "cancel"))
        elif t is SetTimer:
            key = d.key  # type: ignore[attr-defined]
            if not journal_key(key, 0):
                raise PolicyError(f"SetTimer key {shown(key)} ({type(key).__name__}) is not a timer key: keys are "
                                  "strings, numbers, bytes, None, or tuples of them (a testbed run journals them)")
            at: Any = d.at  # type: ignore[attr-defined]
            if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at):
                raise PolicyError(f"SetTimer {shown(key)} at {shown(at)}: a timer's time must be a finite number "
                                  "(a model time; one earlier than now fires at once)")
            self.view.timers[key] = at
            lifecycle.out.append(d)  # type: ignore[arg-type]
        elif t is CancelTimer:
            if self.view.timers.pop(d.key, None) is not None:  # type: ignore[attr-defined]
                lifecycle.out.append(d)  # type: ignore[arg-type]
        elif t is TimeOut:
            lifecycle.time_out(self._running_replica(decided_index(fields[0], "replica", "TimeOut"), "time-out"))
        elif t is SuspectDown:
            j = decided_index(fields[0], "machine", "SuspectDown")
            if not 0 <= j < len(self.machines):
                raise PolicyError(f"suspicion of unknown machine {j}")
            m = self.machines[j]
            if m.state is not MachineState.DOWN:
                lifecycle.take_down(m, suspected=True)
            elif lifecycle.checker is not None:
                lifecycle.checker.moved(MACHINE, m, m.state, "suspect", m.state)
        else:
            raise PolicyError(f"a policy cannot decide {d!r}")

    def _running_replica(self, replica: int, what: str) -> ReplicaRecord:
        """The live replica a policy's decision names; PolicyError if it is not running."""
        r = self.view.live.get(replica)
        if r is None:
            raise PolicyError(f"{what} of replica {replica}, which is not running")
        return r

    def _assign(self, d: Assign) -> None:
        fields: Any = d  # (read untyped, so that these checks, not a compiled cast, meet what the policy gave)
        job = fields[0]
        if type(job) is not _JOB:
            held = getattr(job, "job", None)  # a JobRecord for its job: the likeliest slip, named
            hint = " (a record: Assign takes its .job)" if type(held) is _JOB else ""
            raise PolicyError(f"Assign of {type(job).__name__} {shown(job)}{hint}: Assign's job must be a Job, "
                              "a record's .job")
        rec = self.view.jobs.get(job.id)
        if rec is None:
            raise PolicyError(f"assign of unknown job {job.id}")
        j = fields[1]
        if type(j) is not int:  # (the common case costs a type check: no call)
            j = decided_index(j, "machine", "Assign")
        if not 0 <= j < len(self.machines):
            raise PolicyError(f"assign to unknown machine {j}")
        self.lifecycle.start(rec, self.machines[j])


def decided_index(value: Any, field: str, kind: str) -> int:
    """A decision's machine or replica index (``value``, its ``field`` in a ``kind`` decision) as an int: an int as
    it is, any other integer (numpy's, from an argmin) by its ``__index__``; PolicyError for anything else (a float,
    a string, None, a bool), named, where a compiled cast would have raised a TypeError blamed on mgst."""
    if type(value) is int:
        return value
    if not isinstance(value, bool) and hasattr(type(value), "__index__"):
        return operator.index(value)
    raise PolicyError(f"{kind} of {field} {shown(value)} ({type(value).__name__}): a {field} is an integer index")


def journal_key(key: object, depth: int) -> bool:
    """Whether a timer key is one a testbed run's journal keeps and gives back equal (msgpack, tuples kept): a
    string, a number (an int in 64 bits), bytes, None, or a tuple of them (nested at most 8 deep). Checked in the
    simulation as on the testbed, so that a policy runs the same in both."""
    if isinstance(key, (str, float, bytes)) or key is None:
        return True
    if isinstance(key, int):  # (bool too)
        return -(1 << 63) <= key < (1 << 64)
    if isinstance(key, tuple) and depth < 8:
        for item in key:
            if not journal_key(item, depth + 1):
                return False
        return True
    return False
