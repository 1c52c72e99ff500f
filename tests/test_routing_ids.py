"""The mapper's ROUTER hands out routing ids no peer can foresee (libzmq draws them from an unseeded rand())."""

from __future__ import annotations

import subprocess
import sys

FIRST_ID = """
import zmq
from mgst.testbed.router import Router

router = Router("tcp://127.0.0.1:0", None, None, 1)
ctx = zmq.Context()
dealer = ctx.socket(zmq.DEALER)
dealer.linger = 0
dealer.connect(router.endpoint)
dealer.send(b"x")
assert router.socket.poll(10_000), "no message"
print(router.socket.recv_multipart()[0].hex())
dealer.close(0)
router.close()
ctx.term()
"""


def first_id() -> str:
    p = subprocess.run([sys.executable, "-c", FIRST_ID], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_each_mapper_process_hands_out_other_routing_ids():
    # Unseeded, every process's first automatic id is the same: a peer allowed to choose its own id could take
    # the next ones, and libzmq aborts the mapper when an automatic id then collides with a taken one.
    ids = {first_id() for _ in range(3)}
    assert len(ids) == 3, ids
