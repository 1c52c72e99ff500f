"""Requests per second of GridBot's Algorithm 1 (its ClassAd evaluation) at 1,000 queued jobs and 1,000 hosts.

Every host runs one job (one slot, one cpu) and 1,000 more wait; a request is a host's result with its next request
(``Scheduler.replica_done(now, replica, ready=True)``: the core's completion, then Algorithm 1 and the Assign of the
job it picks), timed one by one; between two requests, untimed, a task joins the bag the job was taken from, so the
queue stays at 1,000 jobs. The same requests under ``fcfs_share`` (no expression) give the core's own cost, so the
difference is the policy's. The queued jobs are in 1, 10 or 100 bags; GridBot evaluates a bag's waiting tasks once
(``evaluate = "bag"``, the paper's section 6.4) or each of them (``"job"``, Algorithm 1 as printed).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import platform
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # also runs without PYTHONPATH (mgst is not installed)
    sys.path.insert(0, str(ROOT))

from mgst.core import Assign, Scheduler  # noqa: E402
from mgst.model import Bag, Job, JobClass, Machine  # noqa: E402
from mgst.papers.gridbot import ads as gridbot_ads  # noqa: E402
from mgst.policies import policy_class  # noqa: E402

# A policy of the paper's kind: a tail restricted to reliable hosts of a domain, a rank by recent work in the tail,
# bundles of twice the CPUs, a deadline by bundle size (Figure 3's, with the tail's conditions as GridBot writes them).
# The bags are in their throughput phase (a tail below 5 queued jobs: 10 queued per bag at 100 bags), where every
# host takes work.
EXPRESSIONS = {
    "JobRequirements": '!Tail ? true : regexp("lab", Host.Name) && Host.ErrorRate < 0.1',
    "Rank": "!Tail ? Priority : Host.JobsToday",
    "Concurrency": "2 * Host.NumCpus",
    "Deadline": "Concurrency * 2000",
    "tail_threshold": 5,
}


def scenario(policy_name: str, options: dict, hosts: int, queued: int, bags: int, seed: int):
    """A core with ``hosts`` busy one-slot hosts and ``queued`` jobs waiting in ``bags`` bags, and the next job id.

    GridBot fills the hosts evaluating each bag once (a bag's tasks each, 2,000 of them for each of the 1,000 hosts,
    would take minutes); its ``evaluate`` option is applied once they are busy."""
    cls = policy_class(policy_name)
    per_job = options.get("evaluate") == "job"
    if per_job:
        options = {**options, "evaluate": "bag"}
    policy = cls(cls.Options.from_mapping(options), random.Random(seed))
    rng = random.Random(seed)
    machines = [Machine(f"m{j}.{'lab' if j % 2 else 'home'}", (rng.uniform(0.5, 2.0),), 1.0, 1) for j in range(hosts)]
    core = Scheduler([JobClass("t", 0.0, 600.0)], machines, policy)
    core.report_holds = False
    core.report_completions = False
    core.start(0.0)
    per_bag = (hosts + queued) // bags
    next_id = 0
    for b in range(bags):  # (the bags first, then the hosts one by one: each request sees every bag)
        tasks = tuple(Job(next_id + i, 0, 0.0, 600.0, b) for i in range(per_bag))
        next_id += per_bag
        core.bag_arrived(0.0, Bag(b, 0.0, tasks, (("Priority", bags - b),)))
    for j in range(hosts):
        core.machine_ready(0.0, j)
    if per_job:
        policy.per_job = True
    return core, next_id


def run(policy_name: str, options: dict, hosts: int, queued: int, bags: int, requests: int, seed: int) -> float:
    """Requests per second (the median of 5 slices of the timed requests)."""
    core, next_id = scenario(policy_name, options, hosts, queued, bags, seed)
    now = 1.0
    times: list[float] = []
    replicas = list(core.live_replicas())
    gc.collect()
    gc.disable()
    try:
        for k in range(requests):
            r = replicas[k % len(replicas)]
            bag = r.job.bag
            t0 = time.perf_counter()
            out = core.replica_done(now, r.id, True)
            times.append(time.perf_counter() - t0)
            new = [o for o in out if type(o) is Assign]
            assert len(new) == 1, (policy_name, out)
            replicas[k % len(replicas)] = core.replica(new[0].replica)
            # the taken job's bag gets a task back: the queue stays at ``queued`` (untimed)
            core.job_arrived(now, Job(next_id, 0, 0.0, 600.0, bag.id))
            next_id += 1
            now += 0.01
    finally:
        gc.enable()
    assert core.queued_count == queued, core.queued_count
    slices = [sum(times[i::5]) / len(times[i::5]) for i in range(5)]
    return 1.0 / statistics.median(slices)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--hosts", type=int, default=1000)
    p.add_argument("--queued", type=int, default=1000)
    p.add_argument("--requests", type=int, default=2000, help="timed requests per run (per-job evaluation: 1/20)")
    p.add_argument("--bags", default="1,10,100")
    p.add_argument("--rounds", type=int, default=3, help="rounds, each running every row once, alternated")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    rows = []
    for bags in map(int, args.bags.split(",")):
        rows.append((bags, "fcfs_share (no expression: the core's cost)", "fcfs_share", {"replicas": 1}, False))
        rows.append((bags, "gridbot, a bag's tasks evaluated once", "gridbot", {**EXPRESSIONS, "evaluate": "bag"},
                     False))
        if bags == 1:
            rows.append((bags, "gridbot, ads rebuilt at every request", "gridbot",
                         {**EXPRESSIONS, "evaluate": "bag"}, True))
        rows.append((bags, "gridbot, each job evaluated", "gridbot", {**EXPRESSIONS, "evaluate": "job"}, False))
    rates: list[list[float]] = [[] for _ in rows]
    for _ in range(args.rounds):
        for k, (bags, _label, name, options, rebuild) in enumerate(rows):
            n = args.requests if options.get("evaluate") != "job" else max(50, args.requests // 20)
            with rebuilt_ads() if rebuild else contextlib.nullcontext():
                rates[k].append(run(name, dict(options), args.hosts, args.queued, bags, n, args.seed))
    print(f"{args.hosts} busy hosts, {args.queued} queued jobs; {args.requests} requests a run ({args.requests // 20} "
          f"evaluating each job), median of {args.rounds} alternated rounds; Python {platform.python_version()}\n")
    print(f"{'bags':>5}  {'policy':<46}{'requests/s':>12}{'us/request':>12}  rounds (requests/s)")
    for (bags, label, *_), r in zip(rows, rates):
        med = statistics.median(r)
        print(f"{bags:>5}  {label:<46}{med:>12,.0f}{1e6 / med:>12,.1f}  {', '.join(f'{x:,.0f}' for x in r)}")


class rebuilt_ads:
    """Within it, every ad is set again in full and copied into the top ad at every use (no cache)."""

    def __enter__(self) -> None:
        ads = gridbot_ads.Ads
        self.saved = (ads._refresh, ads._put)

        def refresh(self, cached, names, values):
            for name, value in zip(names, values):
                cached.ad[name] = value
            cached.stamp = next(self._stamps)

        def put(self, slot, cached):
            self.top[slot] = cached.ad
            self._in_top[slot] = cached.stamp

        ads._refresh, ads._put = refresh, put

    def __exit__(self, *exc) -> None:
        gridbot_ads.Ads._refresh, gridbot_ads.Ads._put = self.saved


if __name__ == "__main__":
    main()
