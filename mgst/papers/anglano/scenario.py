"""Anglano & Canonico: its Desktop Grid configurations and BoT workloads as Experiments.

Section IV of the paper, read as docs/sweeps.md and docs/readings.md say. Model time is
seconds; a machine of computing power P runs P units of work per second, and a task's size is its
run time in seconds on the baseline machine (P = 1).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mgst.availability.weibull import ANGLANO_MTTF, DEFAULT_SHAPE, MAX_SHAPE, MIN_SHAPE, anglano_preset
from mgst.config.experiment import describe_value
from mgst.model import (
    BagStream,
    Experiment,
    JobClass,
    Machine,
    PolicySpec,
    SimulationSettings,
    StagingModel,
    WeibullGroup,
    WeibullNormalFailures,
)
from mgst.scenarios.scenario import Axis, RunSettings, Scenario, registered_policy

# Table II's three availability levels: the 15 machine groups' Weibull/Normal laws are
# mgst.availability.weibull's "anglano-<level>" presets (one copy of the table, shared with the
# experiment files' [availability] preset).
AVAILABILITY = ("high", "medium", "low")
HETEROGENEITY = ("homogeneous", "heterogeneous")

# Task classes (VS, S, M, L): granularity X in s at P = 1; a task's size is U[X/2, 3X/2].
TASK_CLASSES: tuple[tuple[str, float], ...] = (("VS", 1000.0), ("S", 5000.0), ("M", 25000.0), ("L", 125000.0))
SPREAD = 0.5
APPLICATION_SIZE = 3_600_000.0  # AS: the total work of one bag

# Table III, percentages of VS, S, M, L tasks as printed (Short, Med and Long sum to 98.9: see mix_fractions()).
MIXES: dict[str, tuple[float, float, float, float]] = {
    "All_VS": (100.0, 0.0, 0.0, 0.0),
    "All_S": (0.0, 100.0, 0.0, 0.0),
    "All_M": (0.0, 0.0, 100.0, 0.0),
    "All_L": (0.0, 0.0, 0.0, 100.0),
    "Uniform": (25.0, 25.0, 25.0, 25.0),
    "Short": (50.0, 16.3, 16.3, 16.3),
    "Med": (16.3, 16.3, 50.0, 16.3),
    "Long": (16.3, 16.3, 16.3, 50.0),
}
# Load factors L of the low, medium and high intensity workloads (Table IV's three lambda columns).
INTENSITY: dict[str, float] = {"low": 0.5, "medium": 0.75, "high": 0.95}

# The five BoT selection policies (each with WQR-FT), as the policy registry names them.
POLICIES = ("fcfs_excl", "fcfs_share", "rr", "rr_nrf", "long_idle")

# Checkpoint transfers before a resumed replica computes: U[240, 720] s (section IV-C).
CHECKPOINT_TRANSFER = (240.0, 720.0)

# The Weibull shape of the time to failure, which the paper does not print (read at call time,
# so it can be changed here; the experiment files' default is the same, docs/models.md).
DEFAULT_WEIBULL_SHAPE = DEFAULT_SHAPE

# Heterogeneous grids: P ~ U[2.3, 17.7] drawn with random.Random(GRID_SEED) (reproducible across
# Python versions), added until the total reaches 1000. 91 is the smallest seed whose draw has 93
# machines, as the paper's grid had; it gives sum P = 1003.84.
POWER_RANGE = (2.3, 17.7)
TOTAL_POWER = 1000.0
HOMOGENEOUS_POWER = 10.0
GRID_SEED = 91


def mix_fractions(name: str) -> tuple[float, ...]:
    """Table III's row ``name`` as fractions summing to 1 (rows printed as 98.9 % are renormalised)."""
    try:
        row = MIXES[name]
    except KeyError:
        raise ValueError(f"unknown mix {name!r}; known: {', '.join(MIXES)}") from None
    total = sum(row)
    return tuple(p / total for p in row)


