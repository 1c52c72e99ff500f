"""``new_tuple(cls, items)``: ``tuple.__new__(cls, items)`` for the core's NamedTuples, in C where built.

A NamedTuple's own ``__new__`` is a Python function, so the core and the workload make theirs with
``tuple.__new__`` (the same object). From compiled code even that call costs about 550
instructions, in type-call and tp_new_wrapper; ``mgst._tuples.new_tuple`` makes the same object
from the items directly. It is used exactly when the compiled build runs (``mgst.build_info``), as
the C event heap is; ``MGST_PURE=1`` and a stale build use ``tuple.__new__`` itself.

This module is not compiled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mgst import build_info


def _choose() -> Callable[[Any, tuple], Any]:
    if build_info.compiled():
        from mgst._tuples import new_tuple as c_new_tuple  # noqa: PLC0415 (built with the compiled modules)

        return c_new_tuple  # type: ignore[no-any-return]
    return tuple.__new__


new_tuple: Callable[[Any, tuple], Any] = _choose()

__all__ = ["new_tuple"]
