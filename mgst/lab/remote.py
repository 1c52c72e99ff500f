"""The POSIX shell scripts `mgst lab` runs on a host, and the checked reading of what they print back.

Every line a script means for us starts with MARK; other lines (a chatty shell profile) are ignored. A marked
line is believed only once checked: a known kind, one of the host's machine names, a pid in range, printable
text of bounded length. Pids are checked on the host too before `kill` sees them (digits only), and a pid is
taken for a puller only if /proc/PID/cmdline shows that machine's name and this host's key folder (a pid
reused by another process is never signalled). The hosts run Linux (/proc, setsid)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from mgst.lab.hosts import Host
from mgst.lab.ssh import SshError
from mgst.wire import security
from mgst.wording import printable

MARK = "@mgst-lab"
# Linux's largest pid_max (2^22): a pid read back beyond it is not a pid.
MAX_PID = 4_194_304
# How long a started puller must stay alive for `lab up` to say "started" (`--settle`): a puller that cannot read
# its keys or its allow-list exits with one line within its start-up (about 0.4 s on an idle machine), so a
# second or two tells them apart; `mgst lab status` is the check of a puller that fails later.
SETTLE_SECONDS = 2.0
MAX_SETTLE_SECONDS = 60.0
# Waiting for a started puller's pid file (written by its shell before it becomes the puller): 5 s in 0.1 s steps.
PID_FILE_POLLS = 50
# Log lines shown per puller (status, and a puller that died at start), and the bytes of the log read for them.
LOG_LINES, MAX_LOG_LINES, LOG_TAIL_BYTES = 5, 50, 8192
# The `mgst --version` line: "mgst 0.1.0 (pure Python: MGST_PURE=1)"; the number is compared, not the build.
_VERSION = re.compile(r"^mgst (\S{1,40}|\(not installed\)) \(([ -~]{1,100})\)$")
_STATES = ("running", "started", "stopped", "killed", "exited")  # "M PID"
_NAMED = ("died", "nopid")  # "M"

_PRELUDE = r"""set -u
MARK='@mgst-lab'
pid_of() {  # the pid in M's pid file (a plain file, not a symlink), digits only, or fail
    [ -f "$D/$1.pid" ] && [ ! -L "$D/$1.pid" ] || return 1
    p=$(head -c 16 "$D/$1.pid")
    case $p in ''|*[!0-9]*) return 1 ;; esac
    echo "$p"
}
ours() {  # is process $1 the puller of machine $2 with this folder's keys?
    [ -r "/proc/$1/cmdline" ] || return 1
    tr '\0' '\n' < "/proc/$1/cmdline" | M="$2" K="$D/keys" awk \
        'p == "--machine" && $0 == ENVIRON["M"] {a = 1} p == "--keys" && $0 == ENVIRON["K"] {b = 1} {p = $0}
         END {exit !(a && b)}'
}
alive() {  # is process $1 there and not a zombie? (builtins only: it is polled)
    [ -r "/proc/$1/stat" ] && read -r s < "/proc/$1/stat" || return 1
    s=${s##*) }
    [ "${s%% *}" != Z ]
}
tail_log() {  # the last lines of M's log (a plain file, not a symlink), marked
    [ -f "$D/$1.log" ] && [ ! -L "$D/$1.log" ] &&
        tail -c LOG_TAIL_BYTES "$D/$1.log" | tail -n "$2" | sed "s/^/$MARK line $1 /"
    return 0
}
""".replace("LOG_TAIL_BYTES", str(LOG_TAIL_BYTES))

# `up` writes only into folders of the login's own: remote_dir, keys/, keys/pullers/ must each be a folder (not a
# symlink) owned by the login (`-O`, not "chmod 700 worked": root's chmod always works), and every folder above
# remote_dir root's or the login's and writable by others only if sticky (as /tmp): else another user could swap
# the folder once checked. A file is written fresh (put): whatever entry has its name is removed first (rm on a
# symlink removes the link), then it is created under noclobber (O_EXCL) and umask 077, mode 600. A log is
# appended to only if it is a plain file of the login's own with no other name (a hard link); else it is removed.
_FOLDERS = r"""refuse() {  # says why the host is refused; ends the script (nothing more is written)
    printf '%s fail %s\n' "$MARK" "$*"  # (printf: dash's echo would read a backslash in a path)
    exit 0
}
field() {  # field $2 of `ls -ldn $1`: 1 the mode, 2 the number of links, 3 the owner's uid
    ls -ldn -- "$1" 2>/dev/null | awk -v f="$2" '{print $f}'
}
guarded_above() {  # every folder above $1: root's or the login's; writable by others only if sticky
    a=$1
    while [ "$a" != / ]; do
        a=$(dirname -- "$a")
        mode=$(field "$a" 1); uid=$(field "$a" 3)
        case $uid in 0|"$(id -u)") ;; *)
            refuse "$a, a folder above $1, is another user's (uid $uid), who could swap it: refused, no key written" ;;
        esac
        case $mode in ?????w*|????????w*) case $mode in ?????????[tT]*) ;; *)
            refuse "$a, a folder above $1, may be changed by other users (mode $mode): refused, no key written" ;;
        esac ;; esac
    done
}
own_folder() {  # $1, made if missing, is a folder of the login's own (not a symlink); then made mode 700
    [ ! -L "$1" ] || refuse "$1 is a symlink, not a folder: refused, no key written"
    [ -e "$1" ] || mkdir -- "$1" 2>/dev/null || refuse "cannot make the folder $1"
    [ -d "$1" ] || refuse "$1 is not a folder: refused, no key written"
    [ -O "$1" ] ||
        refuse "$1 is another user's folder (owner uid $(field "$1" 3)), not the login's: refused, no key written"
    chmod 700 -- "$1" || refuse "cannot make $1 private (mode 700): is it another user's?"
}
put() {  # writes $2 into a new file $1 (whatever had that name is removed first, never followed)
    rm -f -- "$1" 2>/dev/null && printf %s "$2" > "$1" || refuse "cannot write $1"
}
own_log() {  # $1, a log appended to, is kept only if a plain file of the login's own with one name
    if [ -L "$1" ] || { [ -e "$1" ] && ! { [ -f "$1" ] && [ -O "$1" ] && [ "$(field "$1" 2)" = 1 ]; }; }; then
        rm -f -- "$1" 2>/dev/null || refuse "cannot remove $1 (not a plain file of the login's)"
    fi
    [ ! -e "$1" ] || chmod 600 -- "$1" || refuse "cannot make $1 private (mode 600)"
}
"""


def _q(word: str) -> str:
    return shlex.quote(word)


def _machines(host: Host) -> str:
    return " ".join(_q(m) for m in host.machines)


def version_script(host: Host) -> str:
    """Prints the host's `mgst --version` (its first line on stdout, bounded; stderr may hold a warning, e.g. a
    stale compiled build); if it printed nothing there, the last line of its stderr (why it could not run)."""
    command = " ".join(_q(w) for w in host.mgst)
    return (f"v=$(env {command} --version 2>/dev/null | head -n 1 | head -c 300)\n"
            f'[ -n "$v" ] || v=$(env {command} --version 2>&1 | tail -n 1 | head -c 300)\n'
            f'echo "{MARK} version $v"\n')


def up_script(host: Host, connect: str, files: dict[str, bytes], allow: bytes | None,
              settle: float = SETTLE_SECONDS) -> str:
    """Refuses if a puller of the host runs, or if a folder it would write into is not the login's own (see
    :data:`_FOLDERS`); else writes the key files and the allow-list fresh (mode 600, never through an entry
    already there: it is removed first), and starts one detached puller per machine (its own session, HUP
    ignored, stdin /dev/null, log appended to DIR/M.log, pid in DIR/M.pid written by the process itself); then,
    once ``settle`` seconds passed (or every puller died), says which are alive. ``files`` maps paths under
    DIR/keys/ to their contents."""
    lines = [_PRELUDE, _FOLDERS, "umask 077", "unset CDPATH", f"D={_q(host.remote_dir)}",
             'mkdir -p -- "$D" 2>/dev/null || refuse "cannot make the folder $D"',
             '[ ! -L "$D" ] || refuse "$D is a symlink, not a folder: refused, no key written"',
             'D=$(cd -P -- "$D" && pwd -P) || refuse "cannot enter the folder $D"',
             'guarded_above "$D"', 'own_folder "$D"', 'own_folder "$D/keys"',
             f'own_folder "$D/keys/{security.PULLERS}"',
             "busy=0",
             f"for m in {_machines(host)}; do",
             f'    if p=$(pid_of "$m") && ours "$p" "$m"; then echo "{MARK} running $m $p"; busy=1; fi',
             "done",
             '[ "$busy" = 0 ] || exit 0',
             "set -C"]  # noclobber: `>` creates a file (O_EXCL), it never opens one that is there
    for rel, content in files.items():  # printf is a shell builtin: the secret is on no command line
        lines += [f'put "$D/keys/{rel}" {_q(content.decode("utf-8"))}']
    allow_option = ""
    if allow is not None:
        lines += [f'put "$D/allow.toml" {_q(allow.decode("utf-8"))}']
        allow_option = ' --allow-file "$D/allow.toml"'
    command = " ".join(_q(w) for w in host.mgst)
    extra = "".join(" " + _q(a) for a in host.puller_args)
    lines += [f"for m in {_machines(host)}; do",  # (every check before the first puller starts)
              '    rm -f -- "$D/$m.pid" 2>/dev/null || refuse "cannot remove $D/$m.pid"',
              '    own_log "$D/$m.log"',
              "done",
              f"printf '%s dir %s\\n' {MARK} \"$D\"",
              f"for m in {_machines(host)}; do",
              '    echo "---- mgst lab up $(date -u +%Y-%m-%dT%H:%M:%SZ) ----" >> "$D/$m.log"',
              "    ( trap '' HUP; exec setsid sh -C -c 'echo $$ > \"$0\" || exit 1; exec env \"$@\"' \"$D/$m.pid\" "
              f'{command} puller --connect {_q(connect)} --machine "$m" --keys "$D/keys"{allow_option}{extra} '
              ') >> "$D/$m.log" 2>&1 < /dev/null &',
              "done",
              f"for m in {_machines(host)}; do",
              f'    i=0; while [ ! -s "$D/$m.pid" ] && [ "$i" -lt {PID_FILE_POLLS} ]; do sleep 0.1; i=$((i + 1)); done',
              "done",
              # until every puller died or `settle` passed: a puller that fails at start is told at once
              f"i=0; while [ \"$i\" -lt {max(1, round(settle * 10))} ]; do",
              "    n=0",
              f"    for m in {_machines(host)}; do",
              '        if p=$(pid_of "$m") && alive "$p"; then n=1; fi',
              "    done",
              '    [ "$n" = 1 ] || break',
              "    sleep 0.1; i=$((i + 1))",
              "done",
              f"for m in {_machines(host)}; do",
              f'    if p=$(pid_of "$m") && ours "$p" "$m"; then echo "{MARK} started $m $p"',
              f'    else echo "{MARK} died $m"; tail_log "$m" {LOG_LINES}; fi',
              "done"]
    return "\n".join(lines) + "\n"


def status_script(host: Host, log_lines: int) -> str:
    """Prints the host's mgst version and, per machine, its puller's state, its log's path and last lines."""
    return "\n".join([
        _PRELUDE, version_script(host), f"D={_q(host.remote_dir)}",
        f'D=$(cd -- "$D" 2>/dev/null && pwd -P) || {{ echo "{MARK} nodir"; exit 0; }}',
        f"for m in {_machines(host)}; do",
        f'    if p=$(pid_of "$m"); then if ours "$p" "$m"; then echo "{MARK} running $m $p"; '
        f'else echo "{MARK} exited $m $p"; fi; else echo "{MARK} nopid $m"; fi',
        f"    printf '%s log %s %s\\n' {MARK} \"$m\" \"$D/$m.log\"",
        f'    tail_log "$m" {min(log_lines, MAX_LOG_LINES)}',
        "done"]) + "\n"


