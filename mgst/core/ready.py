"""The ready queue: machines asking for work in request order, counted by the policy's choose_groups keys."""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from typing import Final

ABSENT: Final = -1  # in ``ReadyLink.next``: the machine is not in the queue


class ReadyLink:
    """One machine's place in the ready queue: its neighbours, and its key's number (read only)."""

    def __init__(self) -> None:
        self.next = ABSENT  # the next machine in the queue (the head after the back); ABSENT: not queued
        self.prev = ABSENT  # the previous machine in the queue
        self.key = 0  # its key's number, once the queue counts by keys (ReadyQueue.keys_present)


class ReadyQueue:
    """Machines (by index) asking for work, oldest request first: MGST's rotating server queue.

    A cyclic doubly-linked list over machine indices, with a head: the back of the queue is the
    machine before the head. Adding, removing and moving a machine to the back are O(1), and so is
    the rotating server queue's step: when a machine takes a job, the machines that were offered it
    before and refused move to the back, in order, which is only the head moving to the taker
    (:meth:`rotate_to`), however many machines were passed over. Each machine's links are a
    :class:`ReadyLink` (``links[machine]``): compiled, reading and writing their fields are native,
    where items of a list of ints are boxed.

    Once given the policy's ``choose_groups`` keys (:meth:`keys_present`), it also counts its
    machines by key, so that the core can stop offering a job once every key among the ready
    machines has refused it, and numbers the keys densely (``links[machine].key``) for that walk.
    """

    def __init__(self) -> None:
        self.head = ABSENT  # the oldest request; ABSENT when the queue is empty
        self.links: list[ReadyLink] = []  # by machine index, for every index seen so far (read only)
        self.size = 0  # machines in the queue (read it; change it only through the methods)
        self._keys: Sequence[Hashable] | None = None  # the keys counted by, by machine index
        self.key_count = 0  # how many distinct keys there are
        self._per_key: list[int] = []  # by key number: ready machines with that key
        self._present = 0  # keys with a ready machine

    def __len__(self) -> int:
        return self.size

    def __contains__(self, machine: int) -> bool:
        return 0 <= machine < len(self.links) and self.links[machine].next != ABSENT

    def __iter__(self) -> Iterator[int]:
        """Front to back (do not change the queue while iterating)."""
        machine = self.head
        links = self.links
        for _ in range(self.size):
            yield machine
            machine = links[machine].next

    def _grow(self, machine: int) -> None:
        """Links for every machine index up to ``machine`` (each with its key, if the queue has keys)."""
        keys = self._keys
        if keys is not None and machine >= len(keys):
            raise IndexError(f"machine {machine} has no key: choose_groups gave {len(keys)}")
        links = self.links
        while len(links) <= machine:
            links.append(ReadyLink())

    def add(self, machine: int) -> None:
        """At the back (the machine is not in the queue)."""
        links = self.links
        if machine >= len(links):
            self._grow(machine)
        link = links[machine]
        if link.next != ABSENT:
            raise ValueError(f"machine {machine} is already in the ready queue")
        # Linked in before the head, at the back.
        head = self.head
        if head == ABSENT:
            self.head = machine
            link.next = link.prev = machine
        else:
            head_link = links[head]
            back = head_link.prev
            links[back].next = machine
            link.prev = back
            link.next = head
            head_link.prev = machine
        self.size += 1
        if self._keys is not None:
            key = link.key
            count = self._per_key[key]
            if not count:
                self._present += 1
            self._per_key[key] = count + 1

    def remove(self, machine: int) -> None:
        """Out of the queue (KeyError if it is not in it)."""
        links = self.links
        if not 0 <= machine < len(links):
            raise KeyError(machine)
        link = links[machine]
        following = link.next
        if following == ABSENT:
            raise KeyError(machine)
        # Unlinked; the head moves on if it was the head.
        if following == machine:  # the only one
            self.head = ABSENT
        else:
            before = link.prev
            links[before].next = following
            links[following].prev = before
            if self.head == machine:
                self.head = following
        link.next = link.prev = ABSENT
        self.size -= 1
        if self._keys is not None:
            key = link.key
            count = self._per_key[key] - 1
            if not count:
                self._present -= 1
            self._per_key[key] = count

    def discard(self, machine: int) -> None:
        """Out of the queue, if it is in it."""
        if machine in self:
            self.remove(machine)

    def move_to_end(self, machine: int) -> None:
        """To the back (KeyError if it is not in the queue)."""
        self.remove(machine)
        self.add(machine)

    def rotate_to(self, machine: int) -> None:
        """Move the machines in front of ``machine`` to the back, in their order: it becomes the head."""
        if machine not in self:
            raise KeyError(machine)
        self.head = machine

    def keys_present(self, keys: Sequence[Hashable]) -> int:
        """How many distinct ``keys`` (by machine index) the ready machines have.

        The queue keeps ``keys`` and counts by them from then on, until it is given another
        sequence: a policy returns a new one when its keys change (``Policy.choose_groups``).
        """
        if keys is not self._keys:
            if len(self.links) > len(keys):
                raise IndexError(f"machine {len(keys)} has no key: choose_groups gave {len(keys)}")
            numbers: dict[Hashable, int] = {}
            number_of = [numbers.setdefault(key, len(numbers)) for key in keys]  # (first: may raise)
            self._keys = None
            self._grow(len(keys) - 1)
            for link, number in zip(self.links, number_of):
                link.key = number
            per_key = [0] * len(numbers)
            self.key_count = len(numbers)
            for machine in self:
                per_key[self.links[machine].key] += 1
            self._per_key = per_key
            self._present = sum(1 for count in per_key if count)
            self._keys = keys
        return self._present

    def check(self) -> None:
        """AssertionError unless the links, the length and the counts by key agree."""
        order = list(self)
        assert len(set(order)) == len(order) == sum(1 for link in self.links if link.next != ABSENT), order
        for position, machine in enumerate(order):
            assert self.links[machine].next == order[(position + 1) % len(order)], (machine, order)
            assert self.links[machine].prev == order[position - 1], (machine, order)
        if self._keys is None:
            return
        per_key = [0] * len(self._per_key)
        for machine in order:
            per_key[self.links[machine].key] += 1
        assert per_key == self._per_key, (per_key, self._per_key)
        assert self._present == sum(1 for count in per_key if count), self._present
