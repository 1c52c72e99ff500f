"""mgst.traces: generated platforms (reproducible, shared availability, the clock laws), their files round-tripped
in CSV and FTA, a malformed hosts.csv, business-hours start points."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mgst.availability.process import State
from mgst.availability.trace_files import Interval, TraceError, read_trace
from mgst.traces import platform as platforms
from mgst.traces.calendar import business_starts
from mgst.traces.platform import (
    Platform,
    PlatformTooLarge,
    estimated_intervals,
    generate_platform,
    read_platform,
    write_generated_platform,
    write_platform,
)

ROOT = Path(__file__).resolve().parents[1]

UP, DOWN = State.UP, State.DOWN
DAY = 86_400.0


@pytest.fixture(scope="module")
def small():
    """A week of 6 SDSC-like hosts."""
    return generate_platform("sdsc", hosts=6, days=7, seed=3)


def test_a_generated_host_covers_the_span_with_contiguous_merged_intervals(small):
    assert list(small.clock_ghz) == list(small.intervals) == ["h001", "h002", "h003", "h004", "h005", "h006"]
    assert small.span == 7 * DAY
    for items in small.intervals.values():
        assert items[0].start == 0 and items[-1].end == 7 * DAY
        for a, b in zip(items, items[1:]):
            assert a.end == b.start  # contiguous
            assert (a.state, a.share) != (b.state, b.share)  # equal neighbours merged
        for iv in items:
            assert iv.start == int(iv.start) and iv.end == int(iv.end)  # whole seconds
            if iv.state is DOWN:
                assert iv.share is None
            else:
                assert iv.state is UP and (iv.share == 1.0 or 0.1 <= iv.share <= 1.0)
                assert iv.share == round(iv.share, 2)


def test_a_platform_is_reproducible_and_its_availability_does_not_depend_on_the_clock_kind(small):
    assert generate_platform("sdsc", hosts=6, days=7, seed=3) == small
    gimps = generate_platform("gimps", hosts=6, days=7, seed=3)
    assert gimps.intervals == small.intervals and gimps.clock_ghz != small.clock_ghz
    # Host k's trace is host k's whatever the number of hosts; another seed is another trace.
    assert generate_platform("sdsc", hosts=2, days=7, seed=3).intervals["h002"] == small.intervals["h002"]
    assert generate_platform("sdsc", hosts=6, days=7, seed=4).intervals != small.intervals


def test_the_clock_laws():
    hosts = 400
    homogeneous = generate_platform("homogeneous", hosts=hosts, days=1).clock_ghz
    assert set(homogeneous.values()) == {1.5}
    lri = list(generate_platform("lri-wisc", hosts=hosts, days=1).clock_ghz.values())
    assert set(lri) <= {0.5, 0.8, 1.7, 2.4}
    assert 0.38 < lri.count(0.5) / hosts < 0.52  # 45 % (binomial sd 2.5 points)
    sdsc = list(generate_platform("sdsc", hosts=hosts, days=1).clock_ghz.values())
    assert min(sdsc) >= 0.2 - 1e-9 and max(sdsc) <= 3.0 + 1e-9  # [0.18, 3.0] on a 50 MHz grid
    assert all(abs(c * 20 - round(c * 20)) < 1e-9 for c in sdsc)
    assert 1.17 < sum(sdsc) / hosts < 1.35  # the truncated law's mean is 1.256 (sd of the mean 0.027)
    gimps = sorted(generate_platform("gimps", hosts=hosts, days=1).clock_ghz.values())
    assert 0.1 <= gimps[0] and gimps[-1] <= 4.0
    assert 0.9 < gimps[hosts // 2] < 1.1  # median 1.0 GHz


@pytest.mark.parametrize("bad", [{"kind": "condor"}, {"hosts": 0}, {"days": 0}])
def test_bad_generator_arguments_are_refused(bad):
    args = {"kind": "sdsc", "hosts": 2, "days": 1} | bad
    with pytest.raises(ValueError, match=next(iter(bad)) if "kind" not in bad else "condor"):
        generate_platform(args.pop("kind"), **args)


def test_a_platform_written_host_by_host_is_the_one_generated_in_memory(small, tmp_path):
    assert write_generated_platform("sdsc", tmp_path / "streamed", hosts=6, days=7, seed=3, fta=True) == sum(
        len(items) for items in small.intervals.values())
    write_platform(small, tmp_path / "whole", fta=True)
    for name in ("availability.csv", "availability.fta", "hosts.csv", "platform.json"):
        assert (tmp_path / "streamed" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


def test_the_size_estimate_is_a_little_above_what_is_made(small):
    made = sum(len(items) for items in small.intervals.values())
    assert made < estimated_intervals(6, 7) < 1.3 * made


TOO_LARGE = "100,000 hosts over 3,650 days make some 17,261,600,000 intervals; a trace holds at most 10,000,000, to be "


@pytest.mark.parametrize("command", ["generate", "sweep"])
def test_a_platform_too_large_to_read_back_is_refused_before_anything_is_made(command, tmp_path):
    """`--hosts 100000 --days 3650` ran 93 s, then MemoryError: some 17e9 intervals, refused at once now, by `mgst
    traces generate` and by a sweep that generates its platform. Run in a child of bounded memory (1 GiB) and time,
    so that a regression fails rather than filling the machine."""
    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    out = tmp_path / "big"
    if command == "generate":
        args = ["traces", "generate", "sdsc", "--hosts", "100000", "--days", "3650", "--out", str(out)]
        said = f"mgst: error: --hosts: {TOO_LARGE}read back: give fewer hosts or days"
    else:
        sweep = tmp_path / "kondo.toml"
        sweep.write_text((ROOT / "experiments" / "kondo" / "kondo-sdsc.toml").read_text()
                         .replace("hosts = 220", "hosts = 100000").replace("days = 28", "days = 3650"))
        args = ["sweep", str(sweep), "--out", str(out), "--quick", "--quiet", "--no-plots"]
        said = f"mgst: error: {sweep}: options: {TOO_LARGE}read back: give fewer hosts or days"
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "mgst", *args], capture_output=True, text=True, timeout=60,
                       preexec_fn=limited, env={**os.environ, "MGST_PURE": "1", "PYTHONPATH": str(ROOT)})
    assert p.returncode == 2 and "Traceback" not in p.stderr and "MemoryError" not in p.stderr, p.stderr[-2000:]
    assert p.stderr.strip() == said
    assert time.monotonic() - t0 < 30 and not (out / "platforms" / "sdsc").exists()
    assert command == "sweep" or not out.exists()
    with pytest.raises(PlatformTooLarge):
        generate_platform("sdsc", hosts=100_000, days=3650)


def test_a_trace_reaching_the_bound_as_it_is_written_is_removed(tmp_path, monkeypatch):
    """The estimate is a little above the mean, but a platform near the bound may pass it and exceed it: the
    writer counts too, and removes what it wrote."""
    monkeypatch.setattr(platforms, "MAX_PLATFORM_INTERVALS", 500)
    monkeypatch.setattr(platforms, "INTERVALS_PER_WEEKDAY", 1)
    monkeypatch.setattr(platforms, "INTERVALS_PER_WEEKEND_DAY", 1)
    with pytest.raises(PlatformTooLarge, match="reached 500 intervals at host"):
        write_generated_platform("sdsc", tmp_path, hosts=10, days=7, fta=True)
    assert list(tmp_path.iterdir()) == []


def test_a_platform_round_trips_through_its_folder_in_csv_and_fta(small, tmp_path):
    out = write_platform(small, tmp_path / "p", fta=True)
    assert sorted(p.name for p in out.iterdir()) == ["availability.csv", "availability.fta", "hosts.csv",
                                                     "platform.json"]
    meta = json.loads((out / "platform.json").read_text())
    assert (meta["kind"], meta["seed"], meta["hosts"], meta["days"]) == ("sdsc", 3, 6, 7)
    assert read_platform(out) == small  # the CSV: every share, to the second
    # The FTA has no CPU share: its hosts are down exactly where the CSV says, up (share unknown) elsewhere.
    (out / "availability.csv").unlink()
    fta = read_platform(out)
    assert fta.clock_ghz == small.clock_ghz and fta.span == small.span
    for host, items in small.intervals.items():
        downs = [(iv.start, iv.end) for iv in items if iv.state is DOWN]
        assert [(iv.start, iv.end) for iv in fta.intervals[host] if iv.state is DOWN] == downs
        assert all(iv.share is None for iv in fta.intervals[host])
        ups = [iv for iv in fta.intervals[host] if iv.state is UP]
        assert all(a.end < b.start for a, b in zip(ups, ups[1:]))  # one event per up period


@pytest.mark.parametrize(("key", "value", "fragment"), [
    ("span_s", "604800", "span_s: '604800' is not a number of seconds"),
    ("span_s", True, "span_s: True is not a number of seconds"),
    ("span_s", -1.0, "span_s: -1.0 is not a finite number of seconds"),
    ("kind", 7, "kind: 7 is not a name"),
    ("seed", 3.5, "seed: 3.5 is not a whole number"),
    ("seed", "3", "seed: '3' is not a whole number"),
])
def test_a_platform_json_value_of_the_wrong_type_is_an_error_naming_its_key(small, tmp_path, key, value, fragment):
    out = write_platform(small, tmp_path / "p")
    meta = json.loads((out / "platform.json").read_text())
    meta[key] = value
    (out / "platform.json").write_text(json.dumps(meta))
    with pytest.raises(TraceError, match="platform.json") as e:
        read_platform(out)
    assert fragment in str(e.value)
    del meta[key]  # an absent key is the default: the folder's name, the trace's span, no seed
    (out / "platform.json").write_text(json.dumps(meta))
    assert read_platform(out).intervals == small.intervals


def test_the_fta_file_is_the_archive_s_event_trace(tmp_path):
    platform = Platform("x", {"a": 1.0}, {"a": [Interval(0, 10, UP, 1.0), Interval(10, 20, UP, 0.5),
                                                Interval(20, 25.5, DOWN, None)]}, 25.5)
    write_platform(platform, tmp_path, fta=True)
    assert (tmp_path / "availability.fta").read_text() == "1\t0\t0\t0\ta\t1\t0\t20\t0\n2\t0\t0\t0\ta\t0\t20\t25.5\t0\n"
    assert (tmp_path / "availability.csv").read_text() == ("machine,start,end,state,cpu_share\na,0,10,up,1\n"
                                                          "a,10,20,up,0.5\na,20,25.5,down,\n")
    assert read_trace(str(tmp_path / "availability.fta"), "fta") == {
        "a": [Interval(0, 20, UP, None), Interval(20, 25.5, DOWN, None)]}


@pytest.mark.parametrize(("text", "line", "fragment"), [
    ("host,clock_ghz\nh1,1.5\nh2\n", 3, "1 fields; need host,clock_ghz"),
    ("h1,fast\n", 1, "clock_ghz is not a number: 'fast'"),
    ("h1,1_5\n", 1, "clock_ghz is not a number: '1_5'"),
    ("h1,0\n", 1, "is not a positive number"),
    ("h1,inf\n", 1, "is not a positive number"),
    ("# c\nh1,1\n\nh1,2\n", 4, "host 'h1' again"),
    (",1\n", 1, "no host"),
    ("host,clock_ghz\n", None, "names no host"),
])
def test_a_malformed_hosts_file_is_an_error_naming_the_file_and_line(tmp_path, text, line, fragment):
    (tmp_path / "availability.csv").write_text("h1,0,10,up,\n")
    (tmp_path / "hosts.csv").write_text(text)
    with pytest.raises(TraceError) as err:
        read_platform(tmp_path)
    assert err.value.line == line and fragment in err.value.problem, err.value
    assert str(tmp_path / "hosts.csv") in str(err.value)


def test_a_folder_without_a_trace_a_trace_host_without_a_clock_or_a_clock_without_a_trace_is_an_error(tmp_path):
    (tmp_path / "hosts.csv").write_text("h1,1.0\n")
    with pytest.raises(TraceError, match="has no availability trace"):
        read_platform(tmp_path)
    (tmp_path / "availability.csv").write_text("h1,0,10,up,\nh9,0,10,down,\n")
    with pytest.raises(TraceError, match="host 'h9' has no clock rate"):
        read_platform(tmp_path)
    (tmp_path / "hosts.csv").write_text("h1,1.0\nh9,2.0\n")
    got = read_platform(tmp_path)
    assert (got.name, got.span, sorted(got.intervals)) == (tmp_path.name, 10.0, ["h1", "h9"])
    # A host the trace says nothing of was summarised as one never down (a review saw a platform's failure rate
    # fall from 13.3 % to 10.8 % with one such line added): refused, naming the machine file.
    (tmp_path / "hosts.csv").write_text("h1,1.0\nh9,2.0\nh5,3.0\n")
    with pytest.raises(TraceError, match=r"hosts\.csv.*host 'h5' has no interval in"):
        read_platform(tmp_path)


def test_business_starts_fall_in_weekday_business_hours_before_the_margin():
    week = 7 * DAY
    starts = business_starts(week, 2000, 5, margin=2 * DAY + 8 * 3600)  # the window ends on Friday 16:00
    assert len(starts) == 2000 and starts == business_starts(week, 2000, 5, margin=2 * DAY + 8 * 3600)
    days = {int(t // DAY) for t in starts}
    assert days == {0, 1, 2, 3, 4}  # Monday to Friday, each drawn
    for t in starts:
        hour = (t % DAY) / 3600
        assert 9 <= hour < 17 and t == int(t)
        assert t < 4 * DAY + 16 * 3600
    friday = sum(1 for t in starts if t >= 4 * DAY)  # 7 of the 39 hours: 18 % (binomial sd 0.9 points)
    assert 0.14 < friday / 2000 < 0.22
    with pytest.raises(ValueError, match="no weekday business hours"):
        business_starts(week, 1, 5, margin=week - 9 * 3600)  # Monday 09:00 is already too late