def down_script(host: Host, grace: float) -> str:
    """Stops each machine's puller: SIGTERM, then after ``grace`` seconds SIGKILL to its process group (its
    own session); says which it stopped, killed, found exited, or never found; removes the pid files."""
    polls = max(1, round(grace * 10))
    return "\n".join([
        _PRELUDE, f"D={_q(host.remote_dir)}",
        f'D=$(cd -- "$D" 2>/dev/null && pwd -P) || {{ echo "{MARK} nodir"; exit 0; }}',
        f"for m in {_machines(host)}; do",
        '    if p=$(pid_of "$m") && ours "$p" "$m"; then',
        '        kill -TERM "$p" 2>/dev/null',
        f'        i=0; while ours "$p" "$m" && [ "$i" -lt {polls} ]; do sleep 0.1; i=$((i + 1)); done',
        '        if ours "$p" "$m"; then kill -KILL -"$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null;',
        f'            echo "{MARK} killed $m $p"; else echo "{MARK} stopped $m $p"; fi',
        f'    elif p=$(pid_of "$m"); then echo "{MARK} exited $m $p"',
        f'    else echo "{MARK} nopid $m"; fi',
        '    rm -f -- "$D/$m.pid"',
        "done"]) + "\n"


@dataclass(slots=True)
class PullerState:
    """One machine's puller as its host reported it."""

    machine: str
    state: str = "unknown"  # one of _STATES or _NAMED
    pid: int | None = None
    log: str | None = None
    lines: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Readout:
    """A script's marked lines, checked."""

    version: str | None = None
    folder: str | None = None
    failure: str | None = None
    no_folder: bool = False
    pullers: dict[str, PullerState] = field(default_factory=dict)


