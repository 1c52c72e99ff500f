"""A condition of the mapper's loop said once it has lasted long enough: a stuck drain, a run left with no puller."""

from __future__ import annotations


class Lasting:
    """A condition looked at on each pass: :meth:`due` says, once, when it has held ``seconds`` without a break;
    ``again``: once for each stretch in which it holds (else once for the run)."""

    def __init__(self, seconds: float, again: bool = False):
        self.seconds = seconds
        self.again = again
        self.since: float | None = None  # when the stretch in which it holds began
        self.said = False

    def due(self, now: float, holds: bool) -> float | None:
        """How long it has held, the first time that reaches ``seconds`` (then to be said); else None."""
        if not holds:
            self.since = None
            if self.again:
                self.said = False
            return None
        if self.since is None:
            self.since = now
        if self.said or now - self.since < self.seconds:
            return None
        self.said = True
        return now - self.since