def groups(availability: str, weibull_shape: float | None = None) -> tuple[WeibullGroup, ...]:
    """Table II's 15 groups at one availability level: Weibull(shape, MTTF) up, Normal repair."""
    if availability not in AVAILABILITY:
        raise ValueError(f"unknown availability {availability!r}; known: {', '.join(AVAILABILITY)}")
    shape = DEFAULT_WEIBULL_SHAPE if weibull_shape is None else weibull_shape
    if not shape > 0 or math.isinf(shape):
        raise ValueError(f"Weibull shape must be a positive number, got {shape}")
    return anglano_preset(f"anglano-{availability}", shape).groups


def powers(heterogeneity: str, seed: int = GRID_SEED) -> tuple[float, ...]:
    """Computing powers: 100 x 10, or U[2.3, 17.7] draws added until their sum reaches 1000."""
    if heterogeneity == "homogeneous":
        return (HOMOGENEOUS_POWER,) * round(TOTAL_POWER / HOMOGENEOUS_POWER)
    if heterogeneity != "heterogeneous":
        raise ValueError(f"unknown heterogeneity {heterogeneity!r}; known: {', '.join(HETEROGENEITY)}")
    rng = random.Random(seed)
    out: list[float] = []
    total = 0.0
    while total < TOTAL_POWER:
        p = rng.uniform(*POWER_RANGE)
        out.append(p)
        total += p
    return tuple(out)


def group_of(i: int) -> int:
    """Table II group (1..15) of machine i (1-based): ((i - 1) mod 15) + 1."""
    return (i - 1) % len(ANGLANO_MTTF) + 1


@dataclass(frozen=True, slots=True)
class Grid:
    """One Desktop Grid configuration: its machines, their failure laws, and Table IV's quantities."""

    availability: str
    heterogeneity: str
    machines: tuple[Machine, ...]
    failures: WeibullNormalFailures

    @property
    def effective_power(self) -> float:
        """Sum of EP_i = P_i * A_i, A_i = MTTF_i / (MTTF_i + MTTR_i) (Eqs. 3 and 9)."""
        total = 0.0
        for m in self.machines:
            g = self.failures.groups[m.attribute("group") - 1]
            total += m.attribute("power") * g.mttf / (g.mttf + g.repair_mean)
        return total

    def occupancy(self, application_size: float = APPLICATION_SIZE) -> float:
        """C = AS / sum EP_i (Eq. 8), in s."""
        return application_size / self.effective_power

    def bag_rate(self, intensity: str, application_size: float = APPLICATION_SIZE) -> float:
        """lambda = L / C (Eq. 7), bags per s."""
        try:
            load = INTENSITY[intensity]
        except KeyError:
            raise ValueError(f"unknown intensity {intensity!r}; known: {', '.join(INTENSITY)}") from None
        return load / self.occupancy(application_size)


def grid(availability: str, heterogeneity: str, seed: int = GRID_SEED, *,
         weibull_shape: float | None = None) -> Grid:
    """The configuration ``availability`` x ``heterogeneity``; ``seed`` draws heterogeneous powers."""
    ps = powers(heterogeneity, seed)
    n_classes = len(TASK_CLASSES)
    machines = tuple(
        Machine(name=f"M{i}", rates=(p,) * n_classes, availability=1.0,
                attributes=(("power", p), ("group", group_of(i))))
        for i, p in enumerate(ps, 1)
    )
    return Grid(availability, heterogeneity, machines, WeibullNormalFailures(groups(availability, weibull_shape)))


