"""The lab network's plumbing: a network namespace per puller, joined to the root namespace by a pair of TUN
devices whose packets the relay (mgst.netem.relay) carries; set up, and torn down leaving nothing behind."""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from mgst.netem.relay import COUNTS
from mgst.netem.spec import LinkSpec, NetworkSpec

log = logging.getLogger(__name__)

TUN = "/dev/net/tun"
# linux/if_tun.h: the ioctl naming a TUN device, and its flags (IP packets, no packet-information header).
TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
NAMESPACE_PREFIX = "mgst-net-"  # mgst-net-PID-K: the pid of the run that made it (stale ones are removed)
DEVICE_IN_NAMESPACE = "mgst0"  # the puller's end, in its namespace (so it cannot clash)
# 10.214.X.0/24 per run (tests/lab_network.py uses 10.213): X.1 the mapper, X.2.. the pullers.
SUBNET = "10.214"
MAX_LINKS = 253
# Seconds for an `ip` command (each takes milliseconds; a wedged one must not hang the run).
IP_TIMEOUT = 30.0
# Seconds the relay gets to say it is ready, and to leave once told to.
RELAY_START = 20.0
RELAY_STOP = 5.0


_running = False  # a LabNetwork of this process is up (its names hold the pid: one at a time)


class NetworkError(RuntimeError):
    """The lab network cannot be set up here (no root, no TUN, an `ip` command failed)."""


def check_possible() -> None:
    """NetworkError saying why this machine cannot make the lab network, else nothing."""
    if os.geteuid() != 0:
        raise NetworkError("needs root (network namespaces and TUN devices)")
    if not os.path.exists(TUN):
        raise NetworkError(f"needs {TUN} (the TUN driver)")
    if shutil.which("ip") is None:
        raise NetworkError("needs the ip command (Debian: apt-get install iproute2)")


@dataclass(slots=True)
class Link:
    """One puller's link: its namespace and address, the mapper's end in the root namespace."""

    machine: str
    namespace: str
    address: str  # the puller's, in its namespace
    device: str  # the mapper's end, in the root namespace
    spec: LinkSpec
    root_fd: int = -1  # the TUN fds (the relay's once it runs)
    namespace_fd: int = -1


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """``ip ARGS``; NetworkError if it fails (with ``check``) or takes more than IP_TIMEOUT (always)."""
    try:
        result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise NetworkError(f"ip {' '.join(args)}: no answer in {IP_TIMEOUT:g} s") from None
    if check and result.returncode != 0:
        raise NetworkError(f"ip {' '.join(args)}: {result.stderr.strip() or f'exit {result.returncode}'}")
    return result


