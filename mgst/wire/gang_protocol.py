"""The wire format of a gang run (tightly-coupled iterations on the testbed): messages, msgpack, validation.

A gang run's mapper (mgst.testbed.gang_run) and its gang members (puller.gang_member) speak this protocol, not
the job protocol of mgst.wire.protocol: a member is told to receive bytes, to compute its part of an iteration
for a number of wall seconds, to hold or go on, to stop; it says when its availability changes, when a
transfer's last byte arrived and when its part ended. Every frame is one msgpack map with a type key ``"t"``;
:func:`decode` checks the type, every field's type and range, and the frame's size, and raises
:class:`~mgst.wire.frames.ProtocolError` for anything else, so both sides count, log and drop a bad frame.
The envelope (size, msgpack, type, fields) is read as the job protocol reads its own (mgst.wire.frames).
Transport as the job protocol's: the mapper binds a ROUTER, each member connects a DEALER, one frame a message.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import msgpack

from mgst.availability import registry as availability
from mgst.wire.frames import Bounds, Drop, ProtocolError, Schema, check_fields, open_frame, total_check

GANG_PROTOCOL_VERSION = 1
# A transfer's payload travels in chunks of at most this many bytes (a frame stays under MAX_FRAME).
MAX_CHUNK = 32 * 1024
MAX_FRAME = MAX_CHUNK + 1024
# The largest program or data message a member accepts (bytes): 64 MiB, far above a scaled experiment's
# (docs/reproduction-casanova.md: 4 KiB a slot, so T_prog = 5 w_min slots is 200 KiB at w_min = 10).
MAX_TRANSFER = 64 * 1024 * 1024
# The longest part of an iteration a member computes (wall seconds): a day.
MAX_COMPUTE = 86_400.0
# The longest slot (wall seconds) a member accepts; the shortest is adjuster.failures.MIN_PERIOD's business.
MAX_TIME_UNIT = 3_600.0
MAX_WORKERS = 10_000
MAX_TEXT = 400
# Frames either side reads in one pass before it looks at its clock again: a peer sending without pause delays a
# slot boundary by at most one pass (a few ms of decoding), never holds it (as the main mapper's RECEIVE_BATCH).
RECEIVE_PER_PASS = 256
PROGRAM, DATA = "program", "data"
# A member's availability states, as mgst.model.Availability numbers them.
STATES = (0, 1, 2)
# A keyed run's worker q holds the key named member_name(q) (mgst.wire.security's folder layout:
# pullers/member-q.key_secret on the member, authorized/member-q.key on the mapper).
MEMBER_KEY_PREFIX = "member-"


def member_name(worker: int) -> str:
    """The name of worker ``worker``'s key in a key folder."""
    return f"{MEMBER_KEY_PREFIX}{worker}"


# ---------------------------------------------------------------- member -> mapper


class GangHello(NamedTuple):
    """A member registers as worker ``worker`` of the experiment."""

    version: int
    worker: int
    clock: float


class StateChanged(NamedTuple):
    """The member's availability became ``state`` (UP 0, RECLAIMED 1, DOWN 2) at ``slot``, its chain's slot count."""

    state: int
    slot: int


class Received(NamedTuple):
    """Every byte of transfer ``transfer`` arrived (a program is kept until DOWN, data until released)."""

    transfer: int


class Finished(NamedTuple):
    """The member's part of gang ``gang`` ended (its job exited after its seconds of computation)."""

    gang: int


# ---------------------------------------------------------------- mapper -> member


class GangWelcome(NamedTuple):
    """Who the member is, the run's slot length and start (wall clock: the chain's slot 0 begins then), and
    its availability law (mgst.availability's wire form: the markov3 chain the simulation beside the run plays)."""

    version: int
    worker: int
    time_unit: float
    start: float
    failures: tuple


class Chunk(NamedTuple):
    """Bytes ``offset``.. of transfer ``transfer`` (``kind`` program or data) of ``total`` bytes."""

    transfer: int
    kind: str
    offset: int
    total: int
    payload: bytes


class CancelTransfer(NamedTuple):
    """Transfer ``transfer`` is given up (its worker left the configuration): drop what arrived of it."""

    transfer: int


class Release(NamedTuple):
    """The member left the configuration: drop its data (it keeps its program)."""

    reason: str


class Compute(NamedTuple):
    """Run this member's part of gang ``gang``: ``seconds`` wall seconds of lock-step computation."""

    gang: int
    seconds: float


class Hold(NamedTuple):
    """Gang ``gang`` stalls (``running`` false: a member is not UP) or goes on (true)."""

    gang: int
    running: bool


class Stop(NamedTuple):
    """Gang ``gang`` is lost or replaced: kill this member's part of it."""

    gang: int


