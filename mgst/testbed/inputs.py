"""The files an experiment reads (traces), and their digests: a resumed run refuses an input that changed."""

from __future__ import annotations

import hashlib

from mgst.availability.registry import input_files
from mgst.bounded_read import FileReadError, open_regular, size_text
from mgst.model import Experiment, SwfTrace

_CHUNK = 1 << 20
MAX_INPUT_BYTES = 2 << 30  # the largest an input may be read (a SWF trace's bound; a trace's is 1 GiB)


def experiment_inputs(experiment: Experiment) -> tuple[str, ...]:
    """The files the experiment's models read: its availability trace(s) and its workload trace."""
    files = list(input_files(experiment.failures))
    if isinstance(experiment.workload, SwfTrace):
        files.append(experiment.workload.path)
    return tuple(dict.fromkeys(files))


def digest(path: str) -> str:
    """The SHA-256 of a file's bytes (hex); OSError if it cannot be read, is not a regular file (a FIFO is refused,
    not waited on) or holds more than MAX_INPUT_BYTES."""
    h = hashlib.sha256()
    read = 0
    with open_regular(path) as f:
        while chunk := f.read(_CHUNK):
            read += len(chunk)
            if read > MAX_INPUT_BYTES:
                raise FileReadError(f"larger than {size_text(MAX_INPUT_BYTES)}")
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
