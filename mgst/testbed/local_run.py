"""The local run: a mapper and one puller process per machine on loopback, then the simulation beside it."""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from mgst.availability.registry import overlay_grids
from mgst.config import ConfigError
from mgst.core.state import MachineState
from mgst.model import Experiment
from mgst.netem.links import LabNetwork, NetworkError, totals
from mgst.netem.spec import NetworkSpec
from mgst.testbed.beside import Beside, finish_outputs
from mgst.testbed.mapper import REGISTER_TIMEOUT, Mapper
from mgst.testbed.overlay import (
    MapperOverlay,
    first_hosts,
    idle_exit,
    side_by_side,
    simulated_overlay,
    write_grid_sizes,
)
from mgst.testbed.run_keys import make_key_folder, remove_stale
from mgst.wire import security

log = logging.getLogger(__name__)

# Seconds pullers get to leave on their own (after the mapper's bye), then after SIGTERM,
# before they are killed.
EXIT_GRACE = 5.0
TERM_GRACE = 5.0
# Seconds between looks at the network relay during a run (a crashed relay stops the run this soon).
RELAY_WATCH = 0.2
# What one local puller process takes: 44 MB resident as measured here, 48.8 MB in a fresh virtual environment
# (31 MB of it its own, the rest shared libraries), idle or emulating jobs; a little above. The pullers of a run may
# take at most MEMORY_SHARE of the memory available when it starts: the mapper, the simulation beside the run and
# the rest of the machine keep the remainder.
PULLER_MEMORY = 56 << 20
MEMORY_SHARE = 0.8


class PullerStartError(OSError):
    """A local puller process could not be started (the machine's limit of processes, or its memory)."""


def check_memory_for_pullers(count: int) -> None:
    """ConfigError naming ``machines`` if ``count`` local pullers (PULLER_MEMORY each) would take more than
    MEMORY_SHARE of the memory available now."""
    need = count * PULLER_MEMORY
    available = psutil.virtual_memory().available
    if need > MEMORY_SHARE * available:
        raise ConfigError("machines", f"{count:,} local pullers need about {need / 1e9:.1f} GB ({PULLER_MEMORY >> 20} "
                                      f"MiB each), and this machine has {available / 1e9:.1f} GB available: run fewer "
                                      "machines here, or their pullers on lab machines ('mgst lab up', then "
                                      "'mgst mapper')")


def start_pullers(endpoint: str, names: list[str], log_path: Path, verbose: bool = False,
                  keys: Path | None = None, extra: tuple[str, ...] = (),
                  slots: list[int] | None = None,
                  network: LabNetwork | None = None,
                  idle_exits: list[float | None] | None = None) -> list[subprocess.Popen]:
    """One puller process per name, logging to ``log_path``; with ``keys`` (a folder made by
    security.create_keys) each uses its own key, else they connect without CURVE. ``slots``: each
    machine's slots (default 1). ``network``: each runs in its machine's namespace of it. ``idle_exits``: each
    one's ``--idle-exit`` (None: it stays to the end). PullerStartError if one cannot be started (those started are
    stopped).

    Each puller leads a process group of its own: Ctrl-C in the terminal (SIGINT to the foreground group) reaches
    the mapper alone, which drains, says bye, and then stops them (:func:`stop_pullers`); in the terminal's group
    they would die at once, their running jobs lost."""
    auth = ["--keys", str(keys)] if keys is not None else ["--insecure"]
    logf = open(log_path, "ab")  # noqa: SIM115 (the children keep it; closed when they are reaped)
    try:
        procs = []
        for i, name in enumerate(names):
            argv = [sys.executable, "-m", "puller", "--connect", endpoint, "--machine", name, *auth, *extra,
                    "--exit-with", str(os.getpid()),  # (this process killed outright: they leave at once)
                    *(["--slots", str(slots[i])] if slots is not None and slots[i] != 1 else []),
                    *(["--idle-exit", repr(idle_exits[i])] if idle_exits is not None and idle_exits[i] is not None
                      else []),
                    *(["-v"] if verbose else [])]
            if network is not None:
                argv = network.argv(i, argv)
            try:
                procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                              process_group=0))
            except OSError as e:  # (fork refused: the machine's limit of processes, or memory)
                raise PullerStartError(f"cannot start the puller of {name} ({i + 1} of {len(names)}): "
                                       f"{e.strerror or e}") from None
        return procs
    except BaseException:  # (a puller that cannot be started): those started are not the caller's to stop
        stop_pullers(procs, grace=0.0)
        raise
    finally:
        logf.close()


def local_allow_list(experiment: Experiment, executor: str) -> tuple[str, ...]:
    """Puller options allowing the experiment's commands, for a local run of the command executor.

    A command named by key refers to a lab machine's allow-list, which local pullers do not have.
    """
    if executor != "command":
        return ()
    opts: list[str] = []
    for i, command in enumerate(experiment.testbed.commands):
        if isinstance(command, str):
            raise ConfigError(f"testbed.commands[{i}]", f"names the allow-list key {command!r}: a local run "
                              "needs each command as an argv list")
        opts += ["--allow", shlex.join(command)]
    return tuple(opts)


