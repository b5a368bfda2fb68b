"""A transform that makes a load's first try hang in the middle of its Spark job.

``test_scheduler.py`` kills that try's task process from outside with SIGKILL. The first call
(no pid file yet) records the task process's pid, and the Spark job it returns announces,
from a Python worker inside the running job, that it started, then sleeps instead of
finishing. Every later call (a retry: the pid file exists) returns the DataFrame as it is.

Not a DAG file: it is imported as ``tests.scheduler_dags.slow_transform`` by the task
process (the services run with the repository root on ``PYTHONPATH``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

ROOT_ENV = "EOD_SCHED_ROOT"
# Long enough that only the test's kill can end the first try; short enough that a worker
# left behind cannot outlive the tier by much.
HANG_SECONDS = 180.0


def pid_file(root: str) -> str:
    """Where the first try writes its task process's pid."""
    return os.path.join(root, "kill", "task.pid")


def started_file(root: str) -> str:
    """Created by a Spark Python worker once the first try's job is running."""
    return os.path.join(root, "kill", "spark-job.started")


def slow_first_try(df: DataFrame) -> DataFrame:
    root = os.environ[ROOT_ENV]
    marker = pid_file(root)
    if os.path.exists(marker):
        return df  # a retry: load at full speed
    tmp = f"{marker}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(tmp, marker)  # the test never reads a half-written pid
    started = started_file(root)

    def hang(batches: Iterator[Any]) -> Iterator[Any]:
        # Runs in a Spark Python worker, i.e. in the middle of the staging write's job.
        open(started, "a").close()
        parent = os.getppid()
        deadline = time.monotonic() + HANG_SECONDS
        # Once the killed driver's JVM is gone this worker is re-parented: stop then.
        while time.monotonic() < deadline and os.getppid() == parent:
            time.sleep(0.2)
        yield from batches

    return df.mapInArrow(hang, df.schema)
