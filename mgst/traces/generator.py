"""The SDSC-like availability law (fitted to Kondo et al.'s 6.33/13.2/22 % failure rates) and the clock-rate laws
of the four platforms: one host's trace and a platform's clock rates, reproducible from a seed.

docs/traces.md states the law and how it was fitted.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import asdict, dataclass

import numpy as np

from mgst.availability.process import State
from mgst.availability.trace_files import Interval
from mgst.traces.calendar import is_business, next_opening

MINUTE = 60.0
KINDS = ("sdsc", "homogeneous", "lri-wisc", "gimps")
# Random streams: host k's availability draws from (seed, AVAILABILITY_STREAM, k), whatever the clock kind, so the
# four platforms of one seed share their availability; the clock rates draw from (seed, CLOCK_STREAM, crc32(kind)).
AVAILABILITY_STREAM = 1
CLOCK_STREAM = 2
SHARE_DECIMALS = 2  # a busy owner's CPU share is written to 0.01: files stay small, and it round-trips exactly
DRAW_BATCH = 1024  # random numbers drawn from numpy at a time (a scalar call per draw is ~10x slower)


@dataclass(frozen=True, slots=True)
class Regime:
    """The law of one regime (business hours, or off-hours): up ~ 2-phase hyperexponential, down ~ log-normal,
    the owner's busy/idle spells (exponential) within up periods. Minutes."""

    up_p_short: float  # probability of the short phase
    up_mean_short: float
    up_mean_long: float
    down_median: float
    down_sigma: float  # of ln(minutes)
    busy_mean: float  # the owner's busy spell
    idle_mean: float  # the owner's idle spell

    @property
    def mean_up(self) -> float:
        return self.up_p_short * self.up_mean_short + (1 - self.up_p_short) * self.up_mean_long

    @property
    def mean_down(self) -> float:
        return self.down_median * math.exp(self.down_sigma ** 2 / 2)

    @property
    def availability(self) -> float:
        """The long-run fraction of time up."""
        return self.mean_up / (self.mean_up + self.mean_down)

    @property
    def residual_p_short(self) -> float:
        """The short phase's weight in the equilibrium (residual-life) law of an up period."""
        return self.up_p_short * self.up_mean_short / self.mean_up

    @property
    def busy_fraction(self) -> float:
        return self.busy_mean / (self.busy_mean + self.idle_mean)


@dataclass(frozen=True, slots=True)
class AvailabilityLaw:
    """Both regimes, and the owner's share of the CPU while busy: 0.1 + 0.9 Beta(4, 2) (grid work keeps at least
    a tenth: full starvation is modelled as DOWN)."""

    business: Regime
    off_hours: Regime
    busy_share_floor: float = 0.1
    busy_share_beta: tuple[float, float] = (4.0, 2.0)

    def as_plain(self) -> dict:
        return asdict(self)


# Business hours: the hyperexponential fitted exactly to 6.33/13.2/22 % (platform.md section 2); down periods of
# median 10 min (owner sessions, reboots); the owner busy 10 min in 40 (25 %).
BUSINESS = Regime(up_p_short=0.7177657289831837, up_mean_short=5.773679370612538, up_mean_long=197.70825867240896,
                  down_median=10.0, down_sigma=1.0, busy_mean=10.0, idle_mean=30.0)
# Off-hours (nights, weekends): fewer owners, so up means x4 and down median 5 min; the owner busy 5 % (backups,
# scans). Uncalibrated proposals: the 09:00 re-draw makes business hours independent of them.
OFF_HOURS = Regime(up_p_short=BUSINESS.up_p_short, up_mean_short=4 * BUSINESS.up_mean_short,
                   up_mean_long=4 * BUSINESS.up_mean_long, down_median=5.0, down_sigma=1.0,
                   busy_mean=10.0, idle_mean=190.0)
SDSC_LAW = AvailabilityLaw(BUSINESS, OFF_HOURS)


