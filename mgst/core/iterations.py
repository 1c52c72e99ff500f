"""Tightly-coupled iterations: a master that runs m tasks per iteration as a gang of workers fed over its link.

The model of Casanova, Dufossé, Robert and Vivien's "Scheduling Tightly-Coupled Applications on Heterogeneous
Desktop Grids", as a state machine on the core's progress seam: each iteration's m tasks go to a *configuration*
``{worker: tasks}`` that a policy chooses; every enrolled worker first receives the program (which it keeps
until it goes DOWN) and one data message per task (kept while the configuration holds the worker) over the
master's link (:class:`~mgst.core.link.MasterLink`), then the configuration computes as one
:class:`~mgst.core.gang.Gang`. A DOWN member loses the iteration's computation, its program and its data; a
worker that leaves the configuration loses its data and any transfer in flight (queued again, from scratch).

The driver reports events (:meth:`ended` at an :class:`~mgst.core.decisions.Eta`'s time, :meth:`state_changed`
when a worker's availability changes), then, once every event of that instant is in, calls :meth:`settle`
(a new configuration where the old one broke or an iteration ended) and, for a proactive policy, :meth:`check`;
:meth:`instant` does all of that for one instant, in the order both drivers (the simulator and the testbed)
use. Each returns the Etas whose ends moved. Pure: no clock, no randomness (the policy brings its own).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from mypy_extensions import mypyc_attr

from mgst.core.gang import Gang
from mgst.core.link import MasterLink
from mgst.core.progress import Progress
from mgst.model import Availability

UP, RECLAIMED, DOWN = int(Availability.UP), int(Availability.RECLAIMED), int(Availability.DOWN)
PROGRAM, DATA, GANG = "program", "data", "gang"


class IterationDone(NamedTuple):
    """Iteration ``index`` (from 0) completed at ``time``."""

    index: int  # type: ignore[assignment]  # shadows tuple.index, as the log has always named it
    time: float


class Reconfigured(NamedTuple):
    """The configuration became ``configuration`` at ``time``; ``why``: start, down, iteration, proactive."""

    time: float
    configuration: tuple[tuple[int, int], ...]
    why: str


class ConfigurationPolicy(Protocol):
    """What an iterations policy decides: configurations. ``choose`` is asked for one whenever there is none
    and the UP workers can hold the tasks within their limits (:meth:`Iterations.room`: an iteration starts, a
    member went DOWN, too few were UP); ``reconsider`` (proactive policies) may replace the running one, or
    return None to keep it."""

    def choose(self, app: Iterations, now: float) -> Mapping[int, int]: ...

    def reconsider(self, app: Iterations, now: float) -> Mapping[int, int] | None: ...

    # Optional: ``next_check(app, now) -> float``, the first time after ``now`` at which ``reconsider`` might
    # switch with no event in between (a lower bound; math.inf: never), and ``clock_dependent``, true when a
    # policy without it must be looked at every slot (its look reads the time). See Iterations.next_check.


@mypyc_attr(allow_interpreted_subclasses=True)  # tests and researchers subclass it
class Iterations:
    """One tightly-coupled application on ``len(work)`` workers; worker q computes a task in ``work[q]`` units."""

    def __init__(self, work: Sequence[float], tasks: int, iterations: int, t_prog: float, t_data: float,
                 n_com: int, policy: ConfigurationPolicy, max_tasks: Sequence[int] | None = None,
                 reuse_data: bool = False):
        if tasks < 1 or iterations < 1 or t_prog < 0 or t_data < 0 or not work or min(work) <= 0:
            raise ValueError("tasks and iterations at least 1, transfer times at least 0, work positive")
        self.work = tuple(work)
        self.tasks = tasks
        self.iterations = iterations
        self.t_prog, self.t_data = t_prog, t_data
        self.max_tasks = tuple(max_tasks) if max_tasks is not None else (tasks,) * len(work)  # mu_q
        if len(self.max_tasks) != len(self.work) or min(self.max_tasks) < 0:
            raise ValueError(f"one limit mu_q >= 0 per worker: {len(self.work)} workers, limits {self.max_tasks}")
        if sum(self.max_tasks) < tasks:  # (the paper assumes sum mu_q >= m: else no configuration can be formed)
            raise ValueError(f"the workers' limits mu_q sum to {sum(self.max_tasks)}, fewer than the {tasks} tasks of "
                             "an iteration: no configuration could ever hold them")
        self.policy = policy
        # When a member goes DOWN, the others keep the data they received, and their transfers go on, for the next
        # configuration to use if it keeps them (the paper's section VI: "a worker that has not become DOWN but has
        # already received task data, can reuse that data if the scheduler reassigns tasks to it"); else (the
        # default, docs/readings.md) the configuration ends for all and every member receives its data again.
        self.reuse_data = reuse_data
        self.link = MasterLink(n_com)
        self.progress = Progress()
        self.states = [UP] * len(work)
        self.has_program = [False] * len(work)
        self.data_held: dict[int, int] = {}  # data messages a member holds for this iteration
        self.pending: dict[int, list[Hashable]] = {}  # a member's queued transfers, in queue order
        self.config: dict[int, int] = {}
        self.gang: Gang | None = None
        self.done = 0  # iterations completed
        self.iteration_start = 0.0
        self.config_start = 0.0
        self.needs_config = True
        self.why = "start"
        self.log: list[Any] = []  # IterationDone and Reconfigured, in order
        self._ids = itertools.count()

    # ------------------------------------------------------------------ what policies read

    def finished(self) -> bool:
        return self.done >= self.iterations

    def up(self) -> list[int]:
        return [q for q, s in enumerate(self.states) if s == UP]

    def comm_left(self, q: int, now: float) -> float:
        """Transfer time member ``q`` still needs (its queued transfers' work left)."""
        queue = self.link.queue
        return sum(queue[k].activity.remaining(now) for k in self.pending.get(q, ()))

    def alive(self, key: Hashable) -> bool:
        """Whether ``key`` still names a running activity (an Eta of a cancelled one is stale)."""
        gang = self.gang
        return key in self.link.queue or (gang is not None and gang.key == key and not gang.lost)

    def compute_left(self, now: float) -> float:
        """Simultaneous computation the running configuration still needs (0 without one)."""
        return self.gang.remaining(now) if self.gang is not None else 0.0

    # ------------------------------------------------------------------ events

    def ended(self, now: float, key: Hashable) -> list[Any]:
        """The activity ``key`` reached its end (the time of its latest Eta)."""
        out: list[Any] = []
        self.progress.out = out
        kind = key[0]  # type: ignore[index]
        if kind == GANG:
            assert self.gang is not None and self.gang.key == key
            self.log.append(IterationDone(self.done, now))
            self.done += 1
            self._drop_configuration(tuple(self.config))
            self.iteration_start = now
            self.needs_config, self.why = not self.finished(), "iteration"
            return out
        t = self.link.remove(key)
        self.pending[t.worker].remove(key)
        if kind == PROGRAM:
            self.has_program[t.worker] = True
        else:
            self.data_held[t.worker] += 1
        self._refresh(now)
        return out

    def state_changed(self, now: float, q: int, state: int) -> list[Any]:
        """Worker ``q``'s availability became ``state``."""
        out: list[Any] = []
        self.progress.out = out
        self.states[q] = state
        self.link.worker_state(q, state)
        if state == DOWN:
            self.has_program[q] = False
            if q not in self.config and q in self.data_held:  # a survivor of a DOWN, between configurations
                self._release(q)
        if q in self.config:
            if state == DOWN:  # the iteration's computation is lost, and this member's program and data
                # (with reuse_data, the others keep theirs, until the next configuration lets them go)
                self._drop_configuration((q,) if self.reuse_data else tuple(self.config))
                self.needs_config, self.why = True, "down"
            else:
                assert self.gang is not None
                self.gang.member_state(q, state)
        elif not self.pending.get(q):  # no transfer of q on the link and q not in the gang: no rate moves
            return out
        self._refresh(now)
        return out

    def settle(self, now: float) -> list[Any]:
        """Every event of ``now`` is in: choose a configuration where one is needed and can be had."""
        out: list[Any] = []
        self.progress.out = out
        if self.needs_config and not self.finished() and self.room():
            self._configure(now, self.policy.choose(self, now), self.why)
        return out

    def room(self) -> bool:
        """Whether the UP workers can hold an iteration's tasks within their limits (mu_q each)."""
        tasks, max_tasks = self.tasks, self.max_tasks
        free = 0
        for q, s in enumerate(self.states):
            if s == UP:
                free += max_tasks[q]
                if free >= tasks:
                    return True
        return False

    def next_check(self, now: float) -> float:
        """When a proactive policy must look again with no event in between (math.inf: at the next event): the
        policy's ``next_check`` if it has one, else the next slot for a policy whose look reads the time alone
        (``clock_dependent``), else never. Asked after an instant's look."""
        policy = self.policy
        ask = getattr(policy, "next_check", None)
        if ask is not None:
            return float(ask(self, now))
        return math.floor(now) + 1.0 if getattr(policy, "clock_dependent", False) else math.inf

    def check(self, now: float) -> list[Any]:
        """A proactive policy's look at the running configuration: it may replace it."""
        out: list[Any] = []
        self.progress.out = out
        if self.config and not self.finished():
            new = self.policy.reconsider(self, now)
            if new is not None and dict(new) != self.config:
                self._configure(now, new, "proactive")
        return out

    def instant(self, now: float, ends: Iterable[Hashable], changes: Iterable[tuple[int, int]],
                check: bool) -> list[Any]:
        """Everything that happened at slot boundary ``now``, in the one order both drivers use: the ends due
        (each completed during the slot before; a key no longer running is skipped), then the availability
        changes ``(worker, state)``, then :meth:`settle` and, when ``check`` (a proactive policy's look is due),
        :meth:`check` and :meth:`settle` again. Returns the Etas of every step, in order."""
        out: list[Any] = []
        for key in ends:
            if self.alive(key):
                out += self.ended(now, key)
        for q, state in changes:
            out += self.state_changed(now, q, state)
        if self.finished():
            return out
        out += self.settle(now)
        if check:
            out += self.check(now)
            out += self.settle(now)
        return out

    # ------------------------------------------------------------------ the configuration's life

    def _configure(self, now: float, config: Mapping[int, int], why: str) -> None:
        new = {q: x for q, x in config.items() if x > 0}
        workers = len(self.states)
        if sum(new.values()) != self.tasks or any(
                not 0 <= q < workers or self.states[q] != UP or x > self.max_tasks[q] for q, x in new.items()):
            raise ValueError(f"a configuration places {self.tasks} tasks on UP workers within their limits: {new}")
        if self.gang is not None:  # a running configuration is dropped: its computation is lost
            self.gang.lost = True
            self.progress.apply(now, self.gang)
        for q in sorted(self.data_held.keys() | self.config.keys()):  # (the members, and any survivors of a DOWN)
            if q not in new:
                self._release(q)
        for q, x in new.items():
            held = self.data_held.setdefault(q, 0)
            pending = self.pending.setdefault(q, [])
            if held > x:
                self.data_held[q] = held = x
            data = [k for k in pending if k[0] == DATA]  # type: ignore[index]
            for k in data[x - held:]:  # more in flight than still needed: cancel the last queued
                self.link.remove(k)
                pending.remove(k)
            if not self.has_program[q] and not any(k[0] == PROGRAM for k in pending):  # type: ignore[index]
                self._queue(now, q, PROGRAM, self.t_prog)
            for _ in range(x - held - min(len(data), x - held)):
                self._queue(now, q, DATA, self.t_data)
        self.config = dict(sorted(new.items()))
        self.gang = Gang((GANG, next(self._ids)), [(q, x, self.work[q]) for q, x in self.config.items()], now)
        for q in self.config:
            self.gang.member_state(q, self.states[q])
        self.config_start = now
        self.needs_config = False
        self.log.append(Reconfigured(now, tuple(self.config.items()), why))
        self._refresh(now)

    def _queue(self, now: float, q: int, kind: str, size: float) -> None:
        if size <= 0:  # nothing to send
            if kind == PROGRAM:
                self.has_program[q] = True
            else:
                self.data_held[q] += 1
            return
        key = (kind, q, next(self._ids))
        self.link.add(now, key, q, size)
        self.pending[q].append(key)

    def _release(self, q: int) -> None:
        """Worker ``q`` leaves the configuration: its transfers in flight are cancelled, its data dropped."""
        for k in self.pending.pop(q, ()):
            self.link.remove(k)
        self.data_held.pop(q, None)

    def _drop_configuration(self, leaving: tuple[int, ...]) -> None:
        """No configuration runs any more; the members ``leaving`` let go of what they hold (the others keep it, as
        survivors of a DOWN, until the next configuration keeps them or lets them go)."""
        for q in leaving:
            self._release(q)
        self.config = {}
        self.gang = None

    def _refresh(self, now: float) -> None:
        """Re-apply both rules: the link's ports, then whether the gang computes."""
        self.progress.apply(now, self.link)
        gang = self.gang
        if gang is not None:
            gang.ready = all(not self.pending[q] and self.has_program[q] and self.data_held[q] == x
                             for q, x in self.config.items())
            self.progress.apply(now, gang)


__all__ = ["DOWN", "RECLAIMED", "UP", "ConfigurationPolicy", "IterationDone", "Iterations", "Reconfigured"]
