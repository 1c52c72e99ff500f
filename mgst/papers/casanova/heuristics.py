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
from collections.abc import Iterator, Mapping
from typing import Any

from mypy_extensions import mypyc_attr

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


@mypyc_attr(allow_interpreted_subclasses=True)  # tests and researchers subclass it
class Passive:
    """IP, IE, IY or IAY."""

    proactive = False
    clock_dependent = False

    def __init__(self, name: str, estimates: Estimates):
        if name not in PASSIVE:
            raise ValueError(f"unknown passive heuristic {name!r}")
        self.name, self.est = name, estimates
        # The last build's key (name, tasks, limits), UP workers, their programs and (loads, steps): _unchanged.
        self._last: tuple | None = None

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
        and for IY the slots spent in the iteration (the other criteria do not read the time). Not in the memo,
        it is first derived from the last build (:meth:`_unchanged`), else built."""
        up = app.up()
        programs = app.has_program
        elapsed = now - app.iteration_start
        up_key, programs_key = tuple(up), tuple([programs[q] for q in up])
        key = (self.name, app.tasks, app.max_tasks, up_key, programs_key, elapsed if self.name == "IY" else None)
        builds = self.est.builds
        built = builds.get(key)
        if built is None:
            if len(builds) >= BUILDS_KEPT:
                builds.clear()
            last = self._last
            if last is not None and last[0] == key[:3] and self._unchanged(app, last, up_key, programs_key):
                built = last[3]  # (the same steps too: each choice's value reads only the chosen)
            else:
                built = self._build(app, up, elapsed)
            builds[key] = built
        if self.name != "IY":
            self._last = (key[:3], up_key, programs_key, built)
        return dict(built[0])

    def _build(self, app: Iterations, up: list[int], elapsed: float) -> tuple[dict[int, int], tuple | None]:
        """The greedy build from scratch, and (but for IY) its steps: each one's choice and what it was worth."""
        if self.name == "IY":  # the yield moves with the time
            return self._iy_horizon(app, up, elapsed)[0], None
        loads: dict[int, int] = {}
        steps = []
        slots = self._slots(app, up)
        for _ in range(app.tasks):
            best, best_score = -1, -math.inf
            for q, v in self._step(app, slots, loads):  # the first strictly best in worker order
                if best < 0 or v > best_score:  # type: ignore[operator]
                    best, best_score = q, v
            if best < 0:
                break
            steps.append((best, best_score))
            loads[best] = loads.get(best, 0) + 1
        return loads, tuple(steps)

    def _unchanged(self, app: Iterations, last: tuple, up: tuple[int, ...], programs: tuple[bool, ...]) -> bool:
        """Whether the greedy build for the UP workers ``up`` (holding the program as ``programs`` says) is the
        last one's (IP, IE, IAY: their values do not move with the time): :func:`_came` finds nothing that
        forces a new build, and no worker that has come would win a step: at each of the last build's steps,
        from the same partial loads, it is worth less than that step's choice, or as much but later in worker
        order (the first strictly best wins)."""
        if not self.est.derive:
            return False
        _, last_up, last_programs, (_, steps) = last
        chosen = [q for q, _ in steps]
        came = _came(app, last_up, last_programs, chosen, up, programs)
        if came is None:
            return False
        for (best, best_value), options in zip(steps, self._newcomers(app, chosen, came)):
            if best_value != best_value:  # NaN: the first option in worker order won, whatever it was worth
                return False
            for q, v in options:
                if v > best_value or (v == best_value and q < best) or v != v:  # type: ignore[operator]
                    return False
        return True

    def _newcomers(self, app: Iterations, chosen: list[int], came: list[int]) -> Iterator[list[tuple[int, Any]]]:
        """For each step of a build that chose the workers ``chosen`` in turn, lazily: what each worker of
        ``came`` is worth there, from that step's partial loads (:meth:`_values`, filled here where missing)."""
        has_program = app.has_program
        loads: dict[int, int] = {}
        for best in (chosen if came else ()):
            values = self._values(loads, has_program)
            options = []
            for q in came:
                slot = 2 * q + has_program[q]
                v = values.get(slot)
                if v is None:
                    v = values[slot] = self._value(app, loads, q)
                options.append((q, v))
            yield options
            loads[best] = loads.get(best, 0) + 1

    @staticmethod
    def _slots(app: Iterations, up: list[int]) -> list[tuple[int, int]]:
        """The options a build may take, made once for it: each worker of ``up`` allowed a task, in worker order,
        with its memo slot ``2 q + holds the program``."""
        programs, max_tasks = app.has_program, app.max_tasks
        return [(q, 2 * q + programs[q]) for q in up if max_tasks[q] > 0]

    def _step(self, app: Iterations, slots: list[tuple[int, int]], loads: dict[int, int]) -> list[tuple[int, Any]]:
        """A greedy step's options from ``loads``: each of ``slots`` (:meth:`_slots`) with room, in worker order,
        with what it is worth (:meth:`_values`, filled here for the options not looked at before)."""
        max_tasks = app.max_tasks
        values = self._values(loads, app.has_program)
        full = [q for q, x in loads.items() if x >= max_tasks[q]]  # (no room: not an option)
        options = []
        for q, slot in slots:
            if full and q in full:
                continue
            v = values.get(slot)
            if v is None:
                v = values[slot] = self._value(app, loads, q)
            options.append((q, v))
        return options

    def _values(self, loads: dict[int, int], programs: list[bool]) -> dict[int, object]:
        """The memo of a greedy step from ``loads``: what each option (worker q, whether it holds the program,
        as ``2 q + holds``) is worth by this criterion (for IY, its (P, E): the yield moves with the time). An
        option's (P, E) depends on ``loads``, who of them holds the program, and q alone, not on who is UP, so
        the memo serves every set of UP workers, filled only for the options a step looked at."""
        key = (self.name, tuple([(q, x, programs[q]) for q, x in sorted(loads.items())]))
        steps = self.est.steps
        values = steps.get(key)
        if values is None:
            if len(steps) >= BUILDS_KEPT:
                steps.clear()
            values = steps[key] = {}
        return values

    def _value(self, app: Iterations, loads: dict[int, int], q: int) -> object:
        trial = dict(loads)
        trial[q] = trial.get(q, 0) + 1
        p, e = self.evaluate(app, trial)
        return (p, e) if self.name == "IY" else score(self.name, p, e, 0.0)

    def _iy_horizon(self, app: Iterations, up: list[int], elapsed: float
                    ) -> tuple[dict[int, int], float, tuple[tuple[int, float, float], ...]]:
        """IY's greedy build, the slots after ``elapsed`` before which it cannot change (math.inf: not before
        an event): each step's choice b stays while no other UP option q's yield reaches b's; and its steps,
        each one's choice with its (P, E)."""
        loads: dict[int, int] = {}
        horizon = math.inf
        steps = []
        slots = self._slots(app, up)
        for _ in range(app.tasks):
            options = self._step(app, slots, loads)
            if not options:
                break
            best, pb, eb, best_score = -1, 0.0, 0.0, -math.inf
            for q, (p, e) in options:  # the first strictly best yield in worker order (score(), inlined)
                s = p / (elapsed + e) if elapsed + e > 0 else math.inf
                if best < 0 or s > best_score:
                    best, pb, eb, best_score = q, p, e, s
            for q, (p, e) in options:
                if q != best and horizon > 1:
                    horizon = min(horizon, _yield_reaches(p, e, pb, eb, elapsed))
            steps.append((best, pb, eb))
            loads[best] = loads.get(best, 0) + 1
        return loads, horizon, tuple(steps)

    def choose(self, app: Iterations, now: float) -> dict[int, int]:
        return self.build(app, now)

    def reconsider(self, app: Iterations, now: float) -> dict[int, int] | None:
        return None


