"""What does exactly-once cost? An airflow-eod load against a plain Spark write.

Both runs read the same landing files with the same SparkSession and write Parquet; the
airflow-eod run also plans, asks the table, reads footer statistics and commits to Delta.
Each pair runs side by side, alternating, and the script prints medians and their ratio.
It also times the ask (no JVM) on tables with growing numbers of commits.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from deltalake import DeltaTable

from airflow_eod.core.ask import ask
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.plan_log import PlanLog
from airflow_eod.examples.sample_data import write_order_files
from airflow_eod.sources.landing_files import LandingFilesSource
from airflow_eod.spark.load_job import LoadSpec, run_load
from airflow_eod.spark.session import get_session

DDL = "order_id INT, customer STRING, amount DECIMAL(10,2), order_date DATE, ordered_at TIMESTAMP"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--rows-per-file", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="eod-bench-"))
    landing = work / "landing"
    write_order_files(str(landing), args.files, args.rows_per_file)
    spark = get_session()
    source = LandingFilesSource(path=str(landing), schema=DDL)
    # Warm-up: JIT, file cache, Spark's first-job costs.
    spark.read.schema(DDL).option("header", "true").csv(str(landing)).write.parquet(str(work / "warm"))

    plain: list[float] = []
    eod: list[float] = []
    for i in range(args.repeat):
        t0 = time.perf_counter()
        df = spark.read.schema(DDL).option("header", "true").option("mode", "FAILFAST").csv(str(landing))
        df.write.partitionBy("order_date").parquet(str(work / f"plain-{i}"))
        plain.append(time.perf_counter() - t0)

        table = str(work / f"table-{i}")
        t0 = time.perf_counter()
        plan = source.plan(
            PlanLog(table, "bench"), run_token=f"r{i}", is_committed=lambda k, t=table: ask(t, k).committed
        )
        assert plan is not None
        spec = LoadSpec(
            table_uri=table, plan=asdict(plan), source=source.to_dict(), partition_by=["order_date"]
        )
        result = run_load(spark, spec)
        eod.append(time.perf_counter() - t0)
        assert result.outcome == "committed"

    rows = args.files * args.rows_per_file
    p, e = statistics.median(plain), statistics.median(eod)
    print(f"rows per load: {rows} in {args.files} files, {args.repeat} alternating pairs")
    print(f"plain Spark Parquet write   median {p * 1000:8.1f} ms")
    print(f"airflow-eod exactly-once    median {e * 1000:8.1f} ms")
    print(f"ratio airflow-eod / plain: {e / p:.2f}")

    # The ask against tables with more and more commits: it reads the log with delta-rs.
    table = str(work / "table-0")
    key = BatchKey("bench", plan.batch_key)
    for target in (10, 50):
        while len(DeltaTable(table).history()) < target:
            _extra_commit(table)
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            status = ask(table, key)
            times.append(time.perf_counter() - t0)
            assert status.committed and status.manifest is not None
        print(f"ask on a table with {target:3d} commits: median {statistics.median(times) * 1000:.1f} ms")
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)


def _extra_commit(table: str) -> None:
    # An empty commit (no files) is enough to lengthen the log for the ask's timing.
    dt = DeltaTable(table)
    dt.create_write_transaction([], "append", dt.schema())


if __name__ == "__main__":
    main()
