"""The Policy base class: the core's hooks (mgst.core.hooks) with options, a random stream and silence time-outs."""

from __future__ import annotations

import dataclasses
import random
import typing
from collections.abc import Hashable, Iterable, Mapping
from typing import Any, ClassVar, Final

from mypy_extensions import mypyc_attr

from mgst.core.decisions import Decision
from mgst.core.hooks import NO_DECISIONS, PolicyHooks
from mgst.core.state import MachineRecord
from mgst.core.view import View

if typing.TYPE_CHECKING:
    from mgst.policies.timeouts import SilenceTimeouts

Decisions = Iterable[Decision]
NOTHING: Final[tuple[Decision, ...]] = NO_DECISIONS


@mypyc_attr(allow_interpreted_subclasses=True)  # each policy's options subclass it
@dataclasses.dataclass(frozen=True)
class PolicyOptions:
    """Base of every policy's options: a frozen dataclass, filled from ``[policy]`` keys."""

    # A subclass may list, in class attributes ``class_name_options`` and ``machine_name_options`` (tuples
    # of field names), the options whose value names one of the experiment's classes or machines; loading
    # the file checks them (mgst.policies.check_names). Not declared here: compiled, this dataclass would
    # take them for fields.

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
    names = " or ".join(_WORDS.get(a, getattr(a, "__name__", str(a))) for a in allowed)
    # (as the file has it: TOML's true, not Python's True)
    got = (f"the string {value!r}" if isinstance(value, str) else
           f"{str(value).lower()} (a boolean)" if isinstance(value, bool) else f"{value!r}")
    raise ValueError(f"{key}: must be {names}, got {got}")


# How an option's type reads in an error ("must be a number or absent, got the string '50'").
_WORDS: Final = {bool: "true or false", int: "a whole number", float: "a number", str: "a string",
                 type(None): "absent"}


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled with mypyc (docs/build.md); policies subclass it
class Policy(PolicyHooks):
    """A scheduling policy: the core's hooks (mgst.core.hooks.PolicyHooks), with options, a seeded
    random stream and MGST's silence time-outs.

    The core calls the hooks below with a read-only ``view`` (a :class:`~mgst.core.view.View`);
    hooks answer with decisions (:class:`Assign`, :class:`Cancel`, :class:`Hold`, :class:`SetTimer`,
    :class:`CancelTimer`, ...), which the core checks and applies one by one. A policy owns no
    clock and draws random numbers only from ``self.rng``, which the driver seeds.

    A policy **declares** the hooks it defines: ``hooks = frozenset({"choose"})`` (a subclass adds
    to its bases'). The core calls only declared hooks, and refuses a policy whose class defines a
    hook it does not declare. The simplest policy declares and defines only :meth:`choose`; the
    core then does the matching. ``max_replicas``, ``resume_from_checkpoint`` and ``incremental``
    tell the core how to treat the policy.
    """

    name: ClassVar[str] = ""
    Options: ClassVar[type[PolicyOptions]] = PolicyOptions
    # The silence time-outs' three hooks (below); every policy has them.
    hooks: ClassVar[frozenset[str]] = frozenset({"on_timer", "on_machine_silent", "on_machine_heard"})

    def __init__(self, options: PolicyOptions | None = None, rng: random.Random | None = None):
        self.options = options if options is not None else self.Options()
        self.rng = rng if rng is not None else random.Random(0)
        # The failure detector for machines that fall silent (MGST's per-job time-out); the driver
        # sets it from the experiment's [testbed] detection. None: silent machines are left alone.
        self.silence_timeouts: SilenceTimeouts | None = None

    def report(self) -> dict[str, float]:
        """Counts of the run for its output (the simulation's summary, the testbed's summary.json), by
        name; {} (the default) adds nothing. Read once, when the run ends."""
        return {}

    # --- hooks (the others: mgst.core.hooks.PolicyHooks) -------------------

    def on_timer(self, view: View, key: Hashable) -> Decisions:
        """A timer this policy set with SetTimer(key, at) is due.

        A policy that overrides this passes keys it does not own to ``super().on_timer``
        (the silence time-outs' timers come here).
        """
        if self.silence_timeouts is not None:
            return self.silence_timeouts.on_timer(view, key)
        return NOTHING

    def on_machine_silent(self, view: View, machine: MachineRecord) -> Decisions:
        """The driver has not heard from ``machine`` for a while (it is not down): give up on its
        replicas, suspect it, or wait. By default the silence time-outs decide, if set."""
        if self.silence_timeouts is not None:
            return self.silence_timeouts.on_machine_silent(view, machine)
        return NOTHING

    def on_machine_heard(self, view: View, machine: MachineRecord) -> Decisions:
        """A silent machine spoke again (undo what on_machine_silent armed)."""
        if self.silence_timeouts is not None:
            return self.silence_timeouts.on_machine_heard(view, machine)
        return NOTHING
