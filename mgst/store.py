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
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack

log = logging.getLogger(__name__)

FILENAME = "journal.sqlite"
# Bumped when the meaning of an event changes; a store of another version is refused.
FORMAT = 1


class StoreError(ValueError):
    """A journal that cannot be used: missing, of another format, or not a journal."""


class RunStore:
    """The event log of one run directory."""

    def __init__(self, path: Path, *, create: bool):
        self.path = path
        if create:
            if path.exists():
                raise StoreError(f"{path} exists: a run is already recorded there (use --resume, or another --out)")
            path.parent.mkdir(parents=True, exist_ok=True)
        elif not path.exists():
            raise StoreError(f"{path}: no journal (is this a run directory?)")
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
        except sqlite3.DatabaseError as e:
            self._db.close()
            raise StoreError(f"{path}: not a journal ({e})") from None
        self._pending: list[tuple[str, bytes]] = []

    # ------------------------------------------------------------------ settings

    def set_meta(self, **values: Any) -> None:
        """Store settings (JSON values) at once, committed."""
        self._db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                             [(k, json.dumps(v)) for k, v in values.items()])

    def meta(self) -> dict[str, Any]:
        return {k: json.loads(v) for k, v in self._db.execute("SELECT key, value FROM meta")}

    # ------------------------------------------------------------------ events

    def append(self, kind: str, args: tuple) -> None:
        """Add an event; it is durable once commit() returns."""
        try:
            data = msgpack.packb(args, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as e:  # e.g. a policy's timer key of another type
            raise StoreError(f"cannot journal a {kind!r} event {str(args)[:120]}: {e}; timer keys must be "
                             "strings, numbers or tuples of them") from None
        self._pending.append((kind, data))

    @property
    def uncommitted(self) -> int:
        return len(self._pending)

    def commit(self) -> None:
        if not self._pending:
            return
        db = self._db
        db.execute("BEGIN")
        try:
            db.executemany("INSERT INTO events (kind, data) VALUES (?, ?)", self._pending)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self._pending.clear()

    def events(self) -> Iterator[tuple[str, tuple]]:
        """Every committed event, in order; sequences come back as tuples."""
        for kind, data in self._db.execute("SELECT kind, data FROM events ORDER BY seq"):
            yield kind, msgpack.unpackb(data, raw=False, use_list=False, strict_map_key=False)

    def close(self) -> None:
        """Commit what is pending and close. Idempotent."""
        if self._db is None:
            return
        try:
            self.commit()
        finally:
            self._db.close()
            self._db = None  # type: ignore[assignment]
