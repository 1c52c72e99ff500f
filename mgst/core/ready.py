"""The ready queue: machines asking for work in request order, counted by the policy's choose_groups keys."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterator, Sequence


class ReadyQueue:
    """Machines (by index) asking for work, oldest request first: MGST's rotating server queue.

    An OrderedDict: its head is found in O(1) and a machine passed over moves to the back in O(1) (a
    dict leaves holes at its front that every look at the head walks over). Once given the policy's
    ``choose_groups`` keys (:meth:`keys_present`), it also counts its machines by key, so that the
    core can stop offering a job once every key among the ready machines has refused it, instead of
    walking the whole queue (thousands of machines on a large grid).
    """

    def __init__(self) -> None:
        self.order: OrderedDict[int, None] = OrderedDict()  # read it; change it only through the methods
        self._keys: Sequence[Hashable] | None = None  # the keys counted by, by machine index
        self._key_ids: list[int] = []  # by machine index: its key's number (keys numbered from 0)
        self._per_key: list[int] = []  # by key number: ready machines with that key
        self._present = 0  # keys with a ready machine

    def __len__(self) -> int:
        return len(self.order)

    def __contains__(self, machine: int) -> bool:
        return machine in self.order

    def __iter__(self) -> Iterator[int]:
        return iter(self.order)

    def add(self, machine: int) -> None:
        """At the back (the machine is not in the queue)."""
        self.order[machine] = None
        if self._keys is not None:
            key = self._key_ids[machine]
            count = self._per_key[key]
            if not count:
                self._present += 1
            self._per_key[key] = count + 1

    def remove(self, machine: int) -> None:
        """Out of the queue (KeyError if it is not in it)."""
        del self.order[machine]
        if self._keys is not None:
            key = self._key_ids[machine]
            count = self._per_key[key] - 1
            if not count:
                self._present -= 1
            self._per_key[key] = count

    def discard(self, machine: int) -> None:
        """Out of the queue, if it is in it."""
        if machine in self.order:
            self.remove(machine)

    def move_to_end(self, machine: int) -> None:
        """To the back."""
        self.order.move_to_end(machine)

    def keys_present(self, keys: Sequence[Hashable]) -> int:
        """How many distinct ``keys`` (by machine index) the ready machines have.

        The queue keeps ``keys`` and counts by them from then on, until it is given another
        sequence: a policy returns a new one when its keys change (``Policy.choose_groups``).
        """
        if keys is not self._keys:
            numbers: dict[Hashable, int] = {}
            self._key_ids = [numbers.setdefault(key, len(numbers)) for key in keys]
            self._per_key = [0] * len(numbers)
            for machine in self.order:
                self._per_key[self._key_ids[machine]] += 1
            self._present = sum(1 for count in self._per_key if count)
            self._keys = keys
        return self._present

    def check(self) -> None:
        """AssertionError unless the counts by key are those of the machines in the queue."""
        if self._keys is None:
            return
        per_key = [0] * len(self._per_key)
        for machine in self.order:
            per_key[self._key_ids[machine]] += 1
        assert per_key == self._per_key, (per_key, self._per_key)
        assert self._present == sum(1 for count in per_key if count), self._present
