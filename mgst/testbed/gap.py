"""Where a testbed run and its simulation differ beyond their intervals, and the causes its journal measured."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from mgst.analysis.compare import beyond
from mgst.availability import registry as availability_kinds
from mgst.results import Summary
from mgst.testbed.blackouts import all_down, law_all_down
from mgst.testbed.machines_csv import up_seconds
from mgst.testbed.overheads import measure
from mgst.testbed.requested_share import share_shortfalls
from mgst.testbed.run_result import TestbedRun, run_began
from mgst.wording import plural

# The mapper's own per-job delays (request, scheduling, communication, report: t1 to t6) are named as a cause
# when their mean sum reaches this share of the testbed's mean response time: below it they cannot explain a
# gap wider than both intervals (which are rarely narrower than a few per cent of the mean on a single run).
DELAY_SHARE = 0.02
# The mapper's loop stalls (mgst.testbed.journal.STALL) are named when together they last DELAY_SHARE of the run
# or more: a stall holds every job in flight and every arrival until it ends, but a short one in a long run cannot
# explain a gap wider than both intervals.
STALL_SHARE = DELAY_SHARE
# The wall time the mapper spent in the core (the policy's decisions) is named when it is this share of the run or
# more: like a stall, it holds every arrival, request and result while it lasts, a little at a time.
DECISION_SHARE = DELAY_SHARE
# Jobs that computed longer than the model's time for them (t5 - t4 against size / (mu'_ij a_j), the executor's own
# cost: a process started, an emulation's sleeps overshooting) are named when the mean excess reaches this share of
# the testbed's mean response time, as the delays are.
OVERRUN_SHARE = DELAY_SHARE
# The delays, as the journal names them (mgst.testbed.journal.Journal.delays), and the instants they span.
DELAYS = (("request_delay_s", "request (t2-t1)"), ("scheduling_delay_s", "scheduling (t3-t2)"),
          ("communication_delay_s", "communication (t4-t3)"), ("report_delay_s", "report (t6-t5)"))
# Of those, the one not added to a job's: a busy puller asks for work with its result, so that its request delay is
# its previous job's report delay (t1 = t5, t2 = t6: counted twice, a delay cause said 152 ms a job where the
# overheads measured 101 ms); an idle puller's request, made before the job was there, holds no job
NOT_ADDED = "request_delay_s"
# The bag metrics compared, as BagSummary names them.
BAG_METRICS = ("avt", "makespan", "waiting", "rwt")
# A machine down (not by a mapper's outage) for this share of the run or more beyond what its failure law has it
# down in the long run (none without failures) is named: a puller killed and not started again, one that never came
# back after a resume, a lab machine switched off. Its law's own failures the simulation has too.
DOWN_SHARE = 0.10
# Every machine down at once (a partition of the head node's network, every puller stopped), beyond what their
# failure laws have them so by chance, for this share of the run or more, is named: each machine alone may stay under
# DOWN_SHARE (a 4 s blackout of a 45 s run: 9 % each, +499 % on the mean response, named nowhere). Not where a
# machine is named for its own downtime (a puller killed: the others' failures then leave none up at times).
ALL_DOWN_SHARE = 0.02
# Jobs cut off (not done when the drain ended) in this share of those generated or more are said: the means are of
# the jobs done, the slowest left out, so the testbed can read better than its model for that alone.
CUT_OFF_SHARE = 0.05


@dataclass(frozen=True, slots=True)
class Difference:
    """One figure on which the testbed and the simulation differ beyond their intervals."""

    what: str  # "class 1", "overall", "AVT", ...
    testbed: float
    simulation: float
    relative: float  # (testbed - simulation) / simulation

    @property
    def slower(self) -> bool:
        """Whether the testbed did worse than simulated: every metric compared is one where more is worse."""
        return self.testbed > self.simulation


@dataclass(frozen=True, slots=True)
class Cause:
    """A measured cause: what the journal saw, in a sentence, and its figures."""

    kind: str  # cpu_share, delays, overrun, stalls, decisions, unheld, all_down, downtime, suspicions, ...
    text: str
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Gap:
    differences: list[Difference]
    causes: list[Cause]
    cut_off: int = 0  # jobs generated and not done
    generated: int = 0
    # A side without a steady state (its summary's overload warning: the setting's, or its figures grew through
    # the run): its means grow with the run's length, and so does their difference
    unsteady: bool = False

    def as_dict(self) -> dict[str, Any]:
        out = {"differences": [{k: _n(v) for k, v in asdict(d).items()} for d in self.differences],
               "causes": [asdict(c) for c in self.causes]}
        if self.unsteady:
            out["no_steady_state"] = True
        return out

    def describe(self) -> list[str]:
        """Lines for the terminal: nothing when the two agree within their intervals."""
        if not self.differences:
            return []
        lines = ["testbed and simulation differ beyond their intervals on: "
                 + ", ".join(f"{d.what} ({_change(d)})" for d in self.differences)]
        if self.unsteady:
            lines.append("  with no steady state (the WARNING above), the means grow with the run's length, and so "
                         "does their difference: a longer or shorter run would differ by another amount")
        if self.generated and self.cut_off >= CUT_OFF_SHARE * self.generated:
            lines.append(f"  {self.cut_off} of the {self.generated} jobs were cut off (not done when the drain "
                         "ended): the testbed's means are of the jobs done, the slowest left out, so they cannot be "
                         "set beside the model's")
        elif not any(d.slower for d in self.differences) and not self.causes:
            lines.append("  the testbed did better than the model: the slowdowns the journal measures (CPU shares, "
                         "delays, stalls, suspicions, time-outs, refusals) cannot explain it (a single run's sample "
                         "path differs from the simulation's, or the model is pessimistic)")
        elif not self.causes:
            lines.append("  no measured cause: CPU shares, delays, the executor's overrun, the mapper's loop and its "
                         "time in the policy, machines down, suspicions, time-outs and refusals are all as the model "
                         "assumes (a single run's sample path differs from the simulation's)")
        lines += [f"  cause: {c.text}" for c in self.causes]
        if any(d.slower for d in self.differences):
            lines.append("  how much of the gap this run's measured overheads explain: 'mgst simulate FILE --overheads "
                         "RUN_DIR' simulates with them (docs/models.md, Overheads)")
        return lines


def _change(d: Difference) -> str:
    """The relative difference; against a simulated 0 (RWT without waste) it has none: both figures."""
    return f"{d.relative:+.1%}" if math.isfinite(d.relative) else f"{d.testbed:.4g} against {d.simulation:.4g}"


def _n(x: Any) -> Any:
    return round(x, 6) if isinstance(x, float) and math.isfinite(x) else (None if isinstance(x, float) else x)


def differences(testbed: Summary, simulation: Summary) -> list[Difference]:
    """Every class (with jobs on both sides), the overall mean and, for bags, each bag metric that differs."""
    out = []
    pairs: list[tuple[str, tuple[float, float, float], tuple[float, float, float]]] = []
    if testbed.bags is None:
        for name, t, s in zip(testbed.class_names, testbed.classes, simulation.classes):
            if t.jobs and s.jobs:
                pairs.append((f"class {name}", (t.mean, t.low, t.high), (s.mean, s.low, s.high)))
        t, s = testbed.overall, simulation.overall
        pairs.append(("overall", (t.mean, t.low, t.high), (s.mean, s.low, s.high)))
    elif simulation.bags is not None:
        for name in BAG_METRICS:
            tm, sm = getattr(testbed.bags, name), getattr(simulation.bags, name)
            if tm is not None and sm is not None:
                pairs.append((name.upper(), (tm.mean, tm.low, tm.high), (sm.mean, sm.low, sm.high)))
    for what, t3, s3 in pairs:
        if beyond(t3, s3):
            out.append(Difference(what, t3[0], s3[0], (t3[0] - s3[0]) / s3[0] if s3[0] else math.nan))
    return out


def measured_causes(run: TestbedRun, testbed: Summary) -> list[Cause]:
    """What the journal measured that the model does not have: CPU shares short of the requested ones, the
    mapper's per-job delays, jobs computing longer than the model's time (overrun), the stalls of its loop, the time
    it spent deciding, suspicions, time-outs and refusals."""
    causes = []
    shortfalls = share_shortfalls(run)
    for s in shortfalls:
        causes.append(Cause(
            "cpu_share", f"machine {s.name} achieved a CPU share of {s.achieved:.2f} for the {s.requested:.2f} "
            f"requested (over {s.jobs} jobs): its jobs ran {s.requested / max(s.achieved, 1e-9):.2g} "
            "times slower than the model's",
            {"machine": s.name, "requested": round(s.requested, 6), "achieved": round(s.achieved, 6), "jobs": s.jobs}))
    delays = run.journal.delays()
    means = {key: (delays.get(key) or {}).get("mean") or 0.0 for key, _ in DELAYS}
    response_s = testbed.overall.mean * run.time_unit
    total = sum(v for key, v in means.items() if key != NOT_ADDED)
    # A machine is held (idle) through each delay: against the time a job computes, they are added load, which near
    # saturation lengthens every queue while their share of the (lengthened) response stays small.
    done = [run.journal.replicas.get(j.done_by) for j in run.journal.jobs.values() if j.done_by is not None]
    computed = [r.t5 - r.t4 for r in done if r is not None and r.t4 is not None and r.t5 is not None]
    compute_s = sum(computed) / len(computed) if computed else math.nan
    of_response = math.isfinite(response_s) and total >= DELAY_SHARE * response_s
    of_compute = compute_s > 0 and total >= DELAY_SHARE * compute_s
    if total > 0 and (of_response or of_compute):
        parts = ", ".join(f"{label} {means[key] * 1e3:.3g} ms" for key, label in DELAYS if key != NOT_ADDED)
        label = dict(DELAYS)[NOT_ADDED]
        parts += (f" ({label} {means[NOT_ADDED] * 1e3:.3g} ms not added: a busy puller asks with its previous "
                  "result, whose report it is)")
        held = (f", {total / compute_s:.1%} of the mean time a job computes (a machine held that much longer a job, "
                "which near saturation lengthens every queue)" if compute_s > 0 else "")
        causes.append(Cause(
            "delays", f"the mapper's per-job delays, which the model does not have, add {total * 1e3:.3g} ms to each "
            f"job on average ({total / response_s:.1%} of the mean response time{held}): {parts}",
            {"mean_s": {key: round(v, 9) for key, v in means.items()},
             "share_of_response": round(total / response_s, 6),
             "share_of_compute": round(total / compute_s, 6) if compute_s > 0 else None}))
    overrun = _overrun(run, response_s, {s.name for s in shortfalls})
    if overrun is not None:
        causes.append(overrun)
    stalls = run.journal.stalls
    stalled = sum(st[1] for st in stalls)
    length = run.end - run.t0
    if stalls and length > 0 and stalled >= STALL_SHARE * length:
        at, longest = max(stalls, key=lambda st: st[1])
        causes.append(Cause(
            "stalls", f"the mapper's loop stalled {len(stalls)} time{'s' if len(stalls) > 1 else ''}, {stalled:.3g} s "
            f"in all (the longest {longest:.3g} s, {at:.0f} s into the run): arrivals, requests and results waited "
            "meanwhile, which the model does not have",
            {"count": len(stalls), "total_s": round(stalled, 6), "longest_s": round(longest, 6),
             "longest_at_s": round(at, 6), "share_of_run": round(stalled / length, 6)}))
    unheld = run.journal.requeue_causes.get("unheld", 0)
    if unheld:
        longest = max((st[1] for st in stalls), default=0.0)
        when = (f"the mapper's loop stalled, the longest {longest:.3g} s" if stalls else
                "a silence shorter than a stall the journal keeps: a long decision, the host or the network")
        causes.append(Cause(
            "unheld", f"{plural(unheld, 'job')} sent to pullers as they reconnected never reached them and went back "
            "to the queue, which the model does not have (a puller that hears nothing from the mapper for its "
            f"liveness window reconnects: {when})", {"jobs": unheld, "longest_stall_s": round(longest, 6)}))
    deciding = run.decision_time
    if deciding is not None and deciding.inputs and length > 0 and deciding.total_s >= DECISION_SHARE * length:
        causes.append(Cause(
            "decisions", f"the policy and the core took {deciding.total_s:.3g} s of the mapper's time to handle "
            f"{deciding.inputs} inputs ({deciding.total_s / deciding.inputs * 1e3:.3g} ms each on average, the "
            f"longest {deciding.longest_s * 1e3:.3g} ms; {deciding.total_s / length:.0%} of the run): arrivals, "
            "requests and results waited meanwhile, where the model's decisions take no time",
            deciding.summary(length)))
    down = _downtime(run)
    blackout, span = all_down(run)
    law = law_all_down(availability_kinds.capacity(run.experiment)[0])
    # (a machine down long enough alone is named below: every machine down at once is then partly its doing)
    if not down and len(run.journal.machines) > 1 and blackout / span - law >= ALL_DOWN_SHARE:
        causes.append(Cause(
            "all_down", f"every machine was down at once for {blackout:.3g} s ({blackout / span:.1%} of the run"
            + (f"; their failure laws, independent, have it {law:.1%}" if law > 0 else "") + "): the head node's "
            "network cut (a partition), or every puller stopped at once; jobs waited for no machine meanwhile",
            {"seconds": round(blackout, 6), "share": round(blackout / span, 6), "law_share": round(law, 6)}))
    if down:
        if run.experiment.failures is None:
            text = ("machines down for " + ", ".join(f"{name} {share:.0%}" for name, (share, _) in down.items())
                    + " of the run, which the model, without failures, does not have")
        else:
            text = ("machines down for more of the run than their failure law has them: " + ", ".join(
                f"{name} {share:.0%} (its law: {law:.0%})" for name, (share, law) in down.items()))
        loss = (run.network or {}).get("loss_percent") or 0.0
        hint = (f" (the emulated network's loss, {loss:g} %, drops heartbeats: a silence long enough is taken for a "
                "failure)" if loss > 0 else " (a puller killed, or not back after a resume?)")
        causes.append(Cause(
            "downtime", text + hint,
            {"share_by_machine": {name: round(share, 6) for name, (share, _) in down.items()},
             "law_by_machine": {name: round(law, 6) for name, (_, law) in down.items()}}))
    names = [m.name for m in run.journal.machines]
    suspected = {names[j]: m.stats.suspicions for j, m in enumerate(run.core.machines) if m.stats.suspicions}
    if suspected:
        causes.append(Cause(
            "suspicions", f"{sum(suspected.values())} suspicions (machines the policy took down without a failure, "
            f"their replicas lost): {_per_machine(suspected)}", {"by_machine": suspected}))
    timed_out = sum(1 for j in run.journal.jobs.values() if j.timed_out)
    if timed_out:
        by = Counter(names[r.machine] for r in run.journal.replicas.values() if r.outcome == "timeout")
        causes.append(Cause(
            "timeouts", f"{timed_out} jobs timed out (a replica given up on, the job sent again): "
            f"{_per_machine(dict(by))}", {"jobs": timed_out, "replicas_by_machine": dict(by)}))
    refused = Counter(names[r.machine] for r in run.journal.replicas.values() if r.outcome == "refused")
    if refused:
        expelled = [m.name for m in run.journal.machines if m.expelled is not None]
        causes.append(Cause(
            "refusals", f"{sum(refused.values())} replicas refused by pullers' allow-lists: "
            f"{_per_machine(dict(refused))}" + (f"; expelled: {', '.join(expelled)}" if expelled else ""),
            {"by_machine": dict(refused), "expelled": expelled}))
    return causes


def _overrun(run: TestbedRun, response_s: float, short: set[str]) -> Cause | None:
    """Jobs that computed longer than the model's time for them, on average over every machine's first replicas
    (mgst.testbed.overheads.measure: where the share is static and nothing stages), if that reaches OVERRUN_SHARE of
    the mean response time; machines named for a CPU share short of the requested (``short``) are left out: their
    longer computing is that cause."""
    by_machine = {m.name: m.overrun for m in measure(run.journal, run.time_unit) if m.overrun and m.name not in short}
    excess = [x for xs in by_machine.values() for x in xs]
    if not excess or not math.isfinite(response_s) or response_s <= 0.0:
        return None
    mean = sum(excess) / len(excess)
    if mean < OVERRUN_SHARE * response_s:
        return None
    means = {name: sum(xs) / len(xs) for name, xs in by_machine.items()}
    worst = max(means, key=lambda name: means[name])
    return Cause(
        "overrun", f"jobs computed {mean * 1e3:.3g} ms longer than the model's time for them on average "
        f"({mean / response_s:.1%} of the mean response time; {worst} the most, {means[worst] * 1e3:.3g} ms, over "
        f"{len(excess)} jobs): the executor's own cost (a process started, an emulation overshooting), which the "
        "model does not have",
        {"mean_s": round(mean, 9), "share_of_response": round(mean / response_s, 6), "jobs": len(excess),
         "mean_s_by_machine": {name: round(v, 9) for name, v in means.items()}})


def _downtime(run: TestbedRun) -> dict[str, tuple[float, float]]:
    """The machines down (not in a mapper's outage) for DOWN_SHARE of the run or more beyond their failure law's
    long-run share down (its capacity: up fraction times CPU share, so a law that reclaims is allowed more), with
    their share of the run down and the law's."""
    fractions, _ = availability_kinds.capacity(run.experiment)
    began = run_began(run)
    # (a mapper's outages, and each resume's wait for its pullers, model time standing still: not the machines')
    outages = sum(max(0.0, resumed - last) for last, resumed in run.journal.outages)
    outages += sum(float(r.get("reconnect_s") or 0.0) for r in run.resumes)
    span = max(1e-9, run.end - began - outages)
    out = {}
    for m, fraction in zip(run.journal.machines, fractions):
        share = 1.0 - min(1.0, up_seconds(m, began, run.end) / span)
        law = max(0.0, 1.0 - fraction)
        if share - law >= DOWN_SHARE:
            out[m.name] = (share, law)
    return out


def _per_machine(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {n}" for name, n in counts.items())


def find_gap(run: TestbedRun, testbed: Summary, simulation: Summary) -> Gap:
    """The differences beyond the intervals and, when the testbed did worse on any, the causes the journal
    measured: each of them slows a run down, so none can explain a testbed better than its model."""
    diffs = differences(testbed, simulation)
    if any(d.slower for d in diffs):
        causes = measured_causes(run, testbed)
    else:  # (better: the one measure that can make a testbed faster, jobs computing less than the model's time)
        underrun = _underrun(run, testbed.overall.mean * run.time_unit) if diffs else None
        causes = [underrun] if underrun is not None else []
    return Gap(diffs, causes, len(run.cut_off), len(run.journal.jobs),
               testbed.overloaded is not None or simulation.overloaded is not None)


def _underrun(run: TestbedRun, response_s: float) -> Cause | None:
    """Jobs that computed shorter than the model's time for them, by OVERRUN_SHARE of the mean response time or
    more on average (as :func:`_overrun` measures the longer): the executor did less work than the sizes the model
    draws (a command that does not do its job's size), which makes a testbed faster than its model."""
    excess = [x for m in measure(run.journal, run.time_unit) for x in m.overrun]
    if not excess or not math.isfinite(response_s) or response_s <= 0.0:
        return None
    mean = sum(excess) / len(excess)
    if -mean < OVERRUN_SHARE * response_s:
        return None
    return Cause(
        "underrun", f"jobs computed {-mean * 1e3:.3g} ms shorter than the model's time for them on average "
        f"({-mean / response_s:.1%} of the mean response time, over {len(excess)} jobs): the executor did less work "
        "than the sizes the model draws (a command that does not do its job's size?), so the testbed ran faster",
        {"mean_s": round(mean, 9), "share_of_response": round(-mean / response_s, 6), "jobs": len(excess)})
