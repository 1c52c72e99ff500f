"""The policy protocol (mgst.core.hooks): a policy declares its hooks, the core calls only those, and a
hook defined but not declared is refused when the Scheduler is made."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from helpers import make_core, new_core

from mgst import policies
from mgst.core import HOOKS, JobArrived, PolicyError, PolicyHooks, Scheduler
from mgst.core.hooks import declared_hooks
from mgst.model import Job, JobClass, Machine
from mgst.policies.base import Policy
from mgst.policies.fcfs import FCFS

ONE = [[1.0]]
CORE = Path(__file__).resolve().parent.parent / "mgst" / "core"


def test_a_hook_defined_but_not_declared_is_refused_when_the_scheduler_is_made():
    class Forgetful(FCFS):
        def on_event(self, view, event):
            return ()

    with pytest.raises(PolicyError, match=r"Forgetful defines on_event\(\) but does not declare it.*Forgetful.hooks"):
        new_core(Forgetful(), ONE)


def test_every_undeclared_hook_is_named():
    class Forgetful(Policy):
        hooks = frozenset({"choose"})

        def choose(self, view, machine):
            return None

        def start(self, view):
            return ()

        def on_replica_end(self, view, replica):
            return ()

    with pytest.raises(PolicyError, match=r"on_replica_end\(\), start\(\) but does not declare them"):
        new_core(Forgetful(), ONE)


def test_a_name_that_is_no_hook_is_refused():
    class Typo(FCFS):
        hooks = frozenset({"on_evnt"})

    with pytest.raises(PolicyError, match="Typo.hooks names on_evnt, which is not a hook"):
        new_core(Typo(), ONE)


def test_a_declared_hook_that_is_not_defined_is_refused():
    class Duck:  # not built on PolicyHooks: nothing is defined for it
        hooks = frozenset({"dispatch"})

    with pytest.raises(PolicyError, match=r"Duck declares dispatch\(\) but does not define it"):
        declared_hooks(Duck)


def test_a_subclass_adds_to_the_hooks_its_bases_declare():
    class Watching(FCFS):
        hooks = frozenset({"on_event"})
        seen: list

        def on_event(self, view, event):
            self.seen.append(type(event))
            return ()

        def choose(self, view, machine):  # declared by FCFS: no need to declare it again
            return super().choose(view, machine)

    assert declared_hooks(Watching) == {"on_event", "choose", "on_timer", "on_machine_silent", "on_machine_heard"}
    policy = Watching()
    policy.seen = []
    core = make_core(policy, ONE)
    core.machine_ready(0.0, 0)
    out = core.handle(1.0, JobArrived(_job(1)))
    assert policy.seen[-1] is JobArrived and [type(o).__name__ for o in out] == ["Assign"]


def test_the_core_calls_only_the_hooks_a_policy_declares(monkeypatch):
    calls = []
    monkeypatch.setattr(PolicyHooks, "on_capacity_change", lambda self, view: calls.append("capacity") or ())
    monkeypatch.setattr(PolicyHooks, "start", lambda self, view: calls.append("start") or ())

    class Declares(FCFS):  # declares them, and takes the defaults (spied on here)
        hooks = frozenset({"start", "on_capacity_change"})

    make_core(FCFS(), ONE)  # machines come up: the capacity changes
    assert calls == []
    make_core(Declares(), ONE)
    assert calls == ["start", "capacity"]


def test_a_policy_that_declares_neither_choose_nor_dispatch_is_never_given_work():
    class Idle(Policy):
        name = "test-idle"

    core = make_core(Idle(), ONE)
    core.job_arrived(0.0, _job(1))
    assert [type(o).__name__ for o in core.machine_ready(1.0, 0)] == ["Hold"]
    assert core.job_arrived(2.0, _job(2)) == [] and core.queued_count == 2 and core.is_ready(0)
    core.check_invariants()


@pytest.mark.parametrize("name", policies.names())
def test_every_built_in_policy_declares_what_it_defines(name):
    cls = policies.policy_class(name)
    hooks = declared_hooks(cls)
    assert hooks <= HOOKS and ("choose" in hooks or "dispatch" in hooks)
    Scheduler([JobClass("c", 1.0)], [Machine("M0", (1.0,))], cls(), check=True)


def test_the_core_imports_nothing_above_it():
    """No policy, driver, build machinery or I/O: mgst.core imports the standard library's pure modules,
    mypy_extensions, mgst.model (plain data) and itself."""
    allowed = {
        "__future__", "collections", "dataclasses", "enum", "bisect", "heapq", "importlib", "itertools", "logging",
        "math", "operator", "types", "typing", "mypy_extensions", "mgst.model",
    }
    for source in sorted(CORE.glob("*.py")):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.startswith("mgst.core") or name.split(".")[0] in allowed or name in allowed, (
                    f"{source.name} imports {name}"
                )


def _job(i: int) -> Job:
    return Job(i, 0, float(i))


def test_active_hooks_narrow_the_declared_ones_for_one_policy_object():
    class Listening(FCFS):
        hooks = frozenset({"on_event"})

        def __init__(self, listen: bool):
            super().__init__()
            self.listen = listen
            self.events = 0

        def active_hooks(self, declared):
            return declared if self.listen else declared - {"on_event"}

        def on_event(self, view, event):
            self.events += 1
            return ()

    for listen, calls in ((True, 1), (False, 0)):
        policy = Listening(listen)
        core = make_core(policy, ONE)
        policy.events = 0
        core.job_arrived(1.0, Job(1, 0, 1.0, 1.0))
        assert policy.events == calls


def test_active_hooks_may_not_add_an_undeclared_hook():
    class Greedy(FCFS):
        def active_hooks(self, declared):
            return declared | {"on_event"}

    with pytest.raises(PolicyError, match=r"Greedy.active_hooks\(\) returned hooks it does not declare: on_event"):
        new_core(Greedy(), ONE)
