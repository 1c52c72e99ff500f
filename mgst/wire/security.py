"""CURVE keys and their use: making them, loading them, securing the mapper's and the pullers' sockets.

The files are ZeroMQ's own certificate files (``zmq.auth.create_certificates``):
``NAME.key`` holds a public key, ``NAME.key_secret`` the pair. A key folder
made by ``mgst keys DIR`` looks like::

    DIR/mapper.key_secret      the mapper's pair: stays on the head node
    DIR/mapper.key             the mapper's public key: copied to every lab machine
    DIR/authorized/NAME.key    public keys of the pullers the mapper admits (ZAP, zmq.auth)
    DIR/pullers/NAME.key_secret  a puller's pair: copied to that lab machine only

The mapper authenticates pullers through ZAP against ``authorized/`` and tells
the core which key sent each message (the ``User-Id`` ZAP attaches): a machine
name is bound to the key that registered it. A puller connects only to the
mapper whose public key it holds; a fake mapper cannot finish the handshake.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import ipaddress
import logging
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

from mgst.bounded_read import open_regular
from mgst.wire import secret_files

log = logging.getLogger(__name__)

MAPPER = "mapper"
AUTHORIZED = "authorized"
PULLERS = "pullers"
LAB = "lab"  # the name of a shared puller key
# The ZAP domain of the mapper's socket; pyzmq's authenticator looks keys up by it ('*' is not a wildcard).
ZAP_DOMAIN = "mgst"
# Names become file names: keep them to a safe alphabet.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# A key fingerprint's length in hex digits (64 bits): short enough to compare by eye, long enough that nobody
# can make a second key with the same fingerprint (2^64 tries).
FINGERPRINT_HEX = 16
_ENDPOINT = re.compile(r"^(tcp://(\*|\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})|ipc://.+|inproc://.+)$")


class SecurityError(ValueError):
    """The mapper would run unsafely without having been told to."""


def security_mode(bind: str, keys: ServerKeys | None, insecure: bool) -> str:
    """How a mapper bound to ``bind`` runs: "curve", or "none (...)" saying why; SecurityError if it
    would be reachable from other machines without keys and without an explicit ``insecure``."""
    if keys is not None:
        return "curve"
    if insecure:
        where = f"{bind[:-2]} (on the free port it binds)" if bind.endswith(":0") else bind  # (not port 0)
        log.warning("running WITHOUT authentication or encryption (--insecure): anyone who reaches %s can "
                    "register as a machine and read the jobs", where)
        return "none (--insecure)"
    if not is_loopback(bind):
        raise SecurityError(f"{bind} is reachable from other machines: give the mapper keys (mgst keys, then "
                            "--keys DIR), or --insecure for a closed lab network")
    log.warning("no keys: pullers are not authenticated (loopback only)")
    return "none (loopback)"


class KeyFileError(ValueError):
    """A key file or folder that is missing or not what it should be; the message names the path."""


@dataclass(frozen=True, slots=True)
class ServerKeys:
    """What a secured mapper needs: its key pair and the folder of admitted puller keys."""

    public: bytes
    secret: bytes
    authorized: Path


@dataclass(frozen=True, slots=True)
class ClientKeys:
    """What a puller needs: its key pair and the mapper's public key."""

    public: bytes
    secret: bytes
    server_public: bytes


def needs_ipv6(endpoint: str) -> bool:
    """True for an endpoint whose host is an IPv6 address in brackets (tcp://[::1]:5555): its socket needs
    ZMQ_IPV6, without which ZeroMQ neither binds nor connects to it."""
    return endpoint.partition("://")[2].startswith("[")


def check_endpoint(endpoint: str, *, bind: bool) -> str:
    """``endpoint`` if it is a ZeroMQ endpoint mgst can use, else ValueError saying what is wrong."""
    m = _ENDPOINT.match(endpoint)
    if m is None:
        example = "tcp://*:5555" if bind else "tcp://head-node:5555"
        raise ValueError(f"{endpoint!r} is not a ZeroMQ endpoint; write it as {example}")
    if m.group(3) is not None:
        port = int(m.group(3))
        if not (0 < port < 65536 or (bind and port == 0)):
            raise ValueError(f"{endpoint!r}: port {port} is not in 1..65535")
        if m.group(2) == "*" and not bind:
            raise ValueError(f"{endpoint!r}: a puller connects to a host name or address, not '*'")
        if m.group(2).startswith("["):
            try:
                ipaddress.IPv6Address(m.group(2)[1:-1])
            except ValueError:
                raise ValueError(f"{endpoint!r}: {m.group(2)} is not an IPv6 address") from None
    return endpoint


def is_loopback(endpoint: str) -> bool:
    """True if binding ``endpoint`` exposes nothing beyond this machine (loopback TCP, ipc, inproc)."""
    if endpoint.startswith(("ipc://", "inproc://")):
        return True
    host = endpoint[len("tcp://"):].rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # '*', an interface name or a host name: reachable from outside


