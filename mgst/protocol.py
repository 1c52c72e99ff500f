"""The wire format between mapper and pullers: message types, msgpack encoding, validation.

Nothing else in mgst knows bytes. Every frame is one msgpack map with a type
key ``"t"``; :func:`decode` checks the type and every field (names, types,
ranges) and raises :class:`ProtocolError` for anything else, so a receiver can
count, log and drop a bad frame and go on.

Transport: the mapper binds a ZeroMQ ROUTER, each puller connects a DEALER; a
message is a single frame (the ROUTER adds and strips the routing frame).
Times on the wire are floats, in seconds of the sender's clock (time.time()),
except where a field says model time.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import msgpack

# Bumped on any incompatible change; a hello with another version is refused.
PROTOCOL_VERSION = 1

# Larger frames are refused before decoding: a job message is ~200 bytes; a
# command line with its environment can be a few kB.
MAX_FRAME = 64 * 1024
MAX_STR = 4096


class ProtocolError(ValueError):
    """A frame that is not a valid message; ``reason`` says why, in a few words."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


# ---------------------------------------------------------------- puller -> mapper


class Hello(NamedTuple):
    """A puller registers (or re-registers after a failure or restart)."""

    version: int
    machine: str
    incarnation: int  # random per puller start; a new one means the old run is gone
    executors: tuple[str, ...]  # what it can run: "emulate", "spin", "command"
    speed: float  # calibrated spin-kernel iterations per second (0 if not calibrated)
    clock: float


class Ready(NamedTuple):
    """The puller is idle and asks for work; ``share`` is its current CPU share a_j."""

    share: float
    clock: float


class Started(NamedTuple):
    replica: int
    received: float  # puller clock when the job message arrived
    started: float  # puller clock when the job started


class Done(NamedTuple):
    replica: int
    received: float
    started: float
    finished: float
    achieved_share: float  # CPU share the job actually got (measured; the target if emulated)
    ready: bool  # and asks for the next job (saves a Ready message)


class Failed(NamedTuple):
    """The job ended without a result while the puller lives (crash, bad command)."""

    replica: int
    reason: str


class Heartbeat(NamedTuple):
    """Both ways. With ``echo`` (the other side's last heartbeat ``clock``, -1 if none yet)
    and ``echo_received`` (when that one arrived, on the sender's clock), the receiver
    has NTP's four timestamps for its clock-offset estimate."""

    seq: int
    clock: float
    echo: float
    echo_received: float


class Bye(NamedTuple):
    """Both ways: the sender leaves (puller shutting down; mapper done, pullers may exit)."""

    reason: str


# ---------------------------------------------------------------- mapper -> puller


class Welcome(NamedTuple):
    """The mapper's answer to Hello: who the puller is and how to behave."""

    version: int
    machine: int  # index of the machine in the experiment
    time_unit: float  # wall seconds per model time unit
    heartbeat_interval: float  # seconds
    share: float  # the CPU share a_j the experiment imposes
    executor: str  # which executor to use
    failures: tuple[float, float, int] | None  # (mean_up, mean_down, seed) in model time, or none


class JobMsg(NamedTuple):
    """Run one replica. ``work`` is X / mu'_ij: model time units at full speed."""

    job: int
    replica: int
    job_class: int
    size: float
    work: float
    progress: float  # fraction already done (checkpoint)
    command: tuple[str, ...]  # argv for the command executor; empty otherwise


class CancelMsg(NamedTuple):
    replica: int


class Refused(NamedTuple):
    """The mapper will not take this puller (wrong version, unknown machine name, ...)."""

    reason: str


Message = Hello | Ready | Started | Done | Failed | Heartbeat | Bye | Welcome | JobMsg | CancelMsg | Refused

# ---------------------------------------------------------------- field checks


def _num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _nonneg(v: Any) -> bool:
    return _num(v) and v >= 0


def _pos(v: Any) -> bool:
    return _num(v) and v > 0


def _share(v: Any) -> bool:
    return _num(v) and 0 <= v <= 1


def _given_share(v: Any) -> bool:
    """A CPU share a machine offers: a machine with none to give does not ask for work."""
    return _num(v) and 0 < v <= 1


def _frac(v: Any) -> bool:
    return _num(v) and 0 <= v <= 1


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63


def _nat(v: Any) -> bool:
    return _int(v) and v >= 0


