"""No value a mapper can send crashes a puller or makes it leak; refusals of any length are read and obeyed.

In-thread pullers (``puller_fakes.ThreadPuller``, without CURVE: the limits are the
same with it) talk to a raw ROUTER socket standing in for the mapper, on loopback at
a free port. Every wait is bounded; leaks are counted with psutil (descriptors,
threads, children) against the count before the puller started, awaited with a
deadline (ZeroMQ closes sockets in its own thread).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgpack
import psutil
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from puller_fakes import FakeMapper, ThreadPuller, job

from adjuster.failures import MIN_PERIOD
from mgst import config
from mgst.availability import registry as availability
from mgst.availability.weibull import ANGLANO_PRESETS, DEFAULT_SHAPE, MAX_SHAPE, MIN_SHAPE, anglano_preset
from mgst.config import model_sections as config_models
from mgst.model import EXECUTORS
from mgst.testbed.liveness import HEARTBEAT_INTERVAL, heartbeat_interval_for
from mgst.testbed.messages import PullerMessages
from mgst.wire import protocol as P
from mgst.wire.drops import DropLog
from puller import limits
from puller.limits import Limits

ROOT = Path(__file__).resolve().parents[1]
# Every shipped experiment (experiments/bot's other files are sweeps, of Anglano's presets: checked below).
EXPERIMENTS = [*sorted((ROOT / "experiments").glob("*.toml")), ROOT / "experiments" / "bot" / "lab-rrnrf-weibull.toml",
               *sorted((ROOT / "experiments" / "availability").glob("*.toml"))]


# ---------------------------------------------------------------------- helpers


class Records(logging.Handler):
    """Every log record of the test (any logger), to look for tracebacks and messages."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def text(self) -> str:
        return "\n".join(r.getMessage() for r in self.records)

    def tracebacks(self) -> list[str]:
        return [r.getMessage() for r in self.records if r.exc_info]


@contextmanager
def recorded() -> Iterator[Records]:
    handler = Records()
    root = logging.getLogger()
    old = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(old)


def usage() -> tuple[int, int, int]:
    """(open descriptors, threads, live children) of this process."""
    me = psutil.Process()
    children = [p for p in me.children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]
    return me.num_fds(), me.num_threads(), len(children)


def back_to(baseline: tuple[int, int, int], timeout: float = 10.0) -> tuple[int, int, int]:
    """Wait (bounded) until usage() is at most ``baseline``; what it is then."""
    deadline = time.monotonic() + timeout
    while True:
        now = usage()
        if all(n <= b for n, b in zip(now, baseline)) or time.monotonic() > deadline:
            return now
        time.sleep(0.02)


def welcome(**fields) -> P.Welcome:
    base = {"version": P.PROTOCOL_VERSION, "machine": 0, "time_unit": 1.0, "heartbeat_interval": 2.0, "share": 1.0,
            "executor": "emulate", "failures": None, "slots": 1, "checkpoint_interval": 0.0}
    return P.Welcome(**{**base, **fields})


# ---------------------------------------------------------------------- the two crashes


def serve(fake: FakeMapper, seconds: float, answer: P.Welcome) -> tuple[list[P.Message], list[float], int]:
    """Be a live mapper for ``seconds``: echo every heartbeat, welcome every hello with ``answer``.
    (Other messages, heartbeat clocks, welcomes sent.)"""
    others, beats, welcomes = [], [], 0
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        got = fake.recv(left)
        if got is None:
            continue
        ident, msg = got
        if type(msg) is P.Heartbeat:
            beats.append(msg.clock)
            fake.send(ident, P.Heartbeat(len(beats), time.time(), msg.clock, time.time()))
            continue
        if type(msg) is P.Hello:
            fake.send(ident, answer)
            welcomes += 1
        others.append(msg)
    return others, beats, welcomes


