"""Shared fixtures: one local SparkSession per test session, an isolated Airflow home,
and helpers that build real landing directories and real Delta tables."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

DELTA_SPARK_JARS_ENV = "EOD_DELTA_SPARK_JARS"
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

# Airflow reads its configuration at import time: point it at a throwaway home first.
# dag.test() runs only DAGs of a configured bundle, so the DAGs folder holds the example
# DAGs and the tests' own DAGs.
_AIRFLOW_HOME = tempfile.mkdtemp(prefix="eod-airflow-home-")
_DAGS = os.path.join(_AIRFLOW_HOME, "dags")
os.makedirs(_DAGS)
for _folder in (os.path.join(REPO, "dags"), os.path.join(REPO, "tests", "dags")):
    for _name in os.listdir(_folder):
        if _name.endswith(".py"):
            os.symlink(os.path.join(_folder, _name), os.path.join(_DAGS, _name))
os.environ["AIRFLOW_HOME"] = _AIRFLOW_HOME
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = _DAGS
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ.pop("EOD_FAULTPOINTS", None)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from airflow_eod.spark.session import get_session

    conf = {}
    jars = os.environ.get(DELTA_SPARK_JARS_ENV)
    if jars:
        # The Delta Spark engine's tests share the session, so the jars go in at start.
        conf = {
            "spark.jars": jars,
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        }
    session = get_session(conf=conf)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def airflow_db() -> str:
    """A migrated SQLite metadata DB in the session's Airflow home."""
    subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "airflow"), "db", "migrate"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return os.environ["AIRFLOW_HOME"]


@pytest.fixture
def landing(tmp_path: Any) -> str:
    path = tmp_path / "landing"
    path.mkdir()
    return str(path)


@pytest.fixture
def table(tmp_path: Any) -> str:
    return str(tmp_path / "table")
