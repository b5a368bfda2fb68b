"""The `cluster` tier's Spark standalone master and worker work: a trivial PySpark
application submitted with the wheel's ``spark-submit`` runs its tasks on the worker's
executors, in this interpreter, and the master lists it."""

from __future__ import annotations

import os
import platform
import subprocess
import textwrap
from typing import Any

import pytest

import tests.conftest
from tests.support.spark_cluster import SparkStandalone, spark_submit, submit_env

if not hasattr(tests.conftest, "spark_cluster"):
    # A second definition beside the conftest's would start a second cluster for the session.
    from tests.support.spark_cluster import spark_cluster  # noqa: F401

pytestmark = [pytest.mark.cluster, pytest.mark.spark]

APP = textwrap.dedent(
    """
    import platform
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("eod-cluster-smoke").getOrCreate()
    sc = spark.sparkContext
    # The lambda runs in the executors' Python workers: report their Python version.
    seen = sc.parallelize(range(100), 2).map(lambda x: (x * 2, platform.python_version())).collect()
    total = sum(v for v, _ in seen)
    pythons = ",".join(sorted({p for _, p in seen}))
    print(f"EOD_SMOKE app={sc.applicationId} master={sc.master} total={total} pythons={pythons}")
    spark.stop()
    """
)


# The harness's own check, for when the cluster tier fails oddly: CI's cluster tests submit
# to the same master and worker (tests/airflow/test_cluster.py), so it is `extended`.
@pytest.mark.extended
def test_a_submitted_application_runs_on_the_standalone_worker(
    spark_cluster: SparkStandalone, tmp_path: Any
) -> None:
    app = tmp_path / "smoke_app.py"
    app.write_text(APP)
    before = {a["id"] for a in spark_cluster.applications(completed=True)}
    done = subprocess.run(
        [
            spark_submit(),
            "--master",
            spark_cluster.master_url,
            "--deploy-mode",
            "client",
            "--conf",
            "spark.cores.max=1",
            "--conf",
            "spark.ui.enabled=false",
            "--executor-memory",
            "1g",
            str(app),
        ],
        env=submit_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("EOD_SMOKE ")]
    assert len(lines) == 1, done.stdout[-2000:]
    app_id = lines[0].split()[1].removeprefix("app=")
    assert lines[0] == (
        f"EOD_SMOKE app={app_id} master={spark_cluster.master_url} total=9900 "
        f"pythons={platform.python_version()}"
    )

    apps = [a for a in spark_cluster.applications(completed=True) if a["id"] not in before]
    assert [(a["id"], a["name"], a["state"], a["cores"]) for a in apps] == [
        (app_id, "eod-cluster-smoke", "FINISHED", 1)
    ]
    # The worker launched the executor: its directory and logs are in the worker's work dir.
    executor_logs = os.path.join(spark_cluster.work_dir, app_id)
    assert os.path.isdir(executor_logs) and os.listdir(executor_logs), (
        f"no executor ran under {executor_logs}"
    )
    assert spark_cluster.applications() == [], "nothing is left running on the cluster"