def _str(v: Any) -> bool:
    return isinstance(v, str) and 0 < len(v) <= MAX_STR


def _text(v: Any) -> bool:
    return isinstance(v, str) and len(v) <= MAX_STR


def _bool(v: Any) -> bool:
    return isinstance(v, bool)


def _strs(v: Any) -> bool:
    return isinstance(v, list | tuple) and len(v) <= 256 and all(_text(x) for x in v)


def _failures(v: Any) -> bool:
    return v is None or (
        isinstance(v, list | tuple) and len(v) == 3 and _pos(v[0]) and _pos(v[1]) and _nat(v[2])
    )


# wire name -> (class, {field: check}); field order follows the class.
Check = Callable[[Any], bool]
_SCHEMA: dict[str, tuple[type, dict[str, Check]]] = {
    "hello": (Hello, {"version": _int, "machine": _str, "incarnation": _int, "executors": _strs,
                      "speed": _nonneg, "clock": _num}),
    "ready": (Ready, {"share": _given_share, "clock": _num}),
    "started": (Started, {"replica": _nat, "received": _num, "started": _num}),
    "done": (Done, {"replica": _nat, "received": _num, "started": _num, "finished": _num,
                    "achieved_share": _share, "ready": _bool}),
    "failed": (Failed, {"replica": _nat, "reason": _text}),
    "hb": (Heartbeat, {"seq": _nat, "clock": _num, "echo": _num, "echo_received": _num}),
    "bye": (Bye, {"reason": _text}),
    "welcome": (Welcome, {"version": _int, "machine": _nat, "time_unit": _pos, "heartbeat_interval": _pos,
                          "share": _given_share, "executor": _str, "failures": _failures}),
    "job": (JobMsg, {"job": _nat, "replica": _nat, "job_class": _nat, "size": _nonneg, "work": _nonneg,
                     "progress": _frac, "command": _strs}),
    "cancel": (CancelMsg, {"replica": _nat}),
    "refused": (Refused, {"reason": _text}),
}
_WIRE_NAME = {cls: name for name, (cls, _) in _SCHEMA.items()}
_TUPLE_FIELDS = {"executors", "command", "failures"}

FROM_PULLER = frozenset({Hello, Ready, Started, Done, Failed, Heartbeat, Bye})
FROM_MAPPER = frozenset({Welcome, JobMsg, CancelMsg, Heartbeat, Bye, Refused})


def encode(msg: Message) -> bytes:
    """One frame for ``msg``."""
    body = msg._asdict()
    body["t"] = _WIRE_NAME[type(msg)]
    return msgpack.packb(body, use_bin_type=True)


def decode(frame: bytes) -> Message:
    """The message in ``frame``; ProtocolError if it is not exactly a valid one."""
    if not isinstance(frame, bytes | bytearray | memoryview):
        raise ProtocolError("not bytes")
    if len(frame) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(frame)} bytes exceeds {MAX_FRAME}")
    try:
        body = msgpack.unpackb(
            frame, raw=False, strict_map_key=True, max_str_len=MAX_STR, max_bin_len=0,
            max_array_len=256, max_map_len=32, max_ext_len=0,
        )
    except Exception as e:  # msgpack raises several types for bad input
        raise ProtocolError(f"not msgpack ({type(e).__name__})") from None
    if not isinstance(body, dict):
        raise ProtocolError(f"not a map but {type(body).__name__}")
    kind = body.pop("t", None)
    if not isinstance(kind, str):
        raise ProtocolError("no message type")
    entry = _SCHEMA.get(kind)
    if entry is None:
        raise ProtocolError(f"unknown message type {kind[:40]!r}")
    cls, fields = entry
    if body.keys() != fields.keys():
        missing = sorted(fields.keys() - body.keys())
        extra = sorted(map(str, body.keys() - fields.keys()))
        raise ProtocolError(f"{kind}: " + "; ".join(
            p for p in (f"missing {', '.join(missing)}" if missing else "",
                        f"unknown {', '.join(extra)[:80]}" if extra else "") if p))
    for name, check in fields.items():
        if not check(body[name]):
            raise ProtocolError(f"{kind}.{name}: bad value {str(body[name])[:40]!r}")
    for name in _TUPLE_FIELDS & fields.keys():
        if body[name] is not None:
            body[name] = tuple(body[name])
    return cls(**body)
