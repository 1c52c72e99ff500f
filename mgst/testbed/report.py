"""report.html: a finished run's page to keep, mail or compare: the live view's panels drawn once, self-contained.

The page is the live view's own (``live/static``: the same HTML, script and chart library, inlined), given
one snapshot of the run's end instead of a server to poll. That snapshot is built from the finished run and
its summary alone (:func:`report_snapshot`), so ``mgst run``, ``mgst mapper`` and ``mgst export`` of the
same journal write the same page, and its figures are summary.json's. Nothing in it asks the network for
anything: no link, no font, no script from elsewhere.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from mgst.testbed.live.board import SNAPSHOT_VERSION
from mgst.testbed.live.snapshot import (
    MAX_MACHINES_SHOWN,
    _num,  # (the live view's: JSON has no NaN)
)
from mgst.testbed.machines_csv import ended_by, outage_starts, state_at_end
from mgst.testbed.run_result import TestbedRun
from mgst.whole_file import write_whole

FILENAME = "report.html"
MAX_EVENTS = 2000  # the timeline's latest events
MAX_POINTS = 1800  # points of each plot, evenly over the run
# The phase of a report of a run that did not end (summary.json's "closed": false): its page says so.
NOT_CLOSED = "not closed"
_CLOSING = re.compile(r"</(script|style)", re.IGNORECASE)  # would end the inlined element early


def report_snapshot(run: TestbedRun, summary: dict[str, Any]) -> dict[str, Any]:
    """The live view's snapshot of the run's end, from the run and its summary.json (the same figures)."""
    exp, core, journal = run.experiment, run.core, run.journal
    refusals = Counter(r.machine for r in journal.replicas.values() if r.outcome == "refused")
    states = [state_at_end(m) for m in journal.machines]
    machines = []
    for j, (rec, mlog) in enumerate(zip(core.machines, journal.machines)):
        if j >= MAX_MACHINES_SHOWN:
            break
        machines.append({
            "name": mlog.name, "state": states[j], "activity": rec.state.value,
            "share_requested": mlog.share, "share_reported": _num(rec.cpu_share, 4),
            "share_achieved": _num(float(np.mean(mlog.achieved)), 4) if mlog.achieved else None,
            "running": [], "jobs_run": mlog.jobs_run, "refusals": refusals[j],
            "clock_offset_s": _num(mlog.offset), "rtt_s": _num(mlog.rtt), "registrations": mlog.registrations,
        })
    results: dict[str, Any] = {"classes": summary.get("classes", []), "overall": summary.get("overall"),
                               "ci_method": summary.get("ci_method", "")}
    if summary.get("bags") is not None:  # (with the counts the live view gives, as the page reads them)
        results["bags"] = {**summary["bags"], "done": sum(1 for b in core.all_bags.values() if b.completed is not None),
                           "arrived": len(core.all_bags)}
    simulation = summary.get("simulation")
    done = summary.get("jobs_done", 0)
    generated = summary.get("jobs_generated", 0)
    running = len(core.running)  # (an interrupted run ends with jobs still running: the core's own counts, as the
    # live view's)
    return {
        "version": SNAPSHOT_VERSION,
        "at": run.end,
        "experiment": exp.name,
        "policy": exp.policy.name,
        # (a run not closed, its mapper died or still going, or salvaged: results so far, and said so)
        "phase": "over" if summary.get("closed", True) is not False else NOT_CLOSED,
        "elapsed_s": _num(run.end - run.t0, 3),
        # (generation's length, or the run's if longer: a bag list's generation ends with its last arrival)
        "duration_s": _num(max(summary.get("duration_s") or 0.0, run.end - run.t0), 3),
        "time_unit_s": run.time_unit,
        "warmup": run.warmup,
        "registered": sum(1 for m in journal.machines if m.periods),
        "jobs": {"generated": generated, "done": done, "running": running, "queued": core.queued_count,
                 "discarded": sum(m.stats.discarded for m in core.machines),
                 "wasted_time": _num(sum(m.stats.discarded_time for m in core.machines))},
        "machine_count": len(exp.machines),
        "machine_states": dict(Counter(states)),
        "machines": machines,
        "queues": [],
        "results": results,
        "simulation": {"status": "done", "summary": simulation} if simulation is not None else None,
        "events": _events(run),
        "series": {"columns": ["elapsed_s", "done", "queued", "running", "up", "mean_response"],
                   "rows": _series(run)},
    }


def _events(run: TestbedRun) -> list[dict[str, Any]]:
    """The timeline: each machine's registrations, ups, downs and expulsion, at the instants the journal has."""
    events = []
    outages = outage_starts(run.journal)
    for mlog in run.journal.machines:
        for k, (up, down) in enumerate(mlog.periods):
            if up is not None:
                events.append({"at": up, "machine": mlog.name, "kind": "registered" if k == 0 else "up", "detail": ""})
            ended = ended_by(mlog, down, outages)
            if down is not None and ended != "expelled":  # (its expulsion is an event of its own, below)
                events.append({"at": down, "machine": mlog.name, "kind": ended, "detail": ""})
        if mlog.expelled is not None:
            events.append({"at": mlog.expelled[0], "machine": mlog.name, "kind": "expelled",
                           "detail": mlog.expelled[1][:200]})
    events.sort(key=lambda e: e["at"])
    return events[-MAX_EVENTS:]


