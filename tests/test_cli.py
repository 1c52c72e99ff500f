"""The mgst command as a user runs it: output contracts, files written, errors."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HIHI = ROOT / "experiments" / "hihi-mfd-fd.toml"
FIGURE_1 = ["ID", "Secondary ID", "Job Class", "Server", "Date Submitted", "Date Sent", "Date Started",
            "Date Done", "Status", "T/O"]


def mgst(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mgst", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def test_json_is_exactly_one_object_on_stdout():
    p = mgst("simulate", str(HIHI), "--horizon", "200", "--warmup", "20", "--replications", "3", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)  # the whole of stdout: one object, nothing else
    assert d["experiment"] == "hihi-mfd-fd" and d["mode"] == "simulation" and d["policy"] == "lpas_dg"
    assert [c["class"] for c in d["classes"]] == [1, 2, 3, 4]
    for entry in [*d["classes"], d["overall"]]:
        lo, hi = entry["ci95"]
        assert entry["jobs"] > 0 and lo < entry["mean_response"] < hi
    assert d["overall"]["jobs"] == sum(c["jobs"] for c in d["classes"])
    assert d["replications"] == 3


def test_table_and_csv_files(tmp_path):
    p = mgst("simulate", str(HIHI), "--horizon", "100", "--warmup", "10", "--replications", "2",
             "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert "Overall" in p.stdout and "95 % CI" in p.stdout
    with open(tmp_path / "jobs.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0][:10] == FIGURE_1
    body = rows[1:]
    header = rows[0]
    assert {r[header.index("Status")] for r in body} == {"Done"}
    # every job of each replication once
    keys = [(r[header.index("Replication")], r[header.index("ID")]) for r in body]
    assert len(keys) == len(set(keys))
    counted = sum(r[header.index("Counted")] == "Yes" for r in body)
    with open(tmp_path / "summary.csv", newline="") as f:
        summary = list(csv.DictReader(f))
    overall = next(r for r in summary if r["Class"] == "Overall")
    assert int(overall["Jobs"]) == counted
    for r in body[:50]:
        sub, done = float(r[header.index("Date Submitted")]), float(r[header.index("Date Done")])
        assert float(r[header.index("Response Time")]) == pytest.approx(done - sub, abs=1e-5)


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda s: s.replace("availability = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0]", "availability = [1.0, 1.0]"),
         "machines.availability"),
        (lambda s: s.replace('name = "lpas_dg"', 'name = "lpas"'), "policy.name"),
        (lambda s: s.replace("horizon =", "horizn ="), "simulation.horizn"),
        (lambda s: s.replace("arrival_rates = [2.25, 4.50, 7.20, 12.60]", "arrival_rates = [2.25, 4.5]"),
         "workload.arrival_rates"),
    ],
)
def test_a_wrong_file_gets_one_clear_message(tmp_path, edit, key):
    text = HIHI.read_text()
    bad = edit(text)
    assert bad != text, "the edit did not apply: the test is out of date with the file"
    path = tmp_path / "bad.toml"
    path.write_text(bad)
    p = mgst("simulate", str(path))
    assert p.returncode == 2
    assert key in p.stderr and "Traceback" not in p.stderr
    assert p.stdout == ""


def test_overload_is_warned_with_the_load(tmp_path):
    path = tmp_path / "over.toml"
    path.write_text(HIHI.read_text().replace("arrival_rates = [2.25, 4.50, 7.20, 12.60]",
                                             "arrival_rates = [4.5, 9.0, 14.4, 25.2]"))
    p = mgst("simulate", str(path), "--horizon", "20", "--warmup", "2", "--replications", "2", "--json")
    assert p.returncode == 0, p.stderr
    assert "overloaded" in p.stderr and "%" in p.stderr
    json.loads(p.stdout)


def test_bad_flags_are_refused():
    p = mgst("simulate", str(HIHI), "--warmup", "5000")
    assert p.returncode == 2 and "--warmup" in p.stderr


def test_policies_lists_the_builtins():
    p = mgst("policies")
    assert p.returncode == 0
    names = {line.split()[0] for line in p.stdout.splitlines()}
    assert {"fcfs", "lpas_dg", "random", "wqr_ft"} <= names


def test_a_policy_from_outside_mgst_runs_with_import(tmp_path):
    (tmp_path / "my_policies.py").write_text(
        "from mgst.policies import register\n"
        "from mgst.policies.base import Policy\n\n\n"
        "@register\n"
        "class NewestFirst(Policy):\n"
        "    name = 'newest_first'\n\n"
        "    def choose(self, view, machine):\n"
        "        heads = [q.head for q in view.queues.values() if q.head is not None]\n"
        "        return max(heads, key=lambda r: r.job.submitted, default=None)\n"
    )
    path = tmp_path / "exp.toml"
    path.write_text(HIHI.read_text().replace('name = "lpas_dg"', 'name = "newest_first"'))
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path)}
    p = subprocess.run(
        [sys.executable, "-m", "mgst", "simulate", str(path), "--import", "my_policies", "--horizon", "50",
         "--warmup", "5", "--replications", "2", "--workers", "2", "--json"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=env,
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["policy"] == "newest_first"
    p = mgst("simulate", str(path))  # without --import the name is unknown, and said so
    assert p.returncode == 2 and "newest_first" in p.stderr
