"""The live view's admission rules on their own (no socket): the bound per address and who makes room, the
bound in all and the sockets kept for addresses that proved the token, how long trust lasts; and the end of
a request head as the front finds it."""

from __future__ import annotations

from mgst.testbed.live.admission import Admission, client_key
from mgst.testbed.live.front import head_end


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_address_at_its_bound_replaces_its_oldest_unfinished_request():
    adm: Admission[str] = Admission(reserve=False, max_open=10, reserved=0, per_address=3)
    assert [adm.open("a", c) for c in ("a1", "a2", "a3")] == [(True, None)] * 3
    adm.answering("a1")  # a1's request is whole: being answered, not replaced
    assert adm.open("a", "a4") == (True, "a2")  # the oldest still sending its request
    assert adm.open("a", "a5") == (True, "a3")
    adm.answering("a4")
    adm.answering("a5")
    assert adm.open("a", "a6") == (False, None)  # all being answered: the new one is refused
    assert adm.open("b", "b1") == (True, None) and adm.open_count == 4
    for c in ("a1", "a4", "a5", "b1", "b1"):  # (closing twice: nothing)
        adm.close(c)
    assert adm.open_count == 0 and adm.open("a", "a7") == (True, None)


def test_sockets_kept_for_addresses_that_proved_the_token():
    clock = Clock()
    adm: Admission[int] = Admission(reserve=True, max_open=6, reserved=2, per_address=5, trust_ttl=10.0,
                                    clock=clock)
    assert all(adm.open(f"x{i}", i)[0] for i in range(4))  # strangers fill the 4 not kept
    assert adm.open("x9", 9) == (False, None)
    assert adm.open("user", 10) == (False, None)  # not trusted yet (a first visit waits its turn)
    adm.trust("user")
    assert adm.open("user", 11) == (True, None) and adm.open("user", 12) == (True, None)
    assert adm.open("user", 13) == (False, None)  # the bound in all
    adm.close(11)
    clock.now = 10.5  # the trust has lapsed
    assert not adm.trusted("user") and adm.open("user", 14) == (False, None)
    # without a token to prove, the kept sockets are everyone's
    open_all: Admission[int] = Admission(reserve=False, max_open=6, reserved=2, per_address=5)
    assert all(open_all.open(f"x{i}", i)[0] for i in range(6)) and not open_all.open("y", 7)[0]


def test_trusted_addresses_are_bounded():
    adm: Admission[int] = Admission(reserve=True, max_trusted=3)
    for i in range(5):
        adm.trust(f"a{i}")
    assert [adm.trusted(f"a{i}") for i in range(5)] == [False, False, True, True, True]


def test_client_keys():
    assert client_key("192.0.2.7") == "192.0.2.7"
    assert client_key("::ffff:192.0.2.7") == "192.0.2.7"
    assert client_key("2001:db8:1:2:aaaa::1") == client_key("2001:db8:1:2:bbbb::2") == "2001:db8:1:2::/64"
    assert client_key("::1") == "::1"


def test_head_end():
    assert head_end(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nbody") == len(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert head_end(b"GET / HTTP/1.0\n\n") == len(b"GET / HTTP/1.0\n\n")
    assert head_end(b"GET / HTTP/1.1\r\nHost: x\r\n") == -1
    assert head_end(b"GET / HTTP/1.1\r\nX: a\r\n\r") == -1
