"""Command-line options several commands share: --import, output folders, and a horizon beside its warm-up."""

from __future__ import annotations

import argparse
import hashlib
import os
import stat
import tempfile
import traceback
from pathlib import Path
from typing import Any

from mgst import policies
from mgst.config import MAX_SEED, SEED_RULE, ConfigError

_MAKE_ATTEMPTS = 5  # check_folder's tries: two commands checking folders under one new parent race over it


def check_seed(option: str, seed: int | None) -> None:
    """ConfigError naming ``option`` unless ``seed`` is None (not given) or a seed a run can keep (MAX_SEED)."""
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise ConfigError(option, f"{SEED_RULE}, got {seed}")


def lengths_not_simulated(horizon: float | None) -> tuple[str, ...]:
    """load_experiment's ``lengths_not_used`` for a command that simulates: the testbed's, and the simulation's when
    --horizon gives it (the command checks that one: mgst.config.checks.check_run_length)."""
    return ("testbed", "simulation") if horizon is not None else ("testbed",)


def check_experiments_folder(path: Path) -> None:
    """ConfigError naming --experiments unless ``path`` is a folder: the repository's experiments/ (the papers'
    experiment and sweep files are not installed with the package)."""
    if not path.is_dir():
        raise ConfigError("--experiments", f"{path} is not a folder: the papers' experiment and sweep files are in "
                                           "experiments/ at the root of mgst's repository (they are not installed "
                                           "with the package); run from there, or give --experiments "
                                           "PATH/TO/experiments")


def check_folder(option: str, path: Path) -> None:
    """ConfigError naming ``option`` unless ``path`` is a folder this user can write a file in, or one that can
    be made. Tried, not guessed from modes (root passes every mode check, a read-only mount or /proc fails
    anyway): the missing folders are made, a file written in the last, and all of it removed again."""
    if "\0" in str(path):
        raise ConfigError(option, f"{str(path)!r} is not a path: it holds a NUL character")
    for folder in (path, *path.parents):
        try:
            mode = folder.stat().st_mode  # (one look: a folder removed meanwhile is missing, not "a file")
        except (FileNotFoundError, NotADirectoryError):  # (not there; or below a file, which the loop meets next)
            continue
        except OSError as e:  # (a name too long for the file system, a folder this user may not look into, ...)
            raise ConfigError(option, f"{path} cannot be used: {e.strerror or e}") from None
        if not stat.S_ISDIR(mode):
            where = "is a file" if folder == path else f"cannot be made: {folder} is a file"
            raise ConfigError(option, f"{path} {where}; a folder is expected")
        break  # (whether it can be written in is tried below, not guessed from its mode)
    made: list[Path] = []
    doing = "made"
    try:
        for attempt in range(_MAKE_ATTEMPTS):
            try:
                for folder in reversed((path, *path.parents)):
                    if not folder.exists():
                        try:
                            folder.mkdir()
                        except FileExistsError:  # (another process made it meanwhile)
                            continue
                        made.append(folder)
                break
            except FileNotFoundError:  # another process removed a folder it had made above ours: again
                if attempt == _MAKE_ATTEMPTS - 1:
                    raise
        doing = "written in"
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        raise ConfigError(option, f"{path} cannot be {doing}: {e.strerror or e}") from None
    finally:
        for folder in reversed(made):
            try:
                folder.rmdir()
            except OSError:
                pass


def check_horizon_warmup(horizon: float, warmup: float, horizon_given: bool, warmup_given: bool,
                         file_key: str = "simulation") -> None:
    """ConfigError unless 0 <= warm-up < horizon, naming what the user gave: ``--horizon 50`` alone, against the
    file's warm-up of 100, is the horizon's fault (and the user is told to lower the warm-up too)."""
    if horizon > 0 and 0 <= warmup < horizon:
        return
    if not horizon > 0:
        raise ConfigError("--horizon" if horizon_given else f"{file_key}.horizon", f"must be > 0, got {horizon:g}")
    if warmup_given:
        raise ConfigError("--warmup", f"must be >= 0 and below the horizon ({horizon:g}), got {warmup:g}")
    raise ConfigError("--horizon" if horizon_given else f"{file_key}.horizon",
                      f"must be above the warm-up ({file_key}.warmup = {warmup:g}); give a smaller --warmup too")


