"""Tests for the workload models: Poisson classes, bag streams, bag lists and SWF traces."""

from __future__ import annotations

import dataclasses
import gzip
import logging
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from mgst.model import (
    Bag,
    BagList,
    BagStream,
    Experiment,
    Job,
    JobClass,
    Machine,
    PoissonClasses,
    PolicySpec,
    SwfTrace,
)
from mgst.workload import make_workload
from mgst.workload import swf as swf_module
from mgst.workload.bags import BagListWorkload, BagStreamWorkload, mean_task_size
from mgst.workload.poisson import PoissonWorkload, _first_min
from mgst.workload.swf import SwfError, SwfWorkload, read_swf

DATA = Path(__file__).resolve().parent / "data"
SAMPLE = DATA / "sample.swf"
GRANULARITY = (1000.0, 5000.0, 25000.0, 125000.0)  # Anglano & Canonico's VS, S, M, L
SHORT = (50.0, 16.3, 16.3, 16.3)  # Table III, Short: sums to 98.9 %


def take(source, n: int) -> list:
    return [source.next() for _ in range(n)]


def experiment(workload, classes: tuple[JobClass, ...]) -> Experiment:
    machines = (Machine("M1", (1.0,) * len(classes)),)
    return Experiment("t", classes, machines, PolicySpec("fcfs"), workload=workload)


# ------------------------------------------------------------------ Poisson classes

# Recorded from PoissonWorkload before the granularity and the pluggable models were added:
# the MGST paper's tables are reproduced from these draws, so they must never change.
RECORDED_7_3 = [
    (0, 2, 0.3763521677519044, 0.7241957704589627, None),
    (1, 2, 0.5016086293798752, 0.23028690956729114, None),
    (2, 2, 0.6444149119612127, 0.813329306547834, None),
    (3, 2, 0.8573344623056572, 0.08437827083830711, None),
    (4, 1, 0.9618079700824379, 0.2425707370062485, None),
    (5, 2, 1.0520805025173898, 0.45095563545582573, None),
    (6, 2, 1.14325193353634, 2.329993668491687, None),
    (7, 0, 1.43747690465793, 1.7895066341069559, None),
]
RECORDED_11_0_START_5 = [
    (0, 0, 5.294657459660798, 0.08100240918289495, None),
    (1, 2, 5.991653701388598, 0.16571197960626083, None),
    (2, 2, 6.539288418948498, 0.10830096539310707, None),
    (3, 0, 7.088984991885136, 0.29144822045086877, None),
]


def test_poisson_sequence_is_unchanged():
    w = PoissonWorkload([0.5, 1.0, 2.0], seed=7, replication=3)
    assert [tuple(w.next_job()) for _ in range(8)] == RECORDED_7_3
    w = PoissonWorkload([0.5, 0.0, 2.0], seed=11, replication=0, start=5.0)
    assert [tuple(w.next()) for _ in range(4)] == RECORDED_11_0_START_5


def test_make_workload_poisson_is_the_recorded_sequence():
    classes = tuple(JobClass(str(i), a) for i, a in enumerate((0.5, 1.0, 2.0)))
    w = make_workload(experiment(PoissonClasses(), classes), seed=7, replication=3)
    assert isinstance(w, PoissonWorkload)
    assert [tuple(w.next()) for _ in range(8)] == RECORDED_7_3


def test_poisson_granularity_scales_the_unit_draw_and_keeps_the_times():
    gran = (2.0, 3.0, 0.25)
    classes = tuple(JobClass(str(i), a, x) for i, (a, x) in enumerate(zip((0.5, 1.0, 2.0), gran)))
    w = make_workload(experiment(PoissonClasses(), classes), seed=7, replication=3)
    jobs = take(w, 8)
    assert [(j.id, j.job_class, j.submitted) for j in jobs] == [r[:3] for r in RECORDED_7_3]
    assert [j.size for j in jobs] == [r[3] * gran[r[1]] for r in RECORDED_7_3]


def test_poisson_exhausted_when_no_class_arrives():
    w = PoissonWorkload([0.0], seed=1)
    assert w.peek_time() == math.inf
    with pytest.raises(StopIteration):
        w.next()



