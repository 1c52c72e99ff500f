"""Finds commits in a SQLite WAL file that SQLite would silently ignore: those after a damaged frame.

SQLite reads a WAL (https://sqlite.org/fileformat2.html#walformat) frame by
frame and stops at the first frame whose salts or cumulative checksum do not
match; every commit after it vanishes with no error. This module reads the
frame headers itself, before SQLite opens the journal (SQLite would otherwise
reset the WAL on its next write, and the evidence with it), and counts the
commits that follow a bad frame: frames that carry the WAL's current salts, a
commit mark, and a checksum that chains from the frame before them.

A bad frame with nothing valid after it is the tail of a write cut short (a
power loss, or a writer at work right now): SQLite's ``synchronous=NORMAL``
allows a power loss to take the last commits, so that is not reported.

SQLite also drops a whole WAL without a word when its header is damaged (a
page size that is not one, salts or a checksum that do not match its frames)
and deletes it when the main file is empty; then every commit in it is lost
(and with it, often, the whole run: a run of a minute is all in its WAL until a
checkpoint). Frames whose page images the main file holds already (a WAL
checkpointed, then restarted) lose nothing and are not reported.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

HEADER_SIZE = 32
FRAME_HEADER_SIZE = 24
MAGIC_LITTLE_ENDIAN = 0x377F0682  # checksums over little-endian words (what x86 writes)
MAGIC_BIG_ENDIAN = 0x377F0683
WAL_VERSION = 3007000


@dataclass(frozen=True, slots=True)
class WalReport:
    """What SQLite will make of a WAL file, and what it will silently drop."""

    frames: int  # whole frames in the file
    readable: int  # frames SQLite reads (up to its last valid commit frame)
    header_ok: bool  # False: SQLite ignores the whole file
    bad_frame: int | None  # 1-based index of the first frame SQLite rejects among the current ones, if any
    lost_commits: int  # commits after the bad frame, which SQLite ignores
    lost_frames: int  # frames of the current WAL after the readable ones
    empty_main_file: bool = False  # the main file is empty: SQLite deletes the WAL, every commit in it

    @property
    def damaged(self) -> bool:
        return self.lost_commits > 0

    def describe(self) -> str:
        if self.empty_main_file:
            return (f"its main file is empty while its WAL holds {self.lost_commits} commit(s) ({self.lost_frames} "
                    "frames), which SQLite would delete")
        where = "its header" if not self.header_ok else f"frame {self.bad_frame}"
        return (f"the WAL is damaged at {where}: {self.lost_commits} later commit(s) ({self.lost_frames} frames) "
                "would be silently lost")


def _checksum(data: bytes, s0: int, s1: int, big_endian: bool) -> tuple[int, int]:
    """SQLite's WAL checksum of ``data`` (a multiple of 8 bytes), continuing from (s0, s1)."""
    words = struct.unpack(f"{'>' if big_endian else '<'}{len(data) // 4}I", data)
    mask = 0xFFFFFFFF
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & mask
        s1 = (s1 + words[i + 1] + s0) & mask
    return s0, s1


def _sane(page_size: int) -> bool:
    return 512 <= page_size <= 65536 and page_size & (page_size - 1) == 0


class _MainFile:
    """The main database file of a WAL, read only where asked (a long run's journal is large): its size (None: not
    given, or not there), its page size, whether it holds given page images."""

    def __init__(self, path: Path | None):
        self.path = path
        try:
            self.size = path.stat().st_size if path is not None else None
        except FileNotFoundError:
            self.size = None

    def page_size(self) -> int | None:
        """The page size in its header (offset 16; 1 stands for 65536), if it has one."""
        if self.path is None or self.size is None or self.size < 100:
            return None
        with open(self.path, "rb") as f:
            size = int.from_bytes(f.read(100)[16:18], "big")
        size = 65536 if size == 1 else size
        return size if _sane(size) else None

    def holds(self, images: dict[int, bytes], page_size: int) -> bool:
        """Whether each page number's image is the file's page of that number (a checkpoint wrote them all)."""
        if self.path is None or self.size is None:
            return False
        with open(self.path, "rb") as f:
            for page, image in images.items():
                f.seek((page - 1) * page_size)
                if f.read(page_size) != image:
                    return False
        return True


