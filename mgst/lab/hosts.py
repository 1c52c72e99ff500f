"""The hosts file of `mgst lab` (TOML) -> Lab: every error names the key (format in docs/lab.md)."""

from __future__ import annotations

import ipaddress
import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from mgst.toml_file import TomlFileError, read_toml
from mgst.wire import security
from mgst.wording import printable

# Host labels and machine names become parts of file names and of messages: a safe alphabet.
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# A host name or an IPv4 address; never starting with '-' (ssh would read an option). An address with ':' is an
# IPv6 one, checked by ipaddress (see _address).
_HOST_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}$")
_SCOPE = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")  # an IPv6 address's zone: an interface name (fe80::1%eth0)
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}$")
# StrictHostKeyChecking values: "yes" (the default: a host must be in known_hosts), "accept-new" (trust on
# first use), "no" (unsafe: accepts any key; logged).
HOST_KEY_CHECKING = ("yes", "accept-new", "no")
# The ssh connection time-out's bounds, in seconds: below 1 s a loaded network fails; above 300 s a dead host
# holds the command for minutes.
MIN_CONNECT_TIMEOUT, MAX_CONNECT_TIMEOUT = 1.0, 300.0
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_REMOTE_DIR = "mgst-lab"
DEFAULT_MGST = ("mgst",)
# Options `mgst lab` gives the puller itself; puller_args may not repeat them (they would contradict its files).
MANAGED_PULLER_OPTIONS = ("--connect", "--machine", "--keys", "--key", "--mapper-key", "--insecure", "--allow-file")
# The puller's options that begin a managed one's name, yet are its own (exact: argparse takes them as given).
OWN_PULLER_OPTIONS = ("--allow",)
# A remote path or argument is written into a shell script: bounded, printable, one line.
MAX_WORD = 4096

_HOST_KEYS = ("address", "machines", "user", "port", "identity_file", "known_hosts", "ssh_config",
              "host_key_checking", "connect_timeout", "remote_dir", "mgst", "allow_file", "puller_args")
_DEFAULT_KEYS = tuple(k for k in _HOST_KEYS if k not in ("address", "machines"))
_LAB_KEYS = ("connect", "keys")


class HostsFileError(ValueError):
    """A problem with a hosts file, naming the offending key (``hosts.pc01.port``), or ``(file)``."""

    def __init__(self, key: str, problem: str, path: str):
        self.key, self.problem, self.path = key, problem, path
        super().__init__(f"{path}: {key}: {problem}")


@dataclass(frozen=True, slots=True)
class Host:
    """One lab machine reached over SSH, and the pullers it runs (one per machine name)."""

    label: str
    address: str
    machines: tuple[str, ...]
    user: str | None
    port: int
    identity_file: Path | None
    known_hosts: Path | None
    ssh_config: Path | None
    host_key_checking: str
    connect_timeout: float
    remote_dir: str
    mgst: tuple[str, ...]
    allow_file: Path | None
    puller_args: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Lab:
    """A hosts file: where the mapper is, its key folder, and the hosts."""

    path: Path
    connect: str
    keys: Path
    hosts: tuple[Host, ...]


def load_hosts(path: Path) -> Lab:
    """Read and validate the hosts file at ``path``; HostsFileError naming the key."""
    try:
        data = read_toml(path)
    except TomlFileError as e:
        raise HostsFileError("(file)", str(e), str(path)) from None
    return parse_hosts(data, path)


def parse_hosts(data: Mapping[str, Any], path: Path) -> Lab:
    """Validate parsed TOML ``data`` of the hosts file at ``path`` (its folder anchors relative paths)."""
    where = str(path)
    base = path.parent

    def fail(key: str, problem: str) -> HostsFileError:
        return HostsFileError(key, problem, where)

    _known(data, ("lab", "defaults", "hosts", "slurm"), "", fail)
    if "slurm" in data:
        raise fail("slurm", "a Slurm lab: read by mgst.lab.lab_file.load_lab")
    lab, connect = check_connect(data, fail)
    keys = check_keys(lab, base, fail)
    defaults = _table(data, "defaults", fail)
    _known(defaults, _DEFAULT_KEYS, "defaults.", fail)
    hosts_table = _table(data, "hosts", fail, required=True)
    if not hosts_table:
        raise fail("hosts", "no host: add a [hosts.NAME] table per lab machine")
    hosts = []
    seen: dict[str, str] = {}
    for label, table in hosts_table.items():
        prefix = f"hosts.{label}."
        if not _LABEL.match(label):
            raise fail(f"hosts.{label}", "a host's name takes letters, digits, '_', '.', '-' (at most 64)")
        if not isinstance(table, Mapping):
            raise fail(f"hosts.{label}", "must be a table: [hosts.NAME] with address = ... and machines = [...]")
        _known(table, _HOST_KEYS, prefix, fail)
        host = _host(label, table, defaults, base, prefix, fail)
        for m in host.machines:
            if m in seen:
                raise fail(prefix + "machines", f"{m} is also run by host {seen[m]}")
            seen[m] = label
            if _secret_key(keys, m) is None:
                raise fail(prefix + "machines", f"{keys} has no key pair for {m} (pullers/{m}.key_secret or "
                                                f"pullers/{security.LAB}.key_secret; make it with 'mgst keys')")
        hosts.append(host)
    return Lab(path, connect, keys, tuple(hosts))


