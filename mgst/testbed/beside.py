"""The end of every testbed run: the simulation of the same setting and job sequence beside it, the comparison,
the gap's measured causes, comparison.png and the output files (for `mgst run`, `mgst mapper` and `mgst export`)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mgst.analysis.compare import (
    bag_comparison,
    comparison,
    format_bag_comparison,
    format_comparison,
    plot_bag_comparison,
    plot_comparison,
)
from mgst.model import PoissonClasses
from mgst.results import Summary, format_table, write_jobs_csv
from mgst.sim.replications import default_workers, run_simulation
from mgst.testbed.finite_workload import FiniteWindow, bag_makespans, finite_window, format_bag_makespans
from mgst.testbed.gap import Gap, find_gap
from mgst.testbed.report import FILENAME as REPORT
from mgst.testbed.report import write_report
from mgst.testbed.run_dir import SIMULATION_JOBS, TABLE_FILES
from mgst.testbed.run_result import TestbedRun
from mgst.testbed.summary import format_requeues, summarize_testbed, testbed_bags, write_testbed_outputs
from mgst.whole_file import write_whole
from mgst.wording import plural

log = logging.getLogger(__name__)

# What summary.json's warnings say when the simulation beside a run was interrupted.
SKIPPED = ("the simulation beside the run was interrupted: the testbed's results are written without it "
           "('mgst export {out}' simulates and compares again)")
SIMULATION_FAILED = ("the simulation beside the run failed ({error}): the testbed's results are written without it "
                     "('mgst export {out}' simulates and compares again)")
NOT_SIMULATED_POLICY_FAILED = "the run stopped when its policy failed: it is not simulated beside"
# A simulation beside the run expected to spend at least this many seconds in its policy is announced with that time
# (nothing else is printed while it runs): a policy slow enough to hold the run back is as slow in each replication.
ANNOUNCE_SIMULATION_S = 10.0


class OutputsNotWritten(Exception):
    """A run's output files could not be written (a folder where one goes, a full disk); the journal keeps the run,
    and `mgst export DIR` writes them again."""


@dataclass(slots=True)
class Beside:
    """A testbed run's results, with its simulation (None when the run generated nothing to compare)."""

    run: TestbedRun
    testbed: Summary
    simulation: Summary | None
    gap: Gap | None
    summary: dict[str, Any]  # summary.json's object
    files: list[str]  # the files written, by name


def simulate_beside(run: TestbedRun, testbed: Summary, *, replications: int | None = None,
                    imports: tuple[str, ...] = (), window: FiniteWindow | None = None
                    ) -> tuple[Summary, list[tuple], list[tuple]]:
    """The run's setting simulated over the same model time, with the run's seed: replication 0 has the very same
    job sequence (and failure trace). A bag workload is compared with replication 0 alone (the same bags), its
    intervals by batch means like the testbed's; job classes with the file's replications. A finite workload
    the run generated to its end (a bag list) is simulated to its end too (mgst.testbed.finite_workload). Returns
    the summary, replication 0's bags.csv rows (empty without bags) and its jobs.csv rows (simulation_jobs.csv).
    ``window``: the run's finite_window (None: an endless workload)."""
    replications = beside_replications(run, replications)
    horizon, drain = (testbed.horizon, None) if window is None else (window.horizon, window.drain_limit)
    if run.cut_off:  # the testbed's drain was cut (an interrupt, the drain time-out) with jobs unfinished: the
        # simulation's is cut at the same model time, so that both count the jobs that ended by then (its full drain
        # set all of its own against the testbed's survivors: -50 % for an interrupted GridBot run)
        drain = max(0.0, run.core.now - horizon)
    sim, results = run_simulation(run.experiment, horizon=horizon, warmup=run.warmup, seed=run.seed,
                                  replications=replications, imports=imports, keep_bag_rows=True, drain_limit=drain,
                                  rows_of=0)
    bags = results[0].bags if results else None
    return sim, (bags.rows if bags is not None else []), (results[0].rows if results else [])


def beside_replications(run: TestbedRun, replications: int | None = None) -> int:
    """The replications simulated beside ``run``: ``replications`` if given; else one for a bag or trace workload
    (compared with replication 0, the same jobs), the file's for job classes."""
    if replications is not None:
        return replications
    if not isinstance(run.experiment.workload, PoissonClasses):
        return 1
    return run.experiment.simulation.replications


def simulation_time_in_policy(run: TestbedRun, replications: int, workers: int) -> float | None:
    """Wall seconds the simulation beside ``run`` is expected to spend in its policy, at least: each replication goes
    through the run's model time, and so makes about as many decisions as the run's mapper measured (its
    decision_time), ``workers`` replications at a time; None where the run measured none (a journal whose mapper
    died)."""
    if run.decision_time is None:
        return None
    return run.decision_time.total_s * math.ceil(replications / max(1, workers))


