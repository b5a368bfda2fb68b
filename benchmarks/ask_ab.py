"""The ask's cost in two source trees, side by side (issue 20: did a refactor slow it?).

``python benchmarks/ask_ab.py --tree A=/path/to/tree --tree B=/path/to/other [--batches 100,250]``

Each tree builds its own table once (a landing-files history grown through that tree's own
engine, :class:`benchmarks.histories.LandingHistory`, no JVM) in a work directory on local
disk; then short measuring processes run against the trees in turn (A, B, A, B, ...), each
with ``PYTHONPATH`` set to its tree, so that both see the same machine load. A round times
``--asks`` cold asks (the process's log cache cleared before each: a task's first ask) and as
many warm ones, alternating the oldest and the newest batch, each timed by the wall clock and by
the thread's CPU clock (less disturbed by other processes on a shared machine). The table gives each
tree's p50 over all rounds and the ratio of each tree against the first.

Every figure is information, never a test: nothing fails on a slow machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# The worker runs inside the tree under test (its own ``airflow_eod`` and ``benchmarks``),
# so it is code passed with ``-c``: the older tree need not hold this file.
_WORKER = r"""
import json, sys, time
from benchmarks.histories import LandingHistory, forget_readings
from airflow_eod.core.ask import ask

mode, root, n, asks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if mode == "build":
    LandingHistory("ab", root, {}, False).grow(n)
    sys.exit(0)
h = LandingHistory("ab", root, {}, True)
try:  # a tree with the table reference (issue 20) asks with it, an older one with the path
    from airflow_eod.core.table_ref import TableRef
    table = TableRef.parse(h.table)
except ImportError:
    table = h.table
keys = (h.key_of(0), h.key_of(n - 1))
for key in keys:
    assert ask(table, key).committed, key
    for _ in range(10):
        forget_readings(); ask(table, key)
out = {"cold": [], "warm": [], "cold_cpu": [], "warm_cpu": []}
for kind in ("cold", "warm"):
    for i in range(asks):
        key = keys[i % 2]
        if kind == "cold":
            forget_readings()
        c0, t0 = time.thread_time(), time.perf_counter()
        ask(table, key)
        t1, c1 = time.perf_counter(), time.thread_time()
        out[kind].append(t1 - t0)
        out[kind + "_cpu"].append(c1 - c0)
print(json.dumps(out))
"""


_KINDS = ("cold", "warm", "cold_cpu", "warm_cpu")
_LABELS = {
    "cold": "cold ask p50 (wall)",
    "warm": "warm ask p50 (wall)",
    "cold_cpu": "cold ask p50 (thread CPU)",
    "warm_cpu": "warm ask p50 (thread CPU)",
}


def _run(tree: str, *args: str) -> str:
    env = dict(os.environ, PYTHONPATH=tree)
    out = subprocess.run(
        [sys.executable, "-c", _WORKER, *args], env=env, cwd=tree, check=True, capture_output=True, text=True
    )
    return out.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", required=True, help="NAME=PATH, two or more")
    parser.add_argument("--batches", default="100,250", help="table sizes (committed batches)")
    parser.add_argument("--asks", type=int, default=200, help="cold and warm asks per round")
    parser.add_argument("--rounds", type=int, default=6, help="measuring processes per tree and size")
    parser.add_argument("--work", default=None, help="work directory (default: a new temporary one)")
    args = parser.parse_args()
    trees = [t.split("=", 1) for t in args.tree]
    sizes = [int(s) for s in args.batches.split(",")]
    work = args.work or tempfile.mkdtemp(prefix="ask-ab-")
    for n in sizes:
        for name, path in trees:
            root = os.path.join(work, f"{name}-{n}")
            if not os.path.exists(os.path.join(root, "table", "_delta_log")):
                t0 = time.perf_counter()
                _run(path, "build", root, str(n), "0")
                print(f"built {name} @{n} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    print(f"| batches | figure | {' | '.join(name for name, _ in trees)} | ratio |")
    print(f"| --- | --- | {' | '.join('---' for _ in trees)} | --- |")
    for n in sizes:
        samples: dict[str, dict[str, list[float]]] = {name: {k: [] for k in _KINDS} for name, _ in trees}
        for r in range(args.rounds):
            order = trees if r % 2 == 0 else trees[::-1]  # interleaved, and who goes first alternates
            for name, path in order:
                body = json.loads(
                    _run(path, "measure", os.path.join(work, f"{name}-{n}"), str(n), str(args.asks))
                )
                for kind in _KINDS:
                    samples[name][kind] += body[kind]
        for kind in _KINDS:
            p50 = [statistics.median(samples[name][kind]) * 1000 for name, _ in trees]
            ratios = " / ".join(f"{v / p50[0]:.2f}x" for v in p50[1:])
            cells = " | ".join(f"{v:.3f} ms" for v in p50)
            print(f"| {n} | {_LABELS[kind]} | {cells} | {ratios} |")
    print(f"work directory: {work}", file=sys.stderr)


if __name__ == "__main__":
    main()
