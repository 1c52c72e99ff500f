"""Tests of the puller daemon against a fake mapper: CURVE, the command allow-list, reconnection, exit codes.

Real puller processes (``python -m puller``) talk to a ROUTER socket in the test,
on loopback at free ports. Every wait is bounded (polls with timeouts), and every
process is reaped by the ``pullers`` fixture, pass or fail, which also checks that
nothing a puller started outlives it or is left stopped.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import zmq
from helpers import is_suspended
from puller_fakes import FakeMapper, job

from mgst.wire import protocol as P
from mgst.wire import security
from puller.allowlist import AllowList, AllowListError, CommandRefused, load_file, parse_entry

ROOT = Path(__file__).resolve().parents[1]
SECRET = "do-not-leak-4711"  # set in the pullers' own environment only


# ---------------------------------------------------------------------- fake mapper, pullers


def cpu(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


class Pullers:
    """Starts puller processes; ``close()`` reaps them and checks what they leave behind."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.procs: list[tuple[subprocess.Popen, Path]] = []

    def start(self, endpoint: str, *args: str, machine: str = "M1") -> subprocess.Popen:
        log = self.tmp / f"puller-{len(self.procs)}.log"
        with open(log, "wb") as f:
            proc = subprocess.Popen(
                [sys.executable, "-m", "puller", "-v", "--connect", endpoint, "--machine", machine, *args],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=f, cwd=ROOT,
                env={**os.environ, "MGST_TEST_SECRET": SECRET},
            )
        self.procs.append((proc, log))
        return proc

    def log(self, proc: subprocess.Popen) -> str:
        return next(log for p, log in self.procs if p is proc).read_text(errors="replace")

    def descendants(self, proc: subprocess.Popen) -> list[psutil.Process]:
        try:
            return psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def close(self) -> None:
        left: list[psutil.Process] = []
        stopped: list[int] = []
        for proc, _ in self.procs:
            if proc.poll() is None:
                for d in self.descendants(proc):
                    left.append(d)
                    if is_suspended(d.pid):
                        stopped.append(d.pid)
                proc.terminate()
        for proc, _ in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        _, alive = psutil.wait_procs(left, timeout=5)
        for p in alive:
            p.kill()
        assert not stopped, f"processes left stopped or frozen: {stopped}"
        assert not alive, f"the pullers left processes behind: {alive}"
        assert not psutil.Process().children(recursive=True), "a child process was not reaped"


@pytest.fixture
def pullers(tmp_path: Path) -> Iterator[Pullers]:
    p = Pullers(tmp_path)
    try:
        yield p
    finally:
        p.close()


# Seconds a puller facing the wrong mapper gets to say why (its first retry comes 0.5 s after its first hello; the
# rest is its start on a busy machine).
SAYS_WHY_WITHIN = 30.0


def wait_exit(proc: subprocess.Popen, timeout: float) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the puller did not exit within {timeout} s") from None


# ---------------------------------------------------------------------- CURVE


@pytest.mark.parametrize("server", ["curve-other-key", "plain"])
def test_a_mapper_without_the_secret_key_hears_nothing(
    server: str, ctx: zmq.Context, keydir: Path, tmp_path: Path, pullers: Pullers
) -> None:
    other = tmp_path / "other"
    security.create_keys(other, ["M1"])
    fake = FakeMapper(ctx, security.server_keys(other) if server == "curve-other-key" else None)
    proc = pullers.start(fake.endpoint, "--keys", str(keydir))
    # Listened to for 3 s at least, and until the puller has said why it gets no answer: on a busy machine its
    # start (the spin kernel's calibration) can take longer than 3 s, and the test must see it retrying.
    start = time.monotonic()
    while time.monotonic() - start < 3.0 or "security handshake" not in pullers.log(proc):
        assert time.monotonic() - start < SAYS_WHY_WITHIN, f"no reason said in {SAYS_WHY_WITHIN} s: {pullers.log(proc)}"
        got = fake.recv(0.2)
        assert got is None, f"the puller talked to a fake mapper: {got!r}"
        assert not pullers.descendants(proc), "the puller started something"
        assert proc.poll() is None, "the puller should keep retrying"
    proc.terminate()
    assert wait_exit(proc, 10) == 0
    log = pullers.log(proc)
    assert "security handshake" in log and "failed" in log, log  # the lab learns why


