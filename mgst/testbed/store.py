"""A run's durable record: an append-only event log in SQLite (WAL), committed as the run goes.

One table of events, each a kind and a msgpack-encoded tuple of plain values,
in the order they happened, and one table of run settings (``meta``). The
journal and the scheduling core are rebuilt from it by replaying the events, so
what is committed survives a SIGKILL of the mapper, and a resumed mapper
continues exactly where the committed log ends.

Durability: WAL with ``synchronous=NORMAL`` makes every commit atomic and
survive the death of the process (the data is in the OS's hands); only a power
loss can take the last commits, never leaving the file inconsistent. The mapper
commits before it sends what the committed events decided (write-ahead), so a
puller never holds a job the log does not know.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import msgpack

from mgst.testbed.wal_check import check_wal

log = logging.getLogger(__name__)

FILENAME = "journal.sqlite"
# Bumped when the meaning of an event changes; a store of another version is refused.
FORMAT = 1


class StoreError(ValueError):
    """A journal that cannot be used: missing, of another format, or not a journal."""


class JournalDamaged(StoreError):
    """A journal file that is damaged: only the events before the damage can be read (``mgst export --salvage``)."""

    def __init__(self, path: Path, cause: str):
        self.path = path
        self.cause = cause
        super().__init__(f"journal {path} is damaged: {cause}; 'mgst export {path.parent} --salvage' recovers "
                         "the events before the damage (the file itself is left as it is)")


class JournalWriteError(Exception):
    """The journal cannot be written (disk full, I/O error): nothing it lacks may be acted on."""

    def __init__(self, path: Path, cause: sqlite3.Error | OSError | str):
        self.path = path
        self.cause = str(cause)
        super().__init__(f"journal {path}: cannot write: {cause}")


def _is_damage(e: sqlite3.Error) -> bool:
    """SQLite's word for a damaged file (SQLITE_CORRUPT and its extended codes)."""
    return getattr(e, "sqlite_errorname", "").startswith("SQLITE_CORRUPT")


def check_journal_file(path: Path) -> None:
    """StoreError unless ``path`` is an existing regular file (a folder or a FIFO is no journal)."""
    if not path.exists():
        folder = path.parent
        if not folder.exists():
            raise StoreError(f"{folder}: no such folder (a run's directory, which holds its {path.name})")
        raise StoreError(f"{path}: no journal (is this a run directory?)")
    if not path.is_file():
        raise StoreError(f"{path}: not a journal file (a {'folder' if path.is_dir() else 'special file'})")
    # (SQLite would make it an empty database: a file read, written; with a WAL beside it, the run may be all in the
    # WAL: the WAL's check says so, damage to salvage)
    if path.stat().st_size == 0 and not Path(f"{path}-wal").exists():
        raise StoreError(f"{path}: an empty file, not a journal (a journal has at least its header): nothing of "
                         "a run to read; it is left as it is")


