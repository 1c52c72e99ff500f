"""The line `mgst --version` prints, also what `mgst lab` compares with a host's."""

from __future__ import annotations


def version_line() -> str:
    """E.g. "mgst 0.1.0 (compiled: mypyc)" or "mgst 0.1.0 (pure Python: MGST_PURE=1)"."""
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    from mgst import build_info  # noqa: PLC0415

    try:
        number = version("mgst")
    except PackageNotFoundError:  # run from a source tree that is not installed
        number = "(not installed)"
    return f"mgst {number} ({build_info.build()})"
