"""mgst.wire.gang_protocol: every message round-trips; what is out of bounds or goes the wrong way is refused."""

from __future__ import annotations

import msgpack
import pytest

from mgst.wire import gang_protocol as G
from mgst.wire.protocol import Drop, ProtocolError

FORM = ("markov3", 1.0, 0.0, 0.9, 0.05, 0.05, 0.1, 0.85, 0.05, 0.1, 0.1, 0.8, 7)


@pytest.mark.parametrize("msg", [
    G.GangHello(G.GANG_PROTOCOL_VERSION, 3, 12.5), G.StateChanged(1, 40), G.Received(9), G.Finished(4),
    G.GangBye("over"),
])
def test_member_messages_round_trip(msg):
    assert G.decode(G.encode(msg), G.FROM_MEMBER) == msg


@pytest.mark.parametrize("msg", [
    G.GangWelcome(G.GANG_PROTOCOL_VERSION, 3, 0.2, 1e9, FORM), G.Chunk(5, G.PROGRAM, 0, 10, b"0123456789"),
    G.CancelTransfer(5), G.Release("left"), G.Compute(2, 1.5), G.Hold(2, False), G.Stop(2), G.GangBye("over"),
])
def test_mapper_messages_round_trip(msg):
    assert G.decode(G.encode(msg), G.FROM_MAPPER) == msg


def _raw(**body) -> bytes:
    return msgpack.packb(body, use_bin_type=True)


@pytest.mark.parametrize("frame, reason", [
    (G.encode(G.Compute(2, 1.5)), Drop.DIRECTION),  # a mapper's order sent by a member
    (_raw(t="g_state", state=3, slot=1), Drop.BAD_VALUE),  # no such availability state
    (_raw(t="g_state", state=True, slot=1), Drop.BAD_VALUE),
    (_raw(t="g_received", transfer=-1), Drop.BAD_VALUE),
    (_raw(t="g_hello", version=1, worker=10**6, clock=0.0), Drop.BAD_VALUE),  # past MAX_WORKERS
    (_raw(t="g_finished", gang=1, extra=2), Drop.BAD_FIELDS),
    (b"\x00" * (G.MAX_FRAME + 1), Drop.TOO_LARGE),
    (b"\xc1", Drop.NOT_MSGPACK),
])
def test_a_member_frame_out_of_bounds_is_refused(frame, reason):
    with pytest.raises(ProtocolError) as e:
        G.decode(frame, G.FROM_MEMBER)
    assert e.value.reason == reason


@pytest.mark.parametrize("body", [
    dict(t="g_chunk", transfer=1, kind="program", offset=8, total=10, payload=b"abc"),  # past its total
    dict(t="g_chunk", transfer=1, kind="program", offset=0, total=G.MAX_TRANSFER + 1, payload=b"a"),
    dict(t="g_chunk", transfer=1, kind="binary", offset=0, total=10, payload=b"a"),
    dict(t="g_chunk", transfer=1, kind="data", offset=0, total=10, payload=b""),
    dict(t="g_compute", gang=1, seconds=0.0),
    dict(t="g_compute", gang=1, seconds=float("inf")),
    dict(t="g_compute", gang=1, seconds=G.MAX_COMPUTE * 2),
    dict(t="g_welcome", version=1, worker=0, time_unit=0.0, start=0.0, failures=list(FORM)),
    dict(t="g_welcome", version=1, worker=0, time_unit=0.2, start=0.0, failures=["exponential", 1.0, 1.0, 1]),
    dict(t="g_welcome", version=1, worker=0, time_unit=0.2, start=0.0, failures=[*FORM[:3], 0.9, 0.9, 0.9,
                                                                                  *FORM[6:]]),
])
def test_a_mapper_frame_out_of_bounds_is_refused(body):
    with pytest.raises(ProtocolError):
        G.decode(_raw(**body), G.FROM_MAPPER)


def test_a_chunk_larger_than_the_bound_is_refused_before_it_is_read():
    frame = _raw(t="g_chunk", transfer=1, kind="data", offset=0, total=G.MAX_CHUNK + 1,
                 payload=b"x" * (G.MAX_CHUNK + 1))
    with pytest.raises(ProtocolError):
        G.decode(frame, G.FROM_MAPPER)