class _Draws:
    """Random numbers of one numpy Generator, drawn DRAW_BATCH at a time."""

    __slots__ = ("_rng", "_uniform", "_exponential", "_normal", "_beta", "_beta_ab")

    def __init__(self, rng: np.random.Generator, beta: tuple[float, float]):
        self._rng = rng
        self._beta_ab = beta
        self._uniform: list[float] = []
        self._exponential: list[float] = []
        self._normal: list[float] = []
        self._beta: list[float] = []

    def uniform(self) -> float:
        if not self._uniform:
            self._uniform = self._rng.random(DRAW_BATCH).tolist()
        return self._uniform.pop()

    def exponential(self, mean: float) -> float:
        if not self._exponential:
            self._exponential = self._rng.standard_exponential(DRAW_BATCH).tolist()
        return mean * self._exponential.pop()

    def lognormal(self, mu: float, sigma: float) -> float:
        if not self._normal:
            self._normal = self._rng.standard_normal(DRAW_BATCH).tolist()
        return math.exp(mu + sigma * self._normal.pop())

    def beta(self) -> float:
        if not self._beta:
            self._beta = self._rng.beta(*self._beta_ab, DRAW_BATCH).tolist()
        return self._beta.pop()


def _up(d: _Draws, r: Regime) -> float:
    mean = r.up_mean_short if d.uniform() < r.up_p_short else r.up_mean_long
    return d.exponential(mean * MINUTE)


def _up_residual(d: _Draws, r: Regime) -> float:
    mean = r.up_mean_short if d.uniform() < r.residual_p_short else r.up_mean_long
    return d.exponential(mean * MINUTE)


def _down(d: _Draws, r: Regime) -> float:
    return d.lognormal(math.log(r.down_median * MINUTE), r.down_sigma)


def _down_residual(d: _Draws, r: Regime) -> float:
    """U x the length-biased log-normal (a log-normal with mu + sigma^2): the rest of a down period under way."""
    return d.uniform() * d.lognormal(math.log(r.down_median * MINUTE) + r.down_sigma ** 2, r.down_sigma)


def _regime(law: AvailabilityLaw, t: float) -> Regime:
    return law.business if is_business(t) else law.off_hours


def up_periods(d: _Draws, law: AvailabilityLaw, span: float) -> list[tuple[float, float]]:
    """A host's up periods [(start, end)] over [0, span): an alternating renewal process whose interval law is
    that of the regime at the interval's start; at each weekday 09:00 the state is re-drawn from the business
    regime's equilibrium (so business hours are the stationary business process; an up re-drawn up is one
    period)."""
    off = _regime(law, 0.0)
    t, up = 0.0, d.uniform() < off.availability
    duration = _up_residual(d, off) if up else _down_residual(d, off)
    ups: list[tuple[float, float]] = []
    opening = next_opening(t)
    while t < span:
        if t + duration >= opening:  # the regime switch: cut here, and re-draw
            if up:
                ups.append((t, opening))
            t = opening
            opening = next_opening(t)
            up = d.uniform() < law.business.availability
            duration = _up_residual(d, law.business) if up else _down_residual(d, law.business)
            continue
        if up:
            ups.append((t, t + duration))
        t += duration
        up = not up
        regime = _regime(law, t)
        duration = _up(d, regime) if up else _down(d, regime)
    merged: list[tuple[float, float]] = []
    for start, end in ups:
        start, end = min(start, span), min(end, span)
        if merged and merged[-1][1] == start:
            merged[-1] = (merged[-1][0], end)
        elif end > start:
            merged.append((start, end))
    return merged


def _owner_spells(d: _Draws, law: AvailabilityLaw, start: float, end: float) -> list[tuple[float, float, float]]:
    """(start, end, CPU share left to grid work) over one up period: idle (1.0) and busy spells alternate, each
    drawn from the regime at its start; the first from the regime's equilibrium (exponential spells: memoryless)."""
    regime = _regime(law, start)
    busy = d.uniform() < regime.busy_fraction
    t = start
    spells = []
    while t < end:
        regime = _regime(law, t)
        length = d.exponential((regime.busy_mean if busy else regime.idle_mean) * MINUTE)
        share = round(law.busy_share_floor + (1 - law.busy_share_floor) * d.beta(), SHARE_DECIMALS) if busy else 1.0
        spells.append((t, min(t + length, end), share))
        t += length
        busy = not busy
    return spells


def _host_draws(seed: int, host: int, law: AvailabilityLaw) -> _Draws:
    return _Draws(np.random.default_rng([seed, AVAILABILITY_STREAM, host]), law.busy_share_beta)