def check_key_name(name: str) -> str:
    """``name``, if it can name a key file (a puller's, a member's); ValueError saying what may, if not."""
    if not _NAME.match(name):
        raise ValueError(f"{name!r} cannot name a key: use letters, digits, '_', '.', '-' (at most 64)")
    return name


def create_keys(folder: Path, pullers: list[str] | None = None, *, lab: bool = False,
                overwrite: bool = False) -> list[Path]:
    """Make the mapper's pair (unless there) and one pair per puller name, or one shared lab pair.

    Returns the files written. Each is written fresh (mgst.wire.secret_files: never through a file or symlink
    already there), secret ones mode 0600, in folders of this user's own (made mode 0700; ``folder`` itself may be
    a symlink of the user's, to a folder of theirs). An existing key is kept unless ``overwrite``, and only if it is
    a private file of this user's. KeyFileError naming the path if a folder or a kept key is not as it must be.
    """
    names = [LAB] if lab else [check_key_name(n) for n in (pullers or [])]
    if len(set(names)) != len(names):
        raise ValueError("a puller name is given twice")
    seen: dict[str, str] = {}
    for name in names:  # (M1.key and m1.key are one file where names ignore case: a Mac's, a Windows share)
        other = seen.setdefault(name.casefold(), name)
        if other != name:
            raise ValueError(f"puller names {other!r} and {name!r} differ only in case: their key files would be one "
                             "file on a file system that ignores case (macOS, Windows); name them apart")
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        secret_files.own_folder(folder, follow=True)
        for sub in (AUTHORIZED, PULLERS):
            secret_files.own_folder(folder / sub)
        written: list[Path] = []
        if overwrite or not secret_files.kept_secret(folder / f"{MAPPER}.key_secret"):
            written += _make_pair(folder / f"{MAPPER}.key_secret", folder / f"{MAPPER}.key")
        for name in names:
            if not overwrite and secret_files.kept_secret(folder / PULLERS / f"{name}.key_secret"):
                continue
            # (the public half lives in authorized/, where the mapper's ZAP handler reads it)
            written += _make_pair(folder / PULLERS / f"{name}.key_secret", folder / AUTHORIZED / f"{name}.key")
    except secret_files.SecretFileError as e:
        raise KeyFileError(str(e)) from None
    except OSError as e:
        raise KeyFileError(f"{folder}: cannot make the key folder ({e.strerror})") from None
    return written


def _make_pair(secret: Path, public: Path) -> list[Path]:
    """A new CURVE pair: the pair in ``secret`` (mode 0600), the public key in ``public``; both written fresh.

    Written here rather than by ``zmq.auth.create_certificates``, which opens an existing file (or a symlink's
    target) and leaves a new one at the umask's mode until chmod; the text is the same (zmq.auth reads it)."""
    public_key, secret_key = zmq.curve_keypair()
    secret_files.write_fresh(public, _certificate(public_key, None), 0o644)
    secret_files.write_fresh(secret, _certificate(public_key, secret_key), secret_files.PRIVATE)
    return [public, secret]


def _certificate(public: bytes, secret: bytes | None) -> bytes:
    """A ZeroMQ certificate file's text, as zmq.auth writes and reads it: the public key, and the secret one if
    given."""
    banner = ("#   ZeroMQ CURVE **Secret** Certificate\n#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its "
              "permissions.\n" if secret is not None else "#   ZeroMQ CURVE Public Certificate\n")
    text = f"#   ****  Generated on {datetime.datetime.now()} by mgst  ****\n{banner}\nmetadata\ncurve\n"
    text += f'    public-key = "{public.decode("ascii")}"\n'
    if secret is not None:
        text += f'    secret-key = "{secret.decode("ascii")}"\n'
    return text.encode("ascii")


MAX_KEY_FILE = 16 * 1024  # bytes: a certificate file is about 300


def _read_certificate(path: Path) -> tuple[bytes, bytes | None]:
    """zmq.auth.load_certificate of ``path``, once it is known to be a regular file of at most MAX_KEY_FILE bytes
    (a FIFO or a device there would hang or fill the reader); OSError or ValueError otherwise."""
    with open_regular(path) as f:
        if os.fstat(f.fileno()).st_size > MAX_KEY_FILE:
            raise ValueError(f"larger than {MAX_KEY_FILE} bytes: not a key file")
    return zmq.auth.load_certificate(str(path))


def load_pair(path: Path) -> tuple[bytes, bytes]:
    """(public, secret) from a ``.key_secret`` file."""
    try:
        public, secret = _read_certificate(path)
    except (OSError, ValueError) as e:
        raise KeyFileError(f"{path}: cannot read a key pair ({e})") from None
    if not secret:
        raise KeyFileError(f"{path}: holds no secret key (a .key_secret file is needed)")
    return public, secret


def load_public(path: Path) -> bytes:
    """The public key in a ``.key`` (or ``.key_secret``) file."""
    try:
        public, _ = _read_certificate(path)
    except (OSError, ValueError) as e:
        raise KeyFileError(f"{path}: cannot read a public key ({e})") from None
    return public


