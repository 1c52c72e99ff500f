"""Command line of the puller daemon (also `mgst puller`): the only place in puller/ that writes to the terminal."""

from __future__ import annotations

import argparse
import logging
import math
import sys
from pathlib import Path

from mgst.stderr_log import StderrHandler
from mgst.wire import protocol as P
from mgst.wire import security
from puller.allowlist import AllowList, AllowListError
from puller.daemon import EXIT_PAUSED, EXIT_UNREACHABLE, Puller
from puller.patience import GIVE_UP

log = logging.getLogger(__name__)

# Every log line starts with the local time to the millisecond, ISO 8601 style (as `date '+%F %T.%3N'`), so that
# a puller's log can be set beside the mapper's and another machine's.
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
LINE_FORMAT = "%(asctime)s.%(msecs)03d %(levelname)s %(message)s"
VERBOSE_LINE_FORMAT = "%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s"  # (-v: which module said it)

EXIT_CODES = f"""exit codes:
  0    the run is over (the mapper's bye), no work for --idle-exit seconds, or SIGINT/SIGTERM
  2    a usage error, a fatal refusal by the mapper, or a run this puller cannot serve
  {EXIT_UNREACHABLE}   the mapper could not be reached for --give-up seconds before any welcome: a host name
       that does not resolve, a refused connection, a handshake that fails (a wrong mapper key); or, after
       one, no word from it for --give-up seconds and no bye: its mapper is down (a resume needs this
       puller started again), or the run ended without its bye reaching this puller
  {EXIT_PAUSED}   the mapper paused the run and no resumed mapper welcomed this puller within an hour"""


class UsageError(ValueError):
    """Options that do not go together, or are missing."""


def _endpoint(text: str) -> str:
    try:
        return security.check_endpoint(text, bind=False)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


# Characters in a machine's name, as an experiment file allows them (mgst.config's MAX_NAME; a test holds the two
# equal): a longer or empty name matches no machine, and the mapper would refuse it only after a connection.
MAX_MACHINE_NAME = 64


def _machine(text: str) -> str:
    if not text or len(text) > MAX_MACHINE_NAME or not text.isprintable():
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r}: a machine's name is 1 to {MAX_MACHINE_NAME} printable characters, as in the experiment "
            "file (M1, M2, ...)")
    return text


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive number of seconds")
    return value


