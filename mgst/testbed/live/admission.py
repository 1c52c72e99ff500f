"""Which connections the live view admits: a bound on its sockets, a bound per client address, and sockets
kept for the addresses that proved the token.

The rules, applied when a connection is accepted (before a byte of it is read):

- at most :data:`PER_ADDRESS` sockets per client address. A new connection from an address at that bound
  takes the place of that address's oldest connection still sending its request (closed at once), or is
  closed at once if all of them are being answered. The oldest goes, not the new one: a browser sends its
  request as soon as it connects, a slow sender is the one that has waited longest. So a slowloris from
  the address a user shares (loopback, a NAT) mostly replaces itself: it keeps the user out only by
  opening PER_ADDRESS connections between the user's connect and the user's request (milliseconds);
- at most :data:`MAX_OPEN` sockets in all, of which :data:`RESERVED` only for an address that presented
  the valid token within the last :data:`TRUST_TTL` seconds. A connection beyond that is closed at once.
  Without a token (a loopback view that requires none) nobody can prove anything, and all
  :data:`MAX_OPEN` are open to everyone.

A client address is an IPv4 address, or an IPv6 address's /64 (:func:`client_key`: one host on an IPv6
network commonly has a whole /64 to connect from). An address, not a connection, is trusted: on a shared
address (loopback, a NAT) whoever else uses it is trusted too once the user has proved the token, and a
user who has not proved it yet (a first visit) is refused while strangers fill the unreserved sockets.
Trusted addresses are remembered for :data:`TRUST_TTL` seconds after their latest valid token, at most
:data:`MAX_TRUSTED` of them (the least recent forgotten).
"""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

# Sockets open at once, all told (each one the front is reading a request from or answering).
MAX_OPEN = 128
# Of MAX_OPEN, the sockets only an address that proved the token may take.
RESERVED = 32
# Sockets open at once from one client address (a browser opens at most 6 per host).
PER_ADDRESS = 16
# Seconds an address stays trusted after it last presented the valid token.
TRUST_TTL = 600.0
# Trusted addresses remembered at most (the least recently seen forgotten first).
MAX_TRUSTED = 256

# The prefix an IPv6 client is counted by (a host is commonly given a /64).
IPV6_PREFIX = 64

Conn = TypeVar("Conn")


def client_key(address: str) -> str:
    """The client address ``address`` is counted and trusted as: an IPv4 address (also one mapped into IPv6)
    as itself, an IPv6 address by its /64 (loopback as itself)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if ip.version == 6:
        mapped = ip.ipv4_mapped  # type: ignore[union-attr]
        if mapped is not None:
            return str(mapped)
        if not ip.is_loopback:
            return str(ipaddress.ip_network(f"{ip}/{IPV6_PREFIX}", strict=False))
    return str(ip)


class Admission(Generic[Conn]):
    """The books of the open connections, by client address; ``reserve``: whether a token exists to prove
    (else nobody is trusted, and the reserved sockets are everyone's)."""

    def __init__(self, reserve: bool, *, max_open: int = MAX_OPEN, reserved: int = RESERVED,
                 per_address: int = PER_ADDRESS, trust_ttl: float = TRUST_TTL, max_trusted: int = MAX_TRUSTED,
                 clock: Callable[[], float] = time.monotonic):
        if not 0 <= reserved < max_open or per_address < 1:
            raise ValueError("need 0 <= reserved < max_open and per_address >= 1")
        self.max_open = max_open
        self.untrusted_limit = max_open - reserved if reserve else max_open
        self.per_address = per_address
        self.trust_ttl = trust_ttl
        self.max_trusted = max_trusted
        self.clock = clock
        # address -> its open connections, oldest first -> whether each is still sending its request
        self._by_address: dict[str, dict[Conn, bool]] = {}
        self._address_of: dict[Conn, str] = {}
        self._trusted: OrderedDict[str, float] = OrderedDict()  # address -> until when, least recent first

    @property
    def open_count(self) -> int:
        return len(self._address_of)

    def trust(self, address: str) -> None:
        """``address`` presented the valid token just now."""
        self._trusted.pop(address, None)
        self._trusted[address] = self.clock() + self.trust_ttl
        while len(self._trusted) > self.max_trusted:
            self._trusted.popitem(last=False)

    def trusted(self, address: str) -> bool:
        until = self._trusted.get(address)
        if until is None:
            return False
        if until <= self.clock():
            del self._trusted[address]
            return False
        return True

    def open(self, address: str, conn: Conn) -> tuple[bool, Conn | None]:
        """A connection from ``address`` was accepted: (whether it is admitted, a connection of the same
        address to close at once to make room for it, if any). One not admitted is to be closed at once."""
        mine = self._by_address.get(address)
        evicted: Conn | None = None
        if mine is not None and len(mine) >= self.per_address:
            evicted = next((c for c, reading in mine.items() if reading), None)
            if evicted is None:
                return False, None  # all of this address's connections are being answered
            self.close(evicted)
        else:
            limit = self.max_open if self.trusted(address) else self.untrusted_limit
            if self.open_count >= limit:
                return False, None
        self._by_address.setdefault(address, {})[conn] = True
        self._address_of[conn] = address
        return True, evicted

    def answering(self, conn: Conn) -> None:
        """``conn``'s request is whole: it is being answered, no longer a connection to replace."""
        address = self._address_of.get(conn)
        if address is not None:
            self._by_address[address][conn] = False

    def close(self, conn: Conn) -> None:
        """``conn`` is closed (again: nothing)."""
        address = self._address_of.pop(conn, None)
        if address is None:
            return
        mine = self._by_address[address]
        del mine[conn]
        if not mine:
            del self._by_address[address]
