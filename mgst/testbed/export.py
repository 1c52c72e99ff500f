"""A run directory's results from its journal alone: the CSVs and summary, for `mgst export` and after a crash."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from mgst.results import Summary
from mgst.testbed.replay import replay
from mgst.testbed.run_result import TestbedRun, finish_run
from mgst.testbed.store import FILENAME


def load_run(folder: Path, journal: str = FILENAME) -> TestbedRun:
    """The run recorded in ``folder``'s journal (the file ``journal`` in it), as far as it was committed."""
    rp = replay(folder, journal)
    try:
        meta, j = rp.meta, rp.journal
        tu = meta["time_unit"]
        end = j.last_wall if j.last_wall is not None else meta.get("created", 0.0)
        t0 = j.start if j.start is not None else end
        generation_end = t0 + j.generation_end * tu if j.generation_end is not None else end
        run = finish_run(rp.experiment, rp.core, j, tu, t0, generation_end, end, Counter(meta.get("drops", {})),
                         meta["duration"] / tu, meta["seed"], meta.get("security", "?"), meta.get("aborted", False))
        run.resumes = meta.get("resumes", [])
        return run
    finally:
        rp.store.close()
        rp.journal.store = None


def export_run(folder: Path, journal: str = FILENAME) -> tuple[TestbedRun, Summary, dict[str, Any]]:
    """Write jobs.csv, machines.csv, summary.csv and summary.json into ``folder`` from its journal (the file
    ``journal`` in it)."""
    from mgst.testbed.summary import summarize_testbed, write_testbed_outputs  # noqa: PLC0415

    run = load_run(folder, journal)
    summary, extras = summarize_testbed(run)
    d = write_testbed_outputs(run, summary, extras, folder)
    return run, summary, d