def test_right_keys_hello_welcome_busy_cancel_bye(mapper: FakeMapper, keydir: Path, pullers: Pullers) -> None:
    proc = pullers.start(mapper.endpoint, "--key", str(keydir / "pullers" / "M1.key_secret"),
                         "--mapper-key", str(keydir / "mapper.key"))
    ident, hello = mapper.expect(P.Hello, 10)
    assert (hello.version, hello.machine, hello.slots, hello.holds, hello.finished) == (
        P.PROTOCOL_VERSION, "M1", 1, (), ())
    assert "command" not in hello.executors  # no allow-list: no command executor
    assert "emulate" in hello.executors
    mapper.welcome(ident)
    _, ready = mapper.expect(P.Ready)
    assert (ready.slots, ready.share) == (1, 1.0)
    mapper.send(ident, job(1, work=30.0))
    _, started = mapper.expect(P.Started)
    assert started.replica == 1
    mapper.send(ident, job(2))
    _, failed = mapper.expect(P.Failed)
    assert (failed.replica, failed.code) == (2, P.FAIL_BUSY)
    mapper.send(ident, P.CancelMsg(99))  # not the running replica: ignored
    mapper.quiet(0.3)
    mapper.send(ident, P.CancelMsg(1))
    _, ready = mapper.expect(P.Ready)
    assert ready.slots == 1
    mapper.send(ident, P.Bye("run over"))
    assert wait_exit(proc, 10) == 0


def test_idle_exit_leaves_after_that_long_with_no_work_never_while_a_replica_runs(
    mapper: FakeMapper, keydir: Path, pullers: Pullers
) -> None:
    """--idle-exit (a pilot job's end): a replica running longer than the idle time keeps the puller; once it is
    done and nothing more comes, the puller says Bye ("idle") after the idle time and exits 0."""
    proc = pullers.start(mapper.endpoint, "--keys", str(keydir), "--idle-exit", "0.8")
    ident, _ = mapper.expect(P.Hello, 10)
    mapper.welcome(ident, heartbeat=1.0)
    mapper.expect(P.Ready)
    mapper.send(ident, job(1, work=2.0))  # 2 s at time unit 1: longer than the idle time
    mapper.expect(P.Started)
    _, done = mapper.expect(P.Done, 10, ignore=(P.Heartbeat, P.Progress, P.Computing))
    assert done.replica == 1
    # the mapper's heartbeat echoing one of the puller's sent after the result: read, so no longer held
    hb, done_at = mapper.expect_at(P.Heartbeat, 5, ignore=(P.Ready,))
    mapper.send(ident, P.Heartbeat(1, time.time(), hb.clock, time.time()))
    bye, bye_at = mapper.expect_at(P.Bye, 10, ignore=(P.Heartbeat, P.Ready))
    assert bye.reason == "idle" and 0.7 <= bye_at - done_at < 5, bye_at - done_at
    assert wait_exit(proc, 10) == 0
    assert "no work for 0.8 s (--idle-exit)" in pullers.log(proc)


def test_sigterm_while_a_replica_runs_gives_it_up_at_once_and_tells_the_mapper_why(
    mapper: FakeMapper, keydir: Path, pullers: Pullers
) -> None:
    """A pilot job cancelled or preempted (Slurm's SIGTERM): the puller does not run its replica on through the
    grace before SIGKILL; it kills it and says Bye with the signal's name at once (the mapper has the machine DOWN
    and the replica lost), and exits 0."""
    proc = pullers.start(mapper.endpoint, "--keys", str(keydir))
    ident, _ = mapper.expect(P.Hello, 10)
    mapper.welcome(ident)
    mapper.expect(P.Ready)
    mapper.send(ident, job(1, work=60.0))  # a minute at time unit 1
    mapper.expect(P.Started)
    proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    bye, bye_at = mapper.expect_at(P.Bye, 10, ignore=(P.Heartbeat, P.Progress, P.Computing))
    assert bye.reason == "stopped by SIGTERM" and bye_at - signalled < 5
    assert wait_exit(proc, 10) == 0
    assert "leaving (exit code 0): stopped by SIGTERM; 0 jobs run" in pullers.log(proc)


