"""A testbed run's per-job overheads, measured per machine from its journal, for the simulation (mgst.sim.overheads)."""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass
from pathlib import Path

from mgst.model import Experiment, FailureModel, WeibullNormalFailures
from mgst.sim.overheads import MachineOverheads, Overheads, pooled
from mgst.testbed.journal import Journal
from mgst.testbed.replay import open_store
from mgst.testbed.store import StoreError

log = logging.getLogger(__name__)

# A job decided more than this after its arrival, its machine already waiting, waited for the policy (LPAS_DG
# re-solving at an availability event, say), which the simulation does itself: only the mapper's own lag in taking an
# arrival is an overhead, and that is milliseconds (docs/fidelity.md: scheduling delay p99 under 4 ms on loopback;
# tens of ms on a machine at load 28), while a policy's waits seen in the journals were seconds.
ARRIVAL_LAG_MAX = 0.5


@dataclass(frozen=True, slots=True)
class Measured:
    """One machine's overheads as the journal recorded them, in wall seconds, one value per job."""

    name: str
    pre: list[float]  # t4 - t3, or t4 - submitted (see measure): the mapper's lag and the job's way to the puller
    post: list[float]  # t6 - t5: the result's way back
    overrun: list[float]  # (t5 - t4) - size / (mu'_ij a_j): empty when not measured (see measure)


def read_journal(run_dir: Path) -> tuple[Journal, dict, Experiment]:
    """The journal of the run in ``run_dir`` (its instants clock-corrected as recorded), the run's settings and its
    experiment; StoreError if there is no usable journal. The core is not replayed: the instants are the journal's."""
    store, meta, experiment = open_store(run_dir)
    try:
        journal = Journal(experiment)
        for kind, args in store.events():
            if kind not in ("core", "event") and not journal.apply(kind, args):
                raise StoreError(f"{store.path}: unknown event {kind!r}")
    finally:
        store.close()
    return journal, meta, experiment


def measure(journal: Journal, time_unit: float) -> list[Measured]:
    """Per machine of the journal's experiment, the overheads of its jobs (wall seconds; ``time_unit`` is the run's,
    which turns the model's computing time into wall time).

    pre, from every replica that started: t4 - t3 (the job's way out and the puller's start); for a job's first
    replica decided at most ARRIVAL_LAG_MAX after its arrival on a machine already waiting (t2 <= submitted),
    t4 - submitted (the mapper's lag in taking the arrival too). A decision on the request itself has t3 = t2 (the
    same message's instant); any other decision was the policy's own wait, which is not an overhead (nor is a
    resubmitted job's, at an instant the journal does not keep). post, from every replica whose result the mapper
    took: t6 - t5. overrun,
    from first replicas that completed, only where the model's computing time is known from the file: no owner
    reclaiming CPU (an availability model of up and down periods only), no staging, and a CPU for every slot (on a
    host with fewer, a bundle's job waits for one between t4 and t5, which the model has as its own wait). A
    completed replica's t4 and t5 are taken within t3 to t6 (the puller's stamps are not trusted beyond what the
    mapper saw).
    """
    exp = journal.experiment
    measured = [Measured(m.name, [], [], []) for m in exp.machines]
    static_share = exp.failures is None or isinstance(exp.failures, (FailureModel, WeibullNormalFailures))
    with_overrun = static_share and exp.staging is None
    for r in journal.replicas.values():
        job = journal.jobs[r.job]
        first = job.replicas[0] == r.replica
        m = measured[r.machine]
        # The puller's instants (t4, t5) within the mapper's own, t3 to t6, when it has both: a puller's clock
        # that stepped, or a puller that lies, must not give the simulation overheads longer than the replica was out
        t4, t5 = r.t4, r.t5
        if r.t6 is not None:
            t4 = min(max(t4, r.t3), r.t6) if t4 is not None else None
            t5 = min(max(t5, t4 if t4 is not None else r.t3), r.t6) if t5 is not None else None
        if t4 is not None:
            lag = first and r.t2 is not None and r.t2 <= job.submitted and r.t3 - job.submitted <= ARRIVAL_LAG_MAX
            m.pre.append(max(0.0, t4 - (job.submitted if lag else r.t3)))
        if t5 is not None and r.t6 is not None:
            m.post.append(max(0.0, r.t6 - t5))
            machine = exp.machines[r.machine]
            if with_overrun and first and t4 is not None and machine.computing_slots >= machine.slots:
                computing = job.job.size / (machine.rates[job.job.job_class] * machine.availability) * time_unit
                m.overrun.append(t5 - t4 - computing)
    return measured


def overheads_from_run(run_dir: Path, experiment: Experiment, *, overrun: bool = True) -> Overheads:
    """The overheads measured in the run in ``run_dir``, in ``experiment``'s model time (wall seconds divided by its
    [testbed] time_unit: the run it predicts), for its machines (matched by name, which must be the same). A machine
    with too few jobs takes the pooled values (mgst.sim.overheads.pooled). ``overrun=False`` leaves the executor's
    overrun out. StoreError (no usable journal) or ValueError (another set of machines, no job recorded), with the
    reason."""
    journal, meta, run_exp = read_journal(run_dir)
    names = [m.name for m in experiment.machines]
    run_names = [m.name for m in run_exp.machines]
    if sorted(names) != sorted(run_names):
        raise ValueError(f"{run_dir} is a run of {run_exp.name!r} on machines {', '.join(run_names)}; "
                         f"{experiment.name!r} has {', '.join(names)}")
    by_name = {m.name: m for m in measure(journal, meta["time_unit"])}
    unit = experiment.testbed.time_unit
    if meta["time_unit"] != unit:
        log.info("overheads: %s ran at %g s per time unit; they are converted at %g s, this file's", run_dir,
                 meta["time_unit"], unit)
    per_machine = [MachineOverheads(*(tuple(v / unit for v in getattr(by_name[n], kind))
                                      for kind in ("pre", "post", "overrun"))) for n in names]
    try:
        machines = pooled(per_machine, names)
    except ValueError as e:
        raise ValueError(f"{run_dir}: {e}") from None
    result = Overheads(machines, str(run_dir))
    return result if overrun else result.without_overrun()


def describe(overheads: Overheads, time_unit: float) -> str:
    """One line: the mean overheads per job over the machines' values, in milliseconds of wall time."""
    def mean_ms(kind: str) -> str:
        values = [v for m in overheads.machines for v in getattr(m, kind)]
        return f"{statistics.fmean(values) * time_unit * 1e3:.3g} ms" if values else "not measured"

    return (f"overheads from {overheads.source}: mean pre-compute {mean_ms('pre')}, post-compute "
            f"{mean_ms('post')}, overrun {mean_ms('overrun')} per job (over the values of its "
            f"{len(overheads.machines)} machines)")