def open_tun(name: str) -> int:
    """A new (non-persistent) TUN device named ``name`` in this namespace: it lives as long as the fd."""
    fd = os.open(TUN, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    except OSError as e:
        os.close(fd)
        raise NetworkError(f"cannot create TUN device {name}: {e}") from None
    return fd


def remove_stale() -> list[str]:
    """Remove the namespaces (and what runs in them) of earlier runs whose process is gone (killed, crashed), and
    those named with this process's pid (a dead run's that had it: this process has none before its network)."""
    removed = []
    for line in ip("netns", "list", check=False).stdout.splitlines():
        m = re.match(rf"^({re.escape(NAMESPACE_PREFIX)}(\d+)-\d+)\b", line)
        if m is None or (int(m.group(2)) != os.getpid() and _alive(int(m.group(2)))):
            continue
        remove_namespace(m.group(1))
        removed.append(m.group(1))
    if removed:
        log.warning("removed %d namespaces left by runs that died: %s", len(removed), " ".join(removed))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_namespace(name: str) -> None:
    """Kill what runs in namespace ``name``, and delete it (its devices go with it)."""
    for pid in ip("netns", "pids", name, check=False).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    ip("netns", "del", name, check=False)


def _counts(relay_log: str) -> list[dict]:
    """The counts the relay said at its end ([] if it did not: it was killed)."""
    for line in reversed(relay_log.splitlines()):
        if line.startswith(COUNTS):
            try:
                return json.loads(line[len(COUNTS):])
            except ValueError:
                return []
    return []


def totals(counts: list[dict]) -> dict[str, int]:
    """The counts of every link direction added up (each direction of a packet counts once)."""
    keys = ("packets", "bytes", "lost", "overflowed", "write_errors")
    return {k: sum(int(c.get(k, 0)) for c in counts) for k in keys}


def _free_subnet() -> int:
    """X with 10.214.X.0/24 on no interface here (another run's)."""
    used = {int(x) for x in re.findall(rf"{re.escape(SUBNET)}\.(\d+)\.", ip("-4", "-o", "addr").stdout)}
    start = os.getpid() % 254
    for i in range(254):
        x = (start + i) % 254 + 1
        if x not in used:
            return x
    raise NetworkError(f"every {SUBNET}.X.0/24 is in use")


class LabNetwork:
    """Namespaces and links for ``machines``, and the relay carrying their packets (a child process). Use as a
    context manager, or call start() then close() (always: close() removes whatever start() made, even half)."""

    def __init__(self, spec: NetworkSpec, machines: list[str], seed: int = 0):
        if len(machines) > MAX_LINKS:
            raise NetworkError(f"--network gives at most {MAX_LINKS} pullers a link ({len(machines)} asked)")
        self.spec = spec
        self.machines = machines
        self.seed = seed
        self.relay_log = ""  # what the relay said (its counts at its end), once closed
        self.counts: list[dict] = []  # each link direction's packets, bytes, lost..., once closed (relay.Direction)
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by close())
        self.links: list[Link] = []
        self.namespaces: list[str] = []  # made (removed on close, even those of half-made links)
        self.relay: subprocess.Popen | None = None
        self.mapper_address = ""
        self.prefix = f"{NAMESPACE_PREFIX}{os.getpid()}-"  # of its namespaces (and named in the relay's command line)
        self.closed = False
        self._up = False  # start() claimed this process's one network

    def __enter__(self) -> LabNetwork:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        global _running  # noqa: PLW0603 (one network per process: its names hold the pid)
        if _running:
            raise NetworkError("a lab network is up in this process already (one per process: names hold the pid)")
        check_possible()
        _running = True
        self._up = True
        pid = os.getpid()
        try:  # (from here on: close() gives the claim back, whatever fails)
            remove_stale()
            x = _free_subnet()
            self.mapper_address = f"{SUBNET}.{x}.1"
            for k, machine in enumerate(self.machines):
                link = Link(machine, f"{self.prefix}{k}", f"{SUBNET}.{x}.{k + 2}", f"mgn{pid}x{k}",
                            self.spec.link_for(machine))
                self._make(link)
            self._start_relay()
        except BaseException:
            self.close()
            raise
        log.info("lab network up: %d links from %s, %s", len(self.links), self.mapper_address, self.spec.text)

    def _make(self, link: Link) -> None:
        ip("netns", "add", link.namespace)
        self.namespaces.append(link.namespace)
        self.links.append(link)
        link.root_fd = open_tun(link.device)
        outer = f"{link.device}n"  # the puller's end, before it moves into the namespace
        link.namespace_fd = open_tun(outer)
        ip("link", "set", outer, "netns", link.namespace)
        ns = ("-n", link.namespace)
        ip(*ns, "link", "set", outer, "name", DEVICE_IN_NAMESPACE)
        ip("addr", "add", self.mapper_address, "peer", link.address, "dev", link.device)
        ip("link", "set", link.device, "up")
        ip(*ns, "addr", "add", link.address, "peer", self.mapper_address, "dev", DEVICE_IN_NAMESPACE)
        ip(*ns, "link", "set", DEVICE_IN_NAMESPACE, "up")
        ip(*ns, "link", "set", "lo", "up")
        ip(*ns, "route", "add", "default", "dev", DEVICE_IN_NAMESPACE)

    def _start_relay(self) -> None:
        config = {"run": self.prefix, "seed": self.seed, "links": [{"machine": lk.machine, "root_fd": lk.root_fd,
                                                "namespace_fd": lk.namespace_fd, "link": lk.spec.as_dict()}
                                               for lk in self.links]}
        fds = [fd for lk in self.links for fd in (lk.root_fd, lk.namespace_fd)]
        # its own session: Ctrl-C in the terminal reaches the mapper alone, which drains over the network; and its
        # own scheduling group, raised with it (mgst.netem.priority)
        self.relay = subprocess.Popen([sys.executable, "-m", "mgst.netem.relay", json.dumps(config)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                      pass_fds=fds, start_new_session=True)
        self._close_fds()  # the relay holds them now: the devices vanish when it ends, however it ends
        assert self.relay.stdout is not None
        ready, _, _ = select.select([self.relay.stdout], [], [], RELAY_START)
        line = self.relay.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            self._log.seek(0)
            said = self._log.read().decode(errors="replace").strip().splitlines()
            raise NetworkError(f"the network relay did not start: {said[-1] if said else 'it said nothing'}")

    def _close_fds(self) -> None:
        for link in self.links:
            for fd in (link.root_fd, link.namespace_fd):
                if fd >= 0:
                    os.close(fd)
            link.root_fd = link.namespace_fd = -1

    def argv(self, machine_index: int, argv: list[str]) -> list[str]:
        """``argv`` run inside machine ``machine_index``'s namespace."""
        return ["ip", "netns", "exec", self.links[machine_index].namespace, *argv]

    def relay_failed(self) -> bool:
        """The relay has ended though it was not told to (it crashed or was killed)."""
        return self.relay is not None and not self.closed and self.relay.poll() is not None

    def close(self) -> None:
        """Stop the relay, remove every namespace and device made. Idempotent; every step tried."""
        global _running  # noqa: PLW0603
        if self.closed:
            return
        self.closed = True
        try:
            self._stop_relay()
        finally:
            self._log.seek(0)
            self.relay_log = self._log.read().decode(errors="replace")
            self._log.close()
            self.counts = _counts(self.relay_log)
            self._close_fds()
            for name in self.namespaces:
                try:
                    remove_namespace(name)
                except Exception:  # (an ip that timed out): the next run's remove_stale() takes it
                    log.exception("could not remove namespace %s", name)
            try:
                for link in self.links:
                    try:
                        if ip("link", "show", link.device, check=False).returncode == 0:
                            ip("link", "del", link.device, check=False)
                    except Exception:  # (an ip that timed out): the device goes with the relay's fd anyway
                        log.exception("could not remove device %s", link.device)
            finally:
                if self._up:
                    _running = False
        log.info("lab network down")

    def _stop_relay(self) -> None:
        relay = self.relay
        if relay is None:
            return
        try:
            if relay.stdin is not None:
                relay.stdin.close()  # its end of file: it leaves
            try:
                relay.wait(RELAY_STOP)
            except subprocess.TimeoutExpired:
                log.warning("the network relay did not stop in %.0f s: killed", RELAY_STOP)
        finally:
            if relay.poll() is None:
                relay.kill()
                relay.wait()
            if relay.stdout is not None:
                relay.stdout.close()

