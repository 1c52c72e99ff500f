"""A killed mapper resumes from its journal; interrupts drain or stop at once; the journal exports alone."""

from __future__ import annotations

import csv
import datetime as dt
import json
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import read_until

from mgst.config import load_experiment
from mgst.testbed.local_run import start_pullers, stop_pullers
from mgst.wire import security
from mgst.workload.poisson import PoissonWorkload

ROOT = Path(__file__).resolve().parents[1]
# Seconds of job generation in the killed-twice runs (35 model time units): the second crash comes within it, and
# more than a third of the jobs come after the first.
KILLED_RUN_S = 7.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_mapper(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mgst", "mapper", *args, "--quiet", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def count_events(journal: Path, kind: str) -> int:
    """Committed events of one kind, read beside the running mapper (WAL readers never block it)."""
    if not journal.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=1.0) as db:
            return db.execute("SELECT count(*) FROM events WHERE kind = ?", (kind,)).fetchone()[0]
    except sqlite3.OperationalError:  # the schema is not there yet
        return 0


def resumes_listed(journal: Path) -> list[dict]:
    """The run's ``resumes`` setting as committed so far ([] before any), read beside the running mapper."""
    try:
        with sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=1.0) as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'resumes'").fetchone()
    except sqlite3.OperationalError:  # the schema is not there yet
        return []
    return [] if row is None else json.loads(row[0])


