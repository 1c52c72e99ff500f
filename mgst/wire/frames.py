"""A frame's envelope as both wire protocols read it: one bounded msgpack map, a known type, exactly its fields.

The job protocol (mgst.wire.protocol) and the gang protocol (mgst.wire.gang_protocol) frame every message the
same way: one msgpack map whose key ``"t"`` names the type, and whose other keys are exactly that type's fields,
each with a check of its value. :func:`open_frame` reads the envelope (bytes, size, msgpack within the
protocol's bounds, a map, a type of the protocol's schema) and :func:`check_fields` the fields; each raises
:class:`ProtocolError`, whose ``reason`` is one of :class:`Drop`, for anything else.
"""

from __future__ import annotations

import contextlib
import reprlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import msgpack
import zmq


class Drop:
    """Why a received message was dropped: the fixed set of keys of the drop counters.

    Counters are keyed by these and nothing else, so that a peer cannot grow
    them with text of its choosing; the offending values go to the log only.
    """

    NOT_BYTES = "not bytes"
    TOO_LARGE = "frame too large"
    NOT_MSGPACK = "not msgpack"
    NOT_A_MAP = "not a map"
    NO_TYPE = "no message type"
    UNKNOWN_TYPE = "unknown message type"
    BAD_FIELDS = "missing or unknown fields"
    BAD_VALUE = "bad field value"
    FRAMES = "wrong frame count"
    DIRECTION = "wrong direction"
    UNREGISTERED = "unregistered sender"
    # A registered machine's routing id, on a connection authenticated by another key than the one it registered
    # with (a peer that chose the id of a connection that dropped): never its machine's.
    WRONG_KEY = "key not the sender's"
    # A registered machine's former connection: what it sent before reconnecting, read after its new hello.
    SUPERSEDED = "superseded connection"
    VERSION = "protocol version"
    UNKNOWN_MACHINE = "unknown machine name"
    EXECUTOR = "missing executor"
    SLOTS = "too few slots"
    NAME_TAKEN = "machine name taken"
    RETIRED = "replaced incarnation"
    NOT_ITS_REPLICA = "replica not held by sender"
    FINISHED_REPLICA = "replica already finished"
    READY_WHILE_BUSY = "ready while busy"
    HANDLER_ERROR = "handler error"
    HELLO_RATE = "hellos too frequent"
    REBASE_RATE = "re-bases too frequent"  # a mapper's Begins moving a puller's failure law (puller.availability)
    # the gang protocol's (mgst.wire.gang_protocol)
    HELLO_REFUSED = "hello refused"
    OUT_OF_ORDER = "state change out of order"
    NOT_ITS_TRANSFER = "transfer not sent to sender"
    FINISHED_TWICE = "gang part finished twice"
    CHUNK_ORDER = "chunk out of order"
    TOO_MANY_TRANSFERS = "too many transfers at once"
    INPUTS_MISSING = "compute without its program and data"


class ProtocolError(ValueError):
    """A frame that is not a valid message: ``reason`` is one of :class:`Drop`, ``detail`` says more."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


# A field's check returns whether its value is good, or raises ProtocolError itself to say why not.
Check = Callable[[Any], bool]
# wire name -> (class, {field: check}); field order follows the class.
Schema = dict[str, tuple[type, dict[str, Check]]]


@dataclass(frozen=True, slots=True)
class Bounds:
    """What a protocol lets one frame hold: its bytes, then msgpack's limits while it unpacks (a string's and a
    binary's length, an array's and a map's entries)."""

    frame: int
    string: int
    binary: int
    array: int
    map: int


def open_frame(frame: Any, schema: Schema, bounds: Bounds) -> tuple[str, type, dict[str, Check], dict[str, Any]]:
    """The type's wire name, class and field checks, and the fields of the message in ``frame`` (unchecked); a
    ProtocolError if it is not bytes within ``bounds`` holding a map with a type of ``schema``."""
    if not isinstance(frame, bytes | bytearray | memoryview):
        raise ProtocolError(Drop.NOT_BYTES)
    if len(frame) > bounds.frame:
        raise ProtocolError(Drop.TOO_LARGE, f"{len(frame)} bytes, limit {bounds.frame}")
    try:
        body = msgpack.unpackb(frame, raw=False, strict_map_key=True, max_str_len=bounds.string,
                               max_bin_len=bounds.binary, max_array_len=bounds.array, max_map_len=bounds.map,
                               max_ext_len=0)
    except Exception as e:  # msgpack raises several types for bad input
        raise ProtocolError(Drop.NOT_MSGPACK, type(e).__name__) from None
    if not isinstance(body, dict):
        raise ProtocolError(Drop.NOT_A_MAP, type(body).__name__)
    kind = body.pop("t", None)
    if not isinstance(kind, str):
        raise ProtocolError(Drop.NO_TYPE)
    entry = schema.get(kind)
    if entry is None:
        raise ProtocolError(Drop.UNKNOWN_TYPE, repr(kind[:40]))
    cls, fields = entry
    return kind, cls, fields, body


def shown(value: Any, width: int = 40) -> str:
    """A peer's value for a log line: a repr cut short at every level (a value nested a thousand deep, or a
    megabyte long, is a few dozen characters, and its control characters escaped)."""
    return _SHOWN.repr(value)[:width]


_SHOWN: Final = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 3, 40, 40


@contextlib.contextmanager
def total_check() -> Iterator[None]:
    """Turn whatever a message's checks raise, other than ProtocolError, into ProtocolError(BAD_VALUE): a peer's
    frame is dropped and counted, never let through to crash its reader (a check that did not expect a type)."""
    try:
        yield
    except ProtocolError:
        raise
    except Exception as e:  # (RecursionError, TypeError, OverflowError...: the peer's value, not our state)
        raise ProtocolError(Drop.BAD_VALUE, f"a check failed on it: {type(e).__name__}") from None


def one_message(socket: Any, flags: int = 0) -> tuple[bytes, int]:
    """The first frame of the next message on a ZeroMQ ``socket`` (``recv(flags)``, so ``zmq.Again`` as it raises),
    and how many frames the message had: its others are read and discarded (a message of the protocols is one frame;
    ZeroMQ hands over a whole message or none, so they are all there)."""
    frame = socket.recv(flags)
    parts = 1
    while socket.get(zmq.RCVMORE):
        socket.recv(flags)
        parts += 1
    return frame, parts


def check_fields(kind: str, fields: dict[str, Check], body: dict[str, Any]) -> None:
    """ProtocolError unless ``body`` has exactly the ``fields`` of type ``kind``, each passing its check."""
    if body.keys() != fields.keys():
        missing = sorted(fields.keys() - body.keys())
        # repr, not str: a field name is the peer's text, and its control characters must not reach a log raw
        extra = sorted(shown(k) for k in body.keys() - fields.keys())
        raise ProtocolError(Drop.BAD_FIELDS, f"{kind}: " + "; ".join(
            p for p in (f"missing {', '.join(missing)}" if missing else "",
                        f"unknown {', '.join(extra)[:80]}" if extra else "") if p))
    for name, check in fields.items():
        if not check(body[name]):
            raise ProtocolError(Drop.BAD_VALUE, f"{kind}.{name}: {shown(body[name])}")


__all__ = ["Bounds", "Check", "Drop", "ProtocolError", "Schema", "check_fields", "one_message", "open_frame", "shown",
           "total_check"]
