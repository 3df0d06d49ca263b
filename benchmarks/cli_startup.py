"""How long the command line takes to answer ``--help``: muppets vs Hugging Face's ``transformers`` CLI.

A user's first contact with a toolkit is ``muppets --help``; a command that imports torch (and
every backend) just to list its options makes each typo cost seconds. This runs, in one
session and alternating the order at every repeat, each command as a fresh process:

- ``muppets --help``, ``muppets serve --help``, ``muppets export onnx --help`` (this
  environment's ``muppets`` entry point);
- ``transformers --help`` (the reference library's CLI, installed with the dev extra);
- with ``--before SRC``, ``muppets --help`` of another checkout's ``src`` folder (e.g. a
  ``git worktree`` of an older commit), run as ``python -m muppets.cli --help``;

and reports the median wall time of ``--repeats`` runs of each, and the ratio transformers /
muppets (> 1: muppets answers faster). Both see the same machine load, so the ratio is the
figure to read; absolute times depend on the disk cache and the load.

    git worktree add /tmp/before 8982a91   # the last commit before --help stopped importing torch
    python benchmarks/cli_startup.py --repeats 9 --before /tmp/before/src --out benchmarks/results/cli_startup.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent
COMMANDS = {
    "muppets --help": [str(BIN / "muppets"), "--help"],
    "muppets serve --help": [str(BIN / "muppets"), "serve", "--help"],
    "muppets export onnx --help": [str(BIN / "muppets"), "export", "onnx", "--help"],
    "transformers --help": [str(BIN / "transformers"), "--help"],
}


def _seconds(cmd: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--before", help="another checkout's src folder: its muppets --help is timed too")
    parser.add_argument("--out", help="write the results JSON here")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: at least 1")
    commands = {name: cmd for name, cmd in COMMANDS.items() if shutil.which(cmd[0])}
    missing = sorted(set(COMMANDS) - set(commands))
    if missing:
        print(f"not installed, skipped: {', '.join(missing)}", file=sys.stderr)
    envs: dict[str, dict[str, str] | None] = {name: None for name in commands}
    if args.before:
        name = f"muppets --help ({args.before})"
        commands[name] = [sys.executable, "-m", "muppets.cli", "--help"]
        envs[name] = {**os.environ, "PYTHONPATH": str(Path(args.before).resolve())}
    for name, cmd in commands.items():  # warm the disk cache once, untimed
        _seconds(cmd, envs[name])
    times: dict[str, list[float]] = {name: [] for name in commands}
    names = list(commands)
    for r in range(args.repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:  # a different one first each time
            times[name].append(_seconds(commands[name], envs[name]))
    median = {name: statistics.median(ts) for name, ts in times.items()}
    reference = median.get("transformers --help")
    rows = [{"command": name, "median_s": round(m, 3), "min_s": round(min(times[name]), 3),
             "ratio_transformers_over_this": round(reference / m, 2) if reference else None}
            for name, m in median.items()]
    print("| command | median s | min s | transformers / this |\n|---|---:|---:|---:|")
    for row in rows:
        print(f"| `{row['command']}` | {row['median_s']:.2f} | {row['min_s']:.2f} | "
              f"{row['ratio_transformers_over_this'] or '—'} |")
    if args.out:
        result = {"machine": platform.processor() or platform.machine(), "python": platform.python_version(),
                  "repeats": args.repeats, "date": time.strftime("%Y-%m-%d"), "rows": rows}
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
