"""The live view's HTTP server in a low-priority process of its own, serving the snapshots of a FolderBoard.

The mapper's process then only writes a snapshot file a second: however many requests come, and however
busy the machine, the server never holds the mapper's GIL (a thread would, a little, and a thread holding
it when the OS preempts it stalls the mapper for a whole time slice). The folder is private (0700) and
holds the server's settings (its token too), the snapshot, and the port it bound or why it could not.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mgst.testbed.live import child
from mgst.testbed.live.board import FolderBoard
from mgst.testbed.live.server import LiveServer, check_token, is_loopback, page_url

# Niceness added to the server's process: the mapper comes first when the machine is busy.
NICE = 5
# Seconds the server's process is given to bind (or to say why it cannot): a Python start on a busy machine.
START_TIMEOUT = 30.0
CONFIG, PORT, ERROR = "config.json", "port", "error"


class ServerProcess:
    """Serves the snapshots put on :attr:`board` on (``host``, ``port``); off loopback, ``token`` is required.

    ValueError (no token off loopback, a bad token) or OSError (it cannot bind) before it returns.
    """

    def __init__(self, host: str, port: int, token: str | None, **first: Any):
        if not is_loopback(host) and token is None:
            raise ValueError(f"the live view on {host} (not loopback) needs a token")
        token = check_token(token) if token is not None else None
        self.dir = tempfile.TemporaryDirectory(prefix="mgst-live-")  # 0700
        folder = Path(self.dir.name)
        self.board = FolderBoard(folder, **first)
        fd = os.open(folder / CONFIG, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"host": host, "port": port, "token": token, "parent": os.getpid()}, f)
        self.host = host
        self.process = child.start("mgst.testbed.live.process", folder)
        try:
            self.port = self._await_port(folder)
        except BaseException:
            self.close()
            raise

    def _await_port(self, folder: Path) -> int:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if (folder / PORT).exists():
                return int((folder / PORT).read_text())
            if (folder / ERROR).exists():
                raise OSError((folder / ERROR).read_text().strip())
            if self.process.poll() is not None:
                raise OSError(f"the live view's server exited (code {self.process.returncode})")
            time.sleep(0.02)
        raise OSError(f"the live view's server did not start in {START_TIMEOUT:g} s")

    @property
    def url(self) -> str:
        return page_url(self.host, self.port)

    def close(self) -> None:
        child.stop(self.process)
        self.dir.cleanup()


def _write(path: Path, text: str) -> None:
    part = path.with_suffix(".part")
    part.write_text(text)
    os.replace(part, path)


def main(folder: Path) -> None:
    """The server's process: bind as ``folder``/config.json says, write the port (or the error), serve."""
    config = json.loads((folder / CONFIG).read_text())
    child.exit_with_parent(config["parent"], folder)
    os.nice(NICE)
    try:
        server = LiveServer(FolderBoard(folder), config["host"], config["port"], config["token"])
    except (OSError, ValueError) as e:
        _write(folder / ERROR, str(getattr(e, "strerror", None) or e))
        sys.exit(1)
    _write(folder / PORT, str(server.port))
    server.serve_forever()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
