"""Which build of mgst runs: the modules compiled with mypyc, or pure Python, and why.

``setup.py`` compiles the modules of :data:`COMPILED_MODULES` with mypyc when it
can, and writes the sha256 of each one's source into ``mgst/_compiled.json``.
When ``mgst`` is imported, :func:`_guard` decides once, for all of those modules
together, whether the compiled ones are used: only if that file exists, every
source still has the hash it was compiled from, every extension file is there,
and ``MGST_PURE`` is not ``1``. Otherwise it puts a finder first on
``sys.meta_path`` that loads those modules from their ``.py`` sources, so that
an extension built from an older source is never imported. All or nothing: the
modules are compiled together and call each other's native code directly.

This module is never compiled, and imports nothing of mgst (setup.py reads it).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path


def installed_version() -> str:
    """mgst's version as installed, e.g. "0.1.0"; "(not installed)" run from a source tree that is not."""
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version("mgst")
    except PackageNotFoundError:
        return "(not installed)"


# The modules compiled with mypyc, in one place (setup.py reads this tuple).
COMPILED_MODULES: tuple[str, ...] = (
    "mgst.core.tuples",
    "mgst.core.events",
    "mgst.core.decisions",
    "mgst.core.stats",
    "mgst.core.progress",
    "mgst.core.state",
    "mgst.core.ready",
    "mgst.core.view",
    "mgst.core.hooks",
    "mgst.core.lifecycle",
    "mgst.core.arrivals",
    "mgst.core.matching",
    "mgst.core.scheduler",
    "mgst.sim.loop",
    "mgst.sim.replication_run",
    "mgst.sim.streamed_totals",
    "mgst.policies.base",
    "mgst.policies.fcfs",
    "mgst.papers.mgst.lpas",
    "mgst.draws",
    "mgst.workload.poisson",
    "mgst.core.gang",
    "mgst.core.link",
    "mgst.core.iterations",
    "mgst.sim.iterations",
    "mgst.papers.casanova.heuristics",
)
# A compiled policy registers with a call after its class, register(Cls): mypyc makes a decorated
# class non-native, and a non-native class cannot subclass the native Policy.

# Extension modules written in C (source: the module's path with .c), built and used with the
# compiled modules, all or nothing; each has a pure-Python twin that runs otherwise.
C_MODULES: tuple[str, ...] = (
    "mgst.sim._event_heap",  # twin: mgst.sim.event_heap.PyEventHeap
    "mgst.core._tuples",  # twin: tuple.__new__ (mgst.core.tuples.py_new_tuple)
)

HASH_FILE = "_compiled.json"  # beside this module; written by setup.py, gitignored
PURE_ENV = "MGST_PURE"
REBUILD = "pip install -e ."

log = logging.getLogger(__name__)

_PACKAGE = Path(__file__).resolve().parent

# Set once by _guard(): whether the compiled modules are used, and if not, why.
_decided = False
_compiled = False
_reason: str | None = None


def source_path(module: str, package_dir: Path = _PACKAGE) -> Path:
    """The .py source of one of mgst's modules, e.g. ``mgst.core.state`` -> ``.../mgst/core/state.py``."""
    parts = module.split(".")
    if parts[0] != "mgst":
        raise ValueError(f"{module} is not a module of mgst")
    return package_dir.joinpath(*parts[1:]).with_suffix(".py")


def built_sources(package_dir: Path = _PACKAGE) -> dict[str, Path]:
    """Every module the compiled build is made of, and its source: mypyc's .py, then the C .c files."""
    sources = {module: source_path(module, package_dir) for module in COMPILED_MODULES}
    sources.update({module: source_path(module, package_dir).with_suffix(".c") for module in C_MODULES})
    return sources


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _extension_present(directory: Path, stem: str) -> bool:
    """Whether an extension module named ``stem`` that this interpreter can load is in ``directory``."""
    return any((directory / (stem + suffix)).is_file() for suffix in importlib.machinery.EXTENSION_SUFFIXES)


