"""Casanova et al.'s experiment on the testbed: one heuristic on one scenario's chains, beside its simulation.

The testbed run and the simulation drive the same core application (mgst.papers.casanova.instance.application:
the same heuristic with the same stream) on the same chain realisation: each gang member plays the markov3 wire
form of its worker's chain with the run's seed, which is the process the simulation plays for that worker in
trial 0 (mgst.availability: a puller plays replication 0). Transfers carry real bytes, ``bytes_per_slot`` for
each slot of T_prog and T_data (the experiment gives their length in slots at the per-worker bandwidth). The
wire is CURVE, with throw-away keys (one per member) made for the run in a folder of mode 0700 and removed after
it, unless ``insecure``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from mgst.availability import registry as availability
from mgst.availability.kind import WIRE_REPLICATION
from mgst.papers.casanova.instance import CAP, ITERATIONS, Scenario, application, run
from mgst.testbed.gang_local import local_members
from mgst.testbed.gang_run import GangRun, GangRunResult
from mgst.testbed.run_keys import throwaway_keys
from mgst.wire import security
from mgst.wire.gang_protocol import member_name

# Bytes a slot of transfer carries by default: T_prog = 5 w_min slots is 20 KiB at w_min = 1.
BYTES_PER_SLOT = 4096
TRIAL = WIRE_REPLICATION  # the trial whose realisation the members play


@dataclass(frozen=True)
class Beside:
    """A heuristic's makespan on the testbed and in simulation, in slots (None: a failure, past the cap)."""

    heuristic: str
    testbed: GangRunResult
    simulated: float | None

    @property
    def difference(self) -> float | None:
        """(testbed - simulated) / simulated."""
        if self.testbed.makespan is None or self.simulated is None:
            return None
        return (self.testbed.makespan - self.simulated) / self.simulated


def markov3_form(matrix: tuple[tuple[float, ...], ...], seed: int) -> tuple:
    """A worker's chain as the wire carries it: one-slot periods, RECLAIMED suspends (share 0)."""
    form = ("markov3", 1.0, 0.0, *(p for row in matrix for p in row), seed)
    problem = availability.wire_problem(form)
    if problem is not None:
        raise ValueError(problem)
    return form


def run_beside(s: Scenario, heuristic: str, seed: int, time_unit: float, bytes_per_slot: int = BYTES_PER_SLOT,
               iterations: int = ITERATIONS, cap: float = CAP, register_timeout: float = 60.0,
               insecure: bool = False) -> Beside:
    """``heuristic`` on ``s`` with local gang members on loopback, then its simulation on the same chains."""
    app = application(s, heuristic, TRIAL, seed, iterations=iterations)
    forms = [markov3_form(m, seed) for m in s.matrices]
    with contextlib.ExitStack() as stack:
        folder = None if insecure else stack.enter_context(throwaway_keys([member_name(q) for q in range(len(forms))]))
        keys = security.server_keys(folder) if folder is not None else None
        gang_run = GangRun(app, forms, time_unit, bytes_per_slot, proactive=app.policy.proactive, cap=cap,
                           register_timeout=register_timeout, keys=keys, insecure=insecure)
        try:
            with local_members(gang_run.endpoint, len(forms), folder):
                result = gang_run.run()
        finally:
            gang_run.close()
    simulated = run(s, heuristic, TRIAL, seed, iterations=iterations, cap=cap).makespan
    return Beside(heuristic, result, simulated)

__all__ = ["BYTES_PER_SLOT", "TRIAL", "Beside", "markov3_form", "run_beside"]
