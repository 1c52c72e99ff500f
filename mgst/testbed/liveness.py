"""How often the mapper heartbeats its pullers, and when a silent puller counts as down.

The rule, for ``n`` pullers:

- the heartbeat interval is ``max(HEARTBEAT_INTERVAL, n / HEARTBEAT_RATE)`` seconds: 0.2 s up to
  ``HEARTBEAT_RATE / 5`` pullers (a lab), then growing with ``n`` so that the mapper sends (and, as each
  puller heartbeats at the interval of its welcome, receives) at most HEARTBEAT_RATE heartbeats a second;
- a puller is down after ``LIVENESS`` intervals of silence: 1 s for a lab of up to 200 pullers,
  5 s at 1,000, 15 s at 3,000;
- the silence is judged against the last time the mapper had read everything waiting on its socket,
  not against its clock: a message sitting unread in the socket (behind a pause of the mapper: a GC,
  an LP solve, a backlog) counts as heard. Only a socket that has not been emptied for PAUSE_GRACE
  (a flood that never lets up) falls back to the clock, so that a flood delays failure detection by at
  most that much.
"""

from __future__ import annotations

import math

# How often the mapper heartbeats each puller in a lab, and how many silent intervals make a
# machine dead (the Paranoid Pirate pattern of the ZeroMQ guide uses 1 s and 3).
HEARTBEAT_INTERVAL = 0.2
LIVENESS = 5
# Heartbeats a second the mapper sends at most (as many come back): each costs it about 30-60 us of
# CPU (CURVE and msgpack in Python), so 1,000 a second is 5 % of a core however many pullers there are.
HEARTBEAT_RATE = 1000.0
# The machines heartbeated (and judged) in one pass of the mapper's loop: the sweep is spread over
# the interval in slices this big, so that no pass stalls dispatching for long (about 2 ms each).
HEARTBEAT_SLICE = 100
# A socket not emptied for this long (s) is a flood, not a pause: silence is judged against the clock
# again. No GC or LP solve pauses the mapper this long; a flood delays failure detection this much at most.
PAUSE_GRACE = 30.0


def heartbeat_interval_for(pullers: int) -> float:
    """The heartbeat interval (s) for a run of ``pullers`` pullers (see the module's rule)."""
    return max(HEARTBEAT_INTERVAL, pullers / HEARTBEAT_RATE)


def slices_for(pullers: int) -> int:
    """How many slices the heartbeat sweep over ``pullers`` machines is cut into."""
    return max(1, math.ceil(pullers / HEARTBEAT_SLICE))
