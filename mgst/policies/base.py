"""The Policy base class: the hooks a scheduling policy implements, and their defaults."""

from __future__ import annotations

import dataclasses
import random
import typing
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Final

from mypy_extensions import mypyc_attr

from mgst.core.decisions import Decision
from mgst.core.events import Event
from mgst.core.scheduler import Scheduler
from mgst.core.state import JobRecord, MachineRecord, ReplicaRecord
from mgst.model import Job

if typing.TYPE_CHECKING:
    from mgst.policies.timeouts import SilenceTimeouts

Decisions = Iterable[Decision]
NOTHING: Final[tuple[Decision, ...]] = ()


@mypyc_attr(allow_interpreted_subclasses=True)  # each policy's options subclass it
@dataclasses.dataclass(frozen=True)
class PolicyOptions:
    """Base of every policy's options: a frozen dataclass, filled from ``[policy]`` keys."""

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> PolicyOptions:
        fields = {f.name: f for f in dataclasses.fields(cls)}
        hints = typing.get_type_hints(cls)
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            if key not in fields:
                known = ", ".join(sorted(fields)) or "none"
                raise ValueError(f"{key}: unknown option (options of this policy: {known})")
            kwargs[key] = _coerce(key, value, hints[key])
        opts = cls(**kwargs)
        opts.validate()
        return opts

    def validate(self) -> None:
        """Raise ValueError("name: problem") if a value is out of range."""


def _coerce(key: str, value: Any, hint: Any) -> Any:
    allowed = typing.get_args(hint) or (hint,)
    if isinstance(value, bool):
        if bool in allowed:
            return value
    elif isinstance(value, int) and int in allowed:
        return value
    elif isinstance(value, int | float) and float in allowed:
        return float(value)
    elif isinstance(value, str) and str in allowed:
        return value
    if value is None and type(None) in allowed:
        return None
    names = " or ".join(getattr(a, "__name__", str(a)) for a in allowed)
    raise ValueError(f"{key}: must be {names}, got {value!r}")


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled with mypyc (docs/build.md); policies subclass it
class Policy:
    """A scheduling policy.

    The core calls the hooks below with itself as a read-only ``view`` (a
    :class:`~mgst.core.scheduler.Scheduler`); hooks answer with decisions
    (:class:`Assign`, :class:`Cancel`, :class:`Hold`, :class:`SetTimer`,
    :class:`CancelTimer`), which the core checks and applies one by one, so a
    generator sees the effect of each decision it yielded. A policy owns no clock
    and draws random numbers only from ``self.rng``, which the driver seeds.

    The simplest policy overrides only :meth:`choose`; the core then does the
    matching. ``max_replicas``, ``resume_from_checkpoint`` and ``incremental``
    tell the core how to treat the policy.
    """

    name: ClassVar[str] = ""
    Options: ClassVar[type[PolicyOptions]] = PolicyOptions
    # How many replicas of one job may run at once; above 1, choose() may return running jobs.
    # (ClassVar: subclasses override it in their class body too, which compiled code reads only so)
    max_replicas: ClassVar[int] = 1
    # A new replica starts from the job's best checkpoint rather than from scratch.
    resume_from_checkpoint: ClassVar[bool] = True
    # choose() changes its answer only when a job arrives or the machine asks: the core
    # then offers an arriving job, or an asking machine, alone (Scheduler._match).
    incremental: ClassVar[bool] = True

    def __init__(self, options: PolicyOptions | None = None, rng: random.Random | None = None):
        self.options = options if options is not None else self.Options()
        self.rng = rng if rng is not None else random.Random(0)
        # The failure detector for machines that fall silent (MGST's per-job time-out); the driver
        # sets it from the experiment's [testbed] detection. None: silent machines are left alone.
        self.silence_timeouts: SilenceTimeouts | None = None

    # --- hooks -------------------------------------------------------------

    def queue_key(self, job: Job) -> Hashable:
        """Which queue a job waits in: its class by default, a task its bag's (keyed by the bag id)."""
        return job.job_class

    def start(self, view: Scheduler) -> Decisions:
        """Called once before any event."""
        return NOTHING

    def on_event(self, view: Scheduler, event: Event) -> Decisions:
        """Called after the core has applied any ``event`` (leave it alone if unused: it costs)."""
        return NOTHING

    def on_replica_start(self, view: Scheduler, replica: ReplicaRecord) -> Decisions:
        """A replica started (after matching): arm a per-replica timer here, for instance.

        Leave it alone if unused: it costs.
        """
        return NOTHING

    def on_replica_end(self, view: Scheduler, replica: ReplicaRecord) -> Decisions:
        """A replica ended: ``replica.outcome`` says how (done, cancelled, lost, timed out, failed).

        Called once per end, after the core has applied it and before matching; a
        late result of a replica given up on comes again with outcome DONE and
        ``replica.late`` set. Leave it alone if unused: it costs.
        """
        return NOTHING

    def on_capacity_change(self, view: Scheduler) -> Decisions:
        """A machine went up or down or changed its CPU share (re-plan here)."""
        return NOTHING

    def on_timer(self, view: Scheduler, key: Hashable) -> Decisions:
        """A timer this policy set with SetTimer(key, at) is due.

        A policy that overrides this passes keys it does not own to ``super().on_timer``
        (the silence time-outs' timers come here).
        """
        if self.silence_timeouts is not None:
            return self.silence_timeouts.on_timer(view, key)
        return NOTHING

    def on_machine_silent(self, view: Scheduler, machine: MachineRecord) -> Decisions:
        """The driver has not heard from ``machine`` for a while (it is not down): give up on its
        replicas, suspect it, or wait. By default the silence time-outs decide, if set."""
        if self.silence_timeouts is not None:
            return self.silence_timeouts.on_machine_silent(view, machine)
        return NOTHING

    def on_machine_heard(self, view: Scheduler, machine: MachineRecord) -> Decisions:
        """A silent machine spoke again (undo what on_machine_silent armed)."""
        if self.silence_timeouts is not None:
            return self.silence_timeouts.on_machine_heard(view, machine)
        return NOTHING

    def choose(self, view: Scheduler, machine: MachineRecord) -> JobRecord | None:
        """The job for a machine that asks for work, or None to keep its request held.

        A queued job gets its first replica; a running job (only if max_replicas > 1)
        gets another.
        """
        return None

    def choose_groups(self, view: Scheduler) -> Sequence[Hashable] | None:
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

    def dispatch(
        self, view: Scheduler, new_job: JobRecord | None, asking: MachineRecord | None
    ) -> Decisions:
        """Take matching over entirely: yield Assign and Hold for ready machines.

        Most policies leave this alone and implement :meth:`choose`; the core then
        matches (see :meth:`Scheduler._match`): it offers work to ready machines
        in request order, and a machine that gets nothing goes to the back of the
        ready queue (MGST's rotating server queue). Override it for gang
        allocation, batch matching or random machine choice. It is called after
        every event; ``new_job``/``asking`` are the core's word that the event's
        only change was this job entering a queue or this machine starting to
        ask (both None: anything may have changed).
        """
        raise NotImplementedError("the core matches with choose() unless a policy overrides dispatch()")
