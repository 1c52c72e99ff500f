"""A policy's timer keys: the core takes exactly those a testbed run's journal keeps and gives back equal (msgpack,
as mgst.testbed.store packs and unpacks them), in simulation as on the testbed."""

from __future__ import annotations

import math

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from mgst.core.matching import journal_key

PLAIN = st.one_of(st.none(), st.booleans(), st.integers(-(1 << 70), 1 << 70), st.floats(allow_nan=False),
                  st.text(max_size=8), st.binary(max_size=8))
OTHER = st.one_of(st.frozensets(st.integers(), max_size=2), st.just(math.nan).map(lambda x: object()),
                  st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(), max_size=1))
KEYS = st.recursive(st.one_of(PLAIN, OTHER), lambda inner: st.tuples(inner) | st.tuples(inner, inner), max_leaves=6)


def kept_equal(key: object) -> bool:
    """Whether the journal's codec keeps ``key`` and gives back an equal, hashable one."""
    try:
        back = msgpack.unpackb(msgpack.packb(key, use_bin_type=True), raw=False, use_list=False,
                               strict_map_key=False)
        hash(back)
    except (TypeError, ValueError, OverflowError):
        return False
    return back == key and type(back) is type(key) or (isinstance(key, tuple) and back == key)


@given(KEYS)
def test_the_core_takes_a_timer_key_exactly_when_the_journal_gives_it_back(key: object) -> None:
    assert journal_key(key, 0) == kept_equal(key), key


def test_nesting_is_bounded() -> None:
    key: object = 1
    for _ in range(8):
        key = (key,)
    assert journal_key(key, 0)
    assert not journal_key((key,), 0)  # (nine deep: refused, as a key no policy needs)
