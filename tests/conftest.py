"""Fixtures shared by the tests that start real processes or sockets."""

from __future__ import annotations

from collections.abc import Iterator

import psutil
import pytest
import zmq


@pytest.fixture
def no_children_left() -> Iterator[None]:
    """After the test, no child process of the test may be left running, or left SIGSTOPped (killed either way)."""
    yield
    me = psutil.Process()
    left = [p for p in me.children(recursive=True) if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    stopped = [p for p in left if p.status() == psutil.STATUS_STOPPED]
    for p in left:
        p.kill()
    assert not left, f"children left behind: {left} (stopped: {stopped})"


@pytest.fixture
def ctx() -> Iterator[zmq.Context]:
    """A ZeroMQ context of the test's own, destroyed (sockets closed at once) after it."""
    c = zmq.Context()
    try:
        yield c
    finally:
        c.destroy(linger=0)