class GangBye(NamedTuple):
    """Both ways: the sender leaves (the run is over; a member shutting down)."""

    reason: str


Message = (GangHello | StateChanged | Received | Finished | GangWelcome | Chunk | CancelTransfer | Release
           | Compute | Hold | Stop | GangBye)


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _nat(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63


def _worker(v: Any) -> bool:
    return _nat(v) and v < MAX_WORKERS


def _state(v: Any) -> bool:
    return _nat(v) and v in STATES


def _size(v: Any) -> bool:
    return _nat(v) and v <= MAX_TRANSFER


def _kind(v: Any) -> bool:
    return v in (PROGRAM, DATA)


def _payload(v: Any) -> bool:
    return isinstance(v, bytes) and 0 < len(v) <= MAX_CHUNK


def _seconds(v: Any) -> bool:
    return _num(v) and 0 < v <= MAX_COMPUTE


def _time_unit(v: Any) -> bool:
    return _num(v) and 0 < v <= MAX_TIME_UNIT


def _text(v: Any) -> bool:
    return isinstance(v, str) and len(v) <= MAX_TEXT


def _bool(v: Any) -> bool:
    return isinstance(v, bool)


def _markov3(v: Any) -> bool:
    """A markov3 wire form (the only law a gang run plays); ProtocolError saying what is wrong."""
    if not (isinstance(v, list | tuple) and v and v[0] == "markov3"):
        raise ProtocolError(Drop.BAD_VALUE, "failures: a gang run's law is markov3")
    problem = availability.wire_problem(tuple(v))
    if problem is not None:
        raise ProtocolError(Drop.BAD_VALUE, f"failures: {problem}"[:MAX_TEXT])
    return True


_SCHEMA: Schema = {
    "g_hello": (GangHello, {"version": _nat, "worker": _worker, "clock": _num}),
    "g_state": (StateChanged, {"state": _state, "slot": _nat}),
    "g_received": (Received, {"transfer": _nat}),
    "g_finished": (Finished, {"gang": _nat}),
    "g_welcome": (GangWelcome, {"version": _nat, "worker": _worker, "time_unit": _time_unit, "start": _num,
                                "failures": _markov3}),
    "g_chunk": (Chunk, {"transfer": _nat, "kind": _kind, "offset": _size, "total": _size, "payload": _payload}),
    "g_cancel": (CancelTransfer, {"transfer": _nat}),
    "g_release": (Release, {"reason": _text}),
    "g_compute": (Compute, {"gang": _nat, "seconds": _seconds}),
    "g_hold": (Hold, {"gang": _nat, "running": _bool}),
    "g_stop": (Stop, {"gang": _nat}),
    "g_bye": (GangBye, {"reason": _text}),
}
_WIRE_NAME = {cls: name for name, (cls, _) in _SCHEMA.items()}
FROM_MEMBER = frozenset({GangHello, StateChanged, Received, Finished, GangBye})
FROM_MAPPER = frozenset({GangWelcome, Chunk, CancelTransfer, Release, Compute, Hold, Stop, GangBye})
_BOUNDS = Bounds(frame=MAX_FRAME, string=MAX_TEXT, binary=MAX_CHUNK, array=16, map=8)


def encode(msg: Message) -> bytes:
    """One frame for ``msg``."""
    body = msg._asdict()
    body["t"] = _WIRE_NAME[type(msg)]
    return msgpack.packb(body, use_bin_type=True)


def decode(frame: bytes, allowed: frozenset[type]) -> Message:
    """The message in ``frame``, of a type in ``allowed`` (the direction); ProtocolError if it is not exactly a
    valid one (and never anything else, as :func:`mgst.wire.protocol.decode`)."""
    with total_check():
        kind, cls, fields, body = open_frame(frame, _SCHEMA, _BOUNDS)
        if cls not in allowed:
            raise ProtocolError(Drop.DIRECTION, kind)
        check_fields(kind, fields, body)
        if cls is GangWelcome:
            body["failures"] = tuple(body["failures"])
        if cls is Chunk and body["offset"] + len(body["payload"]) > body["total"]:
            raise ProtocolError(Drop.BAD_VALUE, f"{kind}: bytes past the transfer's total")
        return cls(**body)


__all__ = [
    "DATA", "FROM_MAPPER", "FROM_MEMBER", "GANG_PROTOCOL_VERSION", "MAX_CHUNK", "MAX_COMPUTE", "MAX_FRAME",
    "MAX_TRANSFER", "PROGRAM", "CancelTransfer", "Chunk", "Compute", "Finished", "GangBye", "GangHello",
    "GangWelcome", "Hold", "Received", "Release", "StateChanged", "Stop", "decode", "encode", "member_name",
]