@mypyc_attr(allow_interpreted_subclasses=True)  # tests and researchers subclass it
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
        # heuristic is checked also at the slots :meth:`next_check` names; the others only when something
        # happens (mgst.core.iterations.Iterations.next_check).
        self.clock_dependent = criterion == "Y" or passive == "IY"
        # H's fresh configuration and its (P, E) depend on who is UP and who holds the program alone, unless
        # H is IY: kept for the last such state (a check every slot then costs one evaluation).
        self._fresh: tuple[tuple, dict[int, int], tuple[float, float]] | None = None
        # IY's last build: (state, from, until, loads, UP workers, their programs, steps), the same for elapsed
        # slots in [from, until) in that state (_iy).
        self._iy_kept: tuple | None = None

    def current(self, app: Iterations, now: float) -> tuple[float, float]:
        """(P, E) of the running configuration, updated for its progress (the paper's reading; Estimates.credit
        and Estimates.present give the others tried)."""
        work, est = app.work, self.est
        config, credit = app.config, est.credit
        if credit == "none":  # as a fresh configuration on the same workers
            programs = app.has_program
            members = tuple((q, (0.0 if programs[q] else est.t_prog) + x * est.t_data, x * work[q])
                            for q, x in config.items())
        else:
            members = tuple((q, app.comm_left(q, now), x * work[q]) for q, x in config.items())
        left = app.compute_left(now) if credit == "all" else None  # None: the whole computation
        if est.present:  # its RECLAIMED members estimated from their present state
            return est.configuration(members, left, frozenset(q for q in config if app.states[q] != UP))
        return est.configuration(members, left)

    def candidate(self, app: Iterations, now: float) -> tuple[dict[int, int], tuple[float, float]]:
        """H's configuration from scratch now, and its (P, E); empty where the UP workers cannot hold the tasks."""
        if self.name == "IY":
            fresh = dict(self._iy(app, now - app.iteration_start)[0])
            return (fresh, self.evaluate(app, fresh)) if sum(fresh.values()) == app.tasks else ({}, (0.0, math.inf))
        state = (tuple(app.states), tuple(app.has_program))
        if self._fresh is None or self._fresh[0] != state:
            fresh = self.build(app, now)
            self._fresh = ((state, fresh, self.evaluate(app, fresh)) if sum(fresh.values()) == app.tasks
                           else (state, {}, (0.0, math.inf)))
        return self._fresh[1], self._fresh[2]

    def reconsider(self, app: Iterations, now: float) -> dict[int, int] | None:
        elapsed = now - app.iteration_start
        fresh, (p2, e2) = self.candidate(app, now)
        if not fresh or fresh == app.config:
            return None
        pc, ec = self.current(app, now)
        c = score(self.criterion, pc, ec, elapsed)
        c2 = score(self.criterion, p2, e2, elapsed)
        return dict(fresh) if c2 > c else None

    def next_check(self, app: Iterations, now: float) -> float:
        """The first slot after ``now`` at which, with no event in between, a look might switch: a lower bound,
        so that checking then and at every event decides as checking every slot does (math.inf: not before an
        event). Asked after a look at ``now`` (which kept the configuration, or switched to H's fresh one).

        Between events every rate is fixed, so the running configuration only progresses or stalls: its P
        never falls and its E never rises (each is a monotone function of the work left, in floating point
        too). A criterion that reads no time (P, E) therefore never prefers a fixed candidate later if it did
        not now; only IY's candidate moves, where its greedy's choice at some step may change (a crossing of
        two options' yields, linear in the time). Y compares P2 / (t + E2) with Pc(t) / (t + Ec(t)), and with
        the running configuration's values at ``now`` that is bounded by a comparison linear in t. Each
        crossing is solved in reals with a relative slack (``SLACK``) far above floating point's rounding, and
        the bound rounded down, so a near-tie is looked at, never skipped."""
        if not self.clock_dependent or not app.config or app.finished():
            return math.inf
        elapsed = now - app.iteration_start
        slots = self._iy(app, elapsed)[1] - elapsed if self.name == "IY" else math.inf
        if self.criterion == "Y" and slots > 1:
            fresh, (p2, e2) = self.candidate(app, now)
            if fresh and fresh != app.config:
                pc, ec = self.current(app, now)
                slots = min(slots, _yield_reaches(p2, e2, pc, ec, elapsed))
        return now + slots

    def _iy(self, app: Iterations, elapsed: float) -> tuple[dict[int, int], float]:
        """IY's greedy build after ``elapsed`` slots of the iteration, and until when (in elapsed slots) it stays
        the same with no event: kept for the state it was built in, and used again within that time; in another
        state, derived from it where it stands (:meth:`_iy_derived`), else built."""
        states, programs = app.states, app.has_program
        state = (tuple(states), tuple(programs))
        kept = self._iy_kept
        if kept is not None and kept[1] <= elapsed < kept[2]:
            if kept[0] == state:
                return kept[3], kept[2]
            up = tuple([q for q, st in enumerate(states) if st == UP])
            up_programs = tuple([programs[q] for q in up])
            until = self._iy_derived(app, kept, up, up_programs, elapsed)
            if until is not None:
                self._iy_kept = (state, elapsed, until, kept[3], up, up_programs, kept[6])
                return kept[3], until
        up_list = app.up()
        loads, slots, steps = self._iy_horizon(app, up_list, elapsed)
        self._iy_kept = (state, elapsed, elapsed + slots, loads, tuple(up_list),
                         tuple([programs[q] for q in up_list]), steps)
        return loads, elapsed + slots

    def _iy_derived(self, app: Iterations, kept: tuple, up: tuple[int, ...], programs: tuple[bool, ...],
                    elapsed: float) -> float | None:
        """Until when (elapsed slots) the kept IY build stands for the UP workers ``up`` at ``elapsed`` (within
        its time), or None: :func:`_came` finds nothing that forces a new build, and no worker that has come wins
        a step now (a larger yield than that step's choice, or as large and earlier in worker order). Its time
        ends where a worker that came may reach a step's choice (:func:`_yield_reaches`), or where the kept one
        ended: those that left can only have put that off, so it is a lower bound, as a horizon must be."""
        if not self.est.derive:
            return None
        steps = kept[6]
        chosen = [b for b, _, _ in steps]
        came = _came(app, kept[4], kept[5], chosen, up, programs)
        if came is None:
            return None
        until = kept[2]
        for (best, pb, eb), options in zip(steps, self._newcomers(app, chosen, came)):
            sb = pb / (elapsed + eb) if elapsed + eb > 0 else math.inf
            if sb != sb:
                return None
            for q, (p, e) in options:
                sq = p / (elapsed + e) if elapsed + e > 0 else math.inf
                if sq > sb or (sq == sb and q < best) or sq != sq:
                    return None
                if until > elapsed + 1:
                    until = min(until, elapsed + _yield_reaches(p, e, pb, eb, elapsed))
        return until


