"""docs/policies.md: its worked example is short, registers, runs in a simulation and decides as described."""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import tomllib
import types
from pathlib import Path

import pytest

from mgst import policies
from mgst.config import load_experiment
from mgst.core import Assign, Hold, Scheduler
from mgst.model import Job, JobClass, Machine, PolicySpec
from mgst.policies.base import Policy, PolicyOptions
from mgst.simulate import run_simulation

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "policies.md"
MODULE = "mgst_docs_policy_example"


def fenced_block(marker: str, language: str) -> str:
    """The code of the first fenced block that follows the HTML comment ``<!-- marker...-->``."""
    text = DOC.read_text(encoding="utf-8")
    pattern = rf"<!-- {re.escape(marker)}(?::[^>]*)? -->\s*```{language}[^\n]*\n(.*?)\n```"
    found = re.search(pattern, text, re.DOTALL)
    assert found, f"no ```{language} block after <!-- {marker} --> in {DOC}"
    return found.group(1)


@pytest.fixture(scope="module")
def example():
    """The worked example, executed in a fresh module; its registry entry is removed afterwards."""
    policies.names()  # loads the built-ins, so that the snapshot holds them
    before = dict(policies._REGISTRY)
    module = types.ModuleType(MODULE)
    sys.modules[MODULE] = module  # dataclasses and typing.get_type_hints look the module up
    try:
        exec(compile(fenced_block("policy-example", "python"), f"{DOC}:policy-example", "exec"), module.__dict__)
        classes = [
            v for v in vars(module).values()
            if isinstance(v, type) and issubclass(v, Policy) and v.__module__ == MODULE
        ]
        assert len(classes) == 1, classes
        cls = classes[0]
        assert cls.name and cls.name not in before, "the example must add a new policy name"
        yield cls
    finally:
        for name in set(policies._REGISTRY) - set(before):
            del policies._REGISTRY[name]
        policies._REGISTRY.update(before)
        sys.modules.pop(MODULE, None)


def test_example_is_under_40_lines():
    lines = fenced_block("policy-example", "python").split("\n")
    assert len(lines) < 40, len(lines)
    assert any(line.startswith("@register") for line in lines)


def test_example_registers_with_options(example):
    assert policies.policy_class(example.name) is example
    assert example.name in policies.names()
    assert issubclass(example.Options, PolicyOptions)
    assert dataclasses.is_dataclass(example.Options)
    assert example.Options.__dataclass_params__.frozen
    opts = example.Options.from_mapping({"tie_within": 0.1})
    assert opts.tie_within == 0.1
    with pytest.raises(ValueError, match=r"^tie_within:"):
        example.Options.from_mapping({"tie_within": 1.5})
    with pytest.raises(ValueError, match=r"^nonsense: unknown option"):
        example.Options.from_mapping({"nonsense": 1})


def test_experiment_snippet_names_the_example(example):
    section = tomllib.loads(fenced_block("policy-example-experiment", "toml"))["policy"]
    assert section["name"] == example.name
    example.Options.from_mapping({k: v for k, v in section.items() if k != "name"})


def test_example_runs_in_a_simulation(example):
    section = tomllib.loads(fenced_block("policy-example-experiment", "toml"))["policy"]
    options = {k: v for k, v in section.items() if k != "name"}
    exp = load_experiment(ROOT / "experiments" / "hihi-mfd-fd.toml")
    exp = dataclasses.replace(exp, policy=PolicySpec(example.name, options))
    summary, runs = run_simulation(exp, horizon=200, warmup=20, replications=2, workers=1)
    assert summary.policy == example.name
    assert summary.unfinished == 0
    assert all(r.unfinished == 0 for r in runs)
    assert summary.overall.jobs > 0
    assert math.isfinite(summary.overall.mean) and summary.overall.mean > 0


def tiny_core(example, **options) -> Scheduler:
    """Two classes, one machine M1 that runs class b five times as fast as class a."""
    policy = example(example.Options.from_mapping(options))
    core = Scheduler([JobClass("a", 1.0), JobClass("b", 1.0)], [Machine("M1", (1.0, 5.0))], policy)
    assert core.start(0.0) == []
    assert core.job_arrived(0.0, Job(0, 0, 0.0)) == []  # class a, waiting longer
    assert core.job_arrived(0.5, Job(1, 1, 0.5)) == []  # class b: nobody asks yet, both wait
    return core


def test_machine_takes_the_class_it_is_fastest_at(example):
    core = tiny_core(example)
    out = core.machine_ready(1.0, 0)
    assert out == [Assign(core.jobs[1].job, 0, replica=1, progress=0.0)]  # class b, though job 0 waited longer
    core.check_invariants()


def test_near_ties_go_to_the_longest_wait(example):
    core = tiny_core(example, tie_within=0.9)  # rates 1 and 5 are within 90 % of each other
    out = core.machine_ready(1.0, 0)
    assert [d.job.id for d in out if isinstance(d, Assign)] == [0]
    core.check_invariants()


def test_machine_with_nothing_to_take_is_held(example):
    policy = example()
    core = Scheduler([JobClass("a", 1.0)], [Machine("M1", (1.0,))], policy)
    core.start(0.0)
    assert core.machine_ready(0.0, 0) == [Hold(0)]
    out = core.job_arrived(1.0, Job(0, 0, 1.0))
    assert [d.job.id for d in out if isinstance(d, Assign)] == [0]
    core.check_invariants()
