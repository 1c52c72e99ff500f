"""A gang member's job: computes for a number of wall seconds of running time, and stopped time is not work.

Run by path (``python -I -S gang_job.py MEMBER_PID``), it imports nothing of mgst; the member starts it ahead
and it waits
for one line ``SECONDS STALL`` on its standard input (so that starting a process is not part of the work's
time), or ends at end of input. It advances in ticks of
TICK seconds; a gap between two ticks longer than STALL seconds means it was stopped (SIGSTOP: its machine was
RECLAIMED, or a peer of its gang was) and counts one tick, not the gap. It exits 0 when its seconds are done,
and at once if its parent (the member, whose pid it is given) is gone: it is given the pid, rather than reading
it, because it may be stopped before it runs a line, and be continued only once orphaned (the kernel continues an
orphaned stopped group and hangs it up; a member started under nohup ignores the hangup, and so does its job).
"""

import os
import sys
import time

TICK = 0.005


def main() -> int:
    try:
        parent = int(sys.argv[1])
    except (IndexError, ValueError):
        sys.stderr.write("usage: gang_job.py MEMBER_PID\n")
        return 2
    if os.getppid() != parent:
        return 1  # its member is already gone
    line = sys.stdin.readline(200)
    if not line:
        return 0  # the member no longer needs it
    try:
        seconds, stall = (float(x) for x in line.split())
    except ValueError:
        sys.stderr.write("error: expected one line SECONDS STALL\n")
        return 2
    if not (0 < seconds <= 86_400 and 2 * TICK <= stall <= 3_600):
        sys.stderr.write("error: SECONDS in (0, 86400], STALL in [0.01, 3600]\n")
        return 2
    left = seconds
    last = time.monotonic()
    while left > 0:
        time.sleep(min(TICK, left))
        now = time.monotonic()
        gap, last = now - last, now
        left -= gap if gap <= stall else TICK
        if os.getppid() != parent:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
