"""Tests for the ready queue (mgst.core.ready) against a plain model: an OrderedDict and counts."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mgst.core.ready import ReadyQueue

MACHINES = 8
operations = st.lists(
    st.tuples(st.sampled_from(["add", "remove", "discard", "move_to_end", "rotate_to", "keys"]),
              st.integers(0, MACHINES - 1), st.integers(0, 2)),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_the_queue_behaves_as_an_ordered_dict_with_counts_by_key(ops):
    queue, model = ReadyQueue(), OrderedDict()
    keys: list[int] | None = None
    for op, machine, salt in ops:
        if op == "add":
            if machine in model:
                with pytest.raises(ValueError):
                    queue.add(machine)
                continue
            queue.add(machine)
            model[machine] = None
        elif op in ("remove", "move_to_end", "rotate_to") and machine not in model:
            with pytest.raises(KeyError):
                getattr(queue, op)(machine)
            continue
        elif op == "remove":
            queue.remove(machine)
            del model[machine]
        elif op == "discard":
            queue.discard(machine)
            model.pop(machine, None)
        elif op == "move_to_end":
            queue.move_to_end(machine)
            model.move_to_end(machine)
        elif op == "rotate_to":  # those in front of it go to the back, in order
            queue.rotate_to(machine)
            for passed in list(model)[: list(model).index(machine)]:
                model.move_to_end(passed)
        else:  # a new sequence of keys by machine index
            keys = [(j * (salt + 1)) % 3 for j in range(MACHINES)]
            assert queue.keys_present(keys) == len({keys[j] for j in model})
        assert list(queue) == list(model)
        assert len(queue) == len(model)
        assert all((j in queue) == (j in model) for j in range(-1, MACHINES + 2))
        assert queue.head == (next(iter(model)) if model else -1)
        queue.check()
        if keys is not None:
            assert queue.keys_present(keys) == len({keys[j] for j in model})
            assert [queue.links[j].key for j in model] == [sorted(set(keys), key=keys.index).index(keys[j])
                                                        for j in model]


def test_the_walk_links_are_those_of_the_order():
    queue = ReadyQueue()
    for j in (5, 2, 9, 0):
        queue.add(j)
    queue.rotate_to(9)
    assert list(queue) == [9, 0, 5, 2]
    assert [queue.links[j].next for j in (9, 0, 5, 2)] == [0, 5, 2, 9]  # a cycle: the back leads to the head
    queue.move_to_end(0)
    assert list(queue) == [9, 5, 2, 0]
    queue.remove(9)
    assert list(queue) == [5, 2, 0] and queue.head == 5
    queue.add(9)
    assert list(queue) == [5, 2, 0, 9]


def test_keys_must_cover_every_machine_the_queue_has_seen():
    queue = ReadyQueue()
    for j in (0, 3):
        queue.add(j)
    with pytest.raises(IndexError, match="machine 2 has no key"):
        queue.keys_present(["a", "b"])
    assert queue.keys_present(["a", "b", "a", "c"]) == 2  # machines 0 and 3: keys a and c
    with pytest.raises(IndexError, match="machine 4 has no key"):
        queue.add(4)
    queue.check()
