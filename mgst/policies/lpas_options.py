"""LPAS_DG's options, from ``[policy]`` keys.

A module of their own, not compiled with the policy: mypyc would lose their union types, which
PolicyOptions.from_mapping reads to check values.
"""

from __future__ import annotations

import dataclasses

from mgst.policies.base import PolicyOptions


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
    # (None: at every such change, as the paper). A change that leaves a class with a positive arrival
    # rate no eligible machine that is up re-solves at once; the others wait for the interval's end.
    resolve_debounce: float | None = None

    def validate(self) -> None:
        if not self.tolerance >= 0.0:
            raise ValueError(f"tolerance: must be >= 0, got {self.tolerance}")
        if self.resolve_period is not None and not self.resolve_period > 0.0:
            raise ValueError(f"resolve_period: must be > 0, got {self.resolve_period}")
        if self.resolve_debounce is not None and not self.resolve_debounce > 0.0:
            raise ValueError(f"resolve_debounce: must be > 0, got {self.resolve_debounce}")
        if self.lp_method not in ("dual", "primal"):
            raise ValueError(f"lp_method: must be 'dual' or 'primal', got {self.lp_method!r}")
