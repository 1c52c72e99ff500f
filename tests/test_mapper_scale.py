"""A real mapper serves 300 fake keyed pullers (benchmarks/fake_pullers.py, two worker processes):
every puller registers, no machine is taken down, even by a pause of the mapper longer than the
liveness window, and every job is done exactly once.

Correctness only: how fast is measured by benchmarks/bench_mapper_scale.py, not here (a busy machine
would fail any threshold).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from mgst.core import JobStatus
from mgst.model import Experiment, JobClass, Machine, PolicySpec, TestbedSettings
from mgst.testbed.local_run import stop_pullers
from mgst.testbed.mapper import Mapper
from mgst.wire import security

ROOT = Path(__file__).resolve().parent.parent

PULLERS = 300
WORKERS = 2
JOB_S = 0.2  # mean job length (s): short jobs, many dispatches
ARRIVALS = 150.0  # jobs/s: half what 300 pullers can run, so the drain is short
DURATION = 3.0  # s of job generation
DEADLINE = 60.0  # s: the whole run, registration and drain included, however busy the machine
# The mapper's liveness, in heartbeat intervals (a lab's is 5): the fakes are 150 pullers to a process, and such a
# process, waiting for a core on a busy test machine (three test workers on two cores), once sent nothing for 1.9 s,
# more than 5 x 0.3 s; a real puller has a process of its own. The window is still shorter than the pause below.
MAPPER_LIVENESS = 10
# The mapper stops for this long once, mid-run (as a GC or an LP solve would): longer than the liveness
# window (10 x 0.3 s at 300 pullers), so a mapper that judged silence by its clock would take every
# machine down; their heartbeats are waiting in its socket.
PAUSE = 4.0
# The fakes wait this many heartbeat intervals (not the puller's 5) before saying hello again, so that
# the pause tests how the mapper judges silence, not how it takes a hello that crossed a job in flight.
FAKE_LIVENESS = 20


def experiment() -> Experiment:
    return Experiment(
        name="scale-300",
        classes=(JobClass("1", ARRIVALS),),
        machines=tuple(Machine(f"P{j + 1}", (1.0 / JOB_S,), 1.0) for j in range(PULLERS)),
        # the testbed's setting for a big LPAS_DG lab (docs/policies.md): it solves once a second at most
        policy=PolicySpec("lpas_dg", {"resolve_debounce": 1.0}),
        testbed=TestbedSettings(time_unit=1.0, duration=DURATION, timeout_factor=0.0),
    )


def test_300_keyed_pullers_all_registered_none_down_every_job_done_once(tmp_path, no_children_left):
    exp = experiment()
    names = [m.name for m in exp.machines]
    security.create_keys(tmp_path / "keys", names)
    paused: list[float] = []

    def pause_once(m: Mapper) -> None:
        if m.t0 is not None and m.model_now(time.time()) > 1.0 and not paused:
            paused.append(m.liveness * m.heartbeat_interval)
            time.sleep(PAUSE)

    mapper = Mapper(exp, "tcp://127.0.0.1:0", keys=security.server_keys(tmp_path / "keys"),
                    register_timeout=DEADLINE / 2, progress=pause_once, progress_interval=0.1,
                    liveness=MAPPER_LIVENESS)
    assert security.is_loopback(mapper.endpoint)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this tree's mgst, as the mapper's
    procs: list[subprocess.Popen] = []
    try:
        for w in range(WORKERS):
            procs.append(subprocess.Popen(
                [sys.executable, str(ROOT / "benchmarks" / "fake_pullers.py"), "--connect", mapper.endpoint,
                 "--keys", str(tmp_path / "keys"), "--names", ",".join(names[w::WORKERS]),
                 "--seconds", str(DEADLINE), "--report", str(tmp_path / f"fakes-{w}.json"),
                 "--liveness", str(FAKE_LIVENESS)],
                env=env, stdin=subprocess.DEVNULL))
        run = mapper.run()  # says bye to every puller at the end: the workers leave
    finally:
        mapper.stopping = True  # (if the mapper never ran: its socket is closed by run() only)
        stop_pullers(procs, grace=DEADLINE)
    assert [p.returncode for p in procs] == [0] * WORKERS
    assert paused and paused[0] < PAUSE < FAKE_LIVENESS * mapper.heartbeat_interval
    reports = [json.loads((tmp_path / f"fakes-{w}.json").read_text()) for w in range(WORKERS)]
    # every puller registered once (one incarnation each), and was welcomed
    assert [len(m.incarnations) for m in run.journal.machines] == [1] * PULLERS
    assert sum(r["welcomed"] for r in reports) == PULLERS
    assert not [x for r in reports for x in r["refused"]]
    # no machine taken down: no failure was injected, and no puller lost its connection
    assert sum(m.stats.failures + m.stats.suspicions for m in run.core.machines) == 0
    assert all(len(m.periods) == 1 for m in run.journal.machines)
    # every job done, by exactly one replica, each reported by a puller once
    assert len(run.core.jobs) > DURATION * ARRIVALS / 2  # (Poisson: about 450)
    assert run.cut_off == []
    assert all(rec.status is JobStatus.DONE for rec in run.core.jobs.values())
    done = [r for r in run.journal.replicas.values() if r.outcome == "done"]
    assert Counter(r.job for r in done) == Counter({job: 1 for job in run.core.jobs})
    reported = Counter(x for r in reports for x in r["replicas_done"])
    assert max(reported.values()) == 1
    assert {r.replica for r in done} <= set(reported)
    assert dict(run.malformed) == {}
    # the policy starts once every puller registered (as in the simulation: it sees them all up), and plans every
    # machine in that one solve (before 2026-12-02 it started before the first hello: three solves, the first for
    # an empty grid, the last debounced)
    assert run.core.policy.solves == 1
    assert all(run.core.policy.eligible[0])
