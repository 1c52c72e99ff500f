"""Trace availability: the FTA and CSV readers, merging a host trace with a CPU series, the keys, the wire form."""

from __future__ import annotations

import gzip
import logging
import math
from pathlib import Path

import pytest

from mgst.availability import Period, State, make_process
from mgst.availability.registry import process_from_wire, to_wire, wire_problem
from mgst.availability.trace import MAX_WIRE_PERIODS, TraceAvailability
from mgst.availability.trace_files import (
    Interval,
    TraceError,
    guess_format,
    read_trace,
    write_csv_trace,
    write_fta_trace,
)
from mgst.config import ConfigError, load_experiment
from mgst.model import Experiment, JobClass, Machine, PolicySpec
from mgst.testbed.experiment_codec import from_plain, to_plain
from mgst.wire import protocol as P

ROOT = Path(__file__).resolve().parents[1]
UP, RECLAIMED, DOWN = State.UP, State.RECLAIMED, State.DOWN


def machines_experiment(spec, shares=(1.0, 0.5)) -> Experiment:
    machines = tuple(Machine(f"M{j + 1}", (1.0,), a) for j, a in enumerate(shares))
    return Experiment("t", (JobClass("1", 1.0),), machines, PolicySpec("fcfs"), failures=spec)


def periods_of(spec, shares=(1.0, 0.5)) -> list[list[Period]]:
    exp = machines_experiment(spec, shares)
    out = []
    for j in range(len(shares)):
        proc, got = make_process(exp, 1, 0, j), []
        while (p := proc.next()).duration < math.inf:
            got.append(p)
        assert p == Period(math.inf, UP, shares[j])  # after the trace: up at a_j for good
        out.append(got)
    return out


# ---------------------------------------------------------------- readers


def test_the_shipped_csv_example_reads_as_written():
    got = read_trace(str(ROOT / "experiments" / "traces" / "example.csv"), "csv")
    assert got["M1"] == [Interval(0, 600, UP, 1.0), Interval(600, 900, RECLAIMED, 0.0),
                         Interval(900, 1500, UP, 0.5), Interval(1500, 1800, DOWN, None)]
    assert got["M2"] == [Interval(300, 420, DOWN, None), Interval(1000, 1300, RECLAIMED, 0.25)]
    assert got["M3"] == [Interval(2400, 2700, DOWN, None)]


def test_the_fta_reader_takes_the_archive_s_columns_or_a_header(tmp_path):
    positional = tmp_path / "a.tab"
    positional.write_text("7\t0\t12\t1\tnode-a\t1\t100\t160\t0\n8\t0\t12\t1\tnode-a\t0\t160\t175.5\t1\n"
                          "9\t0\t13\t1\tNULL\t0\t0\t50\t1\n")
    assert read_trace(str(positional), "fta") == {
        "node-a": [Interval(100, 160, UP, None), Interval(160, 175.5, DOWN, None)],
        "13": [Interval(0, 50, DOWN, None)],  # no node name: the node id
    }
    headed = tmp_path / "b.tab"  # another column order, named; event_stop_time for event_end_time
    headed.write_text("node_name\tevent_start_time\tevent_stop_time\tevent_type\nx\t5\t9\t0\n")
    assert read_trace(str(headed), "fta") == {"x": [Interval(5, 9, DOWN, None)]}
    packed = tmp_path / "c.tab.gz"
    packed.write_bytes(gzip.compress(positional.read_bytes()))
    assert read_trace(str(packed), "fta") == read_trace(str(positional), "fta")