def read_reply(host: Host, stdout: str) -> Readout:
    """The marked lines of ``stdout``, each checked; SshError naming the first that is not as it should be."""
    out = Readout(pullers={m: PullerState(m) for m in host.machines})
    for raw in stdout.splitlines():
        if not raw.startswith(MARK + " "):
            continue
        kind, _, rest = raw[len(MARK) + 1:].partition(" ")
        if kind == "version":
            out.version = rest
        elif kind in ("dir", "fail"):
            text = _text(rest, raw)
            if kind == "dir":
                out.folder = text
            else:
                out.failure = text
        elif kind == "nodir":
            out.no_folder = True
        elif kind in _STATES or kind in _NAMED or kind in ("log", "line"):
            machine, _, value = rest.partition(" ")
            p = out.pullers.get(machine)
            if p is None:
                raise SshError(f"unexpected reply: {printable(raw, 100)!r} (not a machine of this host)")
            if kind in _STATES:
                p.state, p.pid = kind, _pid(value, raw)
            elif kind in _NAMED:
                if value:
                    raise SshError(f"unexpected reply: {printable(raw, 100)!r}")
                p.state = kind
            elif kind == "log":
                p.log = _text(value, raw)
            elif len(p.lines) < MAX_LOG_LINES:
                p.lines.append(printable(value))
        else:
            raise SshError(f"unexpected reply: {printable(raw, 100)!r}")
    return out


def version_number(line: str | None) -> str:
    """The version number of a `mgst --version` line; SshError (with the line, made printable) if it is not one."""
    m = _VERSION.match(line or "")
    if m is None:
        said = f"said: {printable(line, 200)}" if line else "said nothing"
        raise SshError(f"cannot run mgst there: 'mgst --version' {said}")
    return m.group(1)


def _pid(text: str, raw: str) -> int:
    if not (text.isdigit() and text.isascii() and len(text) <= 7 and 1 < int(text) <= MAX_PID):
        raise SshError(f"unexpected reply: {printable(raw, 100)!r} (not a pid)")
    return int(text)


def _text(text: str, raw: str) -> str:
    if not text or len(text) > 4096 or not text.isprintable():
        raise SshError(f"unexpected reply: {printable(raw, 100)!r}")
    return text
