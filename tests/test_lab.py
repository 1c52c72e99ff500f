"""`mgst lab up / status / down` for real: an OpenSSH server in a network namespace per host, a keyed mapper in
the root namespace, pullers launched through SSH, a run to its end, `lab down`, and nothing left behind (no
puller, no sshd, no namespace, no veth). Also the hosts file's errors and the checks of what a host sends back."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from helpers import once_across_builds
from lab_network import SSH_PORT, LabNet, assert_nothing_left, lab_network, need_lab, processes_under

from mgst.cli import main
from mgst.lab import ssh
from mgst.lab.hosts import HostsFileError, load_hosts
from mgst.lab.remote import read_reply, version_number
from mgst.lab.ssh import SshError
from mgst.wire import security

ROOT = Path(__file__).resolve().parents[1]
# The machine's network namespaces and subnets (a free one is found, then taken: a race between two workers):
# every test here runs in one xdist worker, with those of test_network.py (docs/testing.md).
pytestmark = [pytest.mark.xdist_group("netns"), once_across_builds]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@dataclass
class Said:
    """What an `mgst` command run in this process returned and printed."""

    returncode: int
    stdout: str
    stderr: str


def lab(capsys, *args: str) -> Said:
    """`mgst lab ARGS`, run in this process (the command's own code; saves a Python start per call)."""
    capsys.readouterr()
    code = main(["lab", *args])
    out, err = capsys.readouterr()
    return Said(code, out, err)


def write_hosts(path: Path, net: LabNet, connect: str, hosts: dict[str, dict]) -> Path:
    pure = [f"MGST_PURE={os.environ['MGST_PURE']}"] if "MGST_PURE" in os.environ else []
    command = json.dumps([*pure, f"PYTHONPATH={ROOT}", sys.executable, "-m", "mgst"])
    text = (f'[lab]\nconnect = "{connect}"\nkeys = "keys"\n\n[defaults]\nuser = "root"\nport = {SSH_PORT}\n'
            f'identity_file = "{net.identity}"\nknown_hosts = "{net.known_hosts}"\nssh_config = "/dev/null"\n'
            f"connect_timeout = 5\nmgst = {command}\n")
    for label, keys in hosts.items():
        text += f"\n[hosts.{label}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())
    path.write_text(text)
    return path


EXPERIMENT = ('[workload]\narrival_rates = [6.0]\n[machines]\nrates = [[4.0, 4.0, 4.0, 4.0, 4.0]]\n'
              'names = ["M1", "M2", "M3", "M4", "M5"]\n[policy]\nname = "fcfs"\n[testbed]\ntime_unit = 0.1\n'
              'duration = 2.0\n')
# machines by host: h0 runs two pullers
MACHINES = {0: ["M1", "M5"], 1: ["M2"], 2: ["M3"], 3: ["M4"]}


def _wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout} s: {what}")
        time.sleep(0.1)


