"""Intervals of positive quantities never reach below 0: Student-t where it stays >= 0, else log-scale, else
"too few"; the tables and JSON say which. Expected values are worked by hand from tabled t quantiles."""

from __future__ import annotations

import math
import random
import statistics
from pathlib import Path

import pytest

from mgst.bot_metrics import BagSummary, Metric, format_bags
from mgst.intervals import LOG_SCALE, STUDENT_T, batch_means_ci, mean_ci
from mgst.results import Estimate

# Student-t 0.975 quantiles, from a table (not from the code under test)
T1, T2, T3 = 12.706204736174698, 4.302652729911275, 3.182446305284263


def test_student_t_is_kept_when_its_lower_bound_is_positive():
    # 10, 11, 12: mean 11, s = 1, half-width t(2) / sqrt(3) = 2.484138
    ci = mean_ci([10.0, 11.0, 12.0])
    assert ci.method == STUDENT_T
    assert (ci.mean, ci.low, ci.high) == pytest.approx((11.0, 11 - T2 / math.sqrt(3), 11 + T2 / math.sqrt(3)))
    assert ci.low == pytest.approx(8.515862, abs=1e-6)


def test_a_negative_student_t_bound_becomes_a_log_scale_interval():
    # 1, 2, 6: mean 3, s = sqrt((4 + 1 + 9) / 2) = sqrt(7); Student-t 3 -+ 6.57 reaches below 0.
    # Log scale: 3 exp(-+t(2) sqrt(7) / (3 sqrt(3))) = 3 exp(-+2.19080) = (0.335481, 26.8272)
    ci = mean_ci([1.0, 2.0, 6.0])
    assert ci.method == LOG_SCALE and ci.mean == pytest.approx(3.0)
    assert (ci.low, ci.high) == pytest.approx((0.335481, 26.8272), rel=1e-5)
    assert ci.low * ci.high == pytest.approx(9.0)  # symmetric on the log scale: low x high = mean^2


def test_two_replications_reaching_below_zero_say_too_few():
    # 1, 5: mean 3, s = 2 sqrt(2), half-width t(1) x 2 = 25.4: no interval on two values, said so
    ci = mean_ci([1.0, 5.0])
    assert ci.mean == 3.0 and math.isnan(ci.low) and math.isnan(ci.high)
    assert ci.method == "too few replications"
    # The --quick sweep's AVTs (5,595 and 12,594 s): Student-t gave (-35,370, 53,559) s
    assert mean_ci([5595.199438, 12594.007315]).method == "too few replications"


def test_batch_means_of_a_short_testbed_class_stay_positive():
    # 4 jobs: 4 batches of one. Mean 1.4, s = sqrt(17.3 / 3) = 2.40139, Student-t 1.4 -+ 3.82114 reaches below 0;
    # log scale: 1.4 exp(-+3.82114 / 1.4) = 1.4 exp(-+2.72939) = (0.0913628, 21.4529)
    ci = batch_means_ci([0.1, 0.2, 0.3, 5.0], 10)
    assert ci.method == LOG_SCALE
    assert (ci.mean, ci.low, ci.high) == pytest.approx((1.4, 0.0913628, 21.4529), rel=1e-5)
    two = batch_means_ci([0.1, 3.0], 10)
    assert math.isnan(two.low) and two.method == "too few batches"
    # 20 jobs of 1.0 and 1.2 alternating, 10 batches of (1.0, 1.2): every batch mean 1.1, s = 0: (1.1, 1.1)
    flat = batch_means_ci([1.0, 1.2] * 10, 10)
    assert flat.method == STUDENT_T and (flat.low, flat.high) == pytest.approx((1.1, 1.1))


def test_no_interval_of_positive_values_reaches_below_zero():
    rng = random.Random(7)
    seen = set()
    for _ in range(2000):
        values = [rng.expovariate(1.0) ** 3 for _ in range(rng.randint(2, 8))]
        for ci in (mean_ci(values), batch_means_ci(values, 4)):
            assert math.isnan(ci.low) or 0 <= ci.low <= ci.mean <= ci.high, (values, ci)
            seen.add(ci.method.split()[0])
    assert seen == {"student-t", "log-scale", "too"}  # every branch was taken


def _estimate(values: list[float]) -> Estimate:
    ci = mean_ci(values)
    return Estimate(len(values), *ci, ci.method)


def _metric(values: list[float]) -> Metric:
    ci = mean_ci(values)
    return Metric(*ci, ci.method)


