"""The mgst command as a user runs it: output contracts, files written, errors."""

from __future__ import annotations

import csv
import hashlib
import json
import os
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
             "--out", str(tmp_path), "--jobs")  # jobs.csv only on request (tests/test_simulate_outputs.py)
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


def test_a_bag_list_arrival_at_or_after_the_horizon_is_warned_of(tmp_path):
    """It was left out without a word (2 bags counted of 3)."""
    path = tmp_path / "late.toml"
    path.write_text('[workload]\nkind = "bag_list"\nbags = [{at = 0.0, tasks = [[0, 1.0]]}, {at = 50.0, tasks = '
                    '[[0, 1.0]]}, {at = 5000.0, tasks = [[0, 1.0]]}]\n[machines]\nrates = [[1.0]]\n[policy]\n'
                    'name = "fcfs"\n[simulation]\nhorizon = 200.0\nwarmup = 0.0\nreplications = 2\n')
    p = mgst("simulate", str(path), "--json")
    assert p.returncode == 0, p.stderr
    assert "1 of the workload's 3 arrivals come at or after the horizon (200): they are not simulated" in p.stderr
    p = mgst("simulate", str(path), "--json", "--horizon", "5001")
    assert p.returncode == 0 and "warning" not in p.stderr, p.stderr


def test_bad_flags_are_refused():
    p = mgst("simulate", str(HIHI), "--warmup", "5000")
    assert p.returncode == 2 and "--warmup" in p.stderr


def test_policies_lists_the_builtins():
    p = mgst("policies")
    assert p.returncode == 0
    summaries: dict[str, str] = {}
    column = None
    for line in p.stdout.splitlines():  # a name, then its summary wrapped under one column
        if not line.startswith(" "):
            name, text = line.split(maxsplit=1)
            column = column or line.index(text)
            assert line.index(text) == column, line  # (aligned, however long the name)
            summaries[name] = text
        else:
            assert line[:column].strip() == "" and line[column] != " ", line
            summaries[name] += " " + line.strip()
    assert {"fcfs", "lpas_dg", "random", "wqr_ft", "pri_cr_wait"} <= summaries.keys()
    # Each with the first paragraph of its docstring, compiled (mypyc drops class docstrings) or not: whole
    # sentences, without reST markup.
    assert summaries["fcfs"] == "First come, first served over all classes."
    assert all(len(summary) > 12 and summary.endswith(".") and "``" not in summary and ":class:" not in summary
               for summary in summaries.values()), summaries