def test_slots_option_offers_that_many(mapper: FakeMapper, keydir: Path, pullers: Pullers) -> None:
    proc = pullers.start(mapper.endpoint, "--keys", str(keydir), "--slots", "3")
    ident, hello = mapper.expect(P.Hello, 10)
    assert (hello.slots, hello.holds, hello.finished) == (3, (), ())
    mapper.welcome(ident, slots=2)  # the experiment's value: it uses that many
    _, ready = mapper.expect(P.Ready)
    assert ready.slots == 2
    mapper.send(ident, P.Bye("run over"))
    assert wait_exit(proc, 10) == 0


# ---------------------------------------------------------------------- allow-list

ENV_DUMP = "import json, os, sys\nwith open(sys.argv[1], 'w') as f:\n    json.dump(dict(os.environ), f)\n"


def test_allow_list_refuses_and_runs_with_an_explicit_environment(
    mapper: FakeMapper, keydir: Path, tmp_path: Path, pullers: Pullers
) -> None:
    script = tmp_path / "envdump.py"
    script.write_text(ENV_DUMP)
    by_key, by_argv = tmp_path / "by-key.json", tmp_path / "by-argv.json"
    allow_file = tmp_path / "allow.toml"
    allow_file.write_text(textwrap.dedent(f"""\
        [commands]
        envdump = [{json.dumps(sys.executable)}, {json.dumps(str(script))}, {json.dumps(str(by_key))}]

        [environment]
        MGST_LAB = "lab-1"
    """))
    exact = [sys.executable, str(script), str(by_argv)]
    marker = tmp_path / "marker"
    proc = pullers.start(mapper.endpoint, "--keys", str(keydir), "--allow-file", str(allow_file),
                         "--allow", shlex.join(exact))
    ident, hello = mapper.expect(P.Hello, 10)
    assert "command" in hello.executors
    mapper.welcome(ident, executor="command")
    mapper.expect(P.Ready)

    for replica, msg in [(10, job(10, command=("sh", "-c", f"touch {marker}"))),
                         (11, job(11, key="nope")),
                         (12, job(12, key="envdump", command=("sh", "-c", f"touch {marker}")))]:
        mapper.send(ident, msg)
        _, failed = mapper.expect(P.Failed)
        assert (failed.replica, failed.code) == (replica, P.FAIL_REFUSED)
        assert failed.reason.startswith("command not allowed: "), failed.reason
        mapper.expect(P.Ready)

    mapper.send(ident, job(13, key="envdump"))
    mapper.expect(P.Started)
    _, done = mapper.expect(P.Done, 20)
    assert (done.replica, done.ready) == (13, True)
    mapper.send(ident, job(14, command=tuple(exact), job_id=4, job_class=0))
    mapper.expect(P.Started)
    _, done = mapper.expect(P.Done, 20)
    assert done.replica == 14

    env = json.loads(by_key.read_text())
    assert {k: env.get(k) for k in ("MGST_JOB", "MGST_REPLICA", "MGST_CLASS", "MGST_MACHINE", "MGST_LAB")} == {
        "MGST_JOB": "3", "MGST_REPLICA": "13", "MGST_CLASS": "2", "MGST_MACHINE": "M1", "MGST_LAB": "lab-1"}
    assert float(env["MGST_SECONDS"]) == pytest.approx(0.1) and float(env["MGST_SIZE"]) == 1.5
    assert env.get("PATH") == os.environ.get("PATH")
    assert "MGST_TEST_SECRET" not in env and SECRET not in json.dumps(env)
    env2 = json.loads(by_argv.read_text())
    assert (env2["MGST_JOB"], env2["MGST_CLASS"]) == ("4", "1") and "MGST_TEST_SECRET" not in env2
    assert not marker.exists(), "a refused command ran"

    mapper.send(ident, P.Bye("run over"))
    assert wait_exit(proc, 10) == 0
    assert not marker.exists()
    log = pullers.log(proc)
    assert log.count("command not allowed") == 1, log  # three refusals in a row: one line (rate-limited)


