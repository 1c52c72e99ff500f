"""Who may register under a machine's name: the rules a mapper applies to each hello."""

from __future__ import annotations

from dataclasses import dataclass

from mgst.protocol import Drop


@dataclass(frozen=True, slots=True)
class Holder:
    """What the mapper knows of a machine's name when a hello for it arrives."""

    bound_key: str | None  # the key the name was first registered with (None: never, or no CURVE)
    incarnations: tuple[int, ...]  # every incarnation registered under the name, the current one last
    identity: bytes | None  # the connection that holds the name now (None: nobody)
    live: bool  # that connection was heard from within the liveness window
    key_shared: bool  # the hello's key is bound to another machine's name too (a shared lab key)


@dataclass(frozen=True, slots=True)
class Refusal:
    drop: str  # a Drop reason, for the counters
    reason: str  # for the puller and the log
    fatal: bool


def admit(name: str, holder: Holder, key: str | None, incarnation: int, identity: bytes) -> Refusal | None:
    """None if the hello may register ``name``, else why not.

    1. A name is bound to the key that first registered it: another key is refused for good.
    2. An incarnation that a newer one replaced is refused for good: it is a duplicate
       puller that lost the name (this is what stops two pullers with the same key
       from taking the name from each other in turn).
    3. A new incarnation from another connection while the holder is alive is, with a
       key of its own, the machine restarting (its old work is gone). Without CURVE, or
       with a key shared by several machines, a restart cannot be told from a second
       puller under the same name: it is refused for now, and admitted once the
       holder has fallen silent.
    """
    if holder.bound_key is not None and key != holder.bound_key:
        return Refusal(Drop.NAME_TAKEN, f"machine name {name!r} is registered by another key; "
                                        "each lab machine needs its own name (or its own key)", True)
    if incarnation in holder.incarnations[:-1]:
        return Refusal(Drop.RETIRED, f"a newer puller has taken machine name {name!r}; is a second puller "
                                     "running under this name?", True)
    current = holder.incarnations[-1] if holder.incarnations else None
    if (holder.identity is not None and holder.identity != identity and current != incarnation and holder.live
            and (key is None or holder.key_shared)):
        return Refusal(Drop.NAME_TAKEN, f"machine name {name!r} is held by another live puller; a second "
                                        "puller under the same name is refused (retrying)", False)
    return None
