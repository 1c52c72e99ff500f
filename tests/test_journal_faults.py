"""Journal faults: a full disk pauses the run (exit 75, pullers told, resumable); a damaged journal is a clear
exit-2 error; a bad WAL frame that SQLite would silently skip is found; --salvage recovers the events before the
damage.

The disk-full tests mount a small tmpfs (root only, as in CI) and unmount it, pass or fail.
"""

from __future__ import annotations

import csv
import errno
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
from puller_fakes import FakeMapper, ThreadPuller, client_keys, job
from test_resume import count_events, free_port, reap, small_file, start_mapper, wait_for

from mgst.testbed.export import load_run
from mgst.testbed.local_run import start_pullers, stop_pullers
from mgst.testbed.salvage import salvage
from mgst.testbed.store import JournalDamaged, JournalWriteError, RunStore
from mgst.testbed.wal_check import inspect_wal
from mgst.wire import protocol as P
from mgst.wire import security
from puller import patience

ROOT = Path(__file__).resolve().parents[1]
PAUSED_EXIT = 75  # EX_TEMPFAIL, as README.md and `mgst mapper --help` document it


# ---------------------------------------------------------------------- helpers


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 32 MB tmpfs of the test's own (room for a WAL of 1,000 pages and more), unmounted afterwards; skipped
    where mounting is not permitted."""
    where = tmp_path / "tmpfs"
    where.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(where)], capture_output=True,
                       text=True, timeout=30)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {p.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], timeout=30, check=False)


def fill(folder: Path) -> Path:
    """A file that takes every free byte of ``folder``'s file system (until ENOSPC)."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (65536, 512, 1):
            try:
                while os.write(fd, b"\0" * size):
                    pass
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
    finally:
        os.close(fd)
    return filler


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def rows(journal: Path) -> list[tuple]:
    """Every events row, read by SQLite alone (not by the code under test)."""
    with sqlite3.connect(journal) as db:
        return list(db.execute("SELECT seq, kind, data FROM events ORDER BY seq"))


def varint(data: bytes, at: int) -> tuple[int, int]:
    """SQLite's big-endian varint at ``at``: (value, offset after it)."""
    value = 0
    for i in range(9):
        b = data[at + i]
        if i == 8:
            return (value << 8) | b, at + 9
        value = (value << 7) | (b & 0x7F)
        if b < 0x80:
            return value, at + i + 1
    raise AssertionError("unreachable")


