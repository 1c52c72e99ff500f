"""The policy protocol: the hooks the core calls, their defaults, and how a policy declares the ones it uses."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any, ClassVar, Final

from mypy_extensions import mypyc_attr

from mgst.core.decisions import Decision
from mgst.core.decisions import PolicyError as PolicyError  # (its home was here: imported from here still)
from mgst.core.events import Event
from mgst.core.state import JobRecord, MachineRecord, ReplicaRecord
from mgst.core.view import View
from mgst.model import Job

# Every hook a policy may declare in ``hooks`` (an unknown name is refused: a typo would be a hook
# the core never calls).
HOOKS: Final = frozenset({
    "queue_key", "start", "on_event", "on_replica_start", "on_replica_end", "on_capacity_change", "on_timer",
    "on_machine_silent", "on_machine_heard", "choose", "choose_groups", "dispatch",
})

NO_DECISIONS: Final[tuple[Decision, ...]] = ()


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled with mypyc (docs/build.md); policies subclass it
class PolicyHooks:
    """What the core calls a policy with, and the defaults (mgst.policies.base.Policy builds on it).

    The core calls a hook only if the policy **declares** it: ``hooks`` names the hooks a class
    defines, and a policy's hooks are those its classes declare together (a subclass adds to its
    bases'). A class that defines a hook it does not declare, or declares a name that is no hook,
    is refused when the Scheduler is made (:func:`declared_hooks`): a hook the core would never
    call is a bug to see at once, not a silent no-op.

    Every hook gets the :class:`View` (read-only) and answers with decisions (Assign, Cancel,
    Hold, SetTimer, CancelTimer, TimeOut, SuspectDown), which the core checks and applies one by
    one, so a generator sees the effect of each decision it yielded. The simplest policy declares
    only ``choose``; the core then does the matching.
    """

    hooks: ClassVar[frozenset[str]] = frozenset()
    # How many replicas of one job may run at once; above 1, choose() may return running jobs.
    # (ClassVar: subclasses override it in their class body too, which compiled code reads only so)
    max_replicas: ClassVar[int] = 1
    # A new replica starts from the job's best checkpoint rather than from scratch.
    resume_from_checkpoint: ClassVar[bool] = True
    # When a replica completes its job, the job's other replicas are cancelled; False lets them run on (GridBot):
    # each finishes or fails as it would, its result recorded as discarded, and its machine time counted as waste.
    cancel_losers: ClassVar[bool] = True
    # choose() changes its answer only when a job arrives or the machine asks: the core
    # then offers an arriving job, or an asking machine, alone (Matcher.match).
    incremental: ClassVar[bool] = True
    # The policy reads the jobs' sizes (View.task_size): True only for policies the papers give sizes to
    # (Kondo et al.'s EXCL-PRED knows its tasks' size); View.task_size refuses a policy that does not say so (a
    # convention, not a wall: job.size itself is not hidden, and docs/policies.md says not to read it).
    knows_sizes: ClassVar[bool] = False

    def active_hooks(self, declared: frozenset[str]) -> frozenset[str]:
        """The declared hooks this policy object uses (called once, when the Scheduler is made): the core
        calls only these. A policy whose options leave a declared hook idle returns the others, and the core
        then spends nothing on it (on_event: an event object per event). Default: all of them."""
        return declared

    def queue_key(self, job: Job) -> Hashable:
        """Which queue a job waits in. Undeclared: its class, a task its bag's (keyed by the bag id)."""
        return job.job_class

    def start(self, view: View) -> Iterable[Decision]:
        """Called once before any event."""
        return NO_DECISIONS

    def on_event(self, view: View, event: Event) -> Iterable[Decision]:
        """Called after the core has applied any ``event`` (declare it only if used: the event is then made)."""
        return NO_DECISIONS

    def on_replica_start(self, view: View, replica: ReplicaRecord) -> Iterable[Decision]:
        """A replica started (after matching): arm a per-replica timer here, for instance."""
        return NO_DECISIONS

    def on_replica_end(self, view: View, replica: ReplicaRecord) -> Iterable[Decision]:
        """A replica ended: ``replica.outcome`` says how (done, cancelled, lost, timed out, failed).

        Called once per end, after the core has applied it and before matching; a
        late result of a replica given up on comes again with outcome DONE and
        ``replica.late`` set.
        """
        return NO_DECISIONS

    def on_capacity_change(self, view: View) -> Iterable[Decision]:
        """A machine went up or down or changed its CPU share (re-plan here)."""
        return NO_DECISIONS

    def on_timer(self, view: View, key: Hashable) -> Iterable[Decision]:
        """A timer this policy set with SetTimer(key, at) is due."""
        return NO_DECISIONS

    def on_machine_silent(self, view: View, machine: MachineRecord) -> Iterable[Decision]:
        """The driver has not heard from ``machine`` for a while (it is not down): give up on its
        replicas, suspect it, or wait."""
        return NO_DECISIONS

    def on_machine_heard(self, view: View, machine: MachineRecord) -> Iterable[Decision]:
        """A silent machine spoke again (undo what on_machine_silent armed)."""
        return NO_DECISIONS

    # (A JobRecord or None, typed Any: compiled, a declared JobRecord | None would be checked by mypyc's glue at the
    # return of a researcher's policy, whose mistake would read as the core's TypeError; the core checks it instead,
    # in Lifecycle.start, and names the policy's mistake.)
    def choose(self, view: View, machine: MachineRecord) -> Any:
        """The job for a machine that asks for work (a ``JobRecord`` of the view), or None to keep its request held.

        A queued job gets its first replica; a running job (only if max_replicas > 1)
        gets another. Neither ``choose`` nor ``dispatch`` declared: nothing is ever assigned.
        """
        return None

    def choose_groups(self, view: View) -> Sequence[Hashable] | None:
        """Keys of the machines, by index, shared by machines that :meth:`choose` refuses alike
        (optional; it saves calls). None: no keys.

        The promise: whenever ``choose()`` returns None for one ready machine, it
        returns None for every ready machine with the same key at that moment.
        The core asks for the keys once per arriving job and offers the job to
        one machine per key; the others of a key that refused move to the back
        of the ready queue unasked, as if each had refused, so the schedule is
        the same. The core counts the ready machines by key, by the sequence it
        was last given: return the same sequence while the keys stay as they
        are, a new one when they change, and never change one in place.
        LPAS_DG keys machines by their eligible classes. The core uses
        it only if the class that defines it is the class that defines
        ``choose`` or a subclass of it: a subclass that overrides ``choose``
        alone is asked machine by machine.
        """
        return None

    def dispatch(self, view: View, new_job: JobRecord | None, asking: MachineRecord | None) -> Iterable[Decision]:
        """Take matching over entirely: yield Assign and Hold for ready machines.

        Most policies declare :meth:`choose` instead; the core then matches (see
        ``Matcher.match``): it offers work to ready machines in request order, and
        a machine that gets nothing goes to the back of the ready queue (MGST's
        rotating server queue). Declare it for gang allocation, batch matching or
        random machine choice. It is called after every event; ``new_job``/``asking``
        are the core's word that the event's only change was this job entering a
        queue or this machine starting to ask (both None: anything may have changed).
        """
        raise NotImplementedError("the core matches with choose() unless a policy declares dispatch()")


