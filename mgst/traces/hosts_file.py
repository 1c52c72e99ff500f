"""The machine file: ``host,clock_ghz`` lines, each host's clock rate in GHz."""

from __future__ import annotations

import math
from pathlib import Path

from mgst.availability.trace_files import TraceError, check_host_names, data_lines, plain_float

MAX_HOST_LINES = 1_000_000
MAX_LINE = 1024  # bytes; a line is ~12
MAX_HOSTS_BYTES = 64 << 20  # 64 MiB


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
    clocks: dict[str, float] = {}
    first = True
    for number, line in data_lines(path, max_line=MAX_LINE, max_lines=MAX_HOST_LINES, max_bytes=MAX_HOSTS_BYTES):
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
            ghz = plain_float(value)
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
