"""`mgst lab up / status / down HOSTS_FILE`: pullers on lab machines over SSH (or as Slurm pilot jobs: lab_slurm),
and what they say."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from mgst.config import ConfigError

LAB_EPILOG = """exit codes:
  0    every host did what was asked
  1    some host could not be reached or failed (each says why)
  2    a usage error, or a hosts file that cannot be used (the key is named)

The hosts file and what is copied where: docs/lab.md."""


def add_lab_arguments(p: argparse.ArgumentParser) -> None:
    from mgst.lab.launcher import DEFAULT_GRACE, DEFAULT_PARALLEL  # noqa: PLC0415
    from mgst.lab.remote import LOG_LINES, MAX_LOG_LINES, SETTLE_SECONDS  # noqa: PLC0415

    sub = p.add_subparsers(dest="lab_command", required=True, metavar="{up,status,down,overlay}")
    epilog = {"epilog": LAB_EPILOG, "formatter_class": argparse.RawDescriptionHelpFormatter}
    q = sub.add_parser("up", help="copy each host's keys and allow-list over SSH and start its pullers", **epilog)
    q.add_argument("hosts", type=Path, metavar="HOSTS_FILE", help="the lab's hosts file (TOML, docs/lab.md)")
    q.add_argument("--ignore-version", action="store_true",
                   help="launch even where the host's mgst version differs from this one (logged)")
    q.add_argument("--settle", type=float, default=SETTLE_SECONDS, metavar="SECONDS",
                   help="how long a puller must stay alive to count as started (default "
                        f"{SETTLE_SECONDS:g}; one that fails later shows in 'mgst lab status')")
    q.add_argument("--pilots", type=int, metavar="N",
                   help="Slurm: submit at most N pilots now (default: one per free identity, up to max_pilots)")
    q = sub.add_parser("status", help="each host's pullers: running or not, pid, version, log", **epilog)
    q.add_argument("hosts", type=Path, metavar="HOSTS_FILE")
    q.add_argument("--lines", type=int, default=LOG_LINES, metavar="N",
                   help=f"last log lines shown per puller (0 to {MAX_LOG_LINES}, default {LOG_LINES})")
    q = sub.add_parser("down", help="stop each host's pullers (SIGTERM, then SIGKILL after --grace)", **epilog)
    q.add_argument("hosts", type=Path, metavar="HOSTS_FILE")
    q.add_argument("--grace", type=float, default=DEFAULT_GRACE, metavar="SECONDS",
                   help=f"seconds between SIGTERM and SIGKILL (default {DEFAULT_GRACE:g})")
    q = sub.add_parser("overlay", help="Slurm: keep submitting pilots while the run has queued work", **epilog)
    q.add_argument("hosts", type=Path, metavar="HOSTS_FILE")
    q.add_argument("--live", required=True, metavar="URL",
                   help="the mapper's live view, e.g. http://127.0.0.1:8421/ (mgst mapper --live 8421)")
    q.add_argument("--poll", type=float, default=1.0, metavar="SECONDS",
                   help="how often the run and the queue are looked at (default 1)")
    for q in sub.choices.values():
        q.add_argument("--parallel", type=int, default=DEFAULT_PARALLEL, metavar="N",
                       help=f"hosts worked on at once (default {DEFAULT_PARALLEL})")


def lab_command(args: argparse.Namespace) -> int:
    from mgst.lab import launcher  # noqa: PLC0415
    from mgst.lab.hosts import HostsFileError, Lab  # noqa: PLC0415
    from mgst.lab.lab_file import load_lab  # noqa: PLC0415
    from mgst.lab.remote import MAX_LOG_LINES, MAX_SETTLE_SECONDS  # noqa: PLC0415
    from mgst.lab.ssh import SshError  # noqa: PLC0415

    if not 1 <= args.parallel <= 256:
        raise ConfigError("--parallel", "give 1 to 256 hosts at once")
    if args.lab_command == "status" and not 0 <= args.lines <= MAX_LOG_LINES:
        raise ConfigError("--lines", f"give 0 to {MAX_LOG_LINES} lines")
    if args.lab_command == "up" and not (math.isfinite(args.settle) and 0 <= args.settle <= MAX_SETTLE_SECONDS):
        raise ConfigError("--settle", f"give 0 to {MAX_SETTLE_SECONDS:g} seconds")
    if args.lab_command == "down" and not (math.isfinite(args.grace) and 0 <= args.grace <= 600):
        raise ConfigError("--grace", "give 0 to 600 seconds")
    try:
        lab = load_lab(args.hosts)
    except HostsFileError as e:
        raise ConfigError(e.key, e.problem, e.path) from None
    if not isinstance(lab, Lab):
        from mgst.cli.lab_slurm import slurm_command  # noqa: PLC0415

        return slurm_command(args, lab)
    if args.lab_command == "up" and args.pilots is not None:
        raise ConfigError("--pilots", f"{args.hosts} has SSH hosts: --pilots is for a Slurm lab ([slurm], docs/lab.md)")
    if args.lab_command == "overlay":
        raise ConfigError("overlay", f"{args.hosts} has SSH hosts: the overlay submits Slurm pilots (a [slurm] "
                                     "section, docs/lab.md)")
    if args.lab_command == "up":
        from mgst.cli.version import version_line  # noqa: PLC0415

        for h in lab.hosts:
            if h.host_key_checking == "no":
                print(f"mgst: warning: {h.label}: host_key_checking = \"no\": its SSH host key is not checked "
                      "(anyone on the path can pose as it and receive its secret key)", file=sys.stderr)
        try:
            action = launcher.up(lab, version_line(), ignore_version=args.ignore_version, settle=args.settle)
        except SshError as e:
            raise ConfigError("(version)", f"this mgst: {e}") from None
        except HostsFileError as e:
            raise ConfigError(e.key, e.problem, e.path) from None
        reports = launcher.run_on_hosts(lab, action, args.parallel)
        _print_up(reports)
    elif args.lab_command == "status":
        reports = launcher.run_on_hosts(lab, launcher.status(args.lines), args.parallel)
        _print_status(reports)
    else:
        reports = launcher.run_on_hosts(lab, launcher.down(args.grace), args.parallel)
        _print_down(reports)
    failed = [r.host.label for r in reports if not r.ok]
    if failed:
        print(f"mgst lab {args.lab_command}: failed on {len(failed)} of {len(reports)} hosts: {', '.join(failed)}",
              file=sys.stderr)
        return 1
    return 0


def _head(r) -> str:
    return f"{r.host.label} ({r.host.address})"


def _print_error(r) -> bool:
    if r.ok:
        return False
    print(f"{_head(r)}: error: {r.error}")
    for p in r.pullers:
        for line in p.lines:
            print(f"    {p.machine} | {line}")
    return True


def _print_up(reports) -> None:
    for r in reports:
        for note in r.notes:
            print(f"mgst: warning: {r.host.label}: {note}", file=sys.stderr)
        if _print_error(r):
            continue
        started = ", ".join(f"{p.machine} (pid {p.pid})" for p in r.pullers)
        print(f"{_head(r)}: {r.version}; started {started}; logs {r.folder}/MACHINE.log")


def _print_status(reports) -> None:
    for r in reports:
        if _print_error(r):
            continue
        print(f"{_head(r)}: {r.version or 'mgst: unknown version'}")
        for note in r.notes:
            print(f"  {note}")
        for p in r.pullers:
            state = {"running": f"running, pid {p.pid}", "exited": f"not running (pid {p.pid} exited)",
                     "nopid": "not running (never launched, or stopped by 'mgst lab down')"}.get(p.state, p.state)
            print(f"  {p.machine}: {state}" + (f"; log {p.log}" if p.log else ""))
            for line in p.lines:
                print(f"    | {line}")


def _print_down(reports) -> None:
    for r in reports:
        if _print_error(r):
            continue
        for note in r.notes:
            print(f"{_head(r)}: {note}")
        for p in r.pullers:
            said = {"stopped": f"stopped (pid {p.pid}, SIGTERM)",
                    "killed": f"killed (pid {p.pid}: SIGKILL after the grace period)",
                    "exited": f"was not running (pid {p.pid} had exited)",
                    "nopid": "was not running"}.get(p.state, p.state)
            print(f"{_head(r)}: {p.machine} {said}")
