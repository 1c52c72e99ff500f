"""The line `mgst --version` prints, also what `mgst lab` compares with a host's."""

from __future__ import annotations

from mgst.build_info import build, installed_version


def version_line() -> str:
    """E.g. "mgst 0.1.0 (compiled: mypyc)" or "mgst 0.1.0 (pure Python: MGST_PURE=1)"."""
    return f"mgst {installed_version()} ({build()})"
