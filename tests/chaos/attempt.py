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
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime

from airflow_eod.core.faults import ENV_VAR
from airflow_eod.core.load_flow import LoadRequest, load_batch
from airflow_eod.sources import Credentials, ReadContext, source_from_dict
from airflow_eod.spark.load_job import local_run, settle_committed

READY = "READY"
RESULT = "RESULT "
POSTGRES_JDBC_JAR = "/usr/share/java/postgresql.jar"


def run_attempt(args: dict[str, object], session: object) -> str:
    """One try, as the harness describes it; returns the outcome."""
    source = source_from_dict(args["source"])  # type: ignore[arg-type]
    creds = Credentials(*args["credentials"]) if args["credentials"] else None  # type: ignore[misc]
    interval = tuple(datetime.fromisoformat(t) for t in args["interval"]) if args["interval"] else None  # type: ignore[attr-defined]
    request = LoadRequest(
        args["table"],  # type: ignore[arg-type]
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
        ReadContext(spark_factory=lambda: session, credentials=creds),  # type: ignore[arg-type]
        run=local_run(lambda: session, table, source, credentials=creds, **args["settings"]),  # type: ignore[arg-type]
        settle=lambda status: settle_committed(table, status, args["try_number"]),  # type: ignore[arg-type]
    )
    return result.outcome


def serve() -> int:
    from airflow_eod.spark.session import get_session
    from tests.chaos.spark_writer import session_conf

    # The harness's jars: the PostgreSQL driver, and Delta Spark's for a delta-spark try.
    spark = get_session(conf=session_conf(POSTGRES_JDBC_JAR))
    spark.range(1).count()  # the first job's set-up is paid now, not by the try
    print(READY, flush=True)
    line = sys.stdin.readline()
    if not line.strip():
        return 0  # the harness is gone, or closed us: nothing to try
    args = json.loads(line)
    os.environ[ENV_VAR] = str(args.pop("faults"))
    outcome = run_attempt(args, spark)
    print(RESULT + json.dumps({"outcome": outcome}), flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["--serve"]:
        sys.exit("usage: python -m tests.chaos.attempt --serve")
    sys.exit(serve())
