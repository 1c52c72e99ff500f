"""The bad-input table of the README's commands: each bad input gets one clear error line naming what is wrong
(the option, the key or the file), exit 2, and no traceback (issue 21).

Most inputs go through ``mgst.cli.main`` in this process (an exception escaping it is what the top level would
print as a traceback, so it fails the test the same way); the commands that would open sockets or start
processes (`run`, `mapper`, `puller`) run as real subprocesses, a few at a time."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import zmq

from mgst.cli import main
from mgst.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]
HIHI = str(ROOT / "experiments" / "hihi-mfd-fd.toml")
SWEEP = str(ROOT / "experiments" / "bot" / "anglano-sweep.toml")
EXPERIMENTS = str(ROOT / "experiments")
A_FILE = str(ROOT / "README.md")  # a file that is not what any command expects
MISSING = "/nonexistent/mgst/nothing.toml"
PROC = "/proc/mgst-out"  # a folder that cannot be made, even by root
HUGE = "99999999999999999999"  # past a C integer
SMALL = '[workload]\narrival_rates = [2.0]\n[machines]\nrates = [[8.0, 8.0]]\n[policy]\nname = "fcfs"\n'
LPAS_SMALL = SMALL.replace('"fcfs"', '"lpas_dg"')
# A bad value of each of LPAS_DG's fix options
LPAS_BAD = {"arrival_check_period": "0", "arrival_threshold": "-0.1", "rate_threshold": '"high"',
            "delay_correction": "1.5", "timeout_factor": "0", "server_choice": '"fastest"',
            "resolve_on_events": '"no"', "arrival_estimate_scale": "0", "rate_estimate_scale": "-1.25",
            # (inf passed the file's check, then failed the run as the policy's error: a timer at inf)
            "resolve_period": "inf"}
# Positive values that overflowed a sample count or took the LP's rates outside its solver's range (tracebacks)
LPAS_HOSTILE = {"rate_threshold": "1e-200", "arrival_threshold": "1e-300", "arrival_estimate_scale": "1e-300",
                "rate_estimate_scale": "1e300"}
# Subprocesses at once (the machine has 2 cores, shared): the table stays within its time budget.
PARALLEL = 4
EXIT_USAGE = 2


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """Bad files of each kind, made once."""
    d = tmp_path_factory.mktemp("bad")
    made = {
        "unknown_key": SMALL.replace("[policy]", "[policy]\nfoo_bar = 1\n").replace("[workload]",
                                                                                    "[workload]\nsurprise = 3\n"),
        "unknown_section": SMALL + "[nonsense]\nx = 1\n",
        "unknown_policy": SMALL.replace('"fcfs"', '"no_such_policy"'),
        # a policy of Bags of Tasks on jobs without bags: it failed the run once the first job waited
        "bag_policy_on_jobs": SMALL.replace('"fcfs"', '"rr"'),
        "small": SMALL,
        # a number given as a boolean: named as the file has it (true), not as Python's True
        "boolean_option": LPAS_SMALL.replace("[policy]", "[policy]\ntolerance = true"),
        "not_toml": "this is [ not = toml\n",
        "empty": "",
        "negative_rate": SMALL.replace("[[8.0, 8.0]]", "[[-8.0, 8.0]]"),
        "nan_rate": SMALL.replace("[2.0]", "[nan]"),
        "string_rate": SMALL.replace("[2.0]", '["fast"]'),
        # LPAS_DG's fixes (docs/policies.md): each bad value names its key
        **{f"lpas_{key}": LPAS_SMALL.replace("[policy]", f"[policy]\n{key} = {value}")
           for key, value in LPAS_BAD.items()},
        **{f"lpas_hostile_{key}": LPAS_SMALL.replace("[policy]", f"[policy]\n{key} = {value}")
           for key, value in LPAS_HOSTILE.items()},
        "lpas_resolve_on_events_alone": LPAS_SMALL.replace("[policy]", "[policy]\nresolve_on_events = false"),
        "lpas_no_such_class": LPAS_SMALL.replace("[policy]", '[policy]\narrival_estimate_class = "nine"'),
        "lpas_no_such_machine": LPAS_SMALL.replace("[policy]", '[policy]\nrate_estimate_machine = "M99"'),
    }
    out = {}
    for name, text in made.items():
        (d / f"{name}.toml").write_text(text)
        out[name] = str(d / f"{name}.toml")
    (d / "binary.toml").write_bytes(b"\x00\xff\xfe garbage \x80")
    out["binary"] = str(d / "binary.toml")
    (d / "no_journal").mkdir()
    out["no_journal"] = str(d / "no_journal")
    (d / "bad_journal").mkdir()
    (d / "bad_journal" / "journal.sqlite").write_bytes(b"not a database at all" * 100)
    out["bad_journal"] = str(d / "bad_journal")
    (d / "journal_is_dir" / "journal.sqlite").mkdir(parents=True)
    out["journal_is_dir"] = str(d / "journal_is_dir")
    out["dir"] = str(d)
    sweeps = {"sweep_unknown_key": 'scenario = "anglano"\nname = "x"\nbogus = 1\n',
              "sweep_unknown_scenario": 'scenario = "no_such_scenario"\nname = "x"\n'}
    for name, text in sweeps.items():
        (d / f"{name}.toml").write_text(text)
        out[name] = str(d / f"{name}.toml")
    # an experiment whose trace file (a path relative to it) is not beside it
    (d / "trace.toml").write_text((ROOT / "experiments" / "availability" / "trace-csv.toml").read_text())
    out["trace_elsewhere"] = str(d / "trace.toml")
    (d / "trace_unnamed.toml").write_text((ROOT / "experiments" / "availability" / "trace-csv.toml").read_text()
                                          .replace('file = "', 'file = "" # was "'))
    out["trace_unnamed"] = str(d / "trace_unnamed.toml")
    out["keys_file"] = str(d / "empty.toml")
    # nested deeper than tomllib's recursion (RecursionError), and a key of 40 dotted parts (memory quadratic in them)
    (d / "deep.toml").write_text(SMALL + "x = " + "[" * 1000 + "]" * 1000 + "\n")
    out["deep_toml"] = str(d / "deep.toml")
    (d / "deep_table.toml").write_text(SMALL + "x = " + "{a = " * 1000 + "1" + "}" * 1000 + "\n")
    out["deep_table_toml"] = str(d / "deep_table.toml")
    (d / "dotted.toml").write_text(SMALL + ".".join(["k"] * 40) + " = 1\n")
    out["dotted_toml"] = str(d / "dotted.toml")
    # traces: a header naming a column twice (IndexError), a span of 1e300 s (blamed on --task-minutes), a week
    (d / "dup.fta").write_text("node_name\tnode_name\tevent_type\tevent_start_time\tevent_end_time\nA\t1\t0\t10\n")
    out["dup_fta"] = str(d / "dup.fta")
    (d / "span.csv").write_text("h1,0,1e300,up,1\n")
    out["huge_span"] = str(d / "span.csv")
    (d / "week.csv").write_text("h1,0,604800,up,1\n")
    out["week"] = str(d / "week.csv")
    # a machine with 3,000 trace periods within any testbed run: more than a puller takes (ValueError in `mgst run`)
    (d / "periods.csv").write_text("".join(f"M1,{i},{i + 1},{'down' if i % 2 else 'up'},\n" for i in range(3000)))
    (d / "periods.toml").write_text('[workload]\narrival_rates = [2.0]\n[machines]\nrates = [[8.0]]\nnames = ["M1"]\n'
                                    '[availability]\nkind = "trace"\nfile = "periods.csv"\ntime_scale = 0.001\n'
                                    '[policy]\nname = "fcfs"\n[testbed]\nduration = 2.0\ntime_unit = 0.1\n')
    out["many_periods"] = str(d / "periods.toml")
    # a Slurm lab's hosts file, with its keys: the options of `mgst lab up` and `overlay` are checked against it
    from mgst.wire import security  # noqa: PLC0415

    security.create_keys(d / "keys", ["M1", "M2"])
    (d / "slurm.toml").write_text(f'[lab]\nconnect = "tcp://127.0.0.1:5555"\nkeys = "keys"\n\n[slurm]\n'
                                  f'machines = ["M1", "M2"]\nshared_dir = "{d / "shared"}"\n')
    out["slurm_hosts"] = str(d / "slurm.toml")
    # runs longer than MAX_JOBS jobs: refused where the command takes the file's length, not where it is given
    # (test_the_file_s_run_lengths_bind_only_the_commands_that_use_them)
    (d / "long_horizon.toml").write_text(SMALL + "[simulation]\nhorizon = 1e7\n")
    out["long_horizon"] = str(d / "long_horizon.toml")
    (d / "long_testbed.toml").write_text(SMALL + "[testbed]\nduration = 2e6\ntime_unit = 0.01\n")
    out["long_testbed"] = str(d / "long_testbed.toml")
    # a seed beyond 64 bits, which neither the journal nor the wire can hold (a traceback once the run had begun)
    (d / "big_seed.toml").write_text(SMALL + f"[simulation]\nseed = {2**63}\n")
    out["big_seed"] = str(d / "big_seed.toml")
    (d / "sweep_big_seed.toml").write_text('scenario = "anglano"\nname = "x"\n[simulation]\nhorizon = 1000.0\n'
                                           f'checkpoint_interval = 60.0\nseeds = [1, {2**64}]\n')
    out["sweep_big_seed"] = str(d / "sweep_big_seed.toml")
    (d / "reps.toml").write_text(SMALL + "[simulation]\nreplications = 100000000000000000\n")
    out["huge_replications"] = str(d / "reps.toml")
    # accepted alone, never ending or failing mid-run (a review's fuzz of experiment and sweep files, 2026-11-30)
    more = {
        "period_tiny": LPAS_SMALL.replace("[policy]", "[policy]\nresolve_period = 1e-300"),
        "name_newline": SMALL.replace("[machines]", '[machines]\nnames = ["a\\nb", "M2"]'),
        "name_slash": SMALL.replace("[machines]", '[machines]\nnames = ["M1", "../x"]'),
        "mix_overflow": (ROOT / "experiments" / "bot" / "lab-rrnrf-weibull.toml").read_text().replace(
            "mix = [0, 0, 100, 0]", "mix = [0, 0, 1e308, 1e308]"),
        "count_bool": '[workload]\narrival_rates = [2.0]\n[machines]\npower = [10.0]\ncount = true\n'
                      '[policy]\nname = "fcfs"\n',
        # commands the executor would never run (the emulate default, or spin): the user meant to run them
        "commands_emulated": SMALL + '[testbed]\ncommands = ["job"]\n',
        "commands_spun": SMALL + '[testbed]\nexecutor = "spin"\ncommands = [["sleep", "1"]]\n',
    }
    anglano = Path(SWEEP).read_text()
    casanova = (ROOT / "experiments" / "casanova" / "casanova-sweep.toml").read_text()
    more |= {
        "sweep_checkpoint_tiny": anglano.replace("checkpoint_interval = 600.0", "checkpoint_interval = 1e-300"),
        "sweep_quick_misspelt": anglano.replace("[quick.simulation]\n", "[quick.simulation]\nreplicatons = 3\n"),
        "sweep_shape_tiny": anglano.replace("[options]\n", "[options]\nweibull_shape = 1e-300\n", 1),
        "sweep_processors_huge": casanova.replace("[options]\n", "[options]\nprocessors = 1000000\n", 1),
        "sweep_cap_below_a_slot": casanova.replace("cap = 1000000.0", "cap = 0.5"),
        "sweep_hosts_huge": (ROOT / "experiments" / "kondo" / "kondo-sdsc.toml").read_text().replace(
            "hosts = 220", "hosts = 1000000000000000000", 1),
    }
    for name, text in more.items():
        (d / f"{name}.toml").write_text(text)
        out[name] = str(d / f"{name}.toml")
    (d / "mine").mkdir()  # a folder holding a trace of the user's own: never overwritten
    (d / "mine" / "availability.csv").write_text("my precious trace\n")
    out["own_trace"] = str(d / "mine")
    (d / "negative.csv").write_text("h1,-1000000,-500,up,1\n")  # every interval before time 0: refused (times >= 0)
    out["negative_trace"] = str(d / "negative.csv")
    return out


# (arguments, what the error line must name); "{name}" is one of the files above.
IN_PROCESS = [
    # accepted alone, never ending or failing mid-run (a review's fuzz, 2026-11-30)
    (["simulate", "{period_tiny}", "--replications", "1"], "policy.resolve_period"),
    (["simulate", "{name_newline}"], "machines.names[0]"),
    (["keys", "{dir}/keys-slash", "--experiment", "{name_slash}"], "machines (machine 2)"),
    (["simulate", "{mix_overflow}"], "workload.mix"),
    (["simulate", "{count_bool}"], "machines.count"),
    (["sweep", "{sweep_checkpoint_tiny}", "--only", "policy=rr", "--only", "availability=high", "--only",
      "heterogeneity=homogeneous", "--only", "mix=All_S", "--only", "intensity=low", "--out", "{dir}/sw1"],
     "simulation.checkpoint_interval"),
    (["sweep", "{sweep_quick_misspelt}", "--out", "{dir}/sw2"], "quick.simulation.replicatons"),
    (["sweep", "{sweep_shape_tiny}", "--out", "{dir}/sw3"], "options.weibull_shape"),
    (["sweep", "{sweep_processors_huge}", "--out", "{dir}/sw4"], "options.processors"),
    (["sweep", "{sweep_cap_below_a_slot}", "--out", "{dir}/sw5"], "options.cap"),
    (["sweep", "{sweep_hosts_huge}", "--out", "{dir}/sw5"], "options.hosts"),
    (["traces", "generate", "sdsc", "--out", "{own_trace}", "--hosts", "2", "--days", "1"], "already holds"),
    (["traces", "summary", "{negative_trace}"], "negative.csv:1: start -1e+06 is not a time in trace seconds"),
    (["traces", "summary", "{negative_trace}", "--png", "{dir}/out.txt"], "--png"),
    (["traces", "summary", "{negative_trace}", "--png", "{dir}"], "--png"),
    # simulate: files
    (["simulate", MISSING], "nothing.toml"),
    (["simulate", EXPERIMENTS], "experiments"),
    (["simulate", A_FILE], "README.md"),
    (["simulate", "{binary}"], "binary.toml"),
    (["simulate", "{not_toml}"], "not_toml.toml"),
    (["simulate", "{empty}"], "empty.toml"),
    (["simulate", "{unknown_key}"], "surprise"),
    (["simulate", "{unknown_section}"], "nonsense"),
    (["simulate", "{unknown_policy}"], "no_such_policy"),
    (["simulate", "{bag_policy_on_jobs}"], "policy.name: policy rr schedules Bags of Tasks: it needs a bag workload"),
    (["run", "{bag_policy_on_jobs}", "--duration", "1"], "policy.name: policy rr schedules Bags of Tasks"),
    (["simulate", "{boolean_option}"], "policy.tolerance: must be a number, got true (a boolean)"),
    (["simulate", "{negative_rate}"], "machines.rates"),
    (["simulate", "{nan_rate}"], "workload.arrival_rates"),
    (["simulate", "{string_rate}"], "workload.arrival_rates"),
    *[(["simulate", f"{{lpas_{key}}}"], key) for key in LPAS_BAD],
    *[(["simulate", f"{{lpas_hostile_{key}}}"], key) for key in LPAS_HOSTILE],
    (["simulate", "{lpas_resolve_on_events_alone}"], "resolve_on_events"),
    (["simulate", "{lpas_no_such_class}"], "arrival_estimate_class"),
    (["simulate", "{lpas_no_such_machine}"], "rate_estimate_machine"),
    # simulate: numbers
    (["simulate", HIHI, "--horizon", "-1"], "--horizon"),
    (["simulate", HIHI, "--horizon", "0"], "--horizon"),
    (["simulate", HIHI, "--horizon", "nan"], "--horizon"),
    (["simulate", HIHI, "--horizon", "inf"], "--horizon"),
    (["simulate", HIHI, "--horizon", "ten"], "--horizon"),
    (["simulate", HIHI, "--horizon", "50"], "--horizon"),  # the file's warm-up is 100: the horizon's fault
    (["simulate", HIHI, "--warmup", "-1"], "--warmup"),
    (["simulate", HIHI, "--warmup", "nan"], "--warmup: must be >= 0 and below the horizon (1000), got nan"),
    (["simulate", HIHI, "--horizon", "50", "--warmup", "60"], "--warmup"),
    (["simulate", HIHI, "--replications", "0"], "--replications"),
    (["simulate", HIHI, "--replications", "1.5"], "--replications"),
    (["simulate", HIHI, "--seed", "-1"], "--seed"),
    (["simulate", "{trace_unnamed}"], "availability.file: must name a file"),  # (it said "FOLDER: is a folder")
    (["simulate", HIHI, "--seed", str(2**63)], "--seed"),
    (["simulate", "{long_horizon}"], "simulation.horizon: 1e+07 time units x total arrival rate 2 imply 2e+07 jobs"),
    (["simulate", "{long_horizon}", "--horizon", "2e7"], "--horizon: 2e+07 time units"),
    (["run", "{long_testbed}", "--out", "{dir}/long_run"], "testbed.duration: 2e+08 time units"),
    (["mapper", "{long_testbed}", "--duration", "3e6", "--insecure"], "--duration: must be at most"),
    # (it listened with CURVE and told the pullers to speak without)
    (["mapper", "{small}", "--keys", "{dir}", "--insecure", "--out", "{dir}/both"], "--insecure: contradicts --keys"),
    (["run", "{long_testbed}", "--time-unit", "0.001", "--out", "{dir}/long_run"], "--time-unit: 2e+09 time units"),
    (["simulate", "{big_seed}"], "simulation.seed"),
    (["sweep", "{sweep_big_seed}"], "simulation.seeds[1]"),
    (["simulate", HIHI, "--workers", "0"], "--workers"),
    (["simulate", HIHI, "--jobs", "csv"], "--jobs"),
    (["simulate", HIHI, "--out", A_FILE], "--out"),
    (["simulate", HIHI, "--out", f"{A_FILE}/sub"], "--out"),
    (["simulate", HIHI, "--out", "x" * 300], "--out"),  # (a name too long for the file system)
    (["simulate", HIHI, "--overheads", "x" * 300], "--overheads"),
    (["simulate", HIHI, "--import", "no_such_module_here"], "--import"),
    (["simulate", HIHI, "--policy", "no_such_policy"], "--policy"),
    (["simulate", HIHI, "--policy", "fcfs", "--policy", "fcfs"], "--policy"),
    # paper
    (["paper", "no-such-setting"], "no-such-setting"),
    (["paper", "hihi-mfd-fd", "hihi-mpd-fd", "hihi-mfd-fd"], "setting hihi-mfd-fd is given twice"),
    (["paper", "hihi-mfd-fd", "--experiments", "/nonexistent"], "--experiments"),
    (["paper", "hihi-mfd-fd", "--experiments", A_FILE], "--experiments"),
    (["paper", "hihi-mfd-fd", "--replications", "0"], "--replications"),
    (["paper", "hihi-mfd-fd", "--horizon", "50"], "--horizon"),
    (["paper", "hihi-mfd-fd", "--horizon", "-5"], "--horizon"),
    (["paper", "hihi-mfd-fd", "--workers", "0"], "--workers"),
    (["paper", "hihi-mfd-fd", "--seed", "-2"], "--seed"),
    (["paper", "hihi-mfd-fd", "--seed", str(2**63)], "--seed"),
    (["paper", "--import", "no_such_module_here"], "--import"),
    # sweep
    (["sweep", MISSING], "nothing.toml"),
    (["sweep", EXPERIMENTS], "experiments"),
    (["sweep", HIHI], "hihi-mfd-fd.toml: scenario: missing: this is an experiment file, not a sweep file"),
    (["simulate", SWEEP], "scenario: unknown key (a sweep file's: run it with 'mgst sweep FILE')"),
    (["sweep", SWEEP, "--out", A_FILE], "--out"),
    (["sweep", SWEEP, "--workers", "0"], "--workers"),
    (["sweep", SWEEP, "--quick", "--only", "policy=rr", "--only", "policy=fcfs_excl"],  # (it ran no cell, exit 0)
     "--only: 'policy=fcfs_excl' keeps none of the policy values an earlier --only kept (rr)"),
    (["sweep", SWEEP, "--replications", "0"], "--replications"),
    (["sweep", SWEEP, "--only", "policy"], "--only"),
    (["sweep", SWEEP, "--only", "colour=red"], "colour"),
    (["sweep", SWEEP, "--only", "policy=no_such_policy"], "no_such_policy"),
    (["sweep", SWEEP, "--option", "weibull_shape=-1"], "--option"),
    (["sweep", SWEEP, "--option", "no_such_option=1"], "no_such_option"),
    (["sweep", SWEEP, "--cell", "no_such_module:f"], "--cell"),
    (["sweep", SWEEP, "--import", "no_such_module_here"], "--import"),
    # keys
    (["keys", A_FILE, "--lab"], "FOLDER"),
    (["keys", "{dir}/k1", "--experiment", MISSING], "nothing.toml"),
    (["keys", "{dir}/k2", "--experiment", EXPERIMENTS], "experiments"),
    (["keys", "{dir}/k3", "--pullers", "../evil"], "--pullers"),
    (["keys", "{dir}/k4", "--pullers", ""], "--pullers"),
    # export
    (["export", "/nonexistent/run"], "/nonexistent/run: no such folder"),
    (["export", A_FILE], "README.md is a file; mgst export expects a run folder"),  # (it said "no journal")
    (["export", "{bad_journal}/journal.sqlite"], "the journal itself: give its run folder"),
    (["export", "{no_journal}"], "no journal"),
    (["export", "{bad_journal}"], "journal.sqlite"),
    (["export", "{journal_is_dir}"], "journal.sqlite"),
    (["export", "{no_journal}", "--salvage"], "journal"),
    (["export", "{journal_is_dir}", "--salvage"], "not a journal file (a folder)"),  # not "cannot write" (75)
    # policies, and mgst itself
    (["policies", "--import", "no_such_module_here"], "--import"),
    (["--no-such-flag", "policies"], "--no-such-flag"),
    (["simulate", HIHI, "--jobs", "xml"], "--jobs"),
    (["simulate", "{trace_elsewhere}"], "trace"),
    # sweep files
    (["sweep", "{sweep_unknown_key}"], "bogus"),
    (["sweep", "{sweep_unknown_scenario}"], "no_such_scenario"),
    # TOML beyond tomllib's means, in every file kind; traces
    (["simulate", "{deep_toml}"], "nested deeper than 32"),
    (["simulate", "{deep_table_toml}"], "nested deeper than 32"),
    (["sweep", "{deep_toml}"], "nested deeper than 32"),
    (["simulate", "{dotted_toml}"], "a key of more than 32 dotted parts"),
    (["traces", "summary", "{dup_fta}"], "names column 'node_name' twice"),
    (["traces", "summary", "{week}", "--task-minutes", "1e308"], "--task-minutes"),
    (["traces", "summary", "{week}", "--task-minutes", "5,inf"], "--task-minutes"),
    (["traces", "summary", "{week}", "--task-minutes", "5,15,5.0"], "--task-minutes: 5 is given twice"),
    (["traces", "summary", "{huge_span}"], "PATH: "),  # the trace's fault, not the task lengths'
    # run and mapper: each refused before a socket or a process is made (--duration 1 and --register-timeout 3
    # bound the test, should one get through)
    (["run", EXPERIMENTS], "experiments"),
    (["run", HIHI, "--duration", "-1"], "--duration"),
    (["run", HIHI, "--duration", "nan"], "--duration"),
    (["run", HIHI, "--duration", "0"], "--duration"),
    (["run", HIHI, "--duration", "1", "--time-unit", "0"], "--time-unit"),
    (["run", HIHI, "--duration", "1", "--time-unit", "nan"], "--time-unit"),
    (["run", HIHI, "--duration", "1", "--seed", "-1"], "--seed"),
    (["run", HIHI, "--duration", "1", "--seed", str(2**64), "--out", "{dir}/big_seed_run"], "--seed"),
    (["run", "{big_seed}", "--duration", "1", "--out", "{dir}/big_seed_file_run"], "simulation.seed"),
    (["run", HIHI, "--duration", "1", "--executor", "telepathy"], "--executor"),
    (["run", HIHI, "--duration", "1", "--policy", "no_such_policy"], "--policy"),
    # (refused once the run had begun making its keys, saying neither the file nor the entry)
    (["run", "{name_slash}", "--out", "{dir}/slash_run"],
     "name_slash.toml: machines.names[1]: '../x' cannot name a key"),
    (["mapper", "{name_slash}", "--keys", "{dir}", "--register-timeout", "3"], "machines.names[1]"),
    (["run", HIHI, "--resume", "{no_journal}", "--policy", "fcfs"], "--policy"),
    (["mapper", HIHI, "--policy", "lpas_gd", "--insecure", "--register-timeout", "3"], "did you mean 'lpas_dg'"),
    (["mapper", HIHI, "--resume", "{no_journal}", "--policy", "fcfs"], "--policy"),
    (["run", "{unknown_policy}", "--duration", "1"], "no_such_policy"),
    (["run", HIHI, "--duration", "1", "--import", "no_such_module_here"], "--import"),
    (["mapper", HIHI, "--bind", "no-scheme-here", "--insecure"], "--bind"),
    (["mapper", HIHI, "--bind", "tcp://*:0"], "--keys"),  # reachable from outside: keys, or --insecure said
    (["mapper", HIHI, "--register-timeout", "0", "--insecure"], "--register-timeout"),
    (["mapper", HIHI, "--register-timeout", "nan", "--insecure"], "--register-timeout"),
    (["mapper", HIHI, "--register-timeout", "-5", "--insecure"], "--register-timeout"),
    (["mapper", HIHI, "--farewell", "-1", "--insecure", "--register-timeout", "3"], "--farewell"),
    (["mapper", HIHI, "--farewell", "nan", "--insecure", "--register-timeout", "3"], "--farewell"),
    (["mapper", HIHI, "--keys", "/nonexistent/keys", "--register-timeout", "3"], "--keys"),
    (["mapper", HIHI, "--keys", A_FILE, "--register-timeout", "3"], "--keys"),
    (["mapper", HIHI, "--keys", "{dir}", "--register-timeout", "3"], "mapper.key"),  # a folder without keys
    (["mapper", HIHI, "--resume", "/nonexistent/run", "--bind", "tcp://127.0.0.1:0"], "no such folder"),
    (["mapper", HIHI, "--resume", A_FILE, "--bind", "tcp://127.0.0.1:0"], "--resume"),
    (["mapper", HIHI, "--resume", "{bad_journal}", "--bind", "tcp://127.0.0.1:0"], "journal.sqlite"),
    (["mapper", HIHI, "--resume", "{no_journal}", "--seed", "3"], "--seed"),
    (["mapper", HIHI, "--out", A_FILE, "--insecure", "--register-timeout", "3"], "--out"),
    (["mapper", HIHI, "--duration", "-1", "--insecure", "--register-timeout", "3"], "--duration"),
    # more trace periods in the run than a puller takes: both commands say it the same way, before starting
    (["run", "{many_periods}", "--out", "{dir}/many"], "availability.file: machine 'M1' has 3,000 trace periods"),
    (["run", "{many_periods}", "--duration", "1", "--out", "{dir}/many"], "--duration: machine 'M1' has 3,000"),
    (["mapper", "{many_periods}", "--insecure", "--register-timeout", "3", "--out", "{dir}/many2"],
     "availability.file: machine 'M1' has 3,000 trace periods"),
    (["run", "{commands_emulated}", "--duration", "1", "--out", "{dir}/cmd1"], "testbed.commands"),
    (["mapper", "{commands_spun}", "--insecure", "--register-timeout", "3", "--out", "{dir}/cmd2"],
     "testbed.commands"),
    # every other option of every command (tests/test_bad_inputs.py's coverage test holds the table to `--help`)
    (["simulate", HIHI, "--overheads", "/nonexistent/run"], "--overheads"),
    (["simulate", HIHI, "--overheads", A_FILE], "--overheads"),
    (["simulate", HIHI, "--out", PROC], "--out"),
    (["simulate", HIHI, "--workers", HUGE], "--workers"),  # (an OverflowError in the process pool)
    (["simulate", HIHI, "--replications", HUGE], "--replications"),  # (ran for ever)
    (["simulate", "{huge_replications}"], "simulation.replications"),
    (["paper", "hihi-mfd-fd", "--warmup", "-1"], "--warmup"),
    (["paper", "hihi-mfd-fd", "--warmup", "nan"], "--warmup"),
    (["paper", "hihi-mfd-fd", "--horizon", "nan"], "--horizon"),
    (["paper", "hihi-mfd-fd", "--replications", HUGE], "--replications"),
    (["paper", "hihi-mfd-fd", "--workers", HUGE], "--workers"),
    (["sweep", SWEEP, "--scheduler", "nonsense"], "--scheduler"),  # (said, then hung the exit for ever)
    (["sweep", SWEEP, "--scheduler", "inproc://x"], "--scheduler"),
    (["sweep", SWEEP, "--scheduler", "tcp://127.0.0.1:1", "--workers", "2"], "--workers"),
    (["sweep", SWEEP, "--replications", HUGE], "--replications"),  # (an OverflowError)
    (["sweep", SWEEP, "--workers", HUGE], "--workers"),  # (an OverflowError)
    (["sweep", SWEEP, "--only", ""], "--only"),
    (["sweep", SWEEP, "--cell", "no_colon_here"], "--cell"),
    (["sweep", SWEEP, "--out", PROC], "--out"),
    (["sweep", SWEEP, "--slurm", "0"], "--slurm"),
    (["sweep", SWEEP, "--slurm-partition", "short"], "--slurm"),  # (needs --slurm)
    (["sweep", SWEEP, "--slurm-account", "proj"], "--slurm"),
    (["sweep", SWEEP, "--slurm-option", "--exclusive"], "--slurm"),
    (["sweep", SWEEP, "--slurm-memory", "2GB"], "--slurm"),  # (without --slurm, it ran the sweep locally)
    (["sweep", SWEEP, "--slurm", "2", "--slurm-memory", "lots"], "--slurm-memory"),
    (["sweep", SWEEP, "--slurm", "2", "--slurm-time", "forever"], "--slurm-time"),
    (["reproduce", "no-such-paper"], "no-such-paper"),
    (["reproduce", "mgst", "--experiments", "/nonexistent/experiments"], "--experiments"),
    (["reproduce", "mgst", "--experiments", A_FILE], "--experiments"),
    (["reproduce", "mgst", "--experiments", "/nonexistent/x"], "experiments/ at the root of mgst's repository"),
    (["reproduce", "mgst", "--out", A_FILE], "--out"),
    (["reproduce", "mgst", "--out", PROC], "--out"),
    (["reproduce", "mgst", "--workers", "0"], "--workers"),
    (["reproduce", "mgst", "--workers", HUGE], "--workers"),
    (["reproduce", "mgst", "--option", "credit=1"], "--option"),  # (its slices are simulations)
    (["reproduce", "casanova", "--option", "speed=2"], "--option"),  # (not an option of its scenario)
    (["reproduce", "casanova", "--option", "credit"], "--option"),  # (no value)
    (["run", HIHI, "--duration", "1", "--executor", "command"], "--executor"),  # (a traceback from the mapper)
    (["run", HIHI, "--duration", "1", "--out", PROC], "--out"),
    (["run", HIHI, "--duration", "1", "--out", "y" * 300], "--out"),  # (a name too long for the file system)
    (["run", HIHI, "--duration", "1", "--live", "abc"], "--live"),
    (["run", HIHI, "--duration", "1", "--live", "127.0.0.1:0", "--no-live"], "not allowed with argument --live"),
    (["run", HIHI, "--duration", "1", "--no-live", "--live-token-file", A_FILE], "--live-token-file: is the live"),
    (["run", HIHI, "--duration", "1", "--live", "127.0.0.1:99999"], "--live"),
    (["run", HIHI, "--duration", "1", "--live", "0.0.0.0:0", "--live-token-file", "/nonexistent/token"],
     "--live-token-file"),
    (["run", HIHI, "--duration", "1", "--network", "delay=soon"], "--network"),
    (["run", HIHI, "--resume", "/nonexistent/run"], "no such folder"),
    (["run", HIHI, "--resume", A_FILE], "--resume"),
    (["mapper", HIHI, "--executor", "command", "--insecure", "--register-timeout", "3"], "--executor"),
    (["mapper", HIHI, "--bind", "inproc://x", "--insecure", "--register-timeout", "3"], "--bind"),  # (IndexError)
    (["mapper", HIHI, "--live", "abc", "--insecure", "--register-timeout", "3"], "--live"),
    (["mapper", HIHI, "--live", "0.0.0.0:0", "--live-token-file", "/nonexistent/token", "--insecure",
      "--register-timeout", "3"], "--live-token-file"),
    (["mapper", HIHI, "--time-unit", "0", "--insecure", "--register-timeout", "3"], "--time-unit"),
    (["mapper", HIHI, "--seed", "-1", "--insecure", "--register-timeout", "3"], "--seed"),
    (["mapper", HIHI, "--import", "no_such_module_here", "--insecure"], "--import"),
    (["mapper", HIHI, "--out", PROC, "--insecure", "--register-timeout", "3"], "--out"),
    (["mapper", HIHI, "--begin-with", "0", "--insecure", "--register-timeout", "3"], "--begin-with"),
    (["lab", "up", "/nonexistent/hosts.toml", "--settle", "nan"], "--settle"),
    (["lab", "up", "/nonexistent/hosts.toml", "--parallel", "0"], "--parallel"),
    (["lab", "up", "/nonexistent/hosts.toml"], "hosts.toml"),
    (["lab", "up", "{slurm_hosts}", "--pilots", "0"], "--pilots"),
    (["lab", "overlay", "{slurm_hosts}", "--live", "x"], "--live"),
    (["lab", "overlay", "{slurm_hosts}", "--live", "http://127.0.0.1:1/", "--poll", "nan"], "--poll"),
    (["lab", "overlay", "{slurm_hosts}", "--live", "http://127.0.0.1:1/", "--parallel", "0"], "--parallel"),
    (["lab", "status", "/nonexistent/hosts.toml", "--lines", "99"], "--lines"),
    (["lab", "status", "/nonexistent/hosts.toml", "--parallel", "-3"], "--parallel"),
    (["lab", "down", "/nonexistent/hosts.toml", "--grace", "-1"], "--grace"),
    (["lab", "down", "/nonexistent/hosts.toml", "--parallel", HUGE], "--parallel"),
    (["traces", "generate", "no-such-kind", "--out", "{dir}/p1"], "no-such-kind"),
    (["traces", "generate", "sdsc", "--out", A_FILE], "--out"),
    (["traces", "generate", "sdsc", "--out", "{dir}/p2", "--hosts", "0"], "--hosts"),
    (["traces", "generate", "sdsc", "--out", "{dir}/p3", "--days", "nan"], "--days"),
    (["traces", "generate", "sdsc", "--out", "{dir}/p4", "--seed", "-1"], "--seed"),
    (["traces", "generate", "sdsc", "--out", "{dir}/p5", "--seed", str(2**63)], "--seed"),
    (["traces", "summary", "{week}", "--format", "xml"], "--format"),
    (["traces", "summary", "{week}", "--hosts-file", "/nonexistent/hosts.csv"], "--hosts-file"),
    (["traces", "summary", "{week}", "--png", PROC + "/x.png"], "--png"),
    (["traces", "summary", "{week}", "--starts", "0"], "--starts"),
    (["traces", "summary", "{week}", "--seed", "-1"], "--seed"),
    (["traces", "summary", "/nonexistent/trace.csv"], "trace.csv"),
    (["keys", "{dir}/k5", "--experiment", A_FILE], "README.md"),
    # the puller (refused before it connects)
    (["puller", "--connect", "tcp://127.0.0.1:5555", "--machine", "", "--insecure"], "--machine"),
    (["puller", "--connect", "tcp://127.0.0.1:5555", "--machine", "M" * 65, "--insecure"], "--machine"),
    (["puller", "--connect", "tcp://127.0.0.1:5555", "--machine", "M1", "--insecure", "--give-up", "0"],
     "--give-up"),
    (["puller", "--connect", "tcp://127.0.0.1:5555", "--machine", "M1", "--insecure", "--give-up", "nan"],
     "--give-up"),
    (["puller", "--connect", "tcp://127.0.0.1:5555", "--machine", "M1", "--insecure", "--exit-with", "0"],
     "--exit-with"),
    (["puller", "--connect", "tcp://127.0.0.1:5555", "--machine", "M1", "--insecure", "--exit-with", "999999999"],
     "--exit-with"),
    (["puller", "--connect", "tcp://127.0.0.1:5555", "--machine", "M1", "--insecure", "--throttle", "x"],
     "--throttle"),
    (["puller", "--connect", "tcp://127.0.0.1:5555", "--machine", "M1", "--insecure", "--allow", "'open"],
     "--allow"),
    (["puller", "--connect", "tcp://127.0.0.1:5555", "--machine", "M1", "--insecure", "--allow-file",
      "/nonexistent/allow.toml"], "allow.toml"),
    (["puller", "--connect", "tcp://127.0.0.1:5555", "--machine", "M1", "--key", "/nonexistent/M1.key_secret",
      "--mapper-key", "/nonexistent/mapper.key"], "key"),
    (["puller", "--connect", "tcp://127.0.0.1:5555", "--machine", "M1", "--mapper-key", "/nonexistent/mapper.key"],
     "--key"),
    (["puller", "--connect", "", "--machine", "M1", "--insecure"], "--connect"),
    (["puller", "--connect", "127.0.0.1:5555", "--machine", "M1", "--insecure"], "tcp://"),
    (["puller", "--connect", "tcp://127.0.0.1:5555", "--machine", "M1"], "--keys"),
    (["puller", "--connect", "tcp://127.0.0.1:5555", "--machine", "M1", "--keys", "/nonexistent/k"], "--keys"),
    (["puller", "--connect", "tcp://127.0.0.1:5555", "--machine", "M1", "--insecure", "--slots", "nan"], "--slots"),
    (["puller", "--connect", "tcp://127.0.0.1:5555", "--machine", "M1", "--insecure", "--idle-exit", "nan"],
     "--idle-exit"),
]


def _name(args: list[str]) -> str:
    """A test id: the arguments, with this checkout's path left out."""
    return " ".join(args).replace(f"{ROOT}/", "")[:70]


