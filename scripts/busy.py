"""Run a command (the test suite) on a busy machine: N processes burn a core each beside it.

    python scripts/busy.py [--burners 6] [--minutes 60] -- .venv/bin/pytest tests/crash

`make test-under-load` runs the suite this way: CI machines are small (2 cores) and run other
work, and a test that passes only on a quiet machine is one people learn to re-run. The burners
are bounded: each stops after `--minutes`, or as soon as this script is gone (it checks its
parent), and they are killed when the command ends, however it ends. Exits with the command's
exit code.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

BURN = """
import os, sys, time
parent, end = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while time.monotonic() < end and os.getppid() == parent:
    sum(i * i for i in range(20_000))
"""
"""A burner: pure CPU until its time is up or its parent (this script) is gone."""


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Run a command beside CPU-burning processes (a busy CI machine)."
    )
    parser.add_argument("--burners", type=int, default=6, help="busy processes (default 6)")
    parser.add_argument(
        "--minutes", type=float, default=60, help="the most each burner runs (default 60)"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="after --: what to run")
    args = parser.parse_args(argv)
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    if not args.command:
        parser.error("give the command to run after --")
    if not 0 <= args.burners <= 64:
        parser.error("--burners: 0 to 64")
    if not args.minutes > 0:
        parser.error("--minutes: a positive number")
    return args


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} cores"


def stop(burners: Sequence[subprocess.Popen[bytes]]) -> None:
    for burner in burners:
        if burner.poll() is None:
            burner.kill()
    for burner in burners:
        burner.wait()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    seconds = str(args.minutes * 60)
    burners = [
        subprocess.Popen([sys.executable, "-c", BURN, str(os.getpid()), seconds])
        for _ in range(args.burners)
    ]
    # A SIGTERM (CI cancelling the job) ends this script through `finally`: the command and
    # the burners with it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    started = time.monotonic()
    print(f"busy: {args.burners} burners beside {' '.join(args.command)}; {load()}", flush=True)
    command = subprocess.Popen(args.command)
    try:
        try:
            code = command.wait()
        except KeyboardInterrupt:  # Ctrl-C reached the command too: it stops on its own
            code = command.wait()
    finally:
        if command.poll() is None:
            command.terminate()
            try:
                command.wait(30)
            except subprocess.TimeoutExpired:
                command.kill()
                command.wait()
        stop(burners)
    took = time.monotonic() - started
    print(f"busy: the command exited {code} after {took:.0f} s; {load()}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
