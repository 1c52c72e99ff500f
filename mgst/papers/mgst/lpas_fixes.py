"""LPAS_DG's robustness fixes of MGST section 4.3 (the estimators and triggers behind its options).

:class:`LpasFixes` holds the policy's belief (arrival rates, mu'_ij, per-machine delay) and what it learns
online; :class:`~mgst.papers.mgst.lpas.LpasDG` asks it what to put in the LP and when to re-solve. Not compiled
(it runs once per arrival check, completion or time-out, never in the matching's inner loop).
docs/policies.md, "LPAS_DG's fixes", states each rule.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence

from mgst.core.decisions import Decision, Hold, TimeOut
from mgst.core.events import BagArrived, Event, JobArrived, MachineDown, ReplicaDone
from mgst.core.state import Outcome, ReplicaRecord
from mgst.core.view import View
from mgst.papers.mgst.lpas_options import LpasOptions
from mgst.policies.timeouts import ReplicaTimeouts

log = logging.getLogger(__name__)

# How many arrivals (or completions) an observed rate needs before it is trusted: enough that its relative
# standard error, 1/sqrt(n) for a Poisson count and for the mean of exponential sizes (the paper's), is at
# most 1/NOISE_SPAN of the threshold it is tested against; a chance crossing is then a NOISE_SPAN-sigma
# event. (With rates trusted from 30 completions and a 20 % threshold, hilo-mpd-fd with one machine's
# rates mis-estimated by 25 % re-solved 91 times in 4 replications of 500, and its mean response rose from
# 0.335 to 0.363; from 100 completions, 26 times.) See min_samples.
NOISE_SPAN = 2.0
# Floors of those counts, for large thresholds: a class's observed arrival rate replaces its estimate only
# from 10 arrivals (a class with a positive rate and no arrival yet would be planned at rate 0 and get no
# machine), a (class, machine) rate only from 30 completions.
ARRIVAL_MIN_COUNT = 10
RATE_MIN_SAMPLES = 30
# A machine's delay tau_j is estimated from this many completions: it is the network and scheduling
# overhead, nearly constant from one job to the next (jitter aside), not a random job size.
DELAY_MIN_SAMPLES = 5
# Re-solve when some p_ij moves by more than this fraction from the value the LP used (p scales the
# LP's rates as a mis-estimated rate would; 10 % is arrival_threshold's default).
DELAY_RESOLVE_SHIFT = 0.1


def min_samples(threshold: float, floor: int) -> int:
    """The count from which an estimate tested against ``threshold`` is trusted: (NOISE_SPAN / threshold)^2,
    at least ``floor`` (400 at a 10 % threshold, 100 at 20 %)."""
    return max(floor, math.ceil((NOISE_SPAN / threshold) ** 2 - 1e-9))


class LpasFixes:
    """The fixes' state for one run: the belief, the online estimates, the time-outs and their ledger.

    Rates are kept by machine then class (``belief[j][i]``), as MachineRecord.rates.
    """

    def __init__(self, options: LpasOptions):
        self.options = options
        self.arrival_min = min_samples(options.arrival_threshold, ARRIVAL_MIN_COUNT)
        threshold = options.rate_threshold
        self.rate_min = min_samples(threshold, RATE_MIN_SAMPLES) if threshold is not None else RATE_MIN_SAMPLES
        self.timeouts: ReplicaTimeouts | None = (
            ReplicaTimeouts(options.timeout_factor, suspect=True, expected=self.expected)
            if options.timeout_factor is not None else None
        )
        self.belief: list[tuple[float, ...]] = []  # believed mu'_ij, by machine then class
        self.alpha: list[float] = []  # believed arrival rates, by class
        self.started = 0.0
        self.arrivals: list[int] = []  # by class, since start
        # rate learning, by machine then class: completions, work (class mean size x work left) and
        # compute time x CPU share
        self.samples: list[list[int]] = []
        self.work: list[list[float]] = []
        self.cpu_time: list[list[float]] = []
        # delay: by machine, completions and their summed overhead (holding time - compute time)
        self.delay_samples: list[int] = []
        self.delay_sum: list[float] = []
        # what the last LP used: arrival rates, rates (mu'_ij x p_ij, by class then machine), p_ij
        self.used_alpha: tuple[float, ...] = ()
        self.used_p: list[list[float]] = []
        self.used_share: tuple[float, ...] = ()  # a_j by machine (the LP's: 0 if down, nominal without reported_share)
        # replicas timed out, not yet known to be false suspicions: id -> (time-out, machine, sent)
        self.pending: dict[int, tuple[float, int, float]] = {}
        self.counts: dict[str, float] = {
            "solves_arrivals": 0, "solves_rates": 0, "solves_delay": 0,
            "timeouts": 0, "false_suspicions": 0, "false_suspicion_machine_time": 0.0,
        }

    # ------------------------------------------------------------------ belief and the LP's inputs

    def begin(self, view: View) -> None:
        o = self.options
        n, m = len(view.classes), len(view.machines)
        self.belief = [
            tuple(r * o.rate_estimate_scale for r in mach.rates)
            if o.rate_estimate_machine in (None, mach.name) else tuple(mach.rates)
            for mach in view.machines
        ]
        self.alpha = [
            c.arrival_rate * o.arrival_estimate_scale if o.arrival_estimate_class in (None, c.name) else c.arrival_rate
            for c in view.classes
        ]
        self.started = view.now
        self.arrivals = [0] * n
        self.samples = [[0] * n for _ in range(m)]
        self.work = [[0.0] * n for _ in range(m)]
        self.cpu_time = [[0.0] * n for _ in range(m)]
        self.delay_samples = [0] * m
        self.delay_sum = [0.0] * m
        self.used_p = [[1.0] * m for _ in range(n)]

    def lp_inputs(self, view: View, share: Sequence[float]) -> tuple[tuple[tuple[float, ...], ...], tuple[float, ...]]:
        """The LP's rates (classes x machines: believed mu'_ij over the class's mean size X_i, jobs per time unit,
        times p_ij with delay_correction) and arrival rates (believed); noted as what the LP used."""
        n, m = len(view.classes), len(view.machines)
        p = [[self.p(view, i, j, share[j]) for j in range(m)] for i in range(n)]
        self.used_p = p
        self.used_share = tuple(share)
        self.used_alpha = tuple(self.alpha)
        sizes = [c.granularity for c in view.classes]
        rates = tuple(tuple(self.belief[j][i] * p[i][j] / sizes[i] for j in range(m)) for i in range(n))
        return rates, self.used_alpha

    def p(self, view: View, i: int, j: int, share: float) -> float:
        """p_ij of Eq. 4, (1/mu_ij) / (1/mu_ij + tau_j), with 1/mu_ij the believed mean compute time of
        class i on machine j at CPU share ``share``; 1 without delay_correction or an estimate of tau_j."""
        if not self.options.delay_correction:
            return 1.0
        tau = self.tau(j)
        rate = self.belief[j][i] * share
        if tau is None or rate <= 0.0:
            return 1.0
        compute = view.classes[i].granularity / rate
        return compute / (compute + tau)

    def tau(self, j: int) -> float | None:
        """Machine j's mean delay per job (holding time - compute time), or None before DELAY_MIN_SAMPLES."""
        n = self.delay_samples[j]
        return self.delay_sum[j] / n if n >= DELAY_MIN_SAMPLES else None

    def expected(self, view: View, replica: ReplicaRecord) -> float:
        """The time-outs' expected run time: the class's mean size times the work left, over the believed
        mu'_ij times the machine's current CPU share (inf if that is 0)."""
        machine = view.machines[replica.machine]
        c = replica.job.job.job_class
        rate = self.belief[replica.machine][c] * machine.cpu_share
        if rate <= 0.0:
            return math.inf
        return view.classes[c].granularity * (1.0 - replica.progress) / rate

    # ------------------------------------------------------------------ fix 1: arrival rates

    def observed_rate(self, view: View, i: int) -> float | None:
        """Class i's arrivals since start over the time since start, or None below ``arrival_min`` arrivals."""
        elapsed = view.now - self.started
        if self.arrivals[i] < self.arrival_min or elapsed <= 0.0:
            return None
        return self.arrivals[i] / elapsed

    def check_arrivals(self, view: View) -> bool:
        """At an arrival check: True (and the belief moved to the observed rates) if some class's observed
        rate differs from the rate the LP used by more than arrival_threshold of it."""
        threshold = self.options.arrival_threshold
        observed = [self.observed_rate(view, i) for i in range(len(view.classes))]
        used = self.used_alpha
        moved = any(
            rate is not None and (used[i] <= 0.0 or abs(rate - used[i]) > threshold * used[i])
            for i, rate in enumerate(observed)
        )
        if moved:
            self.alpha = [rate if rate is not None else self.alpha[i] for i, rate in enumerate(observed)]
            self.counts["solves_arrivals"] += 1
            log.debug("t=%s arrival rates moved: LP used %s, observed %s", view.now, used, observed)
        return moved

    def count_arrival(self, event: Event) -> None:
        if type(event) is JobArrived:
            self.arrivals[event.job.job_class] += 1  # type: ignore[union-attr]
        elif type(event) is BagArrived:
            for task in event.bag.tasks:  # type: ignore[union-attr]
                self.arrivals[task.job_class] += 1

    # ------------------------------------------------------------------ fixes 2 and 3: completions

    def learn(self, view: View, r: ReplicaRecord) -> bool:
        """A replica ended: learn its compute time (fix 2) and its delay (fix 3); True if the LP should be
        re-solved (a learnt rate or a p_ij moved past its threshold; the belief then holds the learnt rates)."""
        if r.outcome is not Outcome.DONE or r.computed is None:
            return False
        j, i = r.machine, r.job.job.job_class
        machine = view.machines[j]
        resolve = False
        if self.options.rate_threshold is not None and r.computed > 0.0 and machine.cpu_share > 0.0:
            self.samples[j][i] += 1
            self.work[j][i] += view.classes[i].granularity * (1.0 - r.progress)
            self.cpu_time[j][i] += r.computed * machine.cpu_share
            resolve = self._rates_moved(view, j, i)
        if self.options.delay_correction and not r.late:  # (a late result's holding time is not a job's)
            self.delay_samples[j] += 1
            self.delay_sum[j] += max(0.0, (view.now - r.sent) - r.computed)
            if not resolve and self._p_moved(view, j):
                self.counts["solves_delay"] += 1
                resolve = True
        return resolve

    def learnt_rate(self, j: int, i: int) -> float | None:
        """mu'_ij as learnt: work over CPU time (a ratio of sums), or None below ``rate_min`` completions."""
        if self.samples[j][i] < self.rate_min or self.cpu_time[j][i] <= 0.0:
            return None
        return self.work[j][i] / self.cpu_time[j][i]

    def _rates_moved(self, view: View, j: int, i: int) -> bool:
        """Whether the entry (i, j), just learnt from, moved past the threshold from the belief; if so every
        trusted entry replaces its belief. (Only that entry can have crossed since the last completion: no
        other estimate or belief has changed since it was last checked.)"""
        threshold = self.options.rate_threshold
        assert threshold is not None
        learnt = self.learnt_rate(j, i)
        believed = self.belief[j][i]
        if learnt is None or abs(learnt - believed) <= threshold * believed:
            return False
        self.belief = [
            tuple(r if (x := self.learnt_rate(m, c)) is None else x for c, r in enumerate(row))
            for m, row in enumerate(self.belief)
        ]
        self.counts["solves_rates"] += 1
        log.debug("t=%s learnt rates moved: %s", view.now, self.belief)
        return True

    def _p_moved(self, view: View, j: int) -> bool:
        """Whether tau_j's estimate moved some p_ij past DELAY_RESOLVE_SHIFT, at the share the LP used (a share
        change is the capacity events' to re-solve for, or T_system's: compared at the machine's current share,
        a machine whose share differs from the LP's, reported_share off or down, re-solved at every completion)."""
        share = self.used_share[j]
        for i in range(len(view.classes)):
            used = self.used_p[i][j]
            if abs(self.p(view, i, j, share) - used) > DELAY_RESOLVE_SHIFT * used:
                return True
        return False

    # ------------------------------------------------------------------ fix 4: time-outs and their cost

    def timed_out(self, view: View, decisions: Iterable[Decision]) -> list[Decision]:
        """The time-outs' decisions at a timer, noted: each TimeOut waits to be found false."""
        out = list(decisions)
        for d in out:
            if type(d) is TimeOut:
                r = view.replica(d.replica)  # type: ignore[union-attr]
                assert r is not None  # (ReplicaTimeouts times out live replicas only)
                self.pending[r.id] = (view.now, r.machine, r.sent)
                self.counts["timeouts"] += 1
        return out

    def late_result(self, r: ReplicaRecord) -> None:
        """A replica given up on delivered its result after all, and it counted (the core took it late):
        the suspicion was false; the machine time lost is that of the job's replicas started after the
        time-out (cancelled now, since this result won)."""
        entry = self.pending.pop(r.id, None)
        if entry is not None:
            at = entry[0]
            self._false(sum(x.machine_time for x in r.job.history if x is not r and x.sent >= at))

    def _false(self, lost: float) -> None:
        self.counts["false_suspicions"] += 1
        self.counts["false_suspicion_machine_time"] += lost

    def on_event(self, view: View, event: Event) -> None:
        """Arrivals (fix 1) and the ends of time-outs (fix 4): the result of a timed-out replica whose job
        was done meanwhile (a false suspicion: its whole run, sent to now, was lost), or its machine's
        failure (the suspicion was right, or cannot be known: it is dropped)."""
        t = type(event)
        if t is JobArrived or t is BagArrived:
            if self.options.arrival_check_period is not None:
                self.count_arrival(event)
        elif t is ReplicaDone and self.pending:
            entry = self.pending.pop(event.replica, None)  # type: ignore[union-attr]
            if entry is not None:  # (a late result that counted was taken by late_result before)
                self._false(view.now - entry[2])
        elif t is MachineDown and self.pending:
            j = event.machine  # type: ignore[union-attr]
            for rid in [rid for rid, entry in self.pending.items() if entry[1] == j]:
                del self.pending[rid]

    # ------------------------------------------------------------------ fix 5: server choice

    def holds_for(self, view: View, job_class: int, eligible: Sequence[bool]) -> list[Decision]:
        """LPAS's server choice for an arriving job of ``job_class``: Holds that send the ready machines
        eligible for it that stand before the fastest one (largest believed mu'_ij a_j; the oldest request
        among equals) to the back of the ready queue, so that the core's matching offers it the job first."""
        machines = view.machines
        ready = [j for j in view.ready_queue if eligible[j]]
        if len(ready) < 2:
            return []
        belief = self.belief
        best = max(range(len(ready)), key=lambda k: (belief[ready[k]][job_class] * machines[ready[k]].cpu_share, -k))
        return [Hold(j) for j in ready[:best]]

    def report(self) -> dict[str, float]:
        return dict(self.counts)

