"""The command line's shared options: --import wherever a policy is named, help for every option, counts in
words (issue 21, item 13)."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mgst.cli import main

ROOT = Path(__file__).resolve().parents[1]
HIHI = str(ROOT / "experiments" / "hihi-mfd-fd.toml")
MODULE = '''from mgst.policies import register
from mgst.papers.anglano.bot import FcfsExcl


@register
class Mine(FcfsExcl):
    """FCFS-Excl under a name of the user's."""

    name = "users_excl"
'''
SWEEP = """scenario = "anglano"
name = "users"
[axes]
policy = ["users_excl"]
availability = ["high"]
heterogeneity = ["homogeneous"]
mix = ["All_M"]
intensity = ["low"]
[simulation]
horizon = 20000.0
warmup = 0.0
checkpoint_interval = 600.0
replications = 1
seed = 1
"""


def mgst(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mgst", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(cwd), "MGST_PURE": "1"})


def test_policies_and_sweep_take_the_users_policies_with_import(tmp_path):
    (tmp_path / "users_policies.py").write_text(MODULE)
    p = mgst("policies", "--import", "users_policies", cwd=tmp_path)
    assert p.returncode == 0 and "users_excl" in p.stdout, p.stderr
    (tmp_path / "sweep.toml").write_text(SWEEP)
    out = tmp_path / "out"
    p = mgst("sweep", str(tmp_path / "sweep.toml"), "--import", "users_policies", "--out", str(out), "--workers", "1",
             "--no-plots", "--quiet", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    with open(out / "sweep.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["policy"] for r in rows] == ["users_excl"]
    assert not rows[0].get("error") and float(rows[0]["avt"]) > 0, rows[0]


@pytest.mark.parametrize("command", ["simulate", "paper", "sweep", "policies", "run", "mapper"])
def test_every_command_naming_policies_has_import(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "--import MODULE" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["simulate", "paper", "sweep", "reproduce", "run", "mapper", "keys", "export",
                                     "policies"])
def test_every_option_has_help(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    lines = capsys.readouterr().out.splitlines()
    bare = []
    for i, line in enumerate(lines):
        if not re.match(r"  -", line):
            continue
        said = len(re.split(r"\s{2,}", line.strip())) > 1  # the invocation, then its help on the same line
        follows = i + 1 < len(lines) and re.match(r" {8,}\S", lines[i + 1]) is not None  # or on the next
        if not said and not follows:
            bare.append(line.strip())
    assert not bare, f"options without help: {bare}"


def test_one_replication_is_said_in_the_singular(capsys):
    assert main(["simulate", HIHI, "--horizon", "30", "--warmup", "3", "--replications", "1", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "1 replication x" in out and "replications" not in out


def _read_only_folder(tmp_path: Path) -> Path | None:
    """A folder on a read-only mount (root: a tmpfs mounted ro; unmounted at teardown by the caller), else None."""
    if os.geteuid() != 0:
        return None
    folder = tmp_path / "romnt"
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)],
                      capture_output=True, timeout=30).returncode != 0:
        return None
    return folder


@pytest.mark.parametrize("command", [
    ["simulate", HIHI, "--horizon", "50", "--warmup", "0"],
    ["run", HIHI, "--duration", "5", "--no-live"],
    ["mapper", HIHI, "--duration", "5", "--bind", "tcp://127.0.0.1:0", "--no-live"],
])
def test_an_out_folder_that_cannot_be_written_is_one_line_before_any_work(tmp_path, capsys, command):
    """A read-only mount (root passes every mode check), a folder under /proc: exit 2 naming --out, before the
    simulation or the run, and nothing made."""
    targets = [Path("/proc/mgst-out"), tmp_path / "file" / "below"]
    (tmp_path / "file").write_text("")
    readonly = _read_only_folder(tmp_path)
    try:
        if readonly is not None:
            targets.append(readonly)
        for out in targets:
            assert main([*command, "--out", str(out)]) == 2
            err = capsys.readouterr().err
            assert err.startswith("mgst: error: --out: ") and err.count("\n") == 1, err
            assert not Path("/proc/mgst-out").exists()
    finally:
        if readonly is not None:
            subprocess.run(["umount", str(readonly)], timeout=30, check=True)


def test_the_command_executor_without_commands_is_one_line_naming_the_option(capsys):
    assert main(["run", HIHI, "--executor", "command", "--duration", "5", "--no-live"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mgst: error: --executor: the command executor needs [testbed] commands") and \
        err.count("\n") == 1, err


def test_commands_checking_folders_under_one_new_parent_at_once_never_fail(tmp_path):
    """Four processes check 200 output folders each under one parent none of them has made (runs/, the default):
    one removing the parent it made must not fail another's check (it did, in the test suite's parallel runs)."""
    code = ("import sys; from pathlib import Path; from mgst.cli.options import check_folder\n"
            "for k in range(200): check_folder('--out', Path(sys.argv[1]) / 'runs' / f'x{sys.argv[2]}-{k}')")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path), str(i)], stderr=subprocess.PIPE, text=True)
             for i in range(4)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, errors
    assert not list((tmp_path / "runs").glob("*")) if (tmp_path / "runs").exists() else True


@pytest.mark.parametrize(("fqdn", "host"), [("head.lab.example", "head.lab.example"), ("localhost", "HEAD-NODE"),
                                            ("localhost.localdomain", "HEAD-NODE")])
def test_the_puller_command_for_a_wildcard_bind_names_this_machine_or_says_to_fill_it_in(monkeypatch, fqdn, host):
    """Bound to every interface, the mapper's printed puller command names this machine as the lab knows it; a
    machine whose name is only localhost (no DNS name) gets the placeholder HEAD-NODE, not an address that on a lab
    machine is that machine itself."""
    import argparse  # noqa: PLC0415
    import socket  # noqa: PLC0415
    from types import SimpleNamespace  # noqa: PLC0415

    from mgst.cli.testbed_commands import _puller_command  # noqa: PLC0415

    monkeypatch.setattr(socket, "getfqdn", lambda *a: fqdn)
    exp = SimpleNamespace(machines=[SimpleNamespace(name="M1"), SimpleNamespace(name="M2")])
    command = _puller_command("tcp://*:5555", argparse.Namespace(insecure=False, keys=None), exp)
    assert command == f"python -m puller --connect tcp://{host}:5555 --machine NAME --keys KEYS"


def test_a_default_run_folder_of_a_long_valid_name_can_be_made(tmp_path):
    """64 emoji are a valid experiment name (64 characters) and 256 bytes: the default folder runs/NAME-DATE was a
    name too long for the file system, an error blamed on --out, which was not given."""
    from mgst.cli.options import folder_name  # noqa: PLC0415
    from mgst.cli.testbed_commands import _default_out  # noqa: PLC0415

    for name in ("\N{ROCKET}" * 64, "é" * 64, "a" * 64):
        out = tmp_path / _default_out(name).name
        out.mkdir()  # (OSError: File name too long, before)
        assert out.name.startswith(folder_name(name)) and name.startswith(folder_name(name))
    assert folder_name("a" * 64) == "a" * 64 and folder_name("hihi-mfd-fd") == "hihi-mfd-fd"