def experiment(
    availability: str,
    heterogeneity: str,
    mix: str,
    intensity: str,
    policy: str,
    *,
    weibull_shape: float | None = None,
    horizon: float,
    warmup: float,
    replications: int,
    seed: int,
    checkpoint_interval: float | None,
    max_bags: int | None = None,
    grid_seed: int = GRID_SEED,
    scale: float = 1.0,
) -> Experiment:
    """One cell of the paper's grid (without its replication index) as an Experiment; times in s.

    ``weibull_shape`` None takes DEFAULT_WEIBULL_SHAPE. The policy name is not checked here: the
    registry may not hold it yet. ``scale`` < 1 keeps that fraction of the machines (the first
    ones, so every group is represented while 15 or more are kept) and of the application size AS:
    tasks per machine, task sizes, the load factor and so the bag rate stay the paper's, at a
    fraction of the cost (for tests).
    """
    g = grid(availability, heterogeneity, seed=grid_seed, weibull_shape=weibull_shape)
    if not 0 < scale <= 1:
        raise ValueError(f"scale must be in (0, 1], got {scale!r}")
    if scale != 1.0:
        g = Grid(g.availability, g.heterogeneity, g.machines[: max(1, round(len(g.machines) * scale))], g.failures)
    fractions = mix_fractions(mix)
    name = f"anglano-{availability}-{heterogeneity}-{mix}-{intensity}-{policy}"
    return Experiment(
        name=name,
        classes=tuple(JobClass(n, 0.0, x) for n, x in TASK_CLASSES),
        machines=g.machines,
        policy=PolicySpec(policy),
        failures=g.failures,
        workload=BagStream(bag_rate=g.bag_rate(intensity, APPLICATION_SIZE * scale),
                           application_size=APPLICATION_SIZE * scale, mix=fractions,
                           spread=SPREAD, max_bags=max_bags),
        staging=StagingModel(resume=CHECKPOINT_TRANSFER),
        simulation=SimulationSettings(horizon=horizon, warmup=warmup, replications=replications, seed=seed,
                                      checkpoint_interval=checkpoint_interval),
        description=(f"Anglano & Canonico: {availability}-avail {heterogeneity} grid ({len(g.machines)} machines, "
                     f"sum EP {g.effective_power:.2f}), mix {mix}, {intensity} intensity "
                     f"(L = {INTENSITY[intensity]}), policy {policy}"),
    )


# --- the scenario as `mgst sweep` sees it ---------------------------------------------------------

def _build(cell: Mapping[str, str], settings: RunSettings, seed: int, replications: int,
           options: Mapping[str, Any]) -> Experiment:
    return experiment(
        cell["availability"], cell["heterogeneity"], cell["mix"], cell["intensity"], cell["policy"],
        weibull_shape=options["weibull_shape"], horizon=settings.horizon, warmup=settings.warmup,
        replications=replications, seed=seed, checkpoint_interval=settings.checkpoint_interval,
        max_bags=settings.max_bags, grid_seed=options["grid_seed"],
    )


def _option_defaults() -> dict[str, Any]:
    return {"weibull_shape": DEFAULT_WEIBULL_SHAPE, "grid_seed": GRID_SEED}


def _check_option(name: str, value: Any) -> str | None:
    if name == "weibull_shape":
        ok = isinstance(value, int | float) and not isinstance(value, bool) and MIN_SHAPE <= value <= MAX_SHAPE
        return None if ok else f"must be a number in [{MIN_SHAPE:g}, {MAX_SHAPE:g}], got {describe_value(value)}"
    if name == "grid_seed":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        return None if ok else f"must be an integer >= 0, got {describe_value(value)}"
    return "not an option of this scenario"


SCENARIO = Scenario(
    name="anglano",
    doc="Anglano & Canonico: 5 policies x 6 grids x 8 mixes x 3 intensities",
    axes=(
        Axis("policy", POLICIES, "BoT selection policy (each with WQR-FT)", open=True),
        Axis("availability", tuple(AVAILABILITY), "Table II column: high, medium or low availability"),
        Axis("heterogeneity", HETEROGENEITY, "100 machines of P = 10, or P ~ U[2.3, 17.7] up to sum P = 1000"),
        Axis("mix", tuple(MIXES), "Table III task mix"),
        Axis("intensity", tuple(INTENSITY), "load factor 0.5, 0.75 or 0.95"),
    ),
    build=_build,
    option_defaults=_option_defaults,
    check_option=_check_option,
    panels=("availability", "heterogeneity", "intensity"),
    groups="mix",
    bars="policy",
    check_value=registered_policy,
)