def test_a_policy_from_outside_mgst_runs_with_import(tmp_path):
    (tmp_path / "my_policies.py").write_text(
        "from mgst.policies import register\n"
        "from mgst.policies.base import Policy\n\n\n"
        "@register\n"
        "class NewestFirst(Policy):\n"
        "    name = 'newest_first'\n"
        "    hooks = frozenset({'choose'})\n\n"
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


BAD_RATES = ("[workload]\narrival_rates = [1e300]\n[machines]\nrates = [[4.0, 4.0]]\n[policy]\nname = \"lpas_dg\"\n")


@pytest.mark.parametrize(("args", "key"), [
    (("run", str(HIHI), "--duration", "-1"), "--duration"),
    (("run", str(HIHI), "--time-unit", "0"), "--time-unit"),
    (("mapper", str(HIHI), "--duration", "-1"), "--duration"),
    (("mapper", str(HIHI), "--bind", "127.0.0.1:5555"), "--bind"),
    (("simulate", str(HIHI), "--horizon", "1e300"), "--horizon"),
    (("puller", "--connect", "127.0.0.1:5555", "--machine", "M1", "--insecure"), "tcp://"),
    (("puller", "--connect", "tcp://127.0.0.1:5555", "--machine", "M1"), "--keys"),
    (("export", "/nonexistent/run"), "no such folder"),
    (("run", str(HIHI), "--import", "no_such_module_here"), "--import"),
])
def test_bad_inputs_get_a_clear_message_and_exit_code_2(args, key):
    p = mgst(*args, timeout=60)
    assert p.returncode == 2, (p.returncode, p.stderr[-1500:])
    assert key in p.stderr and "Traceback" not in p.stderr, p.stderr[-1500:]


def test_absurd_rates_and_horizons_in_a_file_are_refused_naming_the_key(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text(BAD_RATES)
    for command in ("simulate", "run"):
        p = mgst(command, str(f), timeout=60)
        assert p.returncode == 2 and "workload.arrival_rates" in p.stderr and "Traceback" not in p.stderr, p.stderr
    f.write_text(BAD_RATES.replace("1e300", "3.0") + "[simulation]\nhorizon = 1e300\n")
    p = mgst("simulate", str(f), timeout=60)
    assert p.returncode == 2 and "simulation.horizon" in p.stderr, p.stderr


def test_a_mapper_reachable_from_outside_needs_keys_or_an_explicit_insecure_flag(tmp_path):
    p = mgst("mapper", str(HIHI), "--bind", "tcp://*:0", "--out", str(tmp_path / "r"), timeout=60)
    assert p.returncode == 2 and "--keys" in p.stderr and "--insecure" in p.stderr, p.stderr


def test_mgst_keys_makes_private_secret_keys(tmp_path):
    p = mgst("keys", str(tmp_path / "k"), "--pullers", "M1", "M2")
    assert p.returncode == 0, p.stderr
    k = tmp_path / "k"
    assert sorted(x.name for x in (k / "authorized").iterdir()) == ["M1.key", "M2.key"]
    for secret in [k / "mapper.key_secret", *(k / "pullers").iterdir()]:
        assert secret.suffix == ".key_secret" and secret.stat().st_mode & 0o077 == 0, secret
    p = mgst("keys", str(tmp_path / "k"), "--pullers", "../evil")
    assert p.returncode == 2 and "cannot name a key" in p.stderr
    p = mgst("keys", str(tmp_path / "k2"), "--pullers", "M1", "m1")  # one file where names ignore case
    assert p.returncode == 2 and "'M1' and 'm1' differ only in case" in p.stderr, p.stderr
    assert not (tmp_path / "k2").exists()


def test_mgst_keys_force_says_when_the_mapper_s_pair_is_replaced(tmp_path, capsys):
    """--force with one puller named replaced the mapper's pair too, without a word: every other lab machine's copy
    of mapper.key went stale, its handshake failing."""
    from mgst.cli import main  # noqa: PLC0415

    k = tmp_path / "k"
    assert main(["keys", str(k), "--pullers", "M1", "M2"]) == 0
    assert "warning" not in capsys.readouterr().err
    before = (k / "mapper.key").read_bytes()
    assert main(["keys", str(k), "--pullers", "M1", "--force"]) == 0
    err = capsys.readouterr().err
    assert (k / "mapper.key").read_bytes() != before
    assert "mgst: warning: the mapper's key pair was replaced too: every lab machine's copy of" in err, err


def test_a_users_own_policy_runs_on_the_testbed_with_import(tmp_path):
    """The product's first promise: a policy written outside mgst runs on the testbed (and its simulation)."""
    (tmp_path / "my_policies.py").write_text(
        "from mgst.policies import register\nfrom mgst.policies.fcfs import FCFS\n\n\n"
        "@register\nclass Mine(FCFS):\n    \"\"\"FCFS under another name.\"\"\"\n\n    name = \"mine\"\n")
    (tmp_path / "clash.py").write_text(
        "from mgst.policies import register\nfrom mgst.policies.fcfs import FCFS\n\n\n"
        "@register\nclass Clash(FCFS):\n    name = \"fcfs\"\n")
    exp = tmp_path / "exp.toml"
    exp.write_text("[workload]\narrival_rates = [3.0]\n[machines]\nrates = [[4.0, 4.0]]\n[policy]\nname = \"mine\"\n"
                   "[testbed]\ntime_unit = 0.05\nduration = 1.5\n[simulation]\nseed = 42\n")
    env_root = f"{tmp_path}"
    p = subprocess.run([sys.executable, "-m", "mgst", "run", str(exp), "--import", "my_policies", "--out",
                        str(tmp_path / "out"), "--json", "--quiet", "--seed", "5"], capture_output=True, text=True,
                       timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": env_root})
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(p.stdout)
    assert d["policy"] == "mine" and d["jobs_done"] == d["jobs_generated"] > 0
    assert d["seed"] == 5 and d["simulation"]["seed"] == 5  # the seed used, not 0
    p = subprocess.run([sys.executable, "-m", "mgst", "run", str(exp), "--import", "clash"], capture_output=True,
                       text=True, timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": env_root})
    assert p.returncode == 2 and "built in" in p.stderr and "Traceback" not in p.stderr, p.stderr[-2000:]


def test_the_largest_seed_a_run_keeps_goes_through_its_journal_and_the_wire(tmp_path):
    """2**63 - 1, the largest seed (SQLite's and msgpack's integers): the run, its pullers and its export take it; one
    more is refused before anything is made (test_bad_inputs.py: it was a traceback once the run had begun)."""
    from mgst.config import MAX_SEED  # noqa: PLC0415

    exp = tmp_path / "exp.toml"
    exp.write_text("[workload]\narrival_rates = [3.0]\n[machines]\nrates = [[4.0, 4.0]]\n[policy]\nname = \"fcfs\"\n"
                   "[testbed]\ntime_unit = 0.05\nduration = 1.0\n")
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "mgst", "run", str(exp), "--out", str(out), "--json", "--quiet",
                        "--seed", str(MAX_SEED)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(p.stdout)
    assert d["seed"] == d["simulation"]["seed"] == MAX_SEED and d["jobs_done"] == d["jobs_generated"] > 0
    written = json.loads((out / "summary.json").read_text())
    p = subprocess.run([sys.executable, "-m", "mgst", "export", str(out)], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    exported = json.loads((out / "summary.json").read_text())
    assert exported["seed"] == written["seed"] == MAX_SEED
    assert (exported["jobs_done"], exported["overall"], exported["simulation"]["overall"]) == (
        written["jobs_done"], written["overall"], written["simulation"]["overall"])


def test_run_policy_runs_another_policy_than_the_file_s_on_the_testbed_and_beside_it(tmp_path):
    """`mgst run --policy`, as `mgst simulate --policy`: the file's [policy] replaced, its options kept only for the
    policy the file names (a researcher compares policies on one experiment file without copying it)."""
    exp = tmp_path / "exp.toml"
    exp.write_text("[workload]\narrival_rates = [3.0]\n[machines]\nrates = [[4.0, 4.0]]\n[policy]\nname = \"lpas_dg\"\n"
                   "tolerance = 0.1\n[testbed]\ntime_unit = 0.05\nduration = 1.0\n")
    p = subprocess.run([sys.executable, "-m", "mgst", "run", str(exp), "--policy", "random", "--out",
                        str(tmp_path / "out"), "--json", "--quiet"], capture_output=True, text=True, timeout=120,
                       cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(p.stdout)
    assert d["policy"] == d["simulation"]["policy"] == "random" and d["jobs_done"] == d["jobs_generated"] > 0


def test_simulate_imports_nothing_of_the_testbed():
    # The user waits for the command: the mapper, its journal, ZeroMQ, SQLite, the puller and scipy took 0.7 s of a
    # 6.3 s run (issue 20). (One replication's interval of batch means takes its t quantile from mgst.student_t.)
    args = ["simulate", str(HIHI), "--horizon", "200", "--replications", "1", "--workers", "1", "--json"]
    code = f"import sys; from mgst.cli import main; main({args!r}); print(' '.join(sorted(sys.modules)))"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    summary, modules = p.stdout.splitlines()
    assert json.loads(summary)["overall"]["jobs"] > 0
    testbed = ("zmq", "sqlite3", "msgpack", "scipy", "puller", "mgst.testbed", "mgst.wire")
    assert [m for m in modules.split() if m.startswith(testbed)] == []


@pytest.mark.parametrize("replications", ["1", "2"])
def test_paper_json_is_strict_json_with_null_for_an_interval_that_cannot_be_given(replications):
    """`mgst paper --json` with an interval that cannot be computed (two replications: too few) printed NaN, which
    strict parsers (and JavaScript's JSON.parse) refuse; it writes null. One replication has batch means."""
    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    p = subprocess.run([sys.executable, "-m", "mgst", "paper", "hihi-mfd-fd", "--json", "--replications", replications,
                        "--horizon", "40", "--warmup", "2"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    setting = json.loads(p.stdout, parse_constant=refuse)["settings"][0]
    rows = setting["rows"]
    # what reruns it: its seed (the file's), warm-up and file, besides the horizon and replications
    digest = hashlib.sha256((ROOT / "experiments" / "hihi-mfd-fd.toml").read_bytes()).hexdigest()
    assert {k: setting[k] for k in ("replications", "horizon", "warmup", "seed", "experiment_sha256")} == {
        "replications": int(replications), "horizon": 40.0, "warmup": 2.0, "seed": 1, "experiment_sha256": digest}
    given = [r for r in rows if r["ci95"] != [None, None]]
    assert all(0 < r["ci95"][0] <= r["mgst"] <= r["ci95"][1] for r in given), rows
    if replications == "2":  # (two short replications apart: Student's t(1) = 12.7 reaches below 0)
        assert len(given) < len(rows), rows
    else:
        assert given == rows


def test_a_sweep_says_where_its_plots_and_a_paper_s_tables_are():
    """Casanova's sweep said "and 1 plot in plots/" for table-m5.csv, written beside sweep.csv; plots/ stayed empty."""
    from mgst.cli.sweep_commands import _plots_written  # noqa: PLC0415

    out = Path("/runs/s")
    assert _plots_written([out / "plots" / "a.png", out / "plots" / "b.png"], out) == " and 2 plots in plots/"
    assert _plots_written([out / "table-m5.csv", out / "figure2.png"], out) == " and table-m5.csv figure2.png"
    assert _plots_written([out / "plots" / "a.png", out / "table-m5.csv"], out) == " and 1 plot in plots/, table-m5.csv"
    assert _plots_written([], out) == ""


def test_the_insecure_warning_names_no_port_0(caplog):
    """`mgst run --insecure` warned that anyone reaching tcp://127.0.0.1:0 could register: no one can reach port 0."""
    import logging  # noqa: PLC0415

    from mgst.wire.security import security_mode  # noqa: PLC0415

    with caplog.at_level(logging.WARNING, logger="mgst.wire.security"):
        assert security_mode("tcp://127.0.0.1:0", None, True) == "none (--insecure)"
        assert security_mode("tcp://10.0.0.1:5555", None, True) == "none (--insecure)"
    said = [r.getMessage() for r in caplog.records]
    assert "anyone who reaches tcp://127.0.0.1 (on the free port it binds) can register" in said[0]
    assert "anyone who reaches tcp://10.0.0.1:5555 can register" in said[1]


def test_simulate_json_records_the_version_and_the_experiment_file_it_ran(capsys):
    """A result says what reruns it: the seed, horizon, warm-up and replications were there; the file's content (an
    edited file of the same name runs other jobs) and mgst's version were not."""
    from importlib.metadata import version  # noqa: PLC0415

    from mgst.cli import main  # noqa: PLC0415

    digest = hashlib.sha256((ROOT / "experiments" / "hihi-mfd-fd.toml").read_bytes()).hexdigest()
    base = ["simulate", str(ROOT / "experiments" / "hihi-mfd-fd.toml"), "--horizon", "40", "--warmup", "2",
            "--replications", "2", "--workers", "1", "--json"]
    assert main(base) == 0
    one = json.loads(capsys.readouterr().out)
    assert main([*base, "--policy", "fcfs", "--policy", "lpas_dg"]) == 0
    two = json.loads(capsys.readouterr().out)
    for d in (one, two):
        assert (d["mgst_version"], d["experiment_sha256"]) == (version("mgst"), digest)