def test_lab_up_runs_an_experiment_through_ssh_then_down_leaves_nothing(tmp_path, capsys, no_children_left):
    """4 hosts (namespaces with sshd); `lab up` copies keys and starts a puller on each; the mapper's run ends
    with every job done; status says they exited; a second `lab up` is stopped by `lab down` (SIGTERM); an
    unreachable host is an error of its own; nothing is left."""
    need_lab()
    remote = tmp_path / "remote"  # every "host" shares this file system: each gets its own folder under it
    security.create_keys(tmp_path / "keys", ["M1", "M2", "M3", "M4", "M5"])
    secrets = [line for f in (tmp_path / "keys" / "pullers").iterdir() for line in f.read_text().splitlines()
               if "secret-key" in line]
    (tmp_path / "exp.toml").write_text(EXPERIMENT)
    with lab_network(tmp_path, 4) as net:
        # a free port of our own address (only this test uses it): the pullers are launched while the mapper
        # starts, and wait for it
        with socket.socket() as probe:
            probe.bind((net.hosts[0].root_address, 0))
            endpoint = f"tcp://{net.hosts[0].root_address}:{probe.getsockname()[1]}"
        mapper = subprocess.Popen(
            [sys.executable, "-m", "mgst", "mapper", str(tmp_path / "exp.toml"), "--bind", endpoint, "--keys",
             str(tmp_path / "keys"), "--out", str(tmp_path / "out"), "--json", "--quiet", "--register-timeout", "60",
             "--farewell", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env())
        try:
            hosts = {f"h{i}": {"address": h.address, "machines": MACHINES[i], "remote_dir": str(remote / f"h{i}")}
                     for i, h in enumerate(net.hosts)}
            (tmp_path / "allow.toml").write_text('[commands]\nwork = ["/bin/true"]\n')
            hosts["h1"]["allow_file"] = "allow.toml"  # h1's puller gets an allow-list
            hosts_file = write_hosts(tmp_path / "hosts.toml", net, endpoint, hosts)
            t0 = time.monotonic()
            # --settle: a puller must stay alive this long to be "started" (the other test sees one that does not)
            up = lab(capsys, "up", str(hosts_file), "--settle", "0.5")
            up_seconds = time.monotonic() - t0
            assert up.returncode == 0, up.stdout + up.stderr
            for i, h in enumerate(net.hosts):
                started = ", ".join(rf"{m} \(pid \d+\)" for m in MACHINES[i])
                assert re.search(rf"^h{i} \({re.escape(h.address)}\): mgst \S+ .*; started {started}; logs "
                                 rf"{remote}/h{i}/MACHINE.log$", up.stdout, re.M), up.stdout
            stdout, stderr = mapper.communicate(timeout=90)
        finally:
            if mapper.poll() is None:
                mapper.kill()
                mapper.wait()
        assert mapper.returncode == 0, stderr
        run = json.loads(stdout)
        assert run["security"] == "curve" and run["jobs_done"] == run["jobs_generated"] > 0
        # what a host holds: the mapper's public key and its own pair, secret files 600 in 700 folders
        for i, machines in MACHINES.items():
            d = remote / f"h{i}"
            assert sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()) == sorted(
                [f"{m}.{x}" for m in machines for x in ("log", "pid")] + ["keys/mapper.key"]
                + [f"keys/pullers/{m}.key_secret" for m in machines] + (["allow.toml"] if i == 1 else []))
            for m in machines:
                assert stat.S_IMODE((d / "keys" / "pullers" / f"{m}.key_secret").stat().st_mode) == 0o600
            assert stat.S_IMODE((d / "keys").stat().st_mode) == stat.S_IMODE(d.stat().st_mode) == 0o700
        # the run is over: the pullers got the mapper's Bye and left
        _wait_until(lambda: not processes_under(remote), 20, "the pullers exit after the run")
        status = lab(capsys, "status", str(hosts_file), "--lines", "50")
        assert status.returncode == 0, status.stdout + status.stderr
        for i, machines in MACHINES.items():
            for m in machines:
                assert re.search(rf"^  {m}: not running \(pid \d+ exited\); log {remote}/h{i}/{m}.log$",
                                 status.stdout, re.M), status.stdout
        assert status.stdout.count("| ---- mgst lab up ") == 5, status.stdout

        # launched again (no mapper now: they wait for one), refused while they run, then stopped by down
        up = lab(capsys, "up", str(hosts_file), "--settle", "0.5")
        assert up.returncode == 0, up.stdout + up.stderr
        only_h0 = write_hosts(tmp_path / "h0.toml", net, endpoint, {"h0": hosts["h0"]})
        again = lab(capsys, "up", str(only_h0))
        assert again.returncode == 1, again.stdout
        assert re.search(r"^h0 .*: error: already running: M1 \(pid \d+\), M5 \(pid \d+\); stop them first with "
                         r"'mgst lab down'$", again.stdout, re.M), again.stdout
        pids = {m: int(p) for m, p in re.findall(r"(M\d) \(pid (\d+)\)", up.stdout)}
        assert sorted(pids) == ["M1", "M2", "M3", "M4", "M5"]
        for m, pid in pids.items():
            cmdline = psutil.Process(pid).cmdline()
            assert "puller" in cmdline and cmdline[cmdline.index("--machine") + 1] == m
            assert ("--allow-file" in cmdline) == (m == "M2")
        assert stat.S_IMODE((remote / "h1" / "allow.toml").stat().st_mode) == 0o600
        # a fifth host nobody answers for: its own clear error, the others still reported, exit 1
        # and one whose address nobody has (no ARP answer): its own error after its connect_timeout
        silent_address = net.hosts[1].address.rsplit(".", 1)[0] + ".9"
        ghost = {**hosts, "ghost": {"address": net.hosts[0].address, "port": SSH_PORT + 1, "machines": ["M9"],
                                    "remote_dir": str(remote / "ghost")},
                 "void": {"address": silent_address, "connect_timeout": 1, "machines": ["M8"],
                          "remote_dir": str(remote / "void")}}
        (tmp_path / "keys" / "pullers" / "lab.key_secret").write_text(
            (tmp_path / "keys" / "pullers" / "M1.key_secret").read_text())  # M8, M9 need a key: the shared one
        t0 = time.monotonic()
        status = lab(capsys, "status", str(write_hosts(tmp_path / "ghost.toml", net, endpoint, ghost)))
        assert time.monotonic() - t0 < 30  # ssh's connect time-out, not a hang
        assert status.returncode == 1, status.stdout + status.stderr
        assert re.search(rf"^void \({re.escape(silent_address)}\): error: ssh: .*port {SSH_PORT}: ", status.stdout,
                         re.M), status.stdout
        assert re.search(rf"^ghost \({re.escape(net.hosts[0].address)}\): error: ssh: .*port {SSH_PORT + 1}.*refused",
                         status.stdout, re.M | re.I), status.stdout
        assert "failed on 2 of 6 hosts: ghost, void" in status.stderr
        for m, pid in pids.items():
            assert f"  {m}: running, pid {pid}; log" in status.stdout
        down = lab(capsys, "down", str(hosts_file), "--grace", "5")
        assert down.returncode == 0, down.stdout + down.stderr
        for m, pid in pids.items():
            assert f"{m} stopped (pid {pid}, SIGTERM)" in down.stdout
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        assert not list(remote.rglob("*.pid"))
        # no secret key in anything printed or logged
        said = "".join(p.read_text() for p in remote.rglob("*.log")) + up.stdout + up.stderr + status.stdout
        assert secrets and not any(s.split('"')[1] in said for s in secrets)
    assert_nothing_left(net)
    print(f"lab up of 4 hosts, 5 pullers: {up_seconds:.1f} s")


