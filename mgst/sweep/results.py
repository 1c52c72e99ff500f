"""sweep.csv, one row per finished cell (appended and flushed as it finishes), and summary.csv across replications."""

from __future__ import annotations

import csv
import io
import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mgst.bounded_read import read_text
from mgst.intervals import mean_ci
from mgst.scenarios import BOT_MEASURES, Measures
from mgst.sweep.cells import SweepError
from mgst.whole_file import write_whole

log = logging.getLogger(__name__)

# What mgst.sim.bag_cell.simulate_cell returns, in column order; other keys become extra columns.
METRICS = BOT_MEASURES.columns
ERROR = "error"
# The metrics summarised and plotted (the paper's AVT, makespan, waiting time and RWT), and those an
# unbounded cell makes meaningless (they grow with the horizon; RWT is a ratio and stays a value).
# Another scenario says its own in its Measures.
PLOTTED = BOT_MEASURES.summarised
GROWING = BOT_MEASURES.growing
MAX_ERROR = 500  # characters of an error message kept in the CSV
MAX_RESULTS_BYTES = 256 << 20  # sweep.csv read back: 256 MiB (a row is some 200 bytes)
TRUE = ("true", "1")  # how an `unbounded` field may say so


def format_value(v: Any) -> str:
    """One CSV field: floats in full (repr), bools as True/False, None as empty."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return repr(float(v))  # float(): a numpy float's repr names its type
    return str(v)


def one_line(message: str) -> str:
    """An error message as one CSV field on one line, at most MAX_ERROR characters."""
    text = " | ".join(line.strip() for line in str(message).splitlines() if line.strip())
    return text if len(text) <= MAX_ERROR else text[: MAX_ERROR - 3] + "..."


class ResultLog:
    """sweep.csv: key columns, metrics, extra columns, then ``error``; a row per cell, written once.

    ``open()`` reads what an earlier run left: rows with an error and a line cut short by a
    kill are dropped (the file is rewritten without them, atomically), so those cells run again.
    """

    def __init__(self, path: Path, key_columns: Sequence[str], metrics: Sequence[str] = METRICS):
        self.path = path
        self.key_columns = tuple(key_columns)
        self.columns: list[str] = [*self.key_columns, *metrics, ERROR]
        self.rows: list[dict[str, str]] = []
        self._file: io.TextIOBase | None = None

    def open(self) -> dict[tuple[str, ...], dict[str, str]]:
        """Read the finished cells (key -> row) and get ready to append; ValueError for a file that cannot be read
        back (not a regular file, larger than MAX_RESULTS_BYTES, not UTF-8) or is another sweep's."""
        if self.path.exists():
            try:
                text = read_text(self.path, MAX_RESULTS_BYTES)
            except (OSError, UnicodeDecodeError) as e:
                raise ValueError(f"{self.path} cannot be read back ({e}): choose another folder") from None
            complete = text if text.endswith("\n") else text[: text.rfind("\n") + 1]
            reader = csv.DictReader(io.StringIO(complete))
            header = reader.fieldnames or []
            missing = [c for c in self.key_columns if c not in header]
            if header and missing:
                raise ValueError(f"{self.path} has no column {missing[0]!r}: it is not this scenario's sweep")
            kept, dropped, seen = [], 0, set()
            for row in reader:
                key = tuple(row.get(c) or "" for c in self.key_columns)
                if None in row or row.get(ERROR) or key in seen or any(v is None for v in row.values()):
                    dropped += 1
                    continue
                seen.add(key)
                kept.append({k: v or "" for k, v in row.items()})
            self.columns = [*header] if header else self.columns
            if ERROR not in self.columns:
                self.columns.append(ERROR)
            self.rows = kept
            if dropped or complete != text or not header:
                log.info("%s: %d failed or partial rows dropped; those cells run again", self.path, dropped)
                self._rewrite()
        else:
            self._rewrite()
        self._file = open(self.path, "a", encoding="utf-8", newline="")  # noqa: SIM115 (closed by close())
        return {tuple(r[c] for c in self.key_columns): r for r in self.rows}

    def append(self, key: Sequence[str], metrics: Mapping[str, Any] | None, error: str | None = None) -> dict:
        """Write one finished cell's row and flush it; ``error`` instead of metrics for a failed cell."""
        row = dict(zip(self.key_columns, key))
        if error is not None:
            row[ERROR] = one_line(error)
        else:
            for k, v in (metrics or {}).items():
                k = str(k)
                if k in self.key_columns or k == ERROR:  # a metric may not overwrite the cell's key
                    k += "_"
                row[k] = format_value(v)
        new = [k for k in row if k not in self.columns]
        self.rows.append(row)
        if new:  # an extra metric first seen now: widen the header (rewrite), extras before `error`
            at = self.columns.index(ERROR)
            self.columns[at:at] = new
            self._rewrite()
        else:
            assert self._file is not None
            self._file.write(self._line(row))
            self._file.flush()
        if not os.fstat(self._file.fileno()).st_nlink:  # (it was removed, or its folder, while the sweep ran)
            raise SweepError(f"{self.path} was removed while the sweep ran: it stops here, with what it had "
                             "computed lost; run it again to start over")
        return row

    def sort(self, order: Callable[[dict[str, str]], Any]) -> None:
        """Rewrite the file with its rows in ``order`` (at the end of a sweep: grid order)."""
        self.rows.sort(key=order)
        self._rewrite()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _line(self, row: Mapping[str, str]) -> str:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow([row.get(c, "") for c in self.columns])
        return buf.getvalue()

    def _rewrite(self) -> None:
        def write(part: Path) -> None:
            with open(part, "w", encoding="utf-8", newline="") as f:
                csv.writer(f, lineterminator="\n").writerow(self.columns)
                for row in self.rows:
                    f.write(self._line(row))

        try:
            write_whole(self.path, write)
        except FileNotFoundError:  # (its folder is gone)
            raise SweepError(f"{self.path.parent} was removed while the sweep ran: what it had computed is lost; run "
                             "it again to start over") from None
        if self._file is not None:
            self._file.close()
            self._file = open(self.path, "a", encoding="utf-8", newline="")  # noqa: SIM115


