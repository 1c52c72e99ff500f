"""Alternating exponential up and down periods, independent per machine (MGST's FE settings)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from mgst.availability.kind import (
    WIRE_REPLICATION,
    AvailabilityKind,
    ConfigHost,
    UpDownProcess,
    numeric_law_problem,
    up_fraction_note,
)
from mgst.availability.process import AvailabilityProcess
from mgst.draws import ExpStream
from mgst.model import Experiment, FailureModel
from mgst.streams import Purpose, generator


class ExponentialUpDown:
    """Up- and down-period lengths of one machine, from its own seeded stream."""

    def __init__(self, model: FailureModel, seed: int, replication: int, machine: int):
        rng = generator(seed, replication, Purpose.FAILURES, machine)
        self.next_up = ExpStream(rng, model.mean_up, batch=64)
        self.next_down = ExpStream(rng, model.mean_down, batch=64)


class ExponentialKind(AvailabilityKind):
    """``kind = "exponential"`` (or a [failures] section): mean_up, mean_down.

    Wire: ``("exponential", mean_up, mean_down, seed)``.
    """

    name = "exponential"
    spec_type = FailureModel
    keys = ("kind", "mean_up", "mean_down")

    def from_config(self, host: ConfigHost, table: Mapping[str, Any], section: str) -> tuple[FailureModel, str]:
        if table.get("mean_up") in (math.inf, "inf"):  # (an exponential law of infinite mean: no law at all)
            raise host.error(f"{section}.mean_up", "must be a positive number of time units, got inf: machines that "
                                                   "never fail are [availability] kind = \"always\" (or no "
                                                   "[availability] at all)")
        up, down = (
            host.bounded(host.require(table, section, k), f"{section}.{k}", 0.0, host.max_time, "time units")
            for k in ("mean_up", "mean_down")
        )
        return FailureModel(up, down), f"{section}.mean_up"

    def to_plain(self, spec: FailureModel) -> Any:
        return [spec.mean_up, spec.mean_down]

    def from_plain(self, plain: Any) -> FailureModel:
        return FailureModel(*plain)

    def process(self, spec: FailureModel, experiment: Experiment, seed: int, replication: int,
                machine: int) -> AvailabilityProcess:
        draws = ExponentialUpDown(spec, seed, replication, machine)
        return UpDownProcess(draws, experiment.machines[machine].availability)

    def to_wire(self, spec: FailureModel, experiment: Experiment, machine: int, seed: int, until: float,
                since: float = 0.0) -> tuple:
        return (self.name, spec.mean_up, spec.mean_down, seed)

    def wire_problem(self, form: Sequence[Any]) -> str | None:
        problem = numeric_law_problem(self.name, form, "an exponential failure model is (mean_up, mean_down, seed)", 3)
        if problem is None and not (form[1] > 0 and form[2] > 0):
            problem = f"exponential failure model: need mean_up > 0 and mean_down > 0, got {tuple(form[1:])!r:.80}"
        return problem

    def wire_times(self, form: Sequence[Any]) -> tuple[float, ...]:
        return (form[1], form[2])

    def from_wire(self, form: Sequence[Any], machine: int, share: float) -> AvailabilityProcess:
        problem = self.wire_problem(form)
        if problem is not None:
            raise ValueError(problem)
        draws = ExponentialUpDown(FailureModel(float(form[1]), float(form[2])), form[3], WIRE_REPLICATION, machine)
        return UpDownProcess(draws, share)

    def capacity(self, spec: FailureModel, experiment: Experiment) -> tuple[list[float], str]:
        up = spec.mean_up / (spec.mean_up + spec.mean_down)
        return [up] * len(experiment.machines), up_fraction_note([up], "mean_up/(mean_up+mean_down)")

    def cycles(self, spec: FailureModel, experiment: Experiment, length: float) -> tuple[float, str]:
        cycle = spec.mean_up + spec.mean_down
        return len(experiment.machines) * length / cycle, f"mean_up + mean_down = {cycle:g} time units"

    def shortest_cycle(self, spec: FailureModel, experiment: Experiment) -> float:
        return spec.mean_up + spec.mean_down

    def longest_down(self, spec: FailureModel, experiment: Experiment) -> float:
        return spec.mean_down


KIND = ExponentialKind()