def format_overlay(overlay: dict | None) -> list[str]:
    """A line per grid that grew with the overlay: hosts asked for, and the most up at a turn, testbed and
    simulation."""
    lines = []
    for name, g in (overlay or {}).items():
        tb, sim = g["testbed"], g["simulation"]
        lines.append(f"overlay, grid {name!r} (at most {g['max_hosts']} hosts): {tb['requests']} hosts asked for on "
                     f"the testbed, {sim['requests']} in simulation; at most {tb['most_up']} up at a turn, "
                     f"{sim['most_up']} in simulation (grid_sizes.csv)")
    return lines


def finish_outputs(run: TestbedRun, out: Path, *, simulate: bool = True, replications: int | None = None,
                   imports: tuple[str, ...] = ()) -> Beside:
    """Summarise the run, simulate it (``simulate``), compare, find the gap's causes, and write jobs.csv,
    machines.csv, machine_periods.csv, summary.csv, bags.csv (bags), summary.json, comparison.png and
    report.html (mgst.testbed.report)."""
    imports = imports or run.imports
    with _outputs_written(out):
        testbed, extras = summarize_testbed(run)
    sim = gap = None
    sim_bags: list[tuple] = []
    sim_jobs: list[tuple] = []
    simulate = simulate and testbed.horizon > run.warmup  # (a run that generated nothing has nothing to simulate)
    if simulate and run.policy_failure is not None:  # (the same policy would fail beside it: nothing to compare)
        extras["warnings"] = [*extras.get("warnings", []), NOT_SIMULATED_POLICY_FAILED]
        simulate = False
    window = finite_window(run, testbed.horizon) if simulate else None
    if simulate:
        try:
            with _interruptible():
                reps = beside_replications(run, replications)
                workers = default_workers(reps)
                expected = simulation_time_in_policy(run, reps, workers)
                if expected is not None and expected >= ANNOUNCE_SIMULATION_S:
                    assert run.decision_time is not None
                    log.warning("simulating the run beside it takes about %.0f s or more: its policy took %.1f s of "
                                "the run to decide, and the simulation decides as much in each of its %s, %d at a "
                                "time (Ctrl-C skips the simulation; the results are written either way)", expected,
                                run.decision_time.total_s, plural(reps, "replication"), workers)
                else:
                    log.info("simulating the run beside it (Ctrl-C skips the simulation; the results are written "
                             "either way)")
                sim, sim_bags, sim_jobs = simulate_beside(run, testbed, replications=reps, imports=imports,
                                                          window=window)
        except KeyboardInterrupt:
            extras["warnings"] = [*extras.get("warnings", []), SKIPPED.format(out=out)]
        except Exception as e:  # (the policy, or an imported module, failed in simulation): the results are kept
            log.error("the simulation beside the run failed", exc_info=True)
            extras["warnings"] = [*extras.get("warnings", []), SIMULATION_FAILED.format(error=f"{type(e).__name__}: "
                                                                                          f"{e}", out=out)]
    if sim is not None:
        extras["simulation"] = sim.as_dict()
        extras["comparison"] = comparison(testbed, sim)
        if testbed.bags is not None:
            extras["bag_comparison"] = bag_comparison(testbed, sim)
            if window is not None:  # a bag list: each application's makespan
                extras["bag_makespans"] = bag_makespans(testbed_bags(run, keep_rows=True).rows, sim_bags)
        gap = find_gap(run, testbed, sim)
        extras["gap"] = gap.as_dict()
    else:  # (the schema's keys kept, null: a script reading them finds no simulation rather than fails)
        extras.update(simulation=None, comparison=None, gap=None)
    with _outputs_written(out):
        summary = write_testbed_outputs(run, testbed, extras, out, sim)
        files = list(TABLE_FILES)
        if testbed.bags is not None:
            files.append("bags.csv")
        if sim is not None:
            write_whole(out / SIMULATION_JOBS, lambda path: write_jobs_csv(path, sim_jobs))
            files.append(SIMULATION_JOBS)
            plot = plot_bag_comparison if testbed.bags is not None else plot_comparison
            write_whole(out / "comparison.png", lambda path: plot(testbed, sim, path))
            files.append("comparison.png")
        else:  # (an earlier export's chart and rows, of other results: a salvage's, say)
            for stale in ("comparison.png", SIMULATION_JOBS):
                if (out / stale).exists():
                    (out / stale).unlink()
                    log.info("%s/%s removed: no simulation beside these results", out, stale)
    try:
        write_report(run, summary, out)
        files.append(REPORT)
    except OSError as e:  # (the results are written: a page that cannot be made loses none of them)
        log.error("%s/%s could not be written: %s", out, REPORT, e.strerror or e)
    except Exception:  # (a bug in the page: its traceback, and the results kept)
        log.exception("%s/%s could not be written", out, REPORT)
    return Beside(run, testbed, sim, gap, summary, files)


