"""Read a file a user named, within bounds: regular files only, at most so many bytes and lines, gzip by its size
once decompressed; every refusal an OSError saying why in a few words.

Each reader of the project states its own limits (a trace's, a TOML file's, a token's) and reads through here: a
FIFO is refused without waiting for a writer (opened non-blocking, then ``fstat``), a device such as /dev/zero or a
folder is refused before a byte is read, and no line is read further than one byte past its limit
(``readline(limit)``), so memory holds at most one line and whatever the caller keeps.
"""

from __future__ import annotations

import errno
import gzip
import os
import stat
import zlib
from collections.abc import Iterator
from typing import BinaryIO

GZIP_SUFFIX = ".gz"
# The kinds of file that are not regular, as a refusal names them.
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class FileReadError(OSError):
    """A file refused (not a regular file, larger than its limit, a line too long, too many lines) or a compressed
    stream that is broken. An OSError, so a reader's ``except OSError`` says it; ``str()`` is the problem alone,
    ``line`` the 1-based line at fault (None: the file as a whole)."""

    def __init__(self, problem: str, line: int | None = None, code: int = errno.EFBIG):
        super().__init__(code, problem)
        self.problem = problem
        self.line = line

    def __str__(self) -> str:
        return self.problem


def size_text(n: int) -> str:
    """A byte limit as users read it: "4 KiB", "16 MiB", "1 GiB" (exact binary units; bytes otherwise)."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift:,} {unit}"
    return f"{n:,} bytes"


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """``path`` opened for reading in binary, if it is a regular file (a symbolic link to one is); FileReadError
    naming what it is otherwise. Opened with O_NONBLOCK, so that a FIFO without a writer is refused at once rather
    than waited on; FileNotFoundError and the other errors of open(2) as they are."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
            raise FileReadError(f"is {kind}, not a regular file",
                                code=errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL)
        os.set_blocking(fd, True)  # (no effect on a regular file's reads; set back for good measure)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | os.PathLike, max_bytes: int) -> bytes:
    """The whole of the regular file ``path``; FileReadError if it holds more than ``max_bytes``."""
    with open_regular(path) as f:
        if os.fstat(f.fileno()).st_size > max_bytes:
            raise FileReadError(f"larger than {size_text(max_bytes)}")
        data = f.read(max_bytes + 1)  # (a file growing meanwhile is read no further than one byte past the limit)
    if len(data) > max_bytes:
        raise FileReadError(f"larger than {size_text(max_bytes)}")
    return data


def read_text(path: str | os.PathLike, max_bytes: int, encoding: str = "utf-8") -> str:
    """The regular file ``path`` as text (UnicodeDecodeError if it is not in ``encoding``); FileReadError if it
    holds more than ``max_bytes``."""
    return read_bytes(path, max_bytes).decode(encoding)


def is_compressed(path: str | os.PathLike) -> bool:
    """Whether ``path`` is read through gzip: its name ends in .gz."""
    return os.fspath(path).endswith(GZIP_SUFFIX)


def numbered_lines(path: str | os.PathLike, *, max_line: int, max_lines: int, max_bytes: int,
                   compressed: bool | None = None) -> Iterator[tuple[int, bytes]]:
    """(1-based number, bytes with the line break) of each line of the regular file ``path``, decompressed with
    gzip if ``compressed`` (by default: if its name ends in .gz). FileReadError, as soon as it is met, for a line
    longer than ``max_line`` bytes (its break included: read no further than one byte past that), more than
    ``max_lines`` lines, more than ``max_bytes`` bytes in all (decompressed), or a broken gzip stream."""
    gz = is_compressed(path) if compressed is None else compressed
    after = " once decompressed" if gz else ""
    with open_regular(path) as raw:
        if not gz and os.fstat(raw.fileno()).st_size > max_bytes:
            raise FileReadError(f"larger than {size_text(max_bytes)}")
        stream: BinaryIO = gzip.GzipFile(fileobj=raw, mode="rb") if gz else raw  # type: ignore[assignment]
        total = number = 0
        try:
            while line := stream.readline(max_line + 1):
                number += 1
                total += len(line)
                if total > max_bytes:
                    raise FileReadError(f"larger than {size_text(max_bytes)}{after}")
                if number > max_lines:
                    raise FileReadError(f"more than {max_lines:,} lines")
                if len(line) > max_line:
                    raise FileReadError(f"longer than {max_line} bytes", number)
                yield number, line
        except (EOFError, zlib.error, gzip.BadGzipFile) as e:  # (BadGzipFile is an OSError; said the same way)
            raise FileReadError(f"not a complete gzip file ({e})", code=errno.EIO) from None
        finally:
            if stream is not raw:
                stream.close()


__all__ = ["FileReadError", "is_compressed", "numbered_lines", "open_regular", "read_bytes", "read_text",
           "size_text"]
