"""The paper's on-line heuristics (its section VI): passive IP, IE, IY, IAY; proactive C-H; RANDOM.

A passive heuristic places the m tasks one by one on UP workers, each on the worker that makes the partial
configuration best by its criterion (ties: the lowest worker index): IP the largest probability of success
P, IE the smallest expected time E, IY the largest yield P / (t + E) (t: slots since the iteration began),
IAY the largest apparent yield P / E. A worker's transfers count its program unless it holds it, and one
data message per task. A passive heuristic keeps its configuration until a member goes DOWN.

A proactive C-H (C in P, E, Y) also builds H's configuration from scratch at each check and switches to it
when it is strictly better by C than the running one, updated for its progress (its transfers' and its
computation's work left). RANDOM deals each task to a uniformly drawn UP worker.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

from mgst.core.iterations import UP, Iterations
from mgst.papers.casanova.estimates import BUILDS_KEPT, Estimates

PASSIVE = ("IP", "IE", "IY", "IAY")
CRITERIA = ("P", "E", "Y")
NAMES = PASSIVE + tuple(f"{c}-{h}" for c in CRITERIA for h in PASSIVE) + ("RANDOM",)


def score(criterion: str, p: float, e: float, elapsed: float) -> float:
    """A criterion's value, larger better: P, -E, the yield P / (t + E), or the apparent yield P / E."""
    if criterion in ("IP", "P"):
        return p
    if criterion in ("IE", "E"):
        return -e
    if criterion in ("IY", "Y"):
        return p / (elapsed + e) if elapsed + e > 0 else float("inf")
    return p / e if e > 0 else float("inf")  # IAY


class Passive:
    """IP, IE, IY or IAY."""

    proactive = False
    clock_dependent = False

    def __init__(self, name: str, estimates: Estimates):
        if name not in PASSIVE:
            raise ValueError(f"unknown passive heuristic {name!r}")
        self.name, self.est = name, estimates

    def needs(self, app: Iterations, loads: Mapping[int, int]) -> dict[int, float]:
        est = self.est
        return {q: (0.0 if app.has_program[q] else est.t_prog) + x * est.t_data for q, x in loads.items()}

    def evaluate(self, app: Iterations, loads: Mapping[int, int]) -> tuple[float, float]:
        """(P, E) of a fresh configuration: every transfer still to do, the whole computation."""
        est, work, programs = self.est, app.work, app.has_program
        return est.configuration(tuple(sorted(
            (q, (0.0 if programs[q] else est.t_prog) + x * est.t_data, x * work[q]) for q, x in loads.items())))

    def build(self, app: Iterations, now: float) -> dict[int, int]:
        """The greedy configuration, memoised on what it depends on: who is UP, which of them hold the program,
        and for IY the slots spent in the iteration (the other criteria do not read the time)."""
        up = app.up()
        programs = app.has_program
        elapsed = now - app.iteration_start
        key = (self.name, app.tasks, app.max_tasks, tuple(up), tuple(programs[q] for q in up),
               elapsed if self.name == "IY" else None)
        builds = self.est.builds
        loads = builds.get(key)
        if loads is None:
            if len(builds) >= BUILDS_KEPT:
                builds.clear()
            loads = builds[key] = self._build(app, up, elapsed)
        return dict(loads)

    def _build(self, app: Iterations, up: list[int], elapsed: float) -> dict[int, int]:
        name, states = self.name, app.states
        loads: dict[int, int] = {}
        for _ in range(app.tasks):
            best = -1
            if name == "IY":  # the ranking moves with the time: score the UP options now (score(), inlined)
                best_score = -math.inf
                for q, p, e in self._options(app, loads):
                    if states[q] == UP:
                        s = p / (elapsed + e) if elapsed + e > 0 else math.inf
                        if best < 0 or s > best_score:
                            best, best_score = q, s
            else:
                for q in self._ranking(app, loads):
                    if states[q] == UP:
                        best = q
                        break
            if best < 0:
                break
            loads[best] = loads.get(best, 0) + 1
        return loads

    def _options(self, app: Iterations, loads: dict[int, int]) -> list[tuple[int, float, float]]:
        """Each worker with room that the next task may go to, in worker order, with the (P, E) of ``loads`` and
        that task, whether UP or not: the same for every criterion, every time and every set of UP workers, so
        memoised on ``loads`` and who holds the program (IY rebuilds at every slot, the others at every change)."""
        programs = app.has_program
        key = (app.max_tasks, tuple(programs), tuple(sorted(loads.items())))
        steps = self.est.steps
        options = steps.get(key)
        if options is None:
            if len(steps) >= BUILDS_KEPT:
                steps.clear()
            options = []
            for q, room in enumerate(app.max_tasks):
                if loads.get(q, 0) >= room:
                    continue
                trial = dict(loads)
                trial[q] = trial.get(q, 0) + 1
                options.append((q, *self.evaluate(app, trial)))
            steps[key] = options
        return options

    def _ranking(self, app: Iterations, loads: dict[int, int]) -> tuple[int, ...]:
        """The workers the next task may go to, best first by this (time-blind) criterion, ties to the lowest
        index: the first UP one is the greedy step's choice (as a scan of the UP options in worker order keeping
        the first strictly best). Memoised like :meth:`_options`."""
        key = (self.name, app.max_tasks, tuple(app.has_program), tuple(sorted(loads.items())))
        rankings = self.est.rankings
        ranking = rankings.get(key)
        if ranking is None:
            if len(rankings) >= BUILDS_KEPT:
                rankings.clear()
            name = self.name
            scored = sorted((-score(name, p, e, 0.0), q) for q, p, e in self._options(app, loads))
            ranking = rankings[key] = tuple(q for _, q in scored)
        return ranking

    def choose(self, app: Iterations, now: float) -> dict[int, int]:
        return self.build(app, now)

    def reconsider(self, app: Iterations, now: float) -> None:
        return None


