"""Where the live view's latest snapshot waits for the HTTP server: in memory, or in a private folder.

Both boards are written by the mapper's loop (``put``, whole JSON bytes) and read by the server (``latest``);
the server sets ``viewed`` when a snapshot is first asked for. :class:`Board` is one reference, swapped
(a server thread in the same process); :class:`FolderBoard` is a file replaced atomically in a folder only
its owner can read (a server process of its own, which then never competes with the mapper for the GIL).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

SNAPSHOT_VERSION = 1
SNAPSHOT = "snapshot.json"
VIEWED = "viewed"


def first_snapshot(**first: Any) -> bytes:
    """What the page shows until the first snapshot (e.g. the experiment's name)."""
    return json.dumps({"version": SNAPSHOT_VERSION, "phase": "starting", **first}).encode()


class Board:
    """The latest snapshot as JSON bytes, in memory: the reader gets the old bytes or the new ones, whole."""

    def __init__(self, **first: Any) -> None:
        self.latest: bytes = first_snapshot(**first)
        self.viewed = False  # set by the server when a snapshot is first asked for (a flag, nothing more)

    def put(self, data: bytes) -> None:
        self.latest = data


class FolderBoard:
    """The latest snapshot as a file in ``folder`` (made 0700 by its creator), replaced whole each time."""

    def __init__(self, folder: Path, **first: Any) -> None:
        self.folder = folder
        self._path = folder / SNAPSHOT
        self._viewed_path = folder / VIEWED
        self._seen = False
        if first:
            self.put(first_snapshot(**first))

    def put(self, data: bytes) -> None:
        part = self._path.with_suffix(".part")
        part.write_bytes(data)
        os.replace(part, self._path)

    @property
    def latest(self) -> bytes:
        try:
            return self._path.read_bytes()
        except OSError:
            return first_snapshot()

    @property
    def viewed(self) -> bool:
        if not self._seen:
            self._seen = self._viewed_path.exists()
        return self._seen

    @viewed.setter
    def viewed(self, value: bool) -> None:
        if value and not self._seen:
            self._viewed_path.touch()
            self._seen = True
