"""The simulator's event heaps, C and heapq, against a sorted list: same entries, same order, same errors."""

from __future__ import annotations

import gc
import sys
import weakref

import pytest
from helpers import c_twin_params
from hypothesis import given, settings
from hypothesis import strategies as st

from mgst.sim.event_heap import PyEventHeap

CEventHeap, HEAPS = c_twin_params("mgst.sim._event_heap", "EventHeap", PyEventHeap, "the C event heap")
needs_c = pytest.mark.skipif(CEventHeap is None, reason="the C event heap is not built here (pip install -e .)")

# Few distinct times and kinds, so that ties are common: order falls to kind, then to seq.
TIMES = st.sampled_from([0.0, 1.0, 1.5, 2.0, float("inf")]) | st.floats(0.0, 3.0, allow_nan=False)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("push"), TIMES, st.integers(0, 3)),
        st.just(("pop",)),
        st.tuples(st.just("reset"), st.integers(0, 2)),  # keep the entries whose seq % 3 != this
    ),
    max_size=200,
)


@pytest.mark.parametrize("heap_class", HEAPS)
@settings(max_examples=300, deadline=None)
@given(ops=OPS)
def test_entries_come_out_in_tuple_order(heap_class, ops):
    heap = heap_class()
    model: list[tuple] = []  # the entries held, kept sorted: the least is model[0]
    seq = 0
    for op in ops:
        if op[0] == "push":
            entry = (op[1], op[2], seq, object())
            seq += 1
            heap.push(entry)
            model.append(entry)
            model.sort(key=lambda e: e[:3])
        elif op[0] == "pop":
            if not model:
                with pytest.raises(IndexError):
                    heap.pop()
                with pytest.raises(IndexError):
                    heap.peek()
            else:
                assert heap.peek() is model[0]  # left in place...
                assert heap.pop() is model.pop(0)  # ...for pop to return
        else:
            model = [e for e in model if e[2] % 3 != op[1]]
            heap.reset(e for e in heap.entries() if e[2] % 3 != op[1])
        assert len(heap) == len(model) and bool(heap) == bool(model)
        if model:
            assert heap.peek() is model[0]
        assert sorted(map(id, heap.entries())) == sorted(map(id, model))
    while model:
        assert heap.pop() is model.pop(0)
    assert len(heap) == 0


@needs_c
@pytest.mark.parametrize(
    "entry, error",
    [
        (1.0, TypeError),  # not a tuple
        ((1.0, 0), TypeError),  # no seq
        (("1.0", 0, 0), TypeError),  # a time that is not a number
        ((float("nan"), 0, 0), ValueError),
        ((1.0, 0, 2**70), OverflowError),
    ],
)
def test_the_c_heap_refuses_what_is_not_an_event(entry, error):
    heap = CEventHeap()
    heap.push((0.5, 0, 0, None))
    with pytest.raises(error):
        heap.push(entry)
    with pytest.raises(error):
        heap.reset([(2.0, 0, 1, None), entry])  # a bad entry anywhere: nothing changes
    assert heap.entries() == [(0.5, 0, 0, None)]


@needs_c
def test_the_c_heap_holds_one_reference_per_entry_and_lets_cycles_go():
    entry = (1.0, 0, 0, object())
    before = sys.getrefcount(entry)
    heap = CEventHeap()
    heap.push(entry)
    heap.push(entry)
    assert sys.getrefcount(entry) == before + 2
    popped = heap.pop()
    assert popped is entry
    del popped
    assert sys.getrefcount(entry) == before + 1
    heap.reset([])
    assert sys.getrefcount(entry) == before
    heap.push(entry)
    del heap
    assert sys.getrefcount(entry) == before

    class Holder:
        pass

    holder = Holder()
    holder.heap = CEventHeap()
    holder.heap.push((0.0, 0, 0, holder))  # holder -> heap -> entry -> holder
    alive = weakref.ref(holder)
    del holder
    gc.collect()
    assert alive() is None