class RunStore:
    """The event log of one run directory."""

    def __init__(self, path: Path, *, create: bool):
        self.path = path
        if create:
            if path.exists():
                raise StoreError(f"{path} exists: a run is already recorded there (use --resume, or another --out)")
            path.parent.mkdir(parents=True, exist_ok=True)
        else:
            check_journal_file(path)
            # before SQLite reads it: it would drop commits after a bad WAL frame without a word
            wal = check_wal(Path(f"{path}-wal"), path)
            if wal is not None and wal.damaged:
                raise JournalDamaged(path, wal.describe())
        self.write_error: str | None = None  # set when a write failed: nothing more is written
        self._lock_fd: int | None = None  # the run folder's lock, held by a mapper writing the journal
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            if create:
                self._db.executescript(
                    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                    "CREATE TABLE events (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, data BLOB NOT NULL);"
                )
                self.set_meta(format=FORMAT)
            else:
                version = self.meta().get("format")
                if version != FORMAT:
                    raise StoreError(f"{path}: journal format {version!r}, this mgst reads {FORMAT}")
        except sqlite3.Error as e:
            self._db.close()
            if create:
                raise JournalWriteError(path, e) from e
            if _is_damage(e):
                raise JournalDamaged(path, str(e)) from None
            raise StoreError(f"{path}: not a journal ({e}): damaged from its first page (SQLite's header), or not "
                             "a journal at all; nothing of it can be read") from None
        except BaseException:
            self._db.close()
            raise
        self._pending: list[tuple[str, bytes]] = []
        # The seq of the latest event appended (committed or not: seqs run 1, 2, ... without a gap); read from the
        # file at the first append to a journal opened again (a resume), not before: an export of a damaged one
        # appends nothing, and reads no more than its events.
        self._last_seq: int | None = 0 if create else None

    # ------------------------------------------------------------------ settings

    def set_meta(self, **values: Any) -> None:
        """Store settings (JSON values) at once, committed: all of them or none (one transaction; in autocommit
        mode each row would be its own, and a full disk could keep the run's end mark "drops" without "ended")."""
        rows = [(k, json.dumps(v)) for k, v in values.items()]
        try:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", rows)
            self._db.execute("COMMIT")
        except sqlite3.Error as e:
            self._failed(e)
        except BaseException:
            self._rollback()
            raise

    def meta(self) -> dict[str, Any]:
        """The settings; StoreError naming one that is not JSON (the file was edited or damaged)."""
        out = {}
        for k, v in self._db.execute("SELECT key, value FROM meta"):
            try:
                out[k] = json.loads(v)
            except (TypeError, ValueError):
                raise StoreError(f"{self.path}: the run's setting {str(k)[:60]!r} is not JSON: the journal was edited "
                                 "or damaged") from None
        return out

    # ------------------------------------------------------------------ events

    def append(self, kind: str, args: tuple) -> None:
        """Add an event; it is durable once commit() returns."""
        try:
            data = msgpack.packb(args, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as e:  # e.g. a policy's timer key of another type
            raise StoreError(f"cannot journal a {kind!r} event {str(args)[:120]}: {e}; timer keys must be "
                             "strings, numbers or tuples of them") from None
        if self._last_seq is None:
            try:
                self._last_seq = self._db.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0]
            except sqlite3.Error as e:
                self._failed(e)
        self._pending.append((kind, data))
        self._last_seq += 1

    @property
    def last_seq(self) -> int:
        """The seq of the latest event appended (what events() counts it as), 0 if none."""
        if self._last_seq is None:
            return self._db.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0]
        return self._last_seq

    @property
    def uncommitted(self) -> int:
        return len(self._pending)

    def commit(self) -> None:
        if not self._pending:
            return
        if self.write_error is not None:
            raise JournalWriteError(self.path, self.write_error)
        db = self._db
        try:
            db.execute("BEGIN")
            db.executemany("INSERT INTO events (kind, data) VALUES (?, ?)", self._pending)
            db.execute("COMMIT")
        except sqlite3.Error as e:
            self._failed(e)
        except BaseException:
            self._rollback()
            raise
        self._pending.clear()

    def _rollback(self) -> None:
        """Undo an open transaction (SQLite has already rolled back after some errors, e.g. a full disk)."""
        if self._db.in_transaction:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error as e:
                log.debug("%s: rollback: %s", self.path, e)

    def _failed(self, e: sqlite3.Error) -> NoReturn:
        """A write failed: what is committed stays; nothing more is written (close() does not retry)."""
        self._rollback()
        self.write_error = str(e)
        raise JournalWriteError(self.path, e) from e

    def events(self) -> Iterator[tuple[str, tuple]]:
        """Every committed event, in order; sequences come back as tuples.

        JournalDamaged, after the events before it, where the file is damaged: a page SQLite cannot
        read, a gap in the sequence numbers, or an event that does not decode.
        """
        seq = 0
        unpack = msgpack.unpackb
        try:
            for row in event_rows(self._db):  # (the checks of decode_event, inline: a replay reads millions)
                number, kind, data = row
                if number != seq + 1 or type(kind) is not str:
                    decode_event(self.path, seq, row)  # raises, saying why
                try:
                    args = unpack(data, raw=False, use_list=False, strict_map_key=False)
                except Exception:  # msgpack raises several types for bad input
                    decode_event(self.path, seq, row)
                    raise
                yield kind, args
                seq = number
        except sqlite3.DatabaseError as e:
            raise JournalDamaged(self.path, f"{e} (after event {seq})") from None

    def hold_lock(self, fd: int) -> None:
        """Keep the run folder's lock (mgst.testbed.run_lock: an open descriptor) until the store is closed."""
        self._lock_fd = fd

    def close(self) -> None:
        """Commit what is pending and close (and release the run folder's lock, if it holds it). Idempotent."""
        if self._db is None:
            return
        try:
            if self.write_error is None:  # after a failed write, the uncommitted events are dropped
                self.commit()
        finally:
            self._db.close()
            self._db = None  # type: ignore[assignment]
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None


def event_rows(db: sqlite3.Connection) -> Iterator[tuple[int, str, bytes]]:
    """The events rows (seq, kind, data) in order; sqlite3.DatabaseError where the file is damaged, after every row
    before it (the sqlite3 module reads one row ahead and drops the row before a failed one: those are read again
    one at a time)."""
    seq = 0
    try:
        for row in db.execute("SELECT seq, kind, data FROM events ORDER BY seq"):
            seq = row[0]
            yield row
    except sqlite3.DatabaseError:
        pass
    else:
        return
    while (row := db.execute("SELECT seq, kind, data FROM events WHERE seq > ? ORDER BY seq LIMIT 1",
                             (seq,)).fetchone()) is not None:
        seq = row[0]
        yield row


def decode_event(path: Path, seq: int, row: tuple) -> tuple[str, tuple]:
    """The (kind, args) of events row ``row`` (seq, kind, data), which must follow event ``seq``."""
    number, kind, data = row
    if number != seq + 1:
        raise JournalDamaged(path, f"event {seq + 1} is missing (the row after event {seq} is numbered {number!r})")
    try:
        if not isinstance(kind, str) or not isinstance(data, bytes):
            raise TypeError(f"a {type(kind).__name__} kind and {type(data).__name__} data")
        return kind, msgpack.unpackb(data, raw=False, use_list=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several types for bad input
        raise JournalDamaged(path, f"event {number} does not decode ({type(e).__name__})") from None