@pytest.mark.parametrize(("fmt", "text", "where", "fragment"), [
    ("csv", "M1,0,10,up,1\nM1,5,20,down,\n", 2, "[5, 20) overlaps [0, 10) of line 1"),
    ("csv", "M1,5,20,down,\nM2,0,1,up,\nM1,0,10,up,1\n", 1, "[5, 20) overlaps [0, 10) of line 3"),
    ("csv", "h1,0,10,up,\nh1,0,10,up,0.5\n", 2, "overlaps [0, 10) of line 1"),  # (a share against none: no sort error)
    ("fta", "1\t0\t1\t1\tn\t1\t0\t10\t0\n2\t0\t1\t1\tn\t0\t9\t12\t0\n", 2, "overlaps"),
    ("csv", "M1,10,5,up,\n", 1, "not before end"),
    ("csv", "M1,0,10,sleeping,\n", 1, "need up, reclaimed or down"),
    ("csv", "M1,0,10,up,1.5\n", 1, "not in [0, 1]"),
    ("csv", "M1,0,10,down,0.5\n", 1, "no CPU share"),
    ("csv", "M1,0,nan,up,\n", 1, "not finite"),
    # times in [0, 1e10] trace seconds (1e308: "for ever", that played one period to the drain limit)
    ("csv", "M1,0,10,up,\nM1,-5,0,down,\n", 2, "start -5 is not a time in trace seconds: give one in [0, 1e+10]"),
    ("csv", "M1,0,1e308,up,\n", 1, "end 1e+308 is not a time in trace seconds"),
    ("csv", "M1,0,1.7e12,up,\n", 1, "end 1.7e+12 is not"),  # (epoch milliseconds)
    ("fta", "1\t0\t1\t1\tn\t1\t-3\t10\t0\n", 1, "event_start_time -3 is not a time in trace seconds"),
    # up at share 0 says two things (up computes; share 0 computes nothing): reclaimed,0 or down says one
    ("csv", "M1,0,10,up,0\n", 1, "cpu_share 0 with state up"),
    ("csv", "M1,0,10,reclaimed,0\nM1,10,20,up,0.0\n", 2, "write reclaimed,0"),
    ("csv", "# ok\nM1,0,ten,up,\n", 2, "end is not a number"),
    ("csv", "M1,0,1_000,up,\n", 1, "end is not a number: '1_000'"),  # Python's digit separator, no CSV number
    ("fta", "1\t0\t1\t1\tn\t1\t0\t1_0\t0\n", 1, "event_end_time is not a number: '1_0'"),
    ("csv", "M1,0,10\n", 1, "3 fields"),
    ("csv", ",0,10,up,\n", 1, "no machine"),
    ("csv", "M1,0,10,up," + "1" * 5000 + "\n", 1, "longer than 4096 bytes"),
    ("fta", "1\t0\t1\t1\tn\t2\t0\t10\t0\n", 1, "event_type '2'"),
    ("fta", "1\t0\t1\t1\tn\t1\t0\n", 1, "7 tab-separated fields; need 8"),  # (event_end_reason is not read)
    ("fta", "node_name\tevent_type\n", 1, "the header lacks event_start_time"),
    # a column named twice (it was an IndexError: the line had as many fields as the header had names)
    ("fta", "node_name\tnode_name\tevent_type\tevent_start_time\tevent_end_time\nA\t1\t0\t10\n", 1,
     "the header names column 'node_name' twice"),
    ("fta", "event_type\tnode_id\tevent_start_time\tEvent_Type\tevent_end_time\n1\tA\t0\t5\n", 1,
     "names column 'event_type' twice"),
    ("fta", "event_start_time\tevent_stop_time\tevent_end_time\tevent_type\tnode_id\n", 1,
     "names column 'event_end_time' twice"),
])
def test_a_malformed_trace_is_an_error_naming_the_file_and_line(tmp_path, fmt, text, where, fragment):
    path = tmp_path / f"t.{fmt}"
    path.write_text(text)
    with pytest.raises(TraceError) as err:
        read_trace(str(path), fmt)
    assert err.value.line == where and fragment in err.value.problem, err.value
    assert str(path) in str(err.value)


@pytest.mark.parametrize(("name", "hinted"), [("trace.toml", True), ("avail.CSV.txt", False), ("t.fta.gz", False),
                                              ("trace", True)])
def test_a_file_read_as_fta_by_its_name_says_why_when_its_lines_do_not_fit(tmp_path, name, hinted):
    """A CSV trace (or any file) whose name does not end in .csv is read as the archive's format; its error said
    '5 tab-separated fields; need 8', not why the file was read so."""
    path = tmp_path / name
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(b"M1,0,10,up,\n"))
    else:
        path.write_text("M1,0,10,up,\n")
    with pytest.raises(TraceError) as err:
        read_trace(str(path), guess_format(str(path)))
    assert "1 tab-separated field; need 8" in err.value.problem
    assert ("name a CSV trace .csv" in err.value.problem) is hinted, err.value


