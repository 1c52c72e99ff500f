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

    @property
    def damaged(self) -> bool:
        return self.lost_commits > 0

    def describe(self) -> str:
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


def inspect_wal(path: Path) -> WalReport | None:
    """The report for the WAL file ``path``; None if there is none or it holds no whole frame."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if len(data) < HEADER_SIZE:
        return None
    magic, version, page_size, _ckpt, salt1, salt2, ck1, ck2 = struct.unpack(">8I", data[:HEADER_SIZE])
    big_endian = magic == MAGIC_BIG_ENDIAN
    sane_size = 512 <= page_size <= 65536 and page_size & (page_size - 1) == 0
    if not sane_size:
        return None  # without a page size, no frame can be found; SQLite ignores the file too
    frame_size = FRAME_HEADER_SIZE + page_size
    frames = (len(data) - HEADER_SIZE) // frame_size
    if frames == 0:
        return None
    header_ok = (magic in (MAGIC_LITTLE_ENDIAN, MAGIC_BIG_ENDIAN) and version == WAL_VERSION
                 and _checksum(data[:24], 0, 0, big_endian) == (ck1, ck2))
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


def check_wal(path: Path) -> WalReport | None:
    """inspect_wal, read twice when it finds damage: a frame being written as it was read looks bad once."""
    report = inspect_wal(path)
    if report is not None and report.damaged:
        report = inspect_wal(path)
    return report
