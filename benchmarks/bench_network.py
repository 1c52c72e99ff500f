"""The lab network (mgst run --network): what each setting imposes, measured across a real link from inside a
puller's namespace, and the relay's own cost at 0 ms.

Each setting gets a fresh link (mgst.netem.links.LabNetwork). UDP echoes (64 bytes) go from the namespace to the
mapper's address and back; the one-way delay is half the round trip (median, 5th and 95th percentiles); the echo
loss is 1 - (1 - p)^2 for a loss p each way. With a rate (and at 0 ms: what the relay can carry), a TCP
stream's throughput as received. The baseline is the same echoes on loopback in the root namespace, without the
relay: the relay's cost is the 0 ms link's median minus it. ``--runs``: also a real `mgst run` behind each
setting given, and the delays its journal measured. Needs root. Run:

    MGST_PURE=1 python benchmarks/bench_network.py [SETTING ...] [--runs SETTING ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from mgst.netem.links import LabNetwork
from mgst.netem.measure import Echoes, echoes, serving_echoes, throughput
from mgst.netem.spec import parse_network

SETTINGS = ("delay=0ms", "delay=20ms", "delay=50ms", "delay=20ms,jitter=5ms", "loss=1%", "rate=10mbit",
            "delay=20ms,rate=10mbit")
STREAM_BYTES = 4_000_000  # 3.2 s at 10 mbit/s: long enough for TCP's slow start to matter little


def loopback_echoes(count: int, interval: float) -> Echoes:
    """The same echoes on 127.0.0.1 in the root namespace (no relay, no namespace)."""
    with serving_echoes("127.0.0.1") as port:
        out = subprocess.run([sys.executable, "-m", "mgst.netem.measure", "echo", "127.0.0.1", str(port), str(count),
                              str(interval), "3"], capture_output=True, text=True, check=True,
                             timeout=count * interval + 60, start_new_session=True).stdout
    rtts = json.loads(out)
    return Echoes([r for r in rtts if r is not None], len(rtts))


def row(name: str, e: Echoes, mbit: float | None) -> str:
    d = e.as_dict()
    tput = f"{mbit:8.2f}" if mbit is not None else "       -"
    return (f"{name:<24} {d['one_way_median_ms']:9.3f} {d['one_way_p5_ms']:8.3f} {d['one_way_p95_ms']:8.3f} "
            f"{d['answered']:>5}/{d['sent']:<5} {100 * d['echo_loss']:6.2f} {tput}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--echoes", type=int, default=300, help="echoes per setting (default 300)")
    p.add_argument("--interval", type=float, default=0.01, help="seconds between echoes (default 0.01)")
    p.add_argument("--loss-echoes", type=int, default=3000, help="echoes for a loss setting (default 3000)")
    p.add_argument("--runs", nargs="*", metavar="SPEC",
                   help="also a real mgst run of 3 pullers behind each of these (e.g. none delay=0ms delay=20ms; "
                        "none: on loopback, without --network)")
    p.add_argument("--run-seconds", type=float, default=20.0, help="each run's duration (default 20)")
    p.add_argument("settings", nargs="*", default=list(SETTINGS))
    args = p.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores")
    print(f"{'setting':<24} {'1-way ms':>9} {'p5':>8} {'p95':>8} {'answered':>11} {'loss %':>6} {'mbit/s':>8}")
    print(row("loopback, no relay", loopback_echoes(args.echoes, args.interval), None))
    for setting in args.settings:
        spec = parse_network(setting)
        count = args.loss_echoes if spec.default.loss > 0 else args.echoes
        interval = args.interval if spec.default.loss == 0 else min(args.interval, 0.002)
        with LabNetwork(spec, ["bench"], seed=1) as net:
            e = echoes(net, 0, count, interval)
            capped = spec.default.rate is not None
            mbit = throughput(net, 0, STREAM_BYTES) / 1e6 if capped or setting == "delay=0ms" else None
        print(row(setting, e, mbit), flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.runs:
        runs(args.runs, args.run_seconds)
    return 0


# A small experiment: 3 machines, short jobs (1/8 of a 0.05 s time unit: 6 ms), 2 arrivals per unit (40 a second).
RUN_TOML = """[workload]
arrival_rates = [2.0]
[machines]
rates = [[8.0, 8.0, 8.0]]
[policy]
name = "fcfs"
[testbed]
time_unit = 0.05
duration = 1.0
"""


def runs(settings: list[str], seconds: float) -> None:
    """A real `mgst run` of RUN_TOML behind each setting: the journal's per-job delays (medians, ms)."""
    import tempfile  # noqa: PLC0415

    print(f"\nmgst run of 3 pullers for {seconds:g} s behind each setting: the journal's medians, ms")
    print(f"{'setting':<24} {'jobs':>5} {'t2-t1':>8} {'t4-t3':>8} {'t6-t5':>8} {'resp. ms':>9} {'load':>5}")
    with tempfile.TemporaryDirectory() as tmp:
        exp = os.path.join(tmp, "exp.toml")
        with open(exp, "w") as f:
            f.write(RUN_TOML)
        for k, setting in enumerate(settings):
            out = os.path.join(tmp, f"run{k}")
            network = [] if setting == "none" else ["--network", setting]
            done = subprocess.run([sys.executable, "-m", "mgst", "run", exp, "--duration", str(seconds), *network,
                                   "--out", out, "--json", "--quiet", "--no-live"], capture_output=True,
                                  text=True, timeout=seconds + 300, check=True)
            s = json.loads(done.stdout)
            d = s["delays"]
            ms = {k: d[k]["median"] * 1e3 for k in ("request_delay_s", "communication_delay_s", "report_delay_s")}
            print(f"{setting:<24} {s['jobs_done']:>5} {ms['request_delay_s']:8.2f} {ms['communication_delay_s']:8.2f} "
                  f"{ms['report_delay_s']:8.2f} {s['overall']['mean_response'] * 50:9.1f} {os.getloadavg()[0]:5.2f}",
                  flush=True)


if __name__ == "__main__":
    sys.exit(main())
