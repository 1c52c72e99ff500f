"""LPAS_DG's options, from ``[policy]`` keys.

A module of their own, not compiled with the policy: mypyc would lose their union types, which
PolicyOptions.from_mapping reads to check values.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from mgst.policies.base import PolicyOptions

# server_choice's values: the core's rotating ready queue (MGST's first implementation), or the idle
# eligible machine that serves the class fastest (our reading of LPAS for clusters; docs/policies.md).
SERVER_CHOICES = ("fcfs", "lpas")
# The smallest arrival_threshold and rate_threshold: an estimate tested against a threshold t is trusted from
# (2 / t)^2 samples (lpas_fixes.min_samples), 4e8 at 1e-4, more than any run sees; a smaller one would only
# overflow that count.
MIN_THRESHOLD = 1e-4
# How far arrival_estimate_scale and rate_estimate_scale may take the belief from the file's values: the
# experiments use 1/1.2 and 1.25; a belief off by more than a factor of 1000 is no estimate, and could leave
# the LP's coefficients outside what its solver takes (1e-9 to 1e15) though the file's are inside.
MAX_ESTIMATE_SCALE = 1e3
# resolve_debounce's words: "auto" (by the number of machines; the default) and "off" (every change re-solves).
DEBOUNCE_WORDS = ("auto", "off")


@dataclasses.dataclass(frozen=True)
class LpasOptions(PolicyOptions):
    # delta*_ij above this counts as non-zero: class i is eligible on machine j.
    tolerance: float = 1e-9
    # T_system of MGST section 4.3.1: also re-solve every this many time units (None: never).
    resolve_period: float | None = None
    # Use the CPU share a_j that machines report (True) or the experiment's nominal a_j.
    reported_share: bool = True
    # Simplex variant for the allocation LP: "dual" or "primal". When the LP has several
    # optimal vertices they may differ in their zeros, hence in eligibility.
    lp_method: str = "primal"
    # Re-solve at most once per this many time units when machines go up or down or change their share
    # ("off" or None: at every such change, as the paper). A change that leaves a class with a positive arrival
    # rate no eligible machine that is up re-solves at once; the others wait for the interval's end. "auto":
    # off below AUTO_DEBOUNCE_MACHINES machines; from there, AUTO_DEBOUNCE_JOB_FRACTION of the shortest mean
    # job time (mgst.papers.mgst.lpas.auto_debounce).
    resolve_debounce: float | str | None = "auto"
    # --- MGST section 4.3's fixes (docs/policies.md, "LPAS_DG's fixes"); each off by default.
    # 4.3.2 (1), T_arrival_rate: every this many time units compare each class's observed arrival rate
    # with the one the LP used, and re-solve with the observed rates if one differs by more than
    # arrival_threshold (Th_arrival_rate, a fraction of the LP's rate).
    arrival_check_period: float | None = None
    arrival_threshold: float = 0.1
    # 4.3.2 (2): learn mu'_ij from measured compute times; re-solve when one moves more than this fraction
    # from the value the LP used.
    rate_threshold: float | None = None
    # 4.3.2 (3), Eq. 4-5: multiply each rate by p_ij = compute time / holding time, estimated online.
    delay_correction: bool = False
    # 4.3.2 (4): give up on a replica at this many times its expected time, and suspect its machine.
    timeout_factor: float | None = None
    # 4.3.1: which idle machine an arriving job goes to: "fcfs" (the rotating ready queue) or "lpas".
    server_choice: str = "fcfs"
    # 4.3.1, T_system: False re-solves only every resolve_period, not at machines' up/down/share changes.
    resolve_on_events: bool = True
    # The policy's belief, for experiments: it takes arrival rates as the file's times this, and mu'_ij
    # as the file's times rate_estimate_scale (the file stays the truth the drivers run).
    arrival_estimate_scale: float = 1.0
    rate_estimate_scale: float = 1.0
    # The class (its name in the file) whose arrival rate arrival_estimate_scale applies to, and the machine
    # (its name) whose rates rate_estimate_scale applies to; None: every class, every machine. (A scale
    # applied to every class or every machine alike changes neither the LP's plan nor choose(): only one
    # that singles some out does.)
    arrival_estimate_class: str | None = None
    rate_estimate_machine: str | None = None
    class_name_options: ClassVar[tuple[str, ...]] = ("arrival_estimate_class",)
    # Periodic timers: a run's length over each is checked against MAX_JOBS when an experiment is read.
    period_options: ClassVar[tuple[str, ...]] = ("resolve_period", "arrival_check_period")
    machine_name_options: ClassVar[tuple[str, ...]] = ("rate_estimate_machine",)

    def validate(self) -> None:
        if not 0.0 <= self.tolerance < 1.0:  # (a share of a machine's time: from 1 on, no class is eligible anywhere)
            raise ValueError(f"tolerance: must be >= 0 and < 1 (delta*_ij is a share of machine j's time), got "
                             f"{self.tolerance}")
        if self.resolve_period is not None and not (self.resolve_period > 0.0 and math.isfinite(self.resolve_period)):
            raise ValueError(f"resolve_period: must be a finite number > 0, got {self.resolve_period}")
        debounce = self.resolve_debounce
        if isinstance(debounce, str):
            if debounce not in DEBOUNCE_WORDS:
                raise ValueError(f"resolve_debounce: must be a number > 0, \"auto\" or \"off\", got {debounce!r}")
        elif debounce is not None and not (debounce > 0.0 and math.isfinite(debounce)):
            raise ValueError(f"resolve_debounce: must be > 0, got {debounce}")
        if self.lp_method not in ("dual", "primal"):
            raise ValueError(f"lp_method: must be 'dual' or 'primal', got {self.lp_method!r}")
        positive = (("arrival_check_period", self.arrival_check_period), ("timeout_factor", self.timeout_factor),
                    ("arrival_threshold", self.arrival_threshold), ("rate_threshold", self.rate_threshold),
                    ("arrival_estimate_scale", self.arrival_estimate_scale),
                    ("rate_estimate_scale", self.rate_estimate_scale))
        for key, value in positive:
            if value is not None and not (value > 0.0 and math.isfinite(value)):
                raise ValueError(f"{key}: must be a positive number, got {value}")
        for key, value in (("arrival_threshold", self.arrival_threshold), ("rate_threshold", self.rate_threshold)):
            if value is not None and value < MIN_THRESHOLD:
                raise ValueError(f"{key}: must be at least {MIN_THRESHOLD:g}, got {value}")
        for key, value in (("arrival_estimate_scale", self.arrival_estimate_scale),
                           ("rate_estimate_scale", self.rate_estimate_scale)):
            if not 1.0 / MAX_ESTIMATE_SCALE <= value <= MAX_ESTIMATE_SCALE:
                raise ValueError(f"{key}: must be between {1.0 / MAX_ESTIMATE_SCALE:g} and {MAX_ESTIMATE_SCALE:g}, "
                                 f"got {value}")
        if self.server_choice not in SERVER_CHOICES:
            raise ValueError(f"server_choice: must be one of {', '.join(map(repr, SERVER_CHOICES))}, "
                             f"got {self.server_choice!r}")
        if not self.resolve_on_events and self.resolve_period is None:
            raise ValueError("resolve_on_events: false needs resolve_period (T_system): the LP would never be "
                             "re-solved")
        if not self.resolve_on_events and not isinstance(self.resolve_debounce, str | None):
            raise ValueError("resolve_on_events: false re-solves at no capacity change, so resolve_debounce "
                             "has nothing to debounce; set one of them")

    @property
    def fixes(self) -> bool:
        """Whether any of section 4.3's fixes (or a belief other than the file's) is on."""
        return (self.arrival_check_period is not None or self.rate_threshold is not None or self.delay_correction
                or self.timeout_factor is not None or self.server_choice != "fcfs" or not self.resolve_on_events
                or self.arrival_estimate_scale != 1.0 or self.rate_estimate_scale != 1.0)
