"""A gang run's wire is CURVE as the job protocol's is: only the members' keys are admitted, worker q only with
worker q's key, and a run without keys stays on loopback.

Every test binds loopback on a free port, bounds its waits (WAIT, and the run's registration time-out) and reaps
what it started: member processes through mgst.testbed.gang_local, sockets and contexts in ``finally``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time

import pytest
import zmq
from iteration_fakes import Spread

from mgst.core.iterations import Iterations
from mgst.testbed.casanova_beside import markov3_form
from mgst.testbed.gang_local import local_members
from mgst.testbed.gang_run import GangRun, security_mode
from mgst.wire import gang_protocol as G
from mgst.wire import security

MATRIX = ((0.9, 0.05, 0.05), (0.2, 0.7, 0.1), (0.3, 0.1, 0.6))
WAIT = 20.0  # the longest any event of these tests is awaited (s)
REGISTER = 6.0  # the registration time-out of a run that cannot start (s): the members start in about 1 s


def _app(workers: int) -> Iterations:
    return Iterations([1.0] * workers, 1, 1, 1.0, 1.0, 1, Spread(1))


def _keys(folder, workers: int):
    security.create_keys(folder, [G.member_name(q) for q in range(workers)])
    return folder


def _dealer(ctx: zmq.Context, endpoint: str, folder, name: str, routing_id: bytes | None = None) -> zmq.Socket:
    """A member's socket with the pair pullers/NAME.key_secret of ``folder``, trusting its mapper.key; with
    ``routing_id``, under that id of its choosing, connecting once (a connection refused because the id is still
    taken must not come back later, and deliver)."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if routing_id is not None:
        sock.setsockopt(zmq.ROUTING_ID, routing_id)
        sock.setsockopt(zmq.RECONNECT_IVL, -1)
    security.secure_client(sock, security.client_keys(folder / security.PULLERS / f"{name}.key_secret",
                                                      folder / f"{security.MAPPER}.key"))
    sock.connect(endpoint)
    return sock


def _hello(sock: zmq.Socket, worker: int) -> None:
    sock.send(G.encode(G.GangHello(G.GANG_PROTOCOL_VERSION, worker, time.time())))


def _heard(sock: zmq.Socket):
    assert sock.poll(int(WAIT * 1000)), "nothing came"
    return G.decode(sock.recv(), G.FROM_MAPPER)


def test_a_member_that_claims_another_members_identity_is_dropped(tmp_path):
    """Member 1's key says hello as worker 0 first: it is refused and counted, and worker 0 is the member that holds
    worker 0's key, as ZeroMQ authenticated it (the frame's User-Id)."""
    folder = _keys(tmp_path / "keys", 2)
    ctx = zmq.Context()
    gang_run = GangRun(_app(2), [markov3_form(MATRIX, 1)] * 2, 0.1, 64, cap=10, context=ctx,
                       register_timeout=WAIT, keys=security.server_keys(folder))
    socks = []
    registering = threading.Thread(target=gang_run._register)
    try:
        impostor = _dealer(ctx, gang_run.endpoint, folder, G.member_name(1))
        socks.append(impostor)
        registering.start()
        _hello(impostor, 0)
        bye = _heard(impostor)
        assert isinstance(bye, G.GangBye) and "the key of worker 0 is not this one" in bye.reason
        members = [_dealer(ctx, gang_run.endpoint, folder, G.member_name(q)) for q in range(2)]
        socks += members
        for q, sock in enumerate(members):
            _hello(sock, q)
        registering.join(WAIT)
        assert not registering.is_alive()
        assert None not in gang_run.identities
        assert gang_run.result.refused_hellos == gang_run.result.drops == 1
        gang_run._send(0, G.Release("worker 0's"))  # reaches the member with worker 0's key, not the impostor
        assert _heard(members[0]) == G.Release("worker 0's")
        assert not impostor.poll(200)
    finally:
        registering.join(WAIT)
        for sock in socks:
            sock.close(0)
        gang_run.close()
        ctx.term()