# A job that starts a child of its own, writes both pids (atomically), and computes on until killed.
FAMILY_JOB = textwrap.dedent("""\
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {child.pid}")
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(600)
""")


def await_file(path: Path, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} not written in {timeout} s"
        time.sleep(0.05)
    return path.read_text()


@pytest.mark.parametrize("state", ["running", "suspended"])
def test_a_puller_killed_outright_leaves_no_job_behind(
    state: str, mapper: FakeMapper, keydir: Path, tmp_path: Path, pullers: Pullers
) -> None:
    """SIGKILL gives the puller no chance to clean up: its guardian kills the job's whole group, stopped or not."""
    script, pids_file = tmp_path / "family.py", tmp_path / "pids"
    script.write_text(FAMILY_JOB)
    proc = pullers.start(mapper.endpoint, "--keys", str(keydir), "--allow",
                         shlex.join(["family=" + sys.executable, str(script), str(pids_file)]))
    ident, _ = mapper.expect(P.Hello, 10)
    mapper.welcome(ident, executor="command")
    mapper.expect(P.Ready)
    mapper.send(ident, job(10, work=600.0, key="family"))
    mapper.expect(P.Started)
    family: list[psutil.Process] = []
    try:
        family = [psutil.Process(int(pid)) for pid in await_file(pids_file, 30).split()]
        guardians = [d for d in pullers.descendants(proc) if "guardian.py" in " ".join(d.cmdline())]
        assert len(guardians) == 1, pullers.descendants(proc)
        if state == "suspended":
            mapper.send(ident, P.Share(0.0))
            deadline = time.monotonic() + 20
            while not all(is_suspended(p.pid) for p in family):
                assert time.monotonic() < deadline, "share 0 did not suspend the job"
                time.sleep(0.05)
        proc.kill()
        proc.wait(10)
        gone, alive = psutil.wait_procs([*family, *guardians], timeout=20)
        assert not alive, f"left behind by a killed puller: {alive}"
    finally:
        for p in family:  # whatever the outcome, nothing outlives the test
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass


def test_allow_entries_and_files() -> None:
    assert parse_entry("sim=python3 sim.py --fast") == ("sim", ("python3", "sim.py", "--fast"))
    assert parse_entry("'my prog' 'a b'") == (None, ("my prog", "a b"))
    assert parse_entry("/opt/a=b/prog x") == (None, ("/opt/a=b/prog", "x"))
    for bad in ("", "sim=", "'unclosed"):
        with pytest.raises(AllowListError, match="--allow"):
            parse_entry(bad)
    allow = AllowList({"sim": ("python3", "sim.py")}, frozenset({("true",)}), {"A": "1"})
    assert allow.resolve("sim", ()) == ("python3", "sim.py")
    assert allow.resolve("sim", ("python3", "sim.py")) == ("python3", "sim.py")
    assert allow.resolve("", ("python3", "sim.py")) == ("python3", "sim.py")
    assert allow.resolve("", ("true",)) == ("true",)
    for key, argv in [("sim", ("rm", "-rf", "/")), ("other", ()), ("", ()), ("", ("python3",)),
                      ("", ("true", "x"))]:
        with pytest.raises(CommandRefused):
            allow.resolve(key, argv)
    env = allow.env({"MGST_JOB": "1"}, base={"PATH": "/bin", "SECRET": "x", "HOME": "/h"})
    assert env == {"PATH": "/bin", "HOME": "/h", "A": "1", "MGST_JOB": "1"}
    assert AllowList.build([], None) is None


@pytest.mark.parametrize(("text", "names"), [
    ("[commands]\nsim = 3\n", "[commands] sim"),
    ("[commands]\nsim = []\n", "[commands] sim"),
    ("[commands]\n'a b' = ['x']\n", "[commands] a b"),
    ("[commands]\nsim = ['x']\n[environment]\nX = 1\n", "[environment] X"),
    ("[commands]\nsim = ['x']\n[environment]\n'1X' = 'a'\n", "[environment] 1X"),
    ("[command]\nsim = ['x']\n", "'command'"),
    ("[commands]\n", "no [commands]"),
    ("[commands\n", "TOML syntax error"),
])
def test_bad_allow_files_are_named(tmp_path: Path, text: str, names: str) -> None:
    path = tmp_path / "allow.toml"
    path.write_text(text)
    with pytest.raises(AllowListError) as err:
        AllowList.build([], path)
    assert str(path) in str(err.value) and names in str(err.value), err.value