def test_poisson_exhausted_when_arrivals_start_at_infinity():
    # Its class has a rate, but its first arrival is already at inf: no job, as from a class with none.
    w = PoissonWorkload([1.0], seed=1, start=math.inf)
    assert w.peek_time() == math.inf
    with pytest.raises(StopIteration):
        w.next()


def test_poisson_with_no_class_is_exhausted_at_once():
    w = PoissonWorkload([], seed=1)
    assert w.peek_time() == math.inf
    with pytest.raises(StopIteration):
        w.next()


def test_poisson_next_class_is_the_first_of_equal_times():
    # The workload keeps the class whose job comes next; among equal times, the lowest class, as
    # times.index(min(times)) did.
    assert _first_min([2.0, 1.5, 1.5]) == 1
    assert _first_min([1.5, 2.0, 1.5]) == 0
    assert _first_min([math.inf, math.inf]) == 0
    rng = np.random.default_rng(5)
    for _ in range(200):
        times = [float(x) for x in rng.integers(0, 4, size=rng.integers(1, 6))]
        assert _first_min(times) == times.index(min(times))

# ------------------------------------------------------------------ bag streams


def stream(mix=SHORT, seed: int = 3, replication: int = 0, **changes) -> BagStreamWorkload:
    spec = BagStream(**{"bag_rate": 2e-4, "application_size": 3.6e5, "mix": mix, "spread": 0.5, **changes})
    return BagStreamWorkload(spec, GRANULARITY, seed=seed, replication=replication)


def unit_draws(bags: list[Bag], spread: float = 0.5) -> list[float]:
    """u such that size = X (1 - spread + 2 spread u), task by task."""
    return [(t.size / GRANULARITY[t.job_class] - (1 - spread)) / (2 * spread) for b in bags for t in b.tasks]


def test_bag_stream_is_deterministic_per_seed():
    one, two, other = take(stream(), 20), take(stream(), 20), take(stream(seed=4), 20)
    assert one == two
    assert [b.submitted for b in one] != [b.submitted for b in other]
    assert stream(replication=1).next() != one[0]


def test_bag_ids_job_ids_and_task_fields():
    bags = take(stream(), 30)
    assert [b.id for b in bags] == list(range(30))
    ids = [t.id for b in bags for t in b.tasks]
    assert ids == list(range(len(ids)))
    times = [b.submitted for b in bags]
    assert times == sorted(times) and times[0] > 0
    for b in bags:
        assert all(t.bag == b.id and t.submitted == b.submitted for t in b.tasks)
        assert dict(b.attributes) == {"application_size": pytest.approx(sum(t.size for t in b.tasks)),
                                      "tasks": len(b.tasks)}


def test_a_bag_stops_at_the_first_task_reaching_the_application_size():
    size = 3.6e5
    for b in take(stream(application_size=size), 200):
        work = [t.size for t in b.tasks]
        assert sum(work) >= size
        assert sum(work[:-1]) < size  # the last task overshoots by less than its own size


def test_the_mix_changes_neither_arrival_times_nor_size_draws():
    a, b = take(stream(mix=SHORT), 40), take(stream(mix=(0, 0, 1, 1)), 40)
    assert [x.submitted for x in a] == [y.submitted for y in b]
    ua, ub = unit_draws(a), unit_draws(b)
    n = min(len(ua), len(ub))
    assert np.allclose(ua[:n], ub[:n], rtol=0, atol=1e-9)
    assert [t.job_class for t in b[0].tasks] != [t.job_class for t in a[0].tasks][: len(b[0].tasks)]


def test_classes_of_weight_zero_are_never_drawn():
    for mix, allowed in (((0, 0, 1, 1), {2, 3}), ((1, 1, 0, 0), {0, 1}), ((0, 1, 0, 0), {1})):
        bags = take(stream(mix=mix, application_size=1e6), 30)
        assert {t.job_class for b in bags for t in b.tasks} == allowed


def test_the_application_size_only_moves_where_bags_are_cut():
    small, large = take(stream(application_size=1e5), 60), take(stream(application_size=4e5), 15)
    seq_small = [(t.job_class, t.size) for b in small for t in b.tasks]
    seq_large = [(t.job_class, t.size) for b in large for t in b.tasks]
    n = min(len(seq_small), len(seq_large))
    assert n > 100 and seq_small[:n] == seq_large[:n]
    assert [b.submitted for b in small[:15]] == [b.submitted for b in large]


