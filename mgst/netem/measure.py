"""Measure what a lab network link imposes: one-way delay (half the round trip of UDP echoes, median), its spread,
the loss, and the throughput of a TCP stream, from inside a puller's namespace to the mapper's address."""

from __future__ import annotations

import argparse
import contextlib
import json
import select
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from mgst.netem.links import LabNetwork
from mgst.netem.priority import as_the_network_stack

# Bytes of each echo's payload: a small message, as the mapper's and pullers' are.
ECHO_SIZE = 64
# Seconds the answers to the last echoes are awaited (well above a round trip of 2 x 50 ms, on a busy machine).
ECHO_WAIT = 3.0
# Seconds the echo server's process may take to start (imports, on a busy machine).
SERVER_START = 60.0
# Bytes per send() of the TCP stream.
CHUNK = 16384


@dataclass(frozen=True, slots=True)
class Echoes:
    """UDP echoes across a link: ``rtts`` (seconds) of those answered, ``sent`` in all."""

    rtts: list[float]
    sent: int

    @property
    def one_way_median(self) -> float:
        return statistics.median(self.rtts) / 2

    @property
    def loss(self) -> float:
        """Fraction of echoes unanswered: 1 - (1 - p)^2 for a loss p each way."""
        return 1 - len(self.rtts) / self.sent

    def as_dict(self) -> dict:
        q = statistics.quantiles(self.rtts, n=20) if len(self.rtts) >= 2 else [float("nan")] * 19
        return {"sent": self.sent, "answered": len(self.rtts), "one_way_median_ms": self.one_way_median * 1e3,
                "one_way_p5_ms": q[0] * 1e3 / 2, "one_way_p95_ms": q[-1] * 1e3 / 2,
                "rtt_stdev_ms": statistics.pstdev(self.rtts) * 1e3, "echo_loss": self.loss}


def echo_server(sock: socket.socket, stop: threading.Event) -> None:
    """Send each datagram (at most 2 KiB) back to its sender, until ``stop`` is set."""
    sock.settimeout(0.2)
    while not stop.is_set():
        try:
            data, peer = sock.recvfrom(2048)
        except TimeoutError:
            continue
        except OSError:
            return
        sock.sendto(data, peer)