@pytest.mark.parametrize("interval", [1e300, 5e-324])
def test_an_absurd_heartbeat_interval_is_clamped(no_children_left, fake: FakeMapper, start, interval: float) -> None:
    """1e300 s overflowed zmq_poll (a traceback, exit 1); 5e-324 s would heartbeat in a busy loop.
    Clamped to [0.01, 600] s, logged once: the puller works, heartbeats at most every 10 ms, and leaks nothing."""
    baseline = usage()
    answer = welcome(heartbeat_interval=interval)
    with recorded() as log:
        p = start()
        ident, _ = fake.expect(P.Hello, 10)
        fake.send(ident, answer)
        fake.send(ident, answer)  # a second welcome: no second line
        fake.send(ident, job(1, work=0.05))
        others, beats, welcomes = serve(fake, 1.0, answer)
        assert p.thread.is_alive() and p.error is None
        assert p.close() == 0
    assert not log.tracebacks()
    assert log.text().count("heartbeat interval") == 1, log.text()
    kinds = [type(m) for m in others]
    assert P.Started in kinds and P.Done in kinds, others  # it works
    welcomes += 2
    if interval > 1:  # every 600 s: one per welcome (it heartbeats at once), no other in a second
        assert len(beats) <= welcomes, beats
    else:  # every 10 ms of its own clock, not in a busy loop (a welcome makes one at once)
        assert len(beats) >= 10, beats
        assert len(beats) <= (beats[-1] - beats[0]) / limits.MIN_HEARTBEAT + 1 + welcomes, (
            len(beats), beats[-1] - beats[0])
    assert back_to(baseline) <= baseline


@pytest.mark.parametrize("where", ["welcome", "begin"])
def test_a_failure_law_of_microseconds_plays_periods_of_ten_ms(no_children_left, fake: FakeMapper, start,
                                                                where: str) -> None:
    """A mean up/down time of 1e-6 time units cycled the puller ~700 times a second until ZeroMQ ran out of
    sockets ("Too many open files" after 2 s). Each period now lasts at least MIN_PERIOD: a new hello (a new
    incarnation) at most every 2 x 10 ms of the puller's clock, and the descriptors stay flat."""
    law = ("exponential", 1e-6, 1e-6, 5)
    baseline = usage()
    p = start()
    ident, first = fake.expect(P.Hello, 10)
    if where == "welcome":
        fake.send(ident, welcome(failures=law))
    else:
        fake.send(ident, welcome())
        fake.expect(P.Ready)
        fake.send(ident, P.Begin(law))
    hellos: list[P.Hello] = []
    peak = baseline
    deadline = time.monotonic() + 3.0  # (2 s was enough for the old puller to run out of sockets)
    while (left := deadline - time.monotonic()) > 0:
        got = fake.recv(left)
        if got is not None and type(got[1]) is P.Hello:
            hellos.append(got[1])
            fake.send(got[0], welcome(failures=law if where == "welcome" else None))
            peak = max(peak, usage())
    assert p.thread.is_alive() and p.error is None
    assert p.close() == 0
    assert len(hellos) >= 10, len(hellos)  # it does go down and come back ...
    assert len({h.incarnation for h in hellos} | {first.incarnation}) == len(hellos) + 1
    # ... no faster than an up and a down period of MIN_PERIOD each allow, by its own clock (the old one: ~1.4 ms)
    mean_gap = (hellos[-1].clock - hellos[0].clock) / (len(hellos) - 1)
    assert mean_gap >= 2 * MIN_PERIOD * 0.95, mean_gap
    assert peak[0] <= baseline[0] + 30, (peak, baseline)  # a socket, a monitor and their pipes at a time
    assert back_to(baseline) <= baseline


# ---------------------------------------------------------------------- refusals


def test_a_fatal_refusal_of_20000_characters_is_printed_and_obeyed(no_children_left, fake: FakeMapper,
                                                                   start) -> None:
    reason = "no such machine; " + "M" * 20_000
    assert len(P.encode(P.Refused(reason, True))) <= P.MAX_FRAME
    baseline = usage()
    with recorded() as log:
        p = start()
        ident, _ = fake.expect(P.Hello, 10)
        fake.send(ident, P.Refused(reason, True))
        assert p.wait(10) == 2
    lines = [r.getMessage() for r in log.records if "refused this puller" in r.getMessage()]
    assert len(lines) == 1, log.text()
    assert "no such machine; MMM" in lines[0] and f"{len(reason) - limits.MAX_REASON_SHOWN:,} more characters" \
        in lines[0]
    assert len(lines[0]) < 1200  # printed truncated
    assert back_to(baseline) <= baseline


