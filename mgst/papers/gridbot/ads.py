"""The classads GridBot's expressions read, built from the core's view (docs/policies.md has the table).

One top ad holds ``Host``, ``Job`` and ``Queue`` (and ``Grid``, the host's grid), and each bag's ad, its expressions
in it, under a name of its own (``mgst_bag_<id>``): a bag's expression is evaluated through a reference from the top ad
(``mgst_bag_3.Rank``), so that ``Tail`` or ``Priority`` in it is the bag's (and ``Bag.Tail``, ``BOT.Tail``: ``Bag`` and
``BOT``, the paper's name, are the bag's own ad) while ``Host.NumCpus`` is found in the top ad. Putting an ad into
another copies it (classad2), so each host's, bag's and the queue's ad is kept from one evaluation to the next, only
its changed attributes are set again, and it is copied into the top ad only when it changed or another one was there.
A waiting job's ad reads its three attributes from the top ad (``.mgst_job_id``...): switching jobs sets three numbers.
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Container, Iterable, Sequence
from typing import Any, Final

from mgst.core.state import JobRecord, MachineRecord
from mgst.core.view import View
from mgst.papers.gridbot.bags import BagState
from mgst.papers.gridbot.classads import classad2, references

HOST_DYNAMIC: Final = ("ErrorRate", "JobsToday", "RecentSuccesses", "Turnaround", "CpuShare", "Running", "Successes",
                       "Errors")
BAG_DYNAMIC: Final = ("Tail", "Incomplete", "Queued", "Waiting", "Running", "Done", "PendingReplicas", "Size")
QUEUE_DYNAMIC: Final = ("Bags", "Jobs", "Running", "Now")
# Every attribute of the ads a request or the cycle sets, by the name an expression reads it by (``Job.Replicas``): a
# reference to another is refused when the file is loaded (:func:`unknown_reference`); a host's ad also has each
# attribute the machine file gives it (``machines.attributes``, ``group``, ``power``).
HOST_ATTRIBUTES: Final = ("Name", "NumCpus", "Slots", "Speed", "Grid", *HOST_DYNAMIC)
JOB_ATTRIBUTES: Final = ("Id", "Replicas", "Running", "SinceLastSent", "WaitingTime", "Attempts", "Expired",
                         "RunningOn")
RUNNING_ON_ATTRIBUTES: Final = ("Name", "Grid", "ErrorRate", "RecentSuccesses", "JobsToday", "NumCpus", "Sent",
                                "RunTime")
GRID_ATTRIBUTES: Final = ("Name", "Hosts")
_SLOTS: Final = ("Host", "Grid", "Job", "Queue")
_QUEUED_JOB: Final = 0  # (in the top ad's Job: the waiting job's ad, which reads its attributes from the top ad)
# A waiting job's ad: what differs from one waiting job to the next is read from the top ad's root.
_QUEUED_JOB_AD: Final = ("[Id = .mgst_job_id; WaitingTime = .mgst_job_waiting; Attempts = .mgst_job_attempts; "
                         "Replicas = 0; Running = 0.0; SinceLastSent = 0.0; Expired = 0; RunningOn = {}]")


def unknown_reference(tree: Any, host_attributes: Iterable[str]) -> str | None:
    """Why an expression reads an attribute that no ``Host``, ``Job`` (nor a ``Job.RunningOn`` host), ``Grid`` or
    ``Queue`` ad has (a misspelt name, UNDEFINED at every evaluation), with the nearest known name; None if it reads
    none. ``host_attributes``: the names the machine file gives the hosts (their ads have them too)."""
    known = {"host": (*HOST_ATTRIBUTES, *host_attributes), "job": JOB_ATTRIBUTES, "grid": GRID_ATTRIBUTES,
             "queue": QUEUE_DYNAMIC}
    for ref in references(tree):
        parts = [part.split("[", 1)[0] for part in ref.split(".")]
        if parts[0].lower() not in known or len(parts) < 2:
            continue
        ad, names, name = parts[0], known[parts[0].lower()], parts[1]
        if ad.lower() == "job" and name.lower() == "runningon" and len(parts) > 2:
            ad, names, name = f"{ad}.{name}", RUNNING_ON_ATTRIBUTES, parts[2]
        by_lower = {n.lower(): n for n in names}
        if name.lower() in by_lower:
            continue
        near = difflib.get_close_matches(name.lower(), list(by_lower), n=1)
        hint = f" (did you mean {ad}.{by_lower[near[0]]}?)" if near else ""
        own = " (give the hosts an attribute of your own in machines.attributes)" if ad.lower() == "host" else ""
        return (f"reads {ref}, which no ad has{hint}: it would be UNDEFINED at every evaluation; {ad} has "
                f"{', '.join(dict.fromkeys(names))}{own}")
    return None


def hostless_reference(tree: Any) -> str | None:
    """Why an expression evaluated for no host (ReplicationRequirements: the replication cycle's) cannot read what
    it reads: ``Host`` or ``Grid`` (UNDEFINED there at every evaluation: the bag never replicated); None if it reads
    neither (a ``Job.RunningOn`` host is the job's, and readable)."""
    for ref in references(tree):
        scope = ref.split(".", 1)[0].split("[", 1)[0].lower()
        if scope in ("host", "grid"):
            return (f"reads {ref}, but the replication cycle evaluates it for no host: Host and Grid are UNDEFINED "
                    "there at every evaluation, so the bag would never replicate (read Job, Job.RunningOn, Queue "
                    "and the bag's own; the host a replica goes to is chosen by JobRequirements and Rank)")
    return None


def grid_of(m: MachineRecord) -> Any:
    """The host's grid: its ``grid`` attribute from the machine file (any case), or None."""
    for key, value in m.attributes.items():
        if key.lower() == "grid":
            return value
    return None


def speed_of(m: MachineRecord) -> float:
    """The host's speed: its ``power`` attribute (machines.power), else its nominal rate for the first class."""
    power = m.attributes.get("power")
    if isinstance(power, int | float) and not isinstance(power, bool):
        return float(power)
    return m.rates[0] if m.rates else 0.0


def _same(a: Any, b: Any) -> bool:
    # (classad2's UNDEFINED is an IntEnum, equal to 2: the types must match too)
    return type(a) is type(b) and a == b


class CachedAd:
    """An ad kept between evaluations: its last dynamic values, and a stamp that changes whenever they do."""

    __slots__ = ("ad", "values", "stamp")

    def __init__(self, ad: Any):
        self.ad = ad
        self.values: tuple[Any, ...] = ()
        self.stamp = 0


class Ads:
    """The ads of one run, over its view: :meth:`host`, :meth:`bag`, :meth:`job`, :meth:`queue` set the top ad's
    parts, which the policy's references (``Bag.Rank``...) are then evaluated against (:attr:`top`)."""

    def __init__(self, view: View):
        module = classad2()
        self.module = module
        self.view = view
        self.undefined = module.Value.Undefined
        self.top = module.ClassAd()
        self._stamps = itertools.count(1)
        # What each part of the top ad holds: a cached ad's stamp (0: UNDEFINED), for Job _QUEUED_JOB or -1 (a job's
        # own ad); -1: nothing known.
        self._in_top: dict[str, int] = dict.fromkeys(_SLOTS, -1)
        self._hosts: dict[int, CachedAd] = {}
        self._grids: dict[Any, CachedAd] = {}
        self._grid_sizes: dict[Any, int] = {}
        for m in view.machines:
            g = grid_of(m)
            self._grid_sizes[g] = self._grid_sizes.get(g, 0) + 1
        self._queue = CachedAd(module.ClassAd())
        self._queued_job = module.ClassAd(_QUEUED_JOB_AD)

    # ------------------------------------------------------------------ the parts of the top ad

    def _put(self, slot: str, cached: CachedAd) -> None:
        if self._in_top[slot] != cached.stamp:
            self.top[slot] = cached.ad
            self._in_top[slot] = cached.stamp

    def _refresh(self, cached: CachedAd, names: Sequence[str], values: tuple[Any, ...]) -> None:
        """Set the attributes whose value changed (None: UNDEFINED); a new stamp if any did."""
        old = cached.values
        if values == old and cached.stamp:  # (the common case: nothing changed; None equals nothing but None)
            return
        ad = cached.ad
        for i, value in enumerate(values):
            if i >= len(old) or not _same(old[i], value):
                ad[names[i]] = self.undefined if value is None else value
        cached.values = values
        cached.stamp = next(self._stamps)

    def no_host(self) -> None:
        """Host and Grid UNDEFINED (the replication cycle evaluates no host)."""
        for slot in ("Host", "Grid"):
            if self._in_top[slot] != 0:
                self.top[slot] = self.undefined
                self._in_top[slot] = 0

    def host(self, m: MachineRecord) -> None:
        """``Host``: the requesting host; ``Grid``: its grid's ad."""
        cached = self._hosts.get(m.index)
        if cached is None:
            cached = self._hosts[m.index] = self._new_host(m)
        st = m.stats
        turnaround = st.mean_turnaround  # (None before a completion: UNDEFINED)
        self._refresh(cached, HOST_DYNAMIC, (
            st.error_rate, st.jobs_today(self.view.now), st.recent_successes,
            turnaround, m.cpu_share, len(m.replicas), st.successes,
            st.errors,
        ))
        self._put("Host", cached)
        g = grid_of(m)
        grid = self._grids.get(g)
        if grid is None:
            ad = self.module.ClassAd() if g is None else self.module.ClassAd({"Name": g, "Hosts": self._grid_sizes[g]})
            grid = self._grids[g] = CachedAd(ad)
            grid.stamp = next(self._stamps)
        self._put("Grid", grid)

    def grid_only(self, g: Any) -> None:
        """``Grid``: grid ``g``'s ad, and ``Host`` UNDEFINED (the overlay evaluates a bag's GridPolicy per grid, in the
        context of the grid's ad alone, as the paper's overlay constructor)."""
        if self._in_top["Host"] != 0:
            self.top["Host"] = self.undefined
            self._in_top["Host"] = 0
        grid = self._grids.get(g)
        if grid is None:
            ad = self.module.ClassAd({"Name": g, "Hosts": self._grid_sizes.get(g, 0)})
            grid = self._grids[g] = CachedAd(ad)
            grid.stamp = next(self._stamps)
        self._put("Grid", grid)

    def _new_host(self, m: MachineRecord) -> CachedAd:
        ad = self.module.ClassAd()
        for key, value in m.attributes.items():  # the machine file's first: the names below take precedence
            ad[key] = value
        ad["Name"] = m.name
        ad["NumCpus"] = m.cpus
        ad["Slots"] = m.slots
        ad["Speed"] = speed_of(m)
        g = grid_of(m)
        if g is not None:
            ad["Grid"] = g
        return CachedAd(ad)

    def bag(self, state: BagState, tail: bool, pending: int) -> None:
        """The bag's ad, its expressions in it, with ``tail`` and its ``pending`` replicas: up to date in the top ad,
        where ``state.refs`` reach its expressions (``mgst_bag_<id>.Rank``)."""
        bag = state.bag
        cached = state.ad
        slot = _bag_slot(bag.id)
        if cached is None:
            module = self.module
            ad = module.ClassAd()
            for key, value in state.policy.attributes.items():
                ad[key] = value
            ad["Id"] = bag.id
            ad["Submitted"] = bag.submitted
            for name, tree in state.policy.trees.items():
                ad[name] = tree
            ad["Bag"] = ad["BOT"] = module.ExprTree("MY")  # (Bag.Tail, BOT.Priority in its expressions: its own)
            cached = state.ad = CachedAd(ad)
            state.refs = {name: module.ExprTree(f"{slot}.{name}") for name in state.policy.trees}
            self._in_top[slot] = -1
        self._refresh(cached, BAG_DYNAMIC, (
            tail, bag.size - bag.done, bag.queued + pending, bag.queued, len(bag.running), bag.done, pending, bag.size,
        ))
        self._put(slot, cached)

    def forget(self, bag_id: int) -> None:
        """A bag completed: its ad leaves the top ad."""
        slot = _bag_slot(bag_id)
        if self._in_top.pop(slot, None) is not None:
            del self.top[slot]

    def queue(self, pending: int) -> None:
        """``Queue``: the incomplete bags, the jobs waiting (the core's queues and every bag's ``pending`` replicas),
        the jobs running, and the model time."""
        view = self.view
        self._refresh(self._queue, QUEUE_DYNAMIC, (len(view.bags), view.queued_count + pending, len(view.running),
                                                  view.now))
        self._put("Queue", self._queue)

    def job(self, rec: JobRecord, expired: Container[int], state: BagState) -> None:
        """``Job``: the job, and the hosts of its live replicas (``RunningOn``); ``expired``: the replicas past their
        deadline; ``state``: its bag's, whose pending replicas of it count as its replicas (``Replicas``: live and
        pending) and as made when enqueued (``SinceLastSent``)."""
        now = self.view.now
        top = self.top
        if not rec.replicas:
            if self._in_top["Job"] != _QUEUED_JOB:
                top["Job"] = self._queued_job
                self._in_top["Job"] = _QUEUED_JOB
            top["mgst_job_id"] = rec.job.id
            top["mgst_job_waiting"] = rec.idle(now)
            top["mgst_job_attempts"] = rec.attempts
            return
        machines = self.view.machines
        sent = [r.sent for r in rec.replicas.values()]
        job_id = rec.job.id
        newest = max(sent)
        enqueued = state.last_enqueued.get(job_id)
        if enqueued is not None and enqueued > newest:
            newest = enqueued
        hosts = []
        for r in rec.replicas.values():
            m = machines[r.machine]
            st = m.stats
            host = {"Name": m.name, "ErrorRate": st.error_rate, "RecentSuccesses": st.recent_successes,
                    "JobsToday": st.jobs_today(now), "NumCpus": m.cpus, "Sent": r.sent, "RunTime": now - r.sent}
            g = grid_of(m)
            if g is not None:
                host["Grid"] = g
            hosts.append(self.module.ClassAd(host))
        ad = self.module.ClassAd({
            "Id": job_id, "Replicas": len(rec.replicas) + state.pending_count.get(job_id, 0),
            "Running": now - min(sent), "SinceLastSent": now - newest, "WaitingTime": rec.idle(now),
            "Attempts": rec.attempts, "Expired": sum(1 for r in rec.replicas.values() if r.id in expired),
        })
        ad["RunningOn"] = hosts
        top["Job"] = ad
        self._in_top["Job"] = -1


def _bag_slot(bag_id: int) -> str:
    """Where a bag's ad is kept in the top ad."""
    return f"mgst_bag_{bag_id}"
