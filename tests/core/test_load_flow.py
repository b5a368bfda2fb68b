"""The one load flow: a batch the table holds, or a source with nothing new, is answered
before anything starts Spark; local Spark opens its ports on loopback only."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core.load_flow import FrozenBatch, LoadRequest, load_batch
from airflow_eod.core.result import ALREADY_COMMITTED, COMMITTED, NO_NEW_DATA, LoadResult
from airflow_eod.core.source import ReadContext
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.sample_data import write_order_files
from airflow_eod.runners.local import local_run
from tests.conftest import REPO
from tests.support.helpers import check, load_dag_file, orders_source, task_tries, xcom_value

PIPELINE = "tests.flow"


def _no_spark() -> Any:
    raise AssertionError("this step must not start Spark")


@pytest.mark.spark
def test_load_batch_answers_a_committed_batch_and_nothing_new_without_spark(
    spark: Any, landing: str, table: str
) -> None:
    write_order_files(landing, 2, 10)
    source = orders_source(landing)
    request = LoadRequest(TableRef.parse(table), PIPELINE, "run-1")
    first = load_batch(
        request,
        source,
        ReadContext(spark_factory=lambda: spark),
        run=local_run(lambda: spark, TableRef.parse(table), source),
    )
    assert first.outcome == COMMITTED and first.rows == 20
    ran: list[FrozenBatch] = []

    def must_not_run(frozen: FrozenBatch) -> LoadResult:
        ran.append(frozen)
        raise AssertionError("the table holds the batch: nothing may be run")

    # A retry of the same run: the same batch, answered by the ask alone.
    again = load_batch(request, source, ReadContext(spark_factory=_no_spark), run=must_not_run)
    assert again.outcome == ALREADY_COMMITTED and again.batch_key == first.batch_key
    assert (again.table_version, again.rows) == (first.table_version, 20)
    # A new run with no new files: nothing to plan, nothing to run.
    nothing = load_batch(
        LoadRequest(TableRef.parse(table), PIPELINE, "run-2"),
        source,
        ReadContext(spark_factory=_no_spark),
        run=must_not_run,
    )
    assert nothing.outcome == NO_NEW_DATA and nothing.batch_key is None
    assert ran == []
    assert DeltaTable(table).version() == first.table_version
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 20, cmp.describe()


@pytest.mark.spark
@pytest.mark.airflow
@pytest.mark.faults
def test_an_operator_retry_of_a_committed_batch_asks_for_no_spark_session(
    airflow_db: str, spark: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Try 1 commits and dies; try 2 (a real Airflow retry under dag.test) must answer
    from the table without asking for a SparkSession at all."""
    from airflow_eod.spark import session

    calls: list[int] = []
    real = session.get_session

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(session, "get_session", counting)
    landing, table = str(tmp_path / "landing"), str(tmp_path / "table")
    write_order_files(landing, 2, 50)
    monkeypatch.setenv("EOD_DEMO_LANDING", landing)
    monkeypatch.setenv("EOD_DEMO_TABLE", table)
    monkeypatch.setenv("EOD_FAULTPOINTS", "after_commit=raise@1")
    module = load_dag_file(os.path.join(REPO, "dags", "eod_landing_files_example.py"))
    run = module.dag.test(logical_date=datetime(2026, 11, 2, tzinfo=UTC))
    assert str(run.state) == "success"
    assert task_tries(run.run_id, "load_orders") == ["failed", "success"]
    assert xcom_value(run.run_id, "load_orders")["outcome"] == ALREADY_COMMITTED
    assert len(calls) == 1, f"only try 1 needs Spark; get_session was called {len(calls)} times"
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 100, cmp.describe()


def _listening(pid: int) -> set[str]:
    import psutil

    # A dual-stack socket reports an IPv4 address as IPv4-mapped IPv6.
    return {
        c.laddr.ip.removeprefix("::ffff:")
        for c in psutil.Process(pid).net_connections(kind="inet")
        if c.status == "LISTEN"
    }


