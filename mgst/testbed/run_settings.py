"""A run's settings as its journal keeps them (the store's meta), checked before anything uses one: each of its
type and range, or a StoreError naming it (a journal is a file, and a file may have been edited or damaged)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from mgst.config.experiment import MAX_DURATION, MAX_TIME_UNIT, MIN_TIME_UNIT
from mgst.model import EXECUTORS
from mgst.testbed.decision_time import is_plain
from mgst.testbed.local_time import MAX_OFFSET_S
from mgst.testbed.store import StoreError


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# Each setting a reader uses: what it must be, and that in words. Those a journal may lack (an older one, a run
# that never ended) are checked where present; open_store requires experiment, seed and time_unit.
_SETTINGS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "experiment": (lambda v: isinstance(v, dict), "an experiment's table"),
    "seed": (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "a whole number >= 0"),
    "time_unit": (lambda v: _number(v) and MIN_TIME_UNIT <= v <= MAX_TIME_UNIT,
                  f"a number of seconds in [{MIN_TIME_UNIT:g}, {MAX_TIME_UNIT:g}]"),
    "duration": (lambda v: _number(v) and 0 < v <= MAX_DURATION, f"a number of seconds in (0, {MAX_DURATION:g}]"),
    "executor": (lambda v: v in EXECUTORS, f"one of {', '.join(EXECUTORS)}"),
    "failures": (lambda v: isinstance(v, bool), "true or false"),
    "imports": (lambda v: isinstance(v, list) and all(isinstance(m, str) for m in v), "a list of module names"),
    "security": (lambda v: isinstance(v, str), "a string"),
    "created": (_number, "a time (a number)"),
    "utc_offset_s": (lambda v: _number(v) and abs(v) < MAX_OFFSET_S, "a UTC offset in seconds, under a day"),
    "ended": (_number, "a time (a number)"),
    "aborted": (lambda v: isinstance(v, bool), "true or false"),
    "drops": (lambda v: isinstance(v, dict) and all(isinstance(n, int) and not isinstance(n, bool) for n in v.values()),
              "a table of counts"),
    "resumes": (lambda v: isinstance(v, list), "a list"),
    "policy_failure": (lambda v: isinstance(v, str), "a message"),
    "network": (lambda v: v is None or isinstance(v, dict), "a table of the network's settings, or null"),
    "inputs": (lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(d, str) for k, d in v.items()),
               "a table of input files and their digests"),
    "decision_time": (is_plain, "a table of the inputs the core handled and their seconds (inputs, total_s, "
                                "longest_s)"),
}


def check_settings(meta: Mapping[str, Any], where: str) -> None:
    """StoreError naming ``where`` (the journal) and the first setting of ``meta`` that is not what it must be."""
    for key, (ok, what) in _SETTINGS.items():
        if key in meta and not ok(meta[key]):
            raise StoreError(f"{where}: the run's setting {key!r} is {str(meta[key])[:60]!r}, not {what}: the journal "
                             "was edited or damaged")


__all__ = ["check_settings"]