def test_allow_file_forms(tmp_path: Path) -> None:
    path = tmp_path / "allow.toml"
    path.write_text("[commands]\na = ['prog', 'x y']\nb = \"prog 'x y' z\"\n[environment]\nLAB = 'L'\n")
    assert load_file(path) == ({"a": ("prog", "x y"), "b": ("prog", "x y", "z")}, {"LAB": "L"})
    with pytest.raises(AllowListError, match="also in"):
        AllowList.build(["a=other"], path)


# ---------------------------------------------------------------------- away, back, refused, give up


def test_result_finished_while_the_mapper_is_away_is_held_without_busy_looping(
    mapper: FakeMapper, keydir: Path, pullers: Pullers
) -> None:
    proc = pullers.start(mapper.endpoint, "--keys", str(keydir))
    ident, _ = mapper.expect(P.Hello, 10)
    mapper.welcome(ident, heartbeat=0.2)  # the puller finds the mapper silent after 5 x 0.2 s
    mapper.expect(P.Ready)
    mapper.send(ident, job(7, work=2.0))  # 2 s: it ends while the puller is without a mapper
    mapper.expect(P.Started)
    started = time.monotonic()
    ident, hello = mapper.expect(P.Hello, 10)
    assert (hello.holds, hello.finished) == ((7,), ())  # reconnected while running: still holds it
    assert proc.poll() is None
    # The mapper's socket holds that hello (the connection is up): the puller waits for its answer there, without
    # a new hello (docs/puller.md), while its job ends. Without a mapper, with a finished job, it must sleep, not
    # spin.
    mapper.quiet(max(0.0, started + 2.5 - time.monotonic()), ignore=(P.Heartbeat,))
    cpu0, t0 = cpu(proc.pid), time.monotonic()
    mapper.quiet(1.5, ignore=(P.Heartbeat,))
    used = (cpu(proc.pid) - cpu0) / (time.monotonic() - t0)
    assert used < 0.2, f"the puller used {used:.0%} of a CPU while waiting for the mapper"
    mapper.welcome(ident)
    _, done = mapper.expect(P.Done)  # the held result first, not asking for work (it may be counted already)
    assert (done.replica, done.ready) == (7, False)
    assert done.started <= done.finished and done.achieved_share == 1.0
    _, ready = mapper.expect(P.Ready)  # then a request for the free slot
    assert ready.slots == 1
    mapper.send(ident, job(8))  # a new job: the held result is taken
    mapper.expect(P.Started)
    _, done = mapper.expect(P.Done)
    assert done.replica == 8
    mapper.send(ident, P.Bye("run over"))
    assert wait_exit(proc, 10) == 0


def test_fatal_refusal_exits_2(mapper: FakeMapper, keydir: Path, pullers: Pullers) -> None:
    proc = pullers.start(mapper.endpoint, "--keys", str(keydir))
    ident, _ = mapper.expect(P.Hello, 10)
    mapper.send(ident, P.Refused("unknown machine name 'M1'", True))
    assert wait_exit(proc, 10) == 2
    assert "unknown machine name 'M1'" in pullers.log(proc)


def test_non_fatal_refusal_retries_then_bye_ends(mapper: FakeMapper, keydir: Path, pullers: Pullers) -> None:
    proc = pullers.start(mapper.endpoint, "--keys", str(keydir))
    ident, _ = mapper.expect(P.Hello, 10)
    mapper.send(ident, P.Refused("machine name taken", False))
    ident, hello = mapper.expect(P.Hello, 5)
    assert proc.poll() is None and hello.holds == () and hello.finished == ()
    assert "machine name taken" in pullers.log(proc)
    mapper.send(ident, P.Bye("the run is over"))  # as a mapper answers hellos after its run
    assert wait_exit(proc, 10) == 0


