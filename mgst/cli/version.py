"""The line `mgst --version` prints, also what `mgst lab` compares with a host's."""

from __future__ import annotations


def version_number() -> str:
    """mgst's version as installed, e.g. "0.1.0"; "(not installed)" run from a source tree that is not."""
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version("mgst")
    except PackageNotFoundError:
        return "(not installed)"


def version_line() -> str:
    """E.g. "mgst 0.1.0 (compiled: mypyc)" or "mgst 0.1.0 (pure Python: MGST_PURE=1)"."""
    from mgst import build_info  # noqa: PLC0415

    return f"mgst {version_number()} ({build_info.build()})"