def import_policies(args: argparse.Namespace) -> None:
    """The modules of --import, imported (their policies registered); ConfigError naming --import if one fails
    (the module's own error, in one line: a syntax error in it, a name clash with a built-in policy...)."""
    for module in args.imports:
        if module.endswith(".py") or "/" in module or os.sep in module:  # a file's path: Python imports a name
            path = Path(module)
            raise ConfigError("--import", f"{module}: give a module's name, not a file's: --import {path.stem}, with "
                              f"its folder on Python's path (PYTHONPATH={path.parent.resolve()})")
        try:
            policies.import_modules([module])
        except ModuleNotFoundError as e:
            top = module.split(".")[0]
            here = Path.cwd() / top
            if e.name == top and (here.with_suffix(".py").is_file() or (here / "__init__.py").is_file()):
                raise ConfigError("--import", f"{module}: no module named {top!r} on Python's path, though this folder "
                                  f"has one: mgst imports from Python's path only; run it with PYTHONPATH=. (or "
                                  f"install the module)") from None
            raise ConfigError("--import", f"{module}: {e}{_where_raised(e)}") from None
        except SystemExit as e:  # (a script's sys.exit() run at import: mgst would end silently with its code)
            raise ConfigError("--import", f"{module}: it called sys.exit({e.code!r}) as it was imported (a script, "
                              "not a module of policies? Put its top-level code under "
                              "if __name__ == '__main__':)" + _where_raised(e)) from None
        except Exception as e:  # noqa: BLE001 (whatever the user's module raises is said in one line)
            plain = isinstance(e, (ImportError, ValueError))
            said = f"{module}: {e}" if plain else f"{module}: {type(e).__name__}: {e}"
            raise ConfigError("--import", said + _where_raised(e)) from None


def _where_raised(e: BaseException) -> str:
    """Where in the user's code ``e`` was raised (its innermost frame outside Python's and mgst's own), as
    " (FILE, line N)"; "" where there is none (a SyntaxError says its line itself)."""
    if isinstance(e, SyntaxError):
        return ""
    ours = (str(Path(policies.__file__).resolve().parents[1]), os.path.dirname(os.__file__))
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename and not f.filename.startswith("<")
              and not os.path.abspath(f.filename).startswith(ours)]
    return f" ({frames[-1].filename}, line {frames[-1].lineno})" if frames else ""


def file_digest(path: Path) -> str:
    """The SHA-256 of a file's bytes, hex: what a result records of the experiment file it ran (an edited file of the
    same name runs other jobs)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


# A file name is at most 255 bytes on the common file systems: a default folder named after an experiment (or a sweep)
# keeps this many bytes of its name, the rest for the date and suffixes mgst adds.
FOLDER_NAME_BYTES = 160


def folder_name(name: str) -> str:
    """``name`` cut to FOLDER_NAME_BYTES bytes of UTF-8, at a character's end: a default output folder's stem (64
    emoji, a valid experiment name, are 256 bytes: "File name too long", blamed on --out)."""
    cut = name.encode("utf-8")[:FOLDER_NAME_BYTES]
    return cut.decode("utf-8", errors="ignore")


# Off a terminal (a batch job's log, nohup), a command's progress is a line at most this often (s), and its last one.
OFF_TERMINAL_EVERY_S = 10.0


def provenance(experiment_file: Path, digest_key: str = "experiment_sha256") -> dict[str, str]:
    """What a result records of how it was made, beside its settings: mgst's version and the experiment (or sweep)
    file's SHA-256, under ``digest_key`` (the build, compiled or pure, is left out: the two give the same results)."""
    from mgst.build_info import installed_version  # noqa: PLC0415

    return {"mgst_version": installed_version(), digest_key: file_digest(experiment_file)}


def sweep_made_by(sweep_file: Path, quick: bool) -> dict[str, Any]:
    """What a sweep's folder records of each command that ran cells in it: provenance(), ``--quick``, when (UTC)."""
    import datetime  # noqa: PLC0415

    return {**provenance(sweep_file, "sweep_sha256"), "quick": quick,
            "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
