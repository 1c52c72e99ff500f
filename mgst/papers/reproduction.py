"""What `mgst reproduce` runs for a paper and how it judges the paper's claims: the registry of reproductions.

Each paper that can be reproduced in a few minutes has a ``reproduce`` module in its folder
(mgst/papers/<paper>/reproduce.py) holding its REPRODUCTION: the slices it runs (sweeps, or simulations of
experiment files), which the command runs with the existing engines (`mgst sweep`'s runner, `mgst simulate`'s
replications), and a judge that turns their results into one verdict per claim of the paper. The registry finds
those modules by looking in each paper's folder, so a later paper adds itself with its module alone; the command
itself knows no paper.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import pkgutil
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

HOLDS = "holds"
DOES_NOT_HOLD = "does not hold"
UNDECIDED = "undecided"
NOT_CHECKED = "not checked in this slice"
VERDICTS = (HOLDS, DOES_NOT_HOLD, UNDECIDED, NOT_CHECKED)

MODULE = "reproduce"  # the module of a paper's folder that holds its REPRODUCTION


@dataclass(frozen=True, slots=True)
class SweepSlice:
    """A slice of a sweep file, as `mgst sweep FILE [--quick] [--replications R] [--only C=V ...]` runs it."""

    name: str  # its folder in the reproduction's output folder
    file: str  # the sweep file, relative to the experiments folder
    only: tuple[str, ...] = ()  # COLUMN=VALUE[,VALUE...] filters
    replications: int | None = None  # None: the file's
    quick: bool = False  # apply the file's [quick] preset

    def command(self, options: tuple[str, ...] = (), folder: str = "experiments") -> str:
        """The `mgst sweep` command that runs the same cells (with ``options``, KEY=VALUE settings of the
        scenario's options, as `mgst reproduce --option` gives them; ``folder``: the experiments folder)."""
        words = ["mgst sweep", shlex.quote(f"{folder}/{self.file}")]
        if self.quick:
            words.append("--quick")
        if self.replications is not None:
            words.append(f"--replications {self.replications}")
        words += [f"--only {o}" for o in self.only]
        words += [f"--option {shlex.quote(o)}" for o in options]
        return " ".join(words)


@dataclass(frozen=True, slots=True)
class SimulationSlice:
    """One experiment file simulated, as `mgst simulate FILE` with these overrides runs it."""

    name: str  # its folder in the reproduction's output folder (summary.json goes there)
    file: str  # the experiment file, relative to the experiments folder
    horizon: float | None = None
    warmup: float | None = None
    replications: int | None = None
    seed: int | None = None
    # The policy whose claims the slice's results are judged on: a file of the experiments folder that runs another
    # is refused (its verdicts would be about a policy that did not run); None: any.
    policy: str | None = None

    def overrides(self) -> dict[str, float | int]:
        """The options given, by name (the others are the file's)."""
        given = {"horizon": self.horizon, "warmup": self.warmup, "replications": self.replications,
                 "seed": self.seed}
        return {k: v for k, v in given.items() if v is not None}

    def command(self, folder: str = "experiments") -> str:
        return " ".join(["mgst simulate", shlex.quote(f"{folder}/{self.file}"),
                         *(f"--{k} {v:g}" for k, v in self.overrides().items())])


Slice = SweepSlice | SimulationSlice


@dataclass(frozen=True, slots=True)
class Claim:
    """One claim of a paper with its verdict on the slice run, and the figure it rests on."""

    number: str  # as the paper's reproduction doc numbers it ("1", "Table 2 hihi-mfd-fd", ...)
    text: str  # the claim, in a line
    verdict: str  # one of VERDICTS
    figure: str = ""  # what was measured (or, not checked, the command that checks it)

    def lines(self) -> list[str]:
        """``1. holds: the claim`` (or ``hihi-mfd-fd: holds: ...``), then the figure, indented."""
        label = f"{self.number}." if self.number.isdigit() else f"{self.number}:"
        head = f"{label} {self.verdict}: {self.text}"
        return [head] + ([f"   {self.figure}"] if self.figure else [])


def not_checked(number: str, text: str, command: str) -> Claim:
    """A claim this slice did not run, with the command that does."""
    return Claim(number, text, NOT_CHECKED, f"run `{command}` for it")


# judge(folders) -> claims: ``folders`` maps each slice's name to the folder its results are in (a sweep's
# sweep.csv, a simulation's summary.json).
Judge = Callable[[Mapping[str, Path]], list[Claim]]


@dataclass(frozen=True)
class Reproduction:
    """A paper's reproduction: its slices (the default, and --quick's), how long they take, and its judge."""

    name: str  # the command's PAPER word
    title: str  # the paper, cited
    checks: str  # what the default slice decides, in a line
    slices: tuple[Slice, ...]
    quick_slices: tuple[Slice, ...]
    judge: Judge
    minutes: str  # measured wall time of the default slice on a 2-core machine, e.g. "about 3 min"
    quick_minutes: str
    doc: str  # the reproduction doc, for the full runs
    same_as: str = ""  # the slices as one command that runs them too, if there is one (else each slice's)
    quick_same_as: str = ""

    def commands(self, quick: bool, options: tuple[str, ...] = (), folder: str = "experiments") -> list[str]:
        """The commands the slice runs, as a user would type them (``options``: its sweeps' --option settings;
        ``folder``: the experiments folder)."""
        same = self.quick_same_as if quick else self.same_as
        if same and not options:
            return [same if folder == "experiments" else f"{same} --experiments {shlex.quote(folder)}"]
        return [s.command(options, folder) if isinstance(s, SweepSlice) else s.command(folder)
                for s in (self.quick_slices if quick else self.slices)]


def names() -> list[str]:
    return [r.name for r in _registry()]


def get(name: str) -> Reproduction:
    for r in _registry():
        if r.name == name:
            return r
    raise KeyError(f"no reproduction of {name!r}; known: {', '.join(names())}")


@functools.cache
def _registry() -> tuple[Reproduction, ...]:
    """Every paper folder's REPRODUCTION, by the paper's name (imported at the first use: the folders' findings
    modules are not needed by the other commands)."""
    import mgst.papers  # noqa: PLC0415

    found = []
    for paper in sorted(m.name for m in pkgutil.iter_modules(mgst.papers.__path__) if m.ispkg):
        module = f"mgst.papers.{paper}.{MODULE}"
        if importlib.util.find_spec(module) is not None:
            found.append(importlib.import_module(module).REPRODUCTION)
    return tuple(sorted(found, key=lambda r: r.name))
