"""A logging handler that writes to the sys.stderr of the moment (the command lines' log)."""

from __future__ import annotations

import logging
import sys
from typing import Any


class StderrHandler(logging.StreamHandler):
    """Logs to whatever sys.stderr is when a record is written, not to the one there when the handler was made:
    a caller that redirects stderr (as tests do) and closes it after must not leave a handler on a closed stream."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass
