"""The live view of one run, as the commands use it: its server, its snapshot publisher, its simulation."""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mgst.bounded_read import read_text
from mgst.model import Experiment
from mgst.testbed.live.process import ServerProcess
from mgst.testbed.live.server import check_token, is_loopback
from mgst.testbed.live.simulation import BackgroundSimulation
from mgst.testbed.live.snapshot import LivePublisher
from mgst.wire.secret_files import SecretFileError, write_fresh

log = logging.getLogger(__name__)

TOKEN_FILE = "live.token"  # in the key folder (read if there), or in the run's folder (made if needed)
MAX_TOKEN_FILE = 4096  # bytes: a token is some 43 characters


class TokenError(ValueError):
    """The token's file cannot be read, or holds no usable token."""


def resolve_token(host: str, token_file: Path | None, keys: Path | None,
                  out: Path) -> tuple[str | None, Path | None]:
    """The token the view on ``host`` requires, and the file it is in (None, None: none needed).

    ``token_file`` if given (on any address); else, off loopback, ``keys``/live.token if it exists, else a
    new random one written to ``out``/live.token: a new file, readable by its owner only (one already there, another
    user's or a symlink, is removed first, never written through). ValueError if a file cannot be read or
    written, or holds no usable token.
    """
    if token_file is None and is_loopback(host):
        return None, None
    path = token_file
    if path is None and keys is not None and (keys / TOKEN_FILE).is_file():
        path = keys / TOKEN_FILE
    if path is not None:
        try:
            return check_token(read_text(path, MAX_TOKEN_FILE)), path
        except OSError as e:
            raise TokenError(f"cannot read {path}: {e.strerror}") from None
        except UnicodeDecodeError:
            raise TokenError(f"{path} does not hold a text token") from None
        except ValueError as e:
            raise TokenError(f"{path}: {e}") from None
    out.mkdir(parents=True, exist_ok=True)
    path = out / TOKEN_FILE
    token = secrets.token_urlsafe(32)
    try:  # a new file, mode 0600 (a live.token already there, or a symlink, is removed: never opened)
        write_fresh(path, (token + "\n").encode("ascii"))
    except SecretFileError as e:
        raise TokenError(str(e)) from None
    return token, path


class LiveView:
    """Serves the page of a run; :meth:`progress` wraps the mapper's progress callback to publish snapshots.

    The simulation of the same setting starts, in a low-priority process, once the page (or a script) has
    asked for a snapshot: a run nobody watches spends no CPU on it. Not with ``simulate`` False.
    """

    def __init__(self, experiment: Experiment, host: str, port: int, token: str | None = None, *,
                 imports: tuple[str, ...] = (), simulate: bool = True):
        self.experiment = experiment
        self.imports = imports
        self.simulate = simulate
        self.server = ServerProcess(host, port, token, experiment=experiment.name, policy=experiment.policy.name)
        self.board = self.server.board
        self.sim: BackgroundSimulation | None = None
        self.sim_error: str | None = None
        self.publisher = LivePublisher(self.board, simulation=self._simulation)
        self.mapper: Any = None
        self.token_file: Path | None = None  # where its token is, for the command to say

    @property
    def url(self) -> str:
        return self.server.url

    def _simulation(self) -> dict[str, Any] | None:
        if self.sim_error is not None:
            return {"status": "failed", "error": self.sim_error}
        if self.sim is None:
            return {"status": "waiting"} if self.simulate else None
        return self.sim.poll()

    def attach(self, mapper: Any) -> None:
        """The run's mapper."""
        self.mapper = mapper

    def _start_simulation(self, mapper: Any) -> None:
        horizon = mapper.duration / mapper.time_unit
        warmup = min(self.experiment.simulation.warmup, 0.1 * horizon)  # as the run's summary has it
        try:
            self.sim = BackgroundSimulation(mapper.experiment, horizon, warmup, mapper.seed, self.imports)
        except Exception as e:  # noqa: BLE001 (the page says so; the run goes on)
            log.warning("the live view's simulation could not start: %s", e)
            self.sim_error = f"it could not start: {e}"

    def progress(self, inner: Callable[[Any], None] | None) -> Callable[[Any], None]:
        """A mapper progress callback: ``inner``'s (e.g. the terminal's line), then a snapshot if one is due."""
        def both(mapper: Any) -> None:
            if inner is not None:
                inner(mapper)
            if self.mapper is None:
                self.attach(mapper)
            if self.board.viewed and self.simulate and self.sim is None and self.sim_error is None:
                self._start_simulation(mapper)
            self.publisher(mapper)

        return both

    def finish(self) -> None:
        """The run is over: its last snapshot."""
        if self.mapper is not None:
            try:
                self.publisher.finish(self.mapper)
            except Exception:  # noqa: BLE001 (the run's results matter more)
                log.exception("the live view's last snapshot failed")

    def close(self) -> None:
        self.server.close()
        if self.sim is not None:
            self.sim.close()


def open_live_view(spec: str, token_file: Path | None, keys: Path | None, out: Path, experiment: Experiment,
                   imports: tuple[str, ...] = ()) -> tuple[LiveView, Path | None]:
    """The live view on ``spec`` ([HOST:]PORT), started, and the file holding its token (None on loopback
    without one). TokenError (its token), ValueError (its address, or it cannot be served there) before
    anything else starts."""
    from mgst.testbed.live.server import parse_live  # noqa: PLC0415

    host, port = parse_live(spec)
    made_out = not out.exists()
    token, where = resolve_token(host, token_file, keys, out)
    try:
        view = LiveView(experiment, host, port, token, imports=imports)
    except OSError as e:
        if where is not None and where == out / TOKEN_FILE:  # (made for this view: nothing left of a run never run)
            where.unlink(missing_ok=True)
            if made_out:
                with contextlib.suppress(OSError):
                    out.rmdir()
        raise ValueError(f"cannot serve the live view on {spec}: {e.strerror or e}") from None
    if token is not None:
        log.info("the live view on %s:%d requires the token in %s", host, view.server.port, where)
    return view, where
