"""Tests for mgst.config: the shipped experiment files and every validation rule."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil
import textwrap
import tomllib
from pathlib import Path
from types import MappingProxyType

import pytest

from mgst import config, model, policies
from mgst.config import ConfigError, load_experiment, parse_experiment
from mgst.config import checks as config_checks
from mgst.config.checks import overload_warning
from mgst.model import Experiment, FailureModel, SimulationSettings
from mgst.testbed.experiment_codec import from_plain, to_plain
from mgst.workload import make_workload

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"
FAKE_POLICIES = ["fcfs", "lpas_dg"]


@pytest.fixture(autouse=True)
def registry(monkeypatch):
    """Use the real policy registry when its modules exist, else a stand-in.

    Only "fcfs" and "lpas_dg" are assumed to exist; the stand-in accepts any
    options, except the marker option ``bad_option`` (for the error path).
    """
    try:
        policies.names()
    except ImportError:
        monkeypatch.setattr(policies, "names", lambda: list(FAKE_POLICIES))

        def check_options(name, options):
            if "bad_option" in options:
                raise ValueError(f"unknown option 'bad_option' for policy {name!r}")

        monkeypatch.setattr(policies, "check_options", check_options)


def write(tmp_path: Path, text: str, name: str = "exp.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


# A small valid file; tests substitute one section at a time.
BASE = {
    "workload": "[workload]\narrival_rates = [1.0, 2.0]\n",
    "machines": "[machines]\nrates = [[3.0, 4.0, 5.0], [6.0, 7.0, 8.0]]\n",
    "policy": '[policy]\nname = "lpas_dg"\n',
}


def toml(**sections: str) -> str:
    parts = {**BASE, **sections}
    if "policy" not in sections and re.search(r'kind = "(bag_list|bags|swf)"', sections.get("workload") or ""):
        parts["policy"] = '[policy]\nname = "fcfs"\n'  # (lpas_dg refuses a workload without arrival rates)
    return "\n".join(text for text in parts.values() if text)


def error_for(tmp_path: Path, text: str) -> ConfigError:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_experiment(path)
    err = info.value
    assert err.path == str(path)
    assert str(err) == f"{path}: {err.key}: {err.problem}"
    return err


# ------------------------------------------------------------------ shipped files

EXPECTED_FILES = sorted(
    f"{s}-{m}-{f}.toml"
    for s in ("hihi", "lohi", "hilo", "lolo")
    for m in ("mfd", "mpd")
    for f in ("fd", "fe")
)


def test_all_sixteen_settings_are_shipped():
    assert sorted(p.name for p in EXPERIMENTS.glob("*.toml")) == EXPECTED_FILES


@pytest.mark.parametrize("filename", EXPECTED_FILES)
def test_every_experiment_file_loads(filename):
    exp = load_experiment(EXPERIMENTS / filename)
    stem = filename.removesuffix(".toml")
    setting, dedication, failures = stem.split("-")
    assert exp.name == stem
    assert exp.policy.name == "lpas_dg"
    assert len(exp.classes) == 4
    assert len(exp.machines) == (6 if setting == "hihi" else 21)
    assert exp.simulation == SimulationSettings(1000.0, 100.0, 10, 1, None)
    assert exp.testbed.time_unit == 1.0 and exp.testbed.duration == 120.0
    if failures == "fe":
        assert exp.failures == FailureModel(mean_up=50.0, mean_down=2.0)
    else:
        assert exp.failures is None
    if dedication == "mfd":
        assert set(exp.availability) == {1.0}
    else:
        assert min(exp.availability) == 0.5
    if setting != "hihi":  # machines of one group share the group's rates
        for m in range(7, 21):
            assert exp.machines[m].rates == exp.machines[m - 7].rates


def test_hihi_matches_table_1():
    exp = load_experiment(EXPERIMENTS / "hihi-mfd-fd.toml")
    # Table 1 typed by hand, transposed: one row per machine, one entry per class.
    per_machine = {
        "M1": (2.0, 1.0, 1.0, 1.0),
        "M2": (2.0, 20.0, 20.0, 20.0),
        "M3": (2.0, 3.7, 9.4, 2.8),
        "M4": (2.0, 7.1, 3.7, 5.9),
        "M5": (2.0, 2.4, 7.2, 4.4),
        "M6": (2.0, 8.7, 2.7, 6.3),
    }
    assert {m.name: m.rates for m in exp.machines} == per_machine
    assert exp.rates[1] == (1.0, 20.0, 3.7, 7.1, 2.4, 8.7)  # class 2 as printed
    assert exp.arrival_rates == (2.25, 4.50, 7.20, 12.60)
    assert [c.name for c in exp.classes] == ["1", "2", "3", "4"]
    assert exp.availability == (1.0,) * 6


def test_hihi_mpd_availability():
    exp = load_experiment(EXPERIMENTS / "hihi-mpd-fe.toml")
    assert exp.availability == (1.0, 1.0, 1.0, 0.5, 0.5, 0.5)


def test_lohi_mpd_machines():
    exp = load_experiment(EXPERIMENTS / "lohi-mpd-fd.toml")
    m = {mach.name: mach for mach in exp.machines}
    assert m["M11"].availability == 0.5
    assert m["M12"].availability == 0.75
    assert m["M8"].rates == (2.20, 1.95, 2.00, 2.05)  # group 1 of Table 3
    assert m["M8"].availability == 1.0
    half = {name for name, mach in m.items() if mach.availability == 0.5}
    three_quarters = {name for name, mach in m.items() if mach.availability == 0.75}
    assert half == {"M2", "M11", "M19"}
    assert three_quarters == {"M3", "M12", "M20"}
    assert exp.arrival_rates == (22.5, 22.5, 18.0, 18.0)


def test_hilo_and_lolo_spot_values():
    hilo = load_experiment(EXPERIMENTS / "hilo-mfd-fd.toml")
    assert hilo.arrival_rates == (10.50, 21.00, 26.25, 26.25)
    assert hilo.machines[20].rates == (2.25, 3.95, 6.05, 10.00)  # M21: group 7
    lolo = load_experiment(EXPERIMENTS / "lolo-mpd-fd.toml")
    assert lolo.arrival_rates == (18.00, 20.25, 15.75, 22.50)
    assert lolo.machines[4].rates == (4.70, 5.00, 4.90, 5.25)  # M5: group 5
    # The paper prints 0.5 for both triples in LoLo (likely a typo); shipped as printed.
    assert {mach.name for mach in lolo.machines if mach.availability == 0.5} == {
        "M2",
        "M3",
        "M11",
        "M12",
        "M19",
        "M20",
    }


# ------------------------------------------------------------------ a valid file


def test_defaults_and_full_file(tmp_path):
    exp = load_experiment(write(tmp_path, toml(), "my-run.toml"))
    assert exp.name == "my-run"
    assert exp.description == ""
    assert [c.name for c in exp.classes] == ["1", "2"]
    assert [m.name for m in exp.machines] == ["M1", "M2", "M3"]
    assert exp.machines[1].rates == (4.0, 7.0)
    assert exp.availability == (1.0, 1.0, 1.0)
    assert exp.failures is None
    assert exp.simulation == SimulationSettings()
    assert exp.testbed == model.TestbedSettings()
    assert dict(exp.policy.options) == {}

    text = toml(
        experiment='[experiment]\nname = "named"\ndescription = "d"\n',
        workload='[workload]\narrival_rates = [1, 2]\nclass_names = ["a", "b"]\n',
        machines=(
            "[machines]\nrates = [[3, 4, 5], [6, 7, 8]]\n"
            'availability = [1, 0.5, 0.25]\nnames = ["x", "y", "z"]\n'
        ),
        failures="[failures]\nmean_up = 50\nmean_down = 2.0\n",
        simulation=(
            "[simulation]\nhorizon = 10\nwarmup = 0\nreplications = 1\nseed = 0\n"
            "checkpoint_interval = 0.5\n"
        ),
        testbed="[testbed]\ntime_unit = 0.1\nduration = 30\ntimeout_factor = 2\n",
    )
    exp = load_experiment(write(tmp_path, text))
    assert exp.name == "named" and exp.description == "d"
    assert [c.name for c in exp.classes] == ["a", "b"]
    assert exp.arrival_rates == (1.0, 2.0)
    assert all(isinstance(x, float) for row in exp.rates for x in row)
    assert exp.availability == (1.0, 0.5, 0.25)
    assert exp.failures == FailureModel(50.0, 2.0)
    assert exp.simulation == SimulationSettings(10.0, 0.0, 1, 0, 0.5)
    assert exp.testbed == model.TestbedSettings(0.1, 30.0, 2.0)


def test_policy_options_are_passed_read_only(tmp_path, monkeypatch):
    seen = {}

    def check_options(name, options):
        seen[name] = dict(options)

    monkeypatch.setattr(policies, "check_options", check_options)
    text = toml(policy='[policy]\nname = "fcfs"\nperiod = 5.0\nmode = "x"\n')
    exp = load_experiment(write(tmp_path, text))
    assert exp.policy.name == "fcfs"
    assert seen == {"fcfs": {"period": 5.0, "mode": "x"}}
    assert isinstance(exp.policy.options, MappingProxyType)
    assert dict(exp.policy.options) == {"period": 5.0, "mode": "x"}


def test_parse_experiment_without_path():
    data = {
        "workload": {"arrival_rates": [1.0]},
        "machines": {"rates": [[2.0]]},
        "policy": {"name": "lpas_dg"},
    }
    assert parse_experiment(data, "n").name == "n"
    data["simulation"] = {"horizn": 5}
    with pytest.raises(ConfigError) as info:
        parse_experiment(data, "n")
    assert info.value.path is None
    assert str(info.value) == "simulation.horizn: unknown key (did you mean 'horizon'?)"


# ------------------------------------------------------------------ validation errors

# (sections to substitute, expected key, fragments the message must contain)
CASES = [
    pytest.param(
        {
            "machines": "[machines]\nrates = [[1, 2, 3], [4, 5, 6]]\navailability = [1, 1]\n"
        },
        "machines.availability",
        ["has 2 entries", "machines.rates has 3 columns (one per machine)"],
        id="availability-length",
    ),
    pytest.param(
        {"machines": "[machines]\nrates = [[1, 2, 3], [4, 5, -1.0]]\n"},
        "machines.rates[1][2]",
        ["must be a positive number, got -1.0"],
        id="negative-rate",
    ),
    pytest.param(
        {"machines": "[machines]\nrates = [[1, 2, 3], [4, 0, 6]]\n"},
        "machines.rates[1][1]",
        ["must be a positive number, got 0"],
        id="zero-rate",
    ),
    pytest.param(
        {"machines": "[machines]\nrates = [[1, 2, 3], [4, true, 6]]\n"},
        "machines.rates[1][1]",
        ["must be a positive number", "boolean"],
        id="bool-rate",
    ),
    pytest.param(
        {"machines": '[machines]\nrates = [[1, 2, 3], [4, "5", 6]]\n'},
        "machines.rates[1][1]",
        ["must be a positive number", "'5'"],
        id="string-rate",
    ),
    pytest.param(
        {"workload": "[workload]\narrival_rates = [1, 2, 3]\n"},
        "workload.arrival_rates",
        ["has 3 entries but machines.rates has 2 rows (one per class)"],
        id="arrival-rates-length",
    ),
    pytest.param(
        {"machines": "[machines]\nrates = [[1, 2, 3], [4, 5]]\n"},
        "machines.rates[1]",
        ["has 2 entries, where row 0 has 3 (one per machine)"],
        id="ragged-rates",
    ),
    pytest.param(  # the row that differs from most is blamed (it was row 1, "expected 2 like row 0")
        {"workload": "[workload]\narrival_rates = [1, 2, 3]\n",
         "machines": "[machines]\nrates = [[1, 2], [4, 5, 6], [7, 8, 9]]\n"},
        "machines.rates[0]",
        ["has 2 entries, where 2 of the 3 rows have 3 (one per machine)"],
        id="ragged-rates-first-row",
    ),
    pytest.param(
        {"workload": "[workload]\narrival_rates = [1, 2, 3]\n",
         "machines": "[machines]\nrates = [[1, 2], [4, 5], [7]]\n"},
        "machines.rates[2]",
        ["has 1 entry, where 2 of the 3 rows have 2"],
        id="ragged-rates-one-entry",
    ),
    pytest.param(
        {"machines": "[machines]\nrates = [1, 2, 3]\n"},
        "machines.rates[0]",
        ["must be a list"],
        id="rates-not-matrix",
    ),
    pytest.param(
        {"machines": "[machines]\nrates = []\n"},
        "machines.rates",
        ["non-empty"],
        id="rates-empty",
    ),
    pytest.param(
        {"machines": "[machines]\navailability = [1.0]\n"},
        "machines.rates",
        ["missing"],
        id="rates-missing",
    ),
    pytest.param(
        {"workload": "[workload]\narrival_rates = [1, -2]\n"},
        "workload.arrival_rates[1]",
        ["must be a positive number, got -2"],
        id="arrival-rate-negative",
    ),
    pytest.param(
        {"workload": "[workload]\narrival_rates = 1.0\n"},
        "workload.arrival_rates",
        ["must be a list"],
        id="arrival-rates-scalar",
    ),
    pytest.param(
        {"workload": '[workload]\narrival_rates = [1, 2]\nclass_names = ["a", "a"]\n'},
        "workload.class_names",
        ["duplicate name 'a'"],
        id="class-names-duplicate",
    ),
    pytest.param(
        {"workload": '[workload]\narrival_rates = [1, 2]\nclass_names = ["a"]\n'},
        "workload.class_names",
        ["has 1 entries", "2"],
        id="class-names-length",
    ),
    pytest.param(
        {"machines": BASE["machines"] + "availability = [1, 1.5, 1]\n"},
        "machines.availability[1]",
        ["must be a number in (0, 1], got 1.5"],
        id="availability-above-1",
    ),
    pytest.param(
        {"machines": BASE["machines"] + "availability = [1, 0, 1]\n"},
        "machines.availability[1]",
        ["in (0, 1]"],
        id="availability-zero",
    ),
    pytest.param(
        {"machines": BASE["machines"] + 'names = ["A", "B", "A"]\n'},
        "machines.names",
        ["duplicate name 'A'"],
        id="machine-names-duplicate",
    ),
    pytest.param(
        {"simulation": "[simulation]\nhorizon = 1979-05-27\n"},
        "simulation.horizon",
        ["1979-05-27 (a date)"],
        id="horizon-a-date",
    ),
    pytest.param(
        {"machines": BASE["machines"] + 'names = ["A", "B", "a"]\n'},
        "machines.names",
        ["differ only in case, 'A' and 'a' (entries 0 and 2)"],
        id="machine-names-differ-in-case",
    ),
    pytest.param(
        {"machines": BASE["machines"] + 'names = ["A", "B", "A "]\n'},
        "machines.names[2]",
        ["must not begin or end with a space"],
        id="machine-name-trailing-space",
    ),
    pytest.param(
        {"experiment": '[experiment]\nname = "../../elsewhere"\n'},
        "experiment.name",
        ["names the run's folder", "no '/'"],
        id="experiment-name-a-path",
    ),
    pytest.param(
        {"experiment": '[experiment]\nname = "/tmp/x"\n'},
        "experiment.name",
        ["names the run's folder"],
        id="experiment-name-absolute",
    ),
    pytest.param(
        {"experiment": '[experiment]\nname = "a\\nb"\n'},
        "experiment.name",
        ["must be printable text"],
        id="experiment-name-line-break",
    ),
    pytest.param(
        {"experiment": '[experiment]\nname = "a\\u0000b"\n'},
        "experiment.name",
        ["must be printable text"],
        id="experiment-name-nul",
    ),
    pytest.param(
        {"experiment": f'[experiment]\nname = "{"x" * 5000}"\n'},
        "experiment.name",
        ["has 5000 characters; at most 64"],
        id="experiment-name-too-long",
    ),
    pytest.param(
        {"machines": BASE["machines"] + 'names = ["A", "B"]\n'},
        "machines.names",
        ["has 2 entries but machines.rates has 3 columns"],
        id="machine-names-length",
    ),
    pytest.param(
        {"machines": BASE["machines"] + f'names = ["A", "{"B" * 100_000}", "C"]\n'},
        "machines.names[1]",
        ["has 100000 characters; at most 64 are allowed"],
        id="machine-name-too-long",
    ),
    pytest.param(
        {"workload": BASE["workload"] + f'class_names = ["{"x" * 65}", "y"]\n'},
        "workload.class_names[0]",
        ["has 65 characters; at most 64 are allowed"],
        id="class-name-too-long",
    ),
    pytest.param(
        {"failures": "[failures]\nmean_up = 50.0\n"},
        "failures.mean_down",
        ["missing"],
        id="failures-missing-key",
    ),
    pytest.param(
        {"failures": "[failures]\nmean_up = 50.0\nmean_down = -2\n"},
        "failures.mean_down",
        ["must be a positive number, got -2"],
        id="failures-negative",
    ),
    pytest.param(
        {"simulation": "[simulation]\nreplications = 2.5\n"},
        "simulation.replications",
        ["must be an integer, got 2.5"],
        id="replications-float",
    ),
    pytest.param(
        {"simulation": "[simulation]\nreplications = 0\n"},
        "simulation.replications",
        [">= 1"],
        id="replications-zero",
    ),
    pytest.param(
        {"simulation": "[simulation]\nseed = true\n"},
        "simulation.seed",
        ["must be an integer", "boolean"],
        id="seed-bool",
    ),
    pytest.param(
        {"simulation": "[simulation]\nseed = -1\n"},
        "simulation.seed",
        [">= 0"],
        id="seed-negative",
    ),
    pytest.param(
        {"simulation": "[simulation]\nhorizon = 0\n"},
        "simulation.horizon",
        ["must be a positive number"],
        id="horizon-zero",
    ),
    pytest.param(
        {"simulation": "[simulation]\nhorizon = 100\nwarmup = 100\n"},
        "simulation.warmup",
        ["less than simulation.horizon"],
        id="warmup-too-long",
    ),
    pytest.param(  # a horizon no longer than the default warm-up (200): say that the warm-up is the default
        {"simulation": "[simulation]\nhorizon = 100\n"},
        "simulation.warmup",
        ["less than simulation.horizon (100), got 200 (its default: give a smaller one)"],
        id="warmup-default-too-long",
    ),
    pytest.param(
        {"simulation": "[simulation]\nwarmup = -1\n"},
        "simulation.warmup",
        [">= 0"],
        id="warmup-negative",
    ),
    pytest.param(
        {"simulation": "[simulation]\ncheckpoint_interval = 0\n"},
        "simulation.checkpoint_interval",
        ["must be a positive number"],
        id="checkpoint-zero",
    ),
    pytest.param(
        {"simulation": "[simulation]\nhorizn = 10.0\n"},
        "simulation.horizn",
        ["unknown key (did you mean 'horizon'?)"],
        id="unknown-key-suggestion",
    ),
    pytest.param(
        {"testbed": "[testbed]\ntime_unit = -1\n"},
        "testbed.time_unit",
        ["must be a positive number"],
        id="time-unit-negative",
    ),
    pytest.param(
        {"testbed": "[testbed]\ntimeout_factr = 2\n"},
        "testbed.timeout_factr",
        ["unknown key", "'timeout_factor'"],
        id="testbed-unknown-key",
    ),
    pytest.param(
        {"experiment": "[experiment]\nname = 3\n"},
        "experiment.name",
        ["must be a string"],
        id="name-not-string",
    ),
    pytest.param(
        {"extra": "[simulaton]\nhorizon = 1.0\n"},
        "simulaton",
        ["unknown key (did you mean 'simulation'?)"],
        id="unknown-section",
    ),
    pytest.param(
        {"extra": "[zzz]\nq = 1\n"},
        "zzz",
        ["unknown key"],
        id="unknown-section-no-suggestion",
    ),
    pytest.param(
        {"workload": ""},
        "workload",
        ["missing required section [workload]"],
        id="workload-missing",
    ),
    pytest.param(
        {"policy": "[policy]\nperiod = 1\n"},
        "policy.name",
        ["missing"],
        id="policy-name-missing",
    ),
]


@pytest.mark.parametrize(("sections", "key", "fragments"), CASES)
def test_validation_errors(tmp_path, sections, key, fragments):
    err = error_for(tmp_path, toml(**sections))
    assert err.key == key
    for fragment in fragments:
        assert fragment in err.problem, err.problem


def test_unknown_key_without_close_match_has_no_suggestion(tmp_path):
    err = error_for(tmp_path, toml(simulation="[simulation]\nqqq = 1\n"))
    assert err.key == "simulation.qqq"
    assert err.problem == "unknown key"


@pytest.mark.parametrize("section", ["failures", "simulation", "workload", "policy"])
def test_section_that_is_not_a_table(tmp_path, section):
    err = error_for(tmp_path, f"{section} = 3\n" + toml(**{section: ""}))
    assert err.key == section
    assert err.problem == f"must be a table ([{section}]), got 3"


def test_top_level_key_that_belongs_in_a_section(tmp_path):
    err = error_for(tmp_path, "horizon = 5.0\n" + toml())
    assert err.key == "horizon"
    assert "simulation.horizon" in err.problem


def test_unknown_policy(tmp_path):
    err = error_for(tmp_path, toml(policy='[policy]\nname = "lpas"\n'))
    assert err.key == "policy.name"
    known = policies.names()
    assert err.problem == f"unknown policy 'lpas' (did you mean 'lpas_dg'?); known: {', '.join(known)}"
    assert "lpas_dg" in known and "fcfs" in known
    err = error_for(tmp_path, toml(policy='[policy]\nname = "secf"\n'))  # (nothing close: one's own?)
    assert err.problem == (f"unknown policy 'secf' (a policy of your own: --import the module that registers it, its "
                           f"class decorated with @register and its name that one); known: {', '.join(known)}")


def test_unknown_policy_with_stand_in_registry(tmp_path, monkeypatch):
    monkeypatch.setattr(
        policies, "names", lambda: ["fcfs", "lpas_dg", "random", "wqr_ft"]
    )
    err = error_for(tmp_path, toml(policy='[policy]\nname = "lpas"\n'))
    assert str(err).endswith(
        "policy.name: unknown policy 'lpas' (did you mean 'lpas_dg'?); known: fcfs, lpas_dg, random, wqr_ft"
    )


def test_bad_policy_option_names_the_option(tmp_path, monkeypatch):
    def check_options(name, options):
        raise ValueError(f"{name}: option 'bad_option' must be a number, got 'x'")

    monkeypatch.setattr(policies, "check_options", check_options)
    text = toml(policy='[policy]\nname = "lpas_dg"\nbad_option = "x"\nperiod = 2.0\n')
    err = error_for(tmp_path, text)
    assert err.key == "policy.bad_option"
    assert "must be a number" in err.problem


def test_bad_policy_option_without_a_name_falls_back_to_policy(tmp_path, monkeypatch):
    def check_options(name, options):
        raise ValueError("these options do not go together")

    monkeypatch.setattr(policies, "check_options", check_options)
    err = error_for(tmp_path, toml(policy='[policy]\nname = "fcfs"\na = 1\nb = 2\n'))
    assert err.key == "policy"
    assert err.problem == "these options do not go together"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("[workload]\narrival_rates = [1.0, 2.0\n", "line 3, column 1"),
        ("[workload]\narrival_rates = = 1\n", "line 2, column 17"),
        ("[workload]\n[workload]\n", "line 2"),
    ],
)
def test_toml_syntax_error(tmp_path, text, where):
    err = error_for(tmp_path, text)
    assert err.key == "(file)"
    assert err.problem.startswith("TOML syntax error: ")
    assert where in err.problem


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_experiment(tmp_path / "nope.toml")
    assert info.value.key == "(file)"
    assert "no such file" in info.value.problem


def test_config_error_str():
    assert str(ConfigError("a.b", "bad")) == "a.b: bad"
    assert str(ConfigError("a.b", "bad", "f.toml")) == "f.toml: a.b: bad"
    assert isinstance(ConfigError("a", "b"), ValueError)


# ------------------------------------------------------------------ overload warning


@pytest.fixture
def solver():
    """The allocation LP is written elsewhere; skip (not fail) until it lands."""
    return pytest.importorskip("mgst.policies.allocation")


def single_machine(tmp_path, alpha: float, failures: str = "") -> Experiment:
    text = (
        f"[workload]\narrival_rates = [{alpha!r}]\n"
        "[machines]\nrates = [[1.0]]\n"
        '[policy]\nname = "lpas_dg"\n' + failures
    )
    return load_experiment(write(tmp_path, text))


def test_no_overload_warning_for_the_paper_settings(solver):
    for filename in EXPECTED_FILES:
        assert overload_warning(load_experiment(EXPERIMENTS / filename)) is None, (
            filename
        )


def test_overload_warning_message(tmp_path, solver):
    exp = single_machine(tmp_path, 1 / 0.93)
    message = overload_warning(exp)
    assert message is not None
    assert "lambda* = 0.93 <= 1" in message
    assert "107.5 % of capacity" in message
    assert "failure" not in message


def test_overload_warning_scales_availability_by_up_fraction(tmp_path, solver):
    failures = "[failures]\nmean_up = 50.0\nmean_down = 2.0\n"
    assert overload_warning(single_machine(tmp_path, 0.98)) is None  # lambda* = 1.02
    message = overload_warning(
        single_machine(tmp_path, 0.98, failures)
    )  # lambda* = 0.981
    assert message is not None
    assert "lambda* = 0.98 <= 1" in message
    assert "up fraction" in message and "0.962" in message


def test_an_overload_of_hundreds_of_digits_is_written_in_a_few(tmp_path, solver):
    # failures every 1e-300 time units: the load was written out in full, some 300 digits
    failures = "[failures]\nmean_up = 1e-300\nmean_down = 1.0\n"
    message = overload_warning(single_machine(tmp_path, 0.98, failures))
    assert message is not None and len(message) < 300, message
    assert re.search(r"the load is [\d.]+e\+\d+ % of capacity", message), message


def test_module_exports():
    assert set(config.__all__) == {
        "MAX_DURATION",
        "MAX_JOBS",
        "MAX_RATE",
        "MAX_REPLICATIONS",
        "MAX_SEED",
        "MAX_TIME",
        "MAX_TIME_UNIT",
        "MAX_WORKERS",
        "MIN_RATE",
        "MIN_TIME_UNIT",
        "SEED_RULE",
        "ConfigError",
        "load_experiment",
        "parse_experiment",
    }
    assert set(config_checks.__all__) == {"check_run_length", "check_sweep_run_length", "check_testbed_overrides",
                                          "overload_warning", "simultaneous_bags_warning"}


# ------------------------------------------------------------------ bounds: no traceback, no endless run

# (sections to substitute, expected key, fragments the message must contain)
BOUNDS = [
    pytest.param(
        {"workload": "[workload]\narrival_rates = [1e300, 2.0]\n"},
        "workload.arrival_rates[0]",
        ["must be between 0.0001 and 10000 jobs per time unit, got 1e+300"],
        id="arrival-rate-huge",
    ),
    pytest.param(
        {"workload": "[workload]\narrival_rates = [1.0, 1e-300]\n"},
        "workload.arrival_rates[1]",
        ["between 0.0001 and 10000", "got 1e-300"],
        id="arrival-rate-tiny",
    ),
    pytest.param(
        {"workload": "[workload]\narrival_rates = [1.0, inf]\n"},
        "workload.arrival_rates[1]",
        ["must be a positive number, got inf"],
        id="arrival-rate-inf",
    ),
    pytest.param(
        {"machines": "[machines]\nrates = [[3, 4, 5], [6, 1e20, 8]]\n"},
        "machines.rates[1][1]",
        ["between 0.0001 and 10000", "got 1e+20"],
        id="machine-rate-huge",
    ),
    pytest.param(
        {"machines": "[machines]\nrates = [[3, 4, nan], [6, 7, 8]]\n"},
        "machines.rates[0][2]",
        ["must be a positive number, got nan"],
        id="machine-rate-nan",
    ),
    pytest.param(
        {"simulation": "[simulation]\nhorizon = 1e300\n"},
        "simulation.horizon",
        ["1e+300 time units x total arrival rate 3 imply 3e+300 jobs per replication", "at most 1e+07"],
        id="horizon-huge",
    ),
    pytest.param(
        {"simulation": "[simulation]\nhorizon = 4e6\n"},
        "simulation.horizon",
        ["imply 1.2e+07 jobs per replication", "MAX_JOBS"],
        id="horizon-too-many-jobs",
    ),
    pytest.param(
        {"workload": "[workload]\narrival_rates = [5000, 5000]\n"},
        "simulation.horizon",
        ["2000 time units (the default) x total arrival rate 10000 imply 2e+07 jobs"],
        id="default-horizon-too-many-jobs",
    ),
    pytest.param(
        {"simulation": "[simulation]\nhorizon = inf\n"},
        "simulation.horizon",
        ["must be a positive number, got inf"],
        id="horizon-inf",
    ),
    pytest.param(
        {"simulation": "[simulation]\nwarmup = nan\n"},
        "simulation.warmup",
        ["must be a number, got nan"],
        id="warmup-nan",
    ),
    pytest.param(
        {"simulation": "[simulation]\ncheckpoint_interval = 1e-300\n"},
        "simulation.checkpoint_interval",
        ["a checkpoint every 1e-300 time units", "checkpoints per replication", "at most 1e+07"],
        id="checkpoint-interval-tiny",
    ),
    pytest.param(
        {"simulation": "[simulation]\ncheckpoint_interval = 1e300\n"},
        "simulation.checkpoint_interval",
        ["must be at most 1e+09 time units, got 1e+300"],
        id="checkpoint-interval-huge",
    ),
    pytest.param(
        {"failures": "[failures]\nmean_up = 1e-300\nmean_down = 1e-300\n"},
        "failures.mean_up",
        ["mean_up + mean_down = 2e-300", "on 3 machines imply 3e+303 failure cycles per replication"],
        id="failures-too-frequent",
    ),
    pytest.param(
        {"failures": "[failures]\nmean_up = 1e300\nmean_down = 2\n"},
        "failures.mean_up",
        ["must be at most 1e+09 time units, got 1e+300"],
        id="failures-mean-up-huge",
    ),
    pytest.param(
        {"failures": "[failures]\nmean_up = 50\nmean_down = inf\n"},
        "failures.mean_down",
        ["must be a positive number, got inf"],
        id="failures-mean-down-inf",
    ),
    pytest.param(
        {"testbed": "[testbed]\nduration = 1e300\n"},
        "testbed.duration",
        ["must be at most 2.592e+06 s, got 1e+300"],
        id="duration-huge",
    ),
    pytest.param(
        {"testbed": "[testbed]\nduration = 2e6\ntime_unit = 0.1\n"},
        "testbed.duration",
        ["2e+07 time units (2e+06 s / 0.1 s each) x total arrival rate 3 imply 6e+07 jobs in the testbed run"],
        id="testbed-too-many-jobs",
    ),
    pytest.param(
        {"workload": "[workload]\narrival_rates = [4e4, 5e4]\n", "simulation": "[simulation]\nhorizon = 1\n"},
        "workload.arrival_rates[0]",
        ["between"],
        id="rates-checked-before-run-length",
    ),
    pytest.param(
        {"testbed": "[testbed]\ntime_unit = 1e-300\n"},
        "testbed.time_unit",
        ["must be between 0.001 and 86400 s, got 1e-300"],
        id="time-unit-tiny",
    ),
    pytest.param(
        {"testbed": "[testbed]\ntime_unit = nan\n"},
        "testbed.time_unit",
        ["must be a positive number, got nan"],
        id="time-unit-nan",
    ),
    pytest.param(
        {"testbed": "[testbed]\ntime_unit = 1e6\n"},
        "testbed.time_unit",
        ["must be between 0.001 and 86400 s, got 1e+06"],
        id="time-unit-huge",
    ),
    pytest.param(
        {
            "failures": "[failures]\nmean_up = 1e-6\nmean_down = 1e-6\n",
            "simulation": "[simulation]\nhorizon = 1\nwarmup = 0\n",
        },
        "failures.mean_up",
        ["over 120 time units (120 s / 1 s each, the defaults) on 3 machines imply 1.8e+08 failure cycles in the "
         "testbed run"],
        id="failures-too-frequent-in-testbed",
    ),
]


@pytest.mark.parametrize(("sections", "key", "fragments"), BOUNDS)
def test_out_of_bounds_values_name_the_key(tmp_path, sections, key, fragments):
    err = error_for(tmp_path, toml(**sections))
    assert err.key == key, err
    for fragment in fragments:
        assert fragment in err.problem, err.problem


def test_values_at_the_bounds_load(tmp_path):
    text = toml(
        workload=f"[workload]\narrival_rates = [{config.MIN_RATE!r}, {config.MAX_RATE!r}]\n",
        machines=f"[machines]\nrates = [[{config.MAX_RATE!r}], [{config.MIN_RATE!r}]]\n",
        simulation=f"[simulation]\nhorizon = {config.MAX_JOBS / (config.MIN_RATE + config.MAX_RATE)!r}\n",
        testbed=f"[testbed]\nduration = 900.0\ntime_unit = {config.MAX_TIME_UNIT!r}\n",
        failures=f"[failures]\nmean_up = {config.MAX_TIME!r}\nmean_down = {config.MAX_TIME!r}\n",
    )
    exp = load_experiment(write(tmp_path, text))
    assert exp.arrival_rates == (config.MIN_RATE, config.MAX_RATE)
    assert overload_warning(exp) is not None  # and the allocation LP solves


def test_a_file_with_absurd_arrival_rates_gives_a_config_error_not_a_solver_traceback(tmp_path):
    path = write(tmp_path, toml(workload="[workload]\narrival_rates = [1e300, 1e300]\n"))
    with pytest.raises(ConfigError) as info:
        overload_warning(load_experiment(path))
    assert info.value.key == "workload.arrival_rates[0]"


def test_overload_warning_turns_a_solver_failure_into_a_config_error(tmp_path):
    exp = load_experiment(write(tmp_path, toml()))
    bad = dataclasses.replace(exp, classes=(model.JobClass("1", 1e300), exp.classes[1]))  # built by hand
    with pytest.raises(ConfigError) as info:
        overload_warning(bad)
    assert info.value.key == "workload.arrival_rates"
    assert "arrival_rates[0] = 1e+300 is outside the range" in info.value.problem


def experiment_for(tmp_path, **sections) -> Experiment:
    return load_experiment(write(tmp_path, toml(**sections)))


@pytest.mark.parametrize(
    ("horizon", "fragments"),
    [
        (1e300, ["imply 3e+300 jobs per replication"]),
        (4e6, ["imply 1.2e+07 jobs per replication"]),
        (math.inf, ["must be a positive number, got inf"]),
        (math.nan, ["must be a positive number, got nan"]),
        (0.0, ["must be a positive number, got 0.0"]),
        (-5.0, ["must be a positive number, got -5.0"]),
    ],
)
def test_check_run_length_names_the_given_key(tmp_path, horizon, fragments):
    exp = experiment_for(tmp_path)
    with pytest.raises(ConfigError) as info:
        config_checks.check_run_length(exp, horizon, "--horizon")
    assert info.value.key == "--horizon"
    assert str(info.value).startswith("--horizon: ")
    for fragment in fragments:
        assert fragment in info.value.problem, info.value.problem


def test_check_run_length_covers_failures_and_checkpoints(tmp_path):
    exp = experiment_for(
        tmp_path,
        failures="[failures]\nmean_up = 1e-4\nmean_down = 1e-4\n",
        simulation="[simulation]\nhorizon = 100\nwarmup = 0\n",
    )
    config_checks.check_run_length(exp, 100.0, "--horizon")  # 3 x 100 / 2e-4 = 1.5e6 failure cycles
    with pytest.raises(ConfigError, match="imply 1.5e\\+08 failure cycles per replication") as info:
        config_checks.check_run_length(exp, 1e4, "--horizon")
    assert info.value.key == "--horizon"
    exp = experiment_for(tmp_path, simulation="[simulation]\nhorizon = 100\nwarmup = 0\ncheckpoint_interval = 0.01\n")
    config_checks.check_run_length(exp, 1e4, "--horizon")  # 3 x 1e4 / 0.01 = 3e6 checkpoints
    with pytest.raises(ConfigError, match="implies up to 3e\\+07 checkpoints per replication") as info:
        config_checks.check_run_length(exp, 1e5, "--horizon")
    assert info.value.key == "--horizon"


def test_check_run_length_accepts_a_sane_horizon(tmp_path):
    config_checks.check_run_length(experiment_for(tmp_path), 1e5, "--horizon")
    config_checks.check_run_length(experiment_for(tmp_path), config.MAX_JOBS / 3, "--horizon")


@pytest.mark.parametrize(
    ("duration", "time_unit", "key", "fragment"),
    [
        (0.0, None, "--duration", "must be a positive number, got 0.0"),
        (-1.0, None, "--duration", "must be a positive number"),
        (math.inf, None, "--duration", "got inf"),
        (math.nan, None, "--duration", "got nan"),
        (1e300, None, "--duration", "must be at most 2.592e+06 s"),
        # (a value :g prints as its bound: both in full, where they read 'at most 2.592e+06 s, got 2.592e+06')
        (2592001.0, None, "--duration", "must be at most 2,592,000 s, got 2,592,001"),
        (None, 0.0, "--time-unit", "must be a positive number"),
        (None, math.nan, "--time-unit", "got nan"),
        (None, 1e-300, "--time-unit", "must be between 0.001 and 86400 s"),
        (None, 1e9, "--time-unit", "must be between 0.001 and 86400 s"),
        (2e6, 0.05, "--duration", "4e+07 time units (2e+06 s / 0.05 s each) x total arrival rate 300 imply 1.2e+10 "
                                  "jobs in the testbed run"),
        (None, 1e-3, "--time-unit", "(120 s / 0.001 s each)"),  # with [testbed] duration = 120
    ],
)
def test_check_testbed_overrides_names_the_option(tmp_path, duration, time_unit, key, fragment):
    exp = experiment_for(tmp_path, workload="[workload]\narrival_rates = [100, 200]\n")
    with pytest.raises(ConfigError) as info:
        config_checks.check_testbed_overrides(exp, duration, time_unit)
    assert info.value.key == key
    assert fragment in info.value.problem, info.value.problem


def test_check_testbed_overrides_accepts_sane_values(tmp_path):
    exp = experiment_for(tmp_path)
    config_checks.check_testbed_overrides(exp, None, None)
    config_checks.check_testbed_overrides(exp, 3.0, 0.2)
    config_checks.check_testbed_overrides(exp, 3600.0, None)
    config_checks.check_testbed_overrides(exp, None, 1e-3)


# ------------------------------------------------------------------ [testbed] commands


def test_commands_may_be_keys_or_argvs(tmp_path):
    text = toml(
        workload="[workload]\narrival_rates = [1.0, 2.0, 3.0]\n",
        machines="[machines]\nrates = [[3.0], [6.0], [7.0]]\n",
        testbed='[testbed]\nexecutor = "command"\ncommands = ["render", ["python3", "-c", "pass"], "sleep-1"]\n',
    )
    exp = load_experiment(write(tmp_path, text))
    assert exp.testbed.commands == ("render", ("python3", "-c", "pass"), "sleep-1")


@pytest.mark.parametrize(
    ("commands", "key", "fragment"),
    [
        ('["a", "b", ""]', "testbed.commands[2]", "got '' (a string)"),
        ('["a", "b", "  "]', "testbed.commands[2]", "allow-list key (a non-empty string) or an argv"),
        ('["a", "b", []]', "testbed.commands[2]", "got a list"),
        ('["a", "b", 3]', "testbed.commands[2]", "got 3"),
        ('["a", ["x", 1], "c"]', "testbed.commands[1]", "non-empty list of non-empty strings"),
        ('["a", "b"]', "testbed.commands", "must be a list of 3 commands, one per job class, got a list of 2"),
        ('"a"', "testbed.commands", "got 'a' (a string)"),
    ],
)
def test_bad_commands_name_the_entry(tmp_path, commands, key, fragment):
    text = toml(
        workload="[workload]\narrival_rates = [1.0, 2.0, 3.0]\n",
        machines="[machines]\nrates = [[3.0], [6.0], [7.0]]\n",
        testbed=f'[testbed]\nexecutor = "command"\ncommands = {commands}\n',
    )
    err = error_for(tmp_path, text)
    assert err.key == key
    assert fragment in err.problem, err.problem


def test_command_executor_without_commands(tmp_path):
    err = error_for(tmp_path, toml(testbed='[testbed]\nexecutor = "command"\n'))
    assert err.key == "testbed.commands"
    assert "an allow-list key, or an argv" in err.problem


# ------------------------------------------------------------------ pluggable models (docs/models.md)

DOCS = Path(__file__).resolve().parent.parent / "docs" / "models.md"
SAMPLE_SWF = Path(__file__).resolve().parent / "data" / "sample.swf"

BAGS = (
    '[workload]\nkind = "bags"\nbag_rate = 0.00026\napplication_size = 3600000.0\nmix = [50, 16.3, 16.3, 16.3]\n'
    'class_names = ["VS", "S", "M", "L"]\ngranularity = [1000.0, 5000.0, 25000.0, 125000.0]\n'
)
POWER = "[machines]\npower = {value = 10.0, count = 100}\n"
WEIBULL = (
    '[availability]\nkind = "weibull"\nrepair_mean = 100.0\nrepair_sd = 10.0\n'
    "groups = [{mttf = 1e5}, {mttf = 2e5, shape = 2.0}]\n"
)


def docs_examples() -> list[str]:
    return re.findall(r"```toml\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)


def test_the_seed_000_example_of_docs_models_loads(tmp_path):
    example = docs_examples()[-1]
    exp = load_experiment(write(tmp_path, example))
    assert isinstance(exp.workload, model.BagStream) and exp.workload.bag_rate == 0.00026
    assert [c.granularity for c in exp.classes] == [1000.0, 5000.0, 25000.0, 125000.0]
    assert all(c.arrival_rate == 0 for c in exp.classes)
    assert len(exp.machines) == 100 and exp.machines[0].rates == (10.0,) * 4
    assert [m.attribute("group") for m in exp.machines[:16]] == [*range(1, 16), 1]
    assert isinstance(exp.failures, model.WeibullNormalFailures) and len(exp.failures.groups) == 15
    assert exp.staging == model.StagingModel(resume=(240.0, 720.0))
    assert overload_warning(exp) is None  # L = 0.94


def test_the_bag_list_example_of_docs_models_loads():
    data = tomllib.loads(docs_examples()[0])
    data |= {"machines": {"power": [5.0, 5.0]}, "policy": {"name": "fcfs"}}
    exp = parse_experiment(data, "x")
    assert exp.workload == model.BagList(((0.0, ((0, 12.0), (1, 90.0))), (50.0, ((0, 8.0), (1, 120.0), (1, 95.0)))))
    assert [c.name for c in exp.classes] == ["short", "long"]


def test_poisson_granularity(tmp_path):
    exp = experiment_for(tmp_path, workload="[workload]\narrival_rates = [1.0, 2.0]\ngranularity = [2.0, 0.5]\n")
    assert [c.granularity for c in exp.classes] == [2.0, 0.5]
    assert exp.workload == model.PoissonClasses()
    assert load_experiment(write(tmp_path, toml())).classes[0].granularity == 1.0


def test_bag_stream_file(tmp_path):
    exp = experiment_for(tmp_path, workload=BAGS + "max_bags = 40\n", machines=POWER)
    assert exp.workload == model.BagStream(0.00026, 3.6e6, (50.0, 16.3, 16.3, 16.3), 0.5, 40)
    assert [(c.name, c.arrival_rate) for c in exp.classes] == [("VS", 0.0), ("S", 0.0), ("M", 0.0), ("L", 0.0)]


def test_power_forms(tmp_path):
    machines = [
        "[machines]\npower = [2.0, 3.0]\n",
        "[machines]\npower = [2.0, 3.0]\ncount = 2\n",
        "[machines]\npower = 4.0\ncount = 3\n",
        "[machines]\npower = {value = 4.0, count = 3}\n",
    ]
    expected = [[2.0, 3.0], [2.0, 3.0], [4.0] * 3, [4.0] * 3]
    for text, powers in zip(machines, expected):
        exp = experiment_for(tmp_path, machines=text)
        assert [m.rates for m in exp.machines] == [(p, p) for p in powers]  # every class: rates[i][j] = P_j
        assert [m.attributes for m in exp.machines] == [(("power", p),) for p in powers]


def test_power_drawn_until_the_total_is_reached_keeping_the_last_machine(tmp_path):
    text = "[machines]\npower = {uniform = [2.3, 17.7], total = 1000.0, seed = 91}\n"
    one, two = experiment_for(tmp_path, machines=text), experiment_for(tmp_path, machines=text)
    powers = [m.attribute("power") for m in one.machines]
    assert powers == [m.attribute("power") for m in two.machines]
    assert len(powers) == 93  # the paper's heterogeneous grid size, for this seed
    assert all(2.3 <= p <= 17.7 for p in powers)
    assert sum(powers[:-1]) < 1000.0 <= sum(powers)
    other = experiment_for(tmp_path, machines=text.replace("91", "92"))
    assert [m.attribute("power") for m in other.machines] != powers


def test_slots_groups_and_attributes(tmp_path):
    machines = (
        '[machines]\npower = [1.0, 2.0, 3.0, 4.0]\nslots = [1, 2, 1, 4]\ngroup = "cycle"\n'
        'attributes = {os = "linux", clock = [1.0, 2.0, 2.5, 3.0]}\n'
    )
    exp = experiment_for(tmp_path, machines=machines, failures="", availability=WEIBULL)
    assert [m.slots for m in exp.machines] == [1, 2, 1, 4]
    assert exp.machines[3].attributes == (("power", 4.0), ("group", 2), ("os", "linux"), ("clock", 3.0))
    assert [m.attribute("group") for m in exp.machines] == [1, 2, 1, 2]
    exp = experiment_for(tmp_path, machines=BASE["machines"] + "slots = 3\ngroup = [1, 2, 2]\n", availability=WEIBULL)
    assert [(m.slots, m.attributes) for m in exp.machines] == [(3, (("group", g),)) for g in (1, 2, 2)]
    assert [m.cpus for m in exp.machines] == [None] * 3  # every slot computes
    exp = experiment_for(tmp_path, machines=BASE["machines"] + "slots = 3\ncpus = [1, 3, 2]\n")
    assert [(m.slots, m.cpus, m.computing_slots) for m in exp.machines] == [(3, 1, 1), (3, 3, 3), (3, 2, 2)]


def test_availability_kinds(tmp_path):
    assert experiment_for(tmp_path, availability='[availability]\nkind = "always"\n').failures is None
    exponential = '[availability]\nkind = "exponential"\nmean_up = 5.0\nmean_down = 1.0\n'
    exp = experiment_for(tmp_path, availability=exponential)
    assert exp.failures == FailureModel(5.0, 1.0)
    exp = experiment_for(tmp_path, availability=WEIBULL, machines=BASE["machines"] + "group = [1, 2, 2]\n")
    assert exp.failures == model.WeibullNormalFailures((
        model.WeibullGroup(1e5, 0.5, 100.0, 10.0), model.WeibullGroup(2e5, 2.0, 100.0, 10.0)))
    text = WEIBULL.replace("repair_sd = 10.0\n", "repair_sd = 10.0\nshape = 0.7\n").replace(
        "{mttf = 1e5}", "{mttf = 1e5, repair_mean = 7.0}")
    exp = experiment_for(tmp_path, availability=text, machines=BASE["machines"] + 'group = "cycle"\n')
    assert exp.failures.groups == (model.WeibullGroup(1e5, 0.7, 7.0, 10.0), model.WeibullGroup(2e5, 2.0, 100.0, 10.0))


@pytest.mark.parametrize(("preset", "factor", "repair"), [("anglano-high", 1.0, (1800.0, 300.0)),
                                                          ("anglano-medium", 0.03, (5400.0, 800.0)),
                                                          ("anglano-low", 0.01, (5400.0, 800.0))])
def test_availability_presets(tmp_path, preset, factor, repair):
    from mgst.availability.weibull import ANGLANO_MTTF

    exp = experiment_for(tmp_path, availability=f'[availability]\npreset = "{preset}"\n',
                         machines=BASE["machines"] + 'group = "cycle"\n')
    assert [g.mttf for g in exp.failures.groups] == [m * factor for m in ANGLANO_MTTF]
    assert {(g.shape, g.repair_mean, g.repair_sd) for g in exp.failures.groups} == {(0.5, *repair)}
    exp = experiment_for(tmp_path, availability=f'[availability]\npreset = "{preset}"\nshape = 0.8\nrepair_sd = 1.0\n',
                         machines=BASE["machines"] + 'group = "cycle"\n')
    assert {(g.shape, g.repair_mean, g.repair_sd) for g in exp.failures.groups} == {(0.8, repair[0], 1.0)}


def test_staging_section(tmp_path):
    exp = experiment_for(tmp_path, staging="[staging]\nresume = [240, 720]\nstart = [0.0, 5.0]\n")
    assert exp.staging == model.StagingModel((240.0, 720.0), (0.0, 5.0))
    assert experiment_for(tmp_path, staging="[staging]\n").staging is None
    assert experiment_for(tmp_path).staging is None


def test_bag_list_classes_by_index_or_name(tmp_path):
    text = '[workload]\nkind = "bag_list"\nbags = [{at = 5.0, tasks = [[1, 2.0]]}, {at = 0.0, tasks = [[0, 1]]}]\n'
    exp = experiment_for(tmp_path, workload=text, machines="[machines]\npower = [1.0]\n")
    assert exp.workload.bags == ((5.0, ((1, 2.0),)), (0.0, ((0, 1.0),)))  # the file's order; delivered sorted
    assert [c.name for c in exp.classes] == ["1", "2"]
    named = text.replace("[1, 2.0]", '["b", 2.0]').replace("kind", 'class_names = ["a", "b", "c"]\nkind')
    assert len(experiment_for(tmp_path, workload=named, machines="[machines]\npower = [1.0]\n").classes) == 3


def test_swf_file_is_relative_to_the_experiment_and_sets_the_granularity(tmp_path):
    (tmp_path / "traces").mkdir()
    shutil.copy(SAMPLE_SWF, tmp_path / "traces" / "sample.swf")
    text = '[workload]\nkind = "swf"\nfile = "traces/sample.swf"\nwork_scale = 0.5\nbags = "user"\n'
    exp = experiment_for(tmp_path, workload=text, machines="[machines]\npower = 2.0\ncount = 2\n")
    assert exp.workload == model.SwfTrace(str((tmp_path / "traces" / "sample.swf").resolve()), 1.0, 0.5, "user")
    sizes = [60, 60, 360, 45, 15, 160, 25, 40, 10, 12, 14]  # run x processors of the 11 usable jobs
    assert exp.classes == (model.JobClass("1", 0.0, 0.5 * sum(sizes) / 11),)


def test_swf_errors_name_the_file_key(tmp_path):
    text = '[workload]\nkind = "swf"\nfile = "none.swf"\n'
    err = error_for(tmp_path, toml(workload=text, machines="[machines]\npower = [1.0]\n"))
    assert err.key == "workload.file" and "cannot read" in err.problem
    (tmp_path / "bad.swf").write_text("; header\n1 2 3\n", encoding="ascii")
    err = error_for(tmp_path, toml(workload=text.replace("none", "bad"), machines="[machines]\npower = [1.0]\n"))
    assert err.key == "workload.file" and f"{tmp_path / 'bad.swf'}:2: has 3 fields" in err.problem
    # a job of 1e308 s on 2 processors: as a bag's task, beyond 1e12 work units (it was taken, and ran for ever)
    (tmp_path / "bad.swf").write_text("1 100 5 60 1 -1 -1 1 120 -1 1 3 1 -1 1 -1 -1 -1\n"
                                      "2 150 5 1e308 2 -1 -1 2 60 -1 1 3 1 -1 1 -1 -1 -1\n", encoding="ascii")
    err = error_for(tmp_path, toml(workload=text.replace("none", "bad"), machines="[machines]\npower = [1.0]\n"))
    assert err.key == "workload.file", err
    assert "a job submitted at trace second 150 is inf work units" in err.problem and "at most 1e+12" in err.problem


MODEL_ERRORS = [
    pytest.param({"workload": '[workload]\nkind = "lottery"\n'}, "workload.kind", ["must be one of 'poisson'"],
                 id="workload-kind"),
    pytest.param({"workload": "[workload]\nkind = [1]\n"}, "workload.kind", ["must be one of", "a list"],
                 id="workload-kind-list"),
    pytest.param({"availability": "[availability]\npreset = {a = 1}\n"}, "availability.preset",
                 ["must be one of", "a table"], id="preset-table"),
    pytest.param({"workload": BAGS + "arrival_rates = [1.0]\n", "machines": POWER}, "workload.arrival_rates",
                 ["unknown key for kind = 'bags' (a key of kind = 'poisson')"], id="key-of-another-kind"),
    pytest.param({"workload": BAGS.replace("bag_rate = 0.00026\n", ""), "machines": POWER}, "workload.bag_rate",
                 ["missing"], id="bag-rate-missing"),
    pytest.param({"workload": BAGS.replace("[50,", "[-1,"), "machines": POWER}, "workload.mix[0]", [">= 0"],
                 id="mix-negative"),
    pytest.param({"workload": BAGS.replace("[50, 16.3, 16.3, 16.3]", "[0, 0, 0, 0]"), "machines": POWER},
                 "workload.mix", ["positive sum"], id="mix-zero"),
    pytest.param({"workload": BAGS + "spread = 1.0\n", "machines": POWER}, "workload.spread", ["[0, 1)"],
                 id="spread-one"),
    pytest.param({"workload": BAGS + "max_bags = 0\n", "machines": POWER}, "workload.max_bags", [">= 1"],
                 id="max-bags-zero"),
    pytest.param({"workload": BAGS.replace('"VS", ', ""), "machines": POWER}, "workload.class_names",
                 ["has 3 entries but workload.mix has 4 (one per class)"], id="class-names-vs-mix"),
    pytest.param({"workload": BAGS.replace("[1000.0, ", "[0.0, "), "machines": POWER}, "workload.granularity[0]",
                 ["must be a positive number"], id="granularity-zero"),
    pytest.param({"workload": BAGS}, "machines.rates", ["has 2 rows but workload.mix has 4 (one per class)"],
                 id="rates-vs-mix"),
    pytest.param({"workload": BAGS.replace("3600000.0", "1e12").replace("[50, 16.3, 16.3, 16.3]", "[1, 0, 0, 0]"),
                  "machines": POWER},
                 "workload.application_size", ["implies 1e+09 tasks per bag", "MAX_JOBS"], id="bag-too-large"),
    pytest.param({"workload": BAGS, "machines": POWER, "simulation": "[simulation]\nhorizon = 1e9\n"},
                 "simulation.horizon",
                 ["1e+09 time units x bag rate 0.00026 x 139.2 tasks per bag (application_size / mean task size, "
                  "+ 1) imply 3.62e+07 tasks per replication", "MAX_JOBS"], id="bags-too-many-tasks"),
    pytest.param({"workload": '[workload]\nkind = "bag_list"\nbags = [{at = 0.0, tasks = [["x", 1.0]]}]\n',
                  "machines": POWER}, "workload.bags[0].tasks[0][0]", ["workload.class_names is not given"],
                 id="bag-list-name-without-names"),
    pytest.param({"workload": '[workload]\nkind = "bag_list"\nclass_names = ["a"]\n'
                              'bags = [{at = 0.0, tasks = [["b", 1.0]]}]\n', "machines": POWER},
                 "workload.bags[0].tasks[0][0]", ["unknown class 'b'"], id="bag-list-unknown-name"),
    pytest.param({"workload": '[workload]\nkind = "bag_list"\ngranularity = [1.0]\n'
                              'bags = [{at = 0.0, tasks = [[1, 1.0]]}]\n', "machines": POWER},
                 "workload.bags[0].tasks[0][0]", ["class index 1 but there are 1 classes"], id="bag-list-index"),
    pytest.param({"workload": '[workload]\nkind = "bag_list"\nbags = [{at = -1.0, tasks = [[0, 1.0]]}]\n',
                  "machines": POWER}, "workload.bags[0].at", ["must be in [0,"], id="bag-list-negative-time"),
    pytest.param({"workload": '[workload]\nkind = "bag_list"\nbags = [{tasks = [[0, 1.0]]}]\n', "machines": POWER},
                 "workload.bags[0].at", ["missing"], id="bag-list-no-time"),
    pytest.param({"workload": '[workload]\nkind = "bag_list"\nbags = [{at = 0.0, tasks = [[0]]}]\n',
                  "machines": POWER}, "workload.bags[0].tasks[0]", ["must be a pair [class, size]"],
                 id="bag-list-bad-task"),
    pytest.param({"workload": '[workload]\nkind = "swf"\nfile = "x.swf"\nbags = "group"\n', "machines": POWER},
                 "workload.bags", ["must be one of 'none', 'user'"], id="swf-bags"),
    pytest.param({"machines": BASE["machines"] + "power = [1.0, 2.0, 3.0]\n"}, "machines.power",
                 ["give machines.rates or machines.power, not both"], id="rates-and-power"),
    pytest.param({"machines": "[machines]\npower = 2.0\n"}, "machines.count", ["missing"], id="power-without-count"),
    pytest.param({"machines": BASE["machines"] + "count = 3\n"}, "machines.count",
                 ["only with a single number as machines.power"], id="count-with-rates"),
    pytest.param({"machines": "[machines]\npower = [1.0, 2.0]\ncount = 3\n"}, "machines.count",
                 ["lists 2 machines"], id="count-vs-list"),
    pytest.param({"machines": "[machines]\npower = {value = 2.0, cnt = 3}\n"}, "machines.power.cnt",
                 ["unknown key (did you mean 'count'?)"], id="power-table-key"),
    pytest.param({"machines": "[machines]\npower = {uniform = [5.0, 2.0], total = 10.0}\n"}, "machines.power.uniform",
                 ["a <= b"], id="power-uniform-order"),
    pytest.param({"machines": "[machines]\npower = {uniform = [1.0, 2.0], total = 1e9}\n"}, "machines.power.total",
                 ["more than 100000 machines"], id="power-too-many"),
    pytest.param({"machines": "[machines]\npower = [1.0, 0.0]\n"}, "machines.power[1]",
                 ["must be a positive number"], id="power-zero"),
    pytest.param({"machines": "[machines]\nslots = 2\n"}, "machines.rates", ["missing", "machines.power"],
                 id="no-rates-nor-power"),
    pytest.param({"machines": BASE["machines"] + "slots = [1, 2]\n"}, "machines.slots",
                 ["has 2 entries but machines.rates has 3 columns"], id="slots-length"),
    pytest.param({"machines": BASE["machines"] + "slots = 0\n"}, "machines.slots", [">= 1"], id="slots-zero"),
    pytest.param({"machines": BASE["machines"] + "slots = 2\ncpus = 3\n"}, "machines.cpus",
                 ["at most the machine's slots (2), got 3"], id="cpus-over-slots"),
    pytest.param({"machines": BASE["machines"] + "slots = [1, 3, 2]\ncpus = [1, 3, 3]\n"}, "machines.cpus[2]",
                 ["at most the machine's slots (2), got 3"], id="cpus-over-its-slots"),
    pytest.param({"machines": BASE["machines"] + "cpus = 0\n"}, "machines.cpus", [">= 1"], id="cpus-zero"),
    pytest.param({"machines": BASE["machines"] + 'group = "cycle"\n'}, "machines.group",
                 ["has no machine groups", "kind = 'weibull'"], id="cycle-without-weibull"),
    pytest.param({"machines": BASE["machines"] + "group = [1, 2, 1]\n"}, "machines.group",
                 ["the experiment (no [availability]) has no machine groups", "machines.attributes"],
                 id="group-without-availability"),
    pytest.param({"machines": BASE["machines"] + "group = [1, 1, 1]\n",
                  "availability": '[availability]\nkind = "exponential"\nmean_up = 5.0\nmean_down = 1.0\n'},
                 "machines.group", ["[availability] kind 'exponential' has no machine groups"],
                 id="group-without-groups"),
    pytest.param({"machines": BASE["machines"], "availability": WEIBULL}, "machines.group",
                 ["missing: [availability] has 2 groups"], id="group-missing"),
    pytest.param({"machines": BASE["machines"] + "group = [1, 3, 1]\n", "availability": WEIBULL},
                 "machines.group[1]", ["is group 3 but [availability] has 2 groups"], id="group-too-large"),
    pytest.param({"machines": BASE["machines"] + "group = 2\n", "availability": WEIBULL}, "machines.group",
                 ["must be a list"], id="group-scalar"),
    pytest.param({"machines": BASE["machines"] + "attributes = {power = 3.0}\n"}, "machines.attributes.power",
                 ["is set by machines.power"], id="attribute-reserved"),
    pytest.param({"machines": BASE["machines"] + 'attributes = {os = ["a", "b"]}\n'}, "machines.attributes.os",
                 ["has 2 entries but machines.rates has 3 columns"], id="attribute-length"),
    pytest.param({"machines": BASE["machines"] + "attributes = {tags = [[1], [2], [3]]}\n"},
                 "machines.attributes.tags[0]", ["must be a string, a finite number or a boolean"],
                 id="attribute-nested"),
    pytest.param({"failures": "[failures]\nmean_up = 5.0\nmean_down = 1.0\n",
                  "availability": '[availability]\nkind = "always"\n'}, "availability",
                 ["give [availability] or [failures], not both"], id="failures-and-availability"),
    pytest.param({"availability": "[availability]\nmean_up = 5.0\n"}, "availability.kind", ["missing"],
                 id="availability-kind-missing"),
    pytest.param({"availability": '[availability]\nkind = "markov"\n'}, "availability.kind",
                 ["must be one of 'always', 'exponential', 'weibull'"], id="availability-kind"),
    pytest.param({"availability": '[availability]\nkind = "weibull"\nmean_up = 5.0\n'}, "availability.mean_up",
                 ["unknown key for kind = 'weibull' (a key of kind = 'exponential')"], id="availability-other-key"),
    pytest.param({"availability": '[availability]\nkind = "exponential"\nmean_up = 5.0\n'}, "availability.mean_down",
                 ["missing"], id="exponential-missing"),
    pytest.param({"availability": '[availability]\npreset = "anglano-mid"\n'}, "availability.preset",
                 ["must be one of 'anglano-high'"], id="preset-unknown"),
    pytest.param({"availability": '[availability]\npreset = "anglano-high"\ngroups = [{mttf = 1.0}]\n'},
                 "availability.groups", ["not both"], id="preset-and-groups"),
    pytest.param({"availability": WEIBULL.replace("shape = 2.0", "shape = 0.01")}, "availability.groups[1].shape",
                 ["between 0.1 and 100"], id="shape-range"),
    pytest.param({"availability": WEIBULL.replace("repair_sd = 10.0\n", "")}, "availability.groups[0].repair_sd",
                 ["missing (give it here or as availability.repair_sd)"], id="repair-missing"),
    pytest.param({"availability": WEIBULL.replace("{mttf = 1e5}", "{mttf = 1e5, mtbf = 3}")},
                 "availability.groups[0].mtbf", ["unknown key (did you mean 'mttf'?)"], id="group-key"),
    pytest.param({"availability": WEIBULL.replace("repair_sd = 10.0", "repair_sd = -1.0")},
                 "availability.repair_sd", ["must be in [0,"], id="repair-sd-negative"),
    pytest.param({"staging": "[staging]\nresume = [720, 240]\n"}, "staging.resume", ["0 <= a <= b"],
                 id="staging-order"),
    pytest.param({"staging": "[staging]\nresume = 240\n"}, "staging.resume", ["must be a range [a, b]"],
                 id="staging-scalar"),
    pytest.param({"staging": "[staging]\nstrat = [1, 2]\n"}, "staging.strat", ["unknown key (did you mean 'start'?)"],
                 id="staging-key"),
    pytest.param({"availability": WEIBULL.replace("1e5", "1e-300").replace("2e5", "1e-300").replace("100.0", "1e-300"),
                  "machines": BASE["machines"] + 'group = "cycle"\n'}, "availability.groups",
                 ["the groups' MTTF + repair_mean over 2000 time units (the default) on 3 machines imply",
                  "failure cycles per replication"], id="weibull-too-frequent"),
]


@pytest.mark.parametrize(("sections", "key", "fragments"), MODEL_ERRORS)
def test_model_section_errors_name_the_key(tmp_path, sections, key, fragments):
    err = error_for(tmp_path, toml(**sections))
    assert err.key == key, err
    for fragment in fragments:
        assert fragment in err.problem, err.problem


def test_run_length_of_a_bag_stream_honours_max_bags(tmp_path):
    exp = experiment_for(tmp_path, workload=BAGS + "max_bags = 2\n", machines=POWER)
    config_checks.check_run_length(exp, 1e9, "--horizon")  # at most 2 bags of ~101 tasks
    with pytest.raises(ConfigError) as info:
        unbounded = dataclasses.replace(exp, workload=dataclasses.replace(exp.workload, max_bags=None))
        config_checks.check_run_length(unbounded, 1e9, "--horizon")
    assert info.value.key == "--horizon" and "tasks per bag" in info.value.problem


def test_overload_warning_for_a_bag_stream(tmp_path):
    exp = experiment_for(tmp_path, workload=BAGS, machines=POWER)  # L = 0.00026 x 3.6e6 / 1000 = 0.936
    assert overload_warning(exp) is None
    heavy = dataclasses.replace(exp, workload=dataclasses.replace(exp.workload, bag_rate=0.0003))
    message = overload_warning(heavy)
    assert message is not None and "load factor L" in message and "= 1.08 >= 1" in message
    # Failures scale the effective power: High-Avail, 100 x P = 10, sum EP = 996.68 (Table IV).
    failing = experiment_for(tmp_path, workload=BAGS.replace("0.00026", "0.000277"),
                             machines=POWER + 'group = "cycle"\n',
                             availability='[availability]\npreset = "anglano-high"\n')
    message = overload_warning(failing)
    assert message is not None and "/ 996.68 = 1.00 >= 1" in message and "MTTF/(MTTF+MTTR)" in message


def test_overload_warning_poisson_with_weibull_failures(tmp_path):
    exp = experiment_for(tmp_path, availability=WEIBULL, machines=BASE["machines"] + "group = [1, 2, 1]\n")
    assert overload_warning(exp) is None  # LP load well below capacity
    one_bag = '[workload]\nkind = "bag_list"\nbags = [{at = 0.0, tasks = [[0, 9e9]]}]\n'
    finite = experiment_for(tmp_path, workload=one_bag,
                            machines="[machines]\npower = [1.0]\n")
    assert overload_warning(finite) is None  # a finite workload is never overloaded in the long run


# ------------------------------------------------------------------ the journal's codec


def round_trip(exp: Experiment) -> Experiment:
    plain = json.loads(json.dumps(to_plain(exp)))  # as the journal stores it
    assert to_plain(exp) == plain  # the mapper compares these on resume
    return from_plain(plain)


def test_codec_round_trips_every_model(tmp_path):
    shutil.copy(SAMPLE_SWF, tmp_path / "sample.swf")
    cases = [
        dict(workload=BAGS + "max_bags = 4\n", machines=POWER + 'group = "cycle"\nslots = 2\n',
             availability='[availability]\npreset = "anglano-low"\nshape = 0.7\n',
             staging="[staging]\nresume = [240, 720]\n"),
        dict(workload='[workload]\nkind = "bag_list"\nbags = [{at = 1.5, tasks = [[0, 2.0], [1, 3.0]]}]\n',
             machines="[machines]\npower = {uniform = [1.0, 2.0], total = 5.0}\n"
                      'attributes = {os = "linux", fast = true}\n',
             staging="[staging]\nstart = [0.0, 1.0]\n"),
        dict(workload='[workload]\nkind = "swf"\nfile = "sample.swf"\ntime_scale = 0.5\nbags = "user"\n',
             machines="[machines]\npower = [3.0]\n", availability='[availability]\nkind = "exponential"\n'
                                                               "mean_up = 9.0\nmean_down = 1.0\n"),
        dict(workload="[workload]\narrival_rates = [1.0, 2.0]\ngranularity = [3.0, 1.0]\n", availability=WEIBULL,
             machines=BASE["machines"] + "group = [1, 2, 2]\n"),
        dict(machines=BASE["machines"] + "slots = 3\ncpus = [1, 3, 2]\n"),  # bundles: cpus beside slots
        # a bag's own attributes (GridBot's expressions among them), for one bag of two
        dict(workload='[workload]\nkind = "bag_list"\nbags = [{at = 0.0, tasks = [[0, 2.0]]}, {at = 1.0, tasks = '
                      '[[0, 3.0]], attributes = {Priority = 2, Rank = "Host.Speed", gpu = true}}]\n',
             machines="[machines]\npower = [3.0]\n"),
    ]
    for sections in cases:
        exp = experiment_for(tmp_path, **sections)
        assert round_trip(exp) == exp


def test_a_bags_own_attributes_follow_its_generated_ones_and_bad_ones_name_their_key(tmp_path):
    bags = ('[workload]\nkind = "bag_list"\nbags = [{at = 5.0, tasks = [[0, 2.0]], attributes = {Priority = 2, '
            'os = "linux"}}, {at = 1.0, tasks = [[0, 3.0]]}]\n')
    exp = experiment_for(tmp_path, workload=bags, machines="[machines]\npower = [3.0]\n")
    assert exp.workload.attributes == ((("Priority", 2), ("os", "linux")), ())
    made = list(make_workload(exp, 1))  # in time order: the file's second bag first
    assert [b.attributes for b in made] == [(("application_size", 3.0), ("tasks", 1)),
                                           (("application_size", 2.0), ("tasks", 1), ("Priority", 2), ("os", "linux"))]
    for attributes, key in (("{tasks = 3}", "workload.bags[0].attributes.tasks"),
                            ("{x = [1, 2]}", "workload.bags[0].attributes.x"),
                            ("[1]", "workload.bags[0].attributes")):
        with pytest.raises(ConfigError) as err:
            experiment_for(tmp_path, workload=bags.replace("{Priority = 2, os = \"linux\"}", attributes),
                           machines="[machines]\npower = [3.0]\n")
        assert err.value.key == key


def test_codec_keeps_the_mgst_format_and_reads_old_journals():
    exp = load_experiment(EXPERIMENTS / "hihi-mpd-fe.toml")
    plain = to_plain(exp)
    assert set(plain) == {"name", "description", "classes", "machines", "policy", "failures", "simulation", "testbed"}
    assert all(len(c) == 2 for c in plain["classes"]) and all(len(m) == 3 for m in plain["machines"])
    assert plain["failures"] == [exp.failures.mean_up, exp.failures.mean_down]
    assert from_plain(plain) == exp
    assert round_trip(exp) == exp


@pytest.mark.parametrize("loader", ["experiment", "sweep", "hosts"])
def test_every_user_file_names_the_line_of_a_syntax_error_even_at_its_end(tmp_path, loader):
    """One reader for the three TOML files a user writes: an unterminated table at the end of the file (which
    tomllib reports without a line) gets its line and column, and a missing file says so."""
    from mgst.lab.hosts import load_hosts
    from mgst.sweep.spec import load_sweep

    load = {"experiment": load_experiment, "sweep": load_sweep, "hosts": load_hosts}[loader]
    bad = tmp_path / "bad.toml"
    bad.write_text('[workload]\narrival_rates = [1.0]\n[machines')
    with pytest.raises(ValueError, match=r"\(file\): TOML syntax error: .*line 3, column 10"):
        load(bad)
    with pytest.raises(ValueError, match=r"\(file\): no such file"):
        load(tmp_path / "missing.toml")


def test_a_machine_name_of_100000_characters_is_one_short_line_before_a_run_starts(tmp_path, capsys):
    """`mgst run` of a file with a huge machine name: exit 2 at once, one line naming the key (not a run that
    waits for its pullers, then an error line as long as the name)."""
    import time  # noqa: PLC0415

    from mgst.cli import main  # noqa: PLC0415

    path = write(tmp_path, toml(machines=BASE["machines"] + f'names = ["A", "{"B" * 100_000}", "C"]\n'))
    t0 = time.monotonic()
    code = main(["run", str(path), "--out", str(tmp_path / "out"), "--insecure"])
    err = capsys.readouterr().err
    assert time.monotonic() - t0 < 10
    assert code == 2 and err.count("\n") == 1 and len(err) < 300, err[:500]
    assert "machines.names[1]: has 100000 characters; at most 64" in err
    assert not (tmp_path / "out").exists()


def test_lpas_dg_refuses_a_workload_without_arrival_rates_unless_it_measures_them(tmp_path):
    """LPAS_DG gives each class machines by its arrival rate: a Bag-of-Tasks workload has none, and the LP gave every
    class nothing (a run of 0 jobs done, its bags left in the system). Refused at policy.name, unless the policy
    measures the rates as jobs arrive (arrival_check_period)."""
    lpas = '[policy]\nname = "lpas_dg"\n'
    with pytest.raises(ConfigError) as e:
        experiment_for(tmp_path, workload=BAGS, machines=POWER, policy=lpas)
    assert e.value.key == "policy.name" and "no class of this workload (BagStream) has one" in str(e.value)
    measured = experiment_for(tmp_path, workload=BAGS, machines=POWER,
                              policy=lpas + "arrival_check_period = 1000.0\n")
    assert measured.policy.options["arrival_check_period"] == 1000.0
    assert experiment_for(tmp_path).policy.name == "lpas_dg"  # (Poisson classes: their rates are given)


@pytest.mark.parametrize(("tasks", "key", "said"), [
    ('{count = 3, size = [1.0, 2.0], class = "x"}', "workload.bags[0].tasks.class", "unknown class 'x'"),
    ("{count = 3, size = [1.0, 2.0], class = 5}", "workload.bags[0].tasks.class", "class index 5 but there are 1"),
    ('[["x", 1.0]]', "workload.bags[0].tasks[0][0]", "unknown class 'x'"),
])
def test_a_bag_task_s_unknown_class_names_the_key_it_is_given_in(tasks, key, said):
    """A drawn bag's `class` was named as `tasks[0]` (the listed form's place), a key the file does not have."""
    text = ('[workload]\nkind = "bag_list"\nclass_names = ["job"]\n[[workload.bags]]\nat = 0.0\n'
            f"tasks = {tasks}\n[machines]\nrates = [[1.0]]\n[policy]\nname = \"fcfs_share\"\n")
    with pytest.raises(ConfigError) as info:
        parse_experiment(tomllib.loads(text), "drawn")
    assert info.value.key == key and said in info.value.problem, (info.value.key, info.value.problem)


def test_an_allocation_lp_out_of_range_through_granularity_names_granularity_too(tmp_path):
    """A granularity of 1e9 makes a job rate of 1e-9 a time unit, below what HiGHS takes: the error named
    machines.rates alone, whose 1.0 is not out of range."""
    f = tmp_path / "g.toml"
    f.write_text('[workload]\narrival_rates = [0.5]\ngranularity = [1e9]\n[machines]\nrates = [[1.0]]\n'
                 '[policy]\nname = "fcfs"\n')
    with pytest.raises(ConfigError) as e:
        overload_warning(load_experiment(f))
    assert "workload.granularity" in str(e.value) and "machines.rates over workload.granularity" in str(e.value)
    f.write_text('[workload]\narrival_rates = [0.5]\n[machines]\nrates = [[1e-12]]\n[policy]\nname = "fcfs"\n')
    with pytest.raises(ConfigError) as e:  # (no granularity: the machine rate itself, named alone)
        overload_warning(load_experiment(f))
    assert "granularity" not in str(e.value)
