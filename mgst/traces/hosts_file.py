"""The machine file: ``host,clock_ghz`` lines, each host's clock rate in GHz."""

from __future__ import annotations

import math
from pathlib import Path

from mgst.availability.trace_files import TraceError, check_host_names

MAX_HOST_LINES = 1_000_000
MAX_LINE = 1024  # characters; a line is ~12


def write_hosts(clock_ghz: dict[str, float], path: Path) -> None:
    """The machine file of these hosts (read_hosts reads it); ValueError for a host name it could not read back."""
    check_host_names(clock_ghz, ",")
    with open(path, "w", encoding="ascii") as f:
        f.write("host,clock_ghz\n")
        f.writelines(f"{host},{ghz!r}\n" for host, ghz in clock_ghz.items())


def read_hosts(path: Path) -> dict[str, float]:
    """Host -> clock rate (GHz, > 0), in file order; a first line ``host,clock_ghz`` is a header, blank lines and
    ``#`` comments are skipped. TraceError naming the file and line for a malformed one."""
    where = str(path)
    try:
        text = path.read_text(encoding="ascii")
    except UnicodeDecodeError:
        raise TraceError(where, None, "not ASCII") from None
    except OSError as e:
        raise TraceError(where, None, f"cannot read: {e.strerror or e}") from None
    clocks: dict[str, float] = {}
    first = True
    for number, raw in enumerate(text.splitlines(), 1):
        if number > MAX_HOST_LINES:
            raise TraceError(where, None, f"more than {MAX_HOST_LINES:,} lines")
        if len(raw) > MAX_LINE:
            raise TraceError(where, number, f"longer than {MAX_LINE} characters")
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split(",")]
        if first and [f.lower() for f in fields] == ["host", "clock_ghz"]:
            first = False
            continue
        first = False
        if len(fields) != 2:
            raise TraceError(where, number, f"{len(fields)} fields; need host,clock_ghz")
        host, value = fields
        if not host:
            raise TraceError(where, number, "no host")
        try:
            ghz = float(value)
        except ValueError:
            raise TraceError(where, number, f"clock_ghz is not a number: {value[:40]!r}") from None
        if not (math.isfinite(ghz) and ghz > 0):
            raise TraceError(where, number, f"clock_ghz {value[:40]!r} is not a positive number")
        if host in clocks:
            raise TraceError(where, number, f"host {host[:64]!r} again")
        clocks[host] = ghz
    if not clocks:
        raise TraceError(where, None, "names no host")
    return clocks


__all__ = ["read_hosts", "write_hosts"]
