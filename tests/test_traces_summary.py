"""`mgst traces`: a hand-made trace's summary (hours, durations, failure rates), generate and summary end to end, and
bad options as one-line errors naming the option."""

from __future__ import annotations

import json

import pytest

from mgst.availability.process import State
from mgst.availability.trace_files import Interval
from mgst.cli import main
from mgst.cli.traces_command import KINDS as cli_kinds
from mgst.traces import generator
from mgst.traces.platform import Platform
from mgst.traces.summary import summarise

DAY, HOUR = 86_400.0, 3600.0
UP, DOWN = State.UP, State.DOWN


def sawtooth() -> Platform:
    """One host, one week: down for 1 s every 10 minutes from 09:10 to 17:00 on weekdays (48 a day), up otherwise;
    at half share from 12:00 to 13:00 on weekdays."""
    items = []
    for day in range(5):
        base = day * DAY + 9 * HOUR
        noon, one = base + 3 * HOUR, base + 4 * HOUR
        previous = base
        for k in range(1, 49):
            t = base + 600 * k
            if min(t, one) > max(previous, noon):
                items.append(Interval(max(previous, noon), min(t, one), UP, 0.5))
            items.append(Interval(t, t + 1, DOWN, None))
            previous = t + 1
    return Platform("saw", {"a": 1.5}, {"a": sorted(items)}, 7 * DAY)


def test_a_hand_made_trace_s_summary():
    s = summarise(sawtooth(), (1.0, 5.0, 15.0), starts=100_000, seed=2)
    # Business-hours starts land on 599-s up periods (600 s for the first of the day) before a down: a task of d
    # seconds fails when it starts in the last d seconds of one, so at d / 599 for d < 599, and always beyond.
    one, five, fifteen = s["failure_rates"]
    assert one["rate"] == pytest.approx(60 / 599, abs=0.004) and one["low"] < 60 / 599 < one["high"]
    assert five["rate"] == pytest.approx(300 / 599, abs=0.006)
    assert fifteen["rate"] == 1.0
    assert one["starts"] > 99_000  # (a start inside a 1-s down is left out: 1 in 600)
    hours = s["per_hour"]
    assert hours["weekday_up_fraction"][10] == round(1 - 6 / 3600, 4)  # six 1-s downs in 10:00-11:00
    assert hours["weekday_up_fraction"][3] == 1.0 and hours["weekend_up_fraction"][12] == 1.0
    assert hours["weekday_cpu_share"][12] == 0.5 and hours["weekday_cpu_share"][14] == 1.0
    down, up = s["durations"]["down"], s["durations"]["up"]
    assert (down["count"], down["q50_min"]) == (240, round(1 / 60, 3))
    # Between downs: 47 a day of 599 s, and 4 nights of 17:00:01 to 09:10 (58,199 s).
    assert up["count"] == 239 and up["q50_min"] == round(599 / 60, 3)
    assert up["mean_min"] == round((235 * 599 + 4 * 58_199) / 239 / 60, 3)
    assert s["clock_ghz"]["mean"] == 1.5 and s["hosts"] == 1 and s["span_days"] == 7


def test_the_command_offers_the_generator_s_kinds():
    assert cli_kinds == generator.KINDS  # (the command names them without importing numpy for `mgst --help`)


def test_generate_then_summarise_a_platform(tmp_path, capsys):
    out = tmp_path / "p"
    assert main(["traces", "generate", "lri-wisc", "--out", str(out), "--hosts", "12", "--days", "7", "--seed", "4",
                 "--fta"]) == 0
    assert "lri-wisc, 12 hosts, 7 days, seed 4" in capsys.readouterr().out
    assert json.loads((out / "platform.json").read_text())["clock_law"]["clusters"][0] == [0.5, 0.45]
    png = tmp_path / "s.png"
    assert main(["traces", "summary", str(out), "--task-minutes", "5,35", "--starts", "5000", "--json",
                 "--png", str(png)]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["hosts"] == 12 and [r["task_minutes"] for r in s["failure_rates"]] == [5.0, 35.0]
    assert set(s["per_hour"]) == {"weekday_up_fraction", "weekday_cpu_share", "weekend_up_fraction",
                                  "weekend_cpu_share"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The FTA file alone, with the folder's machine file: the same downs, so the same failures.
    assert main(["traces", "summary", str(out / "availability.fta"), "--hosts-file", str(out / "hosts.csv"),
                 "--task-minutes", "5,35", "--starts", "5000", "--json"]) == 0
    fta = json.loads(capsys.readouterr().out)
    assert fta["failure_rates"] == s["failure_rates"] and fta["clock_ghz"] == s["clock_ghz"]
    assert main(["traces", "summary", str(out / "availability.csv"), "--starts", "5000"]) == 0
    text = capsys.readouterr().out
    assert "clock rates: unknown" in text and "5 min:" in text and "15 min:" in text


@pytest.mark.parametrize(("args", "option"), [
    (["generate", "sdsc", "--out", "{d}/p", "--hosts", "0"], "--hosts"),
    (["generate", "sdsc", "--out", "{d}/p", "--days", "0"], "--days"),
    (["generate", "sdsc", "--out", "{d}/p", "--seed", "-1"], "--seed"),
    (["generate", "sdsc", "--out", "{d}/file/p"], "--out"),
    (["summary", "{d}/none"], "PATH"),
    (["summary", "{d}/t.csv", "--task-minutes", "5,x"], "--task-minutes"),
    (["summary", "{d}/t.csv", "--task-minutes", "0"], "--task-minutes"),
    (["summary", "{d}/t.csv", "--starts", "0"], "--starts"),
    (["summary", "{d}/bad.csv"], "PATH"),
    (["summary", "{d}/t.csv", "--hosts-file", "{d}/hosts.csv"], "--hosts-file"),
    (["summary", "{d}/t.csv", "--task-minutes", "100000"], "--task-minutes"),
    # a trace too short for any weekday's business hours: its fault, not an option's the user never gave
    (["summary", "{d}/short.csv"], "PATH"),
    (["summary", "{d}/short.csv", "--task-minutes", "5"], "--task-minutes"),
])
def test_bad_options_are_one_line_errors_naming_the_option(tmp_path, capsys, args, option):
    (tmp_path / "file").write_text("")
    (tmp_path / "t.csv").write_text("h1,0,604800,up,\n")
    (tmp_path / "short.csv").write_text("h1,0,3000,up,\n")
    (tmp_path / "bad.csv").write_text("h1,0,10,up,\nh1,5,x,up,\n")
    (tmp_path / "hosts.csv").write_text("h1,fast\n")
    assert main(["traces", *(a.format(d=tmp_path) for a in args)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mgst: error: {option}: ") and err.count("\n") == 1, err
    if option == "PATH" and "bad" in args[1]:
        assert "bad.csv:2: end is not a number" in err
    if option == "--hosts-file":
        assert "hosts.csv:1: clock_ghz is not a number" in err


def test_a_summary_with_no_rate_writes_strict_json(tmp_path, capsys):
    """A trace whose hosts are never up has no task start, so no failure rate: it was written as NaN, which is no
    JSON (a strict reader, as most outside Python are, refuses the file)."""
    trace = tmp_path / "down.csv"
    trace.write_text("M1,0,100000,down,\nM2,0,100000,down,\n")
    assert main(["traces", "summary", str(trace), "--starts", "200", "--json"]) == 0

    def refuse(name: str) -> None:
        raise ValueError(f"not JSON: {name}")

    s = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert [r["rate"] for r in s["failure_rates"]] == [None, None, None]
