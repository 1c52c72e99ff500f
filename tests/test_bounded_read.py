"""Every file mgst reads is read within bounds (mgst.bounded_read): a regular file only, so a FIFO is refused at
once and /dev/zero before a byte is read; no line read further than its limit; a gzip file bounded by what it
inflates to.

What would eat memory or hang before the bounds runs in a child process with its address space limited to
CHILD_MEMORY and a time-out, so that a regression fails the test (MemoryError, or the time-out) and never takes
the machine or the suite with it."""

from __future__ import annotations

import gzip
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mgst.bounded_read import FileReadError, numbered_lines, open_regular, read_bytes, read_text

ROOT = Path(__file__).resolve().parents[1]
HIHI = ROOT / "experiments" / "hihi-mfd-fd.toml"
CHILD_MEMORY = 1 << 30  # bytes of address space a child may map: mgst's own work takes some 600 MB at most
CHILD_TIMEOUT = 60.0  # seconds; each child here ends in 1-3 s
EXIT_USAGE = 2


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))


def child(argv: list[str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``argv`` run by this Python in a child of bounded memory and time (a time-out fails the test)."""
    env = {**os.environ, "MGST_PURE": "1", "PYTHONPATH": str(ROOT)}
    try:
        return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=CHILD_TIMEOUT,
                              cwd=cwd, env=env, preexec_fn=_limited)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{argv}: still reading after {CHILD_TIMEOUT:g} s (a FIFO waited on?)")


def one_error_line(p: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """The single error line of a command refused with exit 2, holding every fragment."""
    assert "Traceback" not in p.stderr and "MemoryError" not in p.stderr, p.stderr[-3000:]
    assert p.returncode == EXIT_USAGE, (p.returncode, p.stderr[-3000:])
    errors = [line for line in p.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, p.stderr
    assert all(f in errors[0] for f in fragments), (fragments, errors[0])
    return errors[0]


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    """A named pipe nobody writes to: opening it to read the usual way waits for ever."""
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def gzip_bomb(path: Path, inflated: int = 2 << 30, byte: bytes = b"\0") -> Path:
    """A gzip file of some 2 MB that inflates to ``inflated`` bytes of ``byte`` (concatenated members, each of
    16 MiB: gzip reads them as one stream)."""
    member = gzip.compress(byte * (16 << 20), compresslevel=9)
    with open(path, "wb") as f:
        for _ in range(inflated // (16 << 20)):
            f.write(member)
    return path


# ---------------------------------------------------------------- the module


def test_a_fifo_a_device_and_a_folder_are_refused_before_a_byte_is_read(fifo: Path, tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(FileReadError, match=r"is a FIFO \(named pipe\), not a regular file"):
        open_regular(fifo)
    with pytest.raises(FileReadError, match="is a character device, not a regular file"):
        read_bytes("/dev/zero", 1 << 20)
    with pytest.raises(FileReadError, match="is a folder, not a regular file"):
        read_text(tmp_path, 1 << 20)
    with pytest.raises(FileNotFoundError):
        read_bytes(tmp_path / "nothing", 10)
    assert time.monotonic() - t0 < 5
    link = tmp_path / "link"
    (tmp_path / "real").write_text("followed")
    link.symlink_to(tmp_path / "real")
    assert read_text(link, 100) == "followed"  # a symbolic link to a regular file is one


def test_a_file_larger_than_its_limit_is_refused() -> None:
    assert read_bytes(HIHI, HIHI.stat().st_size) == HIHI.read_bytes()
    with pytest.raises(FileReadError, match="larger than 100 bytes") as err:
        read_bytes(HIHI, 100)
    assert isinstance(err.value, OSError) and err.value.strerror == "larger than 100 bytes"
    with pytest.raises(FileReadError, match="larger than 1 KiB"):
        read_text(HIHI, 1024)  # (some 3 KB)


def test_lines_are_bounded_as_they_are_read(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(b"a\nbb\n" + b"c" * 10 + b"\nd\n")
    read = []
    with pytest.raises(FileReadError, match="longer than 8 bytes") as err:
        for number, line in numbered_lines(path, max_line=8, max_lines=100, max_bytes=1000):
            read.append((number, line))
    assert err.value.line == 3 and read == [(1, b"a\n"), (2, b"bb\n")]
    with pytest.raises(FileReadError, match="more than 3 lines"):
        list(numbered_lines(path, max_line=100, max_lines=3, max_bytes=1000))
    with pytest.raises(FileReadError, match="larger than 10 bytes"):
        list(numbered_lines(path, max_line=100, max_lines=100, max_bytes=10))
    assert [n for n, _ in numbered_lines(path, max_line=100, max_lines=4, max_bytes=100)] == [1, 2, 3, 4]


def test_a_gzip_file_is_bounded_by_what_it_inflates_to(tmp_path: Path) -> None:
    """64 MiB of newlines in 64 KiB of gzip: refused once 1 MiB is inflated, not after the 64 MiB."""
    bomb = gzip_bomb(tmp_path / "lines.gz", 64 << 20, b"\n")
    assert bomb.stat().st_size < 1 << 20
    t0 = time.monotonic()
    with pytest.raises(FileReadError, match="larger than 1 MiB once decompressed"):
        for _ in numbered_lines(bomb, max_line=10, max_lines=1 << 30, max_bytes=1 << 20):
            pass
    assert time.monotonic() - t0 < 5
    cut = tmp_path / "cut.gz"
    cut.write_bytes(gzip.compress(b"x\n" * 1000)[:-20])
    with pytest.raises(FileReadError, match="not a complete gzip file"):
        list(numbered_lines(cut, max_line=10, max_lines=10_000, max_bytes=1 << 20))
    plain = tmp_path / "plain.gz"
    plain.write_bytes(b"not gzip at all\n")
    with pytest.raises(FileReadError, match="not a complete gzip file"):
        list(numbered_lines(plain, max_line=100, max_lines=10, max_bytes=1000))


# ---------------------------------------------------------------- the commands (issue's probes)


def test_a_gzip_trace_inflating_to_2_gb_is_one_error_line(tmp_path: Path) -> None:
    """2 MB of gzip, 2 GB of zeros without a line break: it filled memory to 1.97 GB (MemoryError)."""
    bomb = gzip_bomb(tmp_path / "availability.csv.gz")
    assert bomb.stat().st_size < 4 << 20
    one_error_line(child(["-m", "mgst", "traces", "summary", str(bomb)]), "PATH", "availability.csv.gz:1:",
                   "longer than 4096 bytes")


def test_dev_zero_as_a_trace_or_a_hosts_file_is_refused(tmp_path: Path) -> None:
    one_error_line(child(["-m", "mgst", "traces", "summary", "/dev/zero", "--format", "csv"]), "PATH",
                   "/dev/zero: is a character device, not a regular file")
    trace = tmp_path / "t.csv"
    trace.write_text("h1,0,100,up,1\n")
    one_error_line(child(["-m", "mgst", "traces", "summary", str(trace), "--hosts-file", "/dev/zero"]),
                   "--hosts-file", "is a character device")


def test_a_fifo_or_dev_zero_as_the_live_token_file_is_refused_at_once(tmp_path: Path, fifo: Path) -> None:
    """A FIFO as --live-token-file hung `mgst run` for ever; /dev/zero filled memory."""
    for token_file in (fifo, Path("/dev/zero")):
        p = child(["-m", "mgst", "run", str(HIHI), "--duration", "1", "--out", str(tmp_path / "out"),
                   "--live-token-file", str(token_file)])
        one_error_line(p, "--live-token-file", f"cannot read {token_file}: is a ")
        assert not (tmp_path / "out").exists()


# Each reader, given a FIFO (which it used to wait on for ever) or /dev/zero (which it read until memory ran out),
# refuses it with its own error: (the call, with FILE for the file; its error class, imported from; what it says).
READERS = [
    ("mgst.toml_file", "read_toml(FILE)", "TomlFileError", "fifo", "cannot read: is a FIFO"),
    ("mgst.toml_file", "read_toml(FILE)", "TomlFileError", "zero", "cannot read: is a character device"),
    ("mgst.config", "load_experiment(FILE)", "ConfigError", "fifo", "(file): cannot read: is a FIFO"),
    ("mgst.availability.trace_files", "parse_csv(FILE)", "TraceError", "fifo", "is a FIFO"),
    ("mgst.availability.trace_files", "parse_fta(FILE)", "TraceError", "zero", "is a character device"),
    ("mgst.traces.hosts_file", "read_hosts(FILE)", "TraceError", "fifo", "is a FIFO"),
    ("mgst.workload.swf", "read_swf(FILE)", "SwfError", "fifo", "is a FIFO"),
    ("puller.allowlist", "load_file(FILE)", "AllowListError", "fifo", "allow-list file: cannot read: is a FIFO"),
    ("puller.allowlist", "load_file(FILE)", "AllowListError", "zero", "cannot read: is a character device"),
    ("mgst.papers.kondo.findings", "read_runs([FILE])", "OSError", "fifo", "is a FIFO"),
    ("mgst.papers.anglano.findings", "read_sweep(FILE)", "OSError", "zero", "is a character device"),
    ("mgst.testbed.inputs", "digest(str(FILE))", "OSError", "fifo", "is a FIFO"),  # (a resume's check of its trace)
    ("mgst.testbed.inputs", "digest(str(FILE))", "OSError", "zero", "is a character device"),
]


@pytest.mark.parametrize(("module", "call", "error", "source", "said"), READERS,
                         ids=[f"{call.split('(')[0]}-{source}" for _, call, _, source, _ in READERS])
def test_each_reader_refuses_a_fifo_and_dev_zero(module, call, error, source, said, fifo: Path) -> None:
    path = fifo if source == "fifo" else Path("/dev/zero")
    function = call.split("(")[0]
    imported = "" if error == "OSError" else f"from {module} import {error}\n"
    code = (f"import pathlib, sys\nfrom {module} import {function}\n{imported}FILE = pathlib.Path({str(path)!r})\n"
            f"try:\n    {call}\nexcept {error} as e:\n    print('refused:', e)\n    sys.exit(3)\n")
    p = child(["-c", code])
    assert p.returncode == 3, p.stderr[-3000:]
    assert said in p.stdout, p.stdout


def test_a_fifo_in_a_platform_folder_or_a_sweep_folder_is_refused(tmp_path: Path) -> None:
    """platform.json and a sweep's sweep.csv / sweep.json are read back from folders a user names."""
    plat = tmp_path / "plat"
    p = child(["-m", "mgst", "traces", "generate", "homogeneous", "--out", str(plat), "--hosts", "2", "--days", "1"])
    assert p.returncode == 0, p.stderr
    (plat / "platform.json").unlink()
    os.mkfifo(plat / "platform.json")
    one_error_line(child(["-m", "mgst", "traces", "summary", str(plat)]), "platform.json", "is a FIFO")
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    os.mkfifo(sweep / "sweep.json")
    one_error_line(child(["-m", "mgst", "sweep", str(ROOT / "experiments" / "bot" / "anglano-sweep.toml"), "--out",
                          str(sweep), "--quick", "--no-plots", "--quiet"]), "--out", "sweep.json", "is a FIFO")
