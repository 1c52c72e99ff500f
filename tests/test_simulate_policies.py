"""`mgst simulate --policy`: a policy in place of the file's, and several compared on the same jobs (the same
seed: common random numbers), each exactly as its own run would give it."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from mgst.cli import main

ROOT = Path(__file__).resolve().parents[1]
HIHI = str(ROOT / "experiments" / "hihi-mfd-fd.toml")  # (its policy: lpas_dg, with options)
SHORT = ["--horizon", "60", "--warmup", "6", "--replications", "2", "--workers", "1", "--quiet"]


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["simulate", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _numbers(summary: dict) -> dict:
    """A summary's results, less how long it took to make them and what made them (mgst's version, the file's
    digest: a file naming the policy is another file)."""
    return {k: v for k, v in summary.items()
            if k not in ("elapsed_s", "jobs_per_s", "mgst_version", "experiment_sha256")}


def test_a_policy_given_runs_as_a_file_that_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--policy fcfs on a file of lpas_dg gives what the same file naming fcfs gives (fcfs's defaults: the file's
    options are lpas_dg's); --policy naming the file's own policy keeps the file's options."""
    text = Path(HIHI).read_text()
    assert 'name = "lpas_dg"' in text
    fcfs_file = tmp_path / "hihi-mfd-fd.toml"  # (same stem: the same experiment name)
    policy_table = text[text.index("[policy]"):]
    policy_table = policy_table[:policy_table.index("\n[", 1) + 1] if "\n[" in policy_table[1:] else policy_table
    fcfs_file.write_text(text.replace(policy_table, '[policy]\nname = "fcfs"\n'))
    given = _json(capsys, HIHI, "--policy", "fcfs", *SHORT)
    named = _json(capsys, str(fcfs_file), *SHORT)
    assert given["policy"] == "fcfs" and _numbers(given) == _numbers(named)
    assert _numbers(_json(capsys, HIHI, "--policy", "lpas_dg", *SHORT)) == _numbers(_json(capsys, HIHI, *SHORT))


def test_several_policies_are_each_as_their_own_run_side_by_side(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    both = _json(capsys, HIHI, "--policy", "fcfs", "--policy", "lpas_dg", *SHORT)
    assert [s["policy"] for s in both["policies"]] == ["fcfs", "lpas_dg"]
    for summary in both["policies"]:
        alone = _json(capsys, HIHI, "--policy", summary["policy"], *SHORT)
        assert _numbers(summary) == _numbers(alone)
    rows = both["comparison"]["rows"]
    assert [r["row"] for r in rows] == [*(c["name"] for c in both["policies"][0]["classes"]), "Overall"]
    overall = rows[-1]["by_policy"]
    assert overall["fcfs"]["beyond_first"] is None and isinstance(overall["lpas_dg"]["beyond_first"], bool)
    assert overall["lpas_dg"]["mean"] == pytest.approx(both["policies"][1]["overall"]["mean_response"], abs=1e-6)

    out = tmp_path / "out"
    assert main(["simulate", HIHI, "--policy", "fcfs", "--policy", "lpas_dg", *SHORT, "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].startswith("hihi-mfd-fd: 2 policies on the same jobs (seed ")
    assert text.splitlines()[1].split() == ["Class", "fcfs", "lpas_dg"], text
    for name in ("fcfs", "lpas_dg"):
        with open(out / name / "summary.csv", newline="") as f:
            assert list(csv.DictReader(f)), name


@pytest.mark.parametrize(("args", "said"), [
    (["--policy", "lpas"], "--policy: unknown policy 'lpas' (did you mean 'lpas_dg'?); known: "),
    (["--policy", "secf"], "--policy: unknown policy 'secf' (a policy of your own: --import the module that "
                           "registers it, its class decorated with @register and its name that one); known: "),
    (["--policy", "fcfs", "--policy", "fcfs"], "--policy fcfs is given twice"),
])
def test_a_wrong_policy_is_one_error_line(args: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", HIHI, *args, *SHORT]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err and "Traceback" not in err, err


def test_policies_on_the_same_jobs_are_compared_replication_by_replication(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Both policies ran the same jobs (common random numbers): the comparison tested whether their intervals were
    disjoint, which overlapping intervals of two positively correlated means hide (a statistician's run: FCFS
    against LPAS_DG, overall 0.747 (0.193, 1.302) against 0.204 (0.183, 0.225), no '*', where the paired difference
    is 0.544 (0.008, 1.079)). The test pairs the two jobs.csv files' per-replication means itself."""
    import math  # noqa: PLC0415
    import statistics  # noqa: PLC0415

    args = [HIHI, "--horizon", "100", "--warmup", "10", "--replications", "5", "--workers", "1"]
    out = tmp_path / "out"
    assert main(["simulate", *args, "--policy", "lpas_dg", "--policy", "fcfs", "--out", str(out), "--jobs"]) == 0
    capsys.readouterr()

    def means(policy: str) -> dict[tuple[int, str], float]:
        by: dict[tuple[int, str], list[float]] = {}
        with open(out / policy / "jobs.csv", newline="") as f:
            for r in csv.DictReader(f):
                if r["Counted"] == "Yes":
                    for key in ((int(r["Replication"]), r["Job Class"]), (int(r["Replication"]), "Overall")):
                        by.setdefault(key, []).append(float(r["Response Time"]))
        return {k: sum(v) / len(v) for k, v in by.items()}

    first, other = means("lpas_dg"), means("fcfs")
    d = _json(capsys, *args, "--policy", "lpas_dg", "--policy", "fcfs")["comparison"]
    t4 = 2.7764451051977987  # t(4, 0.975)
    for row in d["rows"]:
        diffs = [other[(r, row["row"])] - first[(r, row["row"])] for r in range(5)
                 if (r, row["row"]) in first and (r, row["row"]) in other]
        mine = statistics.fmean(diffs)
        half = t4 * statistics.stdev(diffs) / math.sqrt(5)
        got = row["by_policy"]["fcfs"]
        assert len(diffs) == 5 and got["difference_from_first"]["replications"] == 5
        assert got["difference_from_first"]["mean"] == pytest.approx(mine, abs=1e-5)
        assert got["difference_from_first"]["ci95"] == [pytest.approx(mine - half, abs=1e-5),
                                                        pytest.approx(mine + half, abs=1e-5)]
        assert got["beyond_first"] is (not mine - half <= 0 <= mine + half)
        assert "difference_from_first" not in row["by_policy"]["lpas_dg"]
    overall = d["rows"][-1]["by_policy"]["fcfs"]
    assert overall["beyond_first"] is True  # (their intervals overlap: the unpaired test said nothing)
    lp = d["rows"][-1]["by_policy"]["lpas_dg"]["ci95"]
    assert not (overall["ci95"][0] > lp[1] or overall["ci95"][1] < lp[0])
    assert main(["simulate", *args, "--policy", "lpas_dg", "--policy", "fcfs"]) == 0
    assert "replication by replication on the same jobs (paired), excludes 0" in capsys.readouterr().out
