"""Read a TOML file a user wrote (experiment, sweep, lab hosts, allow-list), within bounds, with one plain sentence
for whatever is wrong."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

from mgst.bounded_read import read_bytes

MAX_TOML_BYTES = 4 << 20  # 4 MiB; an experiment file is some 3 KB, a hosts file of a lab room some 20 KB


class TomlFileError(ValueError):
    """The file cannot be read or is not TOML; the message says which, in words for the user."""


def read_toml(path: str | os.PathLike) -> dict[str, Any]:
    """The file's table; TomlFileError: "no such file", "cannot read: ..." (not a regular file, larger than
    MAX_TOML_BYTES) or "TOML syntax error: ... [line L, column C]" (tomllib names the line itself, except at the end
    of the document, where this adds it)."""
    p = Path(path)
    try:
        text = read_bytes(p, MAX_TOML_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise TomlFileError("no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise TomlFileError(f"cannot read: {err}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        message = str(err)
        if "line" not in message:  # "(at end of document)": say where that is
            lines = text.split("\n")
            message = f"{message} [line {len(lines)}, column {len(lines[-1]) + 1}]"
        raise TomlFileError(f"TOML syntax error: {message}") from None
