"""Tests for the availability models (exponential, Weibull/Normal by group, as processes) and the staging sampler."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from mgst.availability import Period, State, machine_group, make_process, up_fraction
from mgst.availability.exponential import ExponentialUpDown
from mgst.availability.weibull import (
    ANGLANO_MTTF,
    DEFAULT_SHAPE,
    WeibullNormalUpDown,
    anglano_preset,
    mean_repair,
    weibull_scale,
)
from mgst.model import (
    Experiment,
    FailureModel,
    JobClass,
    Machine,
    PolicySpec,
    StagingModel,
    WeibullGroup,
    WeibullNormalFailures,
)
from mgst.staging import StagingSampler


def experiment(failures, groups=None, n: int = 3) -> Experiment:
    machines = tuple(
        Machine(f"M{j}", (1.0,), attributes=() if groups is None else (("group", groups[j]),)) for j in range(n)
    )
    return Experiment("t", (JobClass("1", 1.0),), machines, PolicySpec("fcfs"), failures=failures)


def ups(source, n: int) -> np.ndarray:
    return np.array([source.next_up() for _ in range(n)])


def downs(source, n: int) -> np.ndarray:
    return np.array([source.next_down() for _ in range(n)])


def periods(process, n: int) -> list[Period]:
    return [process.next() for _ in range(n)]


# ------------------------------------------------------------------ exponential (MGST): unchanged draws


def test_no_failures_means_always_up():
    assert make_process(experiment(None), 1, 0, 0) is None
    assert up_fraction(None) == 1.0


def test_exponential_draws_are_unchanged():
    # Recorded from ExponentialUpDown before the Weibull model was added.
    ud = ExponentialUpDown(FailureModel(100.0, 10.0), 5, 2, 4)
    assert [ud.next_up() for _ in range(3)] == [33.326132141000244, 24.476816157815982, 157.75754654007602]
    assert [ud.next_down() for _ in range(3)] == [18.72138850852767, 15.989288987666008, 0.20881176099305745]
    assert ud.next_up() == 161.1039975675784
    # As a process (UP at a_j, DOWN, UP, ...), the same numbers in the simulator's order: up, down, up, ...
    exp = experiment(FailureModel(100.0, 10.0), n=5)
    got = periods(make_process(exp, 5, 2, 4), 7)
    assert got == [Period(33.326132141000244, State.UP, 1.0), Period(18.72138850852767, State.DOWN, 0.0),
                   Period(24.476816157815982, State.UP, 1.0), Period(15.989288987666008, State.DOWN, 0.0),
                   Period(157.75754654007602, State.UP, 1.0), Period(0.20881176099305745, State.DOWN, 0.0),
                   Period(161.1039975675784, State.UP, 1.0)]
    assert up_fraction(FailureModel(100.0, 10.0)) == pytest.approx(100 / 110)


# ------------------------------------------------------------------ Weibull up, truncated Normal down

N = 20_000


@pytest.mark.parametrize("shape", [0.5, 1.0, 2.0])
def test_weibull_up_periods_have_the_group_mttf_and_law(shape):
    group = WeibullGroup(mttf=5000.0, shape=shape, repair_mean=100.0, repair_sd=10.0)
    sample = ups(WeibullNormalUpDown(group, seed=1, replication=0, machine=0), N)
    scale = weibull_scale(5000.0, shape)
    sd = scale * math.sqrt(math.gamma(1 + 2 / shape) - math.gamma(1 + 1 / shape) ** 2)
    assert abs(sample.mean() - 5000.0) < 4 * sd / math.sqrt(N)  # 4 standard errors
    # The whole law, not only its mean: Kolmogorov-Smirnov against Weibull(shape, scale).
    assert stats.kstest(sample, stats.weibull_min(shape, scale=scale).cdf).pvalue > 1e-3


def truncated_normal_sd(mu: float, sd: float) -> float:
    b = mu / sd
    lam = math.exp(-b * b / 2) / math.sqrt(2 * math.pi) / (0.5 * (1 + math.erf(b / math.sqrt(2))))
    return sd * math.sqrt(1 - b * lam - lam * lam)


@pytest.mark.parametrize(("mu", "sd"), [(1800.0, 300.0), (5400.0, 800.0), (1.0, 2.0)])
def test_down_periods_are_normal_truncated_to_positive(mu, sd):
    group = WeibullGroup(mttf=1e5, shape=0.5, repair_mean=mu, repair_sd=sd)
    sample = downs(WeibullNormalUpDown(group, seed=2, replication=1, machine=3), N)
    assert sample.min() > 0
    tsd = truncated_normal_sd(mu, sd)
    assert abs(sample.mean() - mean_repair(group)) < 4 * tsd / math.sqrt(N)
    # sd of a sample standard deviation ~ sd / sqrt(2 n) for a near-normal law; 6 of them for the truncated one
    assert abs(sample.std() - tsd) < 6 * tsd / math.sqrt(2 * N)
    if mu / sd > 5:  # no truncation to speak of: the paper's MTTR is the mean
        assert mean_repair(group) == pytest.approx(mu, rel=1e-8)


def test_zero_repair_sd_is_a_constant_repair():
    group = WeibullGroup(mttf=10.0, shape=1.0, repair_mean=7.0, repair_sd=0.0)
    assert set(downs(WeibullNormalUpDown(group, 1, 0, 0), 50)) == {7.0}
    assert mean_repair(group) == 7.0


def test_weibull_streams_are_per_machine_and_repairs_do_not_move_ups():
    g = WeibullGroup(mttf=1000.0, shape=0.7, repair_mean=50.0, repair_sd=5.0)
    a = WeibullNormalUpDown(g, 9, 0, 2)
    b = WeibullNormalUpDown(WeibullGroup(1000.0, 0.7, 500.0, 100.0), 9, 0, 2)
    for _ in range(100):  # interleaved, as a simulation draws them
        assert a.next_up() == b.next_up()
        a.next_down()
        b.next_down()
    assert list(ups(WeibullNormalUpDown(g, 9, 0, 2), 5)) != list(ups(WeibullNormalUpDown(g, 9, 0, 3), 5))
    assert list(ups(WeibullNormalUpDown(g, 9, 0, 2), 5)) == list(ups(WeibullNormalUpDown(g, 9, 0, 2), 5))


def test_the_process_follows_the_machine_group_and_draws_the_law_in_order():
    groups = (WeibullGroup(100.0, 0.5, 5.0, 1.0), WeibullGroup(2000.0, 1.5, 50.0, 3.0))
    exp = experiment(WeibullNormalFailures(groups), groups=[2, 1, 2])
    for j, g in enumerate([2, 1, 2]):
        assert machine_group(exp, j) == groups[g - 1]
        got = periods(make_process(exp, 4, 1, j), 10)
        want = WeibullNormalUpDown(groups[g - 1], 4, 1, j)
        assert [p.state for p in got] == [State.UP, State.DOWN] * 5
        assert [p.cpu_share for p in got] == [1.0, 0.0] * 5
        assert [p.duration for p in got[0::2]] == list(ups(want, 5))
        assert [p.duration for p in got[1::2]] == list(downs(want, 5))


def test_group_is_required_with_several_groups_and_checked():
    groups = (WeibullGroup(100.0, 0.5, 5.0, 1.0), WeibullGroup(2000.0, 1.5, 50.0, 3.0))
    with pytest.raises(ValueError, match="group None"):
        make_process(experiment(WeibullNormalFailures(groups)), 1, 0, 0)
    with pytest.raises(ValueError, match="group 3"):
        make_process(experiment(WeibullNormalFailures(groups), groups=[3, 1, 1]), 1, 0, 0)
    one = WeibullNormalFailures(groups[:1])
    assert machine_group(experiment(one), 2) == groups[0]  # one group: every machine is in it


# ------------------------------------------------------------------ Anglano & Canonico, Tables II and IV

# Table II as printed: Medium-Avail and Low-Avail MTTFs (rounded to 6 significant digits).
MEDIUM = (23193.60, 31338.40, 29937.20, 24509.70, 9914.37, 38664.20, 12795.20, 14637.60, 23398.20, 29937.20,
          18019.20, 9940.17, 9473.60, 9595.44, 12226.40)
LOW = (7731.19, 10446.10, 9979.08, 8169.90, 3304.79, 12888.10, 4265.08, 4879.21, 7799.38, 9979.08, 6006.41,
       3313.39, 3157.87, 3198.48, 4075.45)


def test_presets_reproduce_table_2():
    high, medium, low = (anglano_preset(f"anglano-{x}") for x in ("high", "medium", "low"))
    assert [g.mttf for g in high.groups] == list(ANGLANO_MTTF)
    assert [g.mttf for g in medium.groups] == pytest.approx(MEDIUM, rel=1e-5)
    assert [g.mttf for g in low.groups] == pytest.approx(LOW, rel=1e-5)
    assert {(g.repair_mean, g.repair_sd) for g in high.groups} == {(1800.0, 300.0)}
    assert {(g.repair_mean, g.repair_sd) for g in low.groups + medium.groups} == {(5400.0, 800.0)}
    assert {g.shape for g in high.groups} == {DEFAULT_SHAPE}
    assert {g.shape for g in anglano_preset("anglano-low", shape=0.8).groups} == {0.8}


@pytest.mark.parametrize(("preset", "sum_ep"), [("anglano-high", 996.68), ("anglano-medium", 759.71),
                                                ("anglano-low", 526.41)])
def test_cycled_groups_give_table_4_effective_power(preset, sum_ep):
    # 100 machines of P = 10, machine i in group ((i - 1) mod 15) + 1: sum P_i A_i is Table IV's column.
    failures = anglano_preset(preset)
    exp = experiment(failures, groups=[j % 15 + 1 for j in range(100)], n=100)
    total = sum(10 * up_fraction(failures, machine_group(exp, j)) for j in range(100))
    assert round(total, 2) == sum_ep


# ------------------------------------------------------------------ staging


def test_no_staging_is_zero():
    for model in (None, StagingModel()):
        s = StagingSampler(model, 1, 0)
        assert not s.stages
        assert s.duration(True) == 0.0 and s.duration(False) == 0.0


def test_resume_staging_is_uniform_and_only_for_resumed_replicas():
    s = StagingSampler(StagingModel(resume=(240.0, 720.0)), 3, 0)
    assert s.stages and s.duration(False) == 0.0
    sample = np.array([s.duration(True) for _ in range(N)])
    assert sample.min() >= 240.0 and sample.max() <= 720.0
    assert abs(sample.mean() - 480.0) < 4 * (480.0 / math.sqrt(12)) / math.sqrt(N)
    assert stats.kstest(sample, stats.uniform(240.0, 480.0).cdf).pvalue > 1e-3


def test_start_staging_adds_and_the_two_ranges_have_their_own_streams():
    resume_only = StagingSampler(StagingModel(resume=(240.0, 720.0)), 5, 1)
    with_zero_start = StagingSampler(StagingModel(resume=(240.0, 720.0), start=(0.0, 0.0)), 5, 1)
    assert [resume_only.duration(True) for _ in range(50)] == [with_zero_start.duration(True) for _ in range(50)]
    start_only = StagingSampler(StagingModel(start=(10.0, 20.0)), 5, 1)
    with_zero_resume = StagingSampler(StagingModel(resume=(0.0, 0.0), start=(10.0, 20.0)), 5, 1)
    a = [start_only.duration(False) for _ in range(50)]
    assert a == [with_zero_resume.duration(True) for _ in range(50)]
    assert all(10.0 <= d <= 20.0 for d in a)
    both = StagingSampler(StagingModel(resume=(1.0, 1.0), start=(2.0, 2.0)), 5, 1)
    assert both.duration(True) == 3.0 and both.duration(False) == 2.0


def test_staging_is_deterministic_per_seed():
    model = StagingModel(resume=(240.0, 720.0), start=(1.0, 9.0))
    one = [StagingSampler(model, 7, 2).duration(True) for _ in range(1)]
    assert one == [StagingSampler(model, 7, 2).duration(True)]
    assert one != [StagingSampler(model, 8, 2).duration(True)]
    with pytest.raises(ValueError):
        StagingSampler(StagingModel(resume=(5.0, 1.0)), 1, 0)
