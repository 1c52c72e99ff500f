"""`mgst lab` on a real Slurm (tests/slurm_cluster.py: munged, slurmctld, slurmd of this machine): pullers as pilot
jobs in a keyed run, pilots cancelled mid-run (their machines DOWN, their replicas requeued), no key anywhere Slurm
or ps shows, the pilot overlay growing and shrinking with the work, and the bad inputs' one-line errors."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import psutil
import pytest
from helpers import once_across_builds
from slurm_cluster import MAX_MINUTES, PARTITION, SlurmCluster

from mgst.cli import main
from mgst.testbed.overheads import read_journal
from mgst.wire import security

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ROOT / "experiments" / "hihi-mfd-fd.toml"  # shipped: 6 machines M1..M6, LPAS_DG
MACHINES = [f"M{i}" for i in range(1, 7)]
# One Slurm at a time: each test starts its own cluster (its daemons and pilots load the machine's two cores).
pytestmark = [pytest.mark.xdist_group("slurm"), once_across_builds]


def lab(capsys, *args: str) -> tuple[int, str, str]:
    """`mgst lab ARGS` in this process: exit code, stdout, stderr."""
    capsys.readouterr()
    code = main(["lab", *args])
    out, err = capsys.readouterr()
    return code, out, err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_hosts(tmp_path: Path, endpoint: str, **slurm_keys) -> Path:
    pure = [f"MGST_PURE={os.environ['MGST_PURE']}"] if "MGST_PURE" in os.environ else []
    command = [*pure, f"PYTHONPATH={ROOT}", sys.executable, "-m", "mgst"]
    keys = {"machines": MACHINES, "shared_dir": str(tmp_path / "shared"), "partition": PARTITION,
            "time_limit": "10", "mgst": command, "puller_args": ["--give-up", "60"], **slurm_keys}
    text = f'[lab]\nconnect = "{endpoint}"\nkeys = "keys"\n\n[slurm]\n'
    text += "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())
    path = tmp_path / "slurm.toml"
    path.write_text(text)
    return path


def start_mapper(tmp_path: Path, endpoint: str, *extra: str, duration: float,
                 experiment: Path = EXPERIMENT, verbose: bool = False) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "mgst", *(["-v"] if verbose else []), "mapper", str(experiment), "--bind", endpoint,
         "--keys", str(tmp_path / "keys"), "--out", str(tmp_path / "out"), "--quiet", "--register-timeout", "90",
         "--farewell", "1", "--duration", str(duration), "--time-unit", "0.1", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)})


def finish(mapper: subprocess.Popen, timeout: float = 150) -> tuple[str, str]:
    """The mapper's stdout and stderr once it has ended (exit 0)."""
    try:
        stdout, stderr = mapper.communicate(timeout=timeout)
    finally:
        if mapper.poll() is None:
            mapper.kill()
            mapper.communicate()
    assert mapper.returncode == 0, stderr
    return stdout, stderr


def secrets_of(keys: Path) -> list[str]:
    """The secret keys' material (z85) of every key file in ``keys``."""
    found = []
    for f in (keys / "pullers").glob("*.key_secret"):
        found += re.findall(r'secret-key = "([^"]+)"', f.read_text())
    assert found
    return found


def each_job_done_once(out: Path) -> object:
    journal, _, _ = read_journal(out)
    assert journal.jobs
    for j in journal.jobs.values():
        assert j.done_by is not None, j
        assert sum(journal.replicas[r].outcome == "done" for r in j.replicas) == 1, j
    return journal


def pilot_pids(shared: Path) -> dict[str, int]:
    """The running pullers of the pilots: machine -> pid."""
    found = {}
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if "puller" in cmd and "--keys" in cmd and cmd[cmd.index("--keys") + 1] == str(shared / "keys"):
            found[cmd[cmd.index("--machine") + 1]] = p.pid
    return found


