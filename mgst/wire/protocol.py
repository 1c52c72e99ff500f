"""The wire format between mapper and pullers: message types, msgpack encoding, validation.

Nothing else in mgst knows bytes (but the frame's envelope, mgst.wire.frames, which
the gang protocol shares; its Drop and ProtocolError are named from here too).
Every frame is one msgpack map with a type key ``"t"``; :func:`decode` checks
the type and every field (names, types, ranges) and raises :class:`ProtocolError` for anything else, so a receiver can
count, log and drop a bad frame and go on.

Transport: the mapper binds a ZeroMQ ROUTER, each puller connects a DEALER; a
message is a single frame (the ROUTER adds and strips the routing frame).
Times on the wire are floats, in seconds of the sender's clock (time.time()),
except where a field says model time.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import msgpack

from mgst.availability import registry as availability
from mgst.availability.trace import MAX_WIRE_PERIODS
from mgst.wire.frames import Bounds, Drop, ProtocolError, Schema, check_fields, open_frame, total_check

# Bumped on any incompatible change; a hello with another version is refused. 4: three-state availability
# (a puller reports its own CPU share with Share; markov3 and trace laws in Welcome and Begin). 5: the core owns
# progress: a job's pace (JobMsg.pace, then Pace: 0 while it waits on the host for a CPU), and the availability
# state beside the share (Share.state: a RECLAIMED machine asks for no work). 6: a job's hold (JobMsg.hold: a
# returned-result delay). 7: Begin.at, where in the law model time is now (a resumed run re-bases its pullers'
# schedules on its clock).
PROTOCOL_VERSION = 7

# The most slots (replicas at once) a puller may have; bounds every per-slot list on the wire.
MAX_SLOTS = 64

# Larger frames are refused before decoding: a job message is ~200 bytes; a
# command line with its environment can be a few kB.
MAX_FRAME = 64 * 1024
# The longest text field, except a refusal's reason, which may fill a frame: a refusal is the last word a
# puller hears before it exits, so it must be read whatever its length (the puller prints its first 1,000
# characters). The frame's size bounds what decoding one can hold either way.
MAX_STR = 4096
# The longest list a frame may hold: a trace's periods (at most MAX_WIRE_PERIODS, and a little room so that a few
# too many are refused by the trace's check, saying so; every other list is bounded by its own field's check, to
# 256 or fewer). The frame bounds the total either way.
MAX_ARRAY = 1024
assert MAX_WIRE_PERIODS < MAX_ARRAY


# ---------------------------------------------------------------- puller -> mapper


class Hello(NamedTuple):
    """A puller registers (or re-registers after a failure, a restart, or the mapper's restart).

    ``holds`` are the replicas the puller still runs; ``finished`` those that
    finished with a result it will report (again) after the welcome. A resumed
    mapper reconciles its journal with them.
    """

    version: int
    machine: str
    incarnation: int  # random per puller start and per injected failure; a new one means the old work is gone
    executors: tuple[str, ...]  # what it can run: "emulate", "spin", "command"
    speed: float  # calibrated spin-kernel iterations per second (0 if not calibrated)
    clock: float
    slots: int  # replicas it can run at once (the mapper's experiment decides; this is what it offers)
    holds: tuple[int, ...]
    finished: tuple[int, ...]


class Ready(NamedTuple):
    """The puller asks for work for ``slots`` free slots; ``share`` is its current CPU share a_j."""

    share: float
    clock: float
    slots: int


class Started(NamedTuple):
    replica: int
    received: float  # puller clock when the job message arrived
    started: float  # puller clock when the job started


class Computing(NamedTuple):
    """The replica finished staging (its checkpoint or input transfer) and started computing."""

    replica: int
    clock: float


class Progress(NamedTuple):
    """The replica checkpointed: ``progress`` is the fraction of the job's work done."""

    replica: int
    progress: float


class Done(NamedTuple):
    replica: int
    received: float
    started: float
    finished: float
    achieved_share: float  # CPU share the job actually got (measured; the target if emulated)
    ready: bool  # and asks for work for the slot it frees (saves a Ready message)


# Why a replica failed, as Failed.code says it.
FAIL_ERROR = "error"  # the job ran and failed (exit code, crash)
FAIL_START = "start"  # it could not be started
FAIL_REFUSED = "refused"  # the puller's allow-list does not allow its command: nothing ran
FAIL_BUSY = "busy"  # the puller was running another replica
FAIL_CODES = frozenset({FAIL_ERROR, FAIL_START, FAIL_REFUSED, FAIL_BUSY})


class Failed(NamedTuple):
    """The job ended without a result while the puller lives (crash, bad command, refused command)."""

    replica: int
    code: str  # one of FAIL_CODES
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
    # The machine's availability, in model time, or none (always up): mgst.availability's wire form of its
    # kind, e.g. ("exponential", mean_up, mean_down, seed), ("weibull", mttf, shape, repair_mean, repair_sd,
    # seed), ("markov3", slot, reclaimed_share, 9 probabilities, seed), ("trace", [[duration, state, share]...]).
    failures: tuple | None
    slots: int  # replicas it runs at once
    checkpoint_interval: float  # model time between a replica's checkpoints (Progress); 0: none


class JobMsg(NamedTuple):
    """Run one replica. ``work`` is X / mu'_ij: model time units at full speed.

    For the command executor the job names its program by ``command_key`` (a key of
    the puller's allow-list) or by ``command`` (an argv that must equal an allowed
    one exactly); the puller runs nothing else.
    """

    job: int
    replica: int
    job_class: int
    size: float
    work: float
    progress: float  # fraction already done (checkpoint)
    stage: float  # model time of staging (fetching the checkpoint, the input) before it computes; 0: none
    command_key: str  # allow-list key for the command executor; "" otherwise
    command: tuple[str, ...]  # exact argv for the command executor; empty otherwise
    pace: float = 1.0  # share of the machine's speed it is given: 1 on a CPU of its own, 0 waiting for one (Pace)
    # model time the puller holds the result after computing it before reporting it (Done): the returned-result
    # delay of a grid whose results reach the server late (mgst.availability.grids' return_delay); 0: at once
    hold: float = 0.0


class CancelMsg(NamedTuple):
    replica: int


class Begin(NamedTuple):
    """The run's clock starts now (every machine has registered): inject ``failures`` from here.

    A puller welcomed before the run began got no failure law in its welcome, so that
    failures cannot keep the machines from all being up at the start, as the simulation has them.
    ``at`` is the model time now in the law's schedule: 0 at the run's start; a resumed mapper whose
    clock runs again sends its model time, and a puller already playing the law re-bases its schedule
    on it (the outage and the wait stood model time still while the puller's schedule ran on).
    """

    failures: tuple | None
    at: float = 0.0


class Share(NamedTuple):
    """Both ways: the machine's CPU share a_j changes now: running replicas go on at the new share (0 suspends).

    From the mapper, an order; from a puller, news: its availability process took the CPU back (RECLAIMED)
    or gave it again, and the mapper's core moves what the machine runs. ``state`` is the availability state,
    UP (0) or RECLAIMED (1): a RECLAIMED machine, or one at share 0, asks for no work (its request is withdrawn
    on both sides) until it is UP with a share.
    """

    share: float
    state: int = 0


class Pace(NamedTuple):
    """The core moved a replica's pace: the share of the machine's speed it is given (mgst.core.progress).

    0: it waits on the host for a CPU (the machine holds more replicas than it has cpus), 1: it computes on a
    CPU of its own. The puller runs it at its machine's share times its pace, keeping wall time itself.
    """

    replica: int
    pace: float


class Refused(NamedTuple):
    """The mapper will not take this puller's hello.

    ``fatal``: never (wrong version, unknown name, a name bound to another key): the
    puller exits with an error. Otherwise not now (the name is held by a live
    puller and the mapper cannot tell a restart from a duplicate): it retries with back-off.
    """

    reason: str
    fatal: bool


class Paused(NamedTuple):
    """The mapper stops, and the run is paused, not over (``reason``: e.g. its journal cannot be written).

    The puller keeps its replicas and held results and says hello again, for longer than
    after a mapper it merely lost, until a resumed mapper welcomes it (docs/puller.md). An
    older puller drops this type as unknown and takes the silence that follows for a lost
    mapper: no version bump.
    """

    reason: str


Message = (
    Hello | Ready | Started | Computing | Progress | Done | Failed | Heartbeat | Bye | Welcome | JobMsg
    | CancelMsg | Share | Pace | Begin | Refused | Paused
)

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


def _reason(v: Any) -> bool:
    return isinstance(v, str) and len(v) <= MAX_FRAME


def _bool(v: Any) -> bool:
    return isinstance(v, bool)


def _strs(v: Any) -> bool:
    return isinstance(v, list | tuple) and len(v) <= 256 and all(_text(x) for x in v)


def _fail_code(v: Any) -> bool:
    return isinstance(v, str) and v in FAIL_CODES  # (a list would not even hash)


def _failures(v: Any) -> bool:
    """An availability wire form (mgst.availability checks each kind's); ProtocolError saying what is wrong."""
    if v is None:
        return True
    problem = availability.wire_problem(v)
    if problem is not None:
        raise ProtocolError(Drop.BAD_VALUE, f"failures: {problem}"[:400])
    return True


def _up_state(v: Any) -> bool:
    """An up machine's availability state: UP (0) or RECLAIMED (1) (DOWN is the silence of a dead puller)."""
    return _int(v) and v in (0, 1)


def _slots(v: Any) -> bool:
    return _int(v) and 1 <= v <= MAX_SLOTS


def _replicas(v: Any) -> bool:
    return isinstance(v, list | tuple) and len(v) <= MAX_SLOTS and all(_nat(x) for x in v)


# wire name -> (class, {field: check}) (mgst.wire.frames); field order follows the class.
_SCHEMA: Schema = {
    "hello": (Hello, {"version": _int, "machine": _str, "incarnation": _int, "executors": _strs,
                      "speed": _nonneg, "clock": _num, "slots": _slots, "holds": _replicas,
                      "finished": _replicas}),
    "ready": (Ready, {"share": _given_share, "clock": _num, "slots": _slots}),
    "started": (Started, {"replica": _nat, "received": _num, "started": _num}),
    "computing": (Computing, {"replica": _nat, "clock": _num}),
    "progress": (Progress, {"replica": _nat, "progress": _frac}),
    "done": (Done, {"replica": _nat, "received": _num, "started": _num, "finished": _num,
                    "achieved_share": _share, "ready": _bool}),
    "failed": (Failed, {"replica": _nat, "code": _fail_code, "reason": _text}),
    "hb": (Heartbeat, {"seq": _nat, "clock": _num, "echo": _num, "echo_received": _num}),
    "bye": (Bye, {"reason": _text}),
    "welcome": (Welcome, {"version": _int, "machine": _nat, "time_unit": _pos, "heartbeat_interval": _pos,
                          "share": _given_share, "executor": _str, "failures": _failures, "slots": _slots,
                          "checkpoint_interval": _nonneg}),
    "job": (JobMsg, {"job": _nat, "replica": _nat, "job_class": _nat, "size": _nonneg, "work": _nonneg,
                     "progress": _frac, "stage": _nonneg, "command_key": _text, "command": _strs, "pace": _frac,
                     "hold": _nonneg}),
    "cancel": (CancelMsg, {"replica": _nat}),
    "share": (Share, {"share": _share, "state": _up_state}),
    "pace": (Pace, {"replica": _nat, "pace": _frac}),
    "begin": (Begin, {"failures": _failures, "at": _nonneg}),
    "refused": (Refused, {"reason": _reason, "fatal": _bool}),
    "paused": (Paused, {"reason": _text}),
}
_WIRE_NAME = {cls: name for name, (cls, _) in _SCHEMA.items()}
# (strings up to the frame's size: the field checks bound each; see MAX_STR)
_BOUNDS = Bounds(frame=MAX_FRAME, string=MAX_FRAME, binary=0, array=MAX_ARRAY, map=32)
_TUPLE_FIELDS = {"executors", "command", "failures", "holds", "finished"}

FROM_PULLER = frozenset({Hello, Ready, Started, Computing, Progress, Done, Failed, Heartbeat, Bye, Share})
FROM_MAPPER = frozenset({Welcome, JobMsg, CancelMsg, Share, Pace, Begin, Heartbeat, Bye, Refused, Paused})


def encode(msg: Message) -> bytes:
    """One frame for ``msg``."""
    body = msg._asdict()
    body["t"] = _WIRE_NAME[type(msg)]
    return msgpack.packb(body, use_bin_type=True)


def decode(frame: bytes) -> Message:
    """The message in ``frame``; ProtocolError if it is not exactly a valid one, and never anything else: whatever
    a check raises on a peer's value (a type it did not expect, a nesting too deep to print) is that too."""
    with total_check():
        kind, cls, fields, body = open_frame(frame, _SCHEMA, _BOUNDS)
        check_fields(kind, fields, body)
        for name in _TUPLE_FIELDS & fields.keys():
            if isinstance(body[name], list):  # (not Done.finished, a float: same name as Hello.finished)
                body[name] = tuple(body[name])
        return cls(**body)

