"""DAG runs of tests/dags/eod_yarn_test.py against the mini YARN cluster (in child processes:
tests/support/dag_children.py), and what the YARN tests read back from the ResourceManager.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import datetime
from typing import Any

from tests.conftest import REPO
from tests.support.dag_children import start_dag_run
from tests.support.mini_yarn import MiniYarn

DAG_FILE = os.path.join(REPO, "tests", "dags", "eod_yarn_test.py")
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
    env = {"EOD_FAULTPOINTS": faults, "EOD_FAULTPOINTS_TESTING": "1"}
    if conf:
        env["EOD_TEST_YARN_CONF"] = json.dumps({**json.loads(os.environ["EOD_TEST_YARN_CONF"]), **conf})
    return start_dag_run(DAG_FILE, dag, logical_date, env)


def rerun_in_process(dag: str, logical_date: datetime) -> str:
    """``dag.test()`` of ``dag`` in this process (a run that must find its batch committed and
    submit nothing: no child, no JVM); the load's outcome."""
    from tests.support.helpers import load_dag_file, xcom_value

    run = load_dag_file(DAG_FILE).dags[dag].test(logical_date=logical_date)
    assert str(run.state) == "success", run.state
    return str(xcom_value(run.run_id, "load")["outcome"])


def new_applications(cluster: MiniYarn, before: set[str]) -> list[dict[str, Any]]:
    """The cluster's applications not in ``before`` (ids), oldest first."""
    return sorted((a for a in cluster.applications() if a["id"] not in before), key=lambda a: a["id"])


def app_ids(cluster: MiniYarn) -> set[str]:
    return {a["id"] for a in cluster.applications()}