def test_a_keyed_run_with_every_puller_a_slurm_pilot_and_no_key_in_sight(slurm: SlurmCluster, tmp_path, capsys):
    """`mgst lab up` submits one pilot per machine; the run ends with every job done once and the comparison with
    the simulation; no secret key in squeue, scontrol, ps or a pilot's environment; the pilots end COMPLETED with
    exit 0 in Slurm's job-completion record; `lab status` says so."""
    security.create_keys(tmp_path / "keys", MACHINES)
    secrets = secrets_of(tmp_path / "keys")
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    hosts = write_hosts(tmp_path, endpoint)
    mapper = start_mapper(tmp_path, endpoint, "--no-live", duration=2.0)
    try:
        code, out, err = lab(capsys, "up", str(hosts))
        assert code == 0, out + err
        jobs = {m: int(j) for m, j in re.findall(r"^(M\d): submitted job (\d+)$", out, re.M)}
        assert sorted(jobs) == MACHINES, out
        shared = tmp_path / "shared"
        # while they run: what Slurm and ps show of them holds no key
        slurm.wait_for(lambda: len(pilot_pids(shared)) == len(MACHINES), 60, "every pilot's puller runs")
        shown = slurm.run("squeue", "--all", "--format=%all").stdout
        for job in jobs.values():
            shown += slurm.run("scontrol", "--details", "show", "job", str(job)).stdout
        shown += subprocess.run(["ps", "-eww", "-o", "args"], capture_output=True, text=True).stdout
        environments = ""
        for pid in pilot_pids(shared).values():
            environments += Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
        assert "SLURM_JOB_ID" in environments  # (it is the jobs' environment that was read)
        assert f"--keys {shared}/keys" in shown and "mgst-pilot-M1" in shown
        assert not [s for s in secrets if s in shown or s in environments]
        # the key files the pilots read: 0600 in 0700 folders
        for f in (shared / "keys" / "pullers").iterdir():
            assert f.stat().st_mode & 0o777 == 0o600
        assert (shared / "keys" / "pullers").stat().st_mode & 0o777 == 0o700
        assert shared.stat().st_mode & 0o777 == 0o700
        stdout, _ = finish(mapper)
    finally:
        if mapper.poll() is None:
            mapper.kill()
            mapper.communicate()
    assert "simulation" in stdout, stdout
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["security"] == "curve" and summary["jobs_done"] == summary["jobs_generated"] > 0
    each_job_done_once(tmp_path / "out")
    # Slurm's record: every pilot ended cleanly (the puller's exit 0 on the mapper's bye)
    slurm.wait_for(lambda: not slurm.jobs(), 60, "the pilots leave after the run")
    record = slurm.jobcomp.read_text()
    for job in jobs.values():
        assert re.search(rf"^JobId={job} .*JobState=COMPLETED .*ExitCode=0:0", record, re.M), record
    code, out, err = lab(capsys, "status", str(hosts))
    assert code == 0, out + err
    for m, job in jobs.items():
        assert re.search(rf"^{m}: job {job} COMPLETED \(exit 0: the run is over", out, re.M), out
    assert "0 of 6 pilots live" in out


def snapshot(url: str) -> dict:
    with urllib.request.urlopen(url + "api/snapshot", timeout=10) as answer:
        return json.loads(answer.read())


def live_url(mapper: subprocess.Popen, port: int) -> str:
    return f"http://127.0.0.1:{port}/"


# Eight tasks of 40 units at time unit 0.1 s: 4 s on a machine of power 1, 40 s on M1 and M2 (power 0.1). At the
# run's begin each of the six machines takes one; M1's and M2's pilots, cancelled then, hold theirs for 40 s
# more: whatever Slurm and the load take to deliver the cancel, it comes while each runs its replica.
SLOW = ["M1", "M2"]
LONG_TASKS = f"""[experiment]
name = "long-tasks"
[workload]
kind = "bag_list"
granularity = [60]
bags = [{{at = 0, tasks = {[[0, 40]] * 8}}}]
[machines]
power = [0.1, 0.1, 1, 1, 1, 1]
names = {json.dumps(MACHINES)}
[policy]
name = "fcfs"
[simulation]
horizon = 400
warmup = 0.0
[testbed]
time_unit = 0.1
duration = 30
"""


