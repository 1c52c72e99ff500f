"""``new_tuple(cls, *items)``: ``tuple.__new__(cls, items)`` for the core's NamedTuples, in C when compiled.

A NamedTuple's own ``__new__`` is a Python function, so the core and the workload make theirs with
``tuple.__new__`` (the same object). From compiled code even that call costs about 550
instructions, in type-call and tp_new_wrapper, after the caller has built a tuple of the items;
``mgst.core._tuples.new_tuple`` (``_tuples.c``, beside this module) makes the same object from its
arguments directly.

The core owns this helper and decides by looking at itself, not at the build machinery: the C
maker is used exactly when this module runs compiled by mypyc. The import guard
(``mgst.build_info``) lets the compiled modules run only together with fresh builds of every C
module, so a compiled core always finds a current ``_tuples``; ``MGST_PURE=1`` and a stale build
load this module from source, which then uses :func:`py_new_tuple`.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable
from typing import Any


def py_new_tuple(cls: Any, *items: Any) -> Any:
    """``tuple.__new__(cls, items)``: the C ``new_tuple``'s twin."""
    return tuple.__new__(cls, items)


def runs_compiled() -> bool:
    """Whether this module runs compiled (mypyc makes its functions native: not Python functions)."""
    return not isinstance(py_new_tuple, types.FunctionType)


def _choose() -> Callable[..., Any]:
    if runs_compiled():
        # A C extension with no .py source (built with the compiled modules): imported by name.
        c_new_tuple: Callable[..., Any] = importlib.import_module("mgst.core._tuples").new_tuple
        return c_new_tuple
    return py_new_tuple


new_tuple: Callable[..., Any] = _choose()

__all__ = ["new_tuple", "py_new_tuple", "runs_compiled"]