def test_gives_up_after_the_mapper_is_gone_but_not_before_the_first_welcome(
    mapper: FakeMapper, keydir: Path, pullers: Pullers
) -> None:
    proc = pullers.start(mapper.endpoint, "--keys", str(keydir), "--give-up", "2")
    ident, _ = mapper.expect(P.Hello, 10)
    mapper.quiet(2.0)  # not welcomed yet: it waits for the answer to the hello we hold, whatever --give-up says
    assert proc.poll() is None
    mapper.welcome(ident, heartbeat=0.2)
    mapper.expect(P.Ready)
    gone = time.monotonic()  # (the puller counts from when it last heard the mapper, just before)
    code = wait_exit(proc, 2.0 + 5)
    assert code == 69  # (not 0, the run's end: no bye came, and a batch system showed a dead mapper's pilots done)
    assert time.monotonic() - gone >= 1.8  # not at the first sign of silence (5 x 0.2 s): after --give-up
    assert "its mapper is down, or the run ended without its bye reaching this puller" in pullers.log(proc)


# ---------------------------------------------------------------------- command line


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "puller", *args], capture_output=True, text=True, timeout=30,
                          cwd=ROOT, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize(("args", "message"), [
    (["--connect", "127.0.0.1:5555", "--machine", "M1", "--insecure"], "not a ZeroMQ endpoint"),
    (["--connect", "tcp://127.0.0.1:5555", "--machine", "M1"], "no keys"),
    (["--connect", "tcp://127.0.0.1:5555", "--machine", "M1", "--insecure", "--keys", "."], "--insecure"),
    (["--connect", "tcp://127.0.0.1:5555", "--machine", "M1", "--key", "x.key_secret"], "--mapper-key"),
    (["--connect", "tcp://127.0.0.1:5555", "--machine", "M1", "--insecure", "--allow", "k="], "empty command"),
    (["--connect", "tcp://127.0.0.1:5555", "--machine", "M1", "--insecure", "--slots", "0"], "give 1 to 64 slots"),
    (["--connect", "tcp://127.0.0.1:5555", "--machine", "M1", "--insecure", "--slots", "two"], "whole number"),
])
def test_cli_errors_exit_2_without_a_traceback(args: list[str], message: str) -> None:
    r = run_cli(*args)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_cli_key_file_errors(tmp_path: Path, keydir: Path) -> None:
    bad = tmp_path / "bad.key_secret"
    bad.write_text("not a key\n")
    base = ["--connect", "tcp://127.0.0.1:5555", "--machine", "M9"]
    for args, message in [
        (["--key", str(bad), "--mapper-key", str(keydir / "mapper.key")], str(bad)),
        (["--keys", str(keydir)], "no key pair for M9"),  # M9 has none, and there is no lab key
        (["--keys", str(tmp_path / "nowhere")], "not a folder"),
    ]:
        r = run_cli(*base, *args)
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


def test_a_puller_started_with_exit_with_leaves_when_that_process_ends(tmp_path, ctx, no_children_left):
    """mgst run starts its local pullers with --exit-with its own pid: a run killed outright (SIGKILL: nothing of
    it runs to stop them) left them waiting for its mapper up to --give-up (120 s). A puller welcomed, running a
    job, leaves within seconds of that process's end, its job killed, exit 0."""
    fake = FakeMapper(ctx, None)
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    puller = subprocess.Popen([sys.executable, "-m", "puller", "--connect", fake.endpoint, "--machine", "M1",
                               "--insecure", "--exit-with", str(parent.pid)],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        ident, _ = fake.expect(P.Hello, 30)
        fake.welcome(ident)
        fake.expect(P.Ready, 10)
        fake.send(ident, job(1, work=1000.0))
        fake.expect(P.Started, 10)
        parent.kill()
        parent.wait(10)
        left = time.monotonic()
        _, err = puller.communicate(timeout=20)
        assert time.monotonic() - left < 10, err[-2000:]
        assert puller.returncode == 0 and "--exit-with) has ended: leaving" in err, err[-2000:]
        bye = fake.expect(P.Bye, 5, ignore=(P.Heartbeat, P.Ready, P.Progress))[1]
        assert "its run's process ended" in bye.reason
    finally:
        for p in (parent, puller):
            if p.poll() is None:
                p.kill()
                p.wait(10)
