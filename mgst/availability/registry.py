"""The availability kinds, and the one seam through which the simulator, the wire, the adjuster and the checks use them.

Adding a kind: one module with its model, its process and its :class:`AvailabilityKind`,
listed in KINDS below. ``None`` (kind = "always") is a machine always up at its a_j.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mgst.availability.exponential import KIND as EXPONENTIAL
from mgst.availability.grid_size import OverlayGrid
from mgst.availability.grids import KIND as GRIDS
from mgst.availability.kind import AvailabilityKind
from mgst.availability.markov3 import KIND as MARKOV3
from mgst.availability.process import AvailabilityProcess
from mgst.availability.trace import KIND as TRACE
from mgst.availability.weibull import KIND as WEIBULL
from mgst.model import Experiment

KINDS: tuple[AvailabilityKind, ...] = (EXPONENTIAL, WEIBULL, MARKOV3, TRACE, GRIDS)
BY_NAME: dict[str, AvailabilityKind] = {k.name: k for k in KINDS}
_BY_TYPE: dict[type, AvailabilityKind] = {k.spec_type: k for k in KINDS}
# [availability] kind -> its keys; "always" is no model (machines never fail).
CONFIG_KINDS: dict[str, tuple[str, ...]] = {"always": ("kind",), **{k.name: k.keys for k in KINDS}}


def kind_of(spec: Any) -> AvailabilityKind:
    """The kind of an experiment's availability model (not None)."""
    kind = _BY_TYPE.get(type(spec))
    if kind is None:
        raise TypeError(f"unknown availability model {spec!r:.80}")
    return kind


# ---------------------------------------------------------------- simulation


def make_process(experiment: Experiment, seed: int, replication: int, machine: int) -> AvailabilityProcess | None:
    """Machine ``machine``'s availability process, from its own streams; None when it is always up at its a_j."""
    spec = experiment.failures
    if spec is None:
        return None
    return kind_of(spec).process(spec, experiment, seed, replication, machine)


def check(experiment: Experiment) -> None:
    """ValueError if the availability model does not fit the experiment's machines (e.g. a trace without them)."""
    spec = experiment.failures
    if spec is not None:
        kind_of(spec).check(spec, experiment)


def group_count(spec: Any) -> int | None:
    """How many machine groups the availability model has (None: none, or no model)."""
    return None if spec is None else kind_of(spec).group_count(spec)


def group_names(spec: Any) -> tuple[str, ...] | None:
    """The names of the availability model's machine groups (grids), or None."""
    return None if spec is None else kind_of(spec).group_names(spec)


def result_delays(experiment: Experiment) -> list[float] | None:
    """Each machine's mean returned-result delay under the availability model (grids), or None: none."""
    spec = experiment.failures
    delays = None if spec is None else kind_of(spec).result_delays(spec, experiment)
    return delays if delays is not None and any(d > 0 for d in delays) else None


def overlay_grids(experiment: Experiment) -> list[OverlayGrid]:
    """The grids whose size the simulator's overlay drives (none without a model, or with a fixed set of hosts)."""
    spec = experiment.failures
    return [] if spec is None else kind_of(spec).overlay_grids(spec, experiment)


def input_files(spec: Any) -> tuple[str, ...]:
    """The files the availability model reads (none without a model)."""
    return () if spec is None else kind_of(spec).input_files(spec)


# ---------------------------------------------------------------- store


def to_plain(spec: Any) -> Any:
    """The model as the run store keeps it: None, [mean_up, mean_down] (exponential), or a dict with a kind."""
    return None if spec is None else kind_of(spec).to_plain(spec)


def from_plain(plain: Any) -> Any:
    if plain is None:
        return None
    if isinstance(plain, list):  # (stores written before kinds had names)
        return EXPONENTIAL.from_plain(plain)
    kind = BY_NAME.get(plain.get("kind"))
    if kind is None:
        raise ValueError(f"unknown availability kind {plain.get('kind')!r:.40} in the run store")
    return kind.from_plain(plain)


# ---------------------------------------------------------------- wire


def to_wire(experiment: Experiment, machine: int, seed: int, until: float, since: float = 0.0) -> tuple | None:
    """What machine ``machine``'s puller needs to play its availability (None: always up); ``until``: the
    model time the testbed run may last; ``since``: the model time the puller starts playing it (a puller
    joining a run under way)."""
    spec = experiment.failures
    if spec is None:
        return None
    return kind_of(spec).to_wire(spec, experiment, machine, seed, until, since)


def _wire_kind(form: Any) -> tuple[AvailabilityKind | None, str | None]:
    if not isinstance(form, list | tuple) or not form:
        return None, f"a failure model is a non-empty tuple, not {form!r:.80}"
    kind = BY_NAME.get(form[0]) if isinstance(form[0], str) else None
    if kind is None:
        return None, (f"unknown failure model {form[0]!r:.40}; expected one of "
                      f"{', '.join(repr(k.name) for k in KINDS)}")
    return kind, None


def wire_problem(form: Any) -> str | None:
    """What is wrong with a received availability wire form, or None if the protocol may accept it."""
    kind, problem = _wire_kind(form)
    return problem if kind is None else kind.wire_problem(form)


def wire_times(form: Sequence[Any]) -> tuple[float, ...]:
    """The model-time parameters of a valid wire form (a puller bounds them)."""
    kind, _ = _wire_kind(form)
    return () if kind is None else kind.wire_times(form)


def process_from_wire(form: Any, machine: int, share: float) -> AvailabilityProcess:
    """The process a puller plays for a wire form (``share``: its welcome's a_j); ValueError, naming what is
    wrong, for anything else (an unknown kind, a wrong length, values the law cannot take)."""
    kind, problem = _wire_kind(form)
    if kind is None:
        raise ValueError(problem)
    return kind.from_wire(form, machine, share)


# ---------------------------------------------------------------- long-run figures


def capacity(experiment: Experiment) -> tuple[list[float], str]:
    """Each machine's long-run mean CPU share as a fraction of its a_j (all 1 without failures), and a note."""
    spec = experiment.failures
    if spec is None:
        return [1.0] * len(experiment.machines), ""
    return kind_of(spec).capacity(spec, experiment)


def cycles(experiment: Experiment, length: float) -> tuple[float, str]:
    """The expected changes of availability on all machines over ``length`` model time units, and why."""
    spec = experiment.failures
    if spec is None:
        return 0.0, ""
    return kind_of(spec).cycles(spec, experiment, length)


def shortest_cycle(spec: Any, experiment: Experiment) -> float:
    """The shortest mean time between two failures of a machine (inf without failures)."""
    return float("inf") if spec is None else kind_of(spec).shortest_cycle(spec, experiment)


def longest_down(spec: Any, experiment: Experiment) -> float:
    """The longest mean down period of a machine (0 without failures)."""
    return 0.0 if spec is None else kind_of(spec).longest_down(spec, experiment)


__all__ = [
    "BY_NAME",
    "CONFIG_KINDS",
    "KINDS",
    "capacity",
    "check",
    "cycles",
    "from_plain",
    "group_count",
    "kind_of",
    "longest_down",
    "make_process",
    "overlay_grids",
    "process_from_wire",
    "shortest_cycle",
    "to_plain",
    "to_wire",
    "wire_problem",
    "wire_times",
]
