"""Scenario generators: a seed paper's experiment grid as code, one cell at a time, for `mgst sweep`."""

from __future__ import annotations

from mgst.scenarios.scenario import Axis, RunSettings, Scenario

__all__ = ["Axis", "RunSettings", "Scenario", "get", "names"]


def _registry() -> dict[str, Scenario]:
    from mgst.scenarios import anglano  # noqa: PLC0415 (a later seed adds its module here)

    return {anglano.SCENARIO.name: anglano.SCENARIO}


def names() -> list[str]:
    return sorted(_registry())


def get(name: str) -> Scenario:
    try:
        return _registry()[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(names())}") from None
