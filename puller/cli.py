"""Command line of the puller daemon."""

from __future__ import annotations

import argparse
import logging
import sys

from puller.daemon import Puller


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--connect", required=True, help="the mapper's endpoint, e.g. tcp://head-node:5555")
    p.add_argument("--machine", required=True, help="this machine's name in the experiment (M1, M2, ...)")
    p.add_argument("--stay", action="store_true", help="after a run, wait for the next one instead of exiting")
    p.add_argument("--throttle", default="auto", choices=["auto", "cgroup2", "cgroup1", "duty"],
                   help="how to hold spin and command jobs at the CPU share a_j (default: the best available)")


def run(args: argparse.Namespace) -> int:
    puller = Puller(args.connect, args.machine, stay=args.stay, throttle=args.throttle)
    puller.install_signal_handlers()
    return puller.run()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="puller", description="mgst puller daemon: runs jobs for a mapper")
    p.add_argument("-v", "--verbose", action="count", default=0)
    add_arguments(p)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING - 10 * args.verbose, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run(args)