def _float(text: str) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def summarize(rows: Iterable[Mapping[str, str]], axes: Sequence[str], measures: Measures = BOT_MEASURES
              ) -> list[dict[str, Any]]:
    """One row per cell of ``axes`` over its seeds and replications: mean and 95 % t-interval per metric
    (``measures.summarised``; ``measures.totals`` get a plain mean).

    A cell is ``unbounded`` if any of its replications is (``unbounded_n`` says how many); an unbounded or
    undecided replication has no time figures (nan), so the means of the growing metrics (AVT, makespan,
    waiting) are then over the cell's other replications only.
    Else it is ``undecided`` if any replication is (growth over a window too short to call it:
    ``undecided_n``); ``verdict`` says which of the three. Each interval's ``_interval`` column says
    how it was made (mgst.intervals: Student-t, log-scale, or too few replications).
    Failed replications are counted in ``failed`` and their first message kept in ``error``.
    """
    groups: dict[tuple[str, ...], list[Mapping[str, str]]] = {}
    for r in rows:
        groups.setdefault(tuple(r.get(a, "") for a in axes), []).append(r)
    out = []
    for key, members in groups.items():
        ok = [r for r in members if not r.get(ERROR)]
        failed = [r for r in members if r.get(ERROR)]
        unbounded_n = sum(r.get("unbounded", "").strip().lower() in TRUE for r in ok)
        undecided_n = sum(r.get("undecided", "").strip().lower() in TRUE for r in ok)
        s: dict[str, Any] = dict(zip(axes, key))
        s.update(n=len(ok), failed=len(failed), unbounded=unbounded_n > 0, unbounded_n=unbounded_n,
                 undecided=not unbounded_n and undecided_n > 0, undecided_n=undecided_n)
        s["verdict"] = "unbounded" if s["unbounded"] else "undecided" if s["undecided"] else "bounded" if ok else ""
        for m in measures.summarised:
            values = [x for x in (_float(r.get(m, "")) for r in ok) if x is not None and not math.isnan(x)]
            ci = mean_ci(values)
            s.update({m: ci.mean, f"{m}_low": ci.low, f"{m}_high": ci.high, f"{m}_interval": ci.method})
        for m in measures.totals:
            values = [x for x in (_float(r.get(m, "")) for r in ok) if x is not None]
            s[m] = sum(values) / len(values) if values else math.nan
        s[ERROR] = failed[0][ERROR] if failed else ""
        out.append(s)
    return out


def summary_columns(measures: Measures = BOT_MEASURES) -> tuple[str, ...]:
    """summary.csv's columns after the axes."""
    return ("n", "failed", "verdict", "unbounded", "unbounded_n", "undecided", "undecided_n",
            *(f"{m}{suffix}" for m in measures.summarised for suffix in ("", "_low", "_high", "_interval")),
            *measures.totals, ERROR)


SUMMARY_COLUMNS = summary_columns(BOT_MEASURES)


def write_summary(path: Path, summary: Sequence[Mapping[str, Any]], axes: Sequence[str],
                  measures: Measures = BOT_MEASURES) -> None:
    columns = summary_columns(measures)

    def write(part: Path) -> None:
        with open(part, "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow([*axes, *columns])
            for s in summary:
                w.writerow([format_value(s.get(c)) for c in (*axes, *columns)])

    write_whole(path, write)  # (no half-written file left behind)
