"""docs/policies.md's gang policy example: under 40 lines, and it decides and runs as the text says."""

from __future__ import annotations

import re
import types
from pathlib import Path

from iteration_fakes import Script

from mgst.core.iterations import Iterations
from mgst.sim.iterations import run_iterations

DOC = Path(__file__).resolve().parent.parent / "docs" / "policies.md"


def example() -> types.ModuleType:
    text = DOC.read_text(encoding="utf-8")
    code = re.search(r"<!-- gang-policy-example -->\s*```python\n(.*?)\n```", text, re.DOTALL)
    assert code, "no gang policy example"
    module = types.ModuleType("mgst_docs_gang_example")
    exec(compile(code.group(1), f"{DOC}:gang-policy-example", "exec"), module.__dict__)
    module.lines = len(code.group(1).splitlines())
    return module


def test_the_gang_policy_example_is_short_and_decides_as_described():
    mod = example()
    assert mod.lines < 40
    app = Iterations([3.0, 1.0, 2.0], 2, 1, 5.0, 1.0, 1, mod.FastestUp())
    run = run_iterations(app, [Script(), Script(), Script()], proactive=False)
    assert app.log[0].configuration == ((1, 1), (2, 1)) and run.makespan == 14.0


def test_the_gang_policy_example_runs_ten_iterations_on_markov_chains():
    assert example().simulate(1) > 10 * 2