def test_long_strings_other_than_a_refusal_are_still_refused_by_the_protocol() -> None:
    frame = P.encode(P.Refused("x" * 30_000, False))
    assert P.decode(frame) == P.Refused("x" * 30_000, False)
    for msg in (P.Bye("x" * (P.MAX_STR + 1)), P.Hello(P.PROTOCOL_VERSION, "M" * (P.MAX_STR + 1), 1, ("emulate",),
                                                      0.0, 0.0, 1, (), ())):
        with pytest.raises(P.ProtocolError) as err:
            P.decode(P.encode(msg))
        assert err.value.reason == P.Drop.BAD_VALUE
    with pytest.raises(P.ProtocolError) as err:  # a frame over the limit is refused before decoding, as before
        P.decode(P.encode(P.Refused("x" * P.MAX_FRAME, True)))
    assert err.value.reason == P.Drop.TOO_LARGE


def test_a_peer_s_unknown_field_names_reach_the_drop_reason_escaped() -> None:
    """A field name is the peer's text: its control characters (here one that retitles a terminal) are escaped."""
    import msgpack  # noqa: PLC0415  (a frame the encoder would never make)

    with pytest.raises(P.ProtocolError) as err:
        P.decode(msgpack.packb({"t": "bye", "reason": "", "\x1b]0;owned\x07": 1}))
    assert err.value.reason == P.Drop.BAD_FIELDS
    assert "\x1b" not in str(err.value) and "\x07" not in str(err.value)
    assert "\\x1b" in str(err.value)

class _StubMapper(PullerMessages):
    """Just what ``PullerMessages.hello`` reads to refuse an unknown name (and ``failure_law``): the handler's
    own constructor takes a whole run's state."""

    def __init__(self, names: list[str]):
        self.names = {name: j for j, name in enumerate(names)}
        self.by_identity: dict[bytes, int] = {}
        self.drops = DropLog(logging.getLogger("test"))
        self.sent: list[P.Message] = []
        self.send = lambda identity, msg, j: self.sent.append(msg)


def test_the_unknown_machine_refusal_of_a_1000_machine_experiment_fits_the_protocol() -> None:
    mapper = _StubMapper([f"lab-machine-{i:04d}" for i in range(1000)])
    mapper.hello(b"id", P.Hello(P.PROTOCOL_VERSION, "nobody", 1, ("emulate",), 0.0, 0.0, 1, (), ()), None, 0.0)
    (refused,) = mapper.sent
    assert type(refused) is P.Refused and refused.fatal
    assert len(refused.reason) <= P.MAX_STR
    assert P.decode(P.encode(refused)) == refused
    assert "'nobody'" in refused.reason and "lab-machine-0000, lab-machine-0001" in refused.reason
    assert refused.reason.endswith("lab-machine-0019 and 980 more"), refused.reason


def test_bad_messages_from_the_mapper_are_counted_and_logged_at_a_bounded_rate(fake: FakeMapper, start) -> None:
    """Malformed frames, a puller's message, and work before a welcome: each dropped and counted by a fixed
    reason; 900 of them make a handful of log lines, not 900; the puller then works as usual."""
    with recorded() as log:
        p = start()
        ident, _ = fake.expect(P.Hello, 10)
        for i in range(300):
            fake.sock.send_multipart([ident, b"\xc1" * (i % 7 + 1)])  # (0xc1: never valid msgpack)
            fake.send(ident, P.Ready(1.0, 0.0, 1))  # a puller's message
            fake.send(ident, job(i))  # before a welcome
        fake.send(ident, welcome())
        fake.expect(P.Ready, 10)
        fake.send(ident, job(1, work=0.01))
        fake.expect(P.Started)
        fake.expect(P.Done)
        drops = dict(p.puller.drops.counts)
        assert p.close() == 0
    assert drops == {P.Drop.NOT_MSGPACK: 300, P.Drop.DIRECTION: 300, P.Drop.UNREGISTERED: 300}, drops
    lines = [r for r in log.records if "dropped a message" in r.getMessage()]
    assert 1 <= len(lines) <= 15, len(lines)  # (a burst of 10, then one per 5 s)