def stop_pullers(procs: list[subprocess.Popen], *, grace: float = EXIT_GRACE, down: frozenset[int] = frozenset()
                 ) -> None:
    """Time to leave on their own, then SIGTERM, then SIGKILL; every child reaped (killed at once if the wait is
    interrupted: none is left behind). ``down``: the indices of pullers known to be down (an injected failure):
    they read no bye, so they get SIGTERM at once (a clean exit too) rather than after the grace."""
    try:
        for i in down:
            if i < len(procs) and procs[i].poll() is None:
                procs[i].terminate()
        _stop(procs, grace)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def _stop(procs: list[subprocess.Popen], grace: float) -> None:
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            break
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + TERM_GRACE
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("puller %d did not stop in %.0f s: killed", p.pid, TERM_GRACE)
            p.kill()
            p.wait()


def run_local(
    experiment: Experiment,
    out: Path,
    *,
    duration: float | None = None,
    time_unit: float | None = None,
    seed: int | None = None,
    progress: Callable[[Mapper], None] | None = None,
    replications: int | None = None,
    executor: str | None = None,
    insecure: bool = False,
    imports: tuple[str, ...] = (),
    on_mapper: Callable[[Mapper], None] | None = None,
    network: NetworkSpec | None = None,
    resume: bool = False,
) -> Beside:
    """A testbed run on loopback, with ephemeral CURVE keys (one per puller) unless ``insecure``,
    journalled to ``out/journal.sqlite``, then its simulation beside it (mgst.testbed.beside).

    ``network``: each puller runs behind that emulated link (mgst.netem), set up first and torn down last.
    ``resume``: continue the run journalled in ``out`` (with its seed and settings, and ``network`` its network,
    which the journal's must match), with new pullers and keys."""
    names = [m.name for m in experiment.machines]
    # Grids that grow and shrink with GridBot's overlay (mgst.testbed.overlay): only their first hosts start with
    # the run; the mapper's overlay starts the others' pullers as it grants them.
    grids = overlay_grids(experiment)
    if grids:
        key = f"availability.grids[{grids[0].index}].start_hosts"
        if resume:
            _refuse_overlay_resume(out, key)
        if network is not None:
            raise ConfigError(key, "grids that grow with the overlay do not run behind an emulated network (--network)")
    first = first_hosts(experiment, grids) if grids else list(range(len(names)))
    # Checked before anything is created (the mapper creates ``out`` and its journal once it has bound).
    check_memory_for_pullers(len(names))
    allow = local_allow_list(experiment, executor if executor is not None else experiment.testbed.executor)
    net = None
    failed = False  # the network relay ended during the run
    if network is not None:
        network.check_machines(names)
        net = LabNetwork(network, names, experiment.simulation.seed if seed is None else seed)
    remove_stale()  # the key folders of runs that were killed
    # 0700, its name holds this process's pid: removed below, or by the next run if this process is killed
    key_dir = None if insecure else make_key_folder()
    try:
        if net is not None:
            net.start()
        keys = None
        if key_dir is not None:
            try:
                security.create_keys(key_dir, names)
            except ValueError as e:  # a machine name that cannot name a key file
                raise ConfigError("machines.names", f"{e} (or run with --insecure)") from None
            keys = security.server_keys(key_dir)
        bind = "tcp://127.0.0.1:0" if net is None else f"tcp://{net.mapper_address}:0"
        mapper = Mapper(experiment, bind, duration=duration, time_unit=time_unit, seed=seed,
                        progress=progress, executor=executor, keys=keys, insecure=insecure, out=out,
                        imports=imports, resume=resume, begin_with=len(first) if grids else None,
                        # its pullers are started anew, as a run's first ones: they have as long to register
                        resume_wait=REGISTER_TIMEOUT,
                        network=None if net is None else _network_settings(net))
        if on_mapper is not None:
            on_mapper(mapper)  # e.g. the CLI's signal handlers
        pullers = LocalPullers(mapper.endpoint, names, out / "pullers.log", key_dir, allow,
                               [m.slots for m in experiment.machines], net,
                               idle_exit(grids, len(names), mapper.time_unit))
        if grids:
            mapper.overlay = MapperOverlay(grids, len(names), mapper.seed,
                                            mapper.core.policy, pullers.launch,
                                            pullers.alive, lambda j: mapper.journal.machines[j].registrations)
        run = None
        watch = _watch_relay(net, mapper) if net is not None else None
        try:
            try:
                pullers.start(first)
            except BaseException:  # (the run never began: its socket closed, its journal removed)
                mapper.close()
                raise
            run = mapper.run()
        finally:
            pullers.stop(grace=EXIT_GRACE if run is not None else 0.0, down=_down_at_end(mapper))
            if watch is not None:
                watch.set()
            if run is None and mapper.new_dir is not None:  # (a start that failed keeps nothing: nor an empty log)
                mapper.new_dir.discard_empty_log(out / "pullers.log")
        if mapper.overlay is not None and run is not None:  # (its simulation too: the sizes side by side)
            simulated = simulated_overlay(experiment, mapper.seed)
            run.overlay = side_by_side(mapper.overlay, simulated)
            write_grid_sizes(out / "grid_sizes.csv", mapper.overlay.overlay, simulated, mapper.time_unit)
    finally:
        try:
            if net is not None:
                failed = net.relay_failed()
                net.close()
                if out.is_dir():
                    (out / "network.log").write_text(net.relay_log)
        finally:
            if key_dir is not None:
                shutil.rmtree(key_dir, ignore_errors=True)
    assert run is not None  # (mapper.run() returned)
    if net is not None:
        run.network = {**_network_settings(net), "relay_failed": failed,
                       "relay_counts": totals(net.counts) if net.counts else None}
    result = finish_outputs(run, out, replications=replications, imports=imports)
    if net is not None and failed:
        raise NetworkError(f"the network relay ended during the run, which was stopped (see {out}/network.log); "
                           "the results written are of a broken network")
    return result


