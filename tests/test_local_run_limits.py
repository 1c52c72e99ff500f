"""`mgst run` starts one puller process per machine: it checks their memory against the machine's before it
starts any (a 2,000-machine file asked for some 84 GB of a 23 GB machine), and a puller that cannot be started
is one error line, the run's journal removed (it was BlockingIOError's traceback).

No test here starts a process: Popen is replaced by one that refuses, as a machine out of processes would."""

from __future__ import annotations

import subprocess
from collections import namedtuple
from pathlib import Path

import psutil
import pytest

from mgst.cli import main

MACHINES = 2000
AVAILABLE = 23_000_000_000  # bytes: the probe's machine
FILE = ('[workload]\narrival_rates = [2.0]\n[machines]\npower = {{value = 10.0, count = {n}}}\n'
        '[policy]\nname = "fcfs"\n[testbed]\nduration = 1.0\ntime_unit = 0.1\n')
Memory = namedtuple("Memory", "total available percent used free")


@pytest.fixture
def refused_forks(monkeypatch) -> list[list[str]]:
    """subprocess.Popen refusing as fork(2) does when the machine is out of processes; the argvs it was asked."""
    asked: list[list[str]] = []

    def refuse(argv, *args, **kwargs):
        asked.append(list(argv))
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    return asked


def _run(args: list[str], capsys) -> tuple[int, str]:
    try:
        code = main(args)
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def test_more_pullers_than_the_memory_holds_are_refused_before_any_starts(tmp_path, monkeypatch, refused_forks,
                                                                           capsys):
    monkeypatch.setattr(psutil, "virtual_memory", lambda: Memory(32 << 30, AVAILABLE, 30.0, 0, 0))
    exp = tmp_path / "big.toml"
    exp.write_text(FILE.format(n=MACHINES))
    code, err = _run(["run", str(exp), "--out", str(tmp_path / "out"), "--insecure", "--no-live"], capsys)
    assert code == 2 and "Traceback" not in err, err
    assert err.strip() == ("mgst: error: machines: 2,000 local pullers need about 117.4 GB (56 MiB each), and this "
                           "machine has 23.0 GB available: run fewer machines here, or their pullers on lab machines "
                           "('mgst lab up', then 'mgst mapper')")
    assert not refused_forks and not (tmp_path / "out").exists()


def test_a_puller_that_cannot_be_started_is_one_error_line_and_leaves_no_journal(tmp_path, refused_forks, capsys):
    exp = tmp_path / "small.toml"
    exp.write_text(FILE.format(n=2))
    out = tmp_path / "out"
    code, err = _run(["run", str(exp), "--out", str(out), "--insecure", "--no-live", "--quiet"], capsys)
    assert "Traceback" not in err and "Logging error" not in err and code == 1, err
    # (the log's own lines, such as --insecure's warning, may come before it, as from the command line)
    assert [line for line in err.splitlines() if "error" in line] == [
        "mgst: error: cannot start the puller of M1 (1 of 2): Resource temporarily unavailable: "
        "run fewer machines here, or their pullers on lab machines ('mgst lab up', then 'mgst mapper')"]
    assert len(refused_forks) == 1 and "puller" in refused_forks[0]
    assert not out.exists()  # (no journal, and the pullers' log was empty: a start that fails keeps nothing)


def test_the_puller_memory_used_for_the_check_is_what_a_puller_takes():
    """PULLER_MEMORY against a measure of this interpreter with the puller's modules imported (what a puller is
    before its first job): not below it, and not far above."""
    from mgst.testbed.local_run import PULLER_MEMORY  # noqa: PLC0415

    code = ("import psutil, puller.daemon, puller.cli, puller.executors, puller.spin, adjuster\n"
            "print(psutil.Process().memory_info().rss)")
    rss = int(subprocess.run([__import__("sys").executable, "-c", code], capture_output=True, text=True, timeout=60,
                             check=True, cwd=Path(__file__).resolve().parents[1]).stdout)
    assert rss <= PULLER_MEMORY <= 2 * rss, (rss, PULLER_MEMORY)