@contextlib.contextmanager
def serving_echoes(host: str) -> Iterator[int]:
    """An echo server on ``host`` (a port of its own, yielded) in a process and session of its own, at the network
    stack's priority: what the echoes measure is the link, not how late a busy machine wakes the measurer (in the
    test process's thread, a load of 12 on 2 cores put a 5 ms link's median at 6.9 ms)."""
    server = subprocess.Popen([sys.executable, "-m", "mgst.netem.measure", "serve", host], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert server.stdout is not None
        ready, _, _ = select.select([server.stdout], [], [], SERVER_START)
        line = server.stdout.readline() if ready else ""
        if not line.strip().isdigit():
            raise RuntimeError(f"the echo server did not start in {SERVER_START} s (it said {line!r})")
        yield int(line)
    finally:
        if server.stdin is not None:
            server.stdin.close()  # (its end: it stops at end of file)
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _serve(host: str) -> None:
    """The echo server's process: prints its port, echoes until its stdin ends."""
    as_the_network_stack()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((host, 0))
        stop = threading.Event()
        server = threading.Thread(target=echo_server, args=(sock, stop), daemon=True)
        server.start()
        print(sock.getsockname()[1], flush=True)
        sys.stdin.read()
        stop.set()
        server.join()


def _sink_server(sock: socket.socket, result: dict) -> None:
    """Accept one TCP stream and record how many bytes came, from its first to its last."""
    conn, _ = sock.accept()
    with conn:
        first = last = None
        total = 0
        while data := conn.recv(1 << 16):
            last = time.monotonic()
            first = first if first is not None else last
            total += len(data)
        result.update(bytes=total, seconds=(last - first) if first is not None and last is not None else 0.0)


def echoes(net: LabNetwork, link: int, count: int, interval: float, wait: float = ECHO_WAIT) -> Echoes:
    """``count`` UDP echoes ``interval`` seconds apart from link ``link``'s namespace to the mapper's address."""
    with serving_echoes(net.mapper_address) as port:
        out = _in_namespace(net, link, ["echo", net.mapper_address, str(port), str(count), str(interval), str(wait)],
                            timeout=count * interval + wait + 60)
    rtts = json.loads(out)
    return Echoes([r for r in rtts if r is not None], len(rtts))


def throughput(net: LabNetwork, link: int, nbytes: int) -> float:
    """Bits per second of a TCP stream of ``nbytes`` from link ``link``'s namespace to the mapper, as received."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((net.mapper_address, 0))
        sock.listen(1)
        result: dict = {}
        server = threading.Thread(target=_sink_server, args=(sock, result), daemon=True)
        server.start()
        _in_namespace(net, link, ["stream", net.mapper_address, str(sock.getsockname()[1]), str(nbytes)],
                      timeout=600)
        server.join(60)
    return result["bytes"] * 8 / result["seconds"]


def _in_namespace(net: LabNetwork, link: int, args: list[str], timeout: float) -> str:
    done = subprocess.run(net.argv(link, [sys.executable, "-m", "mgst.netem.measure", *args]), capture_output=True,
                          text=True, timeout=timeout, check=False, start_new_session=True)
    if done.returncode != 0:
        raise RuntimeError(f"measuring in {net.links[link].namespace} failed: {done.stderr.strip()}")
    return done.stdout


def _client_echo(host: str, port: int, count: int, interval: float, wait: float) -> list[float | None]:
    """RTT of each echo (None: unanswered), sent ``interval`` apart whatever the answers; after the last, answers
    are awaited ``wait`` seconds at most."""
    rtts: list[float | None] = [None] * count
    sent_at: list[float] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect((host, port))
        sock.setblocking(False)
        start = time.monotonic()
        end = float("inf")
        while True:
            now = time.monotonic()
            i = len(sent_at)
            if i < count and now >= start + i * interval:
                sent_at.append(now)
                sock.send(i.to_bytes(4, "big") + bytes(ECHO_SIZE - 4))
                continue
            if i == count:
                end = min(end, now + wait)
                if now >= end or all(r is not None for r in rtts):
                    break
            wake = start + i * interval if i < count else end
            readable, _, _ = select.select([sock], [], [], max(0.0, wake - now))
            while readable:
                try:
                    data = sock.recv(2048)
                except BlockingIOError:
                    break
                got = time.monotonic()
                seq = int.from_bytes(data[:4], "big")
                if len(data) == ECHO_SIZE and seq < len(sent_at) and rtts[seq] is None:
                    rtts[seq] = got - sent_at[seq]
    return rtts


def _client_stream(host: str, port: int, nbytes: int) -> None:
    chunk = bytes(CHUNK)
    with socket.create_connection((host, port), timeout=60) as sock:
        left = nbytes
        while left > 0:
            sock.sendall(chunk[:left])
            left -= min(left, CHUNK)


def main() -> int:
    """The client side, run inside a namespace by echoes() and throughput()."""
    p = argparse.ArgumentParser(prog="python -m mgst.netem.measure")
    sub = p.add_subparsers(dest="what", required=True)
    e = sub.add_parser("echo")
    e.add_argument("host")
    e.add_argument("port", type=int)
    e.add_argument("count", type=int)
    e.add_argument("interval", type=float)
    e.add_argument("wait", type=float)
    v = sub.add_parser("serve")
    v.add_argument("host")
    s = sub.add_parser("stream")
    s.add_argument("host")
    s.add_argument("port", type=int)
    s.add_argument("nbytes", type=int)
    args = p.parse_args()
    if args.what == "serve":
        _serve(args.host)
    elif args.what == "echo":
        as_the_network_stack()  # (what it measures is the link, not how late a busy machine wakes a measurer)
        print(json.dumps(_client_echo(args.host, args.port, args.count, args.interval, args.wait)))
    else:
        _client_stream(args.host, args.port, args.nbytes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
