"""The wire's versions 5 and 6 (mgst.wire.protocol): a job's pace, Pace, and Share's availability state (5); a job's
hold, the time its result is held before it is reported (6); checked both ways."""

from __future__ import annotations

import msgpack
import pytest

from mgst.wire import protocol as P


def frame(kind: str, **fields) -> bytes:
    return msgpack.packb({"t": kind, **fields}, use_bin_type=True)


def test_the_new_fields_round_trip():
    job = P.JobMsg(7, 3, 0, 2.0, 2.0, 0.0, 0.0, "", (), 0.0)
    assert P.decode(P.encode(job)) == job and job.hold == 0.0
    held = P.JobMsg(7, 3, 0, 2.0, 2.0, 0.0, 0.0, "", (), 1.0, 1800.0)
    assert P.decode(P.encode(held)).hold == 1800.0
    assert P.decode(P.encode(P.Pace(3, 1.0))) == P.Pace(3, 1.0)
    assert P.decode(P.encode(P.Share(0.0, 1))) == P.Share(0.0, 1)
    assert P.Share(0.5) == P.Share(0.5, 0)  # UP unless it says RECLAIMED
    assert P.Pace in P.FROM_MAPPER and P.Pace not in P.FROM_PULLER


@pytest.mark.parametrize("bad", [
    frame("pace", replica=3, pace=1.5),  # a pace is a share of the machine's speed: 0 to 1
    frame("pace", replica=3, pace=-0.1),
    frame("pace", replica=-1, pace=1.0),
    frame("pace", replica=3),
    frame("share", share=0.5, state=2),  # DOWN is no share: a dead puller says nothing
    frame("share", share=0.5, state=True),
    frame("share", share=0.5),  # a version-4 Share: no state
    frame("job", job=7, replica=3, job_class=0, size=2.0, work=2.0, progress=0.0, stage=0.0, command_key="",
          command=[]),  # a version-4 job: no pace
    frame("job", job=7, replica=3, job_class=0, size=2.0, work=2.0, progress=0.0, stage=0.0, command_key="",
          command=[], pace=float("nan"), hold=0.0),
    frame("job", job=7, replica=3, job_class=0, size=2.0, work=2.0, progress=0.0, stage=0.0, command_key="",
          command=[], pace=1.0),  # a version-5 job: no hold
    frame("job", job=7, replica=3, job_class=0, size=2.0, work=2.0, progress=0.0, stage=0.0, command_key="",
          command=[], pace=1.0, hold=-1.0),
    frame("job", job=7, replica=3, job_class=0, size=2.0, work=2.0, progress=0.0, stage=0.0, command_key="",
          command=[], pace=1.0, hold=float("inf")),
    frame("job", job=7, replica=3, job_class=0, size=2.0, work=2.0, progress=0.0, stage=0.0, command_key="",
          command=[], pace=1.0, hold="1"),
])
def test_a_bad_or_old_form_is_refused(bad):
    with pytest.raises(P.ProtocolError):
        P.decode(bad)

