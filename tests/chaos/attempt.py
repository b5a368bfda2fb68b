"""One load attempt in a child process of its own, for a SIGKILL to hit.

``python -m tests.chaos.attempt --serve`` starts warm: it imports everything, starts its
SparkSession (its own JVM, with the PostgreSQL driver where there is one and the Delta Spark
jars where EOD_DELTA_SPARK_JARS names them), prints
``READY`` and waits for one attempt as a JSON line on stdin. It then runs what a task's try
runs (plan or find the run's plan, ask, and only then read, write and commit) with the fault
points of the line's ``faults`` (``EOD_FAULTPOINTS``), prints ``RESULT <json>`` and exits.

Warm children are why a SIGKILL lands where it is aimed: a try that first had to start a
JVM (ten seconds and more on a loaded machine) planned long before it wrote, so in a trial
whose table keeps transaction markers for three seconds its plan was refused as too old
before it reached the write, and a timer aimed at the write fired at some other moment.
The harness (``tests/chaos/machine.py``, :class:`WarmChildren`) keeps one child warming
while the current one runs. A child whose stdin closes (the harness is gone) exits.

``--lean`` starts no JVM before the try: for a try aimed to die at ``after_plan``, which
the freeze reaches without Spark (a worker's task starts its JVM only to load, too). Should
such a try go on to load after all, it starts its JVM then (and prints ``LATE_JVM``).
``--train`` loads what a try loads and exits when stdin closes: its JVM dumps the classes
it loaded into the archive the other children map (``tests/chaos/children.py``).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from datetime import datetime
from typing import Any

from airflow_eod.core.faults import ENV_VAR
from airflow_eod.core.load_flow import LoadRequest, load_batch
from airflow_eod.core.settle import settle_committed
from airflow_eod.runners.local import local_run
from airflow_eod.sources import Credentials, ReadContext, source_from_dict
from airflow_eod.spark.load_spec import LoadSettings
from tests.chaos.store import on_s3, quarantine_ref, ref, with_landing_options

READY = "READY"
RESULT = "RESULT "
POSTGRES_JDBC_JAR = "/usr/share/java/postgresql.jar"
# Spark settings the harness gives its children (JSON; tests/chaos/children.py).
CHILD_CONF = "EOD_CHAOS_CHILD_CONF"
TRAIN = "--train"  # the mode whose JVM dumps the class-data-sharing archive
LEAN = "--lean"  # the mode that starts its JVM only when the try loads
LATE_JVM = "LATE_JVM"  # printed by a lean child that had to start its JVM after all


def run_attempt(args: dict[str, object], session: Callable[[], object]) -> str:
    """One try, as the harness describes it; returns the outcome. ``session`` returns the
    SparkSession; it is called only once the try loads (not to plan or ask)."""
    # A landing prefix on S3 gets the store's options back (never serialized; tests/chaos/store.py).
    source = with_landing_options(source_from_dict(args["source"]))  # type: ignore[arg-type]
    creds = Credentials(*args["credentials"]) if args["credentials"] else None  # type: ignore[misc]
    interval = tuple(datetime.fromisoformat(t) for t in args["interval"]) if args["interval"] else None  # type: ignore[attr-defined]
    request = LoadRequest(
        # On S3 the store's options come from the harness's test-only variable (tests/chaos/store.py).
        ref(args["table"]),  # type: ignore[arg-type]
        args["pipeline_id"],  # type: ignore[arg-type]
        args["run_token"],  # type: ignore[arg-type]
        interval=interval,  # type: ignore[arg-type]
        restate=args["restate"],  # type: ignore[arg-type]
        restate_batch_key=args["restate_batch_key"],  # type: ignore[arg-type]
        try_number=args["try_number"],  # type: ignore[arg-type]
    )
    table = str(args["table"])
    result = load_batch(
        request,
        source,
        ReadContext(spark_factory=session, credentials=creds),  # type: ignore[arg-type]
        run=local_run(
            session,
            ref(table),
            source,
            credentials=creds,
            settings=LoadSettings(**args["settings"]),
        ),  # type: ignore[arg-type]
        settle=lambda status: settle_committed(
            ref(table), status, quarantine_ref(ref(table), args["settings"].get("quarantine_table_uri"))
        ),
    )
    return result.outcome


def _warm_session() -> Any:
    from airflow_eod.spark.session import get_session
    from tests.chaos.spark_writer import session_conf

    # The harness's jars: the PostgreSQL driver, Delta Spark's for a delta-spark try, and
    # the s3a jars (EOD_S3A_JARS, set by the harness) on the class path for a table on S3.
    conf = session_conf(POSTGRES_JDBC_JAR, s3a=on_s3())
    conf.update(json.loads(os.environ.get(CHILD_CONF, "{}")))
    spark = get_session(conf=conf)
    spark.range(1).count()  # the first job's set-up is paid now, not by the try
    return spark


def train() -> int:
    """Load the classes a try loads (a CSV read with the file names, persisted and counted,
    a partitioned Parquet write and its read), print ``READY`` and exit when stdin closes:
    the harness started this JVM to dump its classes into an archive (tests/chaos/children.py)."""
    spark = _warm_session()
    with tempfile.TemporaryDirectory(prefix="eod-chaos-train-") as tmp:
        with open(os.path.join(tmp, "a.csv"), "w", encoding="utf-8") as fh:
            fh.write("id,n,part\ne1r0,1,a\ne1r1,x,b\n")
        df = (
            spark.read.schema("id STRING, n INT, part STRING, _corrupt_record STRING")
            .option("header", "true")
            .option("columnNameOfCorruptRecord", "_corrupt_record")
            .csv(f"file://{tmp}/a.csv")
        )
        from pyspark.sql import functions as F

        tagged = df.withColumn("_file", F.input_file_name()).persist()
        tagged.groupBy("_file").count().collect()
        tagged.drop("_corrupt_record", "_file").write.partitionBy("part").parquet(f"file://{tmp}/out")
        spark.read.parquet(f"file://{tmp}/out").count()
        tagged.unpersist()
    print(READY, flush=True)
    sys.stdin.read()
    return 0


def serve(lean: bool = False) -> int:
    """Wait for one try and run it. ``lean``: no JVM until the try loads (a try that dies
    at its freeze, as one aimed at ``after_plan`` does, never starts one: the freeze asks
    the table and the source without Spark, as a worker's task does)."""
    spark = None if lean else _warm_session()
    print(READY, flush=True)
    line = sys.stdin.readline()
    if not line.strip():
        return 0  # the harness is gone, or closed us: nothing to try
    args = json.loads(line)
    os.environ[ENV_VAR] = str(args.pop("faults"))
    lazy: list[Any] = [spark]

    def session() -> Any:
        if lazy[0] is None:
            print(LATE_JVM, flush=True)  # the harness counts these
            lazy[0] = _warm_session()
        return lazy[0]

    outcome = run_attempt(args, session)
    print(RESULT + json.dumps({"outcome": outcome}), flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == [TRAIN]:
        sys.exit(train())
    if sys.argv[1:] not in (["--serve"], [LEAN]):
        sys.exit(f"usage: python -m tests.chaos.attempt --serve|{LEAN}|{TRAIN}")
    sys.exit(serve(lean=sys.argv[1:] == [LEAN]))
