"""One load attempt in a child process of its own, for a SIGKILL to hit.

``python -m tests.chaos.attempt '<json>'`` runs what a task's try runs (plan or find the
run's plan, ask, and only then read, write and commit in a local SparkSession) with the
fault points of ``EOD_FAULTPOINTS``. The chaos harness kills it at a chosen boundary or at a
random moment after one, then lets the retry run in the parent.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime

from airflow_eod.core.load_flow import LoadRequest, load_batch
from airflow_eod.sources import Credentials, ReadContext, source_from_dict
from airflow_eod.spark.load_job import local_run, settle_committed


def main(argv: list[str]) -> int:
    args = json.loads(argv[0])
    source = source_from_dict(args["source"])
    creds = Credentials(*args["credentials"]) if args["credentials"] else None
    interval = tuple(datetime.fromisoformat(t) for t in args["interval"]) if args["interval"] else None
    holder: dict[str, object] = {}

    def session() -> object:
        if "spark" not in holder:
            from airflow_eod.spark.session import get_session

            holder["spark"] = get_session()
        return holder["spark"]

    request = LoadRequest(
        args["table"],
        args["pipeline_id"],
        args["run_token"],
        interval=interval,  # type: ignore[arg-type]
        restate=args["restate"],
        restate_batch_key=args["restate_batch_key"],
        try_number=args["try_number"],
    )
    result = load_batch(
        request,
        source,
        ReadContext(spark_factory=session, credentials=creds),  # type: ignore[arg-type]
        run=local_run(session, args["table"], source, credentials=creds, **args["settings"]),  # type: ignore[arg-type]
        settle=lambda status: settle_committed(args["table"], status, args["try_number"]),
    )
    print(json.dumps({"outcome": result.outcome}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
