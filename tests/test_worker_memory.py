"""A worker frees its cyclic garbage in batches: once its resident memory has grown by a limit."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

import psutil
import pytest

from mgst import worker_memory
from mgst.config import load_experiment
from mgst.sim import replications


class _Node:
    """A reference cycle's member: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def collector_paused():
    """The cyclic collector off, as during a simulation; on again and run afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        gc.collect()


def test_the_limit_is_a_quarter_of_a_cores_share_of_memory_at_most_1_gib():
    total = psutil.virtual_memory().total
    assert worker_memory.GARBAGE_LIMIT == min(1 << 30, total // (4 * os.cpu_count()))


# Resident memory is only a fair gauge in a fresh process: one that has run other tests keeps freed
# arenas, and new objects reuse them without growing. So these run in a fresh interpreter, as a
# sweep worker does. Each prints how many times it collected, whether its last object was freed,
# and how much its resident memory grew.
_FRESH_PROCESS_PROLOGUE = """
import gc, json, weakref
import psutil
from mgst import worker_memory
gc.disable()

class Node:
    def __init__(self):
        self.me = self
"""


def _run_fresh(body: str) -> dict:
    """Run ``body`` after the prologue in a fresh interpreter; what it printed, as JSON."""
    done = subprocess.run([sys.executable, "-c", _FRESH_PROCESS_PROLOGUE + textwrap.dedent(body)],
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)


def test_a_large_first_run_is_freed():
    # The baseline is taken at import, before any run, not after the first one.
    result = _run_fresh("""
        worker_memory.GARBAGE_LIMIT = 32 << 20
        nodes = [Node() for _ in range(500_000)]  # about 46 MB of cycles
        last = weakref.ref(nodes[-1])
        del nodes
        collected = worker_memory.free_garbage_if_grown()
        print(json.dumps({"collected": collected, "freed": last() is None}))
    """)
    assert result == {"collected": True, "freed": True}


def test_real_garbage_is_bounded():
    # About 37 MB of cycles a round, 300 MB in all, a 64 MB limit: the process holds little more.
    result = _run_fresh("""
        worker_memory.GARBAGE_LIMIT = 64 << 20
        start = psutil.Process().memory_info().rss
        collections = 0
        for _ in range(8):
            nodes = [Node() for _ in range(400_000)]
            for a, b in zip(nodes, nodes[1:]):
                a.next = b
            del nodes, a, b
            collections += worker_memory.free_garbage_if_grown()
        grown = psutil.Process().memory_info().rss - start
        print(json.dumps({"collections": collections, "grown": grown}))
    """)
    assert result["collections"] >= 2
    assert result["grown"] < 150 << 20


@pytest.mark.parametrize("grown", [False, True])
def test_it_collects_only_past_the_limit_and_takes_a_new_baseline(monkeypatch, collector_paused, grown):
    monkeypatch.setattr(worker_memory, "_resident_after_collection", 0)  # as if collected with nothing resident
    monkeypatch.setattr(worker_memory, "GARBAGE_LIMIT", 1 if grown else 1 << 62)
    cycle = weakref.ref(_Node())
    assert worker_memory.free_garbage_if_grown() is grown
    assert (cycle() is None) == grown
    if grown:
        assert 0 < worker_memory._resident_after_collection <= psutil.Process().memory_info().rss * 2


def test_a_simulation_frees_its_replications_in_batches(monkeypatch):
    calls = []
    monkeypatch.setattr(replications, "free_garbage_if_grown", lambda: calls.append(1))
    exp = load_experiment(Path(__file__).resolve().parents[1] / "experiments" / "hihi-mfd-fd.toml")
    replications.run_simulation(exp, horizon=200.0, warmup=0.0, replications=3, workers=1)
    assert len(calls) == 3


def test_records_made_out_of_sight_are_walked_by_no_collection_until_memory_has_grown():
    result = _run_fresh("""
        gc.enable()
        worker_memory.GARBAGE_LIMIT = 1 << 62  # not grown
        with worker_memory.records_out_of_sight():
            paused = not gc.isenabled()
            node = Node()
            last = weakref.ref(node)
            del node
        resumed = gc.isenabled()
        gc.collect()
        kept = last() is not None  # frozen: not even a full collection frees it
        not_grown = not worker_memory.free_garbage_if_grown()
        kept_still = last() is not None
        worker_memory._resident_after_collection, worker_memory.GARBAGE_LIMIT = 0, 0  # grown
        collected = worker_memory.free_garbage_if_grown()
        print(json.dumps({"paused": paused, "resumed": resumed, "kept": kept, "not grown": not_grown,
                          "kept still": kept_still, "collected": collected, "freed": last() is None}))
    """)
    assert result == {"paused": True, "resumed": True, "kept": True, "not grown": True, "kept still": True,
                      "collected": True, "freed": True}


def test_out_of_sight_leaves_a_paused_collector_paused_and_freezes_after_an_error_too():
    result = _run_fresh("""
        try:
            with worker_memory.records_out_of_sight():
                node = Node()
                last = weakref.ref(node)
                del node
                raise ValueError
        except ValueError:
            pass
        gc.collect()
        print(json.dumps({"enabled": gc.isenabled(), "kept": last() is not None}))
    """)
    assert result == {"enabled": False, "kept": True}


def test_a_simulation_leaves_no_records_to_freeze():
    # A run of 5,300 jobs kept no records (a JobRecord, a ReplicaRecord and a history list each, at least, which
    # it left frozen when it kept them): each job's went as it ended.
    result = _run_fresh(f"""
        gc.enable()
        from mgst.sim import replications
        from mgst.config import load_experiment
        exp = load_experiment({str(Path(__file__).resolve().parents[1] / "experiments" / "hihi-mfd-fd.toml")!r})
        gc.freeze()  # what there is before the run
        before = gc.get_freeze_count()
        summary, _ = replications.run_simulation(exp, horizon=200.0, warmup=0.0, replications=1, workers=1)
        print(json.dumps({{"jobs": summary.jobs_simulated, "frozen": gc.get_freeze_count() - before}}))
    """)
    assert result["jobs"] > 5000 and result["frozen"] < result["jobs"] / 2  # (the policy's, the heap's: about 1,500)


@pytest.mark.parametrize(("asked", "started"), [(50, 2), (2, 2), (1, None)])
def test_no_more_worker_processes_than_replications(monkeypatch, asked, started):
    """--workers 1000 of 50 replications started 1,000 processes; a pool is never wider than the replications."""
    pools = []
    real = replications.InterruptiblePool

    class Recorded(real):  # type: ignore[misc, valid-type]
        def __init__(self, workers: int, *args, **kwargs):
            pools.append(workers)
            super().__init__(workers, *args, **kwargs)

        def __class_getitem__(cls, item):  # (InterruptiblePool[int](workers), as run_simulation makes one)
            return cls

    monkeypatch.setattr(replications, "InterruptiblePool", Recorded)
    exp = load_experiment(Path(__file__).resolve().parents[1] / "experiments" / "hihi-mfd-fd.toml")
    replications.run_simulation(exp, horizon=50.0, warmup=0.0, replications=2, workers=asked)
    assert pools == ([] if started is None else [started])