class Proactive(Passive):
    """C-H: H's configurations, replaced when H's fresh one is strictly better by criterion C."""

    proactive = True

    def __init__(self, name: str, estimates: Estimates):
        criterion, _, passive = name.partition("-")
        if criterion not in CRITERIA:
            raise ValueError(f"unknown proactive heuristic {name!r}")
        super().__init__(passive, estimates)
        self.criterion, self.full_name = criterion, name
        # Y's value and IY's choices move with the slots spent in the iteration alone, with no event: such a
        # heuristic is checked every slot; the others only when something happens (mgst.sim.iterations).
        self.clock_dependent = criterion == "Y" or passive == "IY"
        # H's fresh configuration and its (P, E) depend on who is UP and who holds the program alone, unless
        # H is IY: kept for the last such state (a check every slot then costs one evaluation).
        self._fresh: tuple[tuple, dict[int, int], tuple[float, float]] | None = None

    def current(self, app: Iterations, now: float) -> tuple[float, float]:
        """(P, E) of the running configuration, updated for its progress."""
        work = app.work
        return self.est.configuration(tuple((q, app.comm_left(q, now), x * work[q]) for q, x in app.config.items()),
                                      app.compute_left(now))

    def candidate(self, app: Iterations, now: float) -> tuple[dict[int, int], tuple[float, float]]:
        """H's configuration from scratch now, and its (P, E)."""
        if self.name == "IY":
            fresh = self.build(app, now)
            return fresh, self.evaluate(app, fresh) if fresh else (0.0, math.inf)
        state = (tuple(app.states), tuple(app.has_program))
        if self._fresh is None or self._fresh[0] != state:
            fresh = self.build(app, now)
            self._fresh = (state, fresh, self.evaluate(app, fresh) if fresh else (0.0, math.inf))
        return self._fresh[1], self._fresh[2]

    def reconsider(self, app: Iterations, now: float) -> dict[int, int] | None:
        elapsed = now - app.iteration_start
        fresh, (p2, e2) = self.candidate(app, now)
        if not fresh or fresh == app.config:
            return None
        c = score(self.criterion, *self.current(app, now), elapsed)
        c2 = score(self.criterion, p2, e2, elapsed)
        return dict(fresh) if c2 > c else None


class Random:
    """RANDOM: each task to a uniformly drawn UP worker with room (its own stream)."""

    proactive = False
    clock_dependent = False
    name = "RANDOM"

    def __init__(self, rng: random.Random):
        self.rng = rng

    def choose(self, app: Iterations, now: float) -> dict[int, int]:
        loads: dict[int, int] = {}
        for _ in range(app.tasks):
            room = [q for q in app.up() if loads.get(q, 0) < app.max_tasks[q]]
            q = self.rng.choice(room)
            loads[q] = loads.get(q, 0) + 1
        return loads

    def reconsider(self, app: Iterations, now: float) -> None:
        return None


def heuristic(name: str, estimates: Estimates, rng: random.Random | None = None) -> Passive | Random:
    """The heuristic called ``name`` (one of NAMES)."""
    if name == "RANDOM":
        return Random(rng or random.Random(0))
    if name in PASSIVE:
        return Passive(name, estimates)
    if name in NAMES:
        return Proactive(name, estimates)
    raise ValueError(f"unknown heuristic {name!r}; one of {', '.join(NAMES)}")


__all__ = ["CRITERIA", "NAMES", "PASSIVE", "Passive", "Proactive", "Random", "heuristic", "score"]
