"""The command executor's allow-list: which programs a puller may run, and the exact environment they get."""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mgst.toml_file import TomlFileError, read_toml

log = logging.getLogger(__name__)

# What a command inherits from the puller's own environment (when set there); nothing else.
PASSED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR")

_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# How much of a refused command a report quotes.
_QUOTE = 120


class AllowListError(ValueError):
    """An allow-list entry or file that cannot be used; the message names the file (or --allow) and the key."""


class CommandRefused(Exception):
    """A job's command is not on the allow-list; the message is a short description of what was asked."""


def _quote(argv: Sequence[str]) -> str:
    text = shlex.join(argv)
    return text if len(text) <= _QUOTE else text[: _QUOTE - 3] + "..."


def _check_argv(argv: Any, where: str) -> tuple[str, ...]:
    if isinstance(argv, str):
        try:
            argv = shlex.split(argv)
        except ValueError as e:
            raise AllowListError(f"{where}: cannot split the command line ({e})") from None
    if not isinstance(argv, list | tuple) or not all(isinstance(a, str) for a in argv):
        raise AllowListError(f"{where}: a command is a list of strings or one command line string")
    if not argv or not argv[0]:
        raise AllowListError(f"{where}: empty command")
    if any("\0" in a for a in argv):
        raise AllowListError(f"{where}: NUL character in the command")
    return tuple(argv)


def _check_key(key: Any, where: str) -> str:
    if not isinstance(key, str) or not _KEY.match(key):
        raise AllowListError(
            f"{where}: {key!r} is not a usable key (letters, digits, '_', '.', '-'; at most 64; not empty)")
    return key


def parse_entry(text: str) -> tuple[str | None, tuple[str, ...]]:
    """One ``--allow`` value: ``KEY=program arg ...`` or ``program arg ...`` (shell-split), as (key or None, argv)."""
    where = f"--allow {text!r}"
    try:
        words = shlex.split(text)
    except ValueError as e:
        raise AllowListError(f"{where}: cannot split the command line ({e})") from None
    key = None
    if words and "=" in words[0]:
        head, rest = words[0].split("=", 1)
        if _KEY.match(head):
            key = head
            words = ([rest] if rest else []) + words[1:]
    return key, _check_argv(words, where)


def load_file(path: Path) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """The ``[commands]`` and ``[environment]`` of an allow-list file (TOML, read within mgst.toml_file's bounds)."""
    try:
        data = read_toml(path)
    except TomlFileError as e:
        raise AllowListError(f"{path}: the allow-list file: {e}") from None
    unknown = sorted(set(data) - {"commands", "environment"})
    if unknown:
        raise AllowListError(f"{path}: unknown key or table {', '.join(map(repr, unknown))} "
                             "(an allow-list file has [commands] and [environment])")
    commands = data.get("commands", {})
    environment = data.get("environment", {})
    if not isinstance(commands, dict):
        raise AllowListError(f"{path}: 'commands' must be a table: [commands]")
    if not isinstance(environment, dict):
        raise AllowListError(f"{path}: 'environment' must be a table: [environment]")
    out: dict[str, tuple[str, ...]] = {}
    for key, argv in commands.items():
        where = f"{path}: [commands] {key}"
        out[_check_key(key, where)] = _check_argv(argv, where)
    env: dict[str, str] = {}
    for name, value in environment.items():
        where = f"{path}: [environment] {name}"
        if not _ENV_NAME.match(name):
            raise AllowListError(f"{where}: not a usable variable name (letters, digits, '_'; not a digit first)")
        if not isinstance(value, str) or "\0" in value:
            raise AllowListError(f"{where}: the value must be a string (quote it: {name} = \"...\")")
        env[name] = value
    return out, env


@dataclass(frozen=True)
class AllowList:
    """The commands a puller may run: by key, or by exact argv; and the variables every command gets."""

    commands: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # key -> argv
    unkeyed: frozenset[tuple[str, ...]] = frozenset()  # argvs allowed by exact match only
    environment: Mapping[str, str] = field(default_factory=dict)  # the file's [environment]

    @classmethod
    def build(cls, entries: Sequence[str] = (), file: Path | None = None) -> AllowList | None:
        """From ``--allow`` values and an ``--allow-file``; None if both are empty (command executor off)."""
        commands: dict[str, tuple[str, ...]] = {}
        env: dict[str, str] = {}
        if file is not None:
            commands, env = load_file(file)
            if not commands:
                raise AllowListError(f"{file}: no [commands]: the file would allow nothing")
        from_file = set(commands)
        unkeyed: set[tuple[str, ...]] = set()
        for text in entries:
            key, argv = parse_entry(text)
            if key is None:
                unkeyed.add(argv)
            elif key in commands:
                origin = f"also in {file}" if key in from_file else "given twice"
                raise AllowListError(f"--allow {text!r}: key {key!r} is {origin}")
            else:
                commands[key] = argv
        if not commands and not unkeyed:
            return None
        allow = cls(commands, frozenset(unkeyed), env)
        allow.check_programs()
        return allow

    @property
    def argvs(self) -> frozenset[tuple[str, ...]]:
        """Every allowed argv (keyed or not): what a job's ``command`` must equal exactly."""
        return self.unkeyed | frozenset(self.commands.values())

    def resolve(self, key: str, argv: Sequence[str]) -> tuple[str, ...]:
        """The argv to run for a job that names ``key`` and/or ``argv``; CommandRefused if not allowed."""
        argv = tuple(argv)
        if key:
            allowed = self.commands.get(key)
            if allowed is None:
                raise CommandRefused(f"key {key[:64]!r} is not on the allow-list")
            if argv and argv != allowed:
                raise CommandRefused(f"key {key[:64]!r} is not the command {_quote(argv)}")
            return allowed
        if not argv:
            raise CommandRefused("the job names no command (neither a key nor an argv)")
        if argv not in self.argvs:
            raise CommandRefused(_quote(argv))
        return argv

    def env(self, job: Mapping[str, str], base: Mapping[str, str] | None = None) -> dict[str, str]:
        """A command's complete environment: PASSED_ENV from ``base`` (the puller's), the file's, the job's."""
        base = os.environ if base is None else base
        env = {name: base[name] for name in PASSED_ENV if name in base}
        env.update(self.environment)
        env.update(job)
        return env

    def check_programs(self) -> None:
        """Warn about programs not found (they would fail to start: Failed 'start', not refused)."""
        path = self.env({}).get("PATH", os.defpath)
        for argv in sorted(self.argvs):
            if shutil.which(argv[0], path=path) is None:
                log.warning("allow-list: program %r not found or not executable (PATH=%s)", argv[0], path)

    def describe(self) -> str:
        keys = ", ".join(sorted(self.commands)) or "none"
        return f"{len(self.commands)} keyed commands ({keys}), {len(self.unkeyed)} by exact argv"
