"""The `mgst` command: the only place that writes to the terminal."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from mgst import policies
from mgst.cli.version import version_line
from mgst.config import ConfigError
from mgst.stderr_log import LibraryLines, StderrHandler

# `mgst simulate --jobs` formats: mgst.results.JOB_FORMATS's keys (not imported here: keeps `mgst --help` fast)
SIMULATE_JOB_FORMATS = ("csv", "csv.gz", "parquet")


def _jobs_before_the_file(argv: list[str]) -> list[str]:
    """``mgst simulate --jobs FILE ...`` as ``--jobs csv FILE``: the format is optional, and argparse
    would otherwise take the experiment file for it ("invalid choice"). Only a value that is not a
    format and names a TOML file or an existing path is read so; a mistyped format still fails."""
    words = [w for w in argv if not w.startswith("-")]
    if not words or words[0] != "simulate":
        return argv
    for i, word in enumerate(argv[:-1]):
        if word == "--jobs":
            value = argv[i + 1]
            if value not in SIMULATE_JOB_FORMATS and not value.startswith("-") and (
                value.endswith(".toml") or Path(value).exists()
            ):
                return [*argv[: i + 1], "csv", *argv[i + 1 :]]
    return argv


def main(argv: list[str] | None = None) -> int:
    # The commands' modules are imported here, not at the top: there the first of them would import mgst.config
    # (and numpy) one call deeper than this module does, a depth at which CPython 3.11 maps and unmaps a frame-stack
    # chunk on nearly every call (gh-142183), and `import mgst.cli` took some 25 ms longer.
    from mgst.cli.simulate_command import simulate_command  # noqa: PLC0415
    from mgst.cli.sweep_commands import paper_command, sweep_command  # noqa: PLC0415
    from mgst.cli.testbed_commands import (  # noqa: PLC0415
        TESTBED_EXIT_CODES,
        add_testbed_arguments,
        export_command,
        keys_command,
        mapper_command,
        puller_command,
        run_command,
    )

    argv = _jobs_before_the_file(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="mgst", description="A testbed for desktop-grid scheduling policies.")
    epilog = {"epilog": TESTBED_EXIT_CODES, "formatter_class": argparse.RawDescriptionHelpFormatter}
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output on stderr")
    parser.add_argument("--version", action=_Version,
                        help="print the version and which build runs (compiled with mypyc, or pure Python)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("simulate", help="simulate an experiment file and print mean response times")
    p.add_argument("file", type=Path, help="experiment file (TOML)")
    p.add_argument("--horizon", type=float, help="model time during which jobs arrive")
    p.add_argument("--warmup", type=float, help="jobs submitted before this are not counted")
    p.add_argument("--replications", type=int, help="independent replications")
    p.add_argument("--seed", type=int, help="run seed; replication r uses streams derived from (seed, r)")
    p.add_argument("--workers", type=int, help="parallel processes (default: one per core)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="write summary.csv (and bags.csv for a bag workload) into this directory")
    p.add_argument("--jobs", nargs="?", const="csv", choices=SIMULATE_JOB_FORMATS, metavar="FORMAT",
                   help="with --out, also write one row per job: csv (the default), csv.gz or parquet (needs "
                        "pyarrow: pip install 'mgst[parquet]'); a paper setting makes up to 765,000 rows, 83 MB "
                        "as CSV")
    p.add_argument("--overheads", type=Path, metavar="RUN_DIR",
                   help="add the per-job overheads a testbed run measured (its journal, per machine: t2 to t4 before "
                        "computing, t5 to t6 after, the executor's overrun) to the model (docs/models.md)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--policy", dest="policies", action="append", default=[], metavar="NAME",
                   help="simulate this policy in place of the file's [policy] (with the file's options if the file "
                        "names it, else its defaults); repeat it to compare policies on the same jobs: their means "
                        "side by side, with --out a folder each")
    _add_import(p)
    p.set_defaults(func=simulate_command)

    p = sub.add_parser("paper", help="simulate the MGST paper's settings and set them beside its tables")
    p.add_argument("settings", nargs="*", help="setting names, e.g. hihi-mfd-fd (default: all in the paper)")
    p.add_argument("--experiments", type=Path, default=Path("experiments"), metavar="DIR",
                   help="folder of the experiment files (default: experiments, the repository's, from its root)")
    p.add_argument("--horizon", type=float, help="model time during which jobs arrive (default: each file's)")
    p.add_argument("--warmup", type=float, help="jobs submitted before this are not counted (default: each file's)")
    p.add_argument("--replications", type=int, help="independent replications (default: each file's)")
    p.add_argument("--seed", type=int, help="run seed; replication r uses streams derived from (seed, r)")
    p.add_argument("--workers", type=int, help="parallel processes (default: one per core)")
    p.add_argument("--json", action="store_true", help="one JSON object: every figure and verdict")
    _add_import(p)
    p.set_defaults(func=paper_command)

    p = sub.add_parser("sweep", help="run a paper's grid of simulations (policies x settings x replications)")
    p.add_argument("file", type=Path, help="sweep file (TOML), e.g. experiments/bot/anglano-sweep.toml")
    p.add_argument("--workers", type=int, help="local processes (default: one per core)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="run cells on this Dask scheduler (tcp://host:port)")
    p.add_argument("--slurm", type=int, metavar="JOBS",
                   help="run cells on Dask workers submitted as JOBS Slurm jobs (dask-jobqueue's SLURMCluster)")
    p.add_argument("--slurm-partition", metavar="NAME", help="the worker jobs' partition (default: the cluster's)")
    p.add_argument("--slurm-time", metavar="TIME", help="the worker jobs' time limit (sbatch --time)")
    p.add_argument("--slurm-account", metavar="NAME", help="the account the worker jobs are charged to")
    p.add_argument("--slurm-memory", metavar="AMOUNT", help="memory per worker job (default 2GB)")
    p.add_argument("--slurm-option", action="append", default=[], metavar="OPTION",
                   help="one more sbatch option for the worker jobs, e.g. --qos=short (repeatable)")
    p.add_argument("--out", type=Path, help="output folder; a sweep run again in it skips finished cells "
                                            "(default: runs/sweep-NAME, or runs/sweep-NAME-quick)")
    p.add_argument("--replications", type=int, help="replications per cell (overrides the file)")
    p.add_argument("--only", action="append", default=[], metavar="COLUMN=VALUE[,VALUE]",
                   help="run only the cells with these values (repeatable), e.g. --only policy=rr,rr_nrf")
    p.add_argument("--quick", action="store_true", help="apply the file's [quick] preset")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="set one of the scenario's options over the file's (repeatable; a TOML value), e.g. "
                        "--option overlay=true")
    p.add_argument("--cell", metavar="MODULE:FUNCTION",
                   help="the function computing a cell (default mgst.sim.bag_cell:simulate_cell)")
    p.add_argument("--no-plots", action="store_true", help="write sweep.csv and summary.csv only")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    _add_import(p, "; every worker imports it (a Dask cluster's workers need the module installed)")
    p.set_defaults(func=sweep_command)

    p = sub.add_parser("reproduce", help="check a paper's claims on a slice of its runs, in minutes (holds / does "
                                         "not hold / undecided); alone, list the papers")
    from mgst.cli.reproduce_command import add_reproduce_arguments, reproduce_command  # noqa: PLC0415

    add_reproduce_arguments(p)
    p.set_defaults(func=reproduce_command)

    p = sub.add_parser("run", help="a testbed run on this machine (pullers on loopback), beside the simulation",
                       **epilog)
    add_testbed_arguments(p)
    p.add_argument("--network", metavar="SPEC",
                   help="put every puller behind an emulated link, e.g. 'delay=50ms,jitter=5ms,loss=1%%,rate=10mbit' "
                        "(each way; every key optional), or per machine 'M1:delay=80ms;*:delay=20ms'; needs root "
                        "(docs/network.md)")
    p.add_argument("--resume", type=Path, metavar="DIR",
                   help="continue the run journalled in DIR (killed, or its machine restarted) with new local pullers "
                        "and, if it had one, the same emulated network; it keeps the settings it started with")
    p.set_defaults(func=run_command)

    p = sub.add_parser("mapper", help="the mapper of a testbed run: pullers connect to it",
                       **epilog)
    add_testbed_arguments(p)
    p.add_argument("--bind", default="tcp://*:5555", help="ZeroMQ endpoint to bind (default tcp://*:5555)")
    p.add_argument("--keys", type=Path, metavar="DIR",
                   help="key folder made by 'mgst keys': the mapper's key pair and authorized/ puller keys")
    p.add_argument("--resume", type=Path, metavar="DIR",
                   help="continue the run journalled in DIR (its mapper died); pullers reconnect by themselves")
    p.add_argument("--register-timeout", type=float, default=300.0,
                   help="seconds to wait for every machine's puller (default 300)")
    p.add_argument("--begin-with", type=int, metavar="N",
                   help="begin the run once N pullers registered (default: all); the others join as they come, "
                        "their machines down until then (pilot jobs: docs/lab.md)")
    p.add_argument("--farewell", type=float, default=None,
                   help="at most this many seconds after the run, answer the pullers that were down at its end "
                        "with 'run over' (it ends once each has been told; default: enough for a failed machine "
                        "to come back, at most 60)")
    p.set_defaults(func=mapper_command)

    p = sub.add_parser("keys", help="make CURVE key pairs for a lab: the mapper's and the pullers'")
    p.add_argument("folder", type=Path, help="where to put them (created)")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--pullers", nargs="+", metavar="NAME", help="one key pair per puller name")
    who.add_argument("--experiment", type=Path, metavar="FILE", help="one key pair per machine of this file")
    who.add_argument("--lab", action="store_true", help="one key pair shared by every puller")
    p.add_argument("--force", action="store_true",
                   help="replace existing keys, the mapper's pair included (every lab machine then needs the new "
                        "mapper.key)")
    p.set_defaults(func=keys_command)

    p = sub.add_parser("export", help="write a run directory's CSVs and summary from its journal")
    p.add_argument("folder", type=Path, help="the run directory (holds journal.sqlite)")
    p.add_argument("--json", action="store_true", help="print only the summary JSON on stdout")
    p.add_argument("--salvage", action="store_true",
                   help="for a damaged journal: copy its events up to the damage into journal.salvaged.sqlite "
                        "(the damaged file is left as it is) and write the CSVs from that")
    p.set_defaults(func=export_command)

    p = sub.add_parser("puller", help="a puller daemon: runs jobs for a mapper")
    if _command(argv) == "puller":  # its options import the daemon (and ZeroMQ): not for the other commands
        from puller.cli import EXIT_CODES, VERBOSE_HELP, add_arguments  # noqa: PLC0415

        p.epilog, p.formatter_class = EXIT_CODES, argparse.RawDescriptionHelpFormatter
        # (its own dest: a sub-parser's default would overwrite `mgst -v puller`'s count)
        p.add_argument("-v", "--verbose", dest="puller_verbose", action="count", default=0, help=VERBOSE_HELP)
        add_arguments(p)
    p.set_defaults(func=puller_command)

    p = sub.add_parser("lab", help="launch, show and stop the pullers of lab machines over SSH, or as Slurm pilot "
                                   "jobs (docs/lab.md)")
    if _command(argv) == "lab":
        from mgst.cli.lab_commands import add_lab_arguments, lab_command  # noqa: PLC0415

        add_lab_arguments(p)
        p.set_defaults(func=lab_command)

    p = sub.add_parser("traces", help="generate a trace-driven platform, or summarise a trace (docs/traces.md)")
    if _command(argv) == "traces":
        from mgst.cli.traces_command import add_traces_arguments, traces_command  # noqa: PLC0415

        add_traces_arguments(p)
        p.set_defaults(func=traces_command)

    p = sub.add_parser("policies", help="list the policies an experiment file can name")
    _add_import(p)
    p.set_defaults(func=_policies)

    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * args.verbose
    handler = StderrHandler()
    handler.addFilter(LibraryLines(level, tracebacks=level <= logging.DEBUG))  # Dask's at the command's level too
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", handlers=[handler])
    try:
        return args.func(args)
    except ConfigError as e:
        print(f"mgst: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mgst: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `mgst policies | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as e:
        code = _policy_failed(e)
        if code is None:
            code = _testbed_error(e)
        if code is None:
            raise
        return code


def _add_import(p: argparse.ArgumentParser, note: str = "") -> None:
    """--import MODULE, as every command that names policies has it."""
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help=f"import a module that registers policies of its own (repeatable){note}")


def _command(argv: list[str]) -> str | None:
    """The command word of ``mgst`` 's arguments (its own options take no value), None if there is none."""
    return next((w for w in argv if not w.startswith("-")), None)


