"""One problem instance of the paper's experiment: its scenario (chains, speeds) and a trial (a realisation)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mgst.availability.markov3 import Markov3Group, Markov3Process
from mgst.core.iterations import Iterations
from mgst.papers.casanova.estimates import Estimates, paper_matrix
from mgst.papers.casanova.heuristics import heuristic
from mgst.sim.iterations import IterationsRun, run_iterations
from mgst.sim.replay import Recording
from mgst.streams import Purpose, python_random

PROCESSORS = 20
ITERATIONS = 10
CAP = 1_000_000.0


@dataclass(frozen=True)
class Scenario:
    """m, n_com, w_min and the drawn platform: each worker's chain and its slots per task."""

    m: int
    n_com: int
    w_min: int
    matrices: tuple[tuple[tuple[float, float, float], ...], ...]
    work: tuple[int, ...]

    @property
    def t_data(self) -> int:
        return self.w_min

    @property
    def t_prog(self) -> int:
        return 5 * self.w_min


def scenario(m: int, n_com: int, w_min: int, seed: int, index: int, p: int = PROCESSORS) -> Scenario:
    """Scenario ``index`` of (m, n_com, w_min): chains as the paper draws them, w_q ~ U[w_min, 10 w_min]
    rounded to whole slots. Its stream depends on (seed, m, n_com, w_min, index) alone."""
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy=seed,
                                                                     spawn_key=(m, n_com, w_min, index))))
    matrices = tuple(paper_matrix(rng) for _ in range(p))
    work = tuple(int(round(rng.uniform(w_min, 10 * w_min))) for _ in range(p))
    return Scenario(m, n_com, w_min, matrices, work)


def realisation(s: Scenario, trial: int, seed: int) -> list[Recording]:
    """Trial ``trial``'s availability realisation of ``s``: each worker's chain from its own stream, drawn as
    far as the runs replaying it ask."""
    return [Recording(Markov3Process(Markov3Group(m, 1.0), 1.0, seed, trial, q)) for q, m in enumerate(s.matrices)]


def run(s: Scenario, name: str, trial: int, seed: int, exact: bool = False, checks: str = "events",
        cap: float = CAP, iterations: int = ITERATIONS, estimates: Estimates | None = None,
        chains: list[Recording] | None = None, mu: int = 0, reuse_data: bool = False) -> IterationsRun:
    """Heuristic ``name`` on trial ``trial`` of ``s``: every heuristic sees the same chain realisation (the
    trial's streams, one per worker), so trials use common random numbers; every worker starts UP. ``chains``:
    the trial's :func:`realisation`, shared by the runs of one instance (drawn here without it). ``mu``: the
    most tasks a worker may hold (mu_q, the same for all; 0: m, no limit). ``reuse_data``: the survivors of a DOWN
    keep their data (mgst.core.iterations.Iterations)."""
    app = application(s, name, trial, seed, exact=exact, iterations=iterations, estimates=estimates, mu=mu,
                      reuse_data=reuse_data)
    recordings = chains if chains is not None else realisation(s, trial, seed)
    return run_iterations(app, [r.replay() for r in recordings], cap=cap, checks=checks, proactive=app.policy.proactive)


def application(s: Scenario, name: str, trial: int, seed: int, exact: bool = False, iterations: int = ITERATIONS,
                estimates: Estimates | None = None, mu: int = 0, reuse_data: bool = False) -> Iterations:
    """The core's application for heuristic ``name`` on ``s``, its policy drawing trial ``trial``'s stream: what
    the simulator (:func:`run`) and the testbed (mgst.testbed.casanova_beside) both drive."""
    est = estimates or Estimates(s.matrices, s.n_com, s.t_prog, s.t_data, exact=exact)
    policy = heuristic(name, est, python_random(seed, trial, Purpose.POLICY, 0))
    return Iterations([float(w) for w in s.work], s.m, iterations, s.t_prog, s.t_data, s.n_com, policy,
                      max_tasks=(mu,) * len(s.work) if mu else None, reuse_data=reuse_data)


__all__ = ["CAP", "ITERATIONS", "PROCESSORS", "Scenario", "application", "realisation", "run", "scenario"]
