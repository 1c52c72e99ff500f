"""Counted nouns in the messages users read: "1 replication", "2 replications"."""

from __future__ import annotations


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` and the noun, singular for exactly one: plural(1, "replication") is "1 replication"."""
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"