def test_values_no_check_foresaw_and_messages_of_several_frames_are_dropped_not_obeyed(fake: FakeMapper,
                                                                                        start) -> None:
    """A Failed whose code is a list (it did not even hash) and one whose reason is nested 1,000 deep (too deep to
    print) each ended the puller with a traceback, exit 1; three jobs sent as one message of three frames were each
    obeyed. Now each is dropped and counted by its fixed reason, with no traceback, and the puller works on."""
    nested: list = []
    for _ in range(1000):
        nested = [nested]
    with recorded() as log:
        p = start()
        ident, _ = fake.expect(P.Hello, 10)
        fake.sock.send_multipart([ident, msgpack.packb({"t": "failed", "replica": 1, "code": [], "reason": ""})])
        fake.sock.send_multipart([ident, msgpack.packb({"t": "failed", "replica": 1, "code": "start",
                                                        "reason": nested})])
        fake.send(ident, welcome())
        fake.expect(P.Ready, 10)
        fake.sock.send_multipart([ident, *(P.encode(job(r, work=0.01)) for r in (1, 2, 3))])
        fake.send(ident, job(4, work=0.01))
        _, started = fake.expect(P.Started)
        _, done = fake.expect(P.Done)
        assert (started.replica, done.replica) == (4, 4)
        drops = dict(p.puller.drops.counts)
        assert p.thread.is_alive() and p.close() == 0
    assert drops == {P.Drop.BAD_VALUE: 2, P.Drop.FRAMES: 1}, drops
    assert not log.tracebacks(), log.tracebacks()


def test_a_trace_law_whose_durations_overflow_and_a_chain_down_for_good_are_refused() -> None:
    """A trace whose durations sum past the largest float made the puller's bound check raise OverflowError (a
    traceback for every such message, the law neither refused nor played); a markov3 chain whose DOWN never
    leaves, which UP reaches, would keep the machine down for good (silent, and deaf to --give-up)."""
    check = Limits("M")
    with pytest.raises(limits.Unusable, match="failure law has a time beyond"):
        check.failure_law(("trace", [[1.7e308, 0, 1.0], [1.7e308, 2, 0.0]]))
    down_for_good = ("markov3", 1.0, 0.0, 0.9, 0.0, 0.1, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 7)
    assert "down for good" in availability.wire_problem(down_for_good)
    comes_back = ("markov3", 1.0, 0.0, 0.9, 0.0, 0.1, 0.0, 1.0, 0.0, 0.5, 0.0, 0.5, 7)
    assert availability.wire_problem(comes_back) is None
    never_fails = ("markov3", 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 7)
    assert availability.wire_problem(never_fails) is None  # (DOWN absorbing, but never reached)


# ---------------------------------------------------------------------- stopping cleanly


