"""Fixtures shared by the tests that start real processes or sockets."""

from __future__ import annotations

from collections.abc import Iterator

import psutil
import pytest
import zmq
from helpers import is_suspended


@pytest.fixture
def no_children_left() -> Iterator[None]:
    """After the test, no child process of the test may be left running, or left stopped or frozen (killed
    either way)."""
    yield
    me = psutil.Process()
    left = [p for p in me.children(recursive=True) if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    suspended = [p for p in left if is_suspended(p.pid)]
    for p in left:
        p.kill()
    assert not left, f"children left behind: {left} (stopped or frozen: {suspended})"


@pytest.fixture
def ctx() -> Iterator[zmq.Context]:
    """A ZeroMQ context of the test's own, destroyed (sockets closed at once) after it."""
    c = zmq.Context()
    try:
        yield c
    finally:
        c.destroy(linger=0)