def fingerprint(public: bytes) -> str:
    """A public key's short fingerprint, ``sha256:`` and the first FINGERPRINT_HEX hex digits of the SHA-256 of
    its 32 raw bytes (``public`` is its z85 text, as in a ``.key`` file); `mgst keys` and the puller print it."""
    try:
        raw = z85.decode(public)
    except ValueError:  # (not z85: fingerprint the bytes as they are, so that a bad key still shows which)
        raw = public
    return "sha256:" + hashlib.sha256(raw).hexdigest()[:FINGERPRINT_HEX]


def server_keys(folder: Path) -> ServerKeys:
    """The mapper's keys from a folder made by create_keys (a secret key readable by others is warned of)."""
    secret_file = folder / f"{MAPPER}.key_secret"
    public, secret = load_pair(secret_file)
    _warn_if_shared(secret_file, "the mapper's")
    authorized = folder / AUTHORIZED
    if not authorized.is_dir() or not any(authorized.glob("*.key")):
        raise KeyFileError(f"{authorized}: no puller public keys (*.key): no puller could connect")
    return ServerKeys(public, secret, authorized)


def client_keys(key: Path, mapper_key: Path) -> ClientKeys:
    """A puller's keys: its pair from ``key`` (a secret key readable by others is warned of), the mapper's public."""
    public, secret = load_pair(key)
    _warn_if_shared(key, "this puller's")
    return ClientKeys(public, secret, load_public(mapper_key))


def _warn_if_shared(secret_file: Path, whose: str) -> None:
    """A warning if ``secret_file`` is readable by others than its owner: anyone who reads it can pose as its
    holder (the mapper to the pullers, a puller to the mapper). Used, not refused: the user chose the file."""
    with contextlib.suppress(OSError):
        if secret_file.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            log.warning("%s: %s secret key is readable by others than its owner (chmod 600 it)", secret_file, whose)


def named_keys(keys: ServerKeys, names: dict[str, int]) -> dict[int, str]:
    """Machine index -> z85 public key, for every machine name with an ``authorized/NAME.key``."""
    bound = {}
    for name, j in names.items():
        path = keys.authorized / f"{name}.key"
        if path.exists():
            bound[j] = load_public(path).decode("ascii")
    return bound


# A refused key is logged at most once per this many seconds (a puller with the wrong keys retries with back-off).
REFUSAL_LOG_INTERVAL = 60.0
REFUSALS_TRACKED = 1024  # keys whose last refusal is remembered (the oldest forgotten first): bounded memory


class AuthorizedKeys:
    """The ZAP credentials provider (zmq.auth's ``configure_curve_callback``): admits exactly the public keys of a
    folder, read once, and logs a key it refuses, with its fingerprint, once per key and REFUSAL_LOG_INTERVAL."""

    def __init__(self, folder: Path, clock=None):
        import time  # noqa: PLC0415

        self.folder = folder
        self.admitted = frozenset(load_public(key) for key in sorted(folder.glob("*.key")))
        self._clock = clock or time.monotonic
        self._logged: dict[bytes, float] = {}
        self.refused = 0

    def callback(self, domain: str, key: bytes) -> bool:
        if key in self.admitted:
            return True
        self.refused += 1
        now = self._clock()
        last = self._logged.pop(key, None)
        if last is None or now - last >= REFUSAL_LOG_INTERVAL:
            last = now
            log.warning("refused a CURVE handshake from key %s: not among the %d puller keys in %s (a puller "
                        "started with another key folder's keys?)", fingerprint(z85.decode(key)),
                        len(self.admitted), self.folder)
        self._logged[key] = last
        if len(self._logged) > REFUSALS_TRACKED:
            del self._logged[next(iter(self._logged))]
        return False


def start_authenticator(context: zmq.Context, keys: ServerKeys,
                        provider: AuthorizedKeys | None = None) -> ThreadAuthenticator:
    """A ZAP handler for ``context`` that admits exactly the keys in ``keys.authorized``, logging those it refuses
    (``provider``: the caller's AuthorizedKeys of that folder, to count the refusals; else one of its own).

    Start it before binding: without a ZAP handler libzmq admits every client key.
    """
    provider = provider or AuthorizedKeys(keys.authorized)
    if not provider.admitted:
        raise KeyFileError(f"{keys.authorized}: no readable puller public keys")
    auth = ThreadAuthenticator(context, log=logging.getLogger("mgst.zap"))
    auth.start()
    auth.configure_curve_callback(domain=ZAP_DOMAIN, credentials_provider=provider)
    log.info("CURVE on: %d puller keys admitted from %s", len(provider.admitted), keys.authorized)
    return auth


def secure_server(socket: zmq.Socket, keys: ServerKeys) -> None:
    socket.curve_secretkey = keys.secret
    socket.curve_publickey = keys.public
    socket.curve_server = True
    socket.zap_domain = ZAP_DOMAIN.encode()


def secure_client(socket: zmq.Socket, keys: ClientKeys) -> None:
    socket.curve_secretkey = keys.secret
    socket.curve_publickey = keys.public
    socket.curve_serverkey = keys.server_public
