"""Local process pools that Ctrl-C stops at once: workers ignore SIGINT, and the parent kills and reaps them."""

from __future__ import annotations

import concurrent.futures
import logging
import signal

log = logging.getLogger(__name__)


def ignore_interrupts(log_level: int | None = None) -> None:
    """A pool worker's initializer: Ctrl-C (SIGINT to the terminal's whole process group) is the parent's to handle.

    A worker that took it would report KeyboardInterrupt as its task's result and go on to the next task, so the
    parent's shutdown would wait for every queued task."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if log_level is not None:
        logging.getLogger().setLevel(log_level)


def new_pool(workers: int, log_level: int | None = None) -> concurrent.futures.ProcessPoolExecutor:
    """A pool of ``workers`` processes that leave Ctrl-C to this one (stop it with stop_pool)."""
    return concurrent.futures.ProcessPoolExecutor(max_workers=workers, initializer=ignore_interrupts,
                                                  initargs=(log_level,))


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