def wait_for(condition, timeout: float, what: str, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"{what}: the mapper exited with {proc.returncode}: {proc.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def reap(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def run_mapper(exp_file: Path, tmp_path: Path, name: str, kills: tuple[int, ...], seed: int = 7,
               duration: float = 10.0) -> tuple[dict, list[dict], list[int], float]:
    """A keyed run of ``exp_file`` into ``tmp_path/name``, with real pullers; the mapper is SIGKILLed once
    ``kills[k]`` jobs are complete (an increasing list) and started again with --resume each time.
    Returns the summary, the jobs.csv rows, the completed count at each crash, and the first crash's time."""
    exp = load_experiment(exp_file)
    names = [m.name for m in exp.machines]
    keys, out = tmp_path / f"keys-{name}", tmp_path / name
    security.create_keys(keys, names)
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    journal = out / "journal.sqlite"
    common = ["--bind", endpoint, "--keys", str(keys)]
    mappers = [start_mapper([str(exp_file), *common, "--out", str(out), "--duration", str(duration),
                             "--time-unit", "0.2", "--seed", str(seed)])]
    pullers: list[subprocess.Popen] = []
    done_at_crash: list[int] = []
    crashed_at = 0.0
    try:
        pullers = start_pullers(endpoint, names, tmp_path / f"pullers-{name}.log", keys=keys)
        for k, target in enumerate(kills):
            wait_for(lambda target=target: count_events(journal, "complete") >= target, 60,
                     f"{target} jobs done before crash {k + 1}", mappers[-1])
            mappers[-1].send_signal(signal.SIGKILL)
            mappers[-1].wait(10)
            crashed_at = crashed_at or time.time()
            done_at_crash.append(count_events(journal, "complete"))
            # the pullers go on; their jobs finish while nobody listens, and are held
            time.sleep(0.5)
            mappers.append(start_mapper([str(exp_file), *common, "--resume", str(out)]))
        stdout, stderr = mappers[-1].communicate(timeout=120)
        assert mappers[-1].returncode == 0, stderr[-3000:]
        summary = json.loads(stdout)
        codes = [p.wait(timeout=30) for p in pullers]  # the run is over: they leave by themselves
        assert codes == [0] * len(pullers), codes
    finally:
        reap([*mappers, *pullers])
        stop_pullers(pullers)
    with open(out / "jobs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return summary, rows, done_at_crash, crashed_at


@pytest.mark.parametrize("setting, kills", [
    # no failures: nothing restarts a puller the mapper stops serving, so a stranded one stays idle
    ("hihi-mfd-fd", (300, 700)),
    # injected failures, 21 pullers, 380 jobs a second
    ("lolo-mfd-fe", (500, 1000)),
])
def test_a_mapper_killed_twice_resumes_and_every_job_is_done_exactly_once(setting, kills, tmp_path,
                                                                          no_children_left):
    """SIGKILL the mapper twice in one run, starting it again with --resume each time. Every job generated
    before and after the crashes is Done exactly once, the generator continued the same seeded sequence,
    results pullers held during the outages were counted, every puller came back, and no machine is stranded:
    each was sent work again after each outage."""
    exp_file = tmp_path / f"{setting}.toml"  # one replication in the simulation beside each run (unused here)
    exp_file.write_text((ROOT / "experiments" / f"{setting}.toml").read_text().replace("replications = 10",
                                                                                      "replications = 1"))
    exp = load_experiment(exp_file)
    assert exp.simulation.replications == 1
    names = [m.name for m in exp.machines]
    started = time.monotonic()
    summary, rows, done_at_crash, crashed_at = run_mapper(exp_file, tmp_path, "run", kills, duration=KILLED_RUN_S)
    took = time.monotonic() - started
    journal = tmp_path / "run" / "journal.sqlite"
    ids = [int(r["ID"]) for r in rows]
    assert len(ids) == len(set(ids)) == summary["jobs_generated"] > done_at_crash[-1] > done_at_crash[0]
    assert sorted(ids) == list(range(len(ids)))  # no job lost or made twice across the crashes
    assert {r["Status"] for r in rows} == {"Done"}
    assert summary["cut_off"] == []
    # each job done by one replica: the journal has one "complete" per job
    assert count_events(journal, "complete") == len(ids)
    # the same seeded sequence as an uninterrupted generator
    expected = PoissonWorkload(exp.arrival_rates, 7, 0)
    by_id = {int(r["ID"]): r for r in rows}
    for jid in range(len(ids)):
        job = expected.next_job()
        assert job.id == jid
        assert int(by_id[jid]["Job Class"]) == job.job_class + 1
        assert float(by_id[jid]["Size"]) == pytest.approx(job.size, abs=1e-6)
    # (ISO 8601 local times with their UTC offset)
    assert len(summary["outages"]) == 2
    assert dt.datetime.fromisoformat(summary["outages"][0]["to"]).timestamp() >= crashed_at
    assert summary["results_reported_after_outage"] >= 1, summary
    assert summary["jobs_across_outage"] >= 1
    with open(tmp_path / "run" / "machine_periods.csv", newline="") as f:
        periods = list(csv.DictReader(f))
    for name in names:  # every machine was seen up again after the outage, up to the end or a failure
        mine = [p for p in periods if p["Machine"] == name]
        assert any(p["Up From"] and p["Up From"] >= _iso(crashed_at, summary) for p in mine), (name, mine)
    assert [t["pullers_back"] for t in summary["resumes"]] == [len(names)] * 2  # all came back by themselves
    # No machine stranded: after each outage, every machine was sent work again (a machine the resumed mapper
    # believed busy with a job whose result it already had, or never took back, would sit idle to the end)
    for k, outage in enumerate(summary["outages"]):
        ended = dt.datetime.fromisoformat(outage["to"]).timestamp()
        for name in names:  # (jobs.csv's times are local, without their offset)
            sent = [r for r in rows if r["Server"] == name
                    and dt.datetime.fromisoformat(r["Date Sent"]).timestamp() >= ended]
            assert sent, f"{name} was sent no job after outage {k + 1} (ended {outage['to']})"
    print(f"{setting}: two resumes after {done_at_crash} jobs done; replay "
          f"{[round(t['replay_s'], 2) for t in summary['resumes']]} s, pullers back after "
          f"{[round(t['reconnect_s'], 2) for t in summary['resumes']]} s; {took:.1f} s in all")


def _iso(t: float, summary: dict) -> str:
    """``t`` as machine_periods.csv writes it: local time at the run's UTC offset, summary.json's."""
    sign, hours, minutes = summary["local_time_utc_offset"][0], *summary["local_time_utc_offset"][1:].split(":")
    offset = (1 if sign == "+" else -1) * (int(hours) * 3600 + int(minutes) * 60)
    return (dt.datetime.fromtimestamp(t, dt.UTC) + dt.timedelta(seconds=offset)).replace(
        tzinfo=None).isoformat(sep=" ", timespec="microseconds")


def small_file(tmp_path: Path, duration: float = 30.0, rate: float = 6.0, time_unit: float = 0.1) -> Path:
    f = tmp_path / f"exp-{rate:g}-{time_unit:g}.toml"
    f.write_text(f"[workload]\narrival_rates = [{rate}]\n[machines]\nrates = [[4.0, 4.0]]\n[policy]\n"
                 f"name = \"fcfs\"\n[testbed]\ntime_unit = {time_unit}\nduration = {duration}\n")
    return f


def test_sigint_drains_and_writes_results_and_a_second_one_stops_at_once(tmp_path, no_children_left):
    """The first SIGINT ends generation, drains and writes the results; a second stops at once, and the
    journal it leaves exports consistently."""
    names = ["M1", "M2"]
    for second_too in (False, True):
        # for the second case, an overloaded setting with long jobs: the drain has work left to cut short
        exp_file = small_file(tmp_path, rate=12.0, time_unit=1.0) if second_too else small_file(tmp_path)
        out = tmp_path / f"run{int(second_too)}"
        endpoint = f"tcp://127.0.0.1:{free_port()}"
        mapper = start_mapper([str(exp_file), "--bind", endpoint, "--out", str(out)])
        pullers: list[subprocess.Popen] = []
        try:
            pullers = start_pullers(endpoint, names, tmp_path / "pullers.log")
            wait_for(lambda out=out: count_events(out / "journal.sqlite", "complete") >= 10, 30, "10 jobs", mapper)
            mapper.send_signal(signal.SIGINT)
            if second_too:  # once the first is handled (signals do not queue)
                wait_for(lambda out=out: count_events(out / "journal.sqlite", "genend") >= 1, 10, "the drain", mapper)
                mapper.send_signal(signal.SIGINT)
            stdout, stderr = mapper.communicate(timeout=30)
        finally:
            reap([mapper])
            stop_pullers(pullers)
        assert mapper.returncode == 0, stderr[-2000:]
        summary = json.loads(stdout)
        assert summary["duration_s"] < 10  # generation stopped early, not after the file's 30 s
        assert (out / "jobs.csv").stat().st_size > 0
        if not second_too:
            assert summary["jobs_done"] == summary["jobs_generated"] and not summary["aborted"]
        else:
            assert summary["aborted"] and summary["jobs_done"] < summary["jobs_generated"]
        # the journal alone gives the same jobs
        before = (out / "jobs.csv").read_text()
        p = subprocess.run([sys.executable, "-m", "mgst", "export", str(out), "--json"], capture_output=True,
                           text=True, timeout=60, cwd=ROOT)
        assert p.returncode == 0, p.stderr
        assert (out / "jobs.csv").read_text() == before
        assert json.loads(p.stdout)["jobs_generated"] == summary["jobs_generated"]


def test_sigint_while_waiting_for_pullers_stops_the_mapper(tmp_path, no_children_left):
    exp_file = small_file(tmp_path)
    out = tmp_path / "run"
    mapper = start_mapper([str(exp_file), "--bind", f"tcp://127.0.0.1:{free_port()}", "--out", str(out)])
    try:
        said = read_until(mapper, "listening on", 30)  # its handlers are in place from then on
        mapper.send_signal(signal.SIGINT)
        _, stderr = mapper.communicate(timeout=10)
        stderr = said + stderr
    finally:
        reap([mapper])
    assert mapper.returncode == 130, stderr
    assert "waiting for pullers" in stderr and "Traceback" not in stderr
    assert "no run has begun" in stderr and "draining" not in stderr, stderr  # (nothing had started to drain)


def test_a_run_directory_is_never_overwritten_and_resume_checks_its_experiment(tmp_path):
    exp_file = small_file(tmp_path)
    out = tmp_path / "run"
    out.mkdir()
    (out / "journal.sqlite").write_bytes(b"")
    p = subprocess.run([sys.executable, "-m", "mgst", "mapper", str(exp_file), "--bind", "tcp://127.0.0.1:0",
                        "--out", str(out)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 2 and "already holds a run" in p.stderr
    p = subprocess.run([sys.executable, "-m", "mgst", "mapper", str(exp_file), "--bind", "tcp://127.0.0.1:0",
                        "--resume", str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 2 and "nowhere: no such folder" in p.stderr, p.stderr
    p = subprocess.run([sys.executable, "-m", "mgst", "mapper", str(exp_file), "--bind", "tcp://127.0.0.1:0",
                        "--resume", str(out), "--seed", "3"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 2 and "--seed" in p.stderr, p.stderr


def test_a_resume_with_a_changed_experiment_file_says_what_changed(tmp_path, no_children_left):
    """It said "RUN was run with another experiment than 'NAME'", the same name: the first difference is said now,
    with both values, and nothing is written."""
    exp_file = small_file(tmp_path, duration=1.0)
    out = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "mgst", "run", str(exp_file), "--out", str(out), "--quiet", "--no-live"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    with sqlite3.connect(out / "journal.sqlite") as db:  # (as a run whose mapper died: not ended)
        db.execute("DELETE FROM meta WHERE key IN ('ended', 'drops')")
    def results() -> dict:  # (the journal's own bytes move as SQLite checkpoints its log on opening: its events)
        with sqlite3.connect(out / "journal.sqlite") as db:
            events = db.execute("SELECT count(*) FROM events").fetchone()[0]
        return {"events": events, **{f.name: f.read_bytes() for f in out.iterdir() if "journal" not in f.name}}

    before = results()
    exp_file.write_text(exp_file.read_text().replace("arrival_rates = [6.0]", "arrival_rates = [7.0]"))
    p = subprocess.run([sys.executable, "-m", "mgst", "run", str(exp_file), "--resume", str(out), "--quiet",
                        "--no-live"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-2000:]
    assert f"{out} was run with another experiment than the file gives now (classes[0].arrival_rate: 7.0 in the " \
           "file, 6.0 in the run)" in p.stderr, p.stderr[-2000:]
    assert results() == before


def test_a_run_cut_short_without_its_end_counts_a_tenth_of_what_it_generated_as_warm_up(tmp_path, no_children_left):
    """A journal that stops early with no end (its mapper killed): its summary's horizon is what it generated, and its
    warm-up was still the file's, up to a tenth of the whole run's (a warm-up of 2 in a run of 0.0008 time units)."""
    exp_file = small_file(tmp_path, duration=3.0)
    out = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "mgst", "run", str(exp_file), "--out", str(out), "--quiet", "--no-live"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    with sqlite3.connect(out / "journal.sqlite") as db:  # the journal up to its fifth job done, as a mapper killed then
        fifth = db.execute("SELECT seq FROM events WHERE kind = 'complete' ORDER BY seq LIMIT 1 OFFSET 4").fetchone()[0]
        db.execute("DELETE FROM events WHERE seq > ?", (fifth,))
        db.execute("DELETE FROM meta WHERE key IN ('ended', 'drops', 'decision_time')")
    p = subprocess.run([sys.executable, "-m", "mgst", "export", str(out), "--json"], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    summary = json.loads(p.stdout)
    assert 0 < summary["horizon"] < 3.0 / 0.1 / 2, summary["horizon"]  # (the file's run: 30 time units)
    assert summary["warmup"] == pytest.approx(0.1 * summary["horizon"]), (summary["warmup"], summary["horizon"])


TRACE_TOML = """[workload]
arrival_rates = [2.0]
[machines]
rates = [[4.0, 4.0]]
names = ["M1", "M2"]
[availability]
kind = "trace"
file = "availability.csv"
[policy]
name = "fcfs"
[testbed]
time_unit = 0.2
duration = 6.0
"""


def trace_run(tmp_path: Path, trace: str) -> tuple[Path, Path, Path, str]:
    """The files of a keyed run of TRACE_TOML (M1 and M2) playing ``trace``, in ``tmp_path``: its experiment file,
    its key folder, its run folder (not made yet) and a free loopback endpoint."""
    (tmp_path / "availability.csv").write_text(trace)
    exp_file = tmp_path / "exp.toml"
    exp_file.write_text(TRACE_TOML)
    keys = tmp_path / "keys"
    security.create_keys(keys, ["M1", "M2"])
    return exp_file, keys, tmp_path / "run", f"tcp://127.0.0.1:{free_port()}"


def killed_after_five_jobs(common: list[str], out: Path, endpoint: str, keys: Path, log: Path,
                           procs: list[subprocess.Popen], pullers: list[subprocess.Popen]) -> None:
    """A mapper of ``common`` into ``out`` and pullers M1 and M2, SIGKILLed once 5 jobs are done; each process is
    added to ``procs`` or ``pullers`` as it starts (the caller reaps them, whatever happens here)."""
    procs.append(start_mapper([*common, "--out", str(out)]))
    pullers.extend(start_pullers(endpoint, ["M1", "M2"], log, keys=keys))
    wait_for(lambda: count_events(out / "journal.sqlite", "complete") >= 5, 60, "5 jobs done", procs[0])
    procs[0].send_signal(signal.SIGKILL)
    procs[0].wait(10)


def finished(mapper: subprocess.Popen, pullers: list[subprocess.Popen]) -> dict:
    """The summary (--json) of ``mapper``, run to its end (exit 0), once its pullers have left (exit 0)."""
    stdout, stderr = mapper.communicate(timeout=120)
    assert mapper.returncode == 0, stderr[-3000:]
    assert [p.wait(timeout=30) for p in pullers] == [0, 0]
    return json.loads(stdout)


def test_a_trace_changed_since_the_run_began_is_refused_on_resume_and_the_same_file_resumes(tmp_path):
    """A run killed, resumed without its keys: refused; its trace edited, resumed: refused in one line naming the
    file (the part after the resume would replay another experiment), nothing written; the trace put back as it
    was, the resume completes with every job done exactly once."""
    original = "M1,0,100000,up,1\nM2,0,100000,up,1\n"
    exp_file, keys, out, endpoint = trace_run(tmp_path, original)
    trace = tmp_path / "availability.csv"
    common = [str(exp_file), "--bind", endpoint, "--keys", str(keys)]
    journal = out / "journal.sqlite"
    procs: list[subprocess.Popen] = []
    pullers: list[subprocess.Popen] = []
    try:
        killed_after_five_jobs(common, out, endpoint, keys, tmp_path / "pullers.log", procs, pullers)
        events = count_events(journal, "complete")
        # resumed without its keys: refused (it ran with CURVE; its summary would have said "none" of the whole run)
        procs.append(start_mapper([str(exp_file), "--bind", endpoint, "--insecure", "--resume", str(out)]))
        _, stderr = procs[-1].communicate(timeout=60)
        assert procs[-1].returncode == 2 and "Traceback" not in stderr, stderr[-2000:]
        assert f"cannot resume {out} without keys: it ran with CURVE keys" in stderr, stderr[-2000:]
        trace.write_text(original.replace("M2,0,100000,up,1", "M2,0,100000,reclaimed,0.5"))
        procs.append(start_mapper([*common, "--resume", str(out)]))
        _, stderr = procs[-1].communicate(timeout=60)
        assert procs[-1].returncode == 2, stderr[-2000:]
        errors = [line for line in stderr.splitlines() if "error" in line]
        assert len(errors) == 1 and "Traceback" not in stderr, stderr
        assert f"{trace} changed since the run began" in errors[0] and "--resume" in errors[0], errors
        assert count_events(journal, "complete") == events  # (nothing replayed into the journal, nothing run)
        trace.write_text(original)
        procs.append(start_mapper([*common, "--resume", str(out)]))
        summary = finished(procs[-1], pullers)
    finally:
        reap([*procs, *pullers])
        stop_pullers(pullers)
    with open(out / "jobs.csv", newline="") as f:
        ids = [int(row["ID"]) for row in csv.DictReader(f)]
    assert summary["jobs_done"] == summary["jobs_generated"] == len(ids) == len(set(ids)) > events


def test_the_mapper_prints_a_puller_command_that_works_when_pasted(tmp_path, no_children_left):
    """`mgst mapper` says what to run on a lab machine, naming the key folder (no secret on the line); that command,
    pasted with its placeholders filled, starts a puller the mapper admits, and the run ends."""
    exp_file = tmp_path / "one.toml"
    exp_file.write_text(small_file(tmp_path, duration=1.0).read_text().replace("rates = [[4.0, 4.0]]",
                                                                                "rates = [[4.0]]"))
    keys = tmp_path / "keys"
    security.create_keys(keys, ["M1"])
    mapper = start_mapper([str(exp_file), "--bind", f"tcp://127.0.0.1:{free_port()}", "--keys", str(keys),
                           "--out", str(tmp_path / "run")])
    puller = None
    try:
        said = read_until(mapper, "on each lab machine:", 30)
        line = next(x for x in said.splitlines() if "on each lab machine:" in x)
        command = line.split("on each lab machine: ", 1)[1].split(" (or 'mgst lab up'")[0]
        assert "key_secret" not in command and command.startswith("python -m puller ")
        argv = shlex.split(command)
        assert argv[argv.index("--machine") + 1] == "M1" and argv[argv.index("--keys") + 1] == str(keys)
        puller = subprocess.Popen([sys.executable, *argv[1:]], cwd=ROOT, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        stdout, stderr = mapper.communicate(timeout=60)
        assert mapper.returncode == 0, stderr[-2000:]
        assert json.loads(stdout)["jobs_done"] >= 1
        assert puller.wait(30) == 0
    finally:
        reap([mapper] + ([puller] if puller is not None else []))


def test_a_run_over_ipv6_loopback_completes(tmp_path, no_children_left):
    """A mapper bound to tcp://[::1] and pullers connecting there (ZeroMQ needs ZMQ_IPV6 on both sockets for it):
    the run completes, every job done."""
    exp_file = small_file(tmp_path, duration=1.0)
    keys = tmp_path / "keys"
    security.create_keys(keys, ["M1", "M2"])
    endpoint = f"tcp://[::1]:{free_port()}"
    mapper = start_mapper([str(exp_file), "--bind", endpoint, "--keys", str(keys), "--out", str(tmp_path / "run")])
    pullers: list[subprocess.Popen] = []
    try:
        read_until(mapper, "listening on tcp://[::1]:", 30)
        pullers = start_pullers(endpoint, ["M1", "M2"], tmp_path / "pullers.log", keys=keys)
        stdout, stderr = mapper.communicate(timeout=60)
        assert mapper.returncode == 0, stderr[-2000:]
        summary = json.loads(stdout)
        assert summary["jobs_done"] == summary["jobs_generated"] >= 1
        assert [p.wait(timeout=30) for p in pullers] == [0, 0]
    finally:
        reap([mapper, *pullers])
        stop_pullers(pullers)


def test_a_resume_of_a_run_whose_mapper_still_writes_it_is_refused_and_export_says_it_is_going(tmp_path,
                                                                                               no_children_left):
    """Two mappers on one journal each add what the other decided: the resume's jobs arrived twice, and were
    done twice. A mapper holds its run folder's lock while it runs: a --resume meanwhile exits 2 naming its pid,
    and `mgst export` says the run is going by the lock, not by how recently the journal was written. Once the
    mapper has stopped, the lock is free whatever way it stopped (here SIGKILL), and the resume goes on. A resumed
    mapper killed while it waits for its pullers leaves its resume listed in the summary, its wait's figures null."""
    exp_file = small_file(tmp_path)
    out = tmp_path / "run"
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    mapper = start_mapper([str(exp_file), "--bind", endpoint, "--out", str(out)])
    pullers: list[subprocess.Popen] = []
    second: list[subprocess.Popen] = []
    try:
        pullers = start_pullers(endpoint, ["M1", "M2"], tmp_path / "pullers.log")
        wait_for(lambda: count_events(out / "journal.sqlite", "complete") >= 5, 30, "5 jobs", mapper)
        p = subprocess.run([sys.executable, "-m", "mgst", "mapper", str(exp_file), "--resume", str(out), "--bind",
                            f"tcp://127.0.0.1:{free_port()}", "--quiet"], capture_output=True, text=True,
                           timeout=60, cwd=ROOT)
        assert p.returncode == 2, p.stderr
        assert f"a mapper (pid {mapper.pid}) is writing this run" in p.stderr
        mapper.kill()
        mapper.wait()
        stop_pullers(pullers)
        pullers = []
        e = subprocess.run([sys.executable, "-m", "mgst", "export", str(out)], capture_output=True, text=True,
                           timeout=60, cwd=ROOT)
        assert e.returncode == 0, e.stderr
        assert "still going" not in e.stderr and "was not closed" in e.stderr  # (killed a moment ago)
        done = count_events(out / "journal.sqlite", "complete")
        # resumed with no puller running, and killed while it waits for them (its resume listed)
        second.append(start_mapper([str(exp_file), "--resume", str(out), "--bind", endpoint]))
        wait_for(lambda: len(resumes_listed(out / "journal.sqlite")) == 1, 30, "the resume listed", second[0])
        second[0].kill()
        second[0].wait()
        second.append(start_mapper([str(exp_file), "--resume", str(out), "--bind", endpoint]))
        read_until(second[1], "listening on", 30)  # (its signal handlers are in place from then on)
        pullers = start_pullers(endpoint, ["M1", "M2"], tmp_path / "pullers.log")
        wait_for(lambda: count_events(out / "journal.sqlite", "complete") > done, 30, "a job done", second[1])
        second[1].send_signal(signal.SIGINT)  # the resumed run drains and ends
        stdout, stderr = second[1].communicate(timeout=60)
        assert second[1].returncode == 0, stderr[-2000:]
    finally:
        reap([mapper, *second])
        stop_pullers(pullers)
    cut_short, resumed = json.loads(stdout)["resumes"]
    assert cut_short["reconnect_s"] is None and cut_short["pullers_back"] is None, cut_short
    assert cut_short["pullers"] == 2 and cut_short["replay_s"] >= 0.0
    assert resumed["pullers_back"] == 2 and resumed["reconnect_s"] >= 0.0, resumed


def test_a_resume_no_puller_comes_back_to_stops_keeping_the_run_and_one_with_them_completes(tmp_path,
                                                                                             no_children_left):
    """The pullers gave up (--give-up) before the mapper was resumed: the resumed mapper waited its 10 s, then ran
    the clock with no machine, generated into queues nothing served, cut every job off at the drain, and called the
    gap 'the testbed did better than the model'. Now it waits (--register-timeout), stops saying to start the
    pullers again, and keeps the run as it was; resumed with its pullers, every job is done once."""
    exp_file, keys, out, endpoint = trace_run(tmp_path, "M1,0,100000,up,1\nM2,0,100000,up,1\n")
    common = [str(exp_file), "--bind", endpoint, "--keys", str(keys)]
    journal = out / "journal.sqlite"
    procs: list[subprocess.Popen] = []
    pullers: list[subprocess.Popen] = []
    try:
        killed_after_five_jobs(common, out, endpoint, keys, tmp_path / "pullers.log", procs, pullers)
        stop_pullers(pullers, grace=0.0)  # (as pullers that gave up: gone)
        events = {kind: count_events(journal, kind) for kind in ("arrive", "complete", "begin")}
        procs.append(start_mapper([*common, "--resume", str(out), "--register-timeout", "12"]))
        _, stderr = procs[-1].communicate(timeout=90)
        assert procs[-1].returncode == 1 and "Traceback" not in stderr, stderr[-2000:]
        assert "no puller came back within 12 s of the resume" in stderr and "start the pullers again" in stderr, \
            stderr[-2000:]
        assert {kind: count_events(journal, kind) for kind in events} == events  # (no job generated, none cut off)
        procs.append(start_mapper([*common, "--resume", str(out)]))
        pullers = start_pullers(endpoint, ["M1", "M2"], tmp_path / "pullers.log", keys=keys)
        summary = finished(procs[-1], pullers)
    finally:
        reap([*procs, *pullers])
        stop_pullers(pullers)
    assert summary["jobs_done"] == summary["jobs_generated"] > events["complete"] and not summary["cut_off"]