@pytest.mark.parametrize("wrong", ["a key the run does not admit", "another mapper's key"])
def test_a_member_the_run_cannot_admit_is_refused_and_the_run_fails_saying_why(tmp_path, capfd, wrong):
    """A gang run needs every worker (each plays its own chain of the experiment): it does not start without one,
    and says which and why; the refused member ends at once, saying what is probably wrong, and the member that did
    register is told the run will not start."""
    folder = _keys(tmp_path / "keys", 2)
    other = _keys(tmp_path / "other", 2)
    if wrong == "a key the run does not admit":  # member 1 holds a pair of another folder's
        pair = f"{G.member_name(1)}.key_secret"
        shutil.copyfile(other / security.PULLERS / pair, folder / security.PULLERS / pair)
        mapper_key = folder / f"{security.MAPPER}.key"
    else:  # every member trusts another mapper's public key
        mapper_key = other / f"{security.MAPPER}.key"
    members_folder = tmp_path / "members"
    shutil.copytree(folder, members_folder)
    shutil.copyfile(mapper_key, members_folder / f"{security.MAPPER}.key")
    gang_run = GangRun(_app(2), [markov3_form(MATRIX, 1)] * 2, 0.1, 64, cap=10, register_timeout=REGISTER,
                       keys=security.server_keys(folder))
    began = time.monotonic()
    try:
        with local_members(gang_run.endpoint, 2, members_folder) as procs:
            with pytest.raises(TimeoutError) as e:
                gang_run.run()
            codes = [p.wait(WAIT) for p in procs]
    finally:
        gang_run.close()
    message = str(e.value)
    assert "\n" not in message
    err = capfd.readouterr().err
    if wrong == "a key the run does not admit":
        assert "1 gang member(s) never said hello" in message and "workers [1]" in message
        assert gang_run.result.refused_keys >= 1 and "CURVE handshake(s) refused" in message
        assert codes == [2, 2]  # member 0: the mapper's word that the run will not start
        assert "gang member 1: ERROR the mapper refused this member: the mapper does not admit" in err
        assert "gang member 0: ERROR the mapper said bye before any welcome: 'the run did not start: " in err
    else:
        assert "2 gang member(s) never said hello" in message and gang_run.result.refused_keys == 0
        assert "handshake(s) failed before any key was checked: a member with another mapper's key" in message
        assert codes == [2, 2]
        assert "the server there does not hold the secret key of the mapper key this puller trusts" in err
    assert time.monotonic() - began < REGISTER + WAIT


def test_an_insecure_gang_run_off_loopback_is_refused_in_one_line_and_a_keyed_one_is_not(tmp_path):
    app = _app(1)
    for insecure in (True, False):
        with pytest.raises(security.SecurityError) as e:
            GangRun(app, [markov3_form(MATRIX, 1)], 0.1, 64, bind="tcp://0.0.0.0:*", insecure=insecure)
        assert "\n" not in str(e.value) and "tcp://0.0.0.0:*" in str(e.value) and "loopback only" in str(e.value)
    keys = security.server_keys(_keys(tmp_path / "keys", 1))
    assert security_mode("tcp://0.0.0.0:*", keys, False) == "curve"  # (decided without binding anything off loopback)
    assert security_mode("tcp://127.0.0.1:*", None, True) == "none (--insecure)"
    with pytest.raises(ValueError, match="contradict"):
        security_mode("tcp://127.0.0.1:*", keys, True)


def test_a_keyed_gang_run_needs_a_key_for_every_member(tmp_path):
    folder = tmp_path / "keys"
    security.create_keys(folder, [G.member_name(0)])
    with pytest.raises(security.KeyFileError, match="member-1.key: no such key"):
        GangRun(_app(2), [markov3_form(MATRIX, 1)] * 2, 0.1, 64, keys=security.server_keys(folder))


