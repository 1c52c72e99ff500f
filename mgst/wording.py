"""Words in the messages users read: counted nouns ("1 replication", "2 replications") and text from a peer
made safe to print."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` and the noun, singular for exactly one: plural(1, "replication") is "1 replication"."""
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"


def printable(text: str, limit: int = 300) -> str:
    """A text from a peer (the wire, a remote host) as we print it: every character that is not printable (control
    characters, escape sequences, bidirectional overrides, line breaks) written as its Python escape (``\\x1b``), and
    at most ``limit`` characters of it, then how many more there were: a peer cannot rewrite the terminal."""
    shown = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text[:limit])
    return shown if len(text) <= limit else f"{shown}... ({len(text) - limit:,} more characters)"


def display_width(text: str) -> int:
    """The columns ``text`` takes on a terminal: two for a wide character (CJK, most emoji), none for a combining
    mark, one for the others."""
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def pad(text: str, width: int) -> str:
    """``text`` left-aligned in ``width`` terminal columns (str.ljust counts characters: a class named in CJK pushed
    its row's figures out of their columns)."""
    return text + " " * max(0, width - display_width(text))


def label_width(labels: Iterable[str], least: int) -> int:
    """A table's label column: ``least`` columns, or the longest label's and one space."""
    return max([least, *(display_width(s) + 1 for s in labels)])
