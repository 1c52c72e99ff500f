"""Secret files written fresh (never through an entry already there), and the folders that hold them checked.

A file is created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and its mode given at creation (0600): a file another
user made first with that name, or a symlink planted there, is never opened, so it can neither keep its owner and
mode nor lead the write elsewhere. What had the name is removed first (``unlink`` removes a symlink itself).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE = 0o600


class SecretFileError(ValueError):
    """A secret file or its folder is not what it must be; the message names the path, in one line."""


def write_fresh(path: Path, data: bytes, mode: int = PRIVATE) -> None:
    """``data`` into a new file at ``path``, created with ``mode`` (under the umask); whatever had that name is
    removed first. SecretFileError if it cannot be (a folder has the name, or an entry reappeared in between)."""
    try:
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        raise SecretFileError(f"{path}: cannot write it anew ({e.strerror})") from None
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def own_folder(path: Path, *, follow: bool = False) -> Path:
    """``path``, made if missing (mode 0700), once checked to be a folder of this user's own, not a symlink (with
    ``follow``, a symlink the user gave, to a folder of theirs, is fine). SecretFileError naming it otherwise."""
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        st = os.stat(path) if follow else os.lstat(path)
    except OSError as e:
        raise SecretFileError(f"{path}: cannot make the folder ({e.strerror})") from None
    if stat.S_ISLNK(st.st_mode):
        raise SecretFileError(f"{path} is a symlink, not a folder: refused (secret files go only into a folder of "
                              "your own)")
    if not stat.S_ISDIR(st.st_mode):
        raise SecretFileError(f"{path} is not a folder")
    if st.st_uid != os.geteuid():
        raise SecretFileError(f"{path} is another user's folder (owner uid {st.st_uid}): refused (secret files go "
                              "only into a folder of your own)")
    return path


def kept_secret(path: Path) -> bool:
    """Whether a secret file is at ``path`` to be kept: False if there is none; True if it is a plain file of this
    user's, readable by no one else; SecretFileError (never kept, never used) if it is anything else."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as e:
        raise SecretFileError(f"{path}: cannot look at it ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        what = "a symlink" if stat.S_ISLNK(st.st_mode) else f"owner uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}"
        raise SecretFileError(f"{path} is not a private file of yours ({what}): remove it, or make new keys "
                              "with --force")
    return True
