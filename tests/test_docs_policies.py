"""docs/policies.md: its worked examples are short, register, run and decide as described."""

from __future__ import annotations

import dataclasses
import math
import random
import re
import sys
import tomllib
import types
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import assigns, plain
from test_bot_policies import drive

from mgst import policies
from mgst.config import load_experiment
from mgst.core import Assign, BagCompleted, Cancel, Hold, Scheduler
from mgst.model import Bag, Job, JobClass, Machine, PolicySpec
from mgst.policies.base import Policy, PolicyOptions
from mgst.sim.replications import run_simulation

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "policies.md"
MODULE = "mgst_docs_policy_example"
BOT_MODULE = "mgst_docs_bot_policy_example"


def fenced_block(marker: str, language: str) -> str:
    """The code of the first fenced block that follows the HTML comment ``<!-- marker...-->``."""
    text = DOC.read_text(encoding="utf-8")
    pattern = rf"<!-- {re.escape(marker)}(?::[^>]*)? -->\s*```{language}[^\n]*\n(.*?)\n```"
    found = re.search(pattern, text, re.DOTALL)
    assert found, f"no ```{language} block after <!-- {marker} --> in {DOC}"
    return found.group(1)


def load_example(marker: str, module_name: str) -> Iterator[type[Policy]]:
    """The example after ``<!-- marker -->``, executed in a fresh module; its registry entry is removed afterwards."""
    policies.names()  # loads the built-ins, so that the snapshot holds them
    before = dict(policies._REGISTRY)
    module = types.ModuleType(module_name)
    sys.modules[module_name] = module  # dataclasses and typing.get_type_hints look the module up
    try:
        exec(compile(fenced_block(marker, "python"), f"{DOC}:{marker}", "exec"), module.__dict__)
        classes = [
            v for v in vars(module).values()
            if isinstance(v, type) and issubclass(v, Policy) and v.__module__ == module_name
        ]
        assert len(classes) == 1, classes
        cls = classes[0]
        assert cls.name and cls.name not in before, "the example must add a new policy name"
        yield cls
    finally:
        for name in set(policies._REGISTRY) - set(before):
            del policies._REGISTRY[name]
        policies._REGISTRY.update(before)
        sys.modules.pop(module_name, None)


@pytest.fixture(scope="module")
def example():
    """The worked example of section 8 (fastest class first)."""
    yield from load_example("policy-example", MODULE)


@pytest.fixture(scope="module")
def bot_example():
    """The worked Bag-of-Tasks example of section 9 (fewest remaining tasks first)."""
    yield from load_example("bot-policy-example", BOT_MODULE)


@pytest.mark.parametrize("marker", ["policy-example", "bot-policy-example"])
def test_example_is_under_40_lines(marker):
    lines = fenced_block(marker, "python").split("\n")
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
    assert plain(out) == [Assign(core.jobs[1].job, 0, replica=1, progress=0.0)]  # class b, though job 0 waited longer
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


# ---------------------------------------------------------------- the Bag-of-Tasks example (section 9)


def bot_core(example, n_machines: int = 3, seed: int = 0, **options) -> Scheduler:
    """Machines of rate 1, up and not asking; one task class."""
    policy = example(example.Options.from_mapping(options), random.Random(seed))
    core = Scheduler([JobClass("t", 0.0)], [Machine(f"M{j}", (1.0,)) for j in range(n_machines)], policy)
    core.start(0.0)
    for j in range(n_machines):
        core.machine_up(0.0, j)
    return core


def bag(bag_id: int, t: float, ids: list[int]) -> Bag:
    return Bag(bag_id, t, tuple(Job(i, 0, t, 1.0, bag_id) for i in ids))


def given(outputs) -> list[int]:
    return [a.job.id for a in assigns(outputs)]


def test_bot_example_registers_with_options(bot_example):
    assert policies.policy_class(bot_example.name) is bot_example
    assert bot_example.Options.__dataclass_params__.frozen
    assert bot_example(bot_example.Options.from_mapping({"replicas": 3})).max_replicas == 3
    with pytest.raises(ValueError, match=r"^replicas:"):
        bot_example.Options.from_mapping({"replicas": 0})
    with pytest.raises(ValueError, match=r"^nonsense: unknown option"):
        bot_example.Options.from_mapping({"nonsense": 1})


def test_bot_experiment_snippet_names_the_example(bot_example):
    section = tomllib.loads(fenced_block("bot-policy-example-experiment", "toml"))["policy"]
    assert section["name"] == bot_example.name
    bot_example.Options.from_mapping({k: v for k, v in section.items() if k != "name"})


def test_bot_example_serves_the_bag_with_fewest_unfinished_tasks(bot_example):
    core = bot_core(bot_example)
    core.bag_arrived(0.0, bag(1, 0.0, [1, 2, 3]))  # A: 3 unfinished tasks
    core.bag_arrived(1.0, bag(2, 1.0, [4]))  # B: 1
    assert given(core.machine_ready(2.0, 0)) == [4]  # B, though A is older
    assert given(core.machine_ready(3.0, 1)) == [4]  # B still: its task has 1 replica < 2
    assert given(core.machine_ready(4.0, 2)) == [1]  # B has no candidate: A, its head
    # Task 4's replica 1 (M0) finishes: replica 2 (M1) is cancelled, B completes, M0 asks
    # again and gets A's next waiting task.
    out = core.replica_done(5.0, 1, ready=True)
    assert [o for o in out if type(o) is Cancel] == [Cancel(2, 1, 4)]
    assert BagCompleted(2) in out
    assert given(out) == [2]
    core.check_invariants()


def test_bot_example_ties_go_to_the_older_bag_and_idle_machines_are_held(bot_example):
    core = bot_core(bot_example, n_machines=5)
    for j in range(5):
        assert core.machine_ready(0.0, j) == [Hold(j)]
    assert given(core.bag_arrived(1.0, bag(1, 1.0, [1]))) == [1, 1]  # RepThresh 2
    assert core.ready_count == 3
    out = core.bag_arrived(2.0, bag(2, 2.0, [2]))  # both bags have 1 unfinished task now
    # Bag 1's task already has 2 replicas (RepThresh): bag 2 gets the next two machines,
    # and the fifth stays held.
    assert given(out) == [2, 2]
    assert core.ready_count == 1
    fresh = bot_core(bot_example, n_machines=1)
    fresh.bag_arrived(0.0, bag(1, 0.0, [1]))
    fresh.bag_arrived(0.0, bag(2, 0.0, [2]))
    assert given(fresh.machine_ready(1.0, 0)) == [1]  # a tie on 1 unfinished task: the older bag


def test_bot_example_draws_the_machine_at_random(bot_example):
    first = Counter()
    for seed in range(100):
        core = bot_core(bot_example, n_machines=4, seed=seed)
        for j in range(4):
            core.machine_ready(0.0, j)
        first[assigns(core.bag_arrived(1.0, bag(1, 1.0, [1])))[0].machine] += 1
    assert set(first) == {0, 1, 2, 3}, first


def test_bot_example_runs_in_an_event_loop(bot_example):
    for seed in range(3):
        core, log = drive(bot_example(bot_example.Options(), random.Random(seed)), seed)
        assert all(b.completed is not None for b in core.all_bags.values())
