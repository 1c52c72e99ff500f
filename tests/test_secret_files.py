"""Every secret file mgst writes on this machine is a new file, mode 0600 from its creation, never one already there:
the key folders of `mgst keys` and of a run, and the live view's token; and the throw-away keys of a killed run
are removed by the next run."""

from __future__ import annotations

import os
import pwd
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from mgst.cli import main
from mgst.testbed.live.view import TOKEN_FILE, resolve_token
from mgst.testbed.run_keys import PREFIX, remove_stale
from mgst.wire import security

ROOT = Path(__file__).resolve().parents[1]


def _nobody(*paths: Path) -> int:
    """Give ``paths`` (a symlink itself, never its target) to user nobody, as if nobody had made them (root only)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (to give a file to user nobody)")
    who = pwd.getpwnam("nobody")
    for p in paths:
        os.lchown(p, who.pw_uid, who.pw_gid)
    return who.pw_uid


def _private_and_mine(path: Path) -> None:
    st = path.lstat()
    assert stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid(), path
    assert stat.S_IMODE(st.st_mode) == 0o600, (path, oct(st.st_mode))


def test_a_live_token_already_there_is_replaced_by_a_new_private_file(tmp_path):
    """OUT/live.token of user nobody's, mode 666: the view's token goes into a new file of ours, 0600 (it kept
    nobody's owner and mode, so nobody read the token)."""
    out = tmp_path / "out"
    out.mkdir()
    planted = out / TOKEN_FILE
    planted.write_text("")
    planted.chmod(0o666)
    _nobody(planted)
    token, path = resolve_token("0.0.0.0", None, None, out)  # noqa: S104
    assert path == planted and token is not None
    _private_and_mine(planted)
    assert planted.read_text() == token + "\n"


def test_a_live_token_never_goes_through_a_symlink(tmp_path):
    """OUT/live.token a symlink to another file: the link is replaced, the file it named keeps its bytes."""
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (out / TOKEN_FILE).symlink_to(victim)
    token, path = resolve_token("0.0.0.0", None, None, out)  # noqa: S104
    assert victim.read_text() == "precious\n"
    _private_and_mine(out / TOKEN_FILE)
    assert (out / TOKEN_FILE).read_text() == f"{token}\n"


def test_keys_are_written_fresh_never_through_a_planted_symlink(tmp_path):
    """A key folder with symlinks where `mgst keys --force` writes (authorized/M1.key, pullers/M1.key_secret,
    mapper.key): each is replaced by a new file, the files they named keep their bytes."""
    keys = tmp_path / "keys"
    security.create_keys(keys, ["M1"])
    victims = {}
    for rel in ("authorized/M1.key", "pullers/M1.key_secret", "mapper.key", "mapper.key_secret"):
        victim = tmp_path / ("victim-" + rel.replace("/", "-"))
        victim.write_text(f"root's {rel}\n")
        (keys / rel).unlink()
        (keys / rel).symlink_to(victim)
        victims[rel] = victim
    security.create_keys(keys, ["M1"], overwrite=True)
    for rel, victim in victims.items():
        assert victim.read_text() == f"root's {rel}\n", rel
        assert not (keys / rel).is_symlink() and (keys / rel).is_file(), rel
    for rel in ("pullers/M1.key_secret", "mapper.key_secret"):
        _private_and_mine(keys / rel)
    security.server_keys(keys)  # what it wrote is a key folder the mapper reads
    security.client_keys(keys / "pullers" / "M1.key_secret", keys / "mapper.key")


def test_a_secret_key_is_private_from_its_creation_not_after_a_chmod(tmp_path, monkeypatch):
    """The secret file is created mode 0600 (O_CREAT's mode), not made at the umask's 0644 and chmodded after:
    with chmod doing nothing, it is still 0600."""
    monkeypatch.setattr(os, "chmod", lambda *args, **kwargs: None)
    old = os.umask(0o022)
    try:
        security.create_keys(tmp_path / "keys", ["M1"])
    finally:
        os.umask(old)
    for secret in (tmp_path / "keys" / "mapper.key_secret", tmp_path / "keys" / "pullers" / "M1.key_secret"):
        _private_and_mine(secret)


@pytest.mark.parametrize("case", ["nobody-folder", "nobody-key", "readable-key", "symlink-key", "pullers-symlink"])
def test_a_key_folder_or_a_kept_key_not_of_your_own_is_refused(case, tmp_path, capsys):
    """`mgst keys` refuses, in one line naming the path (exit 2): a key folder of user nobody's; a mapper secret
    key kept from before that is nobody's, readable by others, or a symlink; a pullers/ that is a symlink (it
    wrote the keys into the folder it named). Nothing is written."""
    keys = tmp_path / "keys"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    keys.mkdir()
    if case == "nobody-folder":
        _nobody(keys)
        named = keys
    elif case == "pullers-symlink":
        (keys / "pullers").symlink_to(elsewhere)
        named = keys / "pullers"
    else:
        named = keys / "mapper.key_secret"
        if case == "symlink-key":
            (elsewhere / "pair").write_text("")
            named.symlink_to(elsewhere / "pair")
        else:
            named.write_text("")
            named.chmod(0o666 if case == "nobody-key" else 0o640)
            if case == "nobody-key":
                _nobody(named)
    code = main(["keys", str(keys), "--pullers", "M1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"mgst: error: FOLDER: {named} is "), err
    assert not list(elsewhere.rglob("*.key*")) and not (keys / "authorized" / "M1.key").exists()


def _dead_pid() -> int:
    """The pid of a process that has ended (and was reaped)."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


EXPERIMENT = """[experiment]
name = "keys"
[workload]
arrival_rates = [2.0]
[machines]
rates = [[4.0]]
[policy]
name = "fcfs"
[simulation]
replications = 1
[testbed]
time_unit = 0.1
duration = 60.0
"""


def test_the_keys_of_a_killed_run_are_removed_by_the_next_run(tmp_path, no_children_left):
    """`mgst run` SIGKILLed mid-run leaves its throw-away key folder (the mapper's secret key in it) in the
    temporary folder; the next run removes it, and its own at its end. It leaves what is not a dead run's folder
    of this user's: another user's, a symlink (and what it names), a live process's."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (tmp_path / "exp.toml").write_text(EXPERIMENT)
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}
    run = [sys.executable, "-m", "mgst", "run", str(tmp_path / "exp.toml"), "--no-live", "--quiet"]
    killed = subprocess.Popen([*run, "--out", str(tmp_path / "killed")], cwd=ROOT, env=env, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    pullers: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 60
        while not (pullers := psutil.Process(killed.pid).children()) or not list(tmp.glob("*/mapper.key_secret")):
            assert killed.poll() is None and time.monotonic() < deadline, "the run started no puller within 60 s"
            time.sleep(0.1)
    finally:
        for p in [psutil.Process(killed.pid), *pullers]:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        killed.wait()
        psutil.wait_procs(pullers, timeout=10)
    left = [p.parent for p in tmp.glob("*/mapper.key_secret")]
    assert len(left) == 1 and left[0].name.startswith(PREFIX), left  # what a SIGKILL leaves

    dead = _dead_pid()
    others = tmp / f"{PREFIX}{dead}-nobody"
    link = tmp / f"{PREFIX}{dead}-link"
    live = tmp / f"{PREFIX}{os.getpid()}-live"
    (tmp_path / "named").mkdir()
    (tmp_path / "named" / "keep").write_text("")
    link.symlink_to(tmp_path / "named")
    live.mkdir()
    kept = [link, live]
    if os.geteuid() == 0:
        others.mkdir()
        _nobody(others)
        kept.append(others)
    done = subprocess.run([*run, "--duration", "1", "--out", str(tmp_path / "next")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert not list(tmp.glob("*/mapper.key_secret")), list(tmp.iterdir())
    assert sorted(tmp.iterdir()) == sorted(kept)
    assert (tmp_path / "named" / "keep").exists()


def test_remove_stale_takes_only_dead_runs_folders(tmp_path):
    """The rule alone: a folder named with a dead pid goes; a live pid's, a name without a pid, a file, stay."""
    dead = _dead_pid()
    gone = tmp_path / f"{PREFIX}{dead}-x"
    (gone / "pullers").mkdir(parents=True)
    stay = [tmp_path / f"{PREFIX}{os.getpid()}-x", tmp_path / f"{PREFIX}abc", tmp_path / f"{PREFIX}{dead}"]
    for s in stay:
        s.mkdir()
    (tmp_path / f"{PREFIX}{dead}-file").write_text("")
    stay.append(tmp_path / f"{PREFIX}{dead}-file")
    assert remove_stale(tmp_path) == [gone]
    assert sorted(tmp_path.iterdir()) == sorted(stay)


def test_a_fifo_or_a_huge_file_among_the_keys_is_one_error_not_a_hang(tmp_path):
    """A FIFO planted as a puller's public key in authorized/ (the mapper's ZAP handler reads them all), or a
    file of 1 MB as a key pair: one error naming the file, at once (the old reader waited on the FIFO for ever)."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    folder = tmp_path / "keys"
    security.create_keys(folder, ["M1"])
    fifo = folder / security.AUTHORIZED / "M2.key"
    os.mkfifo(fifo)
    code = ("import sys, zmq; from pathlib import Path; from mgst.wire import security\n"
            "try:\n    security.start_authenticator(zmq.Context(), security.server_keys(Path(sys.argv[1])))\n"
            "except security.KeyFileError as e:\n    print(e); sys.exit(3)\n")
    p = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 3 and str(fifo) in p.stdout and "FIFO" in p.stdout, (p.stdout, p.stderr)
    fifo.unlink()
    huge = folder / security.PULLERS / "M1.key_secret"
    huge.unlink()
    huge.write_bytes(b"#" * 1_000_000)
    with pytest.raises(security.KeyFileError, match="M1.key_secret"):
        security.load_pair(huge)


def test_a_mapper_s_secret_key_readable_by_others_is_warned_of(tmp_path, caplog):
    """A puller warned of its own world-readable secret key; the mapper took its own without a word."""
    import logging  # noqa: PLC0415

    security.create_keys(tmp_path / "keys", ["M1"])
    secret = tmp_path / "keys" / "mapper.key_secret"
    with caplog.at_level(logging.WARNING, logger="mgst.wire.security"):
        security.server_keys(tmp_path / "keys")
        assert not [r for r in caplog.records if "readable by others" in r.getMessage()]
        secret.chmod(0o644)
        security.server_keys(tmp_path / "keys")
    said = [r.getMessage() for r in caplog.records if "readable by others" in r.getMessage()]
    assert len(said) == 1 and str(secret) in said[0] and "chmod 600" in said[0] and "the mapper's" in said[0], said
    puller = tmp_path / "keys" / "pullers" / "M1.key_secret"  # (a puller says so of its own, as before)
    puller.chmod(0o644)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mgst.wire.security"):
        security.client_keys(puller, tmp_path / "keys" / "mapper.key")
    said = [r.getMessage() for r in caplog.records if "readable by others" in r.getMessage()]
    assert len(said) == 1 and str(puller) in said[0] and "this puller's secret key" in said[0], said
