"""The ready queue: machines asking for work in request order, counted by the policy's choose_groups keys."""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from typing import Final

ABSENT: Final = -1  # in ``next_of``: the machine is not in the queue


class ReadyQueue:
    """Machines (by index) asking for work, oldest request first: MGST's rotating server queue.

    A cyclic doubly-linked list over machine indices, kept in two lists of ints, with a head: the
    back of the queue is the machine before the head. Adding, removing and moving a machine to the
    back are O(1), and so is the rotating server queue's step: when a machine takes a job, the
    machines that were offered it before and refused move to the back, in order, which is only the
    head moving to the taker (:meth:`rotate_to`), however many machines were passed over.

    Once given the policy's ``choose_groups`` keys (:meth:`keys_present`), it also counts its
    machines by key, so that the core can stop offering a job once every key among the ready
    machines has refused it, and numbers the keys densely (``key_of``) for that walk.
    """

    def __init__(self) -> None:
        self.head = ABSENT  # the oldest request; ABSENT when the queue is empty
        self.next_of: list[int] = []  # by machine index: the next machine in the queue, or ABSENT
        self._prev: list[int] = []  # by machine index: the previous machine in the queue
        self.size = 0  # machines in the queue (read it; change it only through the methods)
        self._capacity = 0  # the length of next_of and _prev: machine indices seen so far, + 1
        self._keys: Sequence[Hashable] | None = None  # the keys counted by, by machine index
        self.key_of: list[int] = []  # by machine index: its key's number (keys numbered from 0)
        self.key_count = 0  # how many distinct keys there are
        self._per_key: list[int] = []  # by key number: ready machines with that key
        self._present = 0  # keys with a ready machine

    def __len__(self) -> int:
        return self.size

    def __contains__(self, machine: int) -> bool:
        return 0 <= machine < self._capacity and self.next_of[machine] != ABSENT

    def __iter__(self) -> Iterator[int]:
        """Front to back (do not change the queue while iterating)."""
        machine = self.head
        next_of = self.next_of
        for _ in range(self.size):
            yield machine
            machine = next_of[machine]

    def add(self, machine: int) -> None:
        """At the back (the machine is not in the queue)."""
        next_of = self.next_of
        prev = self._prev
        if machine >= self._capacity:
            grow = machine + 1 - self._capacity
            next_of.extend([ABSENT] * grow)
            prev.extend([ABSENT] * grow)
            self._capacity = machine + 1
        elif next_of[machine] != ABSENT:
            raise ValueError(f"machine {machine} is already in the ready queue")
        # Linked in before the head, at the back.
        head = self.head
        if head == ABSENT:
            self.head = machine
            next_of[machine] = prev[machine] = machine
        else:
            back = prev[head]
            next_of[back] = machine
            prev[machine] = back
            next_of[machine] = head
            prev[head] = machine
        self.size += 1
        if self._keys is not None:
            key = self.key_of[machine]
            count = self._per_key[key]
            if not count:
                self._present += 1
            self._per_key[key] = count + 1

    def remove(self, machine: int) -> None:
        """Out of the queue (KeyError if it is not in it)."""
        next_of = self.next_of
        following = next_of[machine] if 0 <= machine < self._capacity else ABSENT
        if following == ABSENT:
            raise KeyError(machine)
        # Unlinked; the head moves on if it was the head.
        prev = self._prev
        if following == machine:  # the only one
            self.head = ABSENT
        else:
            before = prev[machine]
            next_of[before] = following
            prev[following] = before
            if self.head == machine:
                self.head = following
        next_of[machine] = prev[machine] = ABSENT
        self.size -= 1
        if self._keys is not None:
            key = self.key_of[machine]
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
        if not 0 <= machine < self._capacity or self.next_of[machine] == ABSENT:
            raise KeyError(machine)
        self.head = machine

    def keys_present(self, keys: Sequence[Hashable]) -> int:
        """How many distinct ``keys`` (by machine index) the ready machines have.

        The queue keeps ``keys`` and counts by them from then on, until it is given another
        sequence: a policy returns a new one when its keys change (``Policy.choose_groups``).
        """
        if keys is not self._keys:
            numbers: dict[Hashable, int] = {}
            self.key_of = [numbers.setdefault(key, len(numbers)) for key in keys]
            self.key_count = len(numbers)
            self._per_key = [0] * len(numbers)
            for machine in self:
                self._per_key[self.key_of[machine]] += 1
            self._present = sum(1 for count in self._per_key if count)
            self._keys = keys
        return self._present

    def check(self) -> None:
        """AssertionError unless the links, the length and the counts by key agree."""
        order = list(self)
        assert len(set(order)) == len(order) == sum(1 for m in self.next_of if m != ABSENT), order
        assert len(self.next_of) == len(self._prev) == self._capacity
        for position, machine in enumerate(order):
            assert self.next_of[machine] == order[(position + 1) % len(order)], (machine, order)
            assert self._prev[machine] == order[position - 1], (machine, order)
        if self._keys is None:
            return
        per_key = [0] * len(self._per_key)
        for machine in order:
            per_key[self.key_of[machine]] += 1
        assert per_key == self._per_key, (per_key, self._per_key)
        assert self._present == sum(1 for count in per_key if count), self._present