def check_connect(data: Mapping[str, Any], fail) -> tuple[Mapping[str, Any], str]:
    """The [lab] table and its checked ``connect`` endpoint."""
    lab = _table(data, "lab", fail, required=True)
    _known(lab, _LAB_KEYS, "lab.", fail)
    connect = _string(lab, "connect", "lab.", fail)
    try:
        security.check_endpoint(connect, bind=False)
    except ValueError as e:
        raise fail("lab.connect", str(e)) from None
    return lab, connect


def check_keys(lab: Mapping[str, Any], base: Path, fail) -> Path:
    """The [lab] table's key folder, which must hold the mapper's public key."""
    keys = local_path(_string(lab, "keys", "lab.", fail), base)
    if not (keys / f"{security.MAPPER}.key").is_file():
        raise fail("lab.keys", f"{keys} has no {security.MAPPER}.key (make the folder with 'mgst keys')")
    return keys


def machine_names(machines: Any, key: str, fail) -> tuple[str, ...]:
    """A non-empty list of distinct machine names (a safe alphabet: they name files)."""
    if (not isinstance(machines, list) or not machines
            or not all(isinstance(m, str) and _LABEL.match(m) for m in machines)):
        raise fail(key, "give the experiment's machine names, e.g. [\"M1\"] (letters, digits, '_', '.', '-')")
    if len(set(machines)) != len(machines):
        raise fail(key, "a machine is named twice")
    return tuple(machines)


def has_secret_key(keys: Path, machine: str) -> bool:
    return _secret_key(keys, machine) is not None


def secret_key_in(keys: Path, machine: str) -> Path:
    """The local secret key file of ``machine`` in the key folder ``keys`` (its own, else the shared lab key)."""
    found = _secret_key(keys, machine)
    assert found is not None, "checked when the hosts file was read"
    return found


def secret_key(lab: Lab, machine: str) -> Path:
    """The local secret key file of ``machine`` (its own, else the shared lab key)."""
    found = _secret_key(lab.keys, machine)
    assert found is not None, "checked by parse_hosts"
    return found


def _secret_key(keys: Path, machine: str) -> Path | None:
    for name in (machine, security.LAB):
        p = keys / security.PULLERS / f"{name}.key_secret"
        if p.is_file():
            return p
    return None


