"""Run LPAS_DG's robustness fixes off and on, testbed beside simulation, and write a Markdown table.

For each row (a setting of this folder and a fix's [policy] keys) it writes a copy of the setting's file
with those keys, runs ``mgst run`` on it (pullers behind the emulated network of ``--network``), reads the
run's summary.json (the testbed's overall mean response with its interval, and the simulation of the same
setting, seed and model time that ``mgst run`` computes beside it), and, unless --no-sim-alone, runs
``mgst simulate`` on the same file (longer, for a tighter interval). Rows run one after the other (two
shared cores); each row's result goes to RESULTS/ROW.json as soon as it is done, and the table to
RESULTS/results.md after each row. Usage, from the repository root:

    MGST_PURE=1 python experiments/robustness/run_robustness.py --duration 90 --out /tmp/robust \
        --results experiments/robustness/results [--only delay-off,delay-correction] [--sim-only]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# A LAN-like link for the settings that are not about delay: every puller still sits behind the emulated
# network, with 1 ms each way (the paper's lab); the delay setting has 50 ms (a wide-area link).
LAN = "delay=1ms"
WAN = "delay=50ms"
# (row id, setting file, what the row is, its [policy] keys, its network or None for loopback)
ROWS: list[tuple[str, str, str, dict[str, object], str | None]] = [
    ("arrival-class-off", "arrival-class", "off", {}, LAN),
    ("arrival-class-fix", "arrival-class", "arrival_check_period = 10, arrival_threshold = 0.15",
     {"arrival_check_period": 10.0, "arrival_threshold": 0.15}, LAN),
    ("rates-machine-off", "rates-machine", "off", {}, LAN),
    ("rates-machine-fix", "rates-machine", "rate_threshold = 0.15", {"rate_threshold": 0.15}, LAN),
    ("delay-off", "delay", "off", {}, WAN),
    ("delay-correction", "delay", "delay_correction = true", {"delay_correction": True}, WAN),
    ("delay-lpas-choice", "delay", "server_choice = \"lpas\"", {"server_choice": "lpas"}, WAN),
    ("failures-off", "failures", "off (the testbed's 3 x time-out alone)", {}, LAN),
    ("failures-timeout", "failures", "timeout_factor = 1.5", {"timeout_factor": 1.5}, LAN),
    ("failures-timeout3", "failures", "timeout_factor = 3 (MGST's own factor, in the policy)", {"timeout_factor": 3.0},
     LAN),
    ("failures-tsystem", "failures", "resolve_on_events = false, resolve_period = 5",
     {"resolve_on_events": False, "resolve_period": 5.0}, LAN),
    ("arrival-uniform-off", "arrival-uniform", "off", {}, LAN),
    ("arrival-uniform-fix", "arrival-uniform", "arrival_check_period = 10, arrival_threshold = 0.15",
     {"arrival_check_period": 10.0, "arrival_threshold": 0.15}, LAN),
    ("rates-uniform-off", "rates-uniform", "off", {}, LAN),
    ("rates-uniform-fix", "rates-uniform", "rate_threshold = 0.15", {"rate_threshold": 0.15}, LAN),
    ("delay-loopback", "delay", "off, on loopback (no emulated network): the reference", {}, None),
]
# The simulation alone: replications x model time units (HiHi: about 30 jobs per unit; ~10 s each here)
SIM_REPLICATIONS = 5
SIM_HORIZON = 400.0
RUN_TIMEOUT_S = 300  # a run that has not ended by then (generation, drain, simulation) is killed and reported


def toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def with_policy_keys(setting: Path, keys: dict[str, object], dest: Path) -> Path:
    """A copy of ``setting`` whose [policy] section (the file's last) has ``keys`` set."""
    lines = setting.read_text().splitlines()
    start = lines.index("[policy]")
    kept = [line for line in lines[start + 1:] if line.split("=")[0].strip() not in keys]
    body = lines[:start + 1] + kept + [f"{k} = {toml_value(v)}" for k, v in keys.items()]
    dest.write_text("\n".join(body) + "\n")
    return dest


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def estimate(d: dict | None) -> dict | None:
    if not d:
        return None
    return {"mean": d.get("mean_response"), "ci95": d.get("ci95"), "jobs": d.get("jobs")}


def run_row(row: tuple, args: argparse.Namespace) -> dict:
    rid, setting, fix, keys, network = row
    work = args.out / rid
    work.mkdir(parents=True, exist_ok=True)
    exp_file = with_policy_keys(HERE / f"{setting}.toml", keys, work / f"{setting}.toml")
    env = {**os.environ, "MGST_PURE": "1"}
    result: dict = {"row": rid, "setting": setting, "fix": fix, "keys": keys, "network": network,
                    "duration_s": args.duration, "seed": args.seed, "load_before": load_average()}
    if not args.sim_only:
        out = work / "run"
        cmd = [sys.executable, "-m", "mgst", "run", str(exp_file), "--duration", str(args.duration), "--out", str(out),
               "--json", "--quiet", "--no-live"]
        if network is not None:
            cmd += ["--network", network]
        if args.seed is not None:
            cmd += ["--seed", str(args.seed)]
        result["command"] = " ".join(cmd[1:])
        began = time.monotonic()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=RUN_TIMEOUT_S)
            result["returncode"] = p.returncode
            if p.returncode != 0:
                result["error"] = p.stderr[-1500:]
        except subprocess.TimeoutExpired:
            result["returncode"], result["error"] = None, f"killed after {RUN_TIMEOUT_S} s"
        result["wall_s"] = round(time.monotonic() - began, 1)
        result["load_after"] = load_average()
        summary_file = out / "summary.json"
        if summary_file.exists():
            s = json.loads(summary_file.read_text())
            result["testbed"] = estimate(s.get("overall"))
            result["simulation_beside"] = estimate((s.get("simulation") or {}).get("overall"))
            result["policy_counts"] = s.get("policy_counts")
            result["jobs_generated"], result["jobs_done"] = s.get("jobs_generated"), s.get("jobs_done")
            result["timeouts"], result["requeues"] = s.get("timeouts"), s.get("requeues")
            result["network_asked"] = s.get("network")
            result["delays"] = s.get("delays")
    if not args.no_sim_alone:
        cmd = [sys.executable, "-m", "mgst", "simulate", str(exp_file), "--replications", str(SIM_REPLICATIONS),
               "--horizon", str(SIM_HORIZON), "--json", *(["--seed", str(args.seed)] if args.seed is not None else [])]
        began = time.monotonic()
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=RUN_TIMEOUT_S)
        result["sim_alone_wall_s"] = round(time.monotonic() - began, 1)
        if p.returncode == 0:
            s = json.loads(p.stdout)
            result["simulation_alone"] = estimate(s.get("overall"))
            result["simulation_alone"]["load"] = s.get("load")
            result["sim_policy_counts"] = s.get("policy_counts")
        else:
            result["sim_error"] = p.stderr[-1500:]
    return result


