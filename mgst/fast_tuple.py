"""``new_tuple(cls, *items)``: ``tuple.__new__(cls, items)`` for the core's NamedTuples, in C where built.

A NamedTuple's own ``__new__`` is a Python function, so the core and the workload make theirs with
``tuple.__new__`` (the same object). From compiled code even that call costs about 550
instructions, in type-call and tp_new_wrapper, after the caller has built a tuple of the items;
``mgst._tuples.new_tuple`` makes the same object from its arguments directly. It is used exactly
when the compiled build runs (``mgst.build_info``), as the C event heap is; ``MGST_PURE=1`` and a
stale build use :func:`py_new_tuple`.

This module is not compiled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mgst import build_info


def py_new_tuple(cls: Any, *items: Any) -> Any:
    """``tuple.__new__(cls, items)``: the C ``new_tuple``'s twin."""
    return tuple.__new__(cls, items)


def _choose() -> Callable[..., Any]:
    if build_info.compiled():
        from mgst._tuples import new_tuple as c_new_tuple  # noqa: PLC0415 (built with the compiled modules)

        return c_new_tuple  # type: ignore[no-any-return]
    return py_new_tuple


new_tuple: Callable[..., Any] = _choose()

__all__ = ["new_tuple", "py_new_tuple"]
