"""DAG runs of tests/dags/eod_yarn_test.py against the mini YARN cluster, each in a child
process (``dag.test()``), so a test can SIGTERM or SIGKILL the task while its spark-submit and
its driver live on; and what the tests read back: the batch's commits, the application ids
the task log names.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from tests.conftest import REPO
from tests.support.mini_yarn import MiniYarn

DAG_FILE = os.path.join(REPO, "tests", "dags", "eod_yarn_test.py")
CHILD = """
import json, sys
from datetime import datetime
sys.path.insert(0, sys.argv[1])
from tests.support.helpers import load_dag_file
dag = load_dag_file(sys.argv[2]).dags[sys.argv[3]]
run = dag.test(logical_date=datetime.fromisoformat(sys.argv[4])) if sys.argv[4] else dag.test()
print("EOD_TEST_RUN " + json.dumps({"run_id": run.run_id, "state": str(run.state)}), flush=True)
"""
APPLICATION_ID = re.compile(r"application_\d+_\d+")


def yarn_task_env(cluster: MiniYarn, extra_conf: dict[str, str] | None = None) -> dict[str, str]:
    """What a submit-mode task on YARN needs in its environment: a Spark connection per deploy
    mode (``eod_yarn_client``, ``eod_yarn_cluster``: master ``yarn``), ``HADOOP_CONF_DIR`` (an
    edge node's), spark-submit on PATH (the pyspark wheel's, beside this Python), and the
    cluster's ``--conf`` settings for the DAGs (``EOD_TEST_YARN_CONF``)."""
    env = {
        **cluster.env(),
        "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
        "EOD_TEST_YARN_CONF": json.dumps({**cluster.spark_conf(), **(extra_conf or {})}),
    }
    for mode in ("client", "cluster"):
        env[f"AIRFLOW_CONN_EOD_YARN_{mode.upper()}"] = json.dumps(
            {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": mode}}
        )
    return env


def driver_faults(spec: str) -> dict[str, str]:
    """``--conf`` settings that arm fault points in a cluster-mode driver (its environment is
    the application master's, not the task's)."""
    return {
        "spark.yarn.appMasterEnv.EOD_FAULTPOINTS": spec,
        "spark.yarn.appMasterEnv.EOD_FAULTPOINTS_TESTING": "1",
    }


def start_run(
    dag: str, logical_date: datetime | None, faults: str = "", conf: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """``dag.test()`` of ``dag`` (a key of the DAG file's ``dags``) in a child process, with
    fault points armed in the task (``faults``) and more ``--conf`` settings (``conf``)."""
    env = dict(os.environ, EOD_FAULTPOINTS=faults, EOD_FAULTPOINTS_TESTING="1")
    if conf:
        env["EOD_TEST_YARN_CONF"] = json.dumps({**json.loads(env["EOD_TEST_YARN_CONF"]), **conf})
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, REPO, DAG_FILE, dag, logical_date.isoformat() if logical_date else ""],
        env=env,
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


def rerun_in_process(dag: str, logical_date: datetime) -> str:
    """``dag.test()`` of ``dag`` in this process (a run that must find its batch committed and
    submit nothing: no child, no JVM); the load's outcome."""
    from tests.support.helpers import load_dag_file, xcom_value

    run = load_dag_file(DAG_FILE).dags[dag].test(logical_date=logical_date)
    assert str(run.state) == "success", run.state
    return str(xcom_value(run.run_id, "load")["outcome"])


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


def new_applications(cluster: MiniYarn, before: set[str]) -> list[dict[str, Any]]:
    """The cluster's applications not in ``before`` (ids), oldest first."""
    return sorted((a for a in cluster.applications() if a["id"] not in before), key=lambda a: a["id"])


def app_ids(cluster: MiniYarn) -> set[str]:
    return {a["id"] for a in cluster.applications()}
