"""`mgst lab up / status / down` on every host of a hosts file: in parallel (bounded), each host bounded in
time, one host's failure reported for it alone."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from mgst.lab import remote
from mgst.lab.hosts import Host, HostsFileError, Lab, secret_key
from mgst.lab.remote import PullerState, Readout
from mgst.lab.ssh import Reply, SshError, last_line, run_script
from mgst.wire import security

log = logging.getLogger(__name__)

# Hosts worked on at once: enough for a lab room, few enough for the head node's ssh processes and sshd's
# MaxStartups (10 unauthenticated connections by default, per host: each host sees one of ours at a time).
DEFAULT_PARALLEL = 16
# Seconds a host's command may take beyond its connection time-out: `mgst --version` starts Python and imports
# mgst (about 1 s here, several on a loaded machine), up waits for pid files and SETTLE_SECONDS.
COMMAND_TIMEOUT = 30.0
DEFAULT_GRACE = 10.0  # seconds between SIGTERM and SIGKILL: a puller kills its replicas and says Bye in well under 1 s


@dataclass(slots=True)
class HostReport:
    """What happened on one host: an error (one line), or its version and pullers."""

    host: Host
    error: str | None = None
    version: str | None = None
    folder: str | None = None
    pullers: list[PullerState] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.error is None


def run_on_hosts(lab: Lab, action: Callable[[Host], Awaitable[HostReport]],
                 parallel: int = DEFAULT_PARALLEL) -> list[HostReport]:
    """``action`` on every host, at most ``parallel`` at once; the reports in the file's order."""
    async def all_hosts() -> list[HostReport]:
        gate = asyncio.Semaphore(parallel)

        async def one(host: Host) -> HostReport:
            async with gate:
                try:
                    return await action(host)
                except SshError as e:
                    return HostReport(host, error=str(e))
                except OSError as e:  # ssh could not be started
                    return HostReport(host, error=f"cannot run ssh: {e}")

        return list(await asyncio.gather(*(one(h) for h in lab.hosts)))

    return asyncio.run(all_hosts())


def _timeout(host: Host, extra: float = 0.0) -> float:
    return host.connect_timeout + COMMAND_TIMEOUT + extra


async def remote_version(host: Host) -> str:
    """The host's `mgst --version` line, checked (SshError if it is not one)."""
    reply = await run_script(host, remote.version_script(host), _timeout(host))
    line = remote.read_reply(host, reply.stdout).version
    if line is None:  # the script did not run: a login shell that refuses commands, no `sh`
        raise SshError(f"the host ran no script (exit {reply.returncode}): {last_line(reply.stderr) or 'no reply'}")
    remote.version_number(line)
    return line


def up(lab: Lab, local_version: str, *, ignore_version: bool = False,
       settle: float = remote.SETTLE_SECONDS) -> Callable[[Host], Awaitable[HostReport]]:
    """The action launching a host's pullers, once its mgst version is the same as ``local_version``'s (the
    number; the build, compiled or pure Python, may differ)."""
    local = remote.version_number(local_version)
    contents = _local_files(lab)

    async def action(host: Host) -> HostReport:
        report = HostReport(host)
        report.version = await remote_version(host)
        theirs = remote.version_number(report.version)
        if theirs != local:
            if not ignore_version:
                report.error = (f"mgst {theirs} there, {local} here: install the same version, or give "
                                "--ignore-version")
                return report
            report.notes.append(f"version {theirs} differs from {local} here (--ignore-version)")
            log.warning("%s: mgst %s there, %s here: launching anyway (--ignore-version)", host.label, theirs, local)
        files = {f"{security.MAPPER}.key": contents[lab.keys / f"{security.MAPPER}.key"]}
        for m in host.machines:
            key = secret_key(lab, m)
            files[f"{security.PULLERS}/{key.name}"] = contents[key]
        allow = contents[host.allow_file] if host.allow_file is not None else None
        script = remote.up_script(host, lab.connect, files, allow, settle)
        return _read(report, await run_script(host, script, _timeout(host, settle + 5)), "up")

    return action


def _local_files(lab: Lab) -> dict[Path, bytes]:
    """Every local file a host gets, read before any host is touched; HostsFileError (naming the key) for one
    that cannot be read or is not text (the files travel as shell strings)."""
    contents: dict[Path, bytes] = {}
    for host in lab.hosts:
        wanted = [(lab.keys / f"{security.MAPPER}.key", "lab.keys")]
        wanted += [(secret_key(lab, m), "lab.keys") for m in host.machines]
        if host.allow_file is not None:
            wanted.append((host.allow_file, f"hosts.{host.label}.allow_file"))
        for path, key in wanted:
            if path in contents:
                continue
            try:
                data = path.read_bytes()
            except OSError as e:
                raise HostsFileError(key, f"cannot read {path}: {e.strerror}", str(lab.path)) from None
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                text = "\0"
            if "\0" in text:
                raise HostsFileError(key, f"{path} is not a text file", str(lab.path))
            contents[path] = data
    return contents


def status(log_lines: int = remote.LOG_LINES) -> Callable[[Host], Awaitable[HostReport]]:
    async def action(host: Host) -> HostReport:
        reply = await run_script(host, remote.status_script(host, log_lines), _timeout(host))
        report = _read(HostReport(host), reply, "status")
        report.version = _checked_version(report)
        return report

    return action


def down(grace: float = DEFAULT_GRACE) -> Callable[[Host], Awaitable[HostReport]]:
    async def action(host: Host) -> HostReport:
        reply = await run_script(host, remote.down_script(host, grace), _timeout(host, grace * len(host.machines)))
        return _read(HostReport(host), reply, "down")

    return action


def _read(report: HostReport, reply: Reply, what: str) -> HostReport:
    out: Readout = remote.read_reply(report.host, reply.stdout)
    report.folder = out.folder
    report.pullers = list(out.pullers.values())
    if out.version is not None:
        report.version = out.version
    if out.failure is not None:
        report.error = out.failure
    elif reply.returncode != 0:
        report.error = f"the {what} script failed (exit {reply.returncode}): {last_line(reply.stderr)}"
    elif out.no_folder:
        report.notes.append(f"no folder {report.host.remote_dir} there: nothing was launched")
        for p in report.pullers:
            p.state = "nopid"
    elif what == "up":
        busy = [p for p in report.pullers if p.state == "running"]
        died = [p for p in report.pullers if p.state == "died"]
        if busy:
            report.error = ("already running: " + ", ".join(f"{p.machine} (pid {p.pid})" for p in busy)
                            + "; stop them first with 'mgst lab down'")
        elif died:
            started = [p for p in report.pullers if p.state == "started"]
            report.error = ("exited at once: " + ", ".join(p.machine for p in died) + " (its log below)"
                            + "".join(f"; {p.machine} started (pid {p.pid})" for p in started))
        elif any(p.state != "started" for p in report.pullers):
            report.error = "the host did not say whether every puller started"
    elif any(p.state == "unknown" for p in report.pullers):
        report.error = f"the host did not report every puller ({what})"
    return report


def _checked_version(report: HostReport) -> str | None:
    """The version line of a status report, or None (and a note saying what the host said) if it is not one."""
    try:
        remote.version_number(report.version)
    except SshError as e:
        report.notes.append(str(e))
        return None
    return report.version