def test_lab_up_refuses_another_version_a_forged_one_and_says_which_puller_died(tmp_path, capsys, no_children_left):
    """A host whose mgst is another version is refused (nothing copied, nothing started); one that answers with
    something that is not a version (escape sequences) is refused too, and printed harmlessly; --ignore-version
    launches the first anyway, with a warning; a puller that exits at once is an error, with its log's lines;
    one that ignores SIGTERM is killed, with its process group, after --grace."""
    need_lab()
    security.create_keys(tmp_path / "keys", ["X1", "X2", "X3", "X4", "X5"])
    remote = tmp_path / "remote"
    with lab_network(tmp_path, 1) as net:
        address = net.hosts[0].address
        real = " ".join(json.loads(write_hosts(tmp_path / "h.toml", net, "tcp://h:1", {}).read_text()
                                   .split("mgst = ")[1].splitlines()[0]))
        # another version, with a warning on stderr first (as a stale compiled build prints): not the version
        old = (f'if [ "$1" = --version ]; then echo "mgst: stale build" >&2; echo "mgst 0.0.9 (pure Python)"; '
               f'else exec env {real} "$@"; fi')
        # a "puller" deaf to SIGTERM, with a child in its process group (its command line has the puller's
        # --machine and --keys: taken for one)
        deaf = ('if [ "$1" = --version ]; then echo "mgst 0.0.0 (deaf)"; else trap "" TERM; '
                'while :; do sleep 600; done; fi')
        hosts = {"old": {"address": address, "machines": ["X1"], "remote_dir": str(remote / "old"),
                         "mgst": ["sh", "-c", old, "sh"]},
                 "deaf": {"address": address, "machines": ["X3"], "remote_dir": str(remote / "deaf"),
                          "mgst": ["sh", "-c", deaf, "sh"]},
                 "forged": {"address": address, "machines": ["X2"], "remote_dir": str(remote / "forged"),
                            "mgst": ["printf", "\\033]0;owned\\007mgst 0.1.0 (x)\\n"]}}
        (tmp_path / "no_known_hosts").write_text("")
        stranger = {"address": address, "machines": ["X4"], "remote_dir": str(remote / "stranger"),
                    "known_hosts": str(tmp_path / "no_known_hosts")}  # a host key we do not know: refused
        nobody = f"tcp://{net.hosts[0].root_address}:9"  # the pullers wait for a mapper that never comes
        hosts_file = write_hosts(tmp_path / "hosts.toml", net, nobody, hosts)
        missing = {"address": address, "machines": ["X5"], "remote_dir": str(remote / "missing"),
                   "mgst": "/nonexistent/bin/mgst"}
        up = lab(capsys, "up", str(write_hosts(tmp_path / "all.toml", net, nobody,
                                                {**hosts, "stranger": stranger, "missing": missing})))
        assert up.returncode == 1 and "failed on 5 of 5 hosts" in up.stderr, up.stdout + up.stderr
        assert re.search(r"^missing .*: error: cannot run mgst there: 'mgst --version' said: env: "
                         r".*/nonexistent/bin/mgst.*No such file or directory$", up.stdout, re.M), up.stdout
        assert re.search(r"^stranger .*: error: ssh: Host key verification failed\.$", up.stdout, re.M), up.stdout
        assert re.search(r"^old .*: error: mgst 0\.0\.9 there, \S+ here: install the same version, or give "
                         r"--ignore-version$", up.stdout, re.M), up.stdout
        assert re.search(r"^forged .*: error: cannot run mgst there: 'mgst --version' said: "
                         r"\\x1b]0;owned\\x07mgst 0\.1\.0 \(x\)$", up.stdout, re.M), up.stdout
        assert "\x1b" not in up.stdout + up.stderr
        assert not remote.exists()  # nothing copied, nothing started
        hosts["forged"] = {"address": address, "machines": ["X2"], "remote_dir": str(remote / "forged"),
                           "puller_args": ["--slots", "999"]}
        hosts_file = write_hosts(tmp_path / "hosts.toml", net, nobody, hosts)
        up = lab(capsys, "up", str(write_hosts(tmp_path / "old.toml", net, nobody, {"old": hosts["old"],
                                                                                      "deaf": hosts["deaf"]})),
                 "--ignore-version", "--settle", "0.5")
        assert "old: version 0.0.9 differs" in up.stderr and up.returncode == 0, up.stdout + up.stderr
        assert re.search(r"^old .*: mgst 0\.0\.9 \(pure Python\); started X1 \(pid \d+\)", up.stdout, re.M), up.stdout
        deaf_pid = int(re.search(r"^deaf .*; started X3 \(pid (\d+)\)", up.stdout, re.M).group(1))
        # a puller that exits at once is seen if it exits within --settle: 20 s leaves a loaded machine time to
        # start Python, and `lab up` returns as soon as it died
        up = lab(capsys, "up", str(write_hosts(tmp_path / "forged.toml", net, nobody, {"forged": hosts["forged"]})),
                 "--settle", "20")
        assert up.returncode == 1 and "forged (10.213." in up.stdout and "error: exited at once: X2" in up.stdout
        assert re.search(r"^    X2 \| .*--slots", up.stdout, re.M), up.stdout  # the puller's own words
        try:
            down = lab(capsys, "down", str(write_hosts(tmp_path / "deaf.toml", net, nobody, {"deaf": hosts["deaf"]})),
                       "--grace", "0.5")
            assert re.search(rf"^deaf .*: X3 killed \(pid {deaf_pid}: SIGKILL after the grace period\)$",
                             down.stdout, re.M), down.stdout
            _wait_until(lambda: not [p for p in psutil.process_iter(["status"]) if _pgid(p.pid) == deaf_pid
                                     and p.info["status"] != psutil.STATUS_ZOMBIE],
                        10, "the deaf puller's process group (its `sleep 600`) is gone")
        finally:  # whatever happened, no `sleep 600` of ours outlives the test
            with contextlib.suppress(ProcessLookupError):
                os.killpg(deaf_pid, signal.SIGKILL)
        down = lab(capsys, "down", str(hosts_file))
        assert down.returncode == 0, down.stdout
        assert re.search(r"^deaf .*: X3 was not running$", down.stdout, re.M), down.stdout
        assert re.search(r"^old .*: X1 stopped \(pid \d+, SIGTERM\)$", down.stdout, re.M), down.stdout
        assert re.search(r"^forged .*: X2 was not running \(pid \d+ had exited\)$", down.stdout, re.M), down.stdout
    assert_nothing_left(net)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