def _came(app: Iterations, last_up: tuple[int, ...], last_programs: tuple[bool, ...], chosen: list[int],
          up: tuple[int, ...], programs: tuple[bool, ...]) -> list[int] | None:
    """The workers UP now and not at a greedy build's (that may take a task), or None where that build cannot
    stand for the one now: it ran out of options (``chosen``, a worker per step, fewer than the tasks), a worker
    UP at both gained or lost the program, or a worker it chose has left. A worker that left and was chosen at no
    step was the best of none, so every step's choice stands without it."""
    if len(chosen) < app.tasks:
        return None
    had = dict(zip(last_up, last_programs))
    came = []
    max_tasks = app.max_tasks
    for q, holds in zip(up, programs):
        held = had.pop(q, None)
        if held is None:
            if max_tasks[q] > 0:
                came.append(q)
        elif held != holds:
            return None
    if not had.keys().isdisjoint(chosen):  # (had: now those that left)
        return None
    return came


# Relative slack on a crossing of two criteria's values: floating point's rounding of the few operations behind
# a value is below 1e-15; a crossing is taken as possible once it is within this margin.
SLACK = 1e-9


def _yield_reaches(p: float, e: float, pb: float, eb: float, elapsed: float) -> float:
    """The first k >= 1, or a lower bound on it, at which the yield p / (t + e) may reach pb / (t + eb), at
    t = elapsed + k (math.inf: never): p (t + eb) - pb (t + e), linear in t, within SLACK of 0 or above."""
    a = p - pb + SLACK * (p + pb)
    b = p * eb - pb * e + SLACK * (p * eb + pb * e)
    if not (math.isfinite(a) and math.isfinite(b)) or a * (elapsed + 1) + b > 0:
        return 1
    if a <= 0:
        return math.inf
    return max(1, math.floor(-b / a - elapsed))


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
