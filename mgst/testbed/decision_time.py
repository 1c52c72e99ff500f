"""The wall time a mapper spends in the scheduling core for the inputs it feeds it: the policy's decisions and the
core's own work, which the model takes to be instant (a slow policy holds every arrival, request and result)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class DecisionTime:
    """How many inputs the core handled, and the wall seconds it took: in all, and the longest."""

    inputs: int = 0
    total_s: float = 0.0
    longest_s: float = 0.0

    def add(self, seconds: float) -> None:
        """One input handled in ``seconds``."""
        self.inputs += 1
        self.total_s += seconds
        if seconds > self.longest_s:
            self.longest_s = seconds

    def plain(self) -> dict[str, Any]:
        """As the journal keeps it (its settings, at the run's end)."""
        return {"inputs": self.inputs, "total_s": self.total_s, "longest_s": self.longest_s}

    @classmethod
    def from_plain(cls, value: Any) -> DecisionTime | None:
        """What :meth:`plain` made; None for anything else."""
        if not is_plain(value):
            return None
        return cls(value["inputs"], float(value["total_s"]), float(value["longest_s"]))

    def summary(self, run_s: float) -> dict[str, Any]:
        """summary.json's figures: the inputs, their time in all, on average and the longest, and the share of the
        run's ``run_s`` wall seconds they took."""
        return {"inputs": self.inputs, "total_s": round(self.total_s, 6),
                "mean_ms": round(self.total_s / self.inputs * 1e3, 6) if self.inputs else None,
                "longest_ms": round(self.longest_s * 1e3, 6),
                "share_of_run": round(self.total_s / run_s, 6) if run_s > 0 else None}


def is_plain(value: Any) -> bool:
    """Whether ``value`` is what :meth:`DecisionTime.plain` makes (a journal's setting, checked before use)."""
    if not isinstance(value, dict) or set(value) != {"inputs", "total_s", "longest_s"}:
        return False
    inputs, total, longest = value["inputs"], value["total_s"], value["longest_s"]
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
                  for v in (total, longest))
    return isinstance(inputs, int) and not isinstance(inputs, bool) and inputs >= 0 and numbers