BAD_HOSTS = [
    ("", "lab: missing"),
    ('[lab]\nconnect = "head:5555"\nkeys = "keys"\n[hosts.a]\naddress = "h"\nmachines = ["M1"]\n', "lab.connect"),
    ('[lab]\nconnect = "tcp://h:5555"\nkeys = "nokeys"\n[hosts.a]\naddress = "h"\nmachines = ["M1"]\n', "lab.keys"),
    ('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n', "hosts: missing"),
    ('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[hosts.a]\naddress = "-oProxyCommand=x"\nmachines = ["M1"]\n',
     "hosts.a.address"),
    ('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[hosts.a]\naddress = "h"\nmachines = ["M1"]\nport = 0\n',
     "hosts.a.port"),
    ('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[defaults]\nport = "22"\n[hosts.a]\naddress = "h"\n'
     'machines = ["M1"]\n', "defaults.port"),
    ('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[hosts.a]\naddress = "h"\nmachines = ["M1"]\nprot = 22\n',
     "hosts.a.prot: unknown key"),
    ('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[hosts.a]\naddress = "h"\nmachines = ["M1"]\n'
     '[hosts.b]\naddress = "h"\nmachines = ["M1"]\n', "hosts.b.machines: M1 is also run by host a"),
    ('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[hosts.a]\naddress = "h"\nmachines = ["M7"]\n',
     "hosts.a.machines"),
    ('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[hosts.a]\naddress = "h"\nmachines = ["../M1"]\n',
     "hosts.a.machines"),
    ('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[hosts.a]\naddress = "h"\nmachines = ["M1"]\n'
     'host_key_checking = "maybe"\n', "hosts.a.host_key_checking"),
    ('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[hosts.a]\naddress = "h"\nmachines = ["M1"]\n'
     'puller_args = ["--keys", "/tmp"]\n', "hosts.a.puller_args"),
    # argparse takes a unique prefix for the option: "--insec" is --insecure (no CURVE), "--conn=" is --connect
    ('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[hosts.a]\naddress = "h"\nmachines = ["M1"]\n'
     'puller_args = ["--insec"]\n', "hosts.a.puller_args"),
    ('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[hosts.a]\naddress = "h"\nmachines = ["M1"]\n'
     'puller_args = ["--conn=tcp://elsewhere:1"]\n', "hosts.a.puller_args"),
    ('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[hosts.a]\naddress = "h"\nmachines = ["M1"]\n'
     'remote_dir = "a\\nb"\n', "hosts.a.remote_dir"),
    ('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[hosts.a]\naddress = "h"\nmachines = ["M1"]\n'
     'identity_file = "nope"\n', "hosts.a.identity_file"),
    ('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[defaults]\nremote_dir = "."\n[hosts.a]\naddress = "h"\n'
     'machines = ["M1"]\n', "defaults.remote_dir"),
    ('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[hosts.a]\naddress = "h"\nmachines = ["M1"]\n'
     'remote_dir = "/srv/.."\n', "hosts.a.remote_dir"),
    ('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[hosts.a]\naddress = "h"\nmachines = ["M1"]\nmgst = "-x"\n',
     "hosts.a.mgst"),
    ("[lab\n", "(file): TOML syntax error"),
    *[('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[hosts.a]\nmachines = ["M1"]\n'
       f'address = "{address}"\n', "hosts.a.address")
      for address in (":::", "::1::2", "[::1]:22", "[h.lab]", "fe80::1%a;b", "-::1", "h:22", "x" * 300)],
]


@pytest.mark.parametrize("address,given", [("::1", "::1"), ("[::1]", "::1"), ("fe80::1%eth0", "fe80::1%eth0"),
                                           ("0:0::1", "::1"), ("2001:db8::7", "2001:db8::7"), ("pc01.lab", "pc01.lab"),
                                           ("10.0.0.12", "10.0.0.12")])
def test_an_ipv6_address_is_a_host_s_address(address, given, key_folder):
    """An IPv6 literal (ipaddress's reading of it; brackets taken off, as ssh wants it bare) is an address; so
    are host names and IPv4 addresses, as before."""
    hosts = key_folder.parent / "v6.toml"
    hosts.write_text('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[hosts.a]\nmachines = ["M1"]\n'
                     f'address = "{address}"\n')
    assert load_hosts(hosts).hosts[0].address == given


@pytest.fixture(scope="module")
def key_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("lab") / "keys"
    security.create_keys(folder, ["M1"])
    return folder


