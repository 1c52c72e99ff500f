"""The scenario machinery of `mgst sweep`: what a scenario is (scenario), and the registry of the papers' scenarios.

Each paper's grid, as code, is its folder's scenario module (mgst/papers/<paper>/scenario.py).
"""

from __future__ import annotations

import importlib

from mgst.scenarios.scenario import BOT_MEASURES, Axis, CellFunction, Measures, RunSettings, Scenario

__all__ = ["BOT_MEASURES", "Axis", "CellFunction", "Measures", "RunSettings", "Scenario", "get", "names"]

# The papers' scenario modules, each with its SCENARIO (a later seed adds its module here). Imported by
# name, at the first use: the papers import this package's machinery, and mgst.papers sits above it.
_MODULES = ("mgst.papers.anglano.scenario", "mgst.papers.casanova.scenario", "mgst.papers.gridbot.scenario",
            "mgst.papers.kondo.scenario")


def _registry() -> dict[str, Scenario]:
    scenarios: list[Scenario] = [importlib.import_module(module).SCENARIO for module in _MODULES]
    return {s.name: s for s in scenarios}


def names() -> list[str]:
    return sorted(_registry())


def get(name: str) -> Scenario:
    try:
        return _registry()[name]
    except KeyError:
        raise KeyError(f"unknown scenario {name!r}; known: {', '.join(names())}") from None
