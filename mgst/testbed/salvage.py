"""`mgst export --salvage`: copy a damaged journal's events, up to the damage, into a fresh journal.

The damaged file is never modified: SQLite reads a copy of it (and of its WAL)
in a scratch folder beside it, so that neither its WAL recovery nor its
checkpoint on close touches the original. Events are read in sequence order
until the first one that cannot be read (a damaged page, a gap in the
sequence, an event that does not decode); they and the run's settings go into
``journal.salvaged.sqlite``, which ``mgst export`` then reads like any journal.
Every prefix of a journal replays (the mapper only appends), so the salvaged
run is the run as it stood at its last event before the damage.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mgst.testbed.store import (
    FILENAME,
    JournalDamaged,
    JournalWriteError,
    check_journal_file,
    decode_event,
    event_rows,
)
from mgst.testbed.wal_check import check_wal

SALVAGED = "journal.salvaged.sqlite"
# The settings a mapper writes when its run ends (mgst.testbed.resume.run_is_over, with what it measured over the whole
# run): a salvage that stops before the last event leaves them out, as of a run whose mapper died there.
_END_MARKS = frozenset({"ended", "drops", "decision_time"})
# SQLite's file header: its magic, and where it keeps the page size (2 bytes) and the database's size in pages (4).
_MAGIC = b"SQLite format 3\x00"
_PAGE_SIZE_AT = 16
_PAGES_AT = 28


@dataclass(frozen=True, slots=True)
class Salvaged:
    """What a salvage recovered."""

    source: Path
    target: Path
    events: int  # events copied: every one before the damage
    stopped: str | None  # why the copy stopped before the end of the table (None: it read every event)
    settings: bool  # the run's settings (meta) were readable: the salvaged journal exports
    lost_commits: int  # commits after a damaged WAL frame, which SQLite ignores (lost)

    def describe(self) -> str:
        where = f"stopped at event {self.events + 1}: {self.stopped}" if self.stopped else "read to the end"
        wal = f"; {self.lost_commits} later commits in the WAL are lost" if self.lost_commits else ""
        meta = ("" if self.settings else "; nothing was readable (its first page, SQLite's header, is damaged?): "
                "there is nothing to export" if not self.events else
                "; the run's settings are unreadable, so it cannot be exported")
        return f"recovered {self.events} events of {self.source} into {self.target} ({where}){wal}{meta}"


def salvage(folder: Path) -> Salvaged:
    """Copy the readable prefix of ``folder``'s journal into ``folder/journal.salvaged.sqlite`` (replaced)."""
    source = folder / FILENAME
    check_journal_file(source)
    wal = check_wal(Path(f"{source}-wal"), source)
    target = folder / SALVAGED
    try:
        scratch = Path(tempfile.mkdtemp(prefix=".salvage-", dir=folder))
        try:
            copy = scratch / FILENAME
            shutil.copyfile(source, copy)
            _trust_the_file_s_length(copy)
            if Path(f"{source}-wal").exists():
                shutil.copyfile(f"{source}-wal", f"{copy}-wal")
            building = scratch / SALVAGED
            settings, count, stopped = _copy_prefix(copy, source, building)
            for suffix in ("", "-wal", "-shm"):  # an earlier salvage's, replaced whole
                Path(f"{target}{suffix}").unlink(missing_ok=True)
            os.replace(building, target)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    except OSError as e:  # a full disk, a read-only folder
        raise JournalWriteError(target, e) from e
    if stopped is None and wal is not None and wal.damaged:
        stopped = wal.describe()
    return Salvaged(source, target, count, stopped, settings,
                    wal.lost_commits if wal is not None and wal.damaged else 0)


def _trust_the_file_s_length(copy: Path) -> None:
    """In the scratch copy of a journal: its header's size in pages set to 0 (SQLite then takes the file's length),
    and the file padded with zeros to a whole page. A journal cut short (a truncated copy, a disk full mid-write)
    kept a header counting pages past its end, and SQLite refused the whole file (no event recovered); a page of
    zeros is no valid page, so reading stops there as at any damage."""
    with open(copy, "r+b") as f:
        header = f.read(100)
        if len(header) < 100 or not header.startswith(_MAGIC):
            return  # (not one SQLite reads: said when it is opened)
        page = int.from_bytes(header[_PAGE_SIZE_AT:_PAGE_SIZE_AT + 2], "big")
        page = 65536 if page == 1 else page
        f.seek(_PAGES_AT)
        f.write(bytes(4))
        size = f.seek(0, os.SEEK_END)
        if page >= 512 and size % page:
            f.write(bytes(page - size % page))


def _copy_prefix(copy: Path, source: Path, target: Path) -> tuple[bool, int, str | None]:
    """Copy the settings and the events up to the damage from ``copy`` (of ``source``) into a fresh journal at
    ``target``: whether the settings were readable, how many events, why the reading stopped (None: at the end)."""
    db = sqlite3.connect(str(copy))  # (a scratch copy: SQLite may recover its WAL into it)
    try:
        try:
            meta: list[tuple[str, str]] | None = list(db.execute("SELECT key, value FROM meta"))
        except sqlite3.DatabaseError:
            meta = None
        out = sqlite3.connect(str(target), isolation_level=None)
        try:
            out.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
            out.execute("BEGIN")
            out.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            out.execute("CREATE TABLE events (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, data BLOB NOT NULL)")
            reading = _EventReader(db, source)
            for row in reading:
                out.execute("INSERT INTO events (seq, kind, data) VALUES (?, ?, ?)", row)
            if reading.stopped is not None and meta is not None:  # the events after the damage are lost: so is
                meta = [(k, v) for k, v in meta if k not in _END_MARKS]  # the run's end (its mark)
            out.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", meta or [])
            out.execute("COMMIT")
        except sqlite3.Error as e:
            raise JournalWriteError(target, e) from e
        finally:
            out.close()
    finally:
        db.close()
    return meta is not None, reading.count, reading.stopped


class _EventReader:
    """The events rows of ``db`` in order, up to the first that cannot be read; then ``count`` and ``stopped``."""

    def __init__(self, db: sqlite3.Connection, source: Path):
        self.db, self.source = db, source
        self.count = 0
        self.stopped: str | None = None

    def __iter__(self) -> Iterator[tuple[int, str, bytes]]:
        try:
            for row in event_rows(self.db):
                decode_event(self.source, self.count, row)
                self.count += 1
                yield row
        except sqlite3.DatabaseError as e:
            self.stopped = str(e)
        except JournalDamaged as e:
            self.stopped = e.cause
