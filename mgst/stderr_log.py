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


# Libraries whose loggers set their own levels (Dask's distributed and dask_jobqueue log at INFO by their config,
# whatever the command's level) and log tracebacks of what they handle themselves (a worker's connection closing).
LIBRARIES = frozenset({"distributed", "dask", "dask_jobqueue", "tornado", "asyncio"})


class LibraryLines(logging.Filter):
    """On the command lines' handler: a library's records only at the command's ``level`` or above, and without
    their tracebacks unless ``tracebacks`` (a Dask worker lost mid-sweep logged an INFO line with the traceback of
    its closed connection above mgst's one-line error). mgst's own records pass unchanged."""

    def __init__(self, level: int, tracebacks: bool):
        super().__init__()
        self.level = level
        self.tracebacks = tracebacks

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.partition(".")[0] not in LIBRARIES:
            return True
        if record.levelno < self.level:
            return False
        if not self.tracebacks and (record.exc_info or record.exc_text or record.stack_info):
            record.exc_info = record.exc_text = record.stack_info = None
        return True
