"""A shell script run on a lab host through the system's OpenSSH client: bounded in time and in output."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
from dataclasses import dataclass

from mgst.lab.hosts import Host
from mgst.wording import printable

log = logging.getLogger(__name__)

# What a host may send back: our scripts print a few lines per puller (and up to 50 log lines); beyond this a
# host is misbehaving, and its reply is refused rather than held in memory.
MAX_OUTPUT = 256 * 1024
# Keep-alives: a host that stops answering mid-command is declared dead after 3 x 5 s, not left to hang.
SERVER_ALIVE_INTERVAL, SERVER_ALIVE_COUNT = 5, 3
# How long ssh may take to exit once killed after a time-out.
REAP_TIMEOUT = 5.0


class SshError(Exception):
    """The host could not be reached, or did not answer as it should; the message says why, in one line."""


@dataclass(frozen=True, slots=True)
class Reply:
    """What the remote script printed (bounded), and ssh's exit status."""

    returncode: int
    stdout: str
    stderr: str


def ssh_argv(host: Host) -> list[str]:
    """The ssh command running ``sh -s`` (the script comes on stdin) on ``host``: never a prompt (BatchMode),
    never a password, the host key checked as the hosts file says."""
    exe = shutil.which("ssh")
    if exe is None:
        raise SshError("no ssh client: install OpenSSH's (Debian: apt-get install openssh-client)")
    argv = [exe, "-T", "-o", "BatchMode=yes", "-o", f"StrictHostKeyChecking={host.host_key_checking}",
            "-o", f"ConnectTimeout={max(1, round(host.connect_timeout))}",
            "-o", f"ServerAliveInterval={SERVER_ALIVE_INTERVAL}", "-o", f"ServerAliveCountMax={SERVER_ALIVE_COUNT}",
            "-o", "LogLevel=ERROR", "-p", str(host.port)]
    if host.ssh_config is not None:
        argv += ["-F", str(host.ssh_config)]
    if host.known_hosts is not None:
        argv += ["-o", f"UserKnownHostsFile={ssh_file_list_word(str(host.known_hosts))}"]
    if host.identity_file is not None:
        argv += ["-i", str(host.identity_file), "-o", "IdentitiesOnly=yes"]
    if host.user is not None:
        argv += ["-l", host.user]
    return [*argv, "--", host.address, "sh -s"]


def ssh_file_list_word(path: str) -> str:
    """``path`` as the one file of an ssh option that takes a list of them (UserKnownHostsFile): ssh splits its
    value at spaces unless in double quotes (where it reads ``\\`` and ``\"`` as escapes), and expands ``%``
    tokens (``%%`` is one ``%``). The hosts file refuses a path holding ``${``, which ssh expands too."""
    escaped = path.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'"{escaped}"'


async def run_script(host: Host, script: str, timeout: float) -> Reply:
    """Run ``script`` on ``host``; SshError if ssh cannot connect (exit 255), the time-out passes, or the
    reply is larger than MAX_OUTPUT."""
    argv = ssh_argv(host)
    log.debug("%s: %s", host.label, " ".join(argv))
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                start_new_session=True)
    try:
        out, err, code = await asyncio.wait_for(_exchange(proc, script.encode()), timeout)
    except TimeoutError:
        raise SshError(f"no answer within {timeout:g} s") from None
    finally:
        await _end(proc)
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    if code == 255:  # ssh's own failure: cannot connect, host key, authentication
        raise SshError(ssh_failure(last_line(stderr)))
    return Reply(code, stdout, stderr)


async def _end(proc: asyncio.subprocess.Process) -> None:
    """ssh, and whatever it started, ended (killed if still running: it leads a session of its own, so its process
    group is killed) and reaped, and its pipes read to their end, each within REAP_TIMEOUT: asyncio then closes the
    process's transport while the loop runs. Left open after a time-out (a child of ssh holding its pipes), the
    collector closed it once the loop had, and Python printed "Exception ignored ... Event loop is closed"."""
    if proc.returncode is None:  # (not reaped: its process group is still there to be killed)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), REAP_TIMEOUT)
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.close()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(_drain(proc.stdout), _drain(proc.stderr)), REAP_TIMEOUT)


async def _drain(stream: asyncio.StreamReader) -> None:
    """Read ``stream`` to its end, keeping nothing."""
    while await stream.read(65536):
        pass


async def _exchange(proc: asyncio.subprocess.Process, script: bytes) -> tuple[bytes, bytes, int]:
    """The script fed to ssh's stdin, its stdout and stderr read (bounded), and its exit status."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None

    async def feed() -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(script)
            await proc.stdin.drain()
            proc.stdin.close()

    _, out, err = await asyncio.gather(feed(), _read_bounded(proc, proc.stdout), _read_bounded(proc, proc.stderr))
    if out is None or err is None:
        raise SshError(f"the host sent more than {MAX_OUTPUT // 1024} KiB: refused")
    return out, err, await proc.wait()


async def _read_bounded(proc: asyncio.subprocess.Process, stream: asyncio.StreamReader) -> bytes | None:
    """All of ``stream``, or None (and ssh killed, which ends the other stream too) past MAX_OUTPUT."""
    data = bytearray()
    while chunk := await stream.read(65536):
        data += chunk
        if len(data) > MAX_OUTPUT:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            return None
    return bytes(data)


def ssh_failure(said: str) -> str:
    """ssh's last line of stderr as one error, said to come from ssh once: most of its own lines already begin
    with "ssh: " ("ssh: connect to host h port 22: Connection refused"), others do not ("Host key verification
    failed.")."""
    if not said:
        return "ssh: failed (exit 255)"
    return said if said.startswith("ssh: ") else f"ssh: {said}"


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return printable(lines[-1]) if lines else ""
