"""The live view's helper processes (its server, its simulation): how they are started and how they end."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

# How often (s) a helper checks that its parent lives: a mapper killed outright leaves nothing behind.
ORPHAN_CHECK = 1.0
# Seconds a helper is given to stop after SIGTERM, before it is killed.
STOP_GRACE = 2.0


def start(module: str, folder: Path) -> subprocess.Popen:
    """``python -P -m module folder``, importing the very mgst this process runs (-P: not one the working
    folder may hold), in a process group of its own: a Ctrl-C at the terminal, sent to the mapper's group,
    is the mapper's to handle (it stops its helpers), and prints nothing of theirs."""
    root = str(Path(__file__).resolve().parents[3])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.Popen([sys.executable, "-P", "-m", module, str(folder)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, process_group=0, env=env)


def stop(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after STOP_GRACE; reaped."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def exit_with_parent(parent: int, folder: Path) -> None:
    """In a helper: when the parent is gone (reparented: our parent id changes), remove ``folder`` (the
    parent cannot) and exit at once."""
    def watch() -> None:
        while os.getppid() == parent:
            threading.Event().wait(ORPHAN_CHECK)
        shutil.rmtree(folder, ignore_errors=True)
        os._exit(1)

    threading.Thread(target=watch, name="orphan-check", daemon=True).start()
