"""Local process pools that Ctrl-C stops at once: workers ignore SIGINT, and the parent kills and reaps them."""

from __future__ import annotations

import concurrent.futures
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

Key = TypeVar("Key")
# Tasks in flight per worker: enough that no worker waits for the next, few enough that a long queue of tasks
# (100,000 replications) is not all pickled into the pool at once.
IN_FLIGHT_PER_WORKER = 4
# Seconds between two looks at the Ctrl-C flag while the tasks run.
INTERRUPT_CHECK = 0.2
# Seconds between a worker's looks at whether its parent is still there.
PARENT_CHECK = 0.5


def ignore_interrupts(log_level: int | None = None) -> None:
    """A pool worker's initializer: Ctrl-C (SIGINT to the terminal's whole process group) is the parent's to handle.

    A worker that took it would report KeyboardInterrupt as its task's result and go on to the next task, so the
    parent's shutdown would wait for every queued task. The worker also ends once its parent is gone (killed: no
    one to kill it then), rather than live on holding the command's output and the pool's pipes open."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if log_level is not None:
        logging.getLogger().setLevel(log_level)
    threading.Thread(target=_end_with_parent, args=(os.getppid(),), name="end-with-parent", daemon=True).start()


def _end_with_parent(parent: int) -> None:
    """A worker's watch: exit at once when its parent process is no longer its parent (it died: the worker was
    handed to another process)."""
    while True:
        time.sleep(PARENT_CHECK)
        if os.getppid() != parent:
            os._exit(1)


def stop_pool(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    """Cancel what has not started, kill the workers, and reap them."""
    # The pool forgets its processes on shutdown: take them first (Python 3.14 has terminate_workers()).
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for p in processes:
        if p.is_alive():
            p.kill()
    for p in processes:
        p.join(timeout=10)
    pool.shutdown(wait=True, cancel_futures=True)
    log.info("stopped the pool's %d worker processes", len(processes))


class InterruptiblePool(Generic[Key]):
    """A pool of ``workers`` processes, as a context: ``results(tasks)`` runs the tasks and yields each one's key and
    future as it completes. Ctrl-C raises KeyboardInterrupt out of ``results`` (not at whatever line it lands on: one
    raised inside the executor's own locks could leave its shutdown waiting forever); leaving the context early, by
    Ctrl-C or any error, kills the workers and reaps them."""

    def __init__(self, workers: int, log_level: int | None = None):
        self.workers = workers
        self.pool = concurrent.futures.ProcessPoolExecutor(max_workers=workers, initializer=ignore_interrupts,
                                                           initargs=(log_level,))
        self.interrupted = threading.Event()
        self._handler_before: Any = None

    def __enter__(self) -> InterruptiblePool[Key]:
        # Only where Ctrl-C would raise KeyboardInterrupt anyway, and only the main thread may set a handler.
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self._handler_before = signal.signal(signal.SIGINT, lambda *_: self.interrupted.set())
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._handler_before is not None:
            signal.signal(signal.SIGINT, self._handler_before)
        if kind is None:
            self.pool.shutdown(wait=True)
        else:
            stop_pool(self.pool)

    def results(self, tasks: Iterable[tuple[Key, Callable[..., Any], tuple]]
                ) -> Iterator[tuple[Key, concurrent.futures.Future]]:
        """Each task is (key, function, arguments); they are submitted in order, a few per worker at a time."""
        pending = iter(tasks)
        running: dict[concurrent.futures.Future, Key] = {}
        exhausted = False
        while True:
            while not exhausted and len(running) < self.workers * IN_FLIGHT_PER_WORKER:
                task = next(pending, None)
                if task is None:
                    exhausted = True
                else:
                    key, fn, args = task
                    running[self.pool.submit(fn, *args)] = key
            if not running:
                if self.interrupted.is_set():  # (a Ctrl-C as the last task ended is not lost)
                    raise KeyboardInterrupt
                return
            done, _ = concurrent.futures.wait(running, timeout=INTERRUPT_CHECK,
                                              return_when=concurrent.futures.FIRST_COMPLETED)
            if self.interrupted.is_set():
                raise KeyboardInterrupt
            for fut in done:
                yield running.pop(fut), fut