def declared_hooks(kind: type) -> frozenset[str]:
    """The hooks a policy class declares: the union of the ``hooks`` its classes set.

    PolicyError if a declared name is no hook, if a class of ``kind`` defines a hook that none
    declares (the core would never call it), or if a declared hook is not defined at all.
    """
    declared: set[str] = set()
    for k in kind.__mro__:
        own = k.__dict__.get("hooks")
        if own is not None:
            names = {own} if isinstance(own, str) else set(own)
            unknown = names - HOOKS
            if unknown:
                raise PolicyError(
                    f"{k.__qualname__}.hooks names {', '.join(sorted(unknown))}, which is not a hook; "
                    f"the hooks are {', '.join(sorted(HOOKS))}"
                )
            declared |= names
    for k in kind.__mro__:
        if k is PolicyHooks or k is object:
            continue
        undeclared = sorted(name for name in HOOKS if name in k.__dict__ and name not in declared)
        if undeclared:
            listed = ", ".join(f"{name}()" for name in undeclared)
            raise PolicyError(
                f"{k.__qualname__} defines {listed} but does not declare {'them' if len(undeclared) > 1 else 'it'}: "
                f"the core calls only the hooks a policy declares; add {', '.join(map(repr, undeclared))} "
                f"to {k.__qualname__}.hooks"
            )
    for name in declared:
        if not callable(getattr(kind, name, None)):
            raise PolicyError(f"{kind.__qualname__} declares {name}() but does not define it")
    return frozenset(declared)


def defined_in(kind: type, name: str) -> type:
    """The class of ``kind``'s method resolution order that defines attribute ``name``."""
    return next(k for k in kind.__mro__ if name in k.__dict__)


def uses_groups(kind: type, hooks: frozenset[str]) -> bool:
    """Whether the core may ask ``choose_groups``: declared, and defined with ``choose`` or below it (its promise
    is about that ``choose``)."""
    if "choose_groups" not in hooks:
        return False
    groups: Any = defined_in(kind, "choose_groups")
    return issubclass(groups, defined_in(kind, "choose"))