def _host(label: str, own: Mapping[str, Any], defaults: Mapping[str, Any], base: Path, prefix: str,
          fail) -> Host:
    t = {**defaults, **own}

    def key(k: str) -> str:  # the key where the file gives it: in the host's table, else in [defaults]
        return "defaults." + k if k not in own and k in defaults else prefix + k

    address = _address(_string(t, "address", prefix, fail), prefix + "address", fail)
    machines = machine_names(t.get("machines"), prefix + "machines", fail)
    user = t.get("user")
    if user is not None and (not isinstance(user, str) or not _USER.match(user)):
        raise fail(key("user"), "a user name takes letters, digits, '_', '.', '-' (at most 32)")
    port = t.get("port", 22)
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise fail(key("port"), "must be a whole number in 1..65535")
    checking = t.get("host_key_checking", "yes")
    if checking not in HOST_KEY_CHECKING:
        raise fail(key("host_key_checking"), f"must be one of {', '.join(HOST_KEY_CHECKING)}")
    timeout = t.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT)
    if (not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not math.isfinite(timeout)
            or not MIN_CONNECT_TIMEOUT <= timeout <= MAX_CONNECT_TIMEOUT):
        raise fail(key("connect_timeout"), f"must be {MIN_CONNECT_TIMEOUT:g} to {MAX_CONNECT_TIMEOUT:g} seconds")
    remote_dir = _word(t.get("remote_dir", DEFAULT_REMOTE_DIR), key("remote_dir"), fail)
    if remote_dir.startswith("~/"):  # the login's home: where a relative path starts anyway
        remote_dir = remote_dir[2:]
    remote_dir = remote_dir.rstrip("/") or remote_dir  # "lab/" is "lab": its own entry, never a symlink's target
    parts = PurePosixPath(remote_dir).parts
    if (PurePosixPath(remote_dir).name in ("", ".", "..") or remote_dir.startswith("~") or ".." in parts
            or (remote_dir.startswith("/") and len(parts) < 3)):  # (not /etc, /home: it is made mode 700)
        raise fail(key("remote_dir"), f"{remote_dir!r}: name a folder of its own for mgst lab (it is made mode "
                                      "700), e.g. \"mgst-lab\" (relative to the login's home) or an absolute path "
                                      "two folders deep or more; no '..'")
    mgst = words(t.get("mgst", list(DEFAULT_MGST)), key("mgst"), fail)
    if not mgst:
        raise fail(key("mgst"), "give the command that runs mgst on the host, e.g. \"mgst\"")
    if mgst[0].startswith("-"):
        raise fail(key("mgst"), f"{mgst[0]!r}: the command cannot start with an option")
    puller_args = words(t.get("puller_args", []), key("puller_args"), fail)
    for a in puller_args:
        name = a.split("=", 1)[0]
        # (argparse also takes a unique prefix of a long option: "--insec" would be --insecure)
        managed = [o for o in MANAGED_PULLER_OPTIONS
                   if name == o or (len(name) > 2 and o.startswith(name) and name not in OWN_PULLER_OPTIONS)]
        if name.startswith("--") and managed:
            said = name if name == managed[0] else f"{name} (that is {managed[0]})"
            raise fail(key("puller_args"), f"{said} is given by mgst lab itself (see docs/lab.md)")
    files = {}
    for k in ("identity_file", "known_hosts", "ssh_config", "allow_file"):
        v = t.get(k)
        if v is None:
            files[k] = None
            continue
        if not isinstance(v, str) or not v:
            raise fail(key(k), "must be a file's path")
        p = local_path(v, base)
        if not p.is_file() and not (k == "ssh_config" and v == "/dev/null"):
            raise fail(key(k), f"{p}: no such file")
        if k == "known_hosts" and ("${" in str(p) or not str(p).isprintable()):  # ssh would expand ${NAME}
            raise fail(key(k), f"{str(p)!r}: ssh cannot take a path holding '${{' or a control character")
        if k == "identity_file" and ("${" in str(p) or "%" in str(p) or not str(p).isprintable()):
            # ssh expands ${NAME} and %-tokens in -i: it would read another file than the one checked here
            raise fail(key(k), f"{str(p)!r}: ssh cannot take a path holding '${{', '%' or a control character")
        files[k] = p
    return Host(label, address, tuple(machines), user, port, files["identity_file"], files["known_hosts"],
                files["ssh_config"], checking, float(timeout), remote_dir, mgst, files["allow_file"],
                puller_args)


def _address(text: str, key: str, fail) -> str:
    """A host name, an IPv4 address, or an IPv6 one (``::1``, ``fe80::1%eth0``; ``[::1]`` is taken as ``::1``),
    as ssh is given it."""
    inner = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    if ":" in inner:
        try:
            address = ipaddress.IPv6Address(inner)
        except ValueError:
            address = None
        if address is not None and (address.scope_id is None or _SCOPE.match(address.scope_id)):
            return str(address)
    elif inner == text and _HOST_NAME.match(text):
        return text
    raise fail(key, f"'{printable(text, 100)}' is not a host name, an IPv4 address or an IPv6 address (give the "
                    "port as port = N)")


def _known(table: Mapping[str, Any], keys: tuple[str, ...], prefix: str, fail) -> None:
    for k in table:
        if k not in keys:
            raise fail(prefix + k, f"unknown key (known: {', '.join(keys)})")


def _table(data: Mapping[str, Any], name: str, fail, *, required: bool = False) -> Mapping[str, Any]:
    t = data.get(name)
    if t is None:
        if required:
            raise fail(name, f"missing: add a [{name}] table (docs/lab.md)")
        return {}
    if not isinstance(t, Mapping):
        raise fail(name, "must be a table")
    return t


def _string(t: Mapping[str, Any], k: str, prefix: str, fail) -> str:
    """A required non-empty string."""
    v = t.get(k)
    if v is None:
        raise fail(prefix + k, "missing")
    if not isinstance(v, str) or not v:
        raise fail(prefix + k, "must be a non-empty string")
    return v


def _word(v: Any, key: str, fail) -> str:
    if not isinstance(v, str) or not v or len(v) > MAX_WORD or not v.isprintable():
        raise fail(key, f"must be a non-empty string of printable characters (at most {MAX_WORD})")
    return v


def words(v: Any, key: str, fail) -> tuple[str, ...]:
    """A command as a list of words, or a string split as a POSIX shell would (no expansion)."""
    if isinstance(v, str):
        try:
            v = shlex.split(v)
        except ValueError as e:
            raise fail(key, f"cannot split {v!r}: {e}") from None
    if not isinstance(v, list):
        raise fail(key, "must be a list of strings or a command line")
    return tuple(_word(w, key, fail) for w in v)


def local_path(text: str, base: Path) -> Path:
    """A path of the hosts file: ~ expanded, relative to the file's folder."""
    p = Path(text).expanduser()
    return p if p.is_absolute() else base / p