@pytest.mark.parametrize(("fields", "says"), [
    ({"time_unit": 1e300}, "time unit"),
    ({"time_unit": 5e-324}, "time unit"),
    ({"failures": ("weibull", 1e300, 0.5, 10.0, 1.0, 3)}, "failure law"),
    ({"machine": 2**63 - 1}, "machine index"),
    ({"executor": "spin"}, "offers emulate"),
    ({"executor": "command"}, "command executor is off"),
])
def test_a_welcome_it_cannot_serve_stops_it_with_one_line(no_children_left, fake: FakeMapper, start, fields,
                                                           says: str) -> None:
    baseline = usage()
    with recorded() as log:
        p = start()
        ident, _ = fake.expect(P.Hello, 10)
        fake.send(ident, welcome(**fields))
        _, bye = fake.expect(P.Bye)
        assert p.wait(10) == 2
    assert says in bye.reason, bye.reason
    errors = [r for r in log.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and says in errors[0].getMessage() and not errors[0].exc_info, log.text()
    assert back_to(baseline) <= baseline


# ---------------------------------------------------------------------- no legitimate run is touched


def test_the_limits_contain_every_legitimate_run() -> None:
    assert limits.MIN_TIME_UNIT <= config.MIN_TIME_UNIT and config.MAX_TIME_UNIT <= limits.MAX_TIME_UNIT
    # the mapper's interval grows with the pullers (mgst.testbed.liveness): the largest experiment's is within limits
    assert limits.MIN_HEARTBEAT <= HEARTBEAT_INTERVAL <= limits.MAX_HEARTBEAT
    assert heartbeat_interval_for(config_models.MAX_MACHINES) <= limits.MAX_HEARTBEAT
    assert config.MAX_TIME <= limits.MAX_LAW_TIME
    assert config_models.MAX_MACHINES - 1 <= limits.MAX_MACHINE
    assert 100 * config.MAX_DURATION <= limits.MAX_WALL  # no job of a run can end within the clamp's length


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.name)
def test_every_shipped_experiment_is_welcomed_unchanged(path: Path) -> None:
    """The welcome the mapper makes for each machine of each shipped experiment passes the limits untouched,
    at the experiment's time unit and at the extremes an experiment may have (0.001 s and a day)."""
    exp = config.load_experiment(path)
    mapper = _StubMapper([m.name for m in exp.machines])
    mapper.experiment, mapper.failures, mapper.seed = exp, exp.failures is not None, 2**63 - 1
    until = 2 * exp.testbed.duration / exp.testbed.time_unit  # (generation, and as long a drain)
    mapper.availability_forms = [availability.to_wire(exp, j, mapper.seed, until) for j in range(len(exp.machines))]
    check = Limits("M")
    for time_unit in (exp.testbed.time_unit, config.MIN_TIME_UNIT, config.MAX_TIME_UNIT):
        for j, m in enumerate(exp.machines):
            w = welcome(machine=j, time_unit=time_unit, heartbeat_interval=HEARTBEAT_INTERVAL, share=m.availability,
                        failures=mapper.failure_law(j), slots=m.slots,
                        checkpoint_interval=exp.simulation.checkpoint_interval or 0.0)
            assert check.welcome(P.decode(P.encode(w)), EXECUTORS) == w
    assert check.clamped == {}


@pytest.mark.parametrize("preset", sorted(ANGLANO_PRESETS))
@pytest.mark.parametrize("shape", [MIN_SHAPE, DEFAULT_SHAPE, MAX_SHAPE])
def test_every_anglano_law_is_welcomed_unchanged(preset: str, shape: float) -> None:
    check = Limits("M")
    for group in anglano_preset(preset, shape).groups:
        law = ("weibull", group.mttf, group.shape, group.repair_mean, group.repair_sd, 2**63 - 1)
        w = welcome(time_unit=config.MIN_TIME_UNIT, failures=law)
        assert check.welcome(P.decode(P.encode(w)), EXECUTORS) == w
    assert check.clamped == {}


# ---------------------------------------------------------------------- any message the protocol lets through

