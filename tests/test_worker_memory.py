"""A worker frees its cyclic garbage in batches: once its resident memory has grown by a limit."""

from __future__ import annotations

import gc
import os
import weakref
from pathlib import Path

import psutil
import pytest

from mgst import simulate, worker_memory
from mgst.config import load_experiment


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


def test_a_large_first_run_is_freed(monkeypatch, collector_paused):
    # The baseline is taken before any run (at import), not after the first one.
    monkeypatch.setattr(worker_memory, "_resident_after_collection", worker_memory.resident_memory())
    monkeypatch.setattr(worker_memory, "GARBAGE_LIMIT", 32 << 20)
    nodes = [_Node() for _ in range(500_000)]  # about 46 MB of cycles
    last = weakref.ref(nodes[-1])
    del nodes
    assert worker_memory.free_garbage_if_grown() is True
    assert last() is None


@pytest.mark.parametrize("grown", [False, True])
def test_it_collects_only_past_the_limit_and_takes_a_new_baseline(monkeypatch, collector_paused, grown):
    monkeypatch.setattr(worker_memory, "_resident_after_collection", 0)  # as if collected with nothing resident
    monkeypatch.setattr(worker_memory, "GARBAGE_LIMIT", 1 if grown else 1 << 62)
    cycle = weakref.ref(_Node())
    assert worker_memory.free_garbage_if_grown() is grown
    assert (cycle() is None) == grown
    if grown:
        assert 0 < worker_memory._resident_after_collection <= psutil.Process().memory_info().rss * 2


def test_real_garbage_is_bounded(monkeypatch, collector_paused):
    # About 37 MB of cycles a round, 300 MB in all, a 64 MB limit: the process holds little more.
    monkeypatch.setattr(worker_memory, "_resident_after_collection", worker_memory.resident_memory())
    monkeypatch.setattr(worker_memory, "GARBAGE_LIMIT", 64 << 20)
    start = psutil.Process().memory_info().rss
    collections = 0
    for _ in range(8):
        nodes = [_Node() for _ in range(400_000)]
        for a, b in zip(nodes, nodes[1:]):
            a.next = b
        del nodes, a, b
        collections += worker_memory.free_garbage_if_grown()
    assert collections >= 2
    assert psutil.Process().memory_info().rss - start < 150 << 20


def test_a_simulation_frees_its_replications_in_batches(monkeypatch):
    calls = []
    monkeypatch.setattr(simulate, "free_garbage_if_grown", lambda: calls.append(1))
    exp = load_experiment(Path(__file__).resolve().parents[1] / "experiments" / "hihi-mfd-fd.toml")
    simulate.run_simulation(exp, horizon=200.0, warmup=0.0, replications=3, workers=1)
    assert len(calls) == 3