def decide(package_dir: Path = _PACKAGE, environ: Mapping[str, str] | None = None) -> str | None:
    """Why the compiled modules must not be used (None: they may).

    Reads ``package_dir``'s hash file and hashes the sources; imports nothing.
    """
    env = os.environ if environ is None else environ
    if env.get(PURE_ENV, "").strip() == "1":
        return f"{PURE_ENV}=1"
    try:
        recorded = json.loads((package_dir / HASH_FILE).read_text(encoding="utf-8"))
        modules = recorded["modules"]
        shared = recorded.get("shared_library")
    except FileNotFoundError:
        return "not built"
    except (OSError, ValueError, KeyError, TypeError):
        return f"mgst/{HASH_FILE} is unreadable; rebuild with {REBUILD}"
    for module, src in built_sources(package_dir).items():
        shown = "mgst/" + src.relative_to(package_dir).as_posix()
        expected = modules.get(module) if isinstance(modules, dict) else None
        if expected is None:
            return f"the compiled build is stale, {module} was not compiled; rebuild with {REBUILD}"
        try:
            current = sha256_of(src)
        except OSError:
            return f"{shown} is missing"
        if current != expected:
            return f"the compiled build is stale, {shown} changed; rebuild with {REBUILD}"
        if not _extension_present(src.parent, src.stem):
            return f"the compiled extension of {shown} is missing; rebuild with {REBUILD}"
    if shared and not _extension_present(package_dir.parent, shared):
        return f"the compiled build's shared library {shared} is missing; rebuild with {REBUILD}"
    return None


def stray_extensions(package_dir: Path = _PACKAGE) -> list[Path]:
    """Extension files under ``package_dir`` of modules that are not compiled now (an earlier build's,
    in an editable tree, e.g. after a checkout without a rebuild): Python would import one in place of
    its source. setup.py deletes them before it builds; until then the guard loads their sources."""
    return [ext for ext, _ in _strays(package_dir)]


def _strays(package_dir: Path) -> list[tuple[Path, Path]]:
    """(extension file, its module's source) for each of :func:`stray_extensions`."""
    compiled = {source_path(m, package_dir) for m in COMPILED_MODULES}
    suffixes = sorted(importlib.machinery.EXTENSION_SUFFIXES, key=len, reverse=True)  # longest first
    stray = []
    for last in sorted({x.rsplit(".", 1)[-1] for x in suffixes}):  # "so", or "pyd"
        for ext in sorted(package_dir.rglob("*." + last)):
            suffix = next((x for x in suffixes if ext.name.endswith(x)), None)
            if suffix is None or not ext.is_file():
                continue
            source = ext.with_name(ext.name[: -len(suffix)] + ".py")
            if source not in compiled and source.is_file():
                stray.append((ext, source))
    return stray


def module_of(source: Path, package_dir: Path = _PACKAGE) -> str:
    """The module name of one of mgst's sources: ``.../mgst/core/state.py`` -> ``mgst.core.state``."""
    return ".".join(("mgst", *source.relative_to(package_dir).with_suffix("").parts))


class _SourceFinder:
    """First on sys.meta_path when the compiled build is not used (or stray extensions are there):
    loads the given modules from their .py sources (Python's own finder would prefer an extension
    file beside them). By default, the compiled modules."""

    def __init__(self, package_dir: Path, modules: tuple[str, ...] = COMPILED_MODULES):
        self.paths = {module: str(source_path(module, package_dir)) for module in modules}

    def find_spec(self, fullname, path=None, target=None):
        src = self.paths.get(fullname)
        if src is None:
            return None
        return importlib.util.spec_from_file_location(
            fullname, src, loader=importlib.machinery.SourceFileLoader(fullname, src)
        )


def _guard() -> None:
    """Decide, once per process, which build runs (``mgst/__init__.py`` calls this first)."""
    global _decided, _compiled, _reason
    if _decided:
        return  # once per process (a reload of mgst changes nothing)
    _decided = True
    _reason = decide()
    _compiled = _reason is None
    if not _compiled and _reason not in ("not built", f"{PURE_ENV}=1"):
        log.warning("mgst runs pure Python: %s", _reason)
    stray = tuple(module_of(source) for _, source in _strays(_PACKAGE))
    if stray:
        log.warning("mgst loads %s from source: an earlier build's extension is there; %s removes it",
                    ", ".join(stray), REBUILD)
    modules = stray if _compiled else COMPILED_MODULES + stray
    if modules:
        sys.meta_path.insert(0, _SourceFinder(_PACKAGE, modules))


def compiled() -> bool:
    """Whether the compiled modules run in this process."""
    return _compiled


def build() -> str:
    """Which build runs, for ``mgst --version``: "compiled: mypyc", "pure Python", or "pure Python: why"."""
    if _compiled:
        return "compiled: mypyc"
    if _reason is None or _reason == "not built":
        return "pure Python"
    return f"pure Python: {_reason}"