def inspect_wal(path: Path, db: Path | None = None) -> WalReport | None:
    """The report for the WAL file ``path`` of the database ``db`` (its main file: what it holds tells frames
    already checkpointed from frames SQLite would drop); None if there is none or it holds no whole frame."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if len(data) < HEADER_SIZE:
        return None
    main = _MainFile(db)
    magic, version, page_size, _ckpt, salt1, salt2, ck1, ck2 = struct.unpack(">8I", data[:HEADER_SIZE])
    big_endian = magic == MAGIC_BIG_ENDIAN
    header_ok = True
    if not _sane(page_size):  # SQLite ignores the whole file: its frames are found at the main file's page size
        header_ok = False
        page_size = main.page_size() or 4096
    frame_size = FRAME_HEADER_SIZE + page_size
    frames = (len(data) - HEADER_SIZE) // frame_size
    if frames == 0:
        return None
    header_ok = header_ok and (magic in (MAGIC_LITTLE_ENDIAN, MAGIC_BIG_ENDIAN) and version == WAL_VERSION
                               and _checksum(data[:24], 0, 0, big_endian) == (ck1, ck2))
    if not header_ok:
        return _unusable_header(data, frames, page_size, main)
    if main.size == 0:  # SQLite deletes the WAL of an empty database
        current = [f for f in _frames(data, frames, page_size) if f.salts == (salt1, salt2)]
        commits = sum(1 for f in current if f.commit)
        return WalReport(frames, 0, True, None, commits, len(current), empty_main_file=commits > 0)
    prev = (ck1, ck2)
    readable = 0
    bad: int | None = None if header_ok else 1
    lost_commits = lost_frames = 0
    last_current = 0  # the last frame carrying the current salts
    for i in range(1, frames + 1):
        at = HEADER_SIZE + (i - 1) * frame_size
        pgno, commit, f_salt1, f_salt2, f_ck1, f_ck2 = struct.unpack(">6I", data[at:at + FRAME_HEADER_SIZE])
        current = (f_salt1, f_salt2) == (salt1, salt2)
        chained = _checksum(data[at:at + 8] + data[at + FRAME_HEADER_SIZE:at + frame_size], *prev, big_endian)
        valid = current and pgno != 0 and chained == (f_ck1, f_ck2)
        prev = (f_ck1, f_ck2)  # the writer chained the next frame from what it stored here
        if current:
            last_current = i
        if bad is None:
            if valid:
                if commit:
                    readable = i
                continue
            bad = i
        if current:
            lost_frames += 1
            if commit and (valid or i == bad):
                lost_commits += 1
    if bad is not None and last_current == bad:
        # the bad frame is the last current one: a write cut short (or under way), not damage
        lost_commits = 0
    return WalReport(frames, readable, header_ok, bad if lost_commits else None, lost_commits, lost_frames)


@dataclass(frozen=True, slots=True)
class _Frame:
    index: int  # 1-based
    page: int
    commit: bool
    salts: tuple[int, int]
    image: bytes


def _frames(data: bytes, frames: int, page_size: int) -> list[_Frame]:
    out = []
    for i in range(1, frames + 1):
        at = HEADER_SIZE + (i - 1) * (FRAME_HEADER_SIZE + page_size)
        pgno, commit, s1, s2 = struct.unpack(">4I", data[at:at + 16])
        body = at + FRAME_HEADER_SIZE
        out.append(_Frame(i, pgno, commit != 0, (s1, s2), data[body:body + page_size]))
    return out


def _unusable_header(data: bytes, frames: int, page_size: int, main: _MainFile) -> WalReport:
    """A WAL whose header SQLite rejects: it drops every frame. Those of the writer's last generation (the first
    frame's salts) are lost unless the main file holds each of their pages' last image already (checkpointed)."""
    found = _frames(data, frames, page_size)
    salts = found[0].salts
    current = [f for f in found if f.salts == salts and f.page > 0]
    latest: dict[int, bytes] = {}
    for f in current:
        latest[f.page] = f.image
    if main.holds(latest, page_size):
        return WalReport(frames, 0, False, None, 0, 0)  # checkpointed: nothing to lose
    commits = sum(1 for f in current if f.commit)
    return WalReport(frames, 0, False, 1, max(commits, 1), len(current))


def check_wal(path: Path, db: Path | None = None) -> WalReport | None:
    """inspect_wal, read twice when it finds damage: a frame being written as it was read looks bad once."""
    report = inspect_wal(path, db)
    if report is not None and report.damaged:
        report = inspect_wal(path, db)
    return report
