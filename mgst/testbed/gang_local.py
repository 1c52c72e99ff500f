"""Gang members on this machine: one puller.gang_member process per worker, always reaped."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

# How long a member has to leave after the mapper's bye, or after SIGTERM, before it is killed (s).
EXIT_WAIT = 5.0


@contextlib.contextmanager
def local_members(endpoint: str, workers: int, keys: Path | None,
                  env: dict[str, str] | None = None) -> Iterator[list[subprocess.Popen]]:
    """Start ``workers`` gang members connecting to ``endpoint``; on leaving, wait for each to exit after the
    mapper's bye (at once if the block raised), then terminate and kill what is left, and reap every one
    (their jobs die with them). ``keys``: the run's key folder (security.create_keys, gang_protocol.member_name
    for each worker), named on their command lines (the folder, never a key); None: ``--insecure``. ``env``:
    variables added to the members' environment."""
    auth = ["--keys", str(keys)] if keys is not None else ["--insecure"]
    procs: list[subprocess.Popen] = []
    said_bye = False
    try:
        for q in range(workers):
            procs.append(subprocess.Popen([sys.executable, "-m", "puller.gang_member", "--connect", endpoint,
                                           "--worker", str(q), *auth,
                                           "--exit-with", str(os.getpid())],  # (this process killed: they leave)
                                          stdin=subprocess.DEVNULL,
                                          env={**os.environ, **(env or {})}))
        yield procs
        said_bye = True
    finally:
        for p in procs:
            try:
                p.wait(EXIT_WAIT if said_bye else 0)
            except subprocess.TimeoutExpired:
                p.terminate()
        for p in procs:
            try:
                p.wait(EXIT_WAIT)
            except subprocess.TimeoutExpired:
                log.warning("gang member %d did not leave: killed", p.pid)
                p.kill()
                p.wait()


__all__ = ["local_members"]
