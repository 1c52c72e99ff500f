"""The suite's default workers (pytest-xdist: three on two cores), and the fixtures shared by the tests that start real
processes or sockets."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import zmq
from helpers import is_suspended
from puller_fakes import FakeMapper, ThreadPuller
from slurm_cluster import slurm  # noqa: F401 (a fixture: a Slurm cluster of this machine's, for a test)

from mgst.wire import security

# Workers by default (pytest-xdist): most of the suite's wall time is spent waiting on real time (pullers, mappers,
# time units), which more workers than cores overlap: on CI's 2 cores, two workers kept them 117 % busy of 200 %
# (11:00), three finish in 9:00. One more than the cores, at most three: the timing tests compare against controls,
# not against an idle machine, but more workers would leave them little. `-n 0` or `-p no:xdist` runs serially;
# `-n N` chooses. Tests holding a fixed resource of the machine share an xdist_group (docs/testing.md).
DEFAULT_WORKERS = min(3, (os.cpu_count() or 1) + 1)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """Without -n, run on DEFAULT_WORKERS workers, each group of tests in one (--dist loadgroup). Runs before
    xdist's own hook, which turns -n into workers; not in a worker (which would start workers of its own), nor
    with --pdb (a debugger needs the terminal) or without xdist (-p no:xdist, or not installed)."""
    if (not config.pluginmanager.hasplugin("xdist") or hasattr(config, "workerinput")
            or config.option.numprocesses is not None or config.option.usepdb or config.option.collectonly):
        return
    config.option.numprocesses = DEFAULT_WORKERS
    if config.option.dist == "no":
        config.option.dist = "loadgroup"


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


@pytest.fixture
def keydir(tmp_path: Path) -> Path:
    """A key folder (mgst.wire.security) for the mapper and one puller, M1."""
    folder = tmp_path / "keys"
    security.create_keys(folder, ["M1"])
    return folder


@pytest.fixture
def mapper(ctx: zmq.Context, keydir: Path) -> FakeMapper:
    """A fake mapper that holds the real mapper's secret key (of ``keydir``)."""
    return FakeMapper(ctx, security.server_keys(keydir))


@pytest.fixture
def fake(ctx: zmq.Context) -> FakeMapper:
    """A fake mapper without CURVE, on loopback (puller_fakes.FakeMapper)."""
    return FakeMapper(ctx, None)


@pytest.fixture
def start(fake: FakeMapper, ctx: zmq.Context) -> Iterator[Callable[..., ThreadPuller]]:
    """start(): an in-thread insecure puller of ``fake``; each one stopped after the test (a test module may
    define a ``start`` of its own)."""
    made: list[ThreadPuller] = []

    def _start(**kwargs) -> ThreadPuller:
        p = ThreadPuller(fake.endpoint, None, ctx, insecure=True, **kwargs)
        made.append(p)
        return p

    yield _start
    for p in made:
        p.close()
