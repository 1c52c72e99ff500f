"""The rule for names in experiment and sweep files: a machine's, a class's, an experiment's, a sweep's."""

from __future__ import annotations

from typing import Final

# Characters in a name: names become key file names (which take 64) and run folders' names, log and error lines,
# and table cells; a longer one is a mistake, refused when the file is loaded.
MAX_NAME: Final = 64


def name_problem(text: str, *, folder: bool = False) -> str | None:
    """What is wrong with ``text`` as a name (None: nothing): it must be printable text of 1 to MAX_NAME characters,
    without a space at either end; with ``folder`` (an experiment's or a sweep's name, which names its run's folder,
    runs/NAME-...), also without '/' or '\\' and not beginning with '.', so that the folder is one, inside runs/."""
    if not text.strip():
        return "must not be empty or blank"
    if not text.isprintable():  # (names are printed in lines, tables and CSV files)
        return f"must be printable text (no line break or control character), got {text[:80]!r}"
    if len(text) > MAX_NAME:
        return f"has {len(text)} characters; at most {MAX_NAME} are allowed"
    if text != text.strip():
        return f"must not begin or end with a space, got {text!r}"
    if folder and ("/" in text or "\\" in text or text.startswith(".")):
        return f"names the run's folder, so it takes no '/' or '\\' and does not begin with '.', got {text!r}"
    return None