def _series(run: TestbedRun) -> list[list[float | None]]:
    """The live view's plots over the whole run, from the journal: at each point (at most MAX_POINTS, evenly
    from model time 0 to the end), the jobs done, queued and running, the machines up, and the mean response
    of the counted jobs done so far (as the summary counts them: submitted in [warm-up, horizon), not across an
    outage)."""
    journal, t0, tu = run.journal, run.t0, run.time_unit
    horizon = (run.generation_end - t0) / tu
    submitted, started, finished, counted_done, counted_response = [], [], [], [], []
    for jl in journal.jobs.values():
        submitted.append(jl.submitted)
        sent = [journal.replicas[r].t3 for r in jl.replicas if r in journal.replicas]
        started.append(min(sent) if sent else math.inf)
        r = journal.replicas.get(jl.done_by) if jl.done_by is not None else None
        end = r.t6 if r is not None and r.t6 is not None else math.inf
        finished.append(end)
        if end < math.inf and run.warmup <= jl.job.submitted < horizon and not jl.across_outage:
            counted_done.append(end)
            counted_response.append((end - jl.submitted) / tu)
    order = np.argsort(np.asarray(counted_done, dtype=float), kind="stable")
    done_at = np.asarray(counted_done, dtype=float)[order]
    cumulative = np.cumsum(np.asarray(counted_response, dtype=float)[order])
    arrays = [np.sort(np.asarray(a, dtype=float)) for a in (submitted, started, finished)]
    ups = np.sort(np.asarray([u for m in journal.machines for u, _ in m.periods if u is not None], dtype=float))
    downs = np.sort(np.asarray([d for m in journal.machines for u, d in m.periods if u is not None and d is not None],
                               dtype=float))
    length = max(run.end - t0, 0.0)
    rows: list[list[float | None]] = []
    for k in range(MAX_POINTS + 1):
        t = t0 + length * k / MAX_POINTS
        arrived, sent, ended = (int(np.searchsorted(a, t, side="right")) for a in arrays)
        n = int(np.searchsorted(done_at, t, side="right"))
        mean = float(cumulative[n - 1] / n) if n else None
        up = int(np.searchsorted(ups, t, side="right")) - int(np.searchsorted(downs, t, side="right"))
        rows.append([round(t - t0, 2), ended, max(arrived - sent, 0), max(sent - ended, 0), up,
                     None if mean is None else round(mean, 6)])
        if length == 0.0:
            break
    return rows


def render(snapshot: dict[str, Any]) -> str:
    """The live view's page with its style and scripts inlined and ``snapshot`` given to it: one file."""
    static = resources.files("mgst.testbed.live") / "static"
    page = (static / "index.html").read_text(encoding="utf-8")

    def inline(tag: str, name: str, wrap: str) -> None:
        nonlocal page
        if tag not in page:
            raise ValueError(f"the live view's page has no {tag!r} to inline")
        text = _CLOSING.sub(r"<\\/\1", (static / name).read_text(encoding="utf-8"))
        page = page.replace(tag, f"<{wrap}>\n{text}\n</{wrap}>")

    inline('<link rel="stylesheet" href="/static/uPlot.min.css">', "uPlot.min.css", "style")
    inline('<link rel="stylesheet" href="/static/live.css">', "live.css", "style")
    data = json.dumps(snapshot, separators=(",", ":")).replace("</", "<\\/")  # (JS: NaN is a value; "</" in strings)
    inline('<script src="/static/uPlot.iife.min.js"></script>', "uPlot.iife.min.js", "script")
    page = page.replace('<script src="/static/live.js"></script>',
                        f'<script>window.MGST_REPORT = {data};</script>\n<script src="/static/live.js"></script>')
    inline('<script src="/static/live.js"></script>', "live.js", "script")
    page = page.replace('<a href="/static/uPlot.LICENSE">uPlot (MIT)</a>', "uPlot (MIT licence)")
    if snapshot.get("phase") == NOT_CLOSED:
        page = page.replace("Read-only view, refreshed every second.", "The report of a run that did not end (its "
                            "mapper died, or it is still going): what its journal held when it was written.")
    else:
        page = page.replace("Read-only view, refreshed every second.", "The report of a finished run, written at its "
                            "end.")
        page = page.replace("<h2>Results so far, beside the simulation</h2>", "<h2>Results, beside the simulation</h2>")
    page = page.replace("<title>mgst live view</title>",
                        f"<title>mgst report: {html.escape(snapshot.get('experiment', ''))}</title>")
    return page


def write_report(run: TestbedRun, summary: dict[str, Any], out: Path) -> None:
    """Write ``out``/report.html (replacing one there, through a temporary file: never half written)."""
    page = render(report_snapshot(run, summary))
    write_whole(out / FILENAME, lambda part: part.write_text(page, encoding="utf-8"))