def test_an_fta_line_with_an_empty_end_reason_reads(tmp_path):
    """The archive's last column, event_end_reason, empty (or absent): the line ends in a tab, which reading strips;
    it was refused as '8 tab-separated fields; need 9', though nothing read is missing."""
    path = tmp_path / "t.fta"
    path.write_text("1\t0\t1\t1\tA\t1\t0\t1000\t\n2\t0\t1\t1\tA\t0\t1000\t1500\n")
    assert read_trace(str(path), "fta") == {"A": [Interval(0.0, 1000.0, UP, None), Interval(1000.0, 1500.0, DOWN,
                                                                                              None)]}
    path.write_text("event_end_reason\tnode_name\tevent_type\tevent_start_time\tevent_end_time\n\tA\t1\t0\t5\n")
    assert read_trace(str(path), "fta") == {"A": [Interval(0.0, 5.0, UP, None)]}  # (a leading empty field is kept)
    path.write_text("node_name\tevent_type\tevent_start_time\tevent_end_time\tevent_end_reason\nA\t1\t0\n")
    with pytest.raises(TraceError, match="3 tab-separated fields; need 4"):
        read_trace(str(path), "fta")


def test_a_byte_order_mark_is_named(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbfmachine,start,end,state\nM1,0,10,up\n")
    with pytest.raises(TraceError, match="byte-order mark") as err:
        read_trace(str(path), "csv")
    assert err.value.line == 1


def test_only_the_header_s_own_names_make_a_first_line_a_header(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("machine,0,10,up,\nh2,0,10,down,\n")  # a host named "machine": data
    assert sorted(read_trace(str(path), "csv")) == ["h2", "machine"]
    path.write_text("Machine,Start,End,State\nh2,0,10,down\n")
    assert list(read_trace(str(path), "csv")) == ["h2"]


@pytest.mark.parametrize(("write", "host"), [(write_csv_trace, "a,b"), (write_fta_trace, "a\tb")] + [
    (w, h) for w in (write_csv_trace, write_fta_trace) for h in ("#h", " h", "h\nx", "", "hé")])
def test_a_host_name_that_would_not_read_back_is_not_written(tmp_path, write, host):
    with pytest.raises(ValueError, match="cannot be written"):
        write({host: [Interval(0, 1, UP, None)]}, tmp_path / "t")
    write({"a b": [Interval(0, 1, UP, None)]}, tmp_path / "t")  # (a name with a blank inside reads back)


def test_non_ascii_and_missing_files_are_errors(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes("M1,0,10,up,\nMé,0,1,up,\n".encode())
    with pytest.raises(TraceError, match=":2: not ASCII"):
        read_trace(str(path), "csv")
    with pytest.raises(TraceError, match="cannot read"):
        read_trace(str(tmp_path / "none.csv"), "csv")


# ---------------------------------------------------------------- merging, offset, scale


def test_a_host_trace_and_a_cpu_series_merge_worse_state_and_smaller_share(tmp_path):
    host = tmp_path / "host.csv"
    host.write_text("M1,100,130,down,\nM1,150,200,up,0.9\nM2,100,110,down,\n")
    cpu = tmp_path / "cpu.csv"
    cpu.write_text("M1,90,120,reclaimed,0.5\nM1,160,170,reclaimed,\nM1,190,250,up,0.6\n")
    spec = TraceAvailability(str(host), "csv", str(cpu), offset=80.0, time_scale=2.0)
    m1, m2 = periods_of(spec)
    # Trace seconds from 80, model time x 2: 80-90 up at a_j; 90-100 reclaimed 0.5; 100-130 down (over the
    # series); 130-150 up; 150-160 up 0.9 (host); 160-170 reclaimed 0 (series, default share); 170-190 up 0.9;
    # 190-200 up min(0.9, 0.6); 200-250 up 0.6 (series alone); then up at a_j.
    assert m1 == [Period(20.0, UP, 1.0), Period(20.0, RECLAIMED, 0.5), Period(60.0, DOWN, 0.0), Period(40.0, UP, 1.0),
                  Period(20.0, UP, 0.9), Period(20.0, RECLAIMED, 0.0), Period(40.0, UP, 0.9), Period(120.0, UP, 0.6)]
    # M2 has no series: up at its a_j (0.5) until its failure; after the trace, up at a_j (not listed).
    assert m2 == [Period(40.0, UP, 0.5), Period(20.0, DOWN, 0.0)]


def test_the_offset_cuts_what_came_before_model_time_zero(tmp_path):
    host = tmp_path / "host.csv"
    host.write_text("M1,0,100,down,\nM1,100,200,reclaimed,\nM2,250,260,reclaimed,0.1\n")
    m1, m2 = periods_of(TraceAvailability(str(host), "csv", offset=150.0))
    assert m1 == [Period(50.0, RECLAIMED, 0.0)]  # starts reclaimed, half-way through that interval
    assert m2 == [Period(100.0, UP, 0.5), Period(10.0, RECLAIMED, 0.1)]


def test_hosts_in_order_of_appearance(tmp_path):
    host = tmp_path / "host.tab"
    host.write_text("1\t0\t9\t1\tb\t0\t0\t5\t1\n2\t0\t8\t1\ta\t0\t1\t2\t1\n3\t0\t7\t1\tc\t0\t3\t4\t1\n")
    m1, m2 = periods_of(TraceAvailability(str(host), "fta", machines="order"))
    assert m1 == [Period(5.0, DOWN, 0.0)]  # host "b", the file's first
    assert m2 == [Period(1.0, UP, 0.5), Period(1.0, DOWN, 0.0)]  # host "a"


@pytest.mark.parametrize("machines", ["name", "order"])
def test_trace_hosts_no_machine_takes_are_said_not_left_out_unsaid(tmp_path, caplog, machines):
    host = tmp_path / "host.csv"
    host.write_text("M1,0,5,down,\nX9,0,1,down,\nM2,1,2,down,\n")  # X9: no machine of the experiment's M1, M2
    with caplog.at_level("WARNING", logger="mgst.availability.trace"):
        periods_of(TraceAvailability(str(host), "csv", machines=machines))
    assert "1 of its 3 hosts" in caplog.text and str(host) in caplog.text


# ---------------------------------------------------------------- experiment file


BASE = """
[workload]
arrival_rates = [0.5]
[machines]
rates = [[1.0, 1.0]]
names = ["M1", "M2"]
[policy]
name = "fcfs"
[simulation]
horizon = 100.0
warmup = 10.0
[availability]
kind = "trace"
"""


def load(tmp_path, section: str) -> Experiment:
    path = tmp_path / "exp.toml"
    path.write_text(BASE + section)
    return load_experiment(path)


def test_the_shipped_trace_experiments_load_and_round_trip_the_store():
    for name in ("trace-csv", "trace-fta"):
        exp = load_experiment(ROOT / "experiments" / "availability" / f"{name}.toml")
        assert isinstance(exp.failures, TraceAvailability)
        assert from_plain(to_plain(exp)) == exp
    fta = load_experiment(ROOT / "experiments" / "availability" / "trace-fta.toml")
    assert (fta.failures.format, fta.failures.offset) == ("fta", 1262304000.0)
    assert fta.failures.cpu_file.endswith("experiments/traces/example-cpu.csv")


@pytest.mark.parametrize(("section", "files", "key", "fragment"), [
    ("", {}, "availability.file", "missing"),
    ('file = "t.csv"\nformat = "swf"\n', {"t.csv": "M1,0,1,up,\nM2,0,1,up,\n"}, "availability.format", "'csv'"),
    ('file = "t.csv"\nmachines = "index"\n', {"t.csv": "M1,0,1,up,\nM2,0,1,up,\n"}, "availability.machines",
     "'order'"),
    ('file = "t.csv"\noffset = "noon"\n', {"t.csv": "M1,0,1,up,\nM2,0,1,up,\n"}, "availability.offset", "number"),
    ('file = "t.csv"\ntime_scale = 0\n', {"t.csv": "M1,0,1,up,\nM2,0,1,up,\n"}, "availability.time_scale",
     "positive"),
    ('file = "t.csv"\noffset = 100\n', {"t.csv": "M1,0,1,up,\nM2,0,5,down,\n"}, "availability.offset",
     "past the trace's end (5 s)"),  # (the run played no period of it: as if there were no trace)
    # a trace's times are in [0, 1e10]: so is the offset into it (a negative one played a start that is not there)
    ('file = "t.csv"\noffset = -10\n', {"t.csv": "M1,0,1,up,\nM2,0,5,down,\n"}, "availability.offset",
     "must be a trace time in seconds in [0, 1e+10]"),
    ('file = "t.csv"\noffset = 1e308\n', {"t.csv": "M1,0,1,up,\nM2,0,5,down,\n"}, "availability.offset",
     "got 1e+308"),
    ('file = "t.csv"\ncpu_file = "c.csv"\noffset = 9\n', {"t.csv": "M1,0,1,up,\nM2,0,5,down,\n",
                                                            "c.csv": "M1,0,9,reclaimed,0.5\n"},
     "availability.offset", "past the trace's end (9 s)"),
    ('file = "t.csv"\n', {"t.csv": "M1,0,1,up,\nM1,0,5,down,\n"}, "availability.file", "overlap"),
    ('file = "t.csv"\n', {"t.csv": "M1,0,1,up,\n"}, "availability.file", "no entry for machine 'M2'"),
    ('file = "t.csv"\ncpu_file = "c.csv"\n', {"t.csv": "M1,0,1,up,\nM2,0,1,up,\n", "c.csv": "M1,0,1,wait,\n"},
     "availability.cpu_file", "c.csv:1"),
    ('file = "none.csv"\n', {}, "availability.file", "cannot read"),
    ('file = "t.csv"\nmean_up = 1\n', {"t.csv": ""}, "availability.mean_up", "a key of kind = 'exponential'"),
])
def test_errors_name_the_key(tmp_path, section, files, key, fragment):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError) as err:
        load(tmp_path, section)
    assert err.value.key == key and fragment in err.value.problem, err.value


@pytest.mark.parametrize(("offset", "warned"), [(0, True), (1262200000, True), (1262300000, False),
                                              (1262390000, False)])
def test_a_trace_that_begins_long_after_its_offset_is_warned_of(tmp_path, caplog, offset, warned):
    """An archive's trace in epoch seconds read from offset 0 played decades where it says nothing: every machine
    up at a_j all along, a grid that never fails, and nothing said. (Within a day of the start is not warned of.)"""
    start = 1262304000
    (tmp_path / "t.csv").write_text(f"M1,{start},{start + 200000},down,\nM2,{start},{start + 200000},up,\n")
    with caplog.at_level(logging.WARNING, logger="mgst.availability.trace"):
        load(tmp_path, f'file = "t.csv"\noffset = {offset}\n')
    said = [r.getMessage() for r in caplog.records if "the trace begins" in r.getMessage()]
    assert bool(said) is warned, said
    if warned:
        assert f"{(start - offset) / 86400:.1f} days after availability.offset = {offset}" in said[0], said


def test_a_cpu_series_may_leave_machines_alone(tmp_path):
    (tmp_path / "t.csv").write_text("M1,0,1,up,\nM2,5,6,down,\n")
    (tmp_path / "c.csv").write_text("M2,0,2,reclaimed,0.5\n")
    exp = load(tmp_path, 'file = "t.csv"\ncpu_file = "c.csv"\n')
    assert [make_process(exp, 1, 0, 1).next() for _ in range(1)] == [Period(2.0, RECLAIMED, 0.5)]


# ---------------------------------------------------------------- wire


def test_the_mapper_sends_a_machine_its_own_periods_over_the_run_only(tmp_path):
    (tmp_path / "t.csv").write_text("M1,10,20,reclaimed,0\nM1,30,40,down,\nM1,50,60,up,0.5\nM2,0,1,down,\n")
    exp = load(tmp_path, 'file = "t.csv"\n')
    form = to_wire(exp, 0, 3, math.inf)
    assert form == ("trace", [[10.0, 0, 1.0], [10.0, 1, 0.0], [10.0, 0, 1.0], [10.0, 2, 0.0], [10.0, 0, 1.0],
                              [10.0, 0, 0.5]])
    assert to_wire(exp, 0, 3, 25.0) == ("trace", form[1][:3])  # periods that start before the run's end
    assert to_wire(exp, 1, 3, math.inf) == ("trace", [[1.0, 2, 0.0]])
    # A puller joining at model time 15 (a restarted process) plays what is left, from then.
    assert to_wire(exp, 0, 3, math.inf, since=15.0) == ("trace", [[5.0, 1, 0.0], *form[1][2:]])
    assert to_wire(exp, 0, 3, math.inf, since=60.0) == ("trace", [])  # over: up at a_j
    played = process_from_wire(list(form), 0, 1.0)
    assert [played.next() for _ in range(7)] == [*periods_of(exp.failures, (1.0, 1.0))[0], Period(math.inf, UP, 1.0)]


def test_a_trace_longer_than_a_puller_takes_is_refused_before_the_run(tmp_path):
    lines = "".join(f"M1,{2 * k},{2 * k + 1},down,\n" for k in range(MAX_WIRE_PERIODS))
    (tmp_path / "t.csv").write_text(lines + "M2,0,1,up,\n")
    exp = load(tmp_path, 'file = "t.csv"\n')
    assert len(to_wire(exp, 0, 0, MAX_WIRE_PERIODS - 0.5)[1]) == MAX_WIRE_PERIODS  # just within
    with pytest.raises(ValueError, match="MAX_WIRE_PERIODS"):
        to_wire(exp, 0, 0, math.inf)  # 2,000 periods


def welcome(failures) -> bytes:
    return P.encode(P.Welcome(P.PROTOCOL_VERSION, 0, 1.0, 0.2, 1.0, "emulate", failures, 1, 0.0))


def test_the_largest_trace_fits_a_frame():
    frame = welcome(("trace", [[1e300 / 3, 2, 0.0]] * MAX_WIRE_PERIODS))
    assert len(frame) <= P.MAX_FRAME
    assert len(P.decode(frame).failures[1]) == MAX_WIRE_PERIODS


@pytest.mark.parametrize(("form", "fragment"), [
    (("trace",), "a trace is"),
    (("trace", [[1.0, 0, 1.0]], 5), "a trace is"),
    (("trace", "periods"), "a trace is"),
    (("trace", [[1.0, 0]]), "period 0 is not"),
    (("trace", [[1.0, 0, 1.0], [float("nan"), 0, 1.0]]), "period 1 is not"),
    (("trace", [["1", 0, 1.0]]), "period 0 is not"),
    (("trace", [[0.0, 0, 1.0]]), "duration 0.0 is not > 0"),
    (("trace", [[-5.0, 0, 1.0]]), "duration -5.0"),
    (("trace", [[1.0, 3, 1.0]]), "state 3"),
    (("trace", [[1.0, 1.5, 1.0]]), "state 1.5"),
    (("trace", [[1.0, True, 1.0]]), "period 0 is not"),
    (("trace", [[1.0, 0, 1.5]]), "cpu_share 1.5"),
    (("trace", [[1.0, 2, 0.5]]), "cpu_share 0.5 is not in [0, 1] (0 when DOWN)"),
    (("trace", [[1.0, 0, 1.0]] * (MAX_WIRE_PERIODS + 1)), "1,001 periods"),
])
def test_hostile_trace_forms_are_refused_with_a_reason(form, fragment):
    problem = wire_problem(form)
    assert problem is not None and fragment in problem, problem
    with pytest.raises(ValueError):
        process_from_wire(form, 0, 1.0)
    if len(form) == 2 and isinstance(form[1], list) and len(form[1]) <= 1100:
        with pytest.raises(P.ProtocolError) as err:  # the protocol refuses the frame, saying why
            P.decode(welcome(form))
        assert err.value.reason == P.Drop.BAD_VALUE and fragment in err.value.detail, err.value


def test_an_oversized_trace_frame_is_refused_before_decoding():
    with pytest.raises(P.ProtocolError) as err:
        P.decode(welcome(("trace", [[1.5, 0, 0.5]] * 4000)))
    assert err.value.reason == P.Drop.TOO_LARGE