def test_pilots_cancelled_mid_run_are_machines_down_and_their_replicas_requeued(slurm: SlurmCluster, tmp_path,
                                                                               capsys):
    """scancel of two pilots while each runs a replica it cannot finish for 40 s: each puller gets Slurm's
    SIGTERM, kills its replica and tells the mapper at once ('stopped by SIGTERM'); the journal has their
    machines DOWN and never up again, exactly the replicas they ran lost and their jobs requeued and done once
    elsewhere; `lab status` says CANCELLED; `lab down` then cancels nothing, and not another job of the user's."""
    security.create_keys(tmp_path / "keys", MACHINES)
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    hosts = write_hosts(tmp_path, endpoint)
    port = free_port()
    (tmp_path / "long-tasks.toml").write_text(LONG_TASKS)
    mapper = start_mapper(tmp_path, endpoint, "--live", f"127.0.0.1:{port}", duration=30,
                          experiment=tmp_path / "long-tasks.toml", verbose=True)
    url = live_url(mapper, port)
    other = slurm.run("sbatch", "--parsable", "--job-name=not-ours", f"--partition={PARTITION}", "--output=/dev/null",
                      input="#!/bin/sh\nsleep 300\n").stdout.strip()
    try:
        code, out, err = lab(capsys, "up", str(hosts))
        assert code == 0, out + err
        jobs = {m: int(j) for m, j in re.findall(r"^(M\d): submitted job (\d+)$", out, re.M)}

        def slow_ones_busy() -> dict[str, list[int]]:
            """The jobs M1 and M2 run, once each runs one (the mapper's view: its live snapshot)."""
            try:
                machines = snapshot(url).get("machines") or []  # (none before the view's first snapshot)
            except OSError:
                return {}
            held = {m["name"]: m["running"] for m in machines if m["name"] in SLOW and m.get("running")}
            return held if len(held) == len(SLOW) else {}

        held = slurm.wait_for(slow_ones_busy, 90, "M1 and M2 run a replica each")
        slurm.run("scancel", *(str(jobs[m]) for m in SLOW))
        cancelled = {jobs[m] for m in SLOW}
        slurm.wait_for(lambda: not cancelled & set(slurm.jobs()), 60, "the cancelled pilots end")
        _, stderr = finish(mapper)
    finally:
        if mapper.poll() is None:
            mapper.kill()
            mapper.communicate()
    for m in SLOW:
        # the pilot got Slurm's SIGTERM and told the mapper (a Bye, not a silence found a second later)
        assert f"INFO mgst.testbed.mapper: {m} leaves: 'stopped by SIGTERM'" in stderr, stderr
        log = (tmp_path / "shared" / f"{m}-{jobs[m]}.log").read_text()
        assert "leaving (exit code 0): stopped by SIGTERM; 0 jobs run" in log, log
    journal = each_job_done_once(tmp_path / "out")
    names = [m.name for m in journal.machines]
    for m in SLOW:
        j = names.index(m)
        periods = journal.machines[j].periods
        assert len(periods) == 1 and periods[0][1] is not None, (m, periods)  # DOWN, and never up again
        ran = [r for r in journal.replicas.values() if r.machine == j]
        # exactly the replica it ran was lost with it, and its job requeued and done once elsewhere
        assert sorted(r.job for r in ran) == sorted(held[m]) and all(r.outcome == "lost" for r in ran), (m, ran)
        for r in ran:
            done_by = journal.replicas[journal.jobs[r.job].done_by]
            assert journal.jobs[r.job].requeues >= 1 and names[done_by.machine] not in SLOW, (r, done_by)
    code, out, err = lab(capsys, "status", str(hosts))
    for m in SLOW:
        assert re.search(rf"^{m}: job {jobs[m]} CANCELLED \(cancelled \(scancel\): its machine went DOWN", out,
                         re.M), out
    # `lab down`: nothing of ours live any more; the user's other job is left alone
    code, out, err = lab(capsys, "down", str(hosts))
    assert code == 0 and "no pilot job was live" in out, out + err
    assert slurm.jobs()[int(other)][1] == "RUNNING"


def test_lab_down_cancels_exactly_its_pilots(slurm: SlurmCluster, tmp_path, capsys):
    """Pilots with no mapper to reach wait for it; `lab up` again keeps their identities (no second pilot per
    machine); `lab down` cancels exactly them."""
    security.create_keys(tmp_path / "keys", MACHINES)
    hosts = write_hosts(tmp_path, f"tcp://127.0.0.1:{free_port()}", max_pilots=4)
    other = int(slurm.run("sbatch", "--parsable", "--job-name=mgst-pilot-M1", f"--partition={PARTITION}",
                          "--output=/dev/null", input="#!/bin/sh\nsleep 300\n").stdout.strip())
    code, out, err = lab(capsys, "up", str(hosts))
    assert code == 0, out + err
    jobs = [int(j) for j in re.findall(r"submitted job (\d+)", out)]
    assert len(jobs) == 4 and "free for later pilots (max_pilots = 4): M5, M6" in out, out
    code, out, err = lab(capsys, "up", str(hosts))
    assert code == 0 and "submitted" not in out and out.count("still holds it") == 4, out
    code, out, err = lab(capsys, "down", str(hosts))
    assert code == 0 and "cancelled 4 pilot jobs" in out, out + err
    slurm.wait_for(lambda: not set(jobs) & set(slurm.jobs()), 30, "the pilots are cancelled")
    assert other in slurm.jobs()