def test_the_look_ahead_chunk_does_not_change_the_bags():
    normal = take(stream(), 10)
    w = stream()
    w._chunk = 7  # several passes per bag
    assert take(w, 10) == normal


def test_max_bags_ends_the_stream():
    w = stream(max_bags=3)
    assert len(take(w, 3)) == 3
    assert w.peek_time() == math.inf
    with pytest.raises(StopIteration):
        w.next()


def test_bag_stream_distributions_match_their_laws():
    rate, n_bags = 2e-4, 3000
    bags = take(stream(bag_rate=rate, application_size=2e5), n_bags)
    gaps = np.diff([0.0] + [b.submitted for b in bags])
    # Exp(1/rate): mean 1/rate, sd 1/rate; 4 standard errors.
    assert abs(gaps.mean() - 1 / rate) < 4 * (1 / rate) / math.sqrt(n_bags)
    tasks = [t for b in bags for t in b.tasks]
    classes = np.array([t.job_class for t in tasks])
    p = np.array(SHORT) / sum(SHORT)
    for i in range(4):
        count = int((classes == i).sum())
        assert abs(count / len(tasks) - p[i]) < 4 * math.sqrt(p[i] * (1 - p[i]) / len(tasks))
        sizes = np.array([t.size for t in tasks if t.job_class == i])
        x = GRANULARITY[i]
        assert sizes.min() >= 0.5 * x and sizes.max() <= 1.5 * x
        sd = x / math.sqrt(12)  # U[X/2, 3X/2]: width X
        assert abs(sizes.mean() - x) < 4 * sd / math.sqrt(sizes.size)


def test_bag_stream_mean_task_size_renormalises_the_mix():
    assert mean_task_size(SHORT, GRANULARITY) == pytest.approx(
        sum(p * x for p, x in zip(SHORT, GRANULARITY)) / sum(SHORT))


def test_all_vs_bags_have_about_3600_tasks():
    bags = take(stream(mix=(1, 0, 0, 0), application_size=3.6e6), 20)
    assert all(3500 < len(b.tasks) < 3700 for b in bags)


@pytest.mark.parametrize(
    "changes",
    [{"bag_rate": 0.0}, {"application_size": -1.0}, {"mix": (0, 0, 0, 0)}, {"mix": (1, -1, 1, 1)},
     {"spread": 1.0}, {"mix": (1, 1)}],
)
def test_bad_bag_stream_specs_are_refused(changes):
    with pytest.raises(ValueError):
        stream(**changes)


def test_make_workload_bag_stream_uses_the_class_granularities():
    classes = tuple(JobClass(n, 0.0, x) for n, x in zip("abcd", GRANULARITY))
    spec = BagStream(2e-4, 3.6e5, SHORT)
    w = make_workload(experiment(spec, classes), seed=3, start=100.0)
    assert take(w, 5) == take(BagStreamWorkload(spec, GRANULARITY, seed=3, start=100.0), 5)


# ------------------------------------------------------------------ bag lists


def test_bag_list_in_time_order_with_ids_and_start():
    spec = BagList(((5.0, ((1, 2.0),)), (0.0, ((0, 1.0), (1, 3.0))), (5.0, ((0, 4.0),))))
    w = BagListWorkload(spec, start=10.0)
    bags = list(w)
    assert [b.submitted for b in bags] == [10.0, 15.0, 15.0]
    assert [b.id for b in bags] == [0, 1, 2]
    assert [[(t.id, t.job_class, t.size, t.bag) for t in b.tasks] for b in bags] == [
        [(0, 0, 1.0, 0), (1, 1, 3.0, 0)], [(2, 1, 2.0, 1)], [(3, 0, 4.0, 2)]]
    assert dict(bags[0].attributes) == {"application_size": 4.0, "tasks": 2}
    assert w.peek_time() == math.inf
    with pytest.raises(StopIteration):
        w.next()


# ------------------------------------------------------------------ SWF traces


