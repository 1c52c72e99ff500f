"""The command lines' log: a library that sets its own loggers' levels (Dask) is held to the command's level, and
its tracebacks are left out unless -vv; mgst's own records pass unchanged."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from mgst.stderr_log import LibraryLines

ROOT = Path(__file__).resolve().parents[1]


def _closed_connection() -> tuple:
    try:
        raise ConnectionError("the worker's connection closed")
    except ConnectionError:
        return sys.exc_info()


def _written(level: int, tracebacks: bool, name: str, record_level: int) -> str:
    """What the handler writes for one record with a traceback, from a logger that lets everything through."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(LibraryLines(level, tracebacks))
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)  # as Dask's config sets its own (INFO), below the command's
    logger.propagate = False
    try:
        logger.log(record_level, "Batched Comm Closed", exc_info=_closed_connection())
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
        logger.setLevel(logging.NOTSET)
    return out.getvalue()


def test_a_librarys_info_line_is_held_to_the_commands_level():
    assert _written(logging.WARNING, False, "distributed.batched", logging.INFO) == ""
    assert _written(logging.INFO, False, "distributed.batched", logging.INFO) == \
        "INFO distributed.batched: Batched Comm Closed\n"  # -v: the line, still without its traceback


def test_a_librarys_warning_is_one_line_and_its_traceback_shows_only_at_debug():
    assert _written(logging.WARNING, False, "distributed.scheduler", logging.WARNING) == \
        "WARNING distributed.scheduler: Batched Comm Closed\n"
    shown = _written(logging.DEBUG, True, "distributed.scheduler", logging.WARNING)
    assert "Traceback" in shown and "the worker's connection closed" in shown


@pytest.mark.parametrize("tracebacks", [False, True])
def test_mgsts_own_records_pass_unchanged(tracebacks):
    shown = _written(logging.WARNING, tracebacks, "mgst.sweep.runner", logging.ERROR)
    assert shown.startswith("ERROR mgst.sweep.runner: Batched Comm Closed\nTraceback")


def test_the_command_line_holds_dask_to_its_level():
    """Through `mgst`'s own set-up: a Dask logger at INFO (as its config sets it) says nothing at the default level."""
    code = ("import logging, sys; from mgst.cli import main; "
            "sys.argv = ['mgst', 'policies']; main(['policies']); "
            "lg = logging.getLogger('distributed.scheduler'); lg.setLevel(logging.INFO); "
            "lg.info('State start'); lg.warning('Lost all workers')")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "State start" not in p.stderr and "WARNING distributed.scheduler: Lost all workers" in p.stderr
