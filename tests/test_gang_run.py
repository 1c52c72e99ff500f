"""mgst.testbed.gang_run with real gang members on loopback: the same core as the simulator, the same makespan.

Four members (processes of puller.gang_member, each following its own markov3 chain), 2 tasks per iteration,
n_com = 1, a slot of 0.1 s: small enough for a busy two-core machine, with RECLAIMED and DOWN periods on the
way (the chains are the scenario's). The run is keyed (CURVE, one key per member) as the driver runs it; the
documented policy's run goes --insecure, the plain mode. Every test binds loopback on a free port, bounds its time
by the cap, and reaps its members; the last check is that no job of theirs is left, stopped or not.
"""

from __future__ import annotations

import uuid

import psutil
import pytest

from mgst.papers.casanova.instance import application, run, scenario
from mgst.testbed.casanova_beside import TRIAL, markov3_form
from mgst.testbed.gang_local import local_members
from mgst.testbed.gang_run import GangRun
from mgst.wire import gang_protocol as G
from mgst.wire import security

SEED = 1
UNIT = 0.1
ITERATIONS = 3
CAP = 200  # slots: 20 s of wall at most


def _jobs_left(tag: str) -> list[psutil.Process]:
    left = []
    for p in psutil.process_iter(["environ"]):
        if (p.info.get("environ") or {}).get("MGST_TEST_GANG_RUN") == tag:
            left.append(p)
    return left


@pytest.mark.parametrize("heuristic", ["IE", "Y-IE"])
def test_a_keyed_gang_run_on_real_members_matches_the_simulation_of_the_same_chains(heuristic, tmp_path):
    s = scenario(2, 1, 1, SEED, 0, p=4)
    app = application(s, heuristic, TRIAL, SEED, iterations=ITERATIONS)
    folder = tmp_path / "keys"
    security.create_keys(folder, [G.member_name(q) for q in range(4)])
    gang_run = GangRun(app, [markov3_form(m, SEED) for m in s.matrices], UNIT, 512,
                       proactive=app.policy.proactive, cap=CAP, register_timeout=60.0,
                       keys=security.server_keys(folder))
    assert gang_run.endpoint.startswith("tcp://127.0.0.1:") and gang_run.security == "curve"
    tag = uuid.uuid4().hex
    try:
        with local_members(gang_run.endpoint, 4, folder, env={"MGST_TEST_GANG_RUN": tag}) as members:
            result = gang_run.run()
        assert all(p.returncode == 0 for p in members)  # every one left on the mapper's bye
    finally:
        gang_run.close()
        left = _jobs_left(tag)
        for p in left:
            p.kill()
    assert not left, f"{len(left)} processes of the run left behind: {[p.status() for p in left]}"
    simulated = run(s, heuristic, TRIAL, SEED, iterations=ITERATIONS)
    assert result.iterations == ITERATIONS and result.makespan is not None
    assert abs(result.makespan - simulated.makespan) <= 0.15 * simulated.makespan
    assert result.drops == result.refused_hellos == result.refused_keys == 0
    assert 0 < result.most_moving <= 1  # n_com = 1: one transfer carries bytes at a time
    assert result.bytes_sent >= result.transfers * 512  # every transfer of at least one slot, in real bytes
    assert result.transfers > 2 * ITERATIONS  # programs and data, several times over with the chains' DOWNs
    assert G.MAX_CHUNK >= 512


def test_the_documented_gang_policy_runs_unchanged_on_real_members_in_plain_mode(capfd, caplog):
    """docs/policies.md's FastestUp, written once: on the testbed as in simulation, on the same chains; --insecure,
    which both sides log as a warning."""
    from test_docs_gang_policy import example  # noqa: PLC0415

    from mgst.availability.markov3 import Markov3Group, Markov3Process  # noqa: PLC0415
    from mgst.core.iterations import Iterations  # noqa: PLC0415
    from mgst.sim.iterations import run_iterations  # noqa: PLC0415

    doc = example()
    chain = ((0.95, 0.03, 0.02), (0.30, 0.65, 0.05), (0.20, 0.00, 0.80))

    def app() -> Iterations:
        return Iterations(work=[3.0, 1.0, 2.0], tasks=2, iterations=2, t_prog=5.0, t_data=1.0, n_com=1,
                          policy=doc.FastestUp())

    simulated = run_iterations(app(), [Markov3Process(Markov3Group(chain, 1.0), 1.0, SEED, TRIAL, q)
                                       for q in range(3)], proactive=False)
    gang_run = GangRun(app(), [markov3_form(chain, SEED)] * 3, UNIT, 512, cap=CAP, insecure=True)
    try:
        with local_members(gang_run.endpoint, 3, None):
            result = gang_run.run()
    finally:
        gang_run.close()
    assert gang_run.security == "none (--insecure)"
    assert any("WITHOUT authentication" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert capfd.readouterr().err.count("WARNING --insecure: no CURVE") == 3  # each member's own
    assert result.makespan is not None and simulated.makespan is not None
    assert abs(result.makespan - simulated.makespan) <= 0.15 * simulated.makespan