@pytest.mark.parametrize("text,key", BAD_HOSTS)
def test_a_bad_hosts_file_is_one_line_naming_the_key_and_exit_2(text, key, key_folder, capsys):
    hosts = key_folder.parent / "hosts.toml"
    hosts.write_text(text)
    with pytest.raises(HostsFileError):
        load_hosts(hosts)
    assert main(["lab", "status", str(hosts)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mgst: error: {hosts}: {key}") and err.count("\n") == 1, err


def test_a_bad_option_is_exit_2(key_folder, capsys):
    for args, key in ((["down", "h.toml", "--grace", "-1"], "--grace"), (["status", "h.toml", "--lines", "99"],
                                                                         "--lines"),
                      (["up", "h.toml", "--parallel", "0"], "--parallel"),
                      (["up", "h.toml", "--settle", "nan"], "--settle")):
        assert main(["lab", *args]) == 2
        assert capsys.readouterr().err.startswith(f"mgst: error: {key}")


def test_a_file_that_cannot_travel_is_exit_2_before_any_host(key_folder, capsys):
    """An allow-list that is not text (it would go as a shell string) stops `lab up` before any host is asked."""
    (key_folder.parent / "bin.toml").write_bytes(b"[commands]\0")
    hosts = key_folder.parent / "bin-hosts.toml"
    hosts.write_text('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[hosts.a]\naddress = "h"\nmachines = ["M1"]\n'
                     'allow_file = "bin.toml"\n')
    assert main(["lab", "up", str(hosts)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mgst: error: {hosts}: hosts.a.allow_file: ") and "not a text file" in err, err


def _host(tmp_path: Path, key_folder: Path, machines=("M1",)):
    hosts = key_folder.parent / "one.toml"
    hosts.write_text('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[hosts.a]\naddress = "h"\n'
                     f'machines = {json.dumps(list(machines))}\n')
    return load_hosts(hosts).hosts[0]


@pytest.mark.parametrize("line", [
    "@mgst-lab running M1 -1", "@mgst-lab running M1 0", "@mgst-lab running M1 99999999", "@mgst-lab running M1 12a",
    "@mgst-lab running M1 ١٢٣", "@mgst-lab running M2 1234", "@mgst-lab started ../M1 1234", "@mgst-lab nopid M1 x",
    "@mgst-lab reboot now", "@mgst-lab log M1 a\x1bb", "@mgst-lab dir ",
])
def test_what_a_host_sends_back_is_checked(line, tmp_path, key_folder):
    with pytest.raises(SshError, match="unexpected reply"):
        read_reply(_host(tmp_path, key_folder), f"welcome to the lab\n{line}\n")


def test_a_host_reply_is_read_and_made_printable(tmp_path, key_folder):
    out = read_reply(_host(tmp_path, key_folder), "motd\n@mgst-lab running M1 4321\n@mgst-lab log M1 /r/M1.log\n"
                                                  "@mgst-lab line M1 \x1b[31mred\x1b[0m\n")
    p = out.pullers["M1"]
    assert (p.state, p.pid, p.log, p.lines) == ("running", 4321, "/r/M1.log", ["\\x1b[31mred\\x1b[0m"])
    assert version_number("mgst 0.1.0 (pure Python: MGST_PURE=1)") == "0.1.0"
    for forged in ("mgst 0.1.0", "mgst 0.1.0 (x)\nmore", "Mgst 1 (x)", "mgst 0.1.0 (\x1b)", None):
        with pytest.raises(SshError):
            version_number(forged)


def test_a_host_sending_too_much_is_cut_off(tmp_path, key_folder, monkeypatch, no_children_left):
    """A reply beyond MAX_OUTPUT is refused, and ssh (here a stand-in flooding stdout) is killed, not awaited."""
    monkeypatch.setattr(ssh, "ssh_argv", lambda host: [sys.executable, "-c",
                                                       "import sys\nwhile True: sys.stdout.write('x' * 65536)"])
    t0 = time.monotonic()
    with pytest.raises(SshError, match="more than 256 KiB"):
        asyncio.run(ssh.run_script(_host(tmp_path, key_folder), "", timeout=30))
    assert time.monotonic() - t0 < 20


def test_a_host_that_never_answers_is_cut_off_at_the_time_out(tmp_path, key_folder, monkeypatch, no_children_left):
    """ssh that neither ends nor speaks (here a stand-in that sleeps) is killed at the time-out: an error, no hang."""
    monkeypatch.setattr(ssh, "ssh_argv", lambda host: ["sleep", "60"])
    t0 = time.monotonic()
    with pytest.raises(SshError, match="no answer within 1 s"):
        asyncio.run(ssh.run_script(_host(tmp_path, key_folder), "", timeout=1))
    assert time.monotonic() - t0 < 10


def test_a_host_timing_out_with_a_child_holding_ssh_s_pipes_ends_in_its_one_error(tmp_path, key_folder):
    """ssh timed out while a child of it held its pipes (here a stand-in shell with a sleep in the background): the
    error line was followed by "Exception ignored ... RuntimeError: Event loop is closed" (the process's transport
    closed by the collector once asyncio.run had ended). Now ssh's process group is killed and its pipes read to
    their end within the loop. Run in a child interpreter, whose last words are what is checked."""
    marker = f"{os.getpid() % 1000 + 60}.25"  # a sleep of this test's own, to look for afterwards
    code = (f"import asyncio, json, pathlib\nfrom mgst.lab import ssh\nfrom mgst.lab.hosts import load_hosts\n"
            f"ssh.ssh_argv = lambda host: ['sh', '-c', 'sleep {marker} & sleep {marker}']\n"
            f"host = load_hosts(pathlib.Path({str(key_folder.parent / 'one.toml')!r})).hosts[0]\n"
            "try:\n    asyncio.run(ssh.run_script(host, 'echo hi\\n' * 100000, timeout=1))\n"
            "except ssh.SshError as e:\n    print('error:', e)\n")
    _host(tmp_path, key_folder)  # (writes one.toml)
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT,
                       env={**os.environ, "MGST_PURE": "1"})
    assert time.monotonic() - t0 < 30
    assert p.stdout == "error: no answer within 1 s\n" and p.stderr == "", p.stdout + p.stderr
    left = [q for q in psutil.process_iter(["cmdline"]) if q.info["cmdline"] == ["sleep", marker]]
    for q in left:
        q.kill()
    assert not left, "ssh's children were left running"


def _closed_port() -> int:
    """A loopback TCP port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not shutil.which("ssh"), reason="needs OpenSSH's client (apt-get install openssh-client)")
def test_a_host_refusing_the_connection_is_one_ssh_error_said_once(tmp_path, key_folder, capsys):
    """`mgst lab status` against a loopback port nobody listens on: ssh's own line, "ssh: connect to host ...:
    Connection refused", was printed as "error: ssh: ssh: connect to host ..."."""
    port = _closed_port()
    hosts = key_folder.parent / "closed.toml"
    hosts.write_text(f'[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[hosts.a]\naddress = "127.0.0.1"\n'
                     f'port = {port}\nssh_config = "/dev/null"\nconnect_timeout = 5\nmachines = ["M1"]\n')
    said = lab(capsys, "status", str(hosts))
    assert said.returncode == 1, said.stdout + said.stderr
    assert re.search(rf"^a \(127\.0\.0\.1\): error: ssh: connect to host 127\.0\.0\.1 port {port}: "
                     r"Connection refused$", said.stdout, re.M), said.stdout
    assert "ssh: ssh:" not in said.stdout + said.stderr
    assert ssh.ssh_failure("Host key verification failed.") == "ssh: Host key verification failed."
    assert ssh.ssh_failure("") == "ssh: failed (exit 255)"


def _up_locally(host, key_folder: Path, cwd: Path, path: str | None = None) -> subprocess.CompletedProcess:
    """`lab up`'s script for ``host`` run by a local `sh -s` in ``cwd`` (as a login's home), with the puller
    command a no-op (``host.mgst``) and the key files of ``key_folder``."""
    from mgst.lab.remote import up_script  # noqa: PLC0415

    files = {f"{security.MAPPER}.key": (key_folder / f"{security.MAPPER}.key").read_bytes(),
             f"{security.PULLERS}/M1.key_secret": (key_folder / security.PULLERS / "M1.key_secret").read_bytes()}
    env = {**os.environ, "PATH": path or os.environ["PATH"]}
    return subprocess.run(["sh", "-s"], input=up_script(host, "tcp://h:5555", files, None, settle=0.0),
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=60)


def test_a_remote_dir_full_of_shell_is_a_plain_folder(tmp_path, key_folder, no_children_left):
    """remote_dir goes into the script quoted: spaces, quotes, $(...), backquotes and ; are a folder's name."""
    import dataclasses  # noqa: PLC0415

    home = tmp_path / "home"
    home.mkdir()
    odd = "lab $(touch PWNED1) `touch PWNED2`; touch PWNED3 'q\" $HOME"
    host = dataclasses.replace(_host(tmp_path, key_folder), remote_dir=odd, mgst=("true",))
    _up_locally(host, key_folder, home)
    assert not list(home.glob("PWNED*")) and not list(tmp_path.glob("PWNED*"))
    assert (home / odd / "keys" / security.PULLERS / "M1.key_secret").is_file()


def test_no_secret_is_written_into_a_folder_it_cannot_make_private(tmp_path, key_folder, no_children_left):
    """A remote_dir in a shared place that another user made first (chmod 700 refused: not its owner) must not
    receive the secret keys: the script stops, saying why. (Here chmod is a stand-in that always fails: this test
    runs as root, whose chmod never does.)"""
    import dataclasses  # noqa: PLC0415

    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "chmod").write_text("#!/bin/sh\necho 'chmod: Operation not permitted' >&2\nexit 1\n")
    (stub / "chmod").chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    host = dataclasses.replace(_host(tmp_path, key_folder), remote_dir="shared", mgst=("true",))
    p = _up_locally(host, key_folder, home, path=f"{stub}:{os.environ['PATH']}")
    out = read_reply(host, p.stdout)
    assert out.failure is not None and "private" in out.failure, p.stdout
    assert not [f for f in (home / "shared").rglob("*") if f.is_file()], p.stdout


def _as_nobody(*paths: Path) -> int:
    """Give ``paths`` (never followed: a symlink itself) to user nobody, as if nobody had made them; nobody's uid."""
    nobody = pwd.getpwnam("nobody")
    for p in paths:
        os.lchown(p, nobody.pw_uid, nobody.pw_gid)
    return nobody.pw_uid


def test_lab_up_as_root_refuses_a_folder_another_user_made(tmp_path, capsys, no_children_left):
    """User nobody made remote_dir first (in a shared place, sticky as /tmp is), with a world-writable
    M1.key_secret in it: `lab up` as root refuses the host in one line naming the folder, writes nothing there
    and starts nothing (root's chmod 700 would have succeeded: the check is the owner, not the mode)."""
    need_lab()
    security.create_keys(tmp_path / "keys", ["M1"])
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    planted = shared / "lab"
    (planted / "keys" / security.PULLERS).mkdir(parents=True)
    trap = planted / "keys" / security.PULLERS / "M1.key_secret"
    trap.write_text("")
    trap.chmod(0o666)
    nobody = _as_nobody(planted, planted / "keys", planted / "keys" / security.PULLERS, trap)
    with lab_network(tmp_path, 1) as net:
        address = net.hosts[0].address
        hosts_file = write_hosts(tmp_path / "hosts.toml", net, f"tcp://{net.hosts[0].root_address}:9",
                                 {"h0": {"address": address, "machines": ["M1"], "remote_dir": str(planted)}})
        up = lab(capsys, "up", str(hosts_file), "--settle", "0.5")
        assert up.returncode == 1, up.stdout + up.stderr
        assert re.search(rf"^h0 \({re.escape(address)}\): error: {re.escape(str(planted))} is another user's "
                         r"folder \(owner uid \d+\), not the login's: refused, no key written$", up.stdout,
                         re.M), up.stdout
        assert up.stdout.count("error:") == 1, up.stdout
        assert not processes_under(planted)
    assert trap.read_text() == "" and trap.stat().st_uid == nobody and stat.S_IMODE(trap.stat().st_mode) == 0o666
    assert sorted(p.name for p in planted.rglob("*")) == ["M1.key_secret", "keys", security.PULLERS]
    assert_nothing_left(net)


def test_lab_up_as_root_never_writes_through_a_planted_symlink_or_link(tmp_path, capsys, no_children_left):
    """The login's own remote_dir, left writable by all: user nobody planted symlinks where `lab up` writes a
    secret key, the mapper's key, the allow-list and a log, and a hard link as another log, each to a file of
    root's elsewhere. `lab up` removes them (never follows them), writes fresh files (600, in folders made 700)
    and starts the pullers; the files elsewhere keep their bytes and modes."""
    need_lab()
    security.create_keys(tmp_path / "keys", ["M1", "M2"])
    (tmp_path / "allow.toml").write_text('[commands]\nwork = ["/bin/true"]\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victims = {name: elsewhere / name for name in ("key", "mapper", "allow", "log1", "log2")}
    for name, victim in victims.items():
        victim.write_text(f"root's {name}\n")
        victim.chmod(0o644)
    d = tmp_path / "remote" / "h0"
    pullers = d / "keys" / security.PULLERS
    pullers.mkdir(parents=True)
    for folder in (d, d / "keys", pullers):
        folder.chmod(0o777)  # the login's own folders, but anyone may add entries
    planted = {pullers / "M1.key_secret": victims["key"], d / "keys" / "mapper.key": victims["mapper"],
               d / "allow.toml": victims["allow"], d / "M1.log": victims["log1"]}
    for link, target in planted.items():
        link.symlink_to(target)
    os.link(victims["log2"], d / "M2.log")  # (protected_hardlinks stops nobody; root plants it for the test)
    _as_nobody(*planted)
    with lab_network(tmp_path, 1) as net:
        address = net.hosts[0].address
        hosts_file = write_hosts(tmp_path / "hosts.toml", net, f"tcp://{net.hosts[0].root_address}:9",
                                 {"h0": {"address": address, "machines": ["M1", "M2"], "remote_dir": str(d),
                                         "allow_file": "allow.toml"}})
        try:
            up = lab(capsys, "up", str(hosts_file), "--settle", "0.5")
            assert up.returncode == 0, up.stdout + up.stderr
            assert re.search(r"; started M1 \(pid \d+\), M2 \(pid \d+\);", up.stdout), up.stdout
        finally:
            down = lab(capsys, "down", str(hosts_file), "--grace", "5")
        assert down.returncode == 0, down.stdout + down.stderr
    for name, victim in victims.items():
        assert victim.read_text() == f"root's {name}\n", name
        assert stat.S_IMODE(victim.stat().st_mode) == 0o644, name
        assert victim.stat().st_nlink == 1, name
    for written in [*planted, d / "M2.log"]:
        st = written.lstat()
        assert stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid(), written
        assert stat.S_IMODE(st.st_mode) == 0o600, written
    assert "secret-key" in (pullers / "M1.key_secret").read_text()
    assert "---- mgst lab up " in (d / "M1.log").read_text()
    for folder in (d, d / "keys", pullers):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert_nothing_left(net)


def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (to give a folder to user nobody)")


@pytest.mark.parametrize("case", ["symlink", "keys-symlink", "pullers-nobody", "above-nobody", "above-writable",
                                  "above-sticky"])
def test_up_writes_only_into_folders_of_the_login_s_own(case, tmp_path, key_folder, no_children_left):
    """`lab up`'s script (run by a local sh, as root) refuses, in one line naming the path, a remote_dir that is a
    symlink, a keys/ that is one, a keys/pullers/ of user nobody's, and a folder above remote_dir that another
    user owns or may write to (they could swap remote_dir once checked); a sticky one (as /tmp) is fine. Nothing
    is written when refused."""
    import dataclasses  # noqa: PLC0415

    _need_root()
    home = tmp_path / "home"
    above = home / "above"
    above.mkdir(parents=True)
    d = above / "lab"
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / security.PULLERS).mkdir(parents=True)
    refused = {"symlink": str(d), "keys-symlink": f"{d}/keys", "pullers-nobody": f"{d}/keys/{security.PULLERS}",
               "above-nobody": str(above), "above-writable": str(above), "above-sticky": None}[case]
    if case == "symlink":
        d.symlink_to(elsewhere)
    else:
        d.mkdir()
    if case == "keys-symlink":
        (d / "keys").symlink_to(elsewhere)
    elif case == "pullers-nobody":
        (d / "keys" / security.PULLERS).mkdir(parents=True)
        _as_nobody(d / "keys" / security.PULLERS)
    elif case == "above-nobody":
        _as_nobody(above)
    else:
        above.chmod(0o777 if case == "above-writable" else 0o1777)
    host = dataclasses.replace(_host(tmp_path, key_folder), remote_dir=str(d), mgst=("true",))
    p = _up_locally(host, key_folder, home)
    out = read_reply(host, p.stdout)
    if refused is None:
        assert out.failure is None and (d / "keys" / security.PULLERS / "M1.key_secret").is_file(), p.stdout
        return
    said = " is" if case in ("symlink", "keys-symlink", "pullers-nobody") else f", a folder above {d},"
    assert out.failure is not None and out.failure.startswith(refused + said), p.stdout
    assert out.failure.endswith("refused, no key written"), out.failure
    assert not [f for f in elsewhere.rglob("*") if f.is_file()] and not list(home.rglob("*.key*")), p.stdout


def test_a_known_hosts_path_ssh_would_expand_is_refused(key_folder):
    """ssh expands ${NAME} in UserKnownHostsFile, with no way to quote it: such a path is refused, naming the key."""
    (key_folder.parent / "${HOME}").write_text("")
    hosts = key_folder.parent / "dollar.toml"
    hosts.write_text('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[hosts.a]\naddress = "h"\nmachines = ["M1"]\n'
                     'known_hosts = "${HOME}"\n')
    with pytest.raises(HostsFileError, match=r"hosts\.a\.known_hosts: .*ssh cannot take a path holding '\$\{'"):
        load_hosts(hosts)


@pytest.mark.parametrize("name", ["id%h", "id${HOME}"])
def test_an_identity_file_path_ssh_would_expand_is_refused(key_folder, name):
    """ssh expands %-tokens and ${NAME} in -i: "id%h" would be read as "id" and the host's name, another file than
    the one checked here (a review saw ssh read "id127.0.0.1"). Refused, naming the key."""
    (key_folder.parent / name).write_text("")
    hosts = key_folder.parent / "identity.toml"
    hosts.write_text('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[hosts.a]\naddress = "h"\nmachines = ["M1"]\n'
                     f'identity_file = "{name}"\n')
    with pytest.raises(HostsFileError, match=r"hosts\.a\.identity_file: .*ssh cannot take a path holding"):
        load_hosts(hosts)


@pytest.mark.parametrize("remote_dir", ["../../etc", "/etc", "lab/../../x", "/"])
def test_a_remote_dir_outside_a_folder_of_its_own_is_refused(key_folder, remote_dir):
    """remote_dir is made mode 700 (chmod on a folder that exists): a system folder, or one reached through '..',
    would be locked for everyone but the login (as root: /etc). Refused, naming the key."""
    hosts = key_folder.parent / "remote.toml"
    hosts.write_text('[lab]\nconnect = "tcp://h:5555"\nkeys = "keys"\n[hosts.a]\naddress = "h"\nmachines = ["M1"]\n'
                     f'remote_dir = "{remote_dir}"\n')
    with pytest.raises(HostsFileError, match=r"hosts\.a\.remote_dir: .*name a folder of its own"):
        load_hosts(hosts)


def test_lab_reaches_an_ipv6_host_with_a_known_hosts_path_of_spaces_quotes_and_percents(tmp_path, capsys,
                                                                                     no_children_left):
    """A host given by its IPv6 address (bare, and in brackets), its known_hosts file in a folder whose name has
    spaces, a double quote, a backslash and a '%': ssh reads that path as one file (it splits an unquoted value at
    spaces, and expands '%'), finds the host's key there, and `lab status` reaches both."""
    need_lab()
    security.create_keys(tmp_path / "keys", ["M1", "M2"])
    with lab_network(tmp_path, 1, ipv6=True) as net:
        h = net.hosts[0]
        assert h.address6 is not None
        odd = tmp_path / 'known hosts "100%" \\ %h here'
        odd.mkdir()
        (odd / "known hosts").write_text(net.known_hosts.read_text())
        hosts = {"bare": {"address": h.address6, "machines": ["M1"], "remote_dir": str(tmp_path / "r1")},
                 "brackets": {"address": f"[{h.address6}]", "machines": ["M2"], "remote_dir": str(tmp_path / "r2")}}
        for host in hosts.values():
            host["known_hosts"] = str(odd / "known hosts")
        status = lab(capsys, "status", str(write_hosts(tmp_path / "v6.toml", net, "tcp://h:5555", hosts)))
        assert status.returncode == 0, status.stdout + status.stderr
        for label in hosts:
            assert re.search(rf"^{label} \({re.escape(h.address6)}\): mgst \S+ ", status.stdout, re.M), status.stdout
    assert_nothing_left(net)


@pytest.mark.parametrize("connect,ok", [("tcp://[::1]:5555", True), ("tcp://[fd00:213::1]:5555", True),
                                        ("tcp://[:::]:5555", False), ("tcp://[1.2.3.4]:5555", False),
                                        ("tcp://[::1::2]:5555", False)])
def test_lab_connect_in_brackets_is_an_ipv6_address(connect, ok, key_folder):
    """lab.connect's host in brackets must be an IPv6 address (ipaddress reads it), not any hex and colons."""
    hosts = key_folder.parent / "connect6.toml"
    hosts.write_text(f'[lab]\nconnect = "{connect}"\nkeys = "keys"\n[hosts.a]\naddress = "h"\nmachines = ["M1"]\n')
    if ok:
        assert load_hosts(hosts).connect == connect
    else:
        with pytest.raises(HostsFileError, match=r"lab\.connect: .*is not an IPv6 address"):
            load_hosts(hosts)


def test_a_remote_dir_with_backslashes_is_said_as_it_is(tmp_path, key_folder, no_children_left):
    """The folder's name comes back unchanged in the reply (printf, not dash's echo, which reads \\c, \\n...),
    in a refusal too."""
    import dataclasses  # noqa: PLC0415

    home = tmp_path / "home"
    home.mkdir()
    odd = "lab \\c \\n \\\\ end"
    host = dataclasses.replace(_host(tmp_path, key_folder), remote_dir=odd, mgst=("true",))
    out = read_reply(host, _up_locally(host, key_folder, home).stdout)
    assert out.folder == str(home / odd), out
    (home / "link \\c").symlink_to(home / odd)
    host = dataclasses.replace(host, remote_dir="link \\c")
    out = read_reply(host, _up_locally(host, key_folder, home).stdout)
    assert out.failure == "link \\c is a symlink, not a folder: refused, no key written", out
