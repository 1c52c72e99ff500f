"""`mgst run`, `mapper`, `puller`, `keys` and `export`: the testbed's commands, on real machines."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from mgst.cli.options import check_folder, check_seed, folder_name, import_policies
from mgst.config import ConfigError, load_experiment
from mgst.config.checks import overload_warning, simultaneous_bags_warning
from mgst.model import EXECUTORS, Experiment

# --farewell at most (s): an hour of answering late pullers is more than any failure of a lab run lasts.
MAX_FAREWELL = 3600.0
# The journal could not be written (disk full, I/O error): the run is paused, not over. 75 is EX_TEMPFAIL
# (sysexits.h): try again later, here with `mgst mapper|run FILE --resume DIR` once the journal can be written.
EXIT_PAUSED = 75
EXIT_POLICY_FAILED = 3
# A policy still deciding this many seconds after it began its input is said to hold the run (_stop_on_signals).
POLICY_STUCK_S = 1.0

TESTBED_EXIT_CODES = f"""exit codes:
  0    the run is over; its results are written (--resume of a run already over: said so, nothing
       rewritten)
  1    the pullers did not all register in time, or `mgst run` could not start them all (no job was
       generated: nothing is left behind); or
       `mgst run --network`'s network could not be made, or its relay ended during the run (which was
       stopped, its results written; nothing is left behind)
  2    a usage error (nothing is created), a journal that cannot be used (damaged: see
       `mgst export DIR --salvage`), or output files that cannot be written (the journal keeps the
       run: `mgst export DIR` writes them again)
  {EXIT_POLICY_FAILED}    the policy failed during the run (its code raised, or broke a rule of the core): the run
       was stopped there, its results so far written (the policy's traceback is printed above them); or
       before it began (its start, once the pullers registered: no job run, no journal kept)
  {EXIT_PAUSED}   the journal could not be written (disk full, I/O error): the run is PAUSED, what was
       committed is kept, and the pullers keep their work and wait; free space, then continue
       with the command that ran it: `mgst mapper FILE --resume DIR` (and its pullers), or
       `mgst run FILE --resume DIR` (which starts its own pullers and keys again)
  130  interrupted before the run began (nothing is left behind)
Ctrl-C (or SIGTERM) during the run ends job generation and drains for at most a few seconds; the jobs still
unfinished are reported cut off, and the results written (exit 0). A second Ctrl-C stops at once; while the
policy holds the run (a decision that does not return), a third ends it inside the policy, as a policy that
fails ends it: the results written, exit 3."""


def add_testbed_arguments(p: argparse.ArgumentParser) -> None:
    """The options `mgst run` and `mgst mapper` share."""
    p.add_argument("file", type=Path, help="experiment file (TOML)")
    p.add_argument("--duration", type=float, help="seconds of job generation (default: the file's [testbed])")
    p.add_argument("--time-unit", type=float, help="wall seconds per model time unit")
    p.add_argument("--seed", type=int, help="run seed (the simulation's replication 0 gets the same jobs)")
    p.add_argument("--policy", metavar="NAME",
                   help="run this policy in place of the file's [policy] (with the file's options if the file names "
                        "it, else its defaults), as mgst simulate --policy does")
    p.add_argument("--executor", choices=list(EXECUTORS),
                   help="how pullers run jobs (default: the file's [testbed] executor, else emulate)")
    p.add_argument("--out", type=Path, help="output directory (default: runs/NAME-DATE-TIME)")
    p.add_argument("--json", action="store_true", help="print only the summary JSON on stdout")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--insecure", action="store_true",
                   help="no authentication or encryption (for a closed lab network; logged, and noted in "
                        "summary.json)")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import a module that registers policies of its own (repeatable)")
    live = p.add_mutually_exclusive_group()
    live.add_argument("--live", default="127.0.0.1:0", metavar="[HOST:]PORT",
                      help="serve the read-only live view of the run here (default 127.0.0.1 on a free port; the URL "
                           "is printed); any address but loopback needs a token (docs/live.md)")
    live.add_argument("--no-live", dest="live", action="store_const", const=None, help="no live view")
    p.add_argument("--live-token-file", type=Path, metavar="FILE",
                   help="the live view's token (default off loopback: KEYS/live.token if there, for a mapper with "
                        "--keys; else a new one in OUT/live.token)")


def _lengths_not_used(args: argparse.Namespace) -> tuple[str, ...]:
    """The run lengths a testbed run does not take from the file (load_experiment's ``lengths_not_used``): the
    simulation's (the simulation beside a run is as long as the run), and the testbed's when the command line gives
    it (--duration, --time-unit: _check_testbed_args checks them)."""
    return ("simulation", "testbed") if args.duration is not None or args.time_unit is not None else ("simulation",)


def _check_testbed_args(args: argparse.Namespace, exp) -> None:
    """Exit-2 errors for the testbed options, before anything starts: `mgst run` and `mgst mapper` alike (the
    mapper itself would refuse a trace too long for the wire only once `mgst run` had started making the run)."""
    from mgst.config.checks import check_testbed_overrides  # noqa: PLC0415
    from mgst.testbed.wire_availability import check_availability_fits  # noqa: PLC0415

    check_testbed_overrides(exp, args.duration, args.time_unit)
    check_seed("--seed", args.seed)
    if not args.insecure:  # (each machine's key files are named after it: said with the file and the entry)
        from mgst.wire.security import check_key_name  # noqa: PLC0415

        for i, m in enumerate(exp.machines):
            try:
                check_key_name(m.name)
            except ValueError as e:
                raise ConfigError(f"machines.names[{i}]", f"{e}: a machine's key files are named after it (or run "
                                                          "with --insecure)", str(args.file)) from None
    executor = args.executor or exp.testbed.executor
    if executor == "command" and len(exp.testbed.commands) != len(exp.classes):
        raise ConfigError("--executor" if args.executor else "testbed.executor",
                          f"the command executor needs [testbed] commands, one per job class ({len(exp.classes)}); "
                          f"the file gives {len(exp.testbed.commands)}")
    if exp.testbed.commands and executor != "command" and not args.executor:
        raise ConfigError("testbed.commands", f"the file gives commands, but executor = {executor!r} (the file's "
                                              "testbed.executor, or its default) runs none of them: set executor = "
                                              "\"command\" in [testbed] (or pass --executor command) to run them, "
                                              f"or --executor {executor} to {executor} on purpose")
    try:
        check_availability_fits(exp, args.duration, args.time_unit, args.seed)
    except ValueError as e:
        given = "--duration" if args.duration is not None else "--time-unit" if args.time_unit is not None else None
        raise ConfigError(getattr(e, "key", None) or given or "availability.file", str(e)) from None  # (a grid's)


def _stop_on_signals(mapper, out: Path) -> None:
    """SIGINT, SIGTERM and SIGHUP (the terminal closed): the first ends generation and drains for a few seconds
    (mgst.testbed.mapper.INTERRUPT_DRAIN; what is unfinished then is cut off); a second stops at once. A policy that
    does not return holds the mapper's loop, which sees neither: the second says so, and a third ends the run inside
    the policy (a KeyboardInterrupt there, which the mapper takes for the policy's failure: the run stops, its
    results written, exit 3; mgst.testbed.mapper.Mapper.feed)."""
    import signal  # noqa: PLC0415
    import time  # noqa: PLC0415

    from mgst.testbed.mapper import INTERRUPT_DRAIN  # noqa: PLC0415

    def handler(signum, _frame) -> None:
        name = signal.Signals(signum).name
        deciding = mapper.deciding_since
        if mapper.clock.t0 is None and not mapper.stopping:  # (a resume holds its clock: t0 is set then)
            mapper.stopping = True
            print(f"\nmgst: {name}: stopping; no run has begun (it was waiting for pullers)", file=sys.stderr)
        elif mapper.stopping and mapper.aborting and deciding is not None:
            print(f"\nmgst: {name}: ending the run inside the policy: it stops as a run whose policy fails does, "
                  f"what it did written in {out}", file=sys.stderr)
            raise KeyboardInterrupt  # (the mapper's feed takes it for the policy's failure: mgst.testbed.mapper)
        elif mapper.stopping:
            mapper.aborting = True
            held = None if deciding is None else time.perf_counter() - deciding
            if held is not None and held > POLICY_STUCK_S:
                print(f"\nmgst: {name}: the policy {mapper.core.policy.name!r} has not returned for {held:.0f} s: the "
                      "run stops when it does (again to end it now, inside the policy)", file=sys.stderr)
            else:
                print("\nmgst: stopping now (the journal is consistent)", file=sys.stderr)
        else:
            mapper.stopping = True
            print(f"\nmgst: {name}: no more jobs; draining for at most {INTERRUPT_DRAIN:g} s (again to stop now)",
                  file=sys.stderr)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, handler)


def _puller_command(endpoint: str, args: argparse.Namespace, exp) -> str:
    """The command that starts a puller for this mapper, to paste on a lab machine: no secret in it (a key folder
    is named, the copy of this one that machine has)."""
    import shlex  # noqa: PLC0415
    import socket  # noqa: PLC0415

    connect = endpoint  # (ipc://: the same path on this machine)
    if endpoint.startswith("tcp://"):
        host, port = endpoint[len("tcp://"):].rsplit(":", 1)
        if host in ("*", "0.0.0.0", "[::]", "::"):
            host = socket.getfqdn()
            if host.split(".")[0] in ("localhost", "ip6-localhost"):  # a name only this machine answers to
                host = "HEAD-NODE"
        connect = f"tcp://{host}:{port}"
    name = exp.machines[0].name if len(exp.machines) == 1 else "NAME"
    keys = "--insecure" if args.insecure else f"--keys {shlex.quote(str(args.keys or 'KEYS'))}"
    return f"python -m puller --connect {shlex.quote(connect)} --machine {name} {keys}"


def _open_live(args: argparse.Namespace, exp, out: Path, keys: Path | None):
    """The live view of the run (None with --no-live), serving before anything else starts; exit 2 if it
    cannot be served."""
    if args.live is None:
        if args.live_token_file is not None:
            raise ConfigError("--live-token-file", "is the live view's token, and --no-live serves none")
        return None
    from mgst.testbed.live.view import TokenError, open_live_view  # noqa: PLC0415

    try:
        view, token_file = open_live_view(args.live, args.live_token_file, keys, out, exp, tuple(args.imports))
    except ValueError as e:
        token = isinstance(e, TokenError) and args.live_token_file is not None
        raise ConfigError("--live-token-file" if token else "--live", str(e)) from None
    view.token_file = token_file
    return view


def _announce_live(live) -> None:
    """The live view's URL, once the run's mapper exists (a run that cannot start does not advertise it)."""
    if live is not None:
        token = live.token_file
        needs = f" (token in {token}: open {live.url}?token=...)" if token is not None else ""
        print(f"mgst: live view at {live.url}{needs}", file=sys.stderr)


def _close_live(live) -> None:
    if live is not None:
        live.finish()
        live.close()


def _default_out(name: str) -> Path:
    import time  # noqa: PLC0415

    return Path("runs") / f"{folder_name(name)}-{time.strftime('%Y%m%d-%H%M%S')}"


def _progress_printer(enabled: bool):
    """A mapper progress callback: one refreshed line on stderr (the paper's monitoring)."""
    from mgst.core.state import JobStatus, MachineState  # noqa: PLC0415

    def show(mapper) -> None:
        if not enabled:
            return
        core = mapper.core
        n = len(core.classes)
        queued, running, done, wait, waited = [0] * n, [0] * n, [0] * n, [0.0] * n, [0] * n
        for rec in core.jobs.values():
            c = rec.job.job_class
            if rec.status is JobStatus.QUEUED:
                queued[c] += 1
            elif rec.status is JobStatus.RUNNING:
                running[c] += 1
            else:
                done[c] += 1
            if rec.first_sent is not None:
                wait[c] += rec.first_sent - rec.job.submitted
                waited[c] += 1
        import time  # noqa: PLC0415

        now = time.time()
        elapsed = mapper.elapsed(now)
        if mapper.t0 is None:
            line = f"waiting for pullers: {mapper.registered()}/{len(mapper.conns)} registered"
        elif mapper.resuming():  # (the clock stands still: the outage is cut out of the run)
            line = (f"resuming at {elapsed:.0f} s: waiting for pullers: {mapper.registered()}/{len(mapper.conns)} "
                    "registered")
        else:
            left = max(0.0, mapper.duration - elapsed)
            fmt = "/".join
            when = "draining" if mapper.draining(now) else f"{left:4.0f} s left"
            up = sum(1 for m in core.machines if m.state is not MachineState.DOWN)  # (a machine lost is seen here)
            line = (f"{elapsed:5.0f} s, {when} | up {up}/{len(core.machines)} | queued {fmt(map(str, queued))} | "
                    f"running {fmt(map(str, running))} | done {fmt(map(str, done))} | mean wait "
                    f"{fmt(f'{w / k:.2f}' if k else '-' for w, k in zip(wait, waited))}")
        end = "\r" if sys.stderr.isatty() else "\n"
        print(f"{line:<110}", end=end, file=sys.stderr, flush=True)

    return show


def _network(spec: str | None, exp):
    """The --network asked (None: none), checked against the experiment and this machine: exit 2 if not."""
    if spec is None:
        return None
    from mgst.netem.links import MAX_LINKS, NetworkError, check_possible  # noqa: PLC0415
    from mgst.netem.spec import OPTION, parse_network  # noqa: PLC0415

    network = parse_network(spec)
    network.check_machines([m.name for m in exp.machines])
    if len(exp.machines) > MAX_LINKS:
        raise ConfigError(OPTION, f"gives at most {MAX_LINKS} machines a link; the experiment has {len(exp.machines)}")
    try:
        check_possible()
    except NetworkError as e:
        raise ConfigError(OPTION, str(e)) from None
    return network


def _length_warnings(args: argparse.Namespace, exp) -> list[str | None]:
    """A run too short for its figures, or one whose drain may last far longer than it (mgst.testbed.run_length);
    none for a resumed run, which keeps the settings it started with."""
    from mgst.testbed.run_length import few_jobs_warning, long_drain_warning  # noqa: PLC0415

    if getattr(args, "resume", None) is not None:
        return []
    duration = exp.testbed.duration if args.duration is None else args.duration
    time_unit = exp.testbed.time_unit if args.time_unit is None else args.time_unit
    return [few_jobs_warning(exp, duration, time_unit), long_drain_warning(exp, duration, time_unit)]


def run_command(args: argparse.Namespace) -> int:
    from mgst.netem.links import NetworkError  # noqa: PLC0415
    from mgst.testbed.finite_workload import late_arrivals_warning  # noqa: PLC0415
    from mgst.testbed.local_run import PullerStartError, check_memory_for_pullers, run_local  # noqa: PLC0415
    from mgst.testbed.resume import RunOver  # noqa: PLC0415
    from mgst.testbed.summary import oversubscription_warning  # noqa: PLC0415

    import_policies(args)
    exp = load_experiment(args.file, policy=args.policy, lengths_not_used=_lengths_not_used(args))
    check_memory_for_pullers(len(exp.machines))
    if args.resume is not None:
        out = args.resume
        network, seed = _resumed_settings(args, exp, out)
    else:
        _check_testbed_args(args, exp)
        network, seed = _network(args.network, exp), args.seed
        out = args.out or _default_out(exp.name)
        _check_new_out(out, "run")
    late = late_arrivals_warning(exp, exp.testbed.duration if args.duration is None else args.duration,
                                 exp.testbed.time_unit if args.time_unit is None else args.time_unit,
                                 exp.simulation.seed if args.seed is None else args.seed)
    for warning in (overload_warning(exp), oversubscription_warning(exp, args.executor or exp.testbed.executor), late,
                    simultaneous_bags_warning(exp), *_length_warnings(args, exp)):
        if warning:
            print(f"mgst: warning: {warning}", file=sys.stderr)
    if network is not None and not args.quiet:
        print(f"mgst: every puller behind an emulated link ({network.text or 'no impairment'}; the userspace relay "
              "of docs/network.md)", file=sys.stderr)
    from mgst.policies.failure import PolicyFailed  # noqa: PLC0415
    from mgst.testbed.store import JournalWriteError  # noqa: PLC0415

    live = _open_live(args, exp, out, None)
    printer = _progress_printer(not args.quiet)

    def on_mapper(mapper) -> None:
        _stop_on_signals(mapper, out)
        if live is not None:
            live.attach(mapper)
            _announce_live(live)

    try:
        result = run_local(exp, out, duration=args.duration, time_unit=args.time_unit, seed=seed,
                           executor=args.executor, progress=live.progress(printer) if live else printer,
                           insecure=args.insecure, imports=tuple(args.imports), on_mapper=on_mapper,
                           network=network, resume=args.resume is not None)
    except RunOver as e:  # exit 0: the finished run is there; nothing is started (its results written if missing)
        return _finished(e, args.json)
    except ValueError as e:
        if type(e) is not ValueError or args.resume is None:
            raise
        raise ConfigError("--resume", str(e)) from None
    except NetworkError as e:
        print(f"mgst: error: {e}", file=sys.stderr)
        return 1
    except PolicyFailed as e:  # (before the run began: nothing was run, nothing is kept)
        return _failed_before_the_run(e)
    except TimeoutError as e:  # (the local pullers did not start: their log says why)
        print(f"mgst: error: {e}; see {out}/pullers.log", file=sys.stderr)
        return 1
    except PullerStartError as e:  # (the run did not go on: a new run's journal is removed, a resumed one kept)
        print(f"mgst: error: {e}: run fewer machines here, or their pullers on lab machines ('mgst lab up', then "
              "'mgst mapper')", file=sys.stderr)
        return 1
    except JournalWriteError as e:
        print(f"mgst: error: {e}; the run is paused, and what was committed is kept: free space, then continue "
              f"it with 'mgst run {args.file} --resume {out}', or write what was done with 'mgst export {out}'",
              file=sys.stderr)
        return EXIT_PAUSED
    finally:
        _close_live(live)
    if not args.quiet and sys.stderr.isatty():
        print(file=sys.stderr)
    _report(result, args.json, out, ["journal.sqlite", *result.files, "pullers.log",
                                     *(["network.log"] if network is not None else []),
                                     *(["grid_sizes.csv"] if result.run.overlay is not None else [])])
    return _policy_failure_code(result.run, out)


def _finished(over: Any, as_json: bool) -> int:  # (a mgst.testbed.resume.RunOver)
    """A resume of a run that had finished: nothing to continue. Its results are written from its journal if the
    run was stopped before they all were (summary.json, written last, is missing): a resume that exits 0 leaves
    them in the folder."""
    out = over.out
    if (out / "summary.json").is_file():
        print(f"mgst: {over}", file=sys.stderr)
        return 0
    from mgst.testbed.export import export_run  # noqa: PLC0415

    print(f"mgst: the run in {out} had finished, but was stopped before its results were all written: writing them "
          "from its journal", file=sys.stderr)
    result = export_run(out)
    _report(result, as_json, out, result.files)
    return 0


def _report(result, as_json: bool, out: Path, files: list[str]) -> None:
    """A finished run's end on the terminal (mgst.testbed.beside): the summary JSON alone, or the comparison,
    the delays, the jobs, the gap's causes and the files written; the warnings on stderr."""
    from mgst.testbed.beside import format_beside  # noqa: PLC0415

    if as_json:
        print(json.dumps(result.summary))
    else:
        print(format_beside(result))
        print(f"wrote {out}/: {' '.join(files)}")
    _print_warnings(result.summary)


def _print_warnings(summary: dict) -> None:
    for w in summary.get("warnings", []):
        print(f"mgst: warning: {w}", file=sys.stderr)


def _resumed_settings(args: argparse.Namespace, exp, out: Path):
    """For ``mgst run --resume OUT``: the network its journal says its pullers ran behind (made again) and its
    seed (the network's draws); exit 2 for an option the run cannot change, or a folder holding no run."""
    from mgst.testbed.store import RunStore, StoreError  # noqa: PLC0415

    check_folder("--resume", out)
    given = [o for o, v in (("--duration", args.duration), ("--time-unit", args.time_unit), ("--seed", args.seed),
                            ("--executor", args.executor), ("--out", args.out), ("--network", args.network),
                            ("--policy", args.policy)) if v is not None]
    if given:
        raise ConfigError(given[0], "cannot be given with --resume: the run keeps the settings it started with")
    try:
        store = RunStore(out / "journal.sqlite", create=False)
    except StoreError as e:
        raise ConfigError("--resume", str(e)) from None
    try:
        meta = store.meta()
    finally:
        store.close()
    recorded = meta.get("network")
    spec = recorded.get("spec") if isinstance(recorded, dict) else None
    if recorded is not None and not isinstance(spec, str):
        raise ConfigError("--resume", f"{out}/journal.sqlite: its network settings are not readable ({recorded!r:.80})")
    return (None if spec is None else _network(spec, exp)), meta.get("seed")


def _check_new_out(out: Path, command: str) -> None:
    """ConfigError naming --out unless ``out`` can take a new run of ``command`` ("run" or "mapper")."""
    from mgst.testbed.run_dir import results_there  # noqa: PLC0415
    from mgst.testbed.store import FILENAME  # noqa: PLC0415

    check_folder("--out", out)
    if (out / FILENAME).exists():
        raise ConfigError("--out", f"{out} already holds a run (continue it with 'mgst {command} FILE --resume {out}', "
                                   "or choose another folder)")
    there = results_there(out)
    if there:
        raise ConfigError("--out", f"{out} already holds results ({', '.join(there)}), which the run would overwrite: "
                                   "choose another folder, or move them away")


def _refuse_overlay_grids(exp: Experiment) -> None:
    """ConfigError naming the first grid that grows with GridBot's overlay: its pullers are started by the run that
    grants them ('mgst run'), which a mapper serving lab pullers does not do."""
    from mgst.availability.registry import overlay_grids  # noqa: PLC0415

    grids = overlay_grids(exp)
    if grids:
        raise ConfigError(f"availability.grids[{grids[0].index}].start_hosts",
                          f"grid {grids[0].name!r} grows with the overlay, whose hosts' pullers 'mgst run' starts as "
                          "it grants them; 'mgst mapper' serves the pullers that come: give the grid a fixed set of "
                          "hosts (no start_hosts), or run it with 'mgst run'")


def mapper_command(args: argparse.Namespace) -> int:
    from mgst.testbed.mapper import Mapper  # noqa: PLC0415
    from mgst.testbed.resume import RunOver  # noqa: PLC0415
    from mgst.testbed.router import BindError  # noqa: PLC0415
    from mgst.wire import security  # noqa: PLC0415

    import_policies(args)
    exp = load_experiment(args.file, policy=args.policy, lengths_not_used=_lengths_not_used(args))
    _refuse_overlay_grids(exp)
    try:
        security.check_endpoint(args.bind, bind=True)
    except ValueError as e:
        raise ConfigError("--bind", str(e)) from None
    if args.bind.startswith("inproc://"):
        raise ConfigError("--bind", f"{args.bind!r} is reachable only within the mapper's own process: pullers "
                                    "connect over tcp:// (or ipc:// on this machine)")
    if args.resume is not None:
        check_folder("--resume", args.resume)
        given = [o for o, v in (("--duration", args.duration), ("--time-unit", args.time_unit), ("--seed", args.seed),
                                ("--executor", args.executor), ("--out", args.out), ("--policy", args.policy))
                 if v is not None]
        if given:
            raise ConfigError(given[0], "cannot be given with --resume: the run keeps the settings it started with")
        out = args.resume
    else:
        _check_testbed_args(args, exp)
        out = args.out or _default_out(exp.name)
        _check_new_out(out, "mapper")
    if not 0 < args.register_timeout < 1e7:
        raise ConfigError("--register-timeout", "must be a positive number of seconds")
    for warning in _length_warnings(args, exp):
        if warning:
            print(f"mgst: warning: {warning}", file=sys.stderr)
    if args.begin_with is not None and not 1 <= args.begin_with <= len(exp.machines):
        raise ConfigError("--begin-with", f"give 1 to {len(exp.machines)} (the experiment's machines)")
    if args.farewell is not None and not 0 <= args.farewell <= MAX_FAREWELL:
        raise ConfigError("--farewell", f"must be a number of seconds in [0, {MAX_FAREWELL:g}]")
    if args.keys is not None and args.insecure:  # (it listened with CURVE, and told pullers to speak without)
        raise ConfigError("--insecure", "contradicts --keys: give one (a puller refuses the pair too)")
    if args.keys is not None and not args.keys.is_dir():
        raise ConfigError("--keys", f"{args.keys} is not a folder (one made by 'mgst keys')")
    keys = security.server_keys(args.keys) if args.keys is not None else None
    live = _open_live(args, exp, out, args.keys)
    printer = _progress_printer(not args.quiet)
    try:
        mapper = Mapper(exp, args.bind, duration=args.duration, time_unit=args.time_unit, seed=args.seed,
                        register_timeout=args.register_timeout, begin_with=args.begin_with, executor=args.executor,
                        progress=live.progress(printer) if live else printer, keys=keys, insecure=args.insecure,
                        out=out, resume=args.resume is not None, imports=tuple(args.imports), farewell=args.farewell)
    except RunOver as e:  # exit 0: what was asked for, a finished run, is there; nothing is listened for
        _close_live(live)
        return _finished(e, args.json)
    except BindError as e:
        _close_live(live)
        raise ConfigError("--bind", str(e)) from None
    except ValueError as e:
        _close_live(live)
        if type(e) is not ValueError:
            raise
        raise ConfigError("--resume" if args.resume is not None else "(mapper)", str(e)) from None
    except BaseException:
        _close_live(live)
        raise
    _stop_on_signals(mapper, out)
    if live is not None:
        live.attach(mapper)
        _announce_live(live)
    print(f"mgst mapper: listening on {mapper.endpoint} ({mapper.security}) for {len(exp.machines)} pullers "
          f"({', '.join(m.name for m in exp.machines)}); journal {out}/journal.sqlite", file=sys.stderr)
    print(f"mgst mapper: on each lab machine: {_puller_command(mapper.endpoint, args, exp)} (or 'mgst lab up', "
          "docs/lab.md)", file=sys.stderr)
    if args.keys is not None:  # (the folder named is this machine's, with the mapper's secret: not to be copied whole)
        print(f"mgst mapper: a lab machine's --keys folder holds copies of {args.keys}/mapper.key and of its own "
              f"{args.keys}/pullers/NAME.key_secret only: mapper.key_secret stays on this machine", file=sys.stderr)
    from mgst.policies.failure import PolicyFailed  # noqa: PLC0415
    from mgst.testbed.store import JournalWriteError  # noqa: PLC0415

    try:
        run = mapper.run()
    except PolicyFailed as e:  # (before the run began: nothing was run, nothing is kept)
        return _failed_before_the_run(e)
    except TimeoutError as e:
        print(f"mgst: error: {e}", file=sys.stderr)
        if args.resume is None:
            print(f"mgst: no job was generated: {out}/journal.sqlite is removed; start again with the same command",
                  file=sys.stderr)
        return 1
    except JournalWriteError as e:
        print(f"mgst: error: {e}; the run is paused (the pullers were told, and keep their work): free space, "
              f"then continue it with 'mgst mapper {args.file} --resume {out}'", file=sys.stderr)
        return EXIT_PAUSED
    finally:
        _close_live(live)
    from mgst.testbed.beside import finish_outputs  # noqa: PLC0415

    result = finish_outputs(run, out, imports=tuple(args.imports))
    _report(result, args.json, out, ["journal.sqlite", *result.files])
    return _policy_failure_code(result.run, out)


def _failed_before_the_run(failure: Exception) -> int:
    """EXIT_POLICY_FAILED, once said why: the policy failed before the run began (its start)."""
    print(f"mgst: error: {failure}; the run did not begin: no job was run, and no journal kept (the traceback is "
          "above; the pullers' log, where they wrote one, is kept)", file=sys.stderr)
    return EXIT_POLICY_FAILED


def _policy_failure_code(run: Any, out: Path) -> int:  # (a mgst.testbed.run_result.TestbedRun)
    """0, or EXIT_POLICY_FAILED once said why: the run stopped when its policy failed (its results so far are
    written)."""
    if run.policy_failure is None:
        return 0
    print(f"mgst: error: {run.policy_failure}; the run was stopped there, and what it did is written in {out}/ "
          "(its traceback is above)", file=sys.stderr)
    return EXIT_POLICY_FAILED


def keys_command(args: argparse.Namespace) -> int:
    from mgst.wire import security  # noqa: PLC0415

    check_folder("FOLDER", args.folder)
    if args.experiment is not None:
        names = [m.name for m in load_experiment(args.experiment).machines]
        for i, name in enumerate(names):  # (a name the file allows, a key file cannot have: the file's to fix)
            try:
                security.check_key_name(name)
            except ValueError as e:
                raise ConfigError(f"machines (machine {i + 1})", str(e), str(args.experiment)) from None
    else:
        names = args.pullers or []
    mapper_public = args.folder / f"{security.MAPPER}.key"
    had_mapper = mapper_public.is_file()
    try:
        written = security.create_keys(args.folder, names, lab=args.lab, overwrite=args.force)
    except security.KeyFileError as e:  # (a folder or a kept key not the user's own)
        raise ConfigError("FOLDER", str(e)) from None
    except ValueError as e:
        raise ConfigError("--pullers", str(e)) from None
    f = args.folder
    print(f"wrote {len(written)} files into {f}/ ({'kept existing keys' if not written else 'new keys'})")
    if had_mapper and any(Path(w).name == mapper_public.name for w in written):
        print(f"mgst: warning: the mapper's key pair was replaced too: every lab machine's copy of {mapper_public} "
              "is stale, and its puller's handshake fails until it has the new one", file=sys.stderr)
    print(f"  head node: mgst mapper FILE --keys {f}   (uses {f}/mapper.key_secret and {f}/authorized/*.key)")
    print(f"  the mapper key's fingerprint: {security.fingerprint(security.load_public(f / f'{security.MAPPER}.key'))}"
          " (a puller prints it when it registers: compare)")
    who = "each" if not args.lab else "every"
    key = "pullers/NAME.key_secret" if not args.lab else f"pullers/{security.LAB}.key_secret"
    print(f"  {who} lab machine: copy {f}/mapper.key and {f}/{key} into a folder KEYS there, then")
    print("    mgst puller --connect tcp://HEAD-NODE:5555 --machine NAME --keys KEYS")
    print("  secret keys (*.key_secret) are readable by their owner only: copy them over ssh, never by mail")
    return 0


def export_command(args: argparse.Namespace) -> int:
    from mgst.testbed.export import export_run  # noqa: PLC0415
    from mgst.testbed.store import FILENAME, JournalWriteError  # noqa: PLC0415

    journal = FILENAME
    if args.folder.is_file():  # (a file: the journal itself, or no run's at all)
        given = f"{args.folder} is a file"
        if args.folder.name == FILENAME:
            raise ConfigError("FOLDER", f"{given}, the journal itself: give its run folder, {args.folder.parent}")
        raise ConfigError("FOLDER", f"{given}; mgst export expects a run folder (the --out of mgst run or mgst "
                                    f"mapper, holding {FILENAME})")
    if args.salvage:
        from mgst.testbed.salvage import salvage  # noqa: PLC0415

        try:
            salvaged = salvage(args.folder)
        except JournalWriteError as e:
            print(f"mgst: error: {e}", file=sys.stderr)
            return EXIT_PAUSED
        print(f"mgst: {salvaged.describe()}", file=sys.stderr)
        if not salvaged.settings:
            if not salvaged.events:  # (an empty journal would only be refused again)
                salvaged.target.unlink(missing_ok=True)
            return 2
        journal = salvaged.target.name
    result = export_run(args.folder, journal)
    if not result.run.closed:
        from mgst.testbed.export import not_closed  # noqa: PLC0415

        print(f"mgst: warning: {not_closed(result.run, folder=args.folder, salvaged=args.salvage)}", file=sys.stderr)
    _report(result, args.json, args.folder, result.files)
    return 0


def puller_command(args: argparse.Namespace) -> int:
    from puller.cli import run  # noqa: PLC0415

    return run(args)
