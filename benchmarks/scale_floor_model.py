"""The least a Python simulation of a grid can do, for benchmarks: FCFS single-slot machines, Poisson arrivals, one
small object a job in flight (benchmarks/bench_scale_floor.py times it across sizes, benchmarks/bench_sim_floor.py
compiled beside mgst and the SimPy model). Typed so that mypyc compiles it as it stands."""

from __future__ import annotations

import heapq
import random
import time


class Job:
    __slots__ = ("id", "submitted", "size", "machine", "started", "parts")

    def __init__(self, id: int, submitted: float, size: float, parts: int):
        self.id = id
        self.submitted = submitted
        self.size = size
        self.machine = -1
        self.started = 0.0
        self.parts: list[Part] | None = [Part(self) for _ in range(parts)]


class Part:
    """One more object a job holds while it runs (``--objects``): made at its arrival, read at its end."""

    __slots__ = ("job", "value")

    def __init__(self, job: Job):
        self.job = job
        self.value = 0.0


def simulate(machines: int, jobs: int, load: float, seed: int, parts: int = 0) -> tuple[float, int, float]:
    """Run about ``jobs`` jobs on ``machines`` machines at ``load`` each: (seconds, jobs done, mean response)."""
    rng = random.Random(seed)
    expo = rng.expovariate
    rate = load * machines  # arrivals per time unit (mean size 1)
    idle = list(range(machines))
    queue: list[Job] = []  # FCFS: a list read from ``head``
    head = 0
    running: dict[int, Job] = {}
    heap: list[tuple[float, int]] = []  # (completion time, job id)
    t0 = time.perf_counter()
    now = 0.0
    next_arrival = expo(rate)
    made = done = 0
    response = 0.0
    while done < jobs:
        if made < jobs and (not heap or next_arrival < heap[0][0]):
            now = next_arrival
            job = Job(made, now, expo(1.0), parts)
            made += 1
            next_arrival = now + expo(rate)
            if idle:
                job.machine = idle.pop()
                job.started = now
                running[job.id] = job
                heapq.heappush(heap, (now + job.size, job.id))
            else:
                queue.append(job)
            continue
        now, job_id = heapq.heappop(heap)
        job = running.pop(job_id)
        assert job.parts is not None
        for part in job.parts:
            part.value = now
        job.parts = None
        done += 1
        response += now - job.submitted
        machine = job.machine
        if head < len(queue):
            nxt = queue[head]
            head += 1
            if head > 1024 and 2 * head > len(queue):
                del queue[:head]
                head = 0
            nxt.machine = machine
            nxt.started = now
            running[nxt.id] = nxt
            heapq.heappush(heap, (now + nxt.size, nxt.id))
        else:
            idle.append(machine)
    return time.perf_counter() - t0, done, response / done
