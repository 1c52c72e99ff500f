"""Each bag as GridBot sees it: its policy (its own expressions over the defaults, parsed), its tail, and the replicas
the replication cycle made that wait to be sent."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any, Final

from mgst.core.state import BagRecord, JobRecord, JobStatus
from mgst.papers.gridbot.classads import (
    DEADLINE,
    GRID_POLICY,
    JOB_REQUIREMENTS,
    POLICY_ATTRIBUTES,
    REPLICATION_REQUIREMENTS,
    constant,
    parse,
    parse_attribute,
    references,
)

# A bag's Priority unless its file gives one (the default Rank reads it: higher first).
DEFAULT_PRIORITY: Final = 0
_BY_LOWER: Final = {name.lower(): name for name in POLICY_ATTRIBUTES}
# The names a bag's ad gets from GridBot (mgst.papers.gridbot.ads), and those of the other ads its expressions reach
# (a bag attribute of such a name would hide them): a file's bag attribute may take none (ClassAd names ignore case).
RESERVED_NAMES: Final = ("Id", "Submitted", "Tail", "Incomplete", "Queued", "Waiting", "Running", "Done",
                         "PendingReplicas", "Size", "Bag", "BOT", "Host", "Job", "Queue", "Grid", "MY", "TARGET")
RESERVED: Final = frozenset(name.lower() for name in RESERVED_NAMES)
# The names by which a bag's expressions reach the bag's own ad (``Bag.Rank``, ``MY.Rank``; or plain ``Rank``).
_OWN_AD: Final = frozenset(("bag", "bot", "my"))
# The ads that one request sets once for every bag it evaluates (mgst.papers.gridbot.ads).
_PER_REQUEST: Final = frozenset(("host", "grid", "queue"))


def policy_attribute(name: str) -> str | None:
    """The policy attribute a bag attribute's name spells (ClassAd names ignore case), or None."""
    return _BY_LOWER.get(name.lower())


def misspelt(name: str) -> str | None:
    """The attribute GridBot reads (a policy attribute, or Priority) that a bag's attribute ``name`` seems a slip for
    (ClassAd names ignore case: ``Concurency``, ``JobRequirement``), or None: an attribute of the bag's own, which
    GridBot does not read, while the policy's default stands in for the one meant."""
    if policy_attribute(name) is not None or name.lower() == "priority":
        return None
    known = {a.lower(): a for a in (*POLICY_ATTRIBUTES, "Priority")}
    close = difflib.get_close_matches(name.lower(), list(known), 1, 0.8)
    return known[close[0]] if close else None


def check_bag_attributes(pairs: Iterable[tuple[str, Any]]) -> None:
    """ValueError("<attribute>: <problem>") for the first of a bag's attributes that is no valid expression (a policy
    attribute), no number (Priority), or that takes a name GridBot gives a bag's ad itself (RESERVED)."""
    for name, value in pairs:
        if name.lower() in RESERVED:
            raise ValueError(f"{name}: GridBot sets a bag's {name} itself (a bag's ad has {', '.join(RESERVED_NAMES)})")
        canonical = policy_attribute(name)
        if canonical is not None:
            try:
                parse_attribute(canonical, value)
            except ValueError as err:
                raise ValueError(f"{name}: the bag's {canonical} {err}") from None
        elif name.lower() == "priority" and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValueError(f"{name}: a bag's Priority must be a number (the default Rank reads it), got {value!r}")


def _reading_the_job(refs: Mapping[str, list[list[str]]]) -> dict[str, bool]:
    """Which of a bag's expressions read the job's ad: directly (``Job.Replicas``), or through another of the bag's
    expressions that does (a ``ReplicationRequirements`` of ``Rank > 0`` where the ``Rank`` reads ``Job.Id``), to any
    depth. ``refs``: each expression's references, lowercased and split at the dots."""
    by_lower = {name.lower(): name for name in refs}
    reads = {name: any("job" in parts for parts in parts_of) for name, parts_of in refs.items()}
    changed = True
    while changed:  # (a fixed point: at most one pass per expression)
        changed = False
        for name, parts_of in refs.items():
            if not reads[name] and any(
                    (len(parts) == 1 or parts[0] in _OWN_AD) and reads.get(by_lower.get(parts[-1], ""), False)
                    for parts in parts_of):
                reads[name] = changed = True
    return reads