def _fill(args: list[str], files: dict[str, str]) -> list[str]:
    return [a.format(**files) if "{" in a else a for a in args]


def _check(code: int | None, stderr: str, key: str) -> None:
    assert "Traceback" not in stderr, stderr[-3000:]
    assert code == EXIT_USAGE, (code, stderr[-3000:])
    errors = [line for line in stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, stderr[-3000:]  # one error line (argparse's usage lines besides)
    assert key in errors[0], (key, errors[0])


@pytest.mark.parametrize(("args", "key"), IN_PROCESS, ids=[_name(a) for a, _ in IN_PROCESS])
def test_a_bad_input_gets_one_error_line_naming_it(args, key, files, capsys):
    try:
        code = main(_fill(args, files))
    except SystemExit as e:  # argparse's own refusals
        code = e.code
    stderr = capsys.readouterr().err
    _check(code, stderr, key)


@pytest.mark.parametrize("command", ["run", "mapper", "simulate", "simulate a sweep's", "sweep"])
def test_an_out_folder_holding_results_is_refused_and_left_as_it_was(tmp_path, capsys, command):
    """`mgst run --out` into a folder holding a simulation's summary.csv overwrote it, and `mgst simulate --out` into a
    testbed run's folder replaced the run's summary.csv and jobs.csv (the summary.json and report then disagreed);
    `mgst sweep --out` into a run's folder, and `mgst simulate --out` into a sweep's, replaced its summary.csv."""
    out = tmp_path / "results"
    out.mkdir()
    held = {"summary.csv": "mine\n", "notes.txt": "kept\n"}
    if command == "simulate":
        held["journal.sqlite"] = "a run's journal\n"
    if command == "simulate a sweep's":
        held["sweep.json"] = "{}\n"
    for name, text in held.items():
        (out / name).write_text(text)
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('scenario = "anglano"\nname = "x"\n[simulation]\nhorizon = 1000.0\ncheckpoint_interval = 60.0\n')
    simulate = ["simulate", HIHI, "--horizon", "200", "--replications", "1"]
    args = {"run": ["run", HIHI, "--duration", "1"],
            "mapper": ["mapper", HIHI, "--insecure", "--register-timeout", "3", "--duration", "1"],
            "simulate": simulate, "simulate a sweep's": simulate,
            "sweep": ["sweep", str(sweep), "--workers", "1", "--no-plots", "--quiet"]}[command]
    _check(main([*args, "--out", str(out)]), capsys.readouterr().err, "--out")
    # (a sweep's lock file, empty of meaning once it ends, aside)
    assert {p.name: p.read_text() for p in out.iterdir() if p.name != ".sweep.lock"} == held


def test_the_file_s_run_lengths_bind_only_the_commands_that_use_them(files):
    """A horizon of 1e7 (2e7 jobs) refused `mgst simulate --horizon 30` and `mgst run`, neither of which simulates it;
    a testbed run of 2e8 time units refused `mgst simulate`. Each command is held to the lengths it runs (the table
    above: the file's when it takes them, the command line's when given)."""
    from mgst.config import load_experiment  # noqa: PLC0415

    with pytest.raises(ConfigError, match="simulation.horizon"):
        load_experiment(files["long_horizon"])
    with pytest.raises(ConfigError, match="testbed.duration"):
        load_experiment(files["long_testbed"], lengths_not_used=("simulation",))
    assert load_experiment(files["long_horizon"], lengths_not_used=("simulation",)).simulation.horizon == 1e7
    assert load_experiment(files["long_testbed"], lengths_not_used=("testbed",)).testbed.duration == 2e6
    with pytest.raises(ValueError, match="not a run length"):
        load_experiment(files["long_testbed"], lengths_not_used=("tesbed",))
    assert main(["simulate", files["long_horizon"], "--horizon", "30", "--warmup", "0", "--replications", "1",
                 "--workers", "1", "--quiet", "--json"]) == 0
    assert main(["simulate", files["long_testbed"], "--horizon", "30", "--warmup", "0", "--replications", "1",
                 "--workers", "1", "--quiet", "--json"]) == 0


@pytest.mark.parametrize("name", ["grid_sizes.csv", "report.html", "comparison.png", "bags.csv",
                                  "simulation_jobs.csv"])
def test_a_run_refuses_a_folder_holding_any_one_file_a_run_writes(tmp_path, capsys, name):
    """Each of a run's result files alone refuses the folder: GridBot's grid_sizes.csv was overwritten."""
    out = tmp_path / "results"
    out.mkdir()
    (out / name).write_text("mine\n")
    _check(main(["run", HIHI, "--duration", "1", "--out", str(out)]), capsys.readouterr().err, "--out")
    assert [p.name for p in out.iterdir()] == [name] and (out / name).read_text() == "mine\n"


def test_a_seed_beyond_64_bits_is_refused_before_the_run_s_folder_is_made(tmp_path, capsys):
    """It was a traceback from the wire's encoder once the run had begun, leaving a journal of a run that never ran
    (a folder that then held "a run")."""
    out = tmp_path / "run"
    _check(main(["run", HIHI, "--duration", "1", "--seed", str(2**64), "--out", str(out)]), capsys.readouterr().err,
           "--seed")
    assert not out.exists()


def test_a_module_that_raises_on_import_is_said_with_where_it_raised(tmp_path, monkeypatch, capsys):
    """It said "--import: mod: ZeroDivisionError: division by zero", and no file or line (a SyntaxError has them)."""
    (tmp_path / "raises_on_import.py").write_text("from mgst.policies import register\n\nx = 1 / 0\n")
    (tmp_path / "needs_a_missing_module.py").write_text("import no_such_dependency_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for module, said in (("raises_on_import", "ZeroDivisionError: division by zero"),
                         ("needs_a_missing_module", "No module named 'no_such_dependency_here'")):
        _check(main(["simulate", HIHI, "--import", module]), capsys.readouterr().err,
               f"--import: {module}: {said} ({tmp_path / module}.py, line {3 if module == 'raises_on_import' else 1})")


def test_a_module_that_exits_on_import_is_an_error_not_a_silent_end(tmp_path, monkeypatch, capsys):
    """A script imported by mistake (its sys.exit() at the top level) ended mgst silently, with the script's code."""
    (tmp_path / "a_script.py").write_text("import sys\n\nsys.exit(0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    _check(main(["simulate", HIHI, "--import", "a_script"]), capsys.readouterr().err,
           "--import: a_script: it called sys.exit(0) as it was imported")


def test_an_import_of_a_module_in_this_folder_but_not_on_the_path_says_how(tmp_path, monkeypatch, capsys):
    """`mgst simulate --import mine` next to mine.py: the console script does not import from the current folder
    (python -m does), and "No module named 'mine'" left the user guessing."""
    (tmp_path / "mine.py").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    code = main(["simulate", HIHI, "--import", "mine"])
    stderr = capsys.readouterr().err
    _check(code, stderr, "--import")
    assert "this folder has one" in stderr and "PYTHONPATH=." in stderr, stderr
    code = main(["simulate", HIHI, "--import", "not_here_either"])
    stderr = capsys.readouterr().err
    _check(code, stderr, "--import")
    assert "No module named 'not_here_either'" in stderr and "PYTHONPATH" not in stderr, stderr


def test_the_table_is_big_enough():
    assert len(IN_PROCESS) + len(SUBPROCESS) >= 80


# A few as real subprocesses (the top level and the interpreter's own exit, as a user meets them); "{port}" is a
# port this test holds in use.
SUBPROCESS = [
    (["run", MISSING], "nothing.toml"),
    (["run", HIHI, "--out", A_FILE], "--out"),
    (["mapper", HIHI, "--bind", "tcp://127.0.0.1:{port}", "--insecure"], "--bind"),
    (["mapper", HIHI, "--bind", "tcp://999.1.1.1:5555", "--insecure"], "--bind"),
    (["keys", A_FILE, "--lab"], "FOLDER"),
    (["puller", "--connect", "tcp://127.0.0.1:5555", "--machine", "M1", "--insecure", "--slots", "0"], "--slots"),
    # said its error, then hung the interpreter's exit for ever (a Dask client closing in __del__)
    (["sweep", SWEEP, "--scheduler", "nonsense", "--out", "{dir}/sched"], "--scheduler"),
]


@pytest.fixture(scope="module")
def subprocess_results(files) -> dict[int, subprocess.CompletedProcess[str]]:
    """Every SUBPROCESS case run, PARALLEL at a time, with a port held in use by this process."""
    ctx = zmq.Context()
    held = ctx.socket(zmq.ROUTER)
    port = held.bind_to_random_port("tcp://127.0.0.1")
    env = {**os.environ, "MGST_PURE": "1"}

    def one(args: list[str]) -> subprocess.CompletedProcess[str]:
        argv = _fill(args, {**files, "port": str(port)})
        return subprocess.run([sys.executable, "-m", "mgst", *argv], capture_output=True, text=True, timeout=60,
                              cwd=ROOT, env=env)

    try:
        with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
            return dict(enumerate(pool.map(one, [args for args, _ in SUBPROCESS])))
    finally:
        held.close(linger=0)
        ctx.term()


@pytest.mark.parametrize("case", range(len(SUBPROCESS)), ids=[_name(a) for a, _ in SUBPROCESS])
def test_a_bad_input_to_a_process_command_gets_one_error_line(case, subprocess_results):
    p = subprocess_results[case]
    _check(p.returncode, p.stderr, SUBPROCESS[case][1])


# -------------------------------------------------------------------- the table covers every command's options

def _help(words: list[str], capsys) -> str:
    capsys.readouterr()
    with contextlib.suppress(SystemExit):
        main([*words, "--help"])
    return capsys.readouterr().out


def _commands(capsys) -> list[tuple[str, ...]]:
    """Every command of `mgst --help`, the lab's and the traces' sub-commands one by one."""
    listed = re.search(r"\{([a-z,]+)\}", _help([], capsys)).group(1).split(",")
    out: list[tuple[str, ...]] = []
    for command in listed:
        sub = re.search(rf"^usage: mgst {command} [^{{\n]*\{{([a-z,]+)\}}", _help([command], capsys), re.M)
        out += [(command, s) for s in sub.group(1).split(",")] if sub else [(command,)]
    return out


def _value_options(words: tuple[str, ...], capsys) -> set[str]:
    """The options of ``mgst WORDS`` that take a value, as its --help lists them."""
    return {m.group(1) for m in re.finditer(r"^  (?:-\w, )?(--[a-z][a-z-]*) [A-Z\[{']", _help(list(words), capsys),
                                            re.M)}


def test_the_table_has_a_bad_value_of_every_option_of_every_command(capsys):
    """Each command (and sub-command) of `mgst --help` has a case in the tables, and so has each of its options
    that takes a value: a new option is not left out of the table unsaid."""
    cases = [args for args, _ in IN_PROCESS + SUBPROCESS]
    commands = _commands(capsys)
    assert len(commands) >= 15 and ("lab", "status") in commands and ("traces", "summary") in commands
    missing = []
    for words in commands:
        mine = [args for args in cases if tuple(args[:len(words)]) == words]
        if not mine:
            missing.append(" ".join(words))
        for option in sorted(_value_options(words, capsys)):
            if not any(option in args for args in mine):
                missing.append(f"{' '.join(words)} {option}")
    assert not missing, f"no bad value in the table for: {', '.join(missing)}"


@pytest.mark.parametrize("given", ["./mine.py", "mine.py", "{tmp}/mine.py"])
def test_an_import_of_a_file_s_path_says_to_give_its_module_s_name(tmp_path, monkeypatch, capsys, given):
    """`--import ./mine.py` (a file's path, where Python imports a module's name): one line saying so, with the name
    and the folder to put on Python's path; it was a TypeError about relative imports, or "'mine' is not a package"."""
    (tmp_path / "mine.py").write_text("")
    monkeypatch.chdir(tmp_path)
    code = main(["simulate", HIHI, "--import", given.format(tmp=tmp_path)])
    stderr = capsys.readouterr().err
    _check(code, stderr, "--import")
    assert f"--import mine, with its folder on Python's path (PYTHONPATH={tmp_path})" in stderr, stderr


def test_policies_lists_a_policy_without_a_docstring(tmp_path, monkeypatch, capsys):
    """`mgst policies --import mine`: a policy of one's own with no docstring is listed by its name (its line was
    empty: "did my import work?" read no)."""
    (tmp_path / "undocumented_policy.py").write_text(
        "from mgst.policies import register\nfrom mgst.policies.fcfs import FCFS\n\n\n@register\n"
        "class Mine(FCFS):\n    name = 'undocumented_mine'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["policies", "--import", "undocumented_policy"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split() == ["undocumented_mine", "(no", "docstring)"] for line in lines), lines


def test_a_live_view_that_cannot_be_served_leaves_no_token_and_no_folder_behind(tmp_path, capsys):
    """An address not of this machine (192.0.2.1, documentation's own): exit 2, and nothing made, as the help says;
    the view's new token was left in the run's folder, which then held a secret of a run that never ran."""
    exp = tmp_path / "e.toml"
    exp.write_text(SMALL)
    out = tmp_path / "run"
    assert main(["run", str(exp), "--live", "192.0.2.1:8080", "--out", str(out), "--duration", "1"]) == EXIT_USAGE
    assert "--live: cannot serve the live view on 192.0.2.1:8080" in capsys.readouterr().err
    assert not out.exists()
    out.mkdir()  # a folder given empty is the user's: kept, empty
    assert main(["run", str(exp), "--live", "192.0.2.1:8080", "--out", str(out), "--duration", "1"]) == EXIT_USAGE
    assert out.is_dir() and not any(out.iterdir())


def test_export_of_an_empty_journal_file_refuses_it_and_leaves_it_empty(tmp_path, capsys):
    """A 0-byte journal.sqlite (a run that died before its first write, a truncated copy): export made it an empty
    SQLite database of 4 KB, writing to the file it was asked to read, and blamed a damaged header."""
    (tmp_path / "journal.sqlite").write_bytes(b"")
    for args in (["export", str(tmp_path)], ["export", str(tmp_path), "--salvage"]):
        _check(main(args), capsys.readouterr().err, "an empty file, not a journal")
        assert (tmp_path / "journal.sqlite").stat().st_size == 0
