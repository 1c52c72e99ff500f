"""A fake mapper (a raw ROUTER socket) and in-thread pullers, for the puller tests; loopback, bounded waits."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import zmq

from mgst.wire import protocol as P
from mgst.wire import security
from puller.daemon import Puller


class FakeMapper:
    """A ROUTER socket standing in for the mapper: plain, or CURVE with the given server keys (no ZAP)."""

    def __init__(self, ctx: zmq.Context, keys: security.ServerKeys | None, endpoint: str | None = None):
        """On a free loopback port, or on ``endpoint`` (a mapper back where one was: its port may take a moment to
        be let go by the closed socket's I/O thread, so the bind is retried for up to 10 s)."""
        self.sock = ctx.socket(zmq.ROUTER)
        self.sock.linger = 0
        if keys is not None:
            security.secure_server(self.sock, keys)
        if endpoint is None:
            endpoint = f"tcp://127.0.0.1:{self.sock.bind_to_random_port('tcp://127.0.0.1')}"
        else:
            deadline = time.monotonic() + 10.0
            while True:
                try:
                    self.sock.bind(endpoint)
                    break
                except zmq.ZMQError:
                    assert time.monotonic() < deadline, f"{endpoint} still taken"
                    time.sleep(0.05)
        self.endpoint = endpoint
        self.last_heartbeat: P.Heartbeat | None = None  # the puller's latest, seen by recv()

    def recv(self, timeout: float) -> tuple[bytes, P.Message] | None:
        """The next message (any type) within ``timeout`` seconds, or None."""
        if not self.sock.poll(max(0, int(timeout * 1000))):
            return None
        ident, frame = self.sock.recv_multipart()
        msg = P.decode(frame)
        if type(msg) is P.Heartbeat:
            self.last_heartbeat = msg
        return ident, msg

    def expect(self, kind: type, timeout: float = 5.0, ignore: tuple[type, ...] = (P.Heartbeat,)):
        """(routing id, message) of the next message that is not of an ``ignore`` type; it must be a ``kind``."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            got = self.recv(left)
            if got is None:
                break
            if type(got[1]) in ignore:
                continue
            assert type(got[1]) is kind, f"expected {kind.__name__}, got {got[1]!r}"
            return got
        raise AssertionError(f"no {kind.__name__} within {timeout} s")

    def expect_at(self, kind: type, timeout: float = 5.0, ignore: tuple[type, ...] = (P.Heartbeat,)):
        """Like expect(), with the monotonic time it arrived: (message, when)."""
        _, msg = self.expect(kind, timeout, ignore)
        return msg, time.monotonic()

    def quiet(self, seconds: float, ignore: tuple[type, ...] = (P.Heartbeat,)) -> None:
        """Nothing but ``ignore`` types arrives for ``seconds``."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            got = self.recv(left)
            assert got is None or type(got[1]) in ignore, f"unexpected {got[1]!r}"

    def collect(self, seconds: float, ignore: tuple[type, ...] = (P.Heartbeat,)) -> list[tuple[P.Message, float]]:
        """Every message but ``ignore`` types that arrives within ``seconds``, with its arrival time."""
        out = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            got = self.recv(left)
            if got is not None and type(got[1]) not in ignore:
                out.append((got[1], time.monotonic()))
        return out

    def send(self, ident: bytes, msg: P.Message) -> None:
        self.sock.send_multipart([ident, P.encode(msg)])

    def welcome(self, ident: bytes, executor: str = "emulate", heartbeat: float = 2.0, *, slots: int = 1,
                time_unit: float = 1.0, share: float = 1.0, failures: tuple | None = None,
                checkpoint: float = 0.0, machine: int = 0) -> None:
        self.send(ident, P.Welcome(P.PROTOCOL_VERSION, machine, time_unit, heartbeat, share, executor, failures,
                                   slots, checkpoint))


def job(replica: int, work: float = 0.1, key: str = "", command: tuple[str, ...] = (), job_id: int = 3,
        job_class: int = 1, progress: float = 0.0, stage: float = 0.0, hold: float = 0.0) -> P.JobMsg:
    return P.JobMsg(job_id, replica, job_class, 1.5, work, progress, stage, key, command, 1.0, hold)


def client_keys(keydir: Path, name: str = "M1") -> security.ClientKeys:
    return security.client_keys(keydir / "pullers" / f"{name}.key_secret", keydir / "mapper.key")


class ThreadPuller:
    """A Puller running ``run()`` in a thread of the test; ``close()`` stops it and returns its exit code."""

    def __init__(self, endpoint: str, keys: security.ClientKeys, ctx: zmq.Context, *, slots: int = 1,
                 executors: tuple[str, ...] = ("emulate",), machine: str = "M1", **kwargs):
        self.puller = Puller(endpoint, machine, keys=keys, executors=executors, slots=slots, context=ctx, **kwargs)
        self.code: int | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"puller-{machine}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.code = self.puller.run()
        except BaseException as e:  # reported by close()
            self.error = e

    def wait(self, timeout: float) -> int | None:
        """Its exit code once run() returns within ``timeout`` seconds, else None."""
        self.thread.join(timeout)
        if self.error is not None:
            raise self.error
        return None if self.thread.is_alive() else self.code

    def close(self, timeout: float = 10.0) -> int | None:
        self.puller.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the puller thread did not stop"
        if self.error is not None:
            raise self.error
        return self.code