class BagPolicy:
    """A bag's six expressions, parsed (each once per text): its own attributes over the policy's defaults. An
    expression that refers to no attribute is a constant, evaluated here once. ``attributes``: the bag's other
    attributes (the generated ones, its Priority, the file's), for its ad."""

    __slots__ = ("trees", "constants", "attributes", "has_deadline", "reads_job", "cycle_reads_job",
                 "requirements_read_job", "grid_policy_per_host")

    def __init__(self, defaults: Mapping[str, Any], attributes: Mapping[str, Any]):
        texts = {name: value for name, value in defaults.items() if value is not None}
        plain: dict[str, Any] = {}
        for name, value in attributes.items():
            canonical = policy_attribute(name)
            if canonical is not None:
                texts[canonical] = value
            else:
                plain[name] = value
        if not any(name.lower() == "priority" for name in plain):
            plain["Priority"] = DEFAULT_PRIORITY
        self.trees: dict[str, Any] = {name: parse(texts[name]) for name in POLICY_ATTRIBUTES if name in texts}
        self.constants: dict[str, Any] = {}
        for name, tree in self.trees.items():
            fixed, value = constant(tree)
            if fixed:
                self.constants[name] = value
        self.attributes = plain
        self.has_deadline = DEADLINE in self.trees
        # Whether those evaluated at a request (all but ReplicationRequirements), and ReplicationRequirements in the
        # cycle, read the job (Job.Replicas...): if none does, no job's ad is made for them.
        refs = {name: [ref.lower().split(".") for ref in references(tree)] for name, tree in self.trees.items()}
        reads = _reading_the_job(refs)
        self.cycle_reads_job = reads.get(REPLICATION_REQUIREMENTS, False)
        self.reads_job = any(read for name, read in reads.items() if name != REPLICATION_REQUIREMENTS)
        self.requirements_read_job = reads.get(JOB_REQUIREMENTS, False)  # (then worth evaluating per job)
        # The GridPolicy's tree if it reads only the host, its grid and the queue (``Grid.Name != "x"``): within
        # one request its value is then the same for every bag that has it (a file's bag attribute cannot take
        # those names, RESERVED, so they never resolve in the bag's ad); else None (it reads the bag, or is constant).
        grid = self.trees.get(GRID_POLICY)
        self.grid_policy_per_host = grid if (
            grid is not None and GRID_POLICY not in self.constants
            and all(parts[0] in _PER_REQUEST for parts in refs[GRID_POLICY])) else None


class BagState:
    """One incomplete bag: its record, its policy, its ad (mgst.papers.gridbot.ads), whether it is in its tail (kept
    for a tail that may not end), and its pending replicas: running jobs the replication cycle enqueued a copy of,
    in the order enqueued (a job may have several), with their count and the model time of the newest by job id."""

    __slots__ = ("bag", "policy", "ad", "refs", "tail", "pending", "pending_count", "last_enqueued")

    def __init__(self, bag: BagRecord, policy: BagPolicy):
        self.bag = bag
        self.policy = policy
        self.ad: Any = None  # an Ads cache entry, made at the bag's first evaluation
        self.refs: dict[str, Any] = {}  # the references to its expressions from the top ad (Ads.bag)
        self.tail = False
        self.pending: list[JobRecord] = []
        self.pending_count: dict[int, int] = {}
        self.last_enqueued: dict[int, float] = {}  # by job id, while it has a pending replica

    def pending_jobs(self) -> list[JobRecord]:
        """The pending replicas still wanted: a job that completed, or went back to the queue (its requeued copy is
        the new replica), has none."""
        pending = self.pending
        if not pending or all(job.status is JobStatus.RUNNING for job in pending):
            return pending
        self.pending = [job for job in pending if job.status is JobStatus.RUNNING]
        counts: dict[int, int] = {}
        for job in self.pending:
            counts[job.id] = counts.get(job.id, 0) + 1
        self.pending_count = counts
        self.last_enqueued = {i: t for i, t in self.last_enqueued.items() if i in counts}
        return self.pending

    def enqueue(self, job: JobRecord, now: float) -> None:
        """A replica of ``job`` waits to be sent, from model time ``now``."""
        self.pending.append(job)
        self.pending_count[job.id] = self.pending_count.get(job.id, 0) + 1
        self.last_enqueued[job.id] = now

    def sent(self, job: JobRecord) -> None:
        """One of ``job``'s pending replicas was sent (the oldest enqueued)."""
        self.pending.remove(job)
        left = self.pending_count[job.id] - 1
        if left:
            self.pending_count[job.id] = left
        else:
            del self.pending_count[job.id]
            del self.last_enqueued[job.id]  # (the copy just sent is newer than any enqueued)

    def copies(self, job: JobRecord) -> int:
        """The job's replicas that exist: live, and pending."""
        return len(job.replicas) + self.pending_count.get(job.id, 0)

    def queue_length(self) -> int:
        """What the bag's queue holds as GridBot sees it: its waiting tasks (the core's queue) and pending replicas."""
        return self.bag.queued + len(self.pending_jobs())
