"""What a retry of an already-committed batch costs a worker, side by side in one run.

    python -m benchmarks.retry [--reps 5] [--work DIR]

Each figure is one fresh Python process, as an Airflow task is, timed from start to the
operator's answer:

- ``spark first``: what a retry cost before the ask moved ahead of Spark: start the local
  SparkSession, then ask (the baseline);
- ``local``: ``LandingFilesToDeltaOperator.execute`` in local mode;
- ``submit``: the same operator with ``execution="submit"`` (no cluster is needed: a
  committed batch is answered before anything is submitted).

It prints the medians and their ratios to the baseline. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

from benchmarks.common import progress

INTERVAL = ("2026-11-01T00:00:00+00:00", "2026-11-02T00:00:00+00:00")
CHILD = textwrap.dedent(
    """
    import json, sys, time
    from types import SimpleNamespace
    t0 = time.perf_counter()
    mode, landing, table = sys.argv[1:4]
    from datetime import datetime
    start, end = (datetime.fromisoformat(v) for v in sys.argv[4:6])
    if mode == "spark-first":
        from airflow_eod.core.ask import ask
        from airflow_eod.core.batch import BatchKey
        from airflow_eod.core.table_ref import TableRef
        from airflow_eod.spark.session import get_session
        get_session()
        committed = ask(TableRef.parse(table), BatchKey.for_interval("bench.retry", start, end)).committed
        outcome = "already_committed" if committed else "not committed"
    else:
        from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator
        op = LandingFilesToDeltaOperator(
            task_id="load", landing_path=landing, table_uri=table, pipeline_id="bench.retry",
            boundary="interval", schema="id INT, name STRING", execution=mode,
        )
        ti = SimpleNamespace(dag_id="bench", task_id="load", run_id=sys.argv[6], map_index=-1, try_number=2)
        context = {"ti": ti, "data_interval_start": start, "data_interval_end": end}
        outcome = op.execute(context)["outcome"]
    print("EOD_BENCH " + json.dumps({"seconds": time.perf_counter() - t0, "outcome": outcome}), flush=True)
    """
)


def _child(mode: str, landing: str, table: str, run_id: str) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, mode, landing, table, *INTERVAL, run_id],
        capture_output=True,
        text=True,
        env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"),
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{mode}: the child failed:\n{proc.stderr[-3000:]}")
    out = proc.stdout
    line = next(v for v in out.splitlines() if v.startswith("EOD_BENCH "))
    result: dict[str, object] = json.loads(line[len("EOD_BENCH ") :])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks.retry", description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=5, help="fresh processes per figure")
    parser.add_argument("--work", help="work directory (default: a temporary one)")
    args = parser.parse_args(argv)
    work = args.work or tempfile.mkdtemp(prefix="eod-bench-retry-")
    landing, table = os.path.join(work, "landing"), os.path.join(work, "table")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(landing)
    with open(os.path.join(landing, "a.csv"), "w") as fh:
        fh.write("id,name\n" + "".join(f"{i},n{i}\n" for i in range(1000)))
    progress("committing the batch once (local mode)")
    first = _child("local", landing, table, "run-1")
    if first["outcome"] != "committed":
        raise RuntimeError(f"the first load ended {first['outcome']}")
    samples: dict[str, list[float]] = {"spark-first": [], "local": [], "submit": []}
    # Alternate the modes so that a slow moment of the machine lands on all of them.
    for rep in range(args.reps):
        for mode in samples:
            got = _child(mode, landing, table, "run-1")
            if got["outcome"] != "already_committed":
                raise RuntimeError(f"{mode}: a retry of the committed batch ended {got['outcome']}")
            samples[mode].append(float(got["seconds"]))  # type: ignore[arg-type]
        progress(f"rep {rep + 1}/{args.reps} done")
    base = statistics.median(samples["spark-first"])
    print(
        f"retry of an already-committed batch, fresh process per run, median of {args.reps} "
        f"({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores)"
    )
    print(f"{'mode':<14}{'median s':>10}{'min s':>9}{'max s':>9}{'vs spark first':>16}")
    for mode, values in samples.items():
        med = statistics.median(values)
        print(f"{mode:<14}{med:>10.2f}{min(values):>9.2f}{max(values):>9.2f}{med / base:>15.2f}x")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
