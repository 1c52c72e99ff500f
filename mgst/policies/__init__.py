"""The policy registry: policy names as experiment files spell them, mapped to classes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Filled in as policy modules land; see register().
_REGISTRY: dict[str, type] = {}


def register(cls: type) -> type:
    """Class decorator: make a Policy subclass available under its ``name``."""
    name = getattr(cls, "name", "")
    if not name:
        raise ValueError(f"{cls.__qualname__} has no name")
    known = _REGISTRY.get(name)
    if known is not None and (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
        raise ValueError(f"policy name {name!r} is taken by {known.__module__}.{known.__qualname__}")
    _REGISTRY[name] = cls
    return cls


def import_modules(modules: list[str] | tuple[str, ...]) -> None:
    """Import modules that register policies of their own (``mgst simulate --import``)."""
    import importlib  # noqa: PLC0415

    for module in modules:
        importlib.import_module(module)


def names() -> list[str]:
    """Names of every registered policy, sorted."""
    _load_builtins()
    return sorted(_REGISTRY)


def policy_class(name: str) -> type:
    _load_builtins()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; known: {', '.join(names())}") from None


def check_options(name: str, options: Mapping[str, Any]) -> None:
    """Raise ValueError naming the option if ``options`` do not suit policy ``name``."""
    policy_class(name).Options.from_mapping(options)


def _load_builtins() -> None:
    # Imported lazily so that `mgst.policies.base` can import this module.
    from mgst.policies import fcfs, lpas, random_choice, wqr  # noqa: F401