# Two bags of 1-s tasks (at time unit 0.1 s), 15 s apart: the first needs more pilots than the one that begins the
# run, then nothing is queued for long enough that idle pilots leave; the second brings them back.
TWO_BAGS = f"""[experiment]
name = "two-bags"
[workload]
kind = "bag_list"
granularity = [10]
bags = [{{at = 0, tasks = {[[0, 10]] * 12}}}, {{at = 150, tasks = {[[0, 10]] * 6}}}]
[machines]
power = [1, 1, 1, 1, 1, 1]
names = {json.dumps(MACHINES)}
[policy]
name = "fcfs"
[simulation]
horizon = 400
warmup = 0.0
[testbed]
time_unit = 0.1
duration = 30
"""


def test_the_overlay_adds_pilots_while_work_is_queued_and_idle_pilots_leave(slurm: SlurmCluster, tmp_path, capsys):
    """One pilot begins the run; the overlay adds pilots while jobs are queued, never more than max_pilots live;
    once the queue is empty, pilots with no work for idle_exit seconds leave (their log says so; COMPLETED, exit
    0), each with the time it did; the second bag brings pilots back."""
    security.create_keys(tmp_path / "keys", MACHINES)
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    hosts = write_hosts(tmp_path, endpoint, max_pilots=3, idle_exit=1.5, submit_interval=0.5)
    port = free_port()
    (tmp_path / "two-bags.toml").write_text(TWO_BAGS)
    mapper = start_mapper(tmp_path, endpoint, "--live", f"127.0.0.1:{port}", "--begin-with", "1", duration=30,
                          experiment=tmp_path / "two-bags.toml")
    lines: list[str] = []
    try:
        code, out, err = lab(capsys, "up", str(hosts), "--pilots", "1")
        assert code == 0 and len(re.findall("submitted job", out)) == 1, out + err
        done = threading.Event()

        def overlay() -> None:
            from mgst.lab.lab_file import load_lab  # noqa: PLC0415
            from mgst.lab.overlay import follow  # noqa: PLC0415

            try:
                follow(load_lab(hosts), live_url(mapper, port), lines.append, poll=0.3)
            finally:
                done.set()

        thread = threading.Thread(target=overlay, daemon=True)
        thread.start()
        finish(mapper)
        assert done.wait(60), lines
    finally:
        if mapper.poll() is None:
            mapper.kill()
            mapper.communicate()
    said = "\n".join(lines)
    print(said)
    submitted = re.findall(r"^ *([\d.]+) s  submitted job \d+ for (M\d) \((\d+) jobs queued, (\d+) pilots\)$", said,
                           re.M)
    left = re.findall(r"^ *([\d.]+) s  job \d+ \((M\d)\) left: COMPLETED \(exit 0", said, re.M)
    assert all(int(q) > 0 and int(n) <= 3 for _, _, q, n in submitted), said  # never past the limit
    first = [s for s in submitted if float(s[0]) < float(left[0][0])] if left else submitted
    assert [n for *_, n in first] == ["2", "3"], said  # pilots added up to the limit while the first bag waits
    # then idle pilots left while the run went on (before the second bag), and the second bag brought pilots back
    assert len(left) >= 3 and any(float(t) > float(left[2][0]) for t, *_ in submitted), said
    idle = [m for _, m in left[:3]
            if "no work for 1.5 s (--idle-exit)" in "".join(p.read_text() for p in
                                                            (tmp_path / "shared").glob(f"{m}-*.log"))]
    assert len(idle) == 3, said
    each_job_done_once(tmp_path / "out")


