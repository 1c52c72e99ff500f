"""A file written whole or not at all: beside its place, then renamed over it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def write_whole(path: Path, write: Callable[[Path], object]) -> None:
    """Write ``path`` whole or not at all: ``write`` writes NAME.part.SUFFIX beside it (the suffix kept: a plot's
    format is read from it), renamed over it once done. A crash leaves the old file or none, never a cut-off one,
    and a link planted at ``path`` is replaced, not written through. An OSError names ``path``, not its .part."""
    part = path.with_name(f"{path.stem}.part{path.suffix}")
    part.unlink(missing_ok=True)  # (a left-over, or a link: never written through)
    try:
        write(part)
        os.replace(part, path)
    except OSError as e:  # (said of the file asked for, not of its .part)
        raise OSError(e.errno, e.strerror, str(path)) from None
    finally:
        part.unlink(missing_ok=True)