@contextlib.contextmanager
def _outputs_written(out: Path) -> Iterator[None]:
    """Around summarising and writing a run's results: what fails there is OutputsNotWritten, one line saying why
    and that the journal keeps the run, not a traceback (the traceback is logged at debug level: ``mgst -vv``). A folder
    where a file goes or a full disk; or a bug, or the installed mgst changed under a long run (a module imported
    only now is not the one the run started with)."""
    try:
        yield
    except OSError as e:
        where = e.filename or out
        raise OutputsNotWritten(f"cannot write {where}: {e.strerror or e} (the journal keeps the run: 'mgst export "
                                f"{out}' writes its files again)") from None
    except Exception as e:
        log.debug("the results of %s could not be written", out, exc_info=True)
        raise OutputsNotWritten(f"the results of {out} could not be written ({type(e).__name__}: {e}); the journal "
                                f"keeps the run: 'mgst export {out}' writes its files again ('mgst -vv export "
                                f"{out}' shows where it fails)") from None


@contextlib.contextmanager
def _interruptible() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt while it lasts (in the main thread): the run is over
    (its handlers only drain a running mapper), and the user who interrupts now wants out, results written."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signums = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {s: signal.getsignal(s) for s in signums}
    for s in signums:
        signal.signal(s, signal.default_int_handler)
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def format_waste(testbed: Summary, simulation: Summary | None) -> str | None:
    """The losers that ran on after their job was done (their results discarded: GridBot's waste), on the testbed
    and in the simulation beside it, in one line; None if neither has any."""
    sides = [("testbed", testbed.waste)]
    if simulation is not None:
        sides.append(("simulation", simulation.waste))
    if all(w is None for _, w in sides):
        return None
    parts = [f"{side} none" if w is None else
             f"{side} {plural(w.replicas, 'replica')}, {w.machine_time:.6g} time units of machine time "
             f"({100 * w.share_of_busy:.1f} % of busy time)" for side, w in sides]
    return ("waste (losers kept after their job was done, charged until each ended: its result, discarded, a failure "
            "or its time-out): " + "; ".join(parts))


def format_beside(b: Beside) -> str:
    """What a run's end prints: the comparison (or the testbed's table alone), the delays, the jobs (and bags),
    and where the two differ beyond their intervals, the measured causes."""
    d = b.summary
    lines = []
    if b.simulation is None:
        lines.append(format_table(dataclasses.replace(b.testbed, unfinished=0)))
    elif b.testbed.bags is not None:
        lines.append(format_bag_comparison(b.testbed, b.simulation))
    else:
        lines.append(format_comparison(b.testbed, b.simulation))
    c = d["delays"]["communication_delay_s"]
    if c["median"] is not None:
        lines.append(f"communication delay (sent -> started): median {c['median'] * 1e3:.2f} ms, "
                     f"p99 {c['p99'] * 1e3:.2f} ms over {c['n']} jobs")
    noun = "tasks" if b.testbed.bags is not None else "jobs"
    resubmitted = format_requeues(d["requeues"], d.get("requeues_by_cause") or {})
    lines.append(f"{noun}: {d['jobs_generated']} generated, {d['jobs_done']} done, {len(d['cut_off'])} "
                 f"{'still in the system' if not b.run.closed else 'cut off'}, {resubmitted}, "
                 # (jobs, where the resubmissions above are counted each: a job may be resubmitted twice)
                 f"{d['timeouts']} {noun} timed out at least once (T/O)")
    outages = d.get("outages") or []
    if outages:  # (a resumed run: said where its figures are, not only in summary.json)
        across = d.get("jobs_across_outage", 0)
        lines.append(f"resumed after {plural(len(outages), 'outage')} of its mapper "
                     f"({sum(o['seconds'] for o in outages):.1f} s in all, model time standing still): "
                     f"{plural(across, 'job')} caught in one not counted (jobs.csv: Counted No; its times include "
                     "the outage)")
    if b.testbed.policy_counts:  # the policy's report() (LPAS_DG's fixes), testbed then simulation
        counts = ", ".join(f"{k} {v:g}" for k, v in b.testbed.policy_counts.items())
        lines.append(f"policy ({b.testbed.policy}): {counts}")
        if b.simulation is not None and b.simulation.policy_counts:  # (a replication is a run as long as this one)
            reps = b.simulation.replications
            counts = ", ".join(f"{k} {v / reps:.4g}" for k, v in b.simulation.policy_counts.items())
            lines.append(f"policy in the simulation (a replication's mean, of {reps}): {counts}")
    waste = format_waste(b.testbed, b.simulation)
    if waste is not None:
        lines.append(waste)
    if b.testbed.bags is not None:
        bags = b.testbed.bags
        lines.append(f"bags: {len(b.run.core.all_bags)} arrived, {bags.bags} counted (submitted after the warm-up, "
                     f"{b.testbed.warmup:g}), "
                     f"{bags.tasks} tasks in them")
    lines += format_bag_makespans(d.get("bag_makespans", []))
    lines += format_overlay(d.get("overlay"))
    if b.gap is not None:
        lines += b.gap.describe()
    return "\n".join(lines)