def events_leaves(journal: Path) -> list[tuple[int, int, int]]:
    """(page number, first rowid, last rowid) of each leaf page of the events table, in rowid order, read from the
    file's bytes by walking its b-tree (https://sqlite.org/fileformat2.html#b_tree_pages)."""
    data = journal.read_bytes()
    page_size = int.from_bytes(data[16:18], "big") or 65536
    with sqlite3.connect(journal) as db:
        (root,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'events'").fetchone()
    leaves: list[tuple[int, int, int]] = []

    def walk(page: int) -> None:
        start = (page - 1) * page_size
        head = start + (100 if page == 1 else 0)
        kind, cells = data[head], int.from_bytes(data[head + 3:head + 5], "big")
        if kind == 0x05:  # interior: (left child, key) cells, then the right-most child
            pointers = head + 12
            for c in range(cells):
                cell = start + int.from_bytes(data[pointers + 2 * c:pointers + 2 * c + 2], "big")
                walk(int.from_bytes(data[cell:cell + 4], "big"))
            walk(int.from_bytes(data[head + 8:head + 12], "big"))
        else:
            assert kind == 0x0D, f"page {page}: type {kind:#x}"
            pointers = head + 8
            ids = []
            for c in range(cells):
                cell = start + int.from_bytes(data[pointers + 2 * c:pointers + 2 * c + 2], "big")
                _, after = varint(data, cell)  # payload size
                ids.append(varint(data, after)[0])
            leaves.append((page, min(ids), max(ids)))

    walk(root)
    return leaves


def mgst(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mgst", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, stdin=subprocess.DEVNULL)


# ---------------------------------------------------------------------- a full disk


def test_a_full_disk_is_one_clear_error_and_keeps_every_commit(tmpfs: Path) -> None:
    """Commits until the tmpfs is full: the failing one raises JournalWriteError naming the file and the cause;
    close() does not raise again; every commit that returned is there, and nothing else."""
    path = tmpfs / "journal.sqlite"
    store = RunStore(path, create=True)
    committed = 0
    with pytest.raises(JournalWriteError) as raised:
        for i in range(100_000):  # each commit adds a 4 kB page to the WAL: the full disk is met at once
            store.append("tick", (i, "x" * 200))
            store.commit()
            committed = i + 1
            if committed == 50:
                fill(tmpfs)
    assert 50 <= committed < 1000
    assert str(raised.value) == f"journal {path}: cannot write: database or disk is full"
    assert str(raised.value.__cause__) == "database or disk is full"
    store.close()  # the failed events are dropped, not written again
    assert [args[0] for _, args in RunStore(path, create=False).events()] == list(range(committed))


@pytest.fixture
def pullers_log(tmp_path: Path) -> Path:
    return tmp_path / "pullers.log"


def test_disk_full_pauses_the_run_and_resume_finishes_it(tmp_path: Path, tmpfs: Path, pullers_log: Path,
                                                         no_children_left) -> None:
    """A real mapper and two real pullers; the run's disk fills mid-run. The mapper exits 75 with one clear line,
    sends no bye: the pullers are told the run is paused and keep running. The journal up to the fault replays.
    Space is freed, `mgst mapper --resume` finishes the run: every job Done exactly once."""
    exp_file = small_file(tmp_path, duration=6.0)
    out = tmpfs / "run"
    journal = out / "journal.sqlite"
    names = ["M1", "M2"]
    keys = tmp_path / "keys"
    security.create_keys(keys, names)
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    common = ["--bind", endpoint, "--keys", str(keys)]
    first = start_mapper([str(exp_file), *common, "--out", str(out)])
    pullers: list[subprocess.Popen] = []
    second = None
    try:
        pullers = start_pullers(endpoint, names, pullers_log, keys=keys)
        wait_for(lambda: count_events(journal, "complete") >= 20, 60, "20 jobs done", first)
        filler = fill(tmpfs)
        _, stderr = first.communicate(timeout=60)
        assert first.returncode == PAUSED_EXIT, stderr
        assert "Traceback" not in stderr
        said = [line for line in stderr.splitlines() if "cannot write" in line]
        assert said == [f"mgst: error: journal {journal}: cannot write: database or disk is full; the run is "
                        f"paused (the pullers were told, and keep their work): free space, then continue it with "
                        f"'mgst mapper {exp_file} --resume {out}'"], stderr
        wait_for(lambda: pullers_log.read_text().count("the mapper paused the run") == len(names), 30,
                 "both pullers told the run is paused")
        assert [p.poll() for p in pullers] == [None, None]  # still there: not told the run is over
        assert "run over" not in pullers_log.read_text()
        # the journal up to the fault is intact and replays (read only: the disk is still full)
        done_at_fault = count_events(journal, "complete")
        paused_run = load_run(out)
        assert sum(1 for r in paused_run.journal.jobs.values() if r.done_by is not None) == done_at_fault >= 20
        filler.unlink()
        second = start_mapper([str(exp_file), *common, "--resume", str(out)])
        stdout, stderr = second.communicate(timeout=120)
        assert second.returncode == 0, stderr[-3000:]
        summary = json.loads(stdout)
        codes = [p.wait(timeout=30) for p in pullers]  # now the run is over: they leave by themselves
        assert codes == [0, 0], codes
    finally:
        reap([first, *([second] if second else []), *pullers])
        stop_pullers(pullers)
    with open(out / "jobs.csv", newline="") as f:
        jobs = list(csv.DictReader(f))
    ids = [int(r["ID"]) for r in jobs]
    assert sorted(ids) == list(range(len(ids))) and len(ids) == summary["jobs_generated"] > done_at_fault
    # (a resumed mapper dropping the pullers' "ready" as "ready while busy" leaves jobs Queued: issue 19's defect 1)
    assert {r["Status"] for r in jobs} == {"Done"}, summary["malformed_messages"]
    assert count_events(journal, "complete") == len(ids)  # each job completed once


# ---------------------------------------------------------------------- the puller, told "paused"


@pytest.fixture
def fake_mapper(ctx, tmp_path: Path) -> tuple[FakeMapper, security.ClientKeys]:
    keydir = tmp_path / "pkeys"
    security.create_keys(keydir, ["M1"])
    return FakeMapper(ctx, security.server_keys(keydir)), client_keys(keydir)


def test_a_paused_puller_keeps_its_replica_and_reports_it_to_the_resumed_mapper(fake_mapper, ctx) -> None:
    mapper, keys = fake_mapper
    puller = ThreadPuller(mapper.endpoint, keys, ctx, give_up=0.5)
    try:
        ident, _ = mapper.expect(P.Hello, 10)
        mapper.welcome(ident, heartbeat=0.2)
        mapper.expect(P.Ready)
        mapper.send(ident, job(7, work=1.5))
        mapper.expect(P.Started)
        mapper.send(ident, P.Paused("journal x: cannot write: database or disk is full"))
        ident, hello = mapper.expect(P.Hello, 10)  # it says hello again, holding the replica
        assert hello.holds == (7,)
        # past its --give-up (0.5 s) and past the replica's end: still there, waiting for the answer to the hello
        # this socket holds (a paused mapper that stays up answers it when it resumes)
        mapper.quiet(2.0, ignore=(P.Heartbeat,))
        assert puller.wait(0) is None
        mapper.welcome(ident, heartbeat=0.2)  # the resumed mapper
        _, done = mapper.expect(P.Done)
        assert (done.replica, done.ready) == (7, False)  # it finished meanwhile: the result was held
        mapper.send(ident, P.Bye("run over"))
        assert puller.wait(10) == 0
    finally:
        puller.close()


def test_a_paused_run_that_never_resumes_is_given_up_later_and_not_as_over(fake_mapper, ctx, monkeypatch) -> None:
    monkeypatch.setattr(patience, "PAUSE_GIVE_UP", 2.0)  # (an hour in earnest)
    mapper, keys = fake_mapper
    puller = ThreadPuller(mapper.endpoint, keys, ctx, give_up=0.5)
    try:
        ident, _ = mapper.expect(P.Hello, 10)
        mapper.welcome(ident, heartbeat=0.2)
        mapper.expect(P.Ready)
        mapper.send(ident, P.Paused("journal x: cannot write: disk I/O error"))
        paused = time.monotonic()
        code = puller.wait(15)
        waited = time.monotonic() - paused
    finally:
        puller.close()
    assert code == PAUSED_EXIT  # not 0: the run is not over
    assert waited >= 1.9, waited  # the pause's bound, not --give-up's 0.5 s


def test_paused_is_validated_like_every_message() -> None:
    assert P.decode(P.encode(P.Paused("disk full"))) == P.Paused("disk full")
    assert P.Paused in P.FROM_MAPPER and P.Paused not in P.FROM_PULLER
    with pytest.raises(P.ProtocolError, match=P.Drop.BAD_FIELDS):
        P.decode(msgpack.packb({"t": "paused", "reason": "x", "more": 1}))
    with pytest.raises(P.ProtocolError, match=P.Drop.BAD_VALUE):
        P.decode(msgpack.packb({"t": "paused", "reason": 3}))


# ---------------------------------------------------------------------- a damaged page


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> tuple[Path, Path]:
    """(experiment file, run directory) of a finished local run: its journal checkpointed into the main file."""
    where = tmp_path_factory.mktemp("finished")
    exp_file = small_file(where, duration=3.0)
    out = where / "run"
    p = mgst("run", str(exp_file), "--out", str(out), "--insecure", "--quiet", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    assert not Path(f"{out}/journal.sqlite-wal").exists()  # every commit is in the main file
    return exp_file, out


def copied_run(pristine: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the finished run's folder in ``tmp_path``, and its journal."""
    run = tmp_path / "run"
    shutil.copytree(pristine, run)
    return run, run / "journal.sqlite"


def overwrite_page(journal: Path, page: int) -> None:
    """Page ``page`` (1-based) of the journal's main file overwritten with garbage, as a bad sector would."""
    page_size = int.from_bytes(journal.read_bytes()[16:18], "big")
    with open(journal, "r+b") as f:
        f.seek((page - 1) * page_size)
        f.write(b"\xa5" * page_size)


def test_a_damaged_page_is_a_clear_error_and_salvage_recovers_every_event_before_it(
        finished_run, tmp_path: Path) -> None:
    exp_file, pristine = finished_run
    run, journal = copied_run(pristine, tmp_path)
    before = rows(journal)
    leaves = events_leaves(journal)
    assert len(leaves) >= 5 and [lo for _, lo, _ in leaves][0] == 1
    page, first, _ = leaves[len(leaves) // 2]  # a leaf in the middle: events 1 .. first-1 come before it
    overwrite_page(journal, page)
    damaged = sha(journal)
    for args in (["export", str(run)], ["mapper", str(exp_file), "--bind", "tcp://127.0.0.1:0", "--resume", str(run)]):
        p = mgst(*args)
        assert p.returncode == 2, (args, p.stderr)
        assert "Traceback" not in p.stderr
        assert [line for line in p.stderr.splitlines() if line.startswith("mgst:")] == [
            f"mgst: error: journal {journal} is damaged: database disk image is malformed (after event {first - 1}); "
            f"'mgst export {run} --salvage' recovers the events before the damage (the file itself is left as it is)"]
    p = mgst("export", str(run), "--salvage", "--json")
    assert p.returncode == 0, p.stderr
    assert (f"mgst: recovered {first - 1} events of {journal} into {run}/journal.salvaged.sqlite (stopped at event "
            f"{first}: database disk image is malformed)") in p.stderr
    assert rows(run / "journal.salvaged.sqlite") == before[:first - 1]  # exactly the events before the page
    assert sha(journal) == damaged  # the damaged file is left as it was
    summary = json.loads(p.stdout)
    with open(run / "jobs.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == summary["jobs_generated"] > 0


@pytest.mark.parametrize("cut", ["a page's end", "mid-page"])
def test_salvage_of_a_journal_cut_short_recovers_the_events_before_the_cut_and_says_the_run_has_no_end(
        finished_run, tmp_path: Path, cut: str) -> None:
    """A journal cut short (a copy truncated, a disk full mid-write): its header still counts the pages it had, and
    SQLite refused the whole file, so the salvage recovered 0 events ("the run's settings are unreadable"); and a
    salvage that stops before the end kept the run's end mark, so the part recovered was reported as a finished run
    (its last jobs "cut off", simulated beside)."""
    run, journal = copied_run(finished_run[1], tmp_path)
    before = rows(journal)
    data = journal.read_bytes()
    page_size = int.from_bytes(data[16:18], "big") or 65536
    keep = len(data) // page_size // 2 * page_size + (page_size // 3 if cut == "mid-page" else 0)
    journal.write_bytes(data[:keep])
    damaged = sha(journal)
    p = mgst("export", str(run), "--salvage", "--json")
    assert p.returncode == 0, p.stderr
    recovered = rows(run / "journal.salvaged.sqlite")
    assert 0 < len(recovered) < len(before) and recovered == before[:len(recovered)]
    assert f"mgst: recovered {len(recovered)} events of {journal}" in p.stderr, p.stderr
    assert "the salvaged journal stops at the damage, before the run's end" in p.stderr, p.stderr
    summary = json.loads(p.stdout)
    assert summary["closed"] is False and summary.get("simulation") is None
    assert sha(journal) == damaged  # the damaged file is left as it was
    # the folder describes the part recovered alone: the finished run's chart is gone (it charted the whole run and
    # its simulation), and the report says the run did not end (it said "report of the finished run")
    assert (finished_run[1] / "comparison.png").exists() and not (run / "comparison.png").exists()
    page = (run / "report.html").read_text(encoding="utf-8")
    assert '"phase":"not closed"' in page and "The report of a run that did not end" in page
    assert "The report of a finished run" not in page


def test_a_salvage_that_stops_before_the_run_s_start_says_so_not_that_the_run_never_started(
        finished_run, tmp_path: Path) -> None:
    run, journal = copied_run(finished_run[1], tmp_path)
    page, first, _ = events_leaves(journal)[0]  # the first events' leaf: the run's start is in it
    assert first == 1
    overwrite_page(journal, page)
    p = mgst("export", str(run), "--salvage")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "the events recovered do not reach the run's start" in p.stderr, p.stderr
    assert "never started" not in p.stderr


def test_a_journal_damaged_from_its_first_page_says_nothing_can_be_read_and_salvage_leaves_no_empty_copy(
        finished_run, tmp_path: Path) -> None:
    """Its first 100 bytes zeroed (SQLite's header): export said 'not a journal (file is not a database)', and the
    salvage recovered 0 events, then failed on 'journal format None', leaving an empty journal.salvaged.sqlite."""
    run, journal = copied_run(finished_run[1], tmp_path)
    with open(journal, "r+b") as f:
        f.write(bytes(100))
    p = mgst("export", str(run))
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "damaged from its first page (SQLite's header), or not a journal at all" in p.stderr, p.stderr
    p = mgst("export", str(run), "--salvage")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    said = [line for line in p.stderr.splitlines() if line.startswith("mgst:")]
    assert len(said) == 1 and "recovered 0 events" in said[0] and "there is nothing to export" in said[0], said
    assert not (run / "journal.salvaged.sqlite").exists()


def test_salvage_of_an_undamaged_journal_copies_it_whole(finished_run, tmp_path: Path) -> None:
    _, pristine = finished_run
    run = tmp_path / "run"
    shutil.copytree(pristine, run)
    expected = json.loads((run / "summary.json").read_text())
    p = mgst("export", str(run), "--salvage", "--json")
    assert p.returncode == 0, p.stderr
    assert rows(run / "journal.salvaged.sqlite") == rows(run / "journal.sqlite")
    assert "(read to the end)" in p.stderr
    got = json.loads(p.stdout)
    assert got["jobs_generated"] == expected["jobs_generated"] and got["jobs_done"] == expected["jobs_done"]


# ---------------------------------------------------------------------- a damaged WAL frame

COMMITS = 60  # one event each


def wal_journal(folder: Path, checkpoint_after: int | None = None) -> Path:
    """folder/journal.sqlite, its COMMITS one-event commits left in its WAL by a SIGKILLed writer (with
    ``checkpoint_after``: a checkpoint there that restarts the WAL, then the remaining commits over old frames)."""
    folder.mkdir()
    path = folder / "journal.sqlite"
    restart = ("" if checkpoint_after is None else
               f"    if i == {checkpoint_after - 1}: s._db.execute('PRAGMA wal_checkpoint(RESTART)')\n")
    child = (
        "import os, signal\n"
        "from pathlib import Path\n"
        "from mgst.testbed.store import RunStore\n"
        f"s = RunStore(Path({str(path)!r}), create=True)\n"
        f"for i in range({COMMITS}):\n"
        "    s.append('tick', (i, 'x' * 300))\n"
        "    s.commit()\n"
        f"{restart}"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    p = subprocess.run([sys.executable, "-c", child], timeout=60, cwd=ROOT)
    assert p.returncode == -9
    assert Path(f"{path}-wal").stat().st_size > 0
    return path


def frame_at(wal: Path, k: int) -> int:
    """Byte offset of WAL frame k (1-based), from the page size in the WAL header."""
    page_size = int.from_bytes(wal.read_bytes()[8:12], "big")
    return 32 + (k - 1) * (24 + page_size)


def copy_journal(path: Path, to: Path, wal_bytes: int | None = None) -> Path:
    """A copy of a journal and its WAL (cut to ``wal_bytes``) in a new folder ``to``."""
    to.mkdir()
    shutil.copyfile(path, to / path.name)
    data = Path(f"{path}-wal").read_bytes()
    Path(f"{to / path.name}-wal").write_bytes(data if wal_bytes is None else data[:wal_bytes])
    return to / path.name


def test_a_damaged_wal_frame_is_found_and_salvage_says_what_it_lost(tmp_path: Path) -> None:
    path = wal_journal(tmp_path / "run")
    wal = Path(f"{path}-wal")
    k = 30
    # what SQLite reads with the WAL ending before frame k: what a reader of the damaged WAL will get
    expected = len(rows(copy_journal(path, tmp_path / "cut", frame_at(wal, k))))
    assert 0 < expected < COMMITS
    data = bytearray(wal.read_bytes())
    data[frame_at(wal, k) + 24 + 1000] ^= 0xFF  # one byte of frame k's page
    wal.write_bytes(bytes(data))
    # SQLite alone reads the first commits and says nothing of the rest (on a copy: it would reset the WAL)
    assert len(rows(copy_journal(path, tmp_path / "plain"))) == expected
    damaged = (sha(path), sha(wal))
    with pytest.raises(JournalDamaged, match=f"the WAL is damaged at frame {k}: {COMMITS - expected} later "
                                             "commit"):
        RunStore(path, create=False)
    result = salvage(path.parent)
    assert (result.events, result.lost_commits) == (expected, COMMITS - expected)
    assert f"{COMMITS - expected} later commits in the WAL are lost" in result.describe()
    assert [r[0] for r in rows(result.target)] == list(range(1, expected + 1))
    assert (sha(path), sha(wal)) == damaged  # the original is left as it was


def test_a_sound_wal_is_not_taken_for_damage(tmp_path: Path) -> None:
    """Not reported: a sound WAL; a WAL whose last frame is bad (a write cut short: SQLite's synchronous=NORMAL
    allows a power loss to take the last commit); a WAL restarted after a checkpoint, old frames after the new."""
    path = wal_journal(tmp_path / "sound")
    report = inspect_wal(Path(f"{path}-wal"))
    assert report is not None and not report.damaged and report.readable == report.frames
    assert len(list(RunStore(path, create=False).events())) == COMMITS
    path = wal_journal(tmp_path / "torn")
    wal = Path(f"{path}-wal")
    data = bytearray(wal.read_bytes())
    data[-100] ^= 0xFF  # the last frame's page
    wal.write_bytes(bytes(data))
    report = inspect_wal(wal)
    assert report is not None and not report.damaged and report.readable == report.frames - 1
    assert len(list(RunStore(path, create=False).events())) == COMMITS - 1
    path = wal_journal(tmp_path / "restarted", checkpoint_after=40)
    report = inspect_wal(Path(f"{path}-wal"))
    assert report is not None and not report.damaged and report.readable < report.frames  # stale frames follow
    assert len(list(RunStore(path, create=False).events())) == COMMITS


def test_a_damaged_wal_header_loses_every_commit_in_it_and_is_found(tmp_path: Path) -> None:
    path = wal_journal(tmp_path / "run", checkpoint_after=40)  # 40 in the main file, 20 in the WAL
    wal = Path(f"{path}-wal")
    in_main_file = len(rows(copy_journal(path, tmp_path / "cut", 0)))  # what SQLite has without the WAL
    assert in_main_file == 40
    data = bytearray(wal.read_bytes())
    data[13] ^= 0xFF  # the checkpoint sequence number: the header's checksum no longer matches
    wal.write_bytes(bytes(data))
    assert len(rows(copy_journal(path, tmp_path / "plain"))) == in_main_file < COMMITS  # silently
    with pytest.raises(JournalDamaged, match="the WAL is damaged at its header"):
        RunStore(path, create=False)
    result = salvage(path.parent)
    assert (result.events, result.lost_commits) == (in_main_file, COMMITS - in_main_file)


def test_a_gap_or_an_undecodable_event_is_damage(tmp_path: Path) -> None:
    for kind, change in (("gap", "DELETE FROM events WHERE seq = 5"),
                         ("garbage", "UPDATE events SET data = x'c1' WHERE seq = 5")):
        folder = tmp_path / kind
        store = RunStore(folder / "journal.sqlite", create=True)
        for i in range(10):
            store.append("tick", (i,))
        store.close()
        with sqlite3.connect(folder / "journal.sqlite") as db:
            db.execute(change)
        events = RunStore(folder / "journal.sqlite", create=False).events()
        assert [next(events)[1][0] for _ in range(4)] == [0, 1, 2, 3]
        with pytest.raises(JournalDamaged, match="event 5 (is missing|does not decode)"):
            next(events)
        assert salvage(folder).events == 4


def test_a_full_disk_at_the_start_leaves_no_journal_to_refuse_the_retry(tmpfs: Path, ctx) -> None:
    """The journal cannot be created (the disk is full): the mapper's start fails with JournalWriteError and
    leaves neither a journal nor the folders it made, so that the retry, once there is space, is not refused
    with "already holds a run" (issue 21, item 5)."""
    from mgst.config import load_experiment  # noqa: PLC0415
    from mgst.testbed.mapper import Mapper  # noqa: PLC0415

    exp_file = small_file(tmpfs.parent, duration=2.0)
    filler = fill(tmpfs)
    out = tmpfs / "runs" / "one"
    with pytest.raises(JournalWriteError):
        Mapper(load_experiment(exp_file), "tcp://127.0.0.1:0", context=ctx, out=out)
    assert sorted(p.name for p in tmpfs.iterdir()) == ["filler"], list(tmpfs.rglob("*"))
    filler.unlink()
    Mapper(load_experiment(exp_file), "tcp://127.0.0.1:0", context=ctx, out=out).close()


@pytest.mark.parametrize("damage", ["page size", "salts", "empty main file"])
def test_a_wal_that_sqlite_would_drop_whole_is_damage_and_both_files_are_left_as_they_are(tmp_path: Path, damage):
    """A run of a minute is all in its WAL (no checkpoint yet). A WAL header whose page size is not one, or whose
    salts no longer match its frames, made SQLite ignore the whole WAL, and an empty main file made it delete the
    WAL: `mgst export` said "not a journal (no such table: meta)" and the WAL, holding the whole run, was gone."""
    path = wal_journal(tmp_path / "run")
    wal = Path(f"{path}-wal")
    data = bytearray(wal.read_bytes())
    if damage == "page size":
        data[8:12] = (3000).to_bytes(4, "big")
    elif damage == "salts":
        data[16] ^= 0x5A
    else:
        path.write_bytes(b"")
    wal.write_bytes(bytes(data))
    before = (sha(path), sha(wal))
    said = "its main file is empty" if damage == "empty main file" else "the WAL is damaged at its header"
    with pytest.raises(JournalDamaged, match=said):
        RunStore(path, create=False)
    p = mgst("export", str(path.parent))
    assert p.returncode == 2 and "Traceback" not in p.stderr and said in p.stderr, p.stderr
    assert (sha(path), sha(wal)) == before  # nothing opened in place, nothing deleted
    result = salvage(path.parent)
    assert result.lost_commits >= COMMITS and (sha(path), sha(wal)) == before  # (and the schema's first commits)


def test_a_torn_header_over_a_checkpointed_wal_loses_nothing_and_is_not_damage(tmp_path: Path) -> None:
    """A WAL whose every page the main file holds already (checkpointed): its header damaged, SQLite drops it and
    loses nothing, so it is not reported."""
    path = wal_journal(tmp_path / "run")
    ckpt = copy_journal(path, tmp_path / "ckpt")
    wal = Path(f"{ckpt}-wal")
    db = sqlite3.connect(str(ckpt))
    db.execute("PRAGMA wal_checkpoint(PASSIVE)")  # its main file gets every page
    data = bytearray(wal.read_bytes())  # (the WAL as the checkpoint left it: SQLite deletes it as it closes)
    db.close()
    assert len(data) > 32
    data[16] ^= 0x5A
    wal.write_bytes(bytes(data))
    report = inspect_wal(wal, ckpt)
    assert report is not None and not report.damaged
    assert len(list(RunStore(ckpt, create=False).events())) == COMMITS
