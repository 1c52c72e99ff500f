"""The discrete-event simulator: the event loop, the availability feed, replications and their summary, the event
heap (and its C twin), the testbed's overheads redrawn, and the sweep's default bag cell.

The public names are re-exported here (``from mgst.sim import Simulation``) and loaded at their first use, so that
importing one of the simulator's modules (a sweep worker's ``mgst.sim.loop``) loads only what that module needs;
mgst's own code imports them from their modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mgst.sim.loop import MachineSummary, ReplicationRun, Simulation
    from mgst.sim.replications import jobs_part, run_simulation

# Each public name -> the module that defines it.
_EXPORTS = {
    "MachineSummary": "mgst.sim.loop",
    "ReplicationRun": "mgst.sim.loop",
    "Simulation": "mgst.sim.loop",
    "jobs_part": "mgst.sim.replications",
    "run_simulation": "mgst.sim.replications",
}

__all__ = ["MachineSummary", "ReplicationRun", "Simulation", "jobs_part", "run_simulation"]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module at its first use (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
