"""A real Slurm on this machine for the tests: munged, slurmctld and slurmd (Debian's slurm-wlm) started with a
temporary configuration (one node, a few CPUs, free ports, state in a temporary folder), always stopped and their
state removed on the way out, even when the test fails."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

DAEMONS = {"munged": "/usr/sbin/munged", "slurmctld": "/usr/sbin/slurmctld", "slurmd": "/usr/sbin/slurmd"}
NODE = "mgstnode"
PARTITION = "mgst"
CPUS = 8  # declared (SlurmdParameters=config_overrides): more than this machine has, as a cluster node would
MAX_MINUTES = 30  # the partition's MaxTime: a longer --time is refused (EnforcePartLimits=ALL)
START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0


def need_slurm() -> None:
    """Skip without root or Slurm's daemons; but FAIL on CI, which installs them (.ci/run)."""
    why = None
    if os.geteuid() != 0:
        why = "needs root (slurmd runs jobs as their user)"
    elif missing := [p for p in DAEMONS.values() if not Path(p).is_file()]:
        why = f"no {', '.join(missing)} (Debian: apt-get install slurm-wlm)"
    elif missing := [t for t in ("sbatch", "squeue", "scontrol", "scancel", "sinfo") if shutil.which(t) is None]:
        why = f"no {', '.join(missing)} (Debian: apt-get install slurm-client)"
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Slurm tests: {why}")
        pytest.skip(why)


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    jobcomp: Path
    env: dict[str, str]  # SLURM_CONF set: Slurm's commands reach this cluster

    def run(self, *argv: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), capture_output=True, text=True, env=self.env, timeout=60, check=check,
                              input=input)

    def jobs(self) -> dict[int, tuple[str, str]]:
        """squeue's jobs that have not ended: id -> (name, state)."""
        out = self.run("squeue", "--noheader", "--format=%i|%j|%T").stdout
        return {int(i): (n, s) for i, n, s in (line.split("|") for line in out.split())}

    def wait_for(self, condition, timeout: float, what: str, step: float = 0.2):
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {timeout} s: {what}")
            time.sleep(step)


def _free_ports(n: int) -> list[int]:
    """``n`` free loopback ports below the kernel's ephemeral range (each bound, then released for the daemon).

    Not ports the kernel hands out (``bind`` to port 0, an outgoing connection's own port): between their release
    and the daemon's bind, another test's socket could take one, and slurmctld stopped with "Address already in
    use" (a CI run, beside the other worker's loopback connections). Below the range, only a test binding that very
    port could, and none does."""
    low, _ = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    candidates = list(range(max(1024, low - 12_000), low))
    random.shuffle(candidates)
    ports: list[int] = []
    for port in candidates:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:  # (in use)
                continue
        ports.append(port)
        if len(ports) == n:
            return ports
    raise RuntimeError(f"no {n} free ports below the ephemeral range ({low})")


def _config(root: Path, ports: list[int]) -> str:
    host = socket.gethostname()
    return f"""ClusterName=mgsttest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ports[0]}
SlurmdPort={ports[1]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/run/munge.sock
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
JobCompType=jobcomp/filetxt
JobCompLoc={root}/log/jobcomp.txt
EnforcePartLimits=ALL
ReturnToService=2
MpiDefault=none
KillWait=5
MessageTimeout=5
NodeName={NODE} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={CPUS} RealMemory=4000 State=UNKNOWN
PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime={MAX_MINUTES} State=UP
"""


def _stop(proc: subprocess.Popen, name: str) -> None:
    """The daemon and every process it started (job steps), ended and reaped."""
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT)
    for c in children:
        try:
            c.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(children, timeout=STOP_TIMEOUT)


def _kill_left(conf: Path) -> None:
    """Whatever this cluster started and left (a job step, a pilot's puller, reparented away from slurmd when it
    daemonized): every process of its environment (SLURM_CONF, which the daemons and every job inherit)."""
    mine = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    left = []
    for p in psutil.process_iter():
        try:
            if p.pid not in mine and p.environ().get("SLURM_CONF") == str(conf):
                left.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    for p in left:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(left, timeout=STOP_TIMEOUT)


@contextmanager
def slurm_cluster() -> Iterator[SlurmCluster]:
    """munged, slurmctld and slurmd in a new folder (removed after); yields once the node is idle."""
    need_slurm()
    # a short path of its own: munged's socket path must fit a sockaddr_un (108 bytes)
    root = Path(tempfile.mkdtemp(prefix="mgst-slurm-"))
    root.chmod(0o755)  # (munged: its socket must be reachable by every user)
    for d, mode in (("key", 0o700), ("run", 0o755), ("state", 0o755), ("spool", 0o755), ("log", 0o755)):
        (root / d).mkdir(mode=mode)
        os.chmod(root / d, mode)
    key = root / "key" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    conf = root / "slurm.conf"
    conf.write_text(_config(root, _free_ports(2)))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    logs = []
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, root, ignore_errors=True)
        started: list[tuple[subprocess.Popen, str]] = []

        def start(name: str, *args: str) -> subprocess.Popen:
            log = (root / "log" / f"{name}.out").open("w")
            logs.append(log)
            proc = subprocess.Popen([DAEMONS[name], *args], stdout=log, stderr=subprocess.STDOUT, env=env,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            started.append((proc, name))
            return proc

        def stop_all() -> None:
            for proc, name in reversed(started):
                _stop(proc, name)
            for log in logs:
                log.close()

        stack.callback(_kill_left, conf)
        stack.callback(stop_all)
        start("munged", "-F", "-f", f"--socket={root}/run/munge.sock", f"--key-file={key}",
              f"--pid-file={root}/run/munged.pid", f"--log-file={root}/log/munged.log",
              f"--seed-file={root}/state/munge.seed")
        deadline = time.monotonic() + START_TIMEOUT
        while not (root / "run" / "munge.sock").exists():
            if time.monotonic() > deadline or started[0][0].poll() is not None:
                raise RuntimeError(f"munged did not start: {(root / 'log' / 'munged.out').read_text()}")
            time.sleep(0.05)
        start("slurmctld", "-D", "-i", "-f", str(conf))
        start("slurmd", "-D", "-N", NODE, "-f", str(conf))
        cluster = SlurmCluster(root, conf, root / "log" / "jobcomp.txt", env)

        def node_idle() -> bool:
            for proc, name in started:
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.returncode}): "
                                       f"{(root / 'log' / f'{name}.out').read_text()[-2000:]}")
            done = cluster.run("sinfo", "--noheader", "--format=%t", check=False)
            return done.returncode == 0 and done.stdout.strip() == "idle"

        cluster.wait_for(node_idle, START_TIMEOUT, "the Slurm node is idle")
        try:
            yield cluster
        finally:
            # every job ended first, while slurmd is there to end their steps (then _kill_left, for any left)
            cluster.run("scancel", "--full", f"--partition={PARTITION}", check=False)
            try:
                cluster.wait_for(lambda: not cluster.jobs(), STOP_TIMEOUT, "the jobs end")
            except (AssertionError, subprocess.SubprocessError, ValueError):
                pass


@pytest.fixture
def slurm() -> Iterator[SlurmCluster]:
    """A Slurm cluster of one node, for this test; SLURM_CONF set in os.environ while it runs (mgst lab reads it)."""
    with slurm_cluster() as cluster:
        old = os.environ.get("SLURM_CONF")
        os.environ["SLURM_CONF"] = str(cluster.conf)
        try:
            yield cluster
        finally:
            if old is None:
                os.environ.pop("SLURM_CONF", None)
            else:
                os.environ["SLURM_CONF"] = old
