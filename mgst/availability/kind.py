"""What an availability kind provides: the seam the experiment file, store, simulator, wire and checks use.

A kind is one module of ``mgst/availability/`` holding its model (the experiment's
``failures``), its process and one :class:`AvailabilityKind`; ``registry.py`` lists
the kinds. Nothing outside ``mgst/availability/`` tells kinds apart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol

from mgst.availability.grid_size import OverlayGrid
from mgst.availability.process import AvailabilityProcess, Period, State
from mgst.model import Experiment

# The replication whose streams a testbed run shares with the simulation beside it: a puller plays
# replication 0 of the run's seed.
WIRE_REPLICATION = 0


class ConfigHost(Protocol):
    """What a kind's parser uses of mgst.config's parser: every error names its key the same way."""

    path: str | None
    max_time: float

    def error(self, key: str, problem: str) -> Exception: ...

    def number(self, value: Any, key: str) -> float: ...

    def bounded(self, value: Any, key: str, low: float, high: float, unit: str) -> float: ...

    def require(self, table: Mapping[str, Any], section: str, key: str) -> Any: ...

    def string(self, value: Any, key: str) -> str: ...

    def file_name(self, value: Any, key: str) -> str: ...

    def name(self, value: Any, key: str) -> str: ...

    def nonempty_list(self, value: Any, key: str, what: str) -> list[Any]: ...

    def describe(self, value: Any) -> str: ...

    def suggest(self, key: str, known: Sequence[str]) -> str: ...


class AvailabilityKind:
    """One availability kind. Subclasses set the class attributes and override what applies.

    The wire form of a machine's availability is a tuple ``(name, *parameters)`` of plain values
    (``to_wire``); ``wire_problem`` checks its shape without trusting it (the protocol refuses a
    frame with a problem), ``from_wire`` builds the process a puller plays (ValueError, naming
    what is wrong, for values the law cannot take).
    """

    name: ClassVar[str]  # the experiment file's kind = "...", the wire's tag, the store's
    spec_type: ClassVar[type]  # its model (Experiment.failures)
    keys: ClassVar[tuple[str, ...]]  # its [availability] keys, "kind" included
    # Whether a machine's law depends on its [machines] group (group_count counts them).
    grouped: ClassVar[bool] = False

    # ---------------------------------------------------------------- experiment file and store

    def from_config(self, host: ConfigHost, table: Mapping[str, Any], section: str) -> tuple[Any, str]:
        """The model from its [availability] table, and the key a too-frequent process is blamed on."""
        raise NotImplementedError

    def to_plain(self, spec: Any) -> Any:
        """The model as JSON-able plain values (the run store keeps the experiment so)."""
        raise NotImplementedError

    def from_plain(self, plain: Any) -> Any:
        raise NotImplementedError

    def check(self, spec: Any, experiment: Experiment) -> None:
        """ValueError if the model does not fit the experiment's machines (checked once they are known)."""

    def group_count(self, spec: Any) -> int | None:
        """How many machine groups the model has (None: it has no groups)."""
        return None

    def group_names(self, spec: Any) -> tuple[str, ...] | None:
        """The names of the model's machine groups, where they have names (grids: a machine's ``grid`` attribute,
        and what ``[machines] group`` may give instead of a number); None otherwise."""
        return None

    def result_delays(self, spec: Any, experiment: Experiment) -> list[float] | None:
        """Each machine's mean delay from a result computed to the server having it (the simulator holds the
        replica meanwhile); None: no delay."""
        return None

    def overlay_grids(self, spec: Any, experiment: Experiment) -> list[OverlayGrid]:
        """The grids whose size the simulator's overlay drives (mgst.availability.grid_size); none by default."""
        return []

    def input_files(self, spec: Any) -> tuple[str, ...]:
        """The files the model reads (a trace's), so that a resumed run can tell one that changed."""
        return ()

    # ---------------------------------------------------------------- simulation

    def process(self, spec: Any, experiment: Experiment, seed: int, replication: int,
                machine: int) -> AvailabilityProcess:
        """Machine ``machine``'s periods, from its own seeded streams."""
        raise NotImplementedError

    # ---------------------------------------------------------------- wire

    def to_wire(self, spec: Any, experiment: Experiment, machine: int, seed: int, until: float,
                since: float = 0.0) -> tuple:
        """What a puller needs to play machine ``machine``'s process for replication 0 of ``seed`` (``until``: the
        model time the testbed run may last, a kind may send only what comes before; ``since``: the model time
        at which the puller starts playing, for a puller joining a run under way: a trace sends what is left of
        it, a random law draws afresh)."""
        raise NotImplementedError

    def wire_problem(self, form: Sequence[Any]) -> str | None:
        """What is wrong with a received wire form (its first item is this kind's name), or None."""
        raise NotImplementedError

    def wire_times(self, form: Sequence[Any]) -> tuple[float, ...]:
        """The model-time parameters of a valid wire form (a puller bounds them)."""
        raise NotImplementedError

    def from_wire(self, form: Sequence[Any], machine: int, share: float) -> AvailabilityProcess:
        """The process of a wire form (``share``: the welcome's a_j); ValueError saying what is wrong."""
        raise NotImplementedError

    # ---------------------------------------------------------------- long-run figures (checks, bounds)

    def capacity(self, spec: Any, experiment: Experiment) -> tuple[list[float], str]:
        """Each machine's long-run mean CPU share as a fraction of its a_j, and a note saying why."""
        raise NotImplementedError

    def cycles(self, spec: Any, experiment: Experiment, length: float) -> tuple[float, str]:
        """The expected changes of availability (each costs the simulator an event) on all machines over
        ``length`` model time units, and what implies them (for the error if there are too many)."""
        raise NotImplementedError

    def shortest_cycle(self, spec: Any, experiment: Experiment) -> float:
        """The shortest mean time between two failures of a machine (model time; inf: never down)."""
        raise NotImplementedError

    def longest_down(self, spec: Any, experiment: Experiment) -> float:
        """The longest mean down period of a machine (model time; 0: never down)."""
        raise NotImplementedError