def _policy_failed(e: Exception) -> int | None:
    """A simulation whose policy failed (mgst.policies.failure.PolicyFailed, from a worker process or this one): the
    policy's traceback, then one line saying which policy, when and why; exit 3, as a testbed run's policy failure.
    A policy refused before it runs (mgst.core.decisions.PolicyError: a hook defined but not declared, say): one
    line, exit 3. None for any other error."""
    from mgst.core.decisions import PolicyError  # noqa: PLC0415
    from mgst.policies.failure import PolicyFailed  # noqa: PLC0415

    if not isinstance(e, (PolicyFailed, PolicyError)):
        return None
    from mgst.cli.testbed_commands import EXIT_POLICY_FAILED  # noqa: PLC0415

    if isinstance(e, PolicyFailed):
        print(e.details.rstrip("\n"), file=sys.stderr)
    print(f"mgst: error: {e}", file=sys.stderr)
    return EXIT_POLICY_FAILED


def _testbed_error(e: Exception) -> int | None:
    """The exit code of an error of the testbed's (its message printed), None for any other. Their classes
    are imported here, once something failed: `mgst simulate` does not import the mapper, ZeroMQ and SQLite
    (0.15 s) to catch errors it cannot raise."""
    from mgst.cli.testbed_commands import EXIT_PAUSED  # noqa: PLC0415
    from mgst.testbed.beside import OutputsNotWritten  # noqa: PLC0415
    from mgst.testbed.mapper import Interrupted  # noqa: PLC0415
    from mgst.testbed.store import JournalWriteError, StoreError  # noqa: PLC0415
    from mgst.wire.security import KeyFileError, SecurityError  # noqa: PLC0415

    if isinstance(e, (SecurityError, KeyFileError, StoreError, OutputsNotWritten)):
        print(f"mgst: error: {e}", file=sys.stderr)
        return 2
    if isinstance(e, JournalWriteError):  # (a run's own commands say more: the run is paused, how to resume)
        print(f"mgst: error: {e}", file=sys.stderr)
        return EXIT_PAUSED
    if isinstance(e, Interrupted):
        print(f"mgst: {e}", file=sys.stderr)
        return 130
    return None


class _Version(argparse.Action):
    """--version, with the version looked up only when asked (reading the metadata takes some 30 ms)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, help: str | None = None):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_line())
        parser.exit()


def _policies(args: argparse.Namespace) -> int:
    import shutil  # noqa: PLC0415
    import textwrap  # noqa: PLC0415

    from mgst.cli.options import import_policies  # noqa: PLC0415

    import_policies(args)
    names = policies.names()
    column = max(map(len, names), default=0) + 2
    width = max(column + 30, min(shutil.get_terminal_size((100, 24)).columns, 120))
    for name in names:
        summary = policies.summary(name) or "(no docstring)"  # (an empty text would be filled to nothing, its name too)
        print(textwrap.fill(summary, width, initial_indent=f"{name:<{column}}", subsequent_indent=" " * column))
    return 0