def test_json_and_tables_say_how_the_interval_was_made():
    t = _estimate([10.0, 11.0, 12.0])
    assert "interval_method" not in t.as_dict()  # Student-t: as before (mgst paper --json unchanged)
    log = _estimate([1.0, 2.0, 6.0])
    assert log.as_dict()["interval_method"] == "log-scale" and log.as_dict()["ci95"][0] > 0
    few = _estimate([1.0, 5.0])
    assert few.as_dict()["interval_method"] == "too few replications" and few.as_dict()["ci95"] == [None, None]
    m = _metric([1.0, 2.0, 6.0])
    summary = BagSummary(3, 30, 300, False, 0, m, m, m, _metric([0.1, 0.2, 0.1]), 0.0, "replications")
    text = format_bags(summary)
    assert "AVT (turnaround) 3.0  95 % CI (0.3, 26.8) [log-scale]" in text
    assert summary.as_dict()["avt"]["interval_method"] == "log-scale"
    few_text = format_bags(BagSummary(2, 20, 200, False, 0, _metric([1.0, 5.0]), m, m, m, 0.0,
                                      "replications"))
    assert "AVT (turnaround) 3.0 (too few replications)" in few_text


# ---------------------------------------------------------------------- one replication: batch means of its jobs


def _hand_batch_means(rows: list[dict], warmup: float, horizon: float) -> tuple[float, float]:
    """The test's own 95 % batch-means interval: the counted window cut into 10 windows of equal model time, each a
    batch of the jobs submitted in it; Student's t with (batches with a job) - 1 degrees of freedom (t(9, 0.975) =
    2.262157), about the mean of every response."""
    width = (horizon - warmup) / 10
    batches: list[list[float]] = [[] for _ in range(10)]
    for r in rows:
        batches[min(9, int((float(r["Date Submitted"]) - warmup) / width))].append(float(r["Response Time"]))
    means = [sum(b) / len(b) for b in batches if b]
    assert len(means) == 10
    grand = sum(float(r["Response Time"]) for r in rows) / len(rows)
    m = sum(means) / 10
    s = (sum((x - m) ** 2 for x in means) / 9) ** 0.5
    half = 2.262157 * s / 10 ** 0.5
    return grand - half, grand + half


@pytest.mark.parametrize("keep_rows", [False, True], ids=["streamed", "kept records"])
def test_one_replication_has_an_interval_of_10_batch_means_of_its_jobs_by_windows_of_model_time(keep_rows):
    """docs/intervals.md promised it; a simulation of one replication printed "(n/a)". Checked against the jobs'
    rows (jobs.csv's, kept by the same run), batched by the test itself; a run that keeps no records (the
    default) gives the same interval, digit for digit."""
    from mgst.config import load_experiment  # noqa: PLC0415
    from mgst.results import BATCH_MEANS, JOB_COLUMNS, JOB_EXTRA_COLUMNS  # noqa: PLC0415
    from mgst.sim.replications import run_simulation  # noqa: PLC0415

    exp = load_experiment(Path(__file__).resolve().parents[1] / "experiments" / "hihi-mfd-fd.toml")
    summary, results = run_simulation(exp, horizon=300.0, warmup=30.0, replications=1, workers=1, keep_rows=True)
    header = JOB_COLUMNS + JOB_EXTRA_COLUMNS  # (the rows jobs.csv is written from)
    counted = [dict(zip(header, row)) for row in results[0].rows]
    counted = [r for r in counted if r["Counted"] == "Yes"]
    if not keep_rows:
        kept = summary
        summary, _ = run_simulation(exp, horizon=300.0, warmup=30.0, replications=1, workers=1)
        assert (summary.classes, summary.overall) == (kept.classes, kept.overall)  # digit for digit
    assert summary.interval == BATCH_MEANS
    for c, est in [*enumerate(summary.classes), (None, summary.overall)]:
        mine = [r for r in counted if c is None or int(r["Job Class"]) == c + 1]
        assert est.jobs == len(mine) > 100
        # (the rows' times are rounded to 1e-6 time units)
        assert est.mean == pytest.approx(sum(float(r["Response Time"]) for r in mine) / len(mine), abs=1e-6)
        low, high = _hand_batch_means(mine, 30.0, 300.0)
        assert (est.low, est.high) == (pytest.approx(low, abs=1e-5), pytest.approx(high, abs=1e-5)), c
    assert summary.as_dict()["interval"].startswith("batch means (10 windows of equal model time")
    # two replications: the interval is over their means, as before, and the JSON says nothing of it
    two, _ = run_simulation(exp, horizon=300.0, warmup=30.0, replications=2, workers=1)
    assert two.interval == "replications" and "interval" not in two.as_dict()


