"""DAG runs of the submit-mode tiers (tests/airflow/test_cluster.py on Spark standalone,
tests/yarn/ on YARN), each ``dag.test()`` in a child process, so that a test can SIGTERM or
SIGKILL the task while its spark-submit and its driver live on; and what those tests read
back from the table: the batch's commits, whether a driver has staged its files.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from tests.conftest import REPO

# The DAG is ``dags[name]`` of a file that keeps its DAGs in a dict, else the attribute ``name``.
CHILD = """
import json, sys
from datetime import datetime
sys.path.insert(0, sys.argv[1])
from tests.support.helpers import load_dag_file
module = load_dag_file(sys.argv[2])
dag = module.dags[sys.argv[3]] if hasattr(module, "dags") else getattr(module, sys.argv[3])
run = dag.test(logical_date=datetime.fromisoformat(sys.argv[4])) if sys.argv[4] else dag.test()
print("EOD_TEST_RUN " + json.dumps({"run_id": run.run_id, "state": str(run.state)}), flush=True)
"""


def start_dag_run(
    dag_file: str, dag: str, logical_date: datetime | None, env: Mapping[str, str] | None = None
) -> subprocess.Popen[str]:
    """``dag.test()`` of ``dag`` of ``dag_file`` in a child process (this environment, with
    ``env`` over it); its output is the task log."""
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, REPO, dag_file, dag, logical_date.isoformat() if logical_date else ""],
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(child: subprocess.Popen[str], timeout: float = 400) -> tuple[dict[str, str], str]:
    """The child's run (``run_id``, ``state``) and its whole output (the task log)."""
    out, _ = child.communicate(timeout=timeout)
    for line in out.splitlines():
        if line.startswith("EOD_TEST_RUN "):
            return json.loads(line[len("EOD_TEST_RUN ") :]), out
    raise AssertionError(f"the DAG run did not finish (exit {child.returncode}):\n{out[-4000:]}")


def batch_commits(table: str) -> list[str]:
    """The Delta log's commits that carry a batch marker (a ``txn`` action)."""
    log_dir = os.path.join(table, "_delta_log")
    found = []
    for name in sorted(os.listdir(log_dir)):
        if name.endswith(".json") and name[:-5].isdigit():
            with open(os.path.join(log_dir, name)) as fh:
                if any("txn" in json.loads(line) for line in fh if line.strip()):
                    found.append(name)
    return found


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``predicate`` until it returns something true; that value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def staged(table: str) -> bool:
    """Whether a driver has written Parquet files into the (local) table outside its log."""
    for dirpath, _dirs, files in os.walk(table):
        if "_delta_log" not in dirpath and any(f.endswith(".parquet") for f in files):
            return True
    return False
