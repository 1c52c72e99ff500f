"""The [machines] section of an experiment file: rates or computing powers, slots, groups and attributes.

A mixin of mgst.config's parser, like mgst.config.model_sections; docs/models.md describes the keys.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

from mgst.availability.registry import KINDS, group_count, group_names, kind_of
from mgst.config.model_sections import MAX_MACHINES, MAX_SLOTS, ParsedWorkload
from mgst.model import Failures, Machine, PoissonClasses
from mgst.wording import plural

POWER_KEYS = {"uniform": ("uniform", "total", "seed"), "value": ("value", "count")}


def draw_powers(low: float, high: float, total: float, seed: int) -> list[float]:
    """Machine powers P_j ~ U[low, high], added until their sum reaches ``total`` (Anglano & Canonico, IV-A).

    The draws are random.Random(seed).uniform(low, high) in order (the stdlib generator, whose
    sequence Python keeps across versions). Machines are added while the sum is below
    ``total``; the machine that reaches it is kept whole, so the sum overshoots ``total`` by
    less than ``high`` and no machine is trimmed. mgst.papers.anglano.scenario.powers draws the
    same grid: seed 91 gives the paper's 93 machines (sum 1003.84).
    """
    rng = random.Random(seed)
    out: list[float] = []
    acc = 0.0
    while acc < total:
        p = rng.uniform(low, high)
        out.append(p)
        acc += p
    return out


class MachineSections:
    """Parse [machines] once the workload (its classes) and the availability model (its groups) are known."""

    def machines(self, data: Mapping[str, Any], workload: ParsedWorkload, failures: Failures | None
                 ) -> tuple[Machine, ...]:
        table = self.table(data, "machines", required=True)
        self.check_keys(table, "machines")
        n_classes = len(workload.classes)
        powers: list[float] | None = None
        if "power" in table:
            if "rates" in table:
                raise self.error("machines.power", "give machines.rates or machines.power, not both")
            powers = self.powers(table)
            matrix = [tuple(powers)] * n_classes
            columns_text = f"machines.power gives {len(powers)} machines"
        else:
            if "count" in table:
                raise self.error("machines.count", "only with a single number as machines.power")
            matrix = self.rates(table)
            if len(matrix) != n_classes:
                if isinstance(workload.spec, PoissonClasses):
                    raise self.error("workload.arrival_rates", f"has {n_classes} entries but machines.rates has "
                                                               f"{len(matrix)} rows (one per class)")
                raise self.error("machines.rates", f"has {len(matrix)} rows but {workload.count_text}")
            columns_text = f"machines.rates has {len(matrix[0])} columns (one per machine)"
        n = len(matrix[0])
        if n > MAX_MACHINES:
            raise self.error("machines.power" if powers else "machines.rates",
                             f"gives {n} machines; at most {MAX_MACHINES} are allowed")
        availability = self.shares(table, n, columns_text)
        names = (self.names(table["names"], "machines.names", n, columns_text) if "names" in table
                 else tuple(f"M{j + 1}" for j in range(n)))
        slots = self.slots(table, n, columns_text)
        cpus = self.cpus(table, n, columns_text, slots)
        groups = self.groups(table, n, columns_text, failures)
        extra = self.attributes(table, n, columns_text)
        grid_names = group_names(failures)
        if grid_names is not None and groups is not None and not any(k.lower() == "grid" for k, _ in extra):
            extra.append(("grid", [grid_names[g - 1] for g in groups]))  # (each machine's grid: its group's name)
        machines = []
        for j in range(n):
            attrs: list[tuple[str, Any]] = []
            if powers is not None:
                attrs.append(("power", powers[j]))
            if groups is not None:
                attrs.append(("group", groups[j]))
            attrs.extend((k, values[j]) for k, values in extra)
            machines.append(Machine(names[j], tuple(row[j] for row in matrix), availability[j], slots[j],
                                    tuple(attrs), None if cpus is None else cpus[j]))
        return tuple(machines)

    def rates(self, table: Mapping[str, Any]) -> list[tuple[float, ...]]:
        key = "machines.rates"
        if "rates" not in table:
            raise self.error(key, "missing (required in [machines] unless machines.power is given)")
        rows = self.nonempty_list(table["rates"], key, "rows (one per class)")
        lengths = [len(self.nonempty_list(row, f"{key}[{i}]", "numbers (one per machine)"))
                   for i, row in enumerate(rows)]
        if len(set(lengths)) > 1:  # the row blamed is one that differs from most (from the first, on a tie)
            common = max(lengths, key=lambda n: (lengths.count(n), -lengths.index(n)))
            odd = next(i for i, n in enumerate(lengths) if n != common)
            alike = lengths.count(common)
            where = (f"row {lengths.index(common)} has {common}" if alike == 1
                     else f"{alike} of the {len(rows)} rows have {common}")
            raise self.error(f"{key}[{odd}]", f"has {plural(lengths[odd], 'entry', 'entries')}, where {where} (one per "
                                              "machine)")
        return [tuple(self.rate(v, f"{key}[{i}][{j}]") for j, v in enumerate(row)) for i, row in enumerate(rows)]

    def powers(self, table: Mapping[str, Any]) -> list[float]:
        key = "machines.power"
        value = table["power"]
        unit = "work per time unit"
        if isinstance(value, Mapping):
            if "count" in table:
                raise self.error("machines.count", "not with a table as machines.power (put count in the table)")
            form = "uniform" if "uniform" in value else "value" if "value" in value else None
            if form is None:
                raise self.error(key, "a table needs uniform = [a, b] (with total and seed) or value = P "
                                      "(with count)")
            for k in value:
                if k not in POWER_KEYS[form]:
                    raise self.error(f"{key}.{k}", f"unknown key{self.suggest(k, POWER_KEYS[form])}")
            if form == "value":
                p = self.rate(value["value"], f"{key}.value", unit)
                return [p] * self.machine_count(self.require(value, key, "count"), f"{key}.count")
            bounds = value["uniform"]
            if not isinstance(bounds, list) or len(bounds) != 2:
                raise self.error(f"{key}.uniform", f"must be a range [a, b], got {self.describe(bounds)}")
            low, high = (self.rate(v, f"{key}.uniform[{i}]", unit) for i, v in enumerate(bounds))
            if low > high:
                raise self.error(f"{key}.uniform", f"must have a <= b, got [{low:g}, {high:g}]")
            total = self.positive(self.require(value, key, "total"), f"{key}.total")
            if not total / ((low + high) / 2.0) <= MAX_MACHINES:
                raise self.error(f"{key}.total", f"{total:g} / mean power {(low + high) / 2:g} gives more than "
                                                 f"{MAX_MACHINES} machines")
            seed = self.integer(value.get("seed", 0), f"{key}.seed", 0)
            return draw_powers(low, high, total, seed)
        if isinstance(value, list):
            powers = [self.rate(v, f"{key}[{j}]", unit) for j, v in enumerate(self.nonempty_list(value, key, unit))]
            if "count" in table and (isinstance(table["count"], bool) or table["count"] != len(powers)):
                raise self.error("machines.count", f"is {self.describe(table['count'])} but machines.power lists "
                                                   f"{len(powers)} machines (leave count out)")
            return powers
        p = self.rate(value, key, unit)
        if "count" not in table:
            raise self.error("machines.count", "missing: a single machines.power needs the number of machines")
        return [p] * self.machine_count(table["count"], "machines.count")

    def machine_count(self, value: Any, key: str) -> int:
        count = self.integer(value, key, 1)
        if count > MAX_MACHINES:
            raise self.error(key, f"must be at most {MAX_MACHINES}, got {count}")
        return count

    def shares(self, table: Mapping[str, Any], n: int, columns_text: str) -> tuple[float, ...]:
        if "availability" not in table:
            return (1.0,) * n
        key = "machines.availability"
        raw = self.nonempty_list(table["availability"], key, "numbers (one per machine)")
        if len(raw) != n:
            raise self.error(key, f"has {len(raw)} entries but {columns_text}")
        values = []
        for j, v in enumerate(raw):
            if not self.is_number(v) or not (0 < v <= 1):
                raise self.error(f"{key}[{j}]", f"must be a number in (0, 1], got {self.describe(v)}")
            values.append(float(v))
        return tuple(values)

    def per_machine(self, value: Any, key: str, n: int, columns_text: str) -> list[Any]:
        if isinstance(value, list):
            if len(value) != n:
                raise self.error(key, f"has {len(value)} entries but {columns_text}")
            return value
        return [value] * n

    def counts(self, table: Mapping[str, Any], name: str, n: int, columns_text: str,
               most: list[int], what: str) -> list[int]:
        """``[machines] name``: one integer per machine (a list, or one for all), each 1 to ``most[j]`` (``what``, a
        format of it, says what bounds it); the error names the key, and the entry of a list."""
        key = f"machines.{name}"
        many = isinstance(table[name], list)
        out = []
        for j, v in enumerate(self.per_machine(table[name], key, n, columns_text)):
            k = f"{key}[{j}]" if many else key
            c = self.integer(v, k, 1)
            if c > most[j]:
                raise self.error(k, f"must be at most {what.format(most[j])}, got {c}")
            out.append(c)
        return out

    def slots(self, table: Mapping[str, Any], n: int, columns_text: str) -> list[int]:
        if "slots" not in table:
            return [1] * n
        return self.counts(table, "slots", n, columns_text, [MAX_SLOTS] * n, "{}")

    def cpus(self, table: Mapping[str, Any], n: int, columns_text: str, slots: list[int]) -> list[int] | None:
        """How many replicas each machine computes at once (the others wait on it): 1 to its slots; None: all."""
        if "cpus" not in table:
            return None
        return self.counts(table, "cpus", n, columns_text, slots, "the machine's slots ({})")

    def groups(self, table: Mapping[str, Any], n: int, columns_text: str, failures: Failures | None
               ) -> list[int] | None:
        key = "machines.group"
        count = group_count(failures)
        if "group" not in table:
            if count is None:
                return None
            if count == 1:
                return [1] * n
            raise self.error(key, f"missing: [availability] has {count} groups; give each machine's group "
                                  "(a list, 1-based) or \"cycle\"")
        value = table["group"]
        if count is None:  # (a group of no model's would be read by nothing: a label of one's own is an attribute)
            grouped = " or ".join(repr(k.name) for k in KINDS if k.grouped)
            kind = "the experiment (no [availability])" if failures is None else \
                f"[availability] kind {kind_of(failures).name!r}"
            raise self.error(key, f"{kind} has no machine groups: a machine's group is given with kind = {grouped} "
                                  "(a label of your own goes in machines.attributes, under another name)")
        if value == "cycle":
            return [j % count + 1 for j in range(n)]
        names = group_names(failures)
        if isinstance(value, Mapping) and names is not None:
            return self.group_sizes(value, key, n, names)
        if not isinstance(value, list):
            named = ", a table {sizes = [...]} (machines per group, in order)" if names is not None else ""
            raise self.error(key, f"must be a list (one group per machine, 1-based{' or by name' if names else ''})"
                                  f"{named} or \"cycle\", got {self.describe(value)}")
        out = []
        for j, v in enumerate(self.per_machine(value, key, n, columns_text)):
            if isinstance(v, str) and names is not None:
                if v not in names:
                    raise self.error(f"{key}[{j}]", f"names no group: [availability] has {', '.join(names)}")
                out.append(names.index(v) + 1)
                continue
            g = self.integer(v, f"{key}[{j}]", 1)
            if count is not None and g > count:
                raise self.error(f"{key}[{j}]", f"is group {g} but [availability] has {count} groups")
            out.append(g)
        return out

    def group_sizes(self, value: Mapping[str, Any], key: str, n: int, names: tuple[str, ...]) -> list[int]:
        """``group = {sizes = [a, b, ...]}``: the first a machines in group 1, the next b in group 2, ..."""
        for k in value:
            if k != "sizes":
                raise self.error(f"{key}.{k}", "unknown key (a table as machines.group has sizes = [...] only)")
        sizes = value.get("sizes")
        if not isinstance(sizes, list) or len(sizes) != len(names):
            raise self.error(f"{key}.sizes", f"must be {len(names)} numbers of machines, one per group "
                                             f"({', '.join(names)}), got {self.describe(sizes)}")
        counts = [self.integer(v, f"{key}.sizes[{g}]", 0) for g, v in enumerate(sizes)]
        if sum(counts) != n:
            raise self.error(f"{key}.sizes", f"adds up to {sum(counts)} machines but there are {n}")
        return [g + 1 for g, c in enumerate(counts) for _ in range(c)]

    def attributes(self, table: Mapping[str, Any], n: int, columns_text: str) -> list[tuple[str, list[Any]]]:
        if "attributes" not in table:
            return []
        key = "machines.attributes"
        value = table["attributes"]
        if not isinstance(value, Mapping):
            raise self.error(key, f"must be a table (name = value, or a list of one value per machine), "
                                  f"got {self.describe(value)}")
        out = []
        for name, raw in value.items():
            akey = f"{key}.{name}"
            if name in ("power", "group"):
                raise self.error(akey, f"is set by machines.{name}")
            values = self.per_machine(raw, akey, n, columns_text)
            for j, v in enumerate(values):
                scalar = isinstance(v, str | bool) or (self.is_number(v) and math.isfinite(v))
                if not scalar:
                    k = f"{akey}[{j}]" if isinstance(raw, list) else akey
                    raise self.error(k, f"must be a string, a finite number or a boolean (or a list of them, one "
                                        f"per machine), got {self.describe(v)}")
            out.append((name, values))
        return out
