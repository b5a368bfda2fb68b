"""The task log a person reads: the Spark JVM's lines at their real levels (not every one an
error), and no progress bars in tasks. The JVM is started fresh in a child process: the
test session's shared JVM was started before any routing."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from typing import Any

import pytest

from airflow_eod.core.table_ref import TableRef
from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator
from airflow_eod.spark.jvm_log import level_of
from tests.conftest import REPO

SCRIPT = """
import logging, sys
logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(levelname)s|%(name)s|%(message)s")
from airflow_eod.spark.session import get_session
routed = sys.argv[1] == "routed"
spark = get_session(
    conf={"spark.ui.showConsoleProgress": "false"},
    jvm_log=logging.getLogger("airflow_eod.spark.jvm") if routed else None,
)
probe = spark._jvm.org.apache.logging.log4j.LogManager.getLogger("eod.probe")
probe.warn("probe-warn-4711")
probe.error("probe-error-4712")
assert spark.range(3).count() == 3
spark.stop()
"""


def _run(mode: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=REPO)
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, env=env, cwd=REPO, timeout=300
    )


@pytest.mark.spark
def test_the_jvms_lines_reach_python_logging_at_their_own_levels() -> None:
    routed = _run("routed")
    assert routed.returncode == 0, routed.stderr[-2000:]
    lines = routed.stdout.splitlines()
    assert any(
        line.startswith("WARNING|airflow_eod.spark.jvm|") and "probe-warn-4711" in line for line in lines
    )
    assert any(
        line.startswith("ERROR|airflow_eod.spark.jvm|") and "probe-error-4712" in line for line in lines
    )
    assert "probe-warn-4711" not in routed.stderr, "a routed JVM writes nothing of its own to stderr"
    # Without the routing the same lines are bare stderr, which Airflow logs as errors.
    plain = _run("plain")
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert "probe-warn-4711" in plain.stderr and "probe-warn-4711" not in plain.stdout


def test_a_line_takes_log4js_level_and_a_continuation_the_level_of_its_entry() -> None:
    assert (
        level_of("26/11/24 21:13:13 WARN FileStreamSink: Assume no metadata", logging.INFO) == logging.WARNING
    )
    assert level_of("26/11/24 21:13:13 INFO SparkContext: Running", logging.ERROR) == logging.INFO
    assert (
        level_of("\tat org.apache.spark.sql.Dataset.count(Dataset.scala:1)", logging.ERROR) == logging.ERROR
    )
    assert level_of("WARNING: Using incubator modules: jdk.incubator.vector", logging.INFO) == logging.WARNING


def test_tasks_draw_no_progress_bars_unless_asked(tmp_path: Any) -> None:
    op = LandingFilesToDeltaOperator(task_id="t", landing_path="/l", table_uri=str(tmp_path / "t"))
    assert op._local_conf(TableRef.parse(op.table_uri))["spark.ui.showConsoleProgress"] == "false"
    mine = LandingFilesToDeltaOperator(
        task_id="u",
        landing_path="/l",
        table_uri=str(tmp_path / "u"),
        spark_conf={"spark.ui.showConsoleProgress": "true"},
    )
    assert mine._local_conf(TableRef.parse(mine.table_uri))["spark.ui.showConsoleProgress"] == "true"
