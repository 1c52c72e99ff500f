"""The priority of what stands for the kernel's network stack (the relay, a link's echoes): nice -10, in a
scheduling group of its own."""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

# The relay's nice value: it stands for the kernel's network stack (netem runs in softirq), which the pullers' and
# the mapper's work does not delay; at nice 0, a load of 20 on 2 cores delayed packets by tens of milliseconds.
NICE = -10
# Where Linux's autogroup keeps the nice value of this process's session's group (kernel.sched_autogroup_enabled):
# with autogroups, a nice value weighs only against the same session's processes, not against another session's load.
AUTOGROUP = "/proc/self/autogroup"


def as_the_network_stack() -> str | None:
    """Raise this process (the leader of a session of its own) to NICE, and its autogroup with it; returns what
    could not be done, or None."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, NICE)
    except OSError as e:  # (not root: the lab network needs root anyway)
        return f"cannot raise its priority ({e}): a loaded machine will delay packets more"
    if os.getsid(0) == os.getpid() and os.path.exists(AUTOGROUP):
        try:
            with open(AUTOGROUP, "w") as f:
                f.write(str(NICE))
        except OSError as e:
            return f"cannot raise its session's scheduling group ({e}): other sessions' load will delay packets more"
    return None
