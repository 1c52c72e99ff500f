"""Lab "hosts" on this machine for tests/test_lab.py: a network namespace per host, with its own address, a veth
pair to the root namespace and its own sshd; all removed on the way out, and the check that nothing is left."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

SSHD = "/usr/sbin/sshd"
SSH_PORT = 2222  # sshd's port in each namespace (a fresh namespace has every port free)
_networks = itertools.count()


def need_lab() -> None:
    """Skip without root, sshd, ip or network namespaces; but FAIL on CI, which installs them."""
    why = None
    if os.geteuid() != 0:
        why = "needs root (network namespaces, sshd)"
    elif not Path(SSHD).is_file():
        why = f"no {SSHD} (Debian: apt-get install openssh-server)"
    elif missing := [t for t in ("ip", "ssh", "ssh-keygen") if shutil.which(t) is None]:
        why = f"no {', '.join(missing)} (Debian: iproute2, openssh-client)"
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the SSH launcher test: {why}")
        pytest.skip(why)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def _free_subnets(n: int) -> list[int]:
    """n third octets X with 10.213.X.0/24 used by no interface here (another run's network)."""
    used = {int(m) for m in re.findall(r"10\.213\.(\d+)\.", _ip("-4", "-o", "addr").stdout + _ip("route").stdout)}
    start = os.getpid() % 250
    free = [x % 250 + 1 for x in range(start, start + 250) if x % 250 + 1 not in used]
    return free[:n]


@dataclass
class NetHost:
    namespace: str
    veth: str  # its end in the root namespace
    root_address: str
    address: str  # the host's own address, where its sshd listens
    address6: str | None = None  # its IPv6 address, where its sshd listens too (lab_network(ipv6=True))
    sshd: subprocess.Popen | None = None


@dataclass
class LabNet:
    prefix: str
    folder: Path
    identity: Path
    known_hosts: Path
    hosts: list[NetHost] = field(default_factory=list)


def _wait_for_port(address: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((address, port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _wait_for_host_key(address: str, public: Path, timeout: float) -> None:
    """Return once the sshd at ``address`` shows the host key ``public``: the one its known_hosts line names. (Once,
    CI's suite saw "Host key verification failed" from a host whose sshd had logged no connection at all: what
    answered, if it happens again, is said here, before the test blames the launcher.)"""
    want = public.read_text().split()[1]
    deadline = time.monotonic() + timeout
    while True:
        scan = subprocess.run(["ssh-keyscan", "-T", "5", "-t", "ed25519", "-p", str(SSH_PORT), address],
                              capture_output=True, text=True, timeout=timeout + 10)
        shown = [line.split()[2] for line in scan.stdout.splitlines() if len(line.split()) >= 3]
        if want in shown:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"the sshd at {address}:{SSH_PORT} shows host keys {shown}, not its own ({want}); "
                        f"ssh-keyscan said {scan.stderr.strip()!r}; {_ip('-4', '-o', 'addr').stdout}")
        time.sleep(0.1)


@contextmanager
def lab_network(folder: Path, n: int, ipv6: bool = False) -> Iterator[LabNet]:
    """n namespaces, each a "host" with a veth to the root namespace (10.213.X.2, the root's end 10.213.X.1,
    default route through it) and an sshd admitting root with a test key; all removed on the way out. With
    ``ipv6``, the veth has IPv6 addresses too (fd00:213:X::2, the root's end fd00:213:X::1), sshd listening on both."""
    prefix = f"mgl{os.getpid() % 100000}x{next(_networks)}"
    net = LabNet(prefix, folder, folder / "id_test", folder / "known_hosts")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(net.identity)], check=True, timeout=30)
    (folder / "authorized_keys").write_text(net.identity.with_suffix(".pub").read_text())
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation folder
    try:
        for i, x in enumerate(_free_subnets(n)):
            h = NetHost(f"{prefix}n{i}", f"{prefix}r{i}", f"10.213.{x}.1", f"10.213.{x}.2")
            made = _ip("netns", "add", h.namespace, check=False)
            if made.returncode != 0:
                if os.environ.get("CI"):
                    pytest.fail(f"ip netns add: {made.stderr}")
                pytest.skip(f"no network namespaces here: {made.stderr.strip()}")
            net.hosts.append(h)
            _ip("link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.namespace)
            _ip("addr", "add", f"{h.root_address}/24", "dev", h.veth)
            _ip("link", "set", h.veth, "up")
            for cmd in (("addr", "add", f"{h.address}/24", "dev", "eth0"), ("link", "set", "eth0", "up"),
                        ("link", "set", "lo", "up"), ("route", "add", "default", "via", h.root_address)):
                _ip("-n", h.namespace, *cmd)
            listen = [h.address]
            if ipv6:  # (nodad: usable at once, no duplicate address detection to wait for)
                h.address6 = f"fd00:213:{x}::2"
                _ip("addr", "add", f"fd00:213:{x}::1/64", "dev", h.veth, "nodad")
                _ip("-n", h.namespace, "addr", "add", f"{h.address6}/64", "dev", "eth0", "nodad")
                listen.append(h.address6)
            key = folder / f"host_key{i}"
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, timeout=30)
            with net.known_hosts.open("a") as f:
                for a in listen:
                    f.write(f"[{a}]:{SSH_PORT} {' '.join(key.with_suffix('.pub').read_text().split()[:2])}\n")
            config = folder / f"sshd{i}.conf"
            config.write_text("".join(f"ListenAddress {a}\n" for a in listen) + f"Port {SSH_PORT}\nHostKey {key}\n"
                              f"PidFile {folder}/sshd{i}.pid\nAuthorizedKeysFile {folder}/authorized_keys\n"
                              "PermitRootLogin prohibit-password\n"
                              "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
                              "StrictModes no\nPrintMotd no\nLogLevel ERROR\n")
            with (folder / f"sshd{i}.log").open("w") as log:
                h.sshd = subprocess.Popen(["ip", "netns", "exec", h.namespace, SSHD, "-D", "-e", "-f", str(config)],
                                          stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        for i, h in enumerate(net.hosts):
            try:
                for a in (h.address, h.address6):
                    if a is not None:
                        _wait_for_port(a, SSH_PORT, 20)
                        _wait_for_host_key(a, folder / f"host_key{i}.pub", 20)
            except OSError as e:
                pytest.fail(f"sshd in {h.namespace} is not listening ({e}): {(folder / f'sshd{i}.log').read_text()}")
        yield net
    finally:
        for p in processes_under(folder):  # pullers a failed test left running (their command lines name folder)
            if p.pid != os.getpid() and all(h.sshd is None or p.pid != h.sshd.pid for h in net.hosts):
                p.kill()
        for h in net.hosts:
            if h.sshd is not None:
                h.sshd.terminate()
                try:
                    h.sshd.wait(5)
                except subprocess.TimeoutExpired:
                    h.sshd.kill()
                    h.sshd.wait()
        for h in net.hosts:
            _ip("netns", "del", h.namespace, check=False)  # takes its veth pair with it
            if _ip("link", "show", h.veth, check=False).returncode == 0:
                _ip("link", "del", h.veth, check=False)


def processes_under(folder: Path) -> list[psutil.Process]:
    """Live processes whose command line names ``folder`` (pullers, sshds of a test)."""
    mark = str(folder)
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.info["status"] != psutil.STATUS_ZOMBIE and any(mark in a for a in p.info["cmdline"] or ()):
            found.append(p)
    return found


def assert_nothing_left(net: LabNet) -> None:
    assert processes_under(net.folder) == [], "a puller or an sshd is left"
    assert net.prefix not in _ip("netns", "list").stdout, "a namespace is left"
    assert net.prefix not in _ip("link").stdout, "a veth is left"
