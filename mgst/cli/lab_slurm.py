"""`mgst lab up / status / down / overlay` for a hosts file with a [slurm] section: pilot jobs, and what they say."""

from __future__ import annotations

import argparse
import math
import sys

from mgst.config import ConfigError
from mgst.lab.slurm_config import SlurmLab


def slurm_command(args: argparse.Namespace, lab: SlurmLab) -> int:
    from mgst.lab import pilots, slurm  # noqa: PLC0415
    from mgst.lab.slurm import SlurmError, SlurmUsageError  # noqa: PLC0415

    try:
        if args.lab_command == "up":
            if args.pilots is not None and not 1 <= args.pilots <= lab.max_pilots:
                raise ConfigError("--pilots", f"give 1 to {lab.max_pilots} (slurm.max_pilots)")
            report = pilots.up(lab, args.pilots)
            for p in report.kept:
                print(f"{p.machine}: job {p.job} still holds it ({slurm.describe(p.state)}): kept")
            for p in report.submitted:
                print(f"{p.machine}: submitted job {p.job}")
            if report.waiting:
                print(f"free for later pilots (max_pilots = {lab.max_pilots}): {', '.join(report.waiting)}")
            print(f"logs {lab.shared_dir}/MACHINE-JOBID.log")
        elif args.lab_command == "status":
            recorded = pilots.with_states(pilots.recorded(lab), records=True)
            if not recorded:
                print(f"no pilot submitted from {lab.shared_dir}")
            for p in recorded:
                said = slurm.describe(p.state) if p.state is not None else "ended (no record of it left)"
                where = f" [{p.state.source}]" if p.state is not None and p.state.source != "squeue" else ""
                print(f"{p.machine}: job {p.job} {said}{where}; log {lab.shared_dir}/{p.machine}-{p.job}.log")
            live = [p for p in recorded if p.live]
            print(f"{len(live)} of {len(recorded)} pilots live; free identities: "
                  f"{', '.join(pilots.free_identities(lab, recorded)) or 'none'}")
        elif args.lab_command == "down":
            cancelled = pilots.down(lab)
            for p in cancelled:
                print(f"{p.machine}: cancelled job {p.job}")
            print(f"cancelled {len(cancelled)} pilot jobs" if cancelled else "no pilot job was live")
        else:
            from mgst.lab.overlay import LiveViewError, follow  # noqa: PLC0415

            if not (math.isfinite(args.poll) and 0.1 <= args.poll <= 60):
                raise ConfigError("--poll", "give 0.1 to 60 seconds")
            if not args.live.startswith(("http://", "https://")) or not args.live.isprintable():
                raise ConfigError("--live", f"{args.live!r}: give the live view's address, http://HOST:PORT/")
            try:
                n = follow(lab, args.live, lambda line: print(line, flush=True), poll=args.poll)
            except LiveViewError as e:
                raise ConfigError("--live", str(e)) from None
            print(f"overlay over: {n} pilots submitted")
    except SlurmUsageError as e:
        raise ConfigError("slurm", str(e), str(lab.path)) from None
    except SlurmError as e:
        print(f"mgst lab {args.lab_command}: error: {e}", file=sys.stderr)
        return 1
    return 0
