"""Experiment-file sections of the pluggable models: workload kinds, machine powers and groups, availability, staging.

A mixin of mgst.config's parser: it uses the host's checks (``error``, ``number``,
``bounded``...), so every error names its key the same way. docs/models.md describes the keys.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mgst.availability.registry import BY_NAME, CONFIG_KINDS
from mgst.model import (
    BagList,
    BagStream,
    Failures,
    JobClass,
    PoissonClasses,
    StagingModel,
    SwfTrace,
    Workload,
)
from mgst.workload.bags import mean_task_size
from mgst.workload.swf import BAG_MODES, SwfError, read_swf

MAX_WORK = 1e12  # a granularity, task size or application size, in work units (1e9 s at P = 1000)
MAX_MACHINES = 100_000
MAX_SLOTS = 10_000
MAX_CLASSES = 10_000  # a bag list's class index without class_names or granularity
MAX_SCALE = 1e9  # SWF time_scale and work_scale

WORKLOAD_KINDS: dict[str, tuple[str, ...]] = {
    "poisson": ("kind", "arrival_rates", "class_names", "granularity"),
    "bags": ("kind", "bag_rate", "application_size", "mix", "spread", "max_bags", "class_names", "granularity"),
    "bag_list": ("kind", "bags", "class_names", "granularity"),
    "swf": ("kind", "file", "time_scale", "work_scale", "bags", "class_names", "granularity"),
}
AVAILABILITY_KINDS: dict[str, tuple[str, ...]] = CONFIG_KINDS  # each kind's module parses its keys
# The keys of one bag of a bag list, and the attributes every bag is given from its tasks (mgst.workload.bags).
BAG_ENTRY_KEYS = ("at", "tasks", "attributes")
BAG_MADE_ATTRIBUTES = ("application_size", "tasks")
# The keys of a bag's tasks given as a table: drawn when the file is read.
DRAWN_TASK_KEYS = ("count", "size", "class", "seed")
MACHINE_KEYS = ("rates", "power", "count", "slots", "cpus", "group", "attributes", "availability", "names")
STAGING_KEYS = ("resume", "start")


@dataclass(frozen=True)
class ParsedWorkload:
    spec: Workload
    classes: tuple[JobClass, ...]
    count_text: str  # which key fixes the number of classes, for length errors


class ModelSections:
    """Parse [workload] (every kind), [availability] or [failures], and [staging]."""

    # ---------------------------------------------------------------- [workload]

    def workload(self, data: Mapping[str, Any]) -> ParsedWorkload:
        table = self.table(data, "workload", required=True)
        kind = table.get("kind", "poisson")
        if not isinstance(kind, str) or kind not in WORKLOAD_KINDS:
            raise self.error("workload.kind", f"must be one of {', '.join(map(repr, WORKLOAD_KINDS))}, "
                                              f"got {self.describe(kind)}")
        self.kind_keys(table, "workload", kind, WORKLOAD_KINDS)
        return getattr(self, f"workload_{kind}")(table)

    def kind_keys(self, table: Mapping[str, Any], section: str, kind: str, kinds: dict[str, tuple[str, ...]]) -> None:
        known = kinds[kind]
        for key in table:
            if key not in known:
                others = [k for k, keys in kinds.items() if key in keys]
                hint = f" for kind = {kind!r} (a key of kind = {others[0]!r})" if others else self.suggest(key, known)
                raise self.error(f"{section}.{key}", f"unknown key{hint}")

    def class_list(self, table: Mapping[str, Any], count: int, count_text: str) -> tuple[tuple[str, ...], tuple]:
        """Class names and granularities (1.0 each unless given), one per class."""
        names = tuple(str(i + 1) for i in range(count))
        if "class_names" in table:
            names = self.names(table["class_names"], "workload.class_names", count, count_text)
        return names, self.granularity(table, count, count_text)

    def granularity(self, table: Mapping[str, Any], count: int, count_text: str, default: float = 1.0) -> tuple:
        if "granularity" not in table:
            return (default,) * count
        key = "workload.granularity"
        raw = self.nonempty_list(table["granularity"], key, "numbers (one per class)")
        if len(raw) != count:
            raise self.error(key, f"has {len(raw)} entries but {count_text}")
        return tuple(self.bounded(v, f"{key}[{i}]", 0.0, MAX_WORK, "work units") for i, v in enumerate(raw))

    def workload_poisson(self, table: Mapping[str, Any]) -> ParsedWorkload:
        key = "workload.arrival_rates"
        raw = self.nonempty_list(self.require(table, "workload", "arrival_rates"), key, "numbers")
        rates = tuple(self.rate(v, f"{key}[{i}]") for i, v in enumerate(raw))
        text = f"workload.arrival_rates has {len(rates)} (one per class)"
        names, gran = self.class_list(table, len(rates), text)
        classes = tuple(JobClass(n, r, x) for n, r, x in zip(names, rates, gran))
        return ParsedWorkload(PoissonClasses(), classes, text)

    def workload_bags(self, table: Mapping[str, Any]) -> ParsedWorkload:
        rate = self.bounded(self.require(table, "workload", "bag_rate"), "workload.bag_rate", 0.0,
                            self.max_rate, "bags per time unit")
        size = self.bounded(self.require(table, "workload", "application_size"), "workload.application_size",
                            0.0, MAX_WORK, "work units")
        raw = self.nonempty_list(self.require(table, "workload", "mix"), "workload.mix", "numbers (one per class)")
        mix = []
        for i, v in enumerate(raw):
            value = self.number(v, f"workload.mix[{i}]")
            if value < 0:
                raise self.error(f"workload.mix[{i}]", f"must be >= 0, got {v!r}")
            mix.append(value)
        if not 0 < sum(mix) < math.inf:
            raise self.error("workload.mix", "must have a positive sum that is finite (the fractions are "
                                             f"renormalised), got {sum(mix):g}")
        spread = 0.5
        if "spread" in table:
            spread = self.number(table["spread"], "workload.spread")
            if not 0 <= spread < 1:
                raise self.error("workload.spread", f"must be in [0, 1), got {table['spread']!r}")
        max_bags = None
        if "max_bags" in table:
            max_bags = self.integer(table["max_bags"], "workload.max_bags", 1)
        text = f"workload.mix has {len(mix)} (one per class)"
        names, gran = self.class_list(table, len(mix), text)
        per_bag = size / mean_task_size(mix, gran) + 1
        if not per_bag <= self.max_jobs:
            raise self.error("workload.application_size", f"{size:g} / mean task size "
                             f"{mean_task_size(mix, gran):g} implies {per_bag:.3g} tasks per bag; at most "
                             f"{self.max_jobs:g} are allowed (MAX_JOBS)")
        spec = BagStream(rate, size, tuple(mix), spread, max_bags)
        return ParsedWorkload(spec, tuple(JobClass(n, 0.0, x) for n, x in zip(names, gran)), text)

    def workload_bag_list(self, table: Mapping[str, Any]) -> ParsedWorkload:
        names: tuple[str, ...] | None = None
        count: int | None = None
        if "class_names" in table:
            raw_names = self.nonempty_list(table["class_names"], "workload.class_names", "strings")
            names = self.names(raw_names, "workload.class_names", len(raw_names), "")
            count = len(names)
        if "granularity" in table:
            raw = self.nonempty_list(table["granularity"], "workload.granularity", "numbers (one per class)")
            if count is None:
                count = len(raw)
        key = "workload.bags"
        raw_bags = self.nonempty_list(self.require(table, "workload", "bags"), key,
                                      "tables {at = time, tasks = [[class, size], ...]}")
        bags = []
        attributes = []
        for b, entry in enumerate(raw_bags):
            bkey = f"{key}[{b}]"
            if not isinstance(entry, Mapping):
                raise self.error(bkey, f"must be a table {{at = time, tasks = [[class, size], ...]}}, "
                                       f"got {self.describe(entry)}")
            for k in entry:
                if k not in BAG_ENTRY_KEYS:
                    raise self.error(f"{bkey}.{k}", f"unknown key{self.suggest(k, BAG_ENTRY_KEYS)}")
            at = self.number(self.require(entry, bkey, "at"), f"{bkey}.at")
            if not 0 <= at <= self.max_time:
                raise self.error(f"{bkey}.at", f"must be in [0, {self.max_time:g}] time units, got {at:g}")
            raw_tasks = self.require(entry, bkey, "tasks")
            if isinstance(raw_tasks, Mapping):
                bags.append((at, self.drawn_tasks(raw_tasks, f"{bkey}.tasks", names, count)))
            else:
                tasks = self.nonempty_list(raw_tasks, f"{bkey}.tasks", "[class, size] pairs")
                bags.append((at, tuple(self.task(t, f"{bkey}.tasks[{k}]", names, count)
                                       for k, t in enumerate(tasks))))
            attributes.append(self.bag_attributes(entry.get("attributes", {}), f"{bkey}.attributes"))
        if names is not None:
            text = f"workload.class_names has {count}"
        elif count is not None:
            text = f"workload.granularity has {count}"
        else:
            count = 1 + max(c for _, tasks in bags for c, _ in tasks)
            text = f"the bags name {count} classes (the largest class index + 1)"
        names, gran = self.class_list(table, count, text)
        spec = BagList(tuple(bags), tuple(attributes) if any(attributes) else ())
        return ParsedWorkload(spec, tuple(JobClass(n, 0.0, x) for n, x in zip(names, gran)), text)

    def bag_attributes(self, value: Any, key: str) -> tuple[tuple[str, Any], ...]:
        """A bag's own attributes (``attributes = {Priority = 2, Rank = "Host.Speed"}``): strings, finite numbers and
        booleans, by name; the names the workload sets itself (BAG_MADE_ATTRIBUTES) are refused."""
        if not isinstance(value, Mapping):
            raise self.error(key, f"must be a table (name = value), got {self.describe(value)}")
        out = []
        for name, v in value.items():
            akey = f"{key}.{name}"
            if name in BAG_MADE_ATTRIBUTES:
                raise self.error(akey, "is set from the bag's tasks")
            if not name.strip():
                raise self.error(akey, "an attribute needs a name")
            if not (isinstance(v, str | bool) or (self.is_number(v) and math.isfinite(v))):
                raise self.error(akey, f"must be a string, a finite number or a boolean, got {self.describe(v)}")
            out.append((name, v))
        return tuple(out)

    def drawn_tasks(self, value: Mapping[str, Any], key: str, names: tuple[str, ...] | None, count: int | None
                    ) -> tuple[tuple[int, float], ...]:
        """``tasks = {count = N, size = [low, high], class = c, seed = s}``: N tasks of class c (default 0), sizes
        uniform in [low, high] from ``random.Random(s)`` (default 0), drawn when the file is read: the same bag in
        every replication, as a listed one."""
        for k in value:
            if k not in DRAWN_TASK_KEYS:
                raise self.error(f"{key}.{k}", f"unknown key{self.suggest(k, DRAWN_TASK_KEYS)}")
        n = self.integer(self.require(value, key, "count"), f"{key}.count", 1)
        if n > self.max_jobs:
            raise self.error(f"{key}.count", f"is {n:,} tasks; at most {self.max_jobs:g} are allowed (MAX_JOBS)")
        raw = self.require(value, key, "size")
        if not isinstance(raw, list) or len(raw) != 2:
            raise self.error(f"{key}.size", f"must be [low, high] work units, got {self.describe(raw)}")
        low, high = (self.bounded(v, f"{key}.size[{i}]", 0.0, MAX_WORK, "work units") for i, v in enumerate(raw))
        if low > high:
            raise self.error(f"{key}.size", f"must be [low, high] with low <= high, got [{low:g}, {high:g}]")
        index = self.task_class(value.get("class", 0), f"{key}.class", names, count)
        seed = self.integer(value.get("seed", 0), f"{key}.seed", 0)
        rng = random.Random(seed)
        return tuple((index, low + (high - low) * rng.random()) for _ in range(n))

    def task(self, value: Any, key: str, names: tuple[str, ...] | None, count: int | None) -> tuple[int, float]:
        if not isinstance(value, list) or len(value) != 2:
            raise self.error(key, f"must be a pair [class, size], got {self.describe(value)}")
        ref, size = value
        index = self.task_class(ref, f"{key}[0]", names, count)
        return index, self.bounded(size, f"{key}[1]", 0.0, MAX_WORK, "work units")

    def task_class(self, ref: Any, key: str, names: tuple[str, ...] | None, count: int | None) -> int:
        """A task's class (``key``: where the file gives it), by name or 0-based index: its index."""
        if isinstance(ref, str):
            if names is None:
                raise self.error(key, f"names class {ref!r} but workload.class_names is not given")
            if ref not in names:
                raise self.error(key, f"unknown class {ref!r}{self.suggest(ref, names)}")
            return names.index(ref)
        index = self.integer(ref, key, 0)
        if count is not None and index >= count:
            raise self.error(key, f"class index {index} but there are {count} classes (0-based)")
        if count is None and index >= MAX_CLASSES:
            raise self.error(key, f"class index {index} is beyond {MAX_CLASSES - 1}")
        return index

    def workload_swf(self, table: Mapping[str, Any]) -> ParsedWorkload:
        name = self.file_name(self.require(table, "workload", "file"), "workload.file")
        base = Path(self.path).parent if self.path is not None else Path.cwd()
        path = str((base / name).resolve())
        time_scale = self.bounded(table.get("time_scale", 1.0), "workload.time_scale", 0.0, MAX_SCALE,
                                  "time units per trace second")
        work_scale = self.bounded(table.get("work_scale", 1.0), "workload.work_scale", 0.0, MAX_SCALE,
                                  "work units per processor-second")
        bags = table.get("bags", "none")
        if bags not in BAG_MODES:
            raise self.error("workload.bags", f"must be one of {', '.join(map(repr, BAG_MODES))} for kind = 'swf', "
                                              f"got {self.describe(bags)}")
        try:
            jobs = read_swf(path)
        except SwfError as err:
            raise self.error("workload.file", str(err)) from None
        if not len(jobs):
            raise self.error("workload.file", f"{path}: no usable job (every job has an unknown run time, "
                                              "processor count or submit time)")
        text = "a SWF trace has 1 class"
        sizes = jobs.sizes(work_scale)
        largest = int(np.argmax(sizes))
        if not sizes[largest] <= MAX_WORK:  # (as a bag's task: a job of 1e308 s ran to the drain limit, or to inf)
            raise self.error("workload.file", f"{path}: a job submitted at trace second {jobs.submit[largest]:g} is "
                                              f"{float(sizes[largest]):.3g} work units (run time x processors x "
                                              f"work_scale); at most {MAX_WORK:g} are allowed")
        mean = float(np.mean(sizes))
        names = ("1",)
        if "class_names" in table:
            names = self.names(table["class_names"], "workload.class_names", 1, text)
        gran = self.granularity(table, 1, text, default=min(mean, MAX_WORK))
        spec = SwfTrace(path, time_scale, work_scale, bags)
        return ParsedWorkload(spec, (JobClass(names[0], 0.0, gran[0]),), text)

    # ---------------------------------------------------------------- [availability] / [failures]

    def availability(self, data: Mapping[str, Any]) -> tuple[Failures | None, str]:
        """The failure model and the key a too-frequent failure process is blamed on."""
        failures = self.table(data, "failures", required=False)
        table = self.table(data, "availability", required=False)
        if failures is not None and table is not None:
            raise self.error("availability", "give [availability] or [failures], not both ([failures] is "
                                             "[availability] with kind = 'exponential')")
        if failures is not None:
            self.check_keys(failures, "failures")
            return BY_NAME["exponential"].from_config(self, failures, "failures")
        if table is None:
            return None, "availability"
        kind = table.get("kind", "weibull" if "preset" in table else None)
        if kind is None:
            raise self.error("availability.kind", f"missing: one of {', '.join(map(repr, AVAILABILITY_KINDS))}")
        if not isinstance(kind, str) or kind not in AVAILABILITY_KINDS:
            raise self.error("availability.kind", f"must be one of {', '.join(map(repr, AVAILABILITY_KINDS))}, "
                                                  f"got {self.describe(kind)}")
        self.kind_keys(table, "availability", kind, AVAILABILITY_KINDS)
        if kind == "always":
            return None, "availability"
        return BY_NAME[kind].from_config(self, table, "availability")

    # ---------------------------------------------------------------- [staging]

    def staging(self, data: Mapping[str, Any]) -> StagingModel | None:
        table = self.table(data, "staging", required=False)
        if table is None:
            return None
        for key in table:
            if key not in STAGING_KEYS:
                raise self.error(f"staging.{key}", f"unknown key{self.suggest(key, STAGING_KEYS)}")
        ranges = {k: self.time_range(table[k], f"staging.{k}") for k in STAGING_KEYS if k in table}
        if not ranges:
            return None
        return StagingModel(**ranges)

    def time_range(self, value: Any, key: str) -> tuple[float, float]:
        if not isinstance(value, list) or len(value) != 2:
            raise self.error(key, f"must be a range [a, b] of model times, got {self.describe(value)}")
        a, b = (self.number(v, f"{key}[{i}]") for i, v in enumerate(value))
        if not 0 <= a <= b <= self.max_time:
            raise self.error(key, f"must satisfy 0 <= a <= b <= {self.max_time:g} time units, got [{a:g}, {b:g}]")
        return a, b