def test_the_driver_keys_its_members_in_a_private_folder_and_never_on_a_command_line(monkeypatch):
    """run_beside (experiments/casanova/run_testbed.py's run) makes one key per member in a new folder of mode 0700,
    names that folder on the members' command lines and nothing secret, and removes it after the run."""
    from mgst.papers.casanova.instance import scenario  # noqa: PLC0415
    from mgst.testbed import casanova_beside  # noqa: PLC0415

    seen = {}
    real = casanova_beside.local_members

    @contextlib.contextmanager
    def watched(endpoint, workers, keys, env=None):
        with real(endpoint, workers, keys, env) as procs:
            seen["folder"], seen["mode"] = keys, keys.stat().st_mode & 0o777
            texts = [(folder / name).read_text() for folder in (keys, keys / security.PULLERS, keys / "authorized")
                     for name in os.listdir(folder) if name.endswith((".key", ".key_secret"))]
            seen["keys"] = {line.split('"')[1] for text in texts for line in text.splitlines() if "-key = " in line}
            # what each member's exec was given, which is what other users see (read from /proc right after the
            # start, a member still starting its program showed an empty command line on a loaded machine)
            seen["argv"] = [" ".join(map(str, p.args)) for p in procs]
            yield procs

    monkeypatch.setattr(casanova_beside, "local_members", watched)
    b = casanova_beside.run_beside(scenario(2, 1, 1, 1, 0, p=2), "IE", 1, 0.1, 256, iterations=1, cap=100)
    assert b.testbed.makespan is not None and b.testbed.refused_hellos == b.testbed.refused_keys == 0
    assert seen["mode"] == 0o700 and not seen["folder"].exists()
    assert len(seen["keys"]) == 3 * 2  # the public and secret keys of the mapper and of each member
    for argv in seen["argv"]:
        assert f"--keys {seen['folder']}" in argv and not any(key in argv for key in seen["keys"])


def test_a_member_s_routing_id_taken_by_another_key_once_its_connection_drops_is_not_that_member(tmp_path):
    """Worker 0's connection drops; member 1's key (admitted, and registered as worker 1) connects again under
    worker 0's routing id, which libzmq hands it once the old connection is gone (a peer may choose its id). Its
    state changes come with worker 1's key: dropped as WRONG_KEY, not worker 0's news (they were, before)."""
    folder = _keys(tmp_path / "keys", 2)
    ctx = zmq.Context()
    gang_run = GangRun(_app(2), [markov3_form(MATRIX, 1)] * 2, 0.1, 64, cap=10, context=ctx,
                       register_timeout=WAIT, keys=security.server_keys(folder))
    zero = b"\x01worker-zero"
    socks = []
    registering = threading.Thread(target=gang_run._register)
    try:
        victim = _dealer(ctx, gang_run.endpoint, folder, G.member_name(0), zero)
        member1 = _dealer(ctx, gang_run.endpoint, folder, G.member_name(1))
        socks += [victim, member1]
        registering.start()
        _hello(victim, 0)
        _hello(member1, 1)
        registering.join(WAIT)
        assert not registering.is_alive() and gang_run.identities[0] == zero
        victim.close(0)
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:  # libzmq refuses a second connection under an id in use: retry
            impostor = _dealer(ctx, gang_run.endpoint, folder, G.member_name(1), zero)
            socks.append(impostor)
            impostor.send(G.encode(G.StateChanged(2, 1)))  # "worker 0 is DOWN at slot 1"
            if gang_run.socket.poll(500):
                break
        else:
            pytest.fail("libzmq never gave the impostor the routing id")
        drops = gang_run.result.drops
        gang_run._receive_all()
        assert gang_run.changes == [] and gang_run.result.drops == drops + 1
        assert gang_run.drop_log.counts[G.Drop.WRONG_KEY] == 1
    finally:
        registering.join(WAIT)
        for sock in socks:
            sock.close(0)
        gang_run.close()
        ctx.term()