def host_up_periods(seed: int, host: int, span: float, law: AvailabilityLaw = SDSC_LAW) -> list[tuple[float, float]]:
    """Host ``host``'s up periods, unrounded: those of host_intervals (which draws its owner's spells after them),
    without the cost of the spells (the calibration reads only these)."""
    return up_periods(_host_draws(seed, host, law), law, span)


def host_intervals(seed: int, host: int, span: float, law: AvailabilityLaw = SDSC_LAW) -> list[Interval]:
    """Host ``host``'s trace over [0, span): contiguous intervals, DOWN (share None) or UP at its CPU share, times
    rounded to whole seconds, equal neighbours merged. Depends on (seed, host) only."""
    d = _host_draws(seed, host, law)
    raw: list[tuple[float, float, State, float | None]] = []
    at = 0.0
    for start, end in up_periods(d, law, span):
        if start > at:
            raw.append((at, start, State.DOWN, None))
        raw.extend((s, e, State.UP, share) for s, e, share in _owner_spells(d, law, start, end))
        at = end
    if at < span:
        raw.append((at, span, State.DOWN, None))
    merged: list[list] = []  # [start, end, state, share], whole seconds, equal neighbours joined
    for start, end, state, share in raw:
        left, right = float(round(start)), float(round(end))
        if right <= left:
            continue
        last = merged[-1] if merged else None
        if last is not None and last[2] is state and last[3] == share:
            last[1] = right
        else:  # (contiguous: a period rounded away ends where the next one starts)
            merged.append([left, right, state, share])
    return [Interval(*m) for m in merged]


# ---------------------------------------------------------------- clock rates (GHz)

SDSC_CLOCK = {"mean": 1.2, "sd": 0.6, "low": 0.18, "high": 3.0, "step": 0.05}  # truncated normal, 50 MHz grid
HOMOGENEOUS_GHZ = 1.5  # the reference host of the slides' task sizes
LRI_WISC_CLUSTERS = ((0.5, 0.45), (0.8, 0.30), (1.7, 0.15), (2.4, 0.10))  # (GHz, share of hosts): left-heavy
GIMPS_CLOCK = {"median": 1.0, "sigma": 0.6, "low": 0.1, "high": 4.0, "step": 0.01}  # log-normal, clipped

CLOCK_LAWS = {
    "sdsc": {"law": "truncated normal", **SDSC_CLOCK},
    "homogeneous": {"law": "constant", "ghz": HOMOGENEOUS_GHZ},
    "lri-wisc": {"law": "clusters", "clusters": [list(c) for c in LRI_WISC_CLUSTERS]},
    "gimps": {"law": "clipped log-normal", **GIMPS_CLOCK},
}


def _grid(values: np.ndarray, step: float) -> list[float]:
    return [round(float(v), 2) for v in np.round(values / step) * step]


def clock_rates(kind: str, hosts: int, seed: int) -> list[float]:
    """``hosts`` clock rates (GHz) of platform ``kind`` (one of KINDS), from (seed, kind)."""
    if kind not in KINDS:
        raise ValueError(f"unknown platform kind {kind!r}; one of {', '.join(KINDS)}")
    rng = np.random.default_rng([seed, CLOCK_STREAM, zlib.crc32(kind.encode())])
    if kind == "homogeneous":
        return [HOMOGENEOUS_GHZ] * hosts
    if kind == "sdsc":
        c = SDSC_CLOCK
        drawn = np.empty(0)
        while drawn.size < hosts:  # truncation by rejection (about 7 % of draws fall outside)
            x = rng.normal(c["mean"], c["sd"], 2 * hosts)
            drawn = np.concatenate([drawn, x[(x >= c["low"]) & (x <= c["high"])]])
        return _grid(drawn[:hosts], c["step"])
    if kind == "lri-wisc":
        ghz, weights = zip(*LRI_WISC_CLUSTERS)
        return [float(x) for x in rng.choice(ghz, size=hosts, p=weights)]
    c = GIMPS_CLOCK
    return _grid(np.clip(rng.lognormal(math.log(c["median"]), c["sigma"], hosts), c["low"], c["high"]), c["step"])


__all__ = ["CLOCK_LAWS", "KINDS", "SDSC_LAW", "AvailabilityLaw", "Regime", "clock_rates", "host_intervals",
           "host_up_periods"]