class LocalPullers:
    """The puller processes of a local run: those that start with it, and those GridBot's overlay starts later
    (:meth:`launch`, one machine at a time, replacing a puller of the machine still there: a preempted client is
    gone). Every process started is stopped and reaped by :meth:`stop`."""

    def __init__(self, endpoint: str, names: list[str], log_path: Path, keys: Path | None, extra: tuple[str, ...],
                 slots: list[int], network: LabNetwork | None, idle_exits: list[float | None]):
        self.endpoint, self.names, self.log_path, self.keys, self.extra = endpoint, names, log_path, keys, extra
        self.slots, self.network, self.idle_exits = slots, network, idle_exits
        self.procs: list[subprocess.Popen] = []
        self.machine_of: list[int] = []  # procs[k]'s machine

    def start(self, machines: list[int]) -> None:
        """The pullers of ``machines`` (all of the run's, in order, when ``network`` is given: it numbers them)."""
        self.procs += start_pullers(self.endpoint, [self.names[j] for j in machines], self.log_path, keys=self.keys,
                                    extra=self.extra, slots=[self.slots[j] for j in machines], network=self.network,
                                    idle_exits=[self.idle_exits[j] for j in machines])
        self.machine_of += machines

    def launch(self, j: int) -> None:
        """Machine ``j``'s puller, started now (the overlay granted the machine and its queue wait is over). A puller
        of the machine still there (down: its client was preempted, playing DOWN to the run's end) is gone first, at
        once and without a word, its process group with it, as a preempted client is."""
        for p, machine in zip(self.procs, self.machine_of):
            if machine == j and p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)  # (its own group: process_group=0 at its start)
                p.wait()
        try:
            self.start([j])
        except PullerStartError as e:  # the host does not arrive (alive() says so): the run goes on
            log.error("overlay: %s", e)

    def alive(self, j: int) -> bool:
        """Whether machine ``j``'s latest puller is running (False: never started, or it exited)."""
        for p, machine in zip(reversed(self.procs), reversed(self.machine_of)):
            if machine == j:
                return p.poll() is None
        return False

    def stop(self, *, grace: float, down: frozenset[int]) -> None:
        """Every puller stopped (those of machines ``down`` at once) and reaped."""
        stop_pullers(self.procs, grace=grace,
                     down=frozenset(k for k, j in enumerate(self.machine_of) if j in down))


def _down_at_end(mapper: Mapper) -> frozenset[int]:
    """The machines down as the run ends (their pullers play an injected failure and read nothing)."""
    return frozenset(j for j, m in enumerate(mapper.core.machines) if m.state is MachineState.DOWN)


def _network_settings(net: LabNetwork) -> dict:
    """The network asked and where the mapper was on it (the journal's settings; `mgst export` reads them)."""
    return {**net.spec.as_dict(), "mapper_address": net.mapper_address}


def _watch_relay(net: LabNetwork, mapper: Mapper) -> threading.Event:
    """A thread stopping the run at once if the network relay ends during it (set the event returned to end it)."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(RELAY_WATCH):
            if net.relay_failed():
                log.error("the network relay ended during the run: stopping the run")
                mapper.stopping = mapper.aborting = True
                return

    threading.Thread(target=watch, name="relay-watch", daemon=True).start()
    return done


def _refuse_overlay_resume(out: Path, key: str) -> None:
    """A run whose grids grow with the overlay is not resumed (its pullers were started by the run that stopped):
    RunOver if it had finished (as any finished run's resume says; its results written if missing), else a
    ConfigError naming ``key`` that says how to have what was done."""
    from mgst.testbed.replay import open_store  # noqa: PLC0415
    from mgst.testbed.resume import RunOver, run_is_over  # noqa: PLC0415
    from mgst.testbed.store import StoreError  # noqa: PLC0415

    try:
        store, meta, _ = open_store(out)
    except StoreError:  # no journal there, or not one: the refusal below says what matters
        meta = {}
    else:
        store.close()
    if run_is_over(meta):
        raise RunOver(out)
    raise ConfigError(key, "a run whose grids grow with the overlay cannot be resumed (its pullers are started by "
                           f"the run that was stopped): 'mgst export {out}' writes the results of what it did")
