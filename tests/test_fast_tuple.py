"""mgst.core.tuples's new_tuple(cls, *items), in C and its Python twin: tuple.__new__(cls, items), same refusals."""

from __future__ import annotations

import gc
import pickle
import sys
import time
from typing import NamedTuple

import pytest
from helpers import c_twin_params

from mgst.core.decisions import Assign, Cancel, Eta, JobCompleted
from mgst.core.tuples import py_new_tuple
from mgst.model import Job

c_new_tuple, MAKERS = c_twin_params("mgst.core._tuples", "new_tuple", py_new_tuple, "mgst.core._tuples")
needs_c = pytest.mark.skipif(c_new_tuple is None, reason="mgst.core._tuples is not built here (pip install -e .)")


class Point(NamedTuple):
    x: float
    y: float = 0.0


class Tagged(tuple):  # a plain subclass of tuple, with an instance dict
    pass


JOB = Job(7, 1, 2.5, 0.75)
CASES = [
    (Assign, (JOB, 3, 1001, 0.25, True, 7.5, 1.0)),
    (Eta, (1001, 7.5, 0.0)),
    (JobCompleted, (JOB, 1001, 3)),
    (Cancel, (1002, 4, 7)),
    (Job, (8, 0, 3.0, 1.5, None)),
    (Point, (1.0, 2.0)),
    (Tagged, ()),
    (Tagged, ("a", ["b"], None)),
    (tuple, (1, "two", 3.0)),
]


@pytest.mark.parametrize("new_tuple", MAKERS)
@pytest.mark.parametrize(("cls", "items"), CASES)
def test_the_same_object_as_tuple_new(new_tuple, cls, items):
    made, expected = new_tuple(cls, *items), tuple.__new__(cls, items)
    assert type(made) is cls
    assert made == expected and tuple(made) == items
    assert all(a is b for a, b in zip(made, items, strict=True))  # the items themselves, not copies
    assert repr(made) == repr(expected)
    if cls is not tuple:  # (tuple.__new__(tuple, items) is items, which the collector may have untracked)
        assert gc.is_tracked(made) == gc.is_tracked(expected)
    assert pickle.loads(pickle.dumps(made)) == made


@pytest.mark.parametrize("new_tuple", MAKERS)
def test_named_fields_and_a_dict_where_the_class_has_one(new_tuple):
    a = new_tuple(Assign, JOB, 3, 1001, 0.25, True)
    assert (a.job, a.machine, a.replica, a.progress, a.staging) == (JOB, 3, 1001, 0.25, True)
    t = new_tuple(Tagged, 1, 2)
    t.note = "kept"  # a subclass with an instance dict gets one, as from tuple.__new__
    assert t.note == "kept" and t == (1, 2)


@needs_c
def test_references_are_counted():
    item = object()
    before = sys.getrefcount(item)
    made = [c_new_tuple(Point, item, 0.0) for _ in range(100)]
    assert sys.getrefcount(item) == before + 100
    del made
    assert sys.getrefcount(item) == before


@pytest.mark.parametrize("new_tuple", MAKERS)
# time.struct_time is a tuple subtype with a C __new__ of its own: tuple.__new__ refuses it as unsafe.
@pytest.mark.parametrize("args", [(), (list, 1), (Point(1.0, 2.0), 1.0), (3, 1.0), (time.struct_time, 1, 2)])
def test_refusals(new_tuple, args):
    with pytest.raises(TypeError):
        new_tuple(*args)


@needs_c
@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "at least 1 argument"),
        ((list, 1), "must be a subtype of tuple"),
        ((Point(1.0, 2.0),), "subtype of tuple"),
        ((time.struct_time, 1, 2), "not safe"),
    ],
)
def test_the_c_refusals_say_why(args, message):
    with pytest.raises(TypeError, match=message):
        c_new_tuple(*args)
