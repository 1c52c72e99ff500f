"""Tests for mgst.config: the shipped experiment files and every validation rule."""

from __future__ import annotations

import dataclasses
import math
import textwrap
from pathlib import Path
from types import MappingProxyType

import pytest

from mgst import config, model, policies
from mgst.config import ConfigError, load_experiment, overload_warning, parse_experiment
from mgst.model import Experiment, FailureModel, SimulationSettings

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
        ["has 2 entries, expected 3 like row 0"],
        id="ragged-rates",
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
        {"machines": BASE["machines"] + 'names = ["A", "B"]\n'},
        "machines.names",
        ["has 2 entries but machines.rates has 3 columns"],
        id="machine-names-length",
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
    assert err.problem == f"unknown policy 'lpas'; known: {', '.join(known)}"
    assert "lpas_dg" in known and "fcfs" in known


def test_unknown_policy_with_stand_in_registry(tmp_path, monkeypatch):
    monkeypatch.setattr(
        policies, "names", lambda: ["fcfs", "lpas_dg", "random", "wqr_ft"]
    )
    err = error_for(tmp_path, toml(policy='[policy]\nname = "lpas"\n'))
    assert str(err).endswith(
        "policy.name: unknown policy 'lpas'; known: fcfs, lpas_dg, random, wqr_ft"
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


def test_module_exports():
    assert set(config.__all__) == {
        "MAX_DURATION",
        "MAX_JOBS",
        "MAX_RATE",
        "MAX_TIME",
        "MAX_TIME_UNIT",
        "MIN_RATE",
        "MIN_TIME_UNIT",
        "ConfigError",
        "check_run_length",
        "check_testbed_overrides",
        "load_experiment",
        "overload_warning",
        "parse_experiment",
    }


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
        config.check_run_length(exp, horizon, "--horizon")
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
    config.check_run_length(exp, 100.0, "--horizon")  # 3 x 100 / 2e-4 = 1.5e6 failure cycles
    with pytest.raises(ConfigError, match="imply 1.5e\\+08 failure cycles per replication") as info:
        config.check_run_length(exp, 1e4, "--horizon")
    assert info.value.key == "--horizon"
    exp = experiment_for(tmp_path, simulation="[simulation]\nhorizon = 100\nwarmup = 0\ncheckpoint_interval = 0.01\n")
    config.check_run_length(exp, 1e4, "--horizon")  # 3 x 1e4 / 0.01 = 3e6 checkpoints
    with pytest.raises(ConfigError, match="implies up to 3e\\+07 checkpoints per replication") as info:
        config.check_run_length(exp, 1e5, "--horizon")
    assert info.value.key == "--horizon"


def test_check_run_length_accepts_a_sane_horizon(tmp_path):
    config.check_run_length(experiment_for(tmp_path), 1e5, "--horizon")
    config.check_run_length(experiment_for(tmp_path), config.MAX_JOBS / 3, "--horizon")


@pytest.mark.parametrize(
    ("duration", "time_unit", "key", "fragment"),
    [
        (0.0, None, "--duration", "must be a positive number, got 0.0"),
        (-1.0, None, "--duration", "must be a positive number"),
        (math.inf, None, "--duration", "got inf"),
        (math.nan, None, "--duration", "got nan"),
        (1e300, None, "--duration", "must be at most 2.592e+06 s"),
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
        config.check_testbed_overrides(exp, duration, time_unit)
    assert info.value.key == key
    assert fragment in info.value.problem, info.value.problem


def test_check_testbed_overrides_accepts_sane_values(tmp_path):
    exp = experiment_for(tmp_path)
    config.check_testbed_overrides(exp, None, None)
    config.check_testbed_overrides(exp, 3.0, 0.2)
    config.check_testbed_overrides(exp, 3600.0, None)
    config.check_testbed_overrides(exp, None, 1e-3)


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
