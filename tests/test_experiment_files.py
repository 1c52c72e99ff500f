"""The shipped experiment files say what they hold, and docs/experiment-file.md lists every [simulation] and
[testbed] key with its default."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

import pytest

from mgst.config import load_experiment
from mgst.config.experiment import _SECTION_KEYS
from mgst.model import SimulationSettings, TestbedSettings

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = sorted((ROOT / "experiments").rglob("*.toml"))
WORDS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())}
MACHINES_SAID = re.compile(r"\b(\d+|[A-Za-z]+) (?:[a-z]+ )?machines\b")


def _description(path: Path) -> str:
    return str(tomllib.loads(path.read_text(encoding="utf-8")).get("experiment", {}).get("description", ""))


@pytest.mark.parametrize("path", [p for p in EXPERIMENTS if MACHINES_SAID.search(_description(p))],
                         ids=lambda p: p.relative_to(ROOT / "experiments").as_posix())
def test_a_description_gives_the_number_of_machines_the_file_has(path: Path):
    # lab-rrnrf-weibull said "20 heterogeneous machines"; its power draw (sum 200, seed 91) gives 19
    said = MACHINES_SAID.search(_description(path)).group(1)
    count = int(said) if said.isdigit() else WORDS[said.lower()]
    assert len(load_experiment(path).machines) == count, f"{path.name}: {_description(path)!r}"


def _documented_keys(table: str) -> dict[str, str]:
    """The table of ``[table]``'s keys in docs/experiment-file.md: key -> default as written (``none``: None)."""
    text = (ROOT / "docs" / "experiment-file.md").read_text(encoding="utf-8")
    section = text.split(f"## `[{table}]`", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^\| `(\w+)` \| `?([^`|]*?)`? \|", section, flags=re.MULTILINE))


@pytest.mark.parametrize("table, settings", [("testbed", TestbedSettings), ("simulation", SimulationSettings)])
def test_every_key_is_documented_with_its_default(table, settings):
    documented = _documented_keys(table)
    assert list(documented) == list(_SECTION_KEYS[table])  # what the reader accepts, in its order
    defaults = {f.name: f.default for f in dataclasses.fields(settings)}
    assert set(defaults) == set(documented)
    for key, written in documented.items():
        value = None if written == "none" else tomllib.loads(f"v = {written}")["v"]
        assert value == (list(defaults[key]) if isinstance(defaults[key], tuple) else defaults[key]), key


def test_a_documented_key_is_accepted_and_an_undocumented_one_refused(tmp_path: Path):
    base = (ROOT / "experiments" / "hihi-mfd-fd.toml").read_text(encoding="utf-8").split("[testbed]")[0]
    assert "[testbed]" not in base and "[simulation]" in base  # the file's own [testbed] (its last table) cut off
    given = tmp_path / "all.toml"
    given.write_text(base + '\n[testbed]\ntime_unit = 0.5\nduration = 60.0\ntimeout_factor = 2.0\n'
                            'executor = "spin"\ndetection = "timeout"\n', encoding="utf-8")
    tb = load_experiment(given).testbed
    assert (tb.time_unit, tb.duration, tb.timeout_factor, tb.executor, tb.detection) == (
        0.5, 60.0, 2.0, "spin", "timeout")
    bad = tmp_path / "bad.toml"
    bad.write_text(base + "\n[testbed]\ntime_units = 0.5\n", encoding="utf-8")
    with pytest.raises(Exception, match=r"testbed\.time_units.*unknown key"):
        load_experiment(bad)
