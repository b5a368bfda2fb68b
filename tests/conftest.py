"""Shared fixtures: one local SparkSession per test session, an isolated Airflow home,
and helpers that build real landing directories and real Delta tables."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.spark_cluster import spark_cluster  # noqa: F401  (the `cluster` tier's session fixture)

# The `unit` tier: tests with none of the "needs" markers (pyproject.toml) are marked `unit`.
pytest_plugins = ["tests.support.tiers"]

DELTA_SPARK_JARS_ENV = "EOD_DELTA_SPARK_JARS"
POSTGRES_JDBC_JAR = "/usr/share/java/postgresql.jar"
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

# Airflow reads its configuration at import time: point it at a throwaway home first. This
# stays module-level os.environ, not monkeypatch: it must happen before the first import of
# airflow (the test modules import it at collection), before any fixture can run, and it
# holds for the whole session and for the Airflow processes the tests start.
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
# Fault points fire only with this test-only switch on too (airflow_eod/core/faults.py); the
# tests arm EOD_FAULTPOINTS one by one, and every process they start inherits the switch.
os.environ["EOD_FAULTPOINTS_TESTING"] = "1"
# py4j logs from __del__ at interpreter exit, after pytest has closed the streams.
logging.getLogger("py4j").setLevel(logging.WARNING)


def _find_delta_spark_jars() -> str | None:
    """Why the ``delta_spark`` tier cannot run, or ``None`` when it can.

    EOD_DELTA_SPARK_JARS names the jars; otherwise the jars ``make test`` fetched into the
    cache (airflow_eod/spark/jars.py) are taken, and put in the environment so that every
    process the tests start (chaos children, spark-submit) sees the same ones.
    """
    if os.environ.get(DELTA_SPARK_JARS_ENV):
        return None
    from airflow_eod.spark.jars import DEFAULT_CACHE, JarFetchError, cached, delta_spark_jars

    try:
        paths = cached(delta_spark_jars())
    except JarFetchError as exc:
        return str(exc)
    if paths is None:
        return (
            f"the Delta Spark jars are not in {DEFAULT_CACHE} and {DELTA_SPARK_JARS_ENV} is unset: "
            "`make test` fetches them with Maven (`python -m airflow_eod.spark.jars`)"
        )
    os.environ[DELTA_SPARK_JARS_ENV] = ",".join(paths)
    return None


DELTA_SPARK_MISSING = _find_delta_spark_jars()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ``delta_spark`` tier skips, saying why, where the jars are missing; CI
    (EOD_REQUIRE_DELTA_SPARK=1, set by .ci/run) fails instead of skipping it."""
    if DELTA_SPARK_MISSING is None:
        return
    tier = [item for item in items if item.get_closest_marker("delta_spark")]
    if tier and os.environ.get("EOD_REQUIRE_DELTA_SPARK") == "1":
        raise pytest.UsageError(
            f"EOD_REQUIRE_DELTA_SPARK=1 but {len(tier)} delta_spark tests cannot run: {DELTA_SPARK_MISSING}"
        )
    skip = pytest.mark.skip(reason=DELTA_SPARK_MISSING)
    for item in tier:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from airflow_eod.spark.session import get_session
    from tests.support.spark_conf import find_abfs_jars, find_s3a_jars, session_conf

    # One session serves every tier, so every jar a test needs goes in at start (the s3a and
    # abfs jars where they are cached: the tests that need them skip, saying why, if not).
    find_s3a_jars()
    find_abfs_jars()
    session = get_session(conf=session_conf(POSTGRES_JDBC_JAR, s3a=True, abfs=True))
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


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """A real PostgreSQL server on 127.0.0.1, started for this test session."""
    from tests.support.postgres_server import PostgresServer

    server = PostgresServer.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[Any]:
    """A Kafka broker (KRaft) on 127.0.0.1 from Maven jars, started for this test session;
    skipped without Java, Maven or Spark's Kafka connector (failed with EOD_REQUIRE_KAFKA=1)."""
    from tests.support.kafka_broker import KafkaBroker
    from tests.support.spark_conf import find_kafka_jars

    why = find_kafka_jars()
    if why is not None:
        if os.environ.get("EOD_REQUIRE_KAFKA"):
            pytest.fail(why)
        pytest.skip(why)
    broker = KafkaBroker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def mini_yarn() -> Iterator[Any]:
    """HDFS and YARN (Hadoop's mini cluster, one JVM) on 127.0.0.1, started for this test
    session; skipped without Java, javac or Maven (failed with EOD_REQUIRE_YARN=1)."""
    from tests.support.mini_yarn import MiniYarn

    cluster = MiniYarn.start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[Any]:
    """A SeaweedFS S3 server on 127.0.0.1 with a bucket, started for this test session."""
    from tests.support.s3_server import S3Server

    server = S3Server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def azure_server() -> Iterator[Any]:
    """An Azurite blob server on 127.0.0.1 with a container, started for this test session
    (Azurite installed with npm into ~/.cache/airflow-eod/npm the first time)."""
    from tests.support.azurite_server import AzuriteServer

    server = AzuriteServer.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[Any]:
    """A GCS emulator (fake-gcs-server, built from its Go module) on 127.0.0.1 with a bucket,
    started for this test session; skipped without Go (failed with EOD_REQUIRE_OBJECTSTORE=1)."""
    from tests.support.gcs_server import GCSServer

    server = GCSServer.start()
    yield server
    server.stop()


@pytest.fixture
def landing(tmp_path: Any) -> str:
    path = tmp_path / "landing"
    path.mkdir()
    return str(path)


@pytest.fixture
def table(tmp_path: Any) -> str:
    return str(tmp_path / "table")


@pytest.fixture
def az_table(azure_server: Any, spark: Any) -> Iterator[Any]:
    """A fresh table on Azurite that the shared SparkSession writes over abfs:// (the table
    of the Azure Spark tests)."""
    from airflow_eod.core.table_ref import TableRef
    from tests.support.spark_conf import ABFS_JARS_ENV, find_abfs_jars

    why = find_abfs_jars()
    class_path = spark.sparkContext.getConf().get("spark.driver.extraClassPath", "")
    if why is None and not all(j in class_path for j in os.environ[ABFS_JARS_ENV].split(",")):
        why = f"the shared SparkSession started without the abfs jars ({ABFS_JARS_ENV}) on its class path"
    if why is not None:
        if os.environ.get("EOD_REQUIRE_OBJECTSTORE"):
            pytest.fail(why)
        pytest.skip(why)
    uri = f"az://{azure_server.container}/loads/{uuid.uuid4().hex}/orders"
    yield TableRef.parse(uri, azure_server.options())
    # Close Hadoop's cached ABFS client while Azurite still runs: left open, the JVM closes it
    # at exit, after the emulator has stopped ("ShutdownHook 'ClientFinalizer' timeout"), and
    # was seen to outlive the test process by minutes.
    jvm = spark.sparkContext._jvm
    account = f"abfs://{azure_server.container}@{azure_server.account}.dfs.core.windows.net/"
    jvm.org.apache.hadoop.fs.FileSystem.get(
        jvm.java.net.URI(account), spark.sparkContext._jsc.hadoopConfiguration()
    ).close()