def fmt(e: dict | None) -> str:
    if not e or e.get("mean") is None:
        return "-"
    lo, hi = (e.get("ci95") or [None, None])[:2]
    interval = f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else ""
    return f"{e['mean']:.3f}{interval}"


def counts(c: dict | None) -> str:
    if not c:
        return "-"
    names = {"solves": "solves", "solves_arrivals": "by arrivals", "solves_rates": "by rates",
             "solves_delay": "by delay", "timeouts": "T/O", "false_suspicions": "false susp."}
    return ", ".join(f"{names[k]} {int(v)}" for k, v in c.items() if k in names and (v or k == "solves"))


def table(results: list[dict]) -> str:
    head = ("| setting | fix | network | testbed mean [95 % CI] | simulation beside [95 % CI] | testbed / sim "
            "| simulation alone [95 % CI] | policy counts (testbed) | load avg (before; after) |")
    lines = [head, "|" + "---|" * 9]
    for r in results:
        tb, sim = r.get("testbed"), r.get("simulation_beside")
        ratio = f"{tb['mean'] / sim['mean']:.2f}" if tb and sim and tb.get("mean") and sim.get("mean") else "-"
        net = r["network"] or "loopback"
        note = "" if r.get("returncode") in (0, None) and "error" not in r else " (run failed)"
        lines.append(f"| {r['setting']} | {r['fix']}{note} | {net} | {fmt(tb)} | {fmt(sim)} | {ratio} "
                     f"| {fmt(r.get('simulation_alone'))} | {counts(r.get('policy_counts'))} "
                     f"| {r['load_before']}; {r.get('load_after', '-')} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=90.0, help="seconds of job generation per testbed run")
    ap.add_argument("--out", type=Path, default=Path("/tmp/mgst-robustness"), help="run directories")
    ap.add_argument("--results", type=Path, default=HERE / "results", help="ROW.json files and results.md")
    ap.add_argument("--only", help="comma-separated row ids (default: every row, in order)")
    ap.add_argument("--seed", type=int, help="the runs' seed (default: each file's [simulation] seed)")
    ap.add_argument("--sim-only", action="store_true", help="no testbed runs: the simulation alone")
    ap.add_argument("--no-sim-alone", action="store_true", help="no `mgst simulate` beside each run")
    args = ap.parse_args()
    rows = ROWS
    if args.only:
        wanted = args.only.split(",")
        unknown = set(wanted) - {r[0] for r in ROWS}
        if unknown:
            print(f"run_robustness: error: --only: unknown rows {sorted(unknown)}", file=sys.stderr)
            return 2
        rows = [r for r in ROWS if r[0] in wanted]
    args.results.mkdir(parents=True, exist_ok=True)
    for row in rows:
        print(f"{time.strftime('%H:%M:%S')} {row[0]} (load {load_average()})", file=sys.stderr, flush=True)
        result = run_row(row, args)
        (args.results / f"{row[0]}.json").write_text(json.dumps(result, indent=1) + "\n")
        done = [json.loads(f.read_text()) for f in sorted(args.results.glob("*.json"))]
        order = {r[0]: k for k, r in enumerate(ROWS)}
        done.sort(key=lambda r: order.get(r["row"], len(order)))
        (args.results / "results.md").write_text(table(done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