# ---------------------------------------------------------------- helpers for kinds


def is_number(v: Any) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def is_natural(v: Any) -> bool:
    """An int in [0, 2**63) (not a bool): a seed numpy takes."""
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63


def group_of(experiment: Experiment, machine: int, count: int) -> int:
    """Machine ``machine``'s group (0-based) among ``count``: its ``group`` attribute (1-based); group 1 if
    there is one group."""
    m = experiment.machines[machine]
    g = m.attribute("group")
    if g is None and count == 1:
        g = 1
    if not isinstance(g, int) or isinstance(g, bool) or not 1 <= g <= count:
        raise ValueError(f"machine {m.name!r} has group {g!r}; need 1..{count}")
    return g - 1


def up_fraction_note(fractions: list[float], formula: str) -> str:
    """The overload warning's note on availabilities scaled by each machine's long-run up fraction."""
    if min(fractions) == max(fractions):
        return (f" (availabilities scaled by the long-run up fraction {formula} = {fractions[0]:.3f} "
                "because of failures)")
    return (f" (availabilities scaled by each machine's long-run up fraction {formula}, "
            f"{min(fractions):.3f} to {max(fractions):.3f}, because of failures)")


class UpDownDraws(Protocol):
    """Alternating period lengths of one machine, starting up (today's two laws draw so)."""

    def next_up(self) -> float: ...

    def next_down(self) -> float: ...


class UpDownProcess:
    """An up/down law as a process: UP at the machine's share, DOWN, UP, ... (draws in the law's own order)."""

    __slots__ = ("_draws", "_share", "_up")

    def __init__(self, draws: UpDownDraws, share: float):
        self._draws = draws
        self._share = share
        self._up = True  # the next period is an up period

    def next(self) -> Period:
        if self._up:
            self._up = False
            return Period(self._draws.next_up(), State.UP, self._share)
        self._up = True
        return Period(self._draws.next_down(), State.DOWN, 0.0)


def numeric_law_problem(kind: str, form: Sequence[Any], shape: str, length: int) -> str | None:
    """The common checks of a law sent as ``(kind, *numbers, seed)``: numbers, a natural seed, the length."""
    params = tuple(form[1:])
    if not all(is_number(x) for x in params):
        return f"{kind!r:.20} failure model: non-numeric or non-finite parameters {params!r:.80}"
    seed = params[-1] if params else None
    if not is_natural(seed):
        return f"{kind!r:.20} failure model: the seed must be a natural number, not {seed!r:.40}"
    if len(params) != length:
        return f"{shape}, got {params!r:.80}"
    return None


__all__ = [
    "WIRE_REPLICATION",
    "AvailabilityKind",
    "ConfigHost",
    "UpDownProcess",
    "group_of",
    "is_natural",
    "is_number",
    "numeric_law_problem",
    "up_fraction_note",
]
