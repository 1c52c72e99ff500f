"""Jobs and bags entering the core: their records, and the queue each job waits in (job NEW --arrive--> QUEUED)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from mgst.core.decisions import InputError
from mgst.core.lifecycle import Lifecycle
from mgst.core.state import BagRecord, JobQueue, JobRecord
from mgst.core.transitions import JOB, NEW
from mgst.core.view import View
from mgst.model import Bag, Job


class Arrivals:
    """Makes the records of arriving jobs and bags, and queues each job by the policy's ``queue_key``.

    Without a declared ``queue_key``, a job waits in its class's queue and a task in its bag's (keyed
    by the bag id); one run holds either single jobs or bags, never both.
    """

    def __init__(self, view: View, lifecycle: Lifecycle, queue_key: Callable[[Job], Hashable] | None):
        self.view = view
        self.lifecycle = lifecycle
        self.queues = view.queues  # the view's (the same object)
        self.queue_key = queue_key  # the policy's, if it declares one
        self.bag_keys: bool | None = None  # do jobs wait by bag (True) or by class (False)? (None: no job yet)

    def job(self, job: Job) -> JobRecord | None:
        """A job arrives; None if it had arrived already (stale)."""
        view = self.view
        fields: tuple[Any, ...] = job  # the Job's own id object (compiled, job.id would be boxed anew)
        if fields[0] in view.jobs:
            self.lifecycle.stale(f"job {job.id} arrived twice")
            return None
        if not 0 <= job.job_class < len(view.classes):
            raise InputError(f"job {job.id} has class {job.job_class}; there are {len(view.classes)}")
        bag = None
        if job.bag is None and self.bag_keys is False and self.queue_key is None:  # classes: the fast path
            key: Hashable = job.job_class
        else:
            if job.bag is not None:
                bag = view.all_bags.get(job.bag)
                if bag is None:  # a task arriving on its own starts its bag
                    bag = self._bag_record(job.bag, job.submitted, {})
                elif bag.completed is not None:
                    raise InputError(f"task {job.id} arrived for bag {job.bag}, which is complete")
            key = self._key_of(job, bag)
        rec = JobRecord(job, key, view.now, bag)
        view.jobs[rec.id_key] = rec
        q = self.queues.get(key)
        if q is None:
            q = self.queues[key] = JobQueue(key)
            view.queues_version += 1
        q.append(rec)
        view.queued_count += 1
        if bag is not None:
            bag.size += 1
            bag.queued += 1
            bag.tasks.append(rec)
        checker = self.lifecycle.checker
        if checker is not None:
            checker.moved(JOB, rec, NEW, "arrive", rec.status)
        return rec

    def bag(self, bag: Bag) -> bool:
        """A whole bag arrives: every task enters the bag's queue (False: it had arrived already, stale)."""
        view = self.view
        lifecycle = self.lifecycle
        if bag.id in view.all_bags:
            lifecycle.stale(f"bag {bag.id} arrived twice")
            return False
        for task in bag.tasks:
            if task.bag != bag.id:
                raise InputError(f"task {task.id} of bag {bag.id} says it belongs to bag {task.bag}")
            if task.id in view.jobs:
                raise InputError(f"task {task.id} of bag {bag.id} has the id of an earlier job")
        if self.queue_key is None and self.bag_keys is False:
            raise InputError(
                f"bag {bag.id} arrived after single jobs: a run mixing bags and single jobs needs a policy "
                "with its own queue_key"
            )
        rec = self._bag_record(bag.id, bag.submitted, dict(bag.attributes))
        for task in bag.tasks:
            self.job(task)
        if not rec.size:
            lifecycle.bag_done(rec)
        lifecycle.requeued = True  # many jobs entered queues: every ready machine may take one
        return True

    def _bag_record(self, bag_id: int, submitted: float, attributes: dict[str, Any]) -> BagRecord:
        view = self.view
        rec = BagRecord(bag_id, submitted, bag_id, attributes)
        view.bags[bag_id] = rec
        view.all_bags[bag_id] = rec
        view.last_bag = rec
        if self.queue_key is None:
            self.queues[bag_id] = rec.queue
            view.queues_version += 1
        return rec

    def _key_of(self, job: Job, bag: BagRecord | None) -> Hashable:
        if self.queue_key is not None:
            return self.queue_key(job)
        by_bag = bag is not None
        if self.bag_keys is None:
            self.bag_keys = by_bag
        elif self.bag_keys != by_bag:
            raise InputError(
                f"job {job.id} {'belongs to a bag' if by_bag else 'has no bag'} while earlier jobs "
                f"{'did not' if by_bag else 'did'}: a run mixing bags and single jobs needs a policy "
                "with its own queue_key"
            )
        return job.job_class if bag is None else bag.key
