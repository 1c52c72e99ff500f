"""The files an experiment reads (traces), and their digests: a resumed run refuses an input that changed."""

from __future__ import annotations

import hashlib

from mgst.availability.registry import input_files
from mgst.model import Experiment, SwfTrace

_CHUNK = 1 << 20


def experiment_inputs(experiment: Experiment) -> tuple[str, ...]:
    """The files the experiment's models read: its availability trace(s) and its workload trace."""
    files = list(input_files(experiment.failures))
    if isinstance(experiment.workload, SwfTrace):
        files.append(experiment.workload.path)
    return tuple(dict.fromkeys(files))


def digest(path: str) -> str:
    """The SHA-256 of a file's bytes (hex); OSError if it cannot be read."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def input_digests(experiment: Experiment) -> dict[str, str]:
    """Each input file of the experiment, with its digest (for the journal's settings)."""
    return {path: digest(path) for path in experiment_inputs(experiment)}


def changed_inputs(recorded: dict[str, str]) -> list[str]:
    """What differs between the inputs a run recorded when it began and the files as they are now, one line
    each (empty: the same bytes)."""
    problems = []
    for path, was in recorded.items():
        try:
            now = digest(path)
        except OSError as e:
            problems.append(f"{path} cannot be read now ({e.strerror or e})")
            continue
        if now != was:
            problems.append(f"{path} changed since the run began (SHA-256 {was[:12]}..., now {now[:12]}...)")
    return problems