def test_swf_sample_is_read_with_skipped_jobs_counted(tmp_path, caplog):
    path = tmp_path / "copy.swf"  # a fresh path: the parse is cached per file
    shutil.copy(SAMPLE, path)
    with caplog.at_level(logging.WARNING, logger="mgst.workload.swf"):
        jobs = read_swf(path)
    assert len(jobs) == 11 and jobs.lines == 14
    assert ("skipped 3 of 14 jobs (2 with unknown or non-positive run time, 1 with unknown processors, "
            "0 with unknown submit time)") in caplog.text
    assert list(jobs.procs[:3]) == [1, 2, 4]  # job 3: allocated -1, requested 4


def test_swf_jobs_sizes_and_times():
    jobs = list(SwfWorkload(SwfTrace(str(SAMPLE), time_scale=2.0, work_scale=0.5), start=1.0))
    assert [(j.id, j.job_class, j.bag) for j in jobs] == [(i, 0, None) for i in range(11)]
    assert [j.submitted for j in jobs] == [1.0 + 2 * (s - 100) for s in (100, 100, 100, 130, 130, 200, 200, 250,
                                                                        300, 300, 300)]
    assert [j.size for j in jobs] == [0.5 * r * p for r, p in ((60, 1), (30, 2), (90, 4), (45, 1), (15, 1), (20, 8),
                                                             (25, 1), (40, 1), (10, 1), (12, 1), (14, 1))]


def test_swf_user_bags_group_consecutive_jobs_of_one_user_at_one_time():
    bags = list(SwfWorkload(SwfTrace(str(SAMPLE), bags="user")))
    assert [[t.id for t in b.tasks] for b in bags] == [[0, 1, 2], [3], [4], [5], [6], [7], [8, 9], [10]]
    assert [dict(b.attributes)["user"] for b in bags] == [3, 5, 3, -1, -1, 5, 5, 3]
    assert dict(bags[0].attributes) == {"user": 3, "queue": 1, "application_size": 480.0, "tasks": 3}
    assert all(t.bag == b.id and t.submitted == b.submitted for b in bags for t in b.tasks)


def test_swf_gzip_reads_the_same_jobs(tmp_path):
    path = tmp_path / "sample.swf.gz"
    path.write_bytes(gzip.compress(SAMPLE.read_bytes()))
    plain, packed = read_swf(SAMPLE), read_swf(path)
    assert list(plain.sizes(1.0)) == list(packed.sizes(1.0))


def line(*values) -> str:
    fields = [1, 0, 0, 10, 1, -1, -1, 1, 10, -1, 1, 1, 1, -1, 1, -1, -1, -1]
    for k, v in values:
        fields[k - 1] = v
    return " ".join(str(f) for f in fields) + "\n"


@pytest.mark.parametrize(
    ("text", "number", "fragment"),
    [
        ("; header\n" + line() + "1 2 3\n", 3, "has 3 fields, a SWF job line has 18"),
        (line() + line((4, "ten")), 2, "field 4 is not a finite number: 'ten'"),
        (line((2, "nan")), 1, "field 2 is not a finite number: 'nan'"),
        (line() + "x" * 5000 + "\n", 2, "line longer than 4096 bytes"),
        (line() + "; caf\u00e9\n", 2, "not ASCII"),
    ],
)
def test_malformed_swf_lines_name_the_file_and_line(tmp_path, text, number, fragment):
    path = tmp_path / "bad.swf"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SwfError) as info:
        read_swf(path)
    assert info.value.line == number
    assert str(info.value).startswith(f"{path}:{number}: ")
    assert fragment in str(info.value)


def test_swf_missing_file_and_job_bound(tmp_path, monkeypatch):
    with pytest.raises(SwfError, match="cannot read"):
        read_swf(tmp_path / "none.swf")
    path = tmp_path / "long.swf"
    path.write_text("".join(line((1, k), (2, k)) for k in range(1, 6)), encoding="ascii")
    monkeypatch.setattr(swf_module, "MAX_TRACE_JOBS", 4)
    with pytest.raises(SwfError, match=r"long.swf:5: more than 4 jobs"):
        read_swf(path)


def test_make_workload_swf():
    spec = SwfTrace(str(SAMPLE), bags="user")
    w = make_workload(experiment(spec, (JobClass("1", 0.0, 50.0),)), seed=1)
    assert isinstance(w, SwfWorkload) and isinstance(w.next(), Bag)
    plain = make_workload(experiment(dataclasses.replace(spec, bags="none"), (JobClass("1", 0.0),)), seed=1)
    assert isinstance(plain.next(), Job)