def _pid(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a process id") from None
    if not 1 <= value < 2**31:
        raise argparse.ArgumentTypeError(f"{text!r}: give a process id")
    return value


def _slots(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of slots") from None
    if not 1 <= value <= P.MAX_SLOTS:
        raise argparse.ArgumentTypeError(f"{text!r}: give 1 to {P.MAX_SLOTS} slots")
    return value


VERBOSE_HELP = "log every step (DEBUG); by default a line per registration, injected failure, reconnection, the end"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--connect", required=True, type=_endpoint, metavar="ENDPOINT",
                   help="the mapper's endpoint, e.g. tcp://head-node:5555")
    p.add_argument("--machine", required=True, type=_machine,
                   help="this machine's name in the experiment (M1, M2, ...)")
    g = p.add_argument_group("security", "CURVE is on by default: give --keys, or --key and --mapper-key, "
                                         "or say --insecure")
    g.add_argument("--keys", type=Path, metavar="DIR",
                   help="a key folder (from `mgst keys`, or a copy): DIR/mapper.key and "
                        "DIR/pullers/MACHINE.key_secret, else DIR/pullers/lab.key_secret "
                        "(also DIR/MACHINE.key_secret or DIR/lab.key_secret)")
    g.add_argument("--key", type=Path, metavar="PATH", help="this puller's key pair (a .key_secret file)")
    g.add_argument("--mapper-key", type=Path, metavar="PATH", help="the mapper's public key (mapper.key)")
    g.add_argument("--insecure", action="store_true",
                   help="no CURVE: no encryption, no authentication of the mapper; for a closed lab only")
    g = p.add_argument_group("command executor", "off unless an allow-list is given (docs/puller.md)")
    g.add_argument("--allow", action="append", default=[], metavar="'[KEY=]PROGRAM ARG ...'",
                   help="allow one command (shell-split); with KEY= a job may name it by key, "
                        "else by its exact argv only (repeatable)")
    g.add_argument("--allow-file", type=Path, metavar="FILE",
                   help="a TOML allow-list: [commands] key = [argv...] or \"command line\"; optional [environment]")
    p.add_argument("--slots", type=_slots, default=1, metavar="N",
                   help="run up to N replicas at once (default 1); the mapper may use fewer, never more")
    p.add_argument("--give-up", type=_seconds, metavar="SECONDS",
                   help=f"exit after this long without a welcome (default {GIVE_UP:.0f}): before the first one, "
                        f"with code {EXIT_UNREACHABLE} if the mapper could not be reached (a mapper that answers "
                        "is waited for); after one, with code 0 (the run is over)")
    p.add_argument("--idle-exit", type=_seconds, metavar="SECONDS",
                   help="once welcomed, leave (exit 0, saying Bye) after this long with no replica to run: a "
                        "pilot job giving its machine back (docs/lab.md, Slurm)")
    p.add_argument("--stay", action="store_true",
                   help="after a run, wait for the next one instead of exiting (and never give up)")
    p.add_argument("--exit-with", type=_pid, metavar="PID",
                   help="leave (its replicas killed) as soon as process PID ends: mgst run starts its local pullers "
                        "so, and a run killed outright leaves none behind")
    p.add_argument("--throttle", default="auto", choices=["auto", "cgroup2", "cgroup1", "duty"],
                   help="how to hold spin and command jobs at the CPU share a_j (default: the best available)")


def _first(paths: list[Path]) -> Path | None:
    return next((p for p in paths if p.is_file()), None)


def client_keys(args: argparse.Namespace) -> security.ClientKeys | None:
    """The puller's keys from --keys/--key/--mapper-key; None with --insecure. UsageError, KeyFileError."""
    given = [f"--{n.replace('_', '-')}" for n in ("keys", "key", "mapper_key") if getattr(args, n) is not None]
    if args.insecure:
        if given:
            raise UsageError(f"--insecure contradicts {', '.join(given)}")
        return None
    if not given:
        raise UsageError("no keys: give --keys DIR (a folder made by `mgst keys`), or --key PATH and "
                         "--mapper-key PATH; or --insecure to run without CURVE in a closed lab")
    key, mapper_key = args.key, args.mapper_key
    if args.keys is not None:
        folder: Path = args.keys
        if not folder.is_dir():
            raise security.KeyFileError(f"{folder}: not a folder (--keys)")
        if mapper_key is None:
            mapper_key = folder / f"{security.MAPPER}.key"
            if not mapper_key.is_file():
                raise security.KeyFileError(f"{mapper_key}: no such file (the mapper's public key, --keys)")
        if key is None:
            names = [args.machine, security.LAB] if Path(args.machine).name == args.machine else [security.LAB]
            tried = [d / f"{n}.key_secret" for d in (folder / security.PULLERS, folder) for n in names]
            key = _first(tried)
            if key is None:
                raise security.KeyFileError(f"{folder}: no key pair for {args.machine} (tried "
                                            + ", ".join(str(t) for t in tried) + ")")
    elif key is None:
        raise UsageError("--mapper-key needs --key (this puller's .key_secret), or use --keys DIR")
    elif mapper_key is None:
        raise UsageError("--key needs --mapper-key (the mapper's public key), or use --keys DIR")
    keys = security.client_keys(key, mapper_key)  # (a secret key readable by others is warned of there)
    log.debug("CURVE on: key %s, mapper key %s", key, mapper_key)
    return keys


def configure_logging(verbose: int) -> None:
    """The puller's log on stderr: timestamped lines, INFO by default (registration, injected failures,
    reconnections, the end), DEBUG with -v."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[StderrHandler()], force=True,
                        format=VERBOSE_LINE_FORMAT if verbose else LINE_FORMAT, datefmt=DATE_FORMAT)


def run(args: argparse.Namespace) -> int:
    """The puller of the command line's options (``python -m puller`` and ``mgst puller``); its exit code."""
    configure_logging(getattr(args, "verbose", 0) + getattr(args, "puller_verbose", 0))
    try:
        if args.stay and args.give_up is not None:
            raise UsageError("--give-up with --stay: a puller that stays for the next run never gives up")
        keys = client_keys(args)
        allowlist = AllowList.build(args.allow, args.allow_file)
        puller = Puller(args.connect, args.machine, keys=keys, insecure=args.insecure, allowlist=allowlist,
                        slots=args.slots, stay=args.stay,
                        give_up=GIVE_UP if args.give_up is None else args.give_up, idle_exit=args.idle_exit,
                        throttle=args.throttle, exit_with=args.exit_with)
    except (UsageError, security.KeyFileError, AllowListError) as e:
        print(f"puller: error: {e}", file=sys.stderr)
        return 2
    except ProcessLookupError:
        print(f"puller: error: --exit-with: no process {args.exit_with}", file=sys.stderr)
        return 2
    puller.install_signal_handlers()
    return puller.run()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="puller", description="mgst puller daemon: runs jobs for a mapper",
                                epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="count", default=0, help=VERBOSE_HELP)
    add_arguments(p)
    return run(p.parse_args(argv))