def test_bad_slurm_inputs_are_one_line_and_exit_2(slurm: SlurmCluster, tmp_path, capsys):
    """A partition that does not exist, a time limit over the partition's: Slurm's reason in one line, exit 2,
    nothing submitted."""
    security.create_keys(tmp_path / "keys", MACHINES)
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    for keys, said in (({"partition": "nowhere"}, "invalid partition"),
                       ({"time_limit": str(MAX_MINUTES + 5)}, "time limit")):
        code, out, err = lab(capsys, "up", str(write_hosts(tmp_path, endpoint, **keys)))
        assert code == 2 and out == "", out + err
        assert err.count("\n") == 1 and err.startswith("mgst: error: ") and said in err.lower(), err
    assert not slurm.jobs()
    assert not (tmp_path / "shared" / "jobs.tsv").exists()


def test_no_sbatch_and_a_file_mixing_ssh_hosts_and_slurm_are_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    security.create_keys(tmp_path / "keys", MACHINES)
    hosts = write_hosts(tmp_path, "tcp://127.0.0.1:5555")
    monkeypatch.setenv("PATH", str(tmp_path))  # no Slurm command there
    code, out, err = lab(capsys, "up", str(hosts))
    assert code == 2 and err.count("\n") == 1 and "no sbatch, squeue, scontrol, scancel on the PATH" in err, err
    mixed = tmp_path / "mixed.toml"
    mixed.write_text(hosts.read_text() + '\n[hosts.pc01]\naddress = "pc01"\nmachines = ["M1"]\n')
    code, out, err = lab(capsys, "status", str(mixed))
    assert code == 2 and err.count("\n") == 1, err
    assert "hosts: a hosts file has either SSH hosts ([hosts.NAME], [defaults]) or a [slurm] section" in err
    code, out, err = lab(capsys, "overlay", str(hosts), "--live", "file:///etc/passwd")
    assert code == 2 and err.count("\n") == 1 and "--live: 'file:///etc/passwd': give the live view's" in err, err


@pytest.mark.parametrize("keys, key, said", [
    ({"nodes": 3}, "slurm.nodes", "unknown key"),
    ({"sbatch_args": ["--partition=x"]}, "slurm.sbatch_args", "--partition is given by mgst lab itself"),
    ({"sbatch_args": ["-Jname"]}, "slurm.sbatch_args", "given by mgst lab itself"),
    # a review's bypasses: a prefix sbatch takes for the option, a short one bundled, a word sbatch takes as the script
    ({"sbatch_args": ["--outp=/tmp/x.log"]}, "slurm.sbatch_args", "--outp (that is --output) is given by mgst lab"),
    ({"sbatch_args": ["--wra=touch /tmp/x"]}, "slurm.sbatch_args", "(that is --wrap)"),
    ({"sbatch_args": ["-vo/tmp/x.log"]}, "slurm.sbatch_args", "given by mgst lab itself"),
    ({"sbatch_args": ["/tmp/other.sh"]}, "slurm.sbatch_args", "give options only"),
    ({"shared_dir": "/"}, "slurm.shared_dir", "two folders deep"),
    ({"shared_dir": "../../.."}, "slurm.shared_dir", "no '..'"),
    ({"shared_dir": "/etc/passwd"}, "slurm.shared_dir", "is a file"),
    ({"puller_args": ["--idle-exit=3"]}, "slurm.puller_args", "given by mgst lab itself"),
    ({"puller_args": ["--keys", "/tmp"]}, "slurm.puller_args", "given by mgst lab itself"),
    ({"max_pilots": 7}, "slurm.max_pilots", "1..6"),
    ({"idle_exit": -1}, "slurm.idle_exit", "positive"),
    ({"time_limit": "soon"}, "slurm.time_limit", "--time"),
    ({"partition": "-p"}, "slurm.partition", "a Slurm name"),
    ({"machines": ["M1", "M9"]}, "slurm.machines", "no key pair for M9"),
    ({"submit_interval": 1e9}, "slurm.submit_interval", "0 to 3600"),
])
def test_a_bad_slurm_section_is_one_line_naming_the_key(keys, key, said, tmp_path, capsys):
    security.create_keys(tmp_path / "keys", MACHINES)
    code, out, err = lab(capsys, "up", str(write_hosts(tmp_path, "tcp://127.0.0.1:5555", **keys)))
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"slurm.toml: {key}: " in err and said in err, err
