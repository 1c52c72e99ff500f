"""The live view in a real headless Chromium (Selenium, the distribution's chromedriver) on a real `mgst run`,
and its access policy over real HTTP requests: read-only, a token off loopback, loopback host names only."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from helpers import once_across_builds, read_until

from mgst.testbed.live.server import LiveServer, parse_live
from mgst.testbed.live.snapshot import Board
from mgst.testbed.live.view import resolve_token

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
DEADLINE = 20.0  # s: each thing awaited in the browser (the run's generation lasts 6 s)
METHODS = ("POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "PROPFIND")
PATHS = ("/", "/api/snapshot", "/static/live.js", "/api/stop", "/nothing")


def _need(path: str, what: str) -> None:
    """Skip without ``path``, except under CI (CI=true): there it fails, so that CI cannot pass by skipping."""
    if not os.access(path, os.X_OK):
        (pytest.fail if os.environ.get("CI") else pytest.skip)(f"{what} ({path}) is not installed")


def _request(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, dict, bytes]:
    """(status, headers, body) of one real HTTP request; redirects are not followed."""
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):  # noqa: ANN002, ANN003
            return None

    req = urllib.request.Request(url, method=method, headers=headers or {},
                                 data=b"x" if method in ("POST", "PUT", "PATCH") else None)
    try:
        with urllib.request.build_opener(NoRedirect).open(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _browser(tmp_path: Path):
    _need(CHROMIUM, "Chromium")
    _need(CHROMEDRIVER, "chromedriver")
    webdriver = pytest.importorskip("selenium.webdriver") if not os.environ.get("CI") else __import__(
        "selenium.webdriver", fromlist=["webdriver"])
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1", "--proxy-bypass-list=<-loopback>",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1400,1300", f"--user-data-dir={tmp_path / 'chromium'}"):
        opts.add_argument(flag)
    return webdriver.Chrome(options=opts, service=Service(CHROMEDRIVER))


def _await(what: str, check, deadline: float = DEADLINE):
    """Poll ``check()`` until it returns something true, within ``deadline`` s; its value."""
    end = time.monotonic() + deadline
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            pytest.fail(f"waited {deadline:g} s for {what}")
        time.sleep(0.1)


@once_across_builds
def test_live_page_of_a_real_run(tmp_path, no_children_left):
    """`mgst run` with its view on every address (0.0.0.0, so a token is required): the page, opened with the
    token, lists the run's machines, its job count goes up, the simulation arrives; no write is accepted."""
    driver = _browser(tmp_path)
    out = tmp_path / "run"
    exp = tmp_path / "hihi.toml"  # the paper's HiHi setting, with 2 replications in its simulations (time)
    exp.write_text((ROOT / "experiments" / "hihi-mfd-fd.toml").read_text().replace("replications = 10",
                                                                                     "replications = 2"))
    run = subprocess.Popen(
        [sys.executable, "-m", "mgst", "run", str(exp), "--duration", "6",
         "--time-unit", "0.5", "--out", str(out), "--quiet", "--live", "0.0.0.0:0"],  # noqa: S104
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        start_new_session=True)
    try:
        said = read_until(run, "live view at", 30)
        line = next(x for x in said.splitlines() if "live view at" in x)
        port = int(line.split("live view at http://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
        base = f"http://127.0.0.1:{port}"
        token_file = out / "live.token"
        assert token_file.stat().st_mode & 0o077 == 0, "the token file is readable by others"
        token = token_file.read_text().strip()
        assert token not in said  # never printed
        # off loopback: no token 401, a wrong one 403, the right one 200 (header) or a cookie (query)
        assert _request(base + "/api/snapshot")[0] == 401
        assert _request(base + "/api/snapshot", headers={"Authorization": "Bearer " + "x" * len(token)})[0] == 403
        status, _, body = _request(base + "/api/snapshot", headers={"Authorization": "Bearer " + token})
        assert status == 200 and json.loads(body)["experiment"] == "hihi-mfd-fd"
        # read-only: every other method on every path (the page's and others) is 405; GET of no endpoint 404
        for path in PATHS:
            for method in METHODS:
                status, headers, _ = _request(base + path, method, {"Authorization": "Bearer " + token})
                assert status == 405 and headers["Allow"] == "GET, HEAD", (method, path, status)
        assert _request(base + "/api/stop", headers={"Authorization": "Bearer " + token})[0] == 404

        driver.set_page_load_timeout(DEADLINE)
        driver.get(f"{base}/?token={token}")  # sets the cookie, then a URL without the token
        assert "token" not in driver.current_url
        names = _await("the machines", lambda: [e.get_attribute("data-machine") for e in
                                                driver.find_elements("css selector", "#machines tbody tr")])
        assert names == ["M1", "M2", "M3", "M4", "M5", "M6"]

        def done() -> int:
            text = driver.find_element("id", "jobs-done").text
            return int(text) if text.isdigit() else -1

        first = _await("a job count", lambda: done() >= 0 and driver.find_element("id", "phase").text == "generating"
                       and done() + 1)  # (+ 1: a count of 0 is a count)
        _await(f"the count of jobs done to go past {first - 1}", lambda: done() > first - 1)
        _await("the simulation beside the run",
               lambda: driver.find_element("id", "sim-status").text.startswith("Simulation:"))
        # the page's own requests cannot write either
        status = driver.execute_async_script(
            "const done = arguments[0]; fetch('/api/snapshot', {method: 'POST', body: 'x'})"
            ".then(r => done(r.status), e => done(String(e)));")
        assert status == 405
        driver.save_screenshot(str(tmp_path / "live-view.png"))
        assert run.wait(60) == 0
    finally:
        driver.quit()
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert (out / "summary.json").exists()
    shutil.rmtree(tmp_path / "chromium", ignore_errors=True)


def test_loopback_view_answers_loopback_host_names_only():
    """On loopback no token is needed, but a request naming another host (DNS rebinding) is refused."""
    board = Board()
    server = LiveServer(board, "127.0.0.1", 0).start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        assert _request(base + "/api/snapshot")[0] == 200
        assert _request(base + "/api/snapshot", headers={"Host": f"localhost:{server.port}"})[0] == 200
        assert _request(base + "/api/snapshot", headers={"Host": f"evil.example:{server.port}"})[0] == 403
        status, headers, body = _request(base + "/")
        assert status == 200 and b"/static/uPlot.iife.min.js" in body and headers["Cache-Control"] == "no-store"
        assert _request(base + "/static/uPlot.iife.min.js")[0] == 200  # the vendored chart library, served
        assert _request(base + "/static/../server.py")[0] == 404
    finally:
        server.close()


def test_token_policy():
    """Off loopback a token is required (no server without one); a short token is refused; on loopback none."""
    with pytest.raises(ValueError, match="needs a token"):
        LiveServer(Board(), "0.0.0.0", 0)  # noqa: S104
    with pytest.raises(ValueError, match="at least"):
        LiveServer(Board(), "0.0.0.0", 0, token="short")  # noqa: S104
    assert resolve_token("127.0.0.1", None, None, Path("/nonexistent")) == (None, None)
    assert parse_live("8421") == ("127.0.0.1", 8421)
    assert parse_live("[::1]:0") == ("::1", 0)
    for bad in ("host.example:80", "1.2.3.4:x", "70000", ":80"):
        with pytest.raises(ValueError):
            parse_live(bad)


def test_bad_live_option_is_a_usage_error(tmp_path):
    """A bad --live is a one-line error naming the option, exit 2, no traceback, and no journal left."""
    out = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "mgst", "run", str(ROOT / "experiments" / "hihi-mfd-fd.toml"),
                        "--out", str(out), "--live", "999.1.1.1:80"], capture_output=True, text=True, timeout=60,
                       cwd=ROOT)
    assert p.returncode == 2 and "--live" in p.stderr and "Traceback" not in p.stderr, p.stderr
    assert not (out / "journal.sqlite").exists()
    short = tmp_path / "short.token"
    short.write_text("short\n")
    p = subprocess.run([sys.executable, "-m", "mgst", "run", str(ROOT / "experiments" / "hihi-mfd-fd.toml"),
                        "--out", str(out), "--live", "0.0.0.0:0", "--live-token-file", str(short)],  # noqa: S104
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 2 and "--live-token-file" in p.stderr and "at least 16" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and not (out / "journal.sqlite").exists()


def _fake_mapper(periods: list, refusals: int = 0, silent: bool = False, suspected: bool = False,
                 suspicions: int = 0):
    """What the snapshot reads of a mapper, for one machine M1 of class "a" (plain objects, no run)."""
    from types import SimpleNamespace as NS

    from mgst.core.state import MachineState
    from mgst.model import Job
    from mgst.testbed.journal import JobLog, ReplicaLog

    stats = NS(suspicions=suspicions, discarded=0, discarded_time=0.0)
    rec = NS(silent=silent, suspected=suspected, cpu_share=0.5, replicas={}, stats=stats,
             state=MachineState.DOWN if (silent or suspected or periods[-1][1] is not None) else MachineState.FREE)
    jobs = {1: JobLog(Job(1, 0, 5.0, 1.0), 100.0, [7], done_by=7), 2: JobLog(Job(2, 0, 6.0, 1.0), 101.0, [8])}
    replicas = {7: ReplicaLog(7, 1, 0, None, None, 100.5, t6=102.0), 8: ReplicaLog(8, 2, 0, None, None, 101.5)}
    return NS(
        experiment=NS(name="x", policy=NS(name="fcfs"), classes=[NS(name="a")], machines=[NS(name="M1")],
                      simulation=NS(warmup=1.0)),
        core=NS(machines=[rec], running={}, queued_count=0, queues={}, all_bags={}, now=0.0),
        journal=NS(jobs=jobs, replicas=replicas, generation_end=None,
                   machines=[NS(name="M1", share=0.5, achieved=[0.5, 0.25], jobs_run=2, periods=periods,
                                registrations=1)]),
        conns=[NS(refusals=refusals, identity=b"id", clock=NS(offset=0.001, rtt=0.002))],
        t0=99.0, duration=100.0, time_unit=0.5, registered=lambda: 1, draining=lambda now: False,
        resuming=lambda: False, elapsed=lambda now: max(0.0, now - 99.0))


def test_snapshot_of_a_mapper():
    """States, the achieved share, a response counted, and a down shorter than the snapshots' period."""
    from mgst.testbed.live.snapshot import LivePublisher

    board = Board()
    pub = LivePublisher(board)
    pub.publish(_fake_mapper([[100.0, None]]), 103.0)
    snap = json.loads(board.latest)
    m = snap["machines"][0]
    assert (m["state"], m["share_achieved"], m["clock_offset_s"]) == ("up", 0.375, 0.001)
    c = snap["results"]["classes"][0]
    assert (c["jobs"], c["mean_response"]) == (1, 4.0)  # (102.0 - 100.0) / 0.5, job 2 not done
    assert snap["jobs"]["done"] == 1 and snap["series"]["rows"][-1][:2] == [4.0, 1]
    # down at 103.2 and up again at 103.6 between two snapshots: both on the timeline, at their instants
    pub.publish(_fake_mapper([[100.0, 103.2], [103.6, None]]), 104.0)
    events = [(e["kind"], e["at"]) for e in json.loads(board.latest)["events"]]
    assert events == [("registered", 100.0), ("down", 103.2), ("up", 103.6)]
    for kwargs, state in (({"refusals": 3}, "expelled"), ({"silent": True}, "silent"),
                          ({"suspected": True, "suspicions": 1}, "suspected"), ({"suspicions": 1}, "down")):
        pub.publish(_fake_mapper([[100.0, 104.5]], **kwargs), 105.0)
        assert json.loads(board.latest)["machines"][0]["state"] == state, kwargs
    kinds = [e["kind"] for e in json.loads(board.latest)["events"]]
    assert {"refused", "expelled", "silent", "suspected"} <= set(kinds)
    # two suspicions that began and ended between two snapshots (never seen in the "suspected" state)
    pub.publish(_fake_mapper([[100.0, 104.5]], suspicions=3), 106.0)
    last = json.loads(board.latest)["events"][-1]
    assert (last["kind"], last["at"], last["detail"]) == ("suspected", 106.0, "2 suspicion(s) by the policy")


@once_across_builds
def test_report_html_of_a_real_run_renders_offline_with_the_summary_s_numbers(tmp_path, no_children_left):
    """A real `mgst run` (no live view) leaves report.html; headless Chromium opens it from the file, with every
    host unresolvable and a dead proxy: it requests nothing (no resource, no fetch), and shows the jobs done, the
    mean response per class and overall with their intervals, and the simulation's, as summary.json has them;
    `mgst export` of the journal writes the same page."""
    out = tmp_path / "run"
    exp = tmp_path / "hihi.toml"
    exp.write_text((ROOT / "experiments" / "hihi-mfd-fd.toml").read_text().replace("replications = 10",
                                                                                     "replications = 2"))
    p = subprocess.run([sys.executable, "-m", "mgst", "run", str(exp), "--duration", "4", "--time-unit", "0.5",
                        "--out", str(out), "--quiet", "--no-live"], capture_output=True, text=True, timeout=180,
                       cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    page = (out / "report.html").read_text()
    assert "report.html" in p.stdout
    assert 'src="' not in page and 'href="' not in page  # every script and style inlined
    driver = _browser(tmp_path)
    try:
        driver.set_page_load_timeout(DEADLINE)
        driver.get((out / "report.html").as_uri())
        _await("the report drawn", lambda: driver.find_element("id", "phase").text == "over")
        assert driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)") == []
        assert driver.find_element("id", "jobs-done").text == str(summary["jobs_done"])
        rows = [[td.text for td in tr.find_elements("css selector", "td")]
                for tr in driver.find_elements("css selector", "#results tbody tr")]
        sim = summary["simulation"]

        def num(x) -> str:  # as the page writes a number (3 decimals; "-" for none) and an interval
            return "-" if x is None else f"{x:.3f}"

        def ci(c) -> str:
            return f"[{num(c[0])}, {num(c[1])}]" if c and None not in c else ""

        def row(name: str, t: dict, m: dict) -> list[str]:
            return [name, str(t["jobs"]), num(t["mean_response"]), ci(t["ci95"]), num(m["mean_response"]),
                    ci(m["ci95"])]

        expected = [row(c["name"], c, m) for c, m in zip(summary["classes"], sim["classes"])]
        expected.append(row("all", summary["overall"], sim["overall"]))
        assert any(r[2] != "-" for r in expected)  # (figures, not only dashes)
        assert rows == expected
        names = [e.get_attribute("data-machine") for e in driver.find_elements("css selector", "#machines tbody tr")]
        assert names == ["M1", "M2", "M3", "M4", "M5", "M6"]
        assert driver.find_elements("css selector", "#plot-jobs canvas")  # the plots are drawn
        driver.save_screenshot(str(tmp_path / "report.png"))
    finally:
        driver.quit()
    p = subprocess.run([sys.executable, "-m", "mgst", "export", str(out)], capture_output=True, text=True,
                       timeout=180, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    timing = re.compile(r'"elapsed_s":[0-9.e+-]+,"jobs_per_s":[0-9.e+-]+')  # (the simulation's own speed)
    again = (out / "report.html").read_text()
    assert len(timing.findall(page)) == 1 and timing.sub("", again) == timing.sub("", page)
    shutil.rmtree(tmp_path / "chromium", ignore_errors=True)


def test_snapshot_lists_the_queues_by_class_first_to_last():
    """The queues were listed longest first: at a load where class 4 waits most, class 4 to 1."""
    from collections import deque
    from types import SimpleNamespace as NS

    from mgst.testbed.live.snapshot import LivePublisher

    board = Board()
    mapper = _fake_mapper([[100.0, None]])
    mapper.experiment.classes = [NS(name=str(i)) for i in range(1, 5)]
    mapper.core.queues = {3: deque(range(9)), 1: deque(range(2)), 0: deque(range(1)), 2: deque(range(5))}
    LivePublisher(board).publish(mapper, 103.0)
    queues = json.loads(board.latest)["queues"]
    assert queues == [{"queue": "class 1", "waiting": 1}, {"queue": "class 2", "waiting": 2},
                      {"queue": "class 3", "waiting": 5}, {"queue": "class 4", "waiting": 9}]


def _snapshot_with(series_rows: list, running: list[list[int]]) -> dict:
    """A live view snapshot of a run in progress: machines M1.. running these jobs, two queues, these plot rows."""
    return {
        "version": 1, "at": 0.0, "experiment": "x", "policy": "fcfs", "phase": "generating", "elapsed_s": 50.0,
        "duration_s": 100.0, "time_unit_s": 1.0, "warmup": 0.0, "registered": len(running),
        "jobs": {"generated": 9, "done": 1, "running": 3, "queued": 4, "discarded": 0, "wasted_time": 0.0},
        "machine_count": len(running), "machine_states": {"up": len(running)},
        "machines": [{"name": f"M{j + 1}", "state": "up", "activity": "busy", "share_requested": 1.0,
                      "share_reported": 1.0, "share_achieved": 1.0, "running": ids, "jobs_run": 4, "refusals": 0,
                      "clock_offset_s": 0.001, "rtt_s": 0.002, "registrations": 1} for j, ids in enumerate(running)],
        "queues": [{"queue": "class 1", "waiting": 1}, {"queue": "class 2", "waiting": 3}],
        "results": {"classes": [], "overall": None, "ci_method": ""},
        "simulation": {"status": "done", "summary": {"overall": {"mean_response": 0.205}, "classes": [],
                                                     "replications": 1, "horizon": 1.0, "seed": 1}},
        "events": [], "series": {"columns": [], "rows": series_rows},
    }


def test_the_page_says_running_jobs_by_id_lists_queues_in_order_and_gives_each_plot_several_y_ticks(tmp_path):
    """In Chromium, on the live view's page given a snapshot (as report.html is): a machine's running jobs read
    as IDs ("jobs 17, 23", where a bare "17 23" read like counts), the queues in the snapshot's order (class 1
    first), and each plot's y axis has at least three ticks: a mean response settling near 0.2 had one or two."""
    from mgst.testbed.report import render

    rows = [[i * 0.5, i, 3, 2, 6, 0.24 - 0.0005 * i] for i in range(100)]  # a response settling from 0.24 to 0.19
    page = tmp_path / "view.html"
    page.write_text(render(_snapshot_with(rows, [[17, 23], [5], []])))
    driver = _browser(tmp_path)
    try:
        driver.set_page_load_timeout(DEADLINE)
        driver.get(page.as_uri())
        _await("the page drawn", lambda: driver.find_elements("css selector", "#machines tbody tr"))
        header = [th.text for th in driver.find_elements("css selector", "#machines thead th")]
        cells = [tr.find_elements("css selector", "td")[header.index("running")].text
                 for tr in driver.find_elements("css selector", "#machines tbody tr")]
        assert cells == ["jobs 17, 23", "job 5", "-"]
        queues = [tr.find_elements("css selector", "td")[0].text
                  for tr in driver.find_elements("css selector", "#queues tbody tr")]
        assert queues == ["class 1", "class 2"]
        ticks = driver.execute_script("return Object.fromEntries(Object.entries(window.MGST_PLOTS)"
                                      ".map(([name, u]) => [name, u.axes[1]._splits]))")
        assert set(ticks) == {"jobs", "response", "up"}
        assert all(len(t) >= 3 for t in ticks.values()), ticks
        assert ticks["response"][0] == 0
    finally:
        driver.quit()
    shutil.rmtree(tmp_path / "chromium", ignore_errors=True)