def test_the_table_of_t_quantiles_is_scipys():
    """mgst.student_t holds t(df, 0.975) for df = 1..100 so that a 95 % interval needs no scipy import (0.24 s of
    every `mgst simulate`): each must be what scipy gives (to the last digit where scipy is the version the table
    was made with; a later scipy may move the last bits)."""
    import scipy  # noqa: PLC0415
    from scipy.special import stdtrit  # noqa: PLC0415

    from mgst.intervals import _t_quantile  # noqa: PLC0415
    from mgst.student_t import T975  # noqa: PLC0415

    assert len(T975) == 100
    for df, t in enumerate(T975, 1):
        expected = float(stdtrit(df, 0.975))
        if scipy.__version__ == "1.17.1":
            assert t == expected, df
        assert t == pytest.approx(expected, rel=1e-12), df
        assert _t_quantile(df, 0.5 + 0.95 / 2) == t  # (the level the intervals ask for is the table's)
    assert _t_quantile(101, 0.975) == pytest.approx(float(stdtrit(101, 0.975)), rel=1e-15)  # beyond: scipy's
    assert _t_quantile(9, 0.995) == pytest.approx(float(stdtrit(9, 0.995)), rel=1e-15)


def test_an_overloaded_run_says_so_beside_its_figures_and_summary_csv_says_how_each_interval_was_made(tmp_path):
    """An overloaded setting's means grow with the horizon (a statistician's run: 8.70 (6.88, 10.51) at 200, 15.56
    at 400, outside it), yet its table, summary.csv and JSON carried plain intervals, the warning on stderr alone.
    The same file at the shipped rates says nothing of it."""
    import csv  # noqa: PLC0415

    from mgst.config import load_experiment  # noqa: PLC0415
    from mgst.results import format_table, write_summary_csv  # noqa: PLC0415
    from mgst.sim.replications import run_simulation  # noqa: PLC0415

    shipped = Path(__file__).resolve().parents[1] / "experiments" / "hihi-mfd-fd.toml"
    text = shipped.read_text()
    assert "arrival_rates = [2.25, 4.50, 7.20, 12.60]" in text
    over = tmp_path / "over.toml"
    over.write_text(text.replace("arrival_rates = [2.25, 4.50, 7.20, 12.60]", "arrival_rates = [4.5, 9.0, 14.4, 25.2]"))
    for path, overloaded in ((over, True), (shipped, False)):
        summary, _ = run_simulation(load_experiment(path), horizon=40.0, warmup=4.0, replications=3, workers=1)
        d = summary.as_dict()
        assert ("overloaded" in d) is overloaded
        table = format_table(summary)
        assert ("WARNING: overloaded: the allocation LP gives lambda* = 0.91" in table) is overloaded, table
        assert ("no steady state" in table) is overloaded
        write_summary_csv(tmp_path / "summary.csv", summary)
        with open(tmp_path / "summary.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        assert [r["Class"] for r in rows] == ["1", "2", "3", "4", "Overall"]
        assert {r["Overloaded"] for r in rows} == {"Yes" if overloaded else "No"}
        for r, est in zip(rows, [*summary.classes, summary.overall]):
            expected = {STUDENT_T: "replications", LOG_SCALE: "replications, log-scale"}.get(est.method, est.method)
            assert r["Interval"] == expected
    one, _ = run_simulation(load_experiment(shipped), horizon=40.0, warmup=4.0, replications=1, workers=1)
    write_summary_csv(tmp_path / "one.csv", one)
    with open(tmp_path / "one.csv", newline="") as f:
        assert {r["Interval"] for r in csv.DictReader(f)} <= {"batch means", "batch means, log-scale"}


def test_a_sweep_row_s_half_width_is_of_a_symmetric_interval_only_and_its_bounds_are_written(tmp_path):
    """sweep.csv's `waiting_ci` was (high - low) / 2 of a log-scale interval: 2.42 +- 19.36 read as reaching -16.9.
    A half-width is now given only for a Student-t interval; every interval's bounds are in `_low`/`_high`."""
    import csv  # noqa: PLC0415

    from mgst.cli import main  # noqa: PLC0415

    sweep = tmp_path / "s.toml"
    sweep.write_text('scenario = "anglano"\nname = "x"\n[axes]\npolicy = ["rr"]\navailability = ["high"]\n'
                     'heterogeneity = ["homogeneous"]\nmix = ["All_S"]\nintensity = ["low"]\n[simulation]\n'
                     'horizon = 40000.0\nwarmup = 4000.0\ncheckpoint_interval = 60.0\nreplications = 2\nseeds = [1]\n')
    assert main(["sweep", str(sweep), "--out", str(tmp_path / "o"), "--workers", "1", "--no-plots", "--quiet"]) == 0
    with open(tmp_path / "o" / "sweep.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    seen_log_scale = False
    for r in rows:
        for m in ("avt", "makespan", "waiting"):
            mean, half, low, high = (float(r[k] or "nan") for k in (m, f"{m}_ci", f"{m}_low", f"{m}_high"))
            if math.isnan(low):
                assert math.isnan(half)
                continue
            assert 0 < low <= mean <= high
            if math.isnan(half):  # log-scale: not symmetric about the mean
                seen_log_scale = True
                assert mean - low != pytest.approx(high - mean)
            else:
                assert (low, high) == (pytest.approx(mean - half), pytest.approx(mean + half))
    assert seen_log_scale  # (this setting's waiting times, near 0 with a long tail: the case that hid the bug)


def test_a_class_some_replications_counted_no_job_of_says_over_how_many(tmp_path):
    """Class 4 at 0.01 jobs a time unit: 5 replications, 2 of them with a job of it; its mean and interval are over
    those 2 (the mean of their means), which the table said nothing of ('too few replications' after 5)."""
    from mgst.config import load_experiment  # noqa: PLC0415
    from mgst.results import format_table  # noqa: PLC0415
    from mgst.sim.replications import run_simulation  # noqa: PLC0415

    text = (Path(__file__).resolve().parents[1] / "experiments" / "hihi-mfd-fd.toml").read_text()
    rare = tmp_path / "rare.toml"
    rare.write_text(text.replace("arrival_rates = [2.25, 4.50, 7.20, 12.60]",
                                 "arrival_rates = [2.25, 4.50, 7.20, 0.01]"))
    summary, results = run_simulation(load_experiment(rare), horizon=100.0, warmup=10.0, replications=5, seed=3,
                                      workers=1)
    used = sum(1 for r in results if r.counts[3])
    assert 0 < used < 5  # (the case: seed 3 gives 2)
    row = next(line for line in format_table(summary).splitlines() if line.startswith("4 "))
    assert row.endswith(f"[{used} of 5 replications]"), row
    assert summary.classes[3].mean == pytest.approx(statistics.fmean(r.mean(3) for r in results if r.counts[3]))
    assert all("of 5 replications" not in line for line in format_table(summary).splitlines()
               if line.startswith(("1 ", "Overall")))


def test_a_table_of_tiny_times_prints_each_mean_within_its_interval():
    """Times of ten-thousandths of a unit: '0.0007  (0.001, 0.001)', the mean outside its own interval, and
    '(0.000, 0.000)'. Places are added until the printed mean lies within the printed interval, and that is no
    point; a table of ordinary times prints as before (3 places, the mean 4)."""
    from mgst.intervals import interval_places  # noqa: PLC0415
    from mgst.results import Summary, format_table  # noqa: PLC0415

    assert interval_places(0.2060, 0.198, 0.214) == 3
    assert interval_places(0.00068, 0.000653, 0.000712) == 5
    assert interval_places(0.000222, 0.0002201, 0.0002266) == 5
    assert interval_places(5.0, 5.0, 5.0) == 3  # (no spread: one point, rightly)

    def table(*estimates: Estimate) -> list[str]:
        s = Summary(experiment="x", mode="simulation", policy="p", class_names=("a", "b"), classes=estimates[:2],
                    overall=estimates[2], mean_wait=(0.0, 0.0), machine_names=("M1",), utilisation=(0.5,),
                    replications=5, horizon=1.0, warmup=0.1, seed=1, load=None, jobs_simulated=3, unfinished=0,
                    elapsed_s=1.0)
        return format_table(s).splitlines()[2:5]

    rows = table(Estimate(10, 0.00068, 0.000653, 0.000712), Estimate(10, 0.000222, 0.0002201, 0.0002266),
                 Estimate(20, 0.2060, 0.198, 0.214))
    for row in rows:
        mean, low, high = (float(x.strip("(),")) for x in row.split()[2:5])
        assert low <= mean <= high and low < high, row
    assert rows[2].split()[2:5] == ["0.2060", "(0.198,", "0.214)"]