@pytest.mark.spark
def test_local_spark_listens_on_loopback_only(tmp_path: Any) -> None:
    """A fresh process, as a task has: every port its Spark JVM listens on is on 127.0.0.1,
    although SPARK_LOCAL_IP is unset."""
    script = textwrap.dedent(
        """
        import json, sys
        from airflow_eod.spark.session import get_session
        spark = get_session(conf=json.loads(sys.argv[1]) if len(sys.argv) > 1 else None)
        spark.range(10).count()  # starts the block manager and the executor side
        jvm = spark.sparkContext._gateway.proc.pid
        print(json.dumps({"jvm": jvm, "bind": spark.conf.get("spark.driver.bindAddress")}), flush=True)
        sys.stdin.readline()
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        cwd=REPO,
    )
    try:
        import json

        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        addresses = _listening(int(info["jvm"]))
        assert addresses, "the JVM listens on something (the driver's RPC port at least)"
        assert addresses == {"127.0.0.1"}, f"Spark listens on {sorted(addresses)}"
        assert info["bind"] == "127.0.0.1"
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=60)


@pytest.mark.spark
@pytest.mark.jdbc
def test_a_jdbc_pipeline_plans_asks_and_finds_nothing_new_without_spark(
    spark: Any, postgres: Any, table: str
) -> None:
    """PostgreSQL planning goes over libpq: a retry of a committed batch and a run with
    nothing new never make a SparkSession, and the plans equal the JVM path's."""
    from airflow_eod.sources import Credentials, JdbcIncrementalSource
    from tests.support.jdbc_helpers import check_against_postgres, create_orders, insert_orders

    create_orders(postgres, "orders_flow")
    insert_orders(postgres, "orders_flow", range(1, 41))
    creds = Credentials(postgres.user, postgres.password)
    source = JdbcIncrementalSource(url=postgres.jdbc_url, table="orders_flow", key_column="id")
    first = load_batch(
        LoadRequest(TableRef.parse(table), "tests.flow_jdbc", "run-1"),
        source,
        ReadContext(spark_factory=_no_spark, credentials=creds),
        run=local_run(lambda: spark, TableRef.parse(table), source, credentials=creds),
    )
    assert first.outcome == COMMITTED and first.rows == 40
    for token, expected in (("run-1", ALREADY_COMMITTED), ("run-2", NO_NEW_DATA)):
        answer = load_batch(
            LoadRequest(TableRef.parse(table), "tests.flow_jdbc", token),
            source,
            ReadContext(spark_factory=_no_spark, credentials=creds),
            run=lambda frozen: pytest.fail(f"nothing to run for {frozen.plan.key}"),
        )
        assert answer.outcome == expected
    cmp = check_against_postgres(postgres, "orders_flow", table)
    assert cmp.exact, cmp.describe()


@pytest.mark.spark
@pytest.mark.jdbc
def test_libpq_and_jvm_planning_freeze_the_same_timestamp_frontier(
    spark: Any, postgres: Any, tmp_path: Any
) -> None:
    """The same head and count whichever way the query goes, for zoned and plain timestamp
    keys, with the database session in another time zone than UTC."""
    from airflow_eod.core.ask import ask
    from airflow_eod.core.planlog.store import PlanLog
    from airflow_eod.sources import Credentials, JdbcIncrementalSource
    from airflow_eod.sources.jdbc_query import postgres_conninfo

    postgres.execute(
        "CREATE TABLE ts_flow (id int, plain timestamp, zoned timestamptz);"
        "INSERT INTO ts_flow SELECT i, TIMESTAMP '2026-03-29 00:30:00.000123' + i * INTERVAL '17 minutes', "
        "TIMESTAMPTZ '2026-03-29 00:30:00.000123+00' + i * INTERVAL '17 minutes' FROM generate_series(1, 9) i"
    )
    postgres.execute(f"ALTER ROLE {postgres.user} SET timezone = 'Europe/Berlin'")
    creds = Credentials(postgres.user, postgres.password)
    # A URL parameter libpq is not told about sends the query through the JVM's driver.
    jvm_url = postgres.jdbc_url + "?prepareThreshold=5"
    assert postgres_conninfo(postgres.jdbc_url) is not None and postgres_conninfo(jvm_url) is None
    try:
        for column in ("plain", "zoned"):
            frontiers = []
            for kind, url, factory in (
                ("libpq", postgres.jdbc_url, _no_spark),
                ("jvm", jvm_url, lambda: spark),
            ):
                source = JdbcIncrementalSource(
                    url=url, table="ts_flow", key_column=column, key_type="timestamp", max_rows_per_batch=4
                )
                table = str(tmp_path / f"{column}-{kind}")
                plan = source.plan(
                    PlanLog(TableRef.parse(table), "tests.ts"),
                    ReadContext(spark_factory=factory, credentials=creds),
                    run_token="r",
                    is_committed=lambda key, t=table: ask(TableRef.parse(t), key).committed,
                )
                assert plan is not None
                frontiers.append((plan.boundary["high"], plan.inputs[0]["rows"]))
            assert frontiers[0] == frontiers[1], f"{column}: libpq {frontiers[0]} != jvm {frontiers[1]}"
            assert frontiers[0] == ("2026-03-29 01:38:00.000123", 4)
    finally:
        postgres.execute(f"ALTER ROLE {postgres.user} RESET timezone")


def test_the_execution_mode_is_checked_when_the_dag_is_parsed() -> None:
    from airflow_eod.core.errors import ConfigurationError
    from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator

    common = {"task_id": "load", "landing_path": "/landing", "table_uri": "/table"}
    with pytest.raises(ConfigurationError, match="execution 'cluster' is not one of"):
        LandingFilesToDeltaOperator(execution="cluster", **common)
    with pytest.raises(ConfigurationError, match="cannot ship a callable transform"):
        LandingFilesToDeltaOperator(execution="submit", transform=lambda df: df, **common)
    op = LandingFilesToDeltaOperator(execution="submit", transform="mypkg.transforms:clean", **common)
    assert (op.execution, op.spark_conn_id) == ("submit", "spark_default")


def test_a_load_spec_round_trips_through_json_with_typed_plan_and_source(tmp_path: Any) -> None:
    from airflow_eod.spark.load_spec import LoadSettings, LoadSpec
    from tests.support.helpers import plan_for

    write_order_files(str(tmp_path / "landing"), 2, 5)
    source = orders_source(str(tmp_path / "landing"))
    plan = plan_for(source, str(tmp_path / "table"))
    spec = LoadSpec.for_batch(
        TableRef.parse(str(tmp_path / "table")),
        FrozenBatch(plan),
        source,
        LoadSettings(run_id="r", try_number=2, partition_by=["day"]),
    )
    again = LoadSpec.from_json(spec.to_json())
    assert again == spec and again.plan == plan and again.source == source
    assert again.attempt_id == spec.attempt_id and len(spec.attempt_id) == 16


def test_typed_settings_leave_the_spec_on_disk_as_it_was(tmp_path: Any) -> None:
    """A driver of an earlier release reads the spec a task of this one writes: the JSON is
    the same flat fields, whichever way the settings travelled in the task."""
    import json

    from airflow_eod.spark.load_spec import LoadSettings, LoadSpec
    from tests.support.helpers import plan_for

    write_order_files(str(tmp_path / "landing"), 1, 5)
    source = orders_source(str(tmp_path / "landing"))
    plan = plan_for(source, str(tmp_path / "table"))
    partitions = ["day"]
    settings = LoadSettings(
        partition_by=partitions, engine="delta-rs", run_id="r", try_number=3, table_configuration={"a": "b"}
    )
    partitions.append("hour")  # the settings hold a copy
    spec = LoadSpec.for_batch(
        TableRef.parse(str(tmp_path / "table")), FrozenBatch(plan, restate=True), source, settings
    )
    flat = LoadSpec(
        table=TableRef.parse(str(tmp_path / "table")),
        plan=plan,
        source=source,
        settings=LoadSettings(partition_by=["day"], run_id="r", try_number=3, table_configuration={"a": "b"}),
        attempt_id=spec.attempt_id,
        restate=True,
    )
    assert spec.to_json() == flat.to_json() and spec.settings == settings
    assert LoadSpec.from_json(spec.to_json()) == spec  # the driver reads back what the task wrote
    assert sorted(json.loads(spec.to_json())) == [
        "attempt_id", "delete_when", "engine", "keep_tombstones", "merge_keys", "order_by",
        "partition_by", "plan", "previous_generation", "quarantine_table_uri",
        "restate", "run_id", "schema_drift", "source", "table_configuration", "table_uri",
        "transform", "try_number", "write_mode",
    ]  # fmt: skip


def test_one_registry_pairs_each_kind_of_source_with_its_reader() -> None:
    from airflow_eod.sources import SOURCE_KINDS, LandingFilesSource, source_from_dict
    from airflow_eod.spark.readers import REGISTRY, read_batch

    assert {kind: k.source for kind, k in REGISTRY.items()} == SOURCE_KINDS
    assert sorted(REGISTRY) == ["jdbc_incremental", "kafka", "landing_files"]
    for kind, k in REGISTRY.items():
        assert k.source.kind == kind
    source = LandingFilesSource(path="/landing")
    assert source_from_dict(source.to_dict()) == source and source.to_dict()["type"] == "landing_files"

    from airflow_eod.core.errors import ConfigurationError
    from airflow_eod.spark.readers import reader_for

    class Unknown:
        kind = "landing_files"  # a kind it does not implement

    with pytest.raises(ConfigurationError, match="no reader for a source of type Unknown"):
        read_batch(Unknown(), None, None)  # type: ignore[arg-type]

    class Renamed(LandingFilesSource):
        kind = "my_landing"  # a user's subclass that names its own kind: read as its base

    assert reader_for(Renamed(path="/landing")) is REGISTRY["landing_files"]


def test_submit_settings_that_cannot_work_are_refused_when_the_dag_is_parsed() -> None:
    from airflow_eod.core.errors import ConfigurationError
    from airflow_eod.operators.landing_files_to_delta import LandingFilesToDeltaOperator

    common = {"task_id": "load", "landing_path": "/landing", "table_uri": "/table", "execution": "submit"}
    for kwargs, message in (
        ({"submit_kwargs": {"executor_memroy": "2g"}}, "is not an argument of SparkSubmitHook"),
        ({"submit_kwargs": {"env_vars": {"A": "b"}}}, "the operator sets it"),
        ({"submit_kwargs": {"yarn_track_via_rm_api": True}}, "would return before the driver ends"),
        ({"spark_conf": {"spark.yarn.submit.waitAppCompletion": "false"}}, "wait for the driver to end"),
    ):
        with pytest.raises(ConfigurationError, match=message):
            LandingFilesToDeltaOperator(**common, **kwargs)  # type: ignore[arg-type]
    op = LandingFilesToDeltaOperator(**common, submit_kwargs={"executor_memory": "2g"})  # type: ignore[arg-type]
    assert op.submit_kwargs == {"executor_memory": "2g"}
