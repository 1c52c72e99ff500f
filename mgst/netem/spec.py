"""The emulated network's specification: ``delay=50ms,jitter=5ms,loss=1%,rate=10mbit``, for every puller or per
machine (``M1:delay=80ms;*:delay=20ms``), parsed into LinkSpecs."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from mgst.config import ConfigError

OPTION = "--network"
# Seconds per time unit (tc's spelling: us, ms, s).
TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
# Bits per second per rate unit (tc's: kbit is 1000 bits/s, not 1024).
RATE_UNITS = {"bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
# At most 10 s of delay or jitter: a lab link of more is a mistake (a typo of ms for s), and it would hold
# that many seconds of packets in the relay.
MAX_TIME = 10.0
# Rates below 1 kbit/s would take seconds per packet (a 1500-byte packet takes 12 s at 1 kbit/s).
MIN_RATE = 1e3
MAX_RATE = 1e11  # 100 gbit/s: far above what a userspace relay moves, i.e. no cap
KEYS = ("delay", "jitter", "loss", "rate")
ALL = "*"
_NUMBER = re.compile(r"^((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e[+-]?[0-9]+)?)([a-z%]*)$")  # 2e-3s too
_MACHINE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True, slots=True)
class LinkSpec:
    """One direction's impairment, the same both ways: ``delay`` and ``jitter`` in seconds (one way), ``loss`` a
    fraction of packets, ``rate`` bits per second (None: no cap)."""

    delay: float = 0.0
    jitter: float = 0.0
    loss: float = 0.0
    rate: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"delay_ms": self.delay * 1e3, "jitter_ms": self.jitter * 1e3, "loss_percent": self.loss * 100,
                "rate_mbit": None if self.rate is None else self.rate / 1e6}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LinkSpec:
        rate = d.get("rate_mbit")
        return cls(float(d["delay_ms"]) / 1e3, float(d["jitter_ms"]) / 1e3, float(d["loss_percent"]) / 100,
                   None if rate is None else float(rate) * 1e6)


@dataclass(frozen=True, slots=True)
class NetworkSpec:
    """What ``--network`` asked: a link for every machine not named, and links for those named."""

    text: str
    default: LinkSpec = LinkSpec()
    machines: dict[str, LinkSpec] = field(default_factory=dict)

    def link_for(self, machine: str) -> LinkSpec:
        return self.machines.get(machine, self.default)

    def check_machines(self, names: list[str]) -> None:
        """ConfigError if the spec names a machine the experiment does not have."""
        unknown = sorted(set(self.machines) - set(names))
        if unknown:
            raise ConfigError(OPTION, f"names machine {unknown[0]!r}, which the experiment does not have "
                                      f"(it has {', '.join(names[:5])}{' ...' if len(names) > 5 else ''})")

    def as_dict(self) -> dict[str, Any]:
        """For summary.json and the journal's settings."""
        return {"spec": self.text, "mechanism": "userspace TUN relay (mgst.netem; the kernel has no netem qdisc)",
                "default": self.default.as_dict(),
                "machines": {name: link.as_dict() for name, link in sorted(self.machines.items())}}


def parse_network(text: str) -> NetworkSpec:
    """``[NAME:]key=value,...`` sections separated by ';' (NAME a machine, or ``*`` or nothing for every other);
    keys delay, jitter (us/ms/s), loss (%), rate (bit/kbit/mbit/gbit). ConfigError naming the key if bad."""
    default: LinkSpec | None = None
    machines: dict[str, LinkSpec] = {}
    for section in text.split(";"):
        section = section.strip()
        if not section and text.strip():
            raise ConfigError(OPTION, f"an empty section in {text!r} (sections are separated by ';')")
        name = ALL
        head, colon, rest = section.partition(":")
        if colon and "=" not in head:
            name, section = head.strip(), rest
            if name != ALL and not _MACHINE.match(name):
                raise ConfigError(OPTION, f"{name!r} is not a machine name")
        link = parse_link(section, "" if name == ALL else f"{name}:")
        if name == ALL:
            if default is not None:
                raise ConfigError(OPTION, "two sections for every machine ('*' or no name)")
            default = link
        elif name in machines:
            raise ConfigError(OPTION, f"two sections for machine {name!r}")
        else:
            machines[name] = link
    return NetworkSpec(text, default if default is not None else LinkSpec(), machines)


def parse_link(text: str, where: str = "") -> LinkSpec:
    """``delay=50ms,jitter=5ms,loss=1%,rate=10mbit`` (every key optional; empty: no impairment)."""
    values: dict[str, float] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            if text.strip():
                raise ConfigError(OPTION, f"{where}an empty item in {text!r}")
            continue
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip().lower()
        if not eq:
            raise ConfigError(OPTION, f"{where}{item!r} is not key=value (keys: {', '.join(KEYS)})")
        if key not in KEYS:
            raise ConfigError(OPTION, f"{where}unknown key {key!r} (keys: {', '.join(KEYS)})")
        if key in values:
            raise ConfigError(OPTION, f"{where}{key} given twice")
        values[key] = _value(key, value, where)
    if "jitter" in values and values["jitter"] > 0 and "delay" not in values:
        raise ConfigError(OPTION, f"{where}jitter needs a delay (jitter varies the delay around it)")
    return LinkSpec(values.get("delay", 0.0), values.get("jitter", 0.0), values.get("loss", 0.0), values.get("rate"))


def _value(key: str, value: str, where: str) -> float:
    m = _NUMBER.match(value)
    if m is None:
        raise ConfigError(OPTION, f"{where}{key}={value!r} is not a number with a unit")
    number, unit = float(m.group(1)), m.group(2)
    if key in ("delay", "jitter"):
        if unit not in TIME_UNITS:
            raise ConfigError(OPTION, f"{where}{key}={value!r} needs a time unit ({', '.join(TIME_UNITS)})")
        seconds = number * TIME_UNITS[unit]
        if seconds > MAX_TIME:
            raise ConfigError(OPTION, f"{where}{key}={value!r} is more than {MAX_TIME:g} s")
        return seconds
    if key == "loss":
        if unit != "%":
            raise ConfigError(OPTION, f"{where}loss={value!r} needs '%' (loss=1% drops one packet in 100)")
        if number > 100:
            raise ConfigError(OPTION, f"{where}loss={value!r} is more than 100%")
        return number / 100
    if unit not in RATE_UNITS:
        raise ConfigError(OPTION, f"{where}rate={value!r} needs a unit ({', '.join(RATE_UNITS)}; kbit = 1000 bit/s)")
    bits = number * RATE_UNITS[unit]
    if not MIN_RATE <= bits <= MAX_RATE:
        raise ConfigError(OPTION, f"{where}rate={value!r} is not in 1kbit..100gbit")
    return bits
