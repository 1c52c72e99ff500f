"""Scenario generators: a seed paper's experiment grid as code, one cell at a time, for `mgst sweep`."""

from __future__ import annotations

from mgst.scenarios.scenario import BOT_MEASURES, Axis, CellFunction, Measures, RunSettings, Scenario

__all__ = ["BOT_MEASURES", "Axis", "CellFunction", "Measures", "RunSettings", "Scenario", "get", "names"]


def _registry() -> dict[str, Scenario]:
    from mgst.scenarios import anglano, kondo  # noqa: PLC0415 (a later seed adds its module here)

    return {s.name: s for s in (anglano.SCENARIO, kondo.SCENARIO)}


def names() -> list[str]:
    return sorted(_registry())


def get(name: str) -> Scenario:
    try:
        return _registry()[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(names())}") from None