_EXTREMES = (5e-324, 1e-300, 1e-6, 0.01, 0.2, 1.0, 1e6, 1e300, 1.7976931348623157e308)
_positive = st.one_of(st.sampled_from(_EXTREMES), st.floats(min_value=5e-324, max_value=1e308))
_nonneg = st.one_of(st.just(0.0), _positive)
_finite = st.one_of(_nonneg, _nonneg.map(lambda x: -x))
_unit = st.one_of(st.sampled_from((0.0, 5e-324, 1e-9, 0.5, 1.0)), st.floats(min_value=0.0, max_value=1.0))
_given_share = _unit.filter(lambda x: x > 0)
_nat = st.one_of(st.sampled_from((0, 1, 2, 2**63 - 1)), st.integers(min_value=0, max_value=2**63 - 1))
_text = st.one_of(st.text(max_size=20), st.just("x" * P.MAX_STR))
# (Each of a welcome's fields often takes a value a run can have, so that most scripts get past the welcome.)
_law_time = st.one_of(st.sampled_from((1e-6, 0.01, 2.0, 50.0)), _positive)
_law = st.one_of(
    st.none(),
    st.tuples(st.just("exponential"), _law_time, _law_time, _nat),
    st.tuples(st.just("weibull"), _law_time, st.one_of(st.sampled_from((0.1, 0.5, 100.0)), _positive), _law_time,
              st.one_of(st.just(0.0), _law_time), _nat),
)
_welcome = st.builds(
    P.Welcome, version=st.sampled_from((P.PROTOCOL_VERSION,) * 9 + (0, 2**63 - 1)),
    machine=st.one_of(st.integers(0, 100), st.integers(0, 100), _nat),
    time_unit=st.one_of(st.sampled_from((0.01, 0.1, 1.0)), st.sampled_from((0.01, 0.1, 1.0)), _positive),
    heartbeat_interval=_positive, share=_given_share,
    executor=st.sampled_from(("emulate",) * 9 + ("spin", "command", "x" * P.MAX_STR)),
    failures=_law, slots=st.integers(1, P.MAX_SLOTS), checkpoint_interval=_nonneg,
)
_job = st.builds(
    P.JobMsg, job=_nat, replica=st.one_of(st.integers(0, 3), _nat), job_class=_nat, size=_nonneg, work=_nonneg,
    progress=_unit, stage=_nonneg, command_key=_text, command=st.lists(_text, max_size=3).map(tuple), pace=_unit,
    hold=st.one_of(st.just(0.0), _nonneg),
)
_message = st.one_of(
    _welcome, _job, _job,
    st.builds(P.CancelMsg, replica=st.one_of(st.integers(0, 3), _nat)),
    st.builds(P.Share, share=_unit, state=st.sampled_from([0, 1])),
    st.builds(P.Pace, replica=st.one_of(st.integers(0, 3), _nat), pace=_unit),
    st.builds(P.Begin, failures=_law, at=st.one_of(st.just(0.0), st.sampled_from((0.5, 50.0, 1e12)), _nonneg)),
    st.builds(P.Heartbeat, seq=_nat, clock=_finite, echo=_finite, echo_received=_finite),
    st.builds(P.Bye, reason=_text),
    st.builds(P.Refused, reason=st.one_of(_text, st.just("r" * 20_000)), fatal=st.booleans()),
)


@settings(max_examples=50, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(first=_welcome, then=st.lists(_message, max_size=6))
def test_no_message_the_protocol_lets_through_crashes_or_leaks(first: P.Welcome, then: list[P.Message]) -> None:
    """A real puller, fed a welcome and up to six mapper messages valid by the protocol (extremes included),
    returns an exit code (0 or 2), logs no traceback, and leaves no descriptor, thread or child behind."""
    script = [first, *then]
    for msg in script:  # (the strategies make only messages the protocol lets through)
        P.decode(P.encode(msg))
    ctx = zmq.Context()
    try:
        fake = FakeMapper(ctx, None)
        baseline, threads = usage(), threading.active_count()
        with recorded() as log:
            p = ThreadPuller(fake.endpoint, None, ctx, insecure=True)
            ident, _ = fake.expect(P.Hello, 10)
            for msg in script:
                fake.send(ident, msg)
            p.thread.join(0.3)  # (it may run, fail, come back, exit: whatever the script makes it do)
            assert p.error is None
            code = p.close()
        assert code in (0, 2)
        assert not log.tracebacks(), log.tracebacks()
        assert p.puller.handler_errors == 0
        assert threading.active_count() == threads
        assert back_to(baseline) <= baseline, (usage(), baseline, script)
        fake.sock.close()
    finally:
        ctx.destroy(linger=0)


def test_a_jobs_absurd_hold_is_clamped_as_its_work_is_and_a_legitimate_one_passes() -> None:
    check = Limits("M")
    job = P.JobMsg(1, 2, 0, 1.0, 1.0, 0.0, 0.0, "", (), 1.0, 1e300)
    assert check.job(job, 0.01).hold == limits.MAX_WALL / 0.01 and check.clamped == {"hold": 1}
    legit = job._replace(hold=config.MAX_TIME)  # the longest model time at the shortest time unit: untouched
    assert check.job(legit, 0.001) == legit
