"""Loads into a table on S3 (SeaweedFS) with real Spark writing over s3a (issue 21): a crash
raised at each boundary of the write path and the retry, racing attempts of one batch, and a
restatement, each ending with the row-by-row checker against the landing files."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core.ask import ask
from airflow_eod.core.audit.verify import audit_table
from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.faults import InjectedFault
from airflow_eod.core.planlog.restatement import plan_restatement
from airflow_eod.core.planlog.store import PlanLog
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.sample_data import write_order_files
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import check, orders_source, plan_for, spec_for

pytestmark = [pytest.mark.spark, pytest.mark.objectstore, pytest.mark.faults]


@pytest.fixture
def s3_table(s3_server: Any, spark: Any) -> TableRef:
    from tests.support.spark_conf import find_s3a_jars

    why = find_s3a_jars()
    if why is not None:
        pytest.skip(why)
    return TableRef.parse(f"s3://{s3_server.bucket}/loads/{uuid.uuid4().hex}/orders", s3_server.options())


@pytest.fixture(params=["s3", "azure"])
def store_table(request: pytest.FixtureRequest) -> TableRef:
    """A fresh table on S3 (s3a) or on Azure (abfs against Azurite) for Spark's writes."""
    name = "s3_table" if request.param == "s3" else "az_table"
    table: TableRef = request.getfixturevalue(name)
    return table


def _history(ref: TableRef) -> int:
    return len(DeltaTable(ref.location, storage_options=ref.storage_options).history())


@pytest.mark.parametrize("point", ["before_write", "after_stage", "before_commit", "after_commit"])
def test_a_crash_at_each_boundary_is_recovered_by_the_retry(
    spark: Any, landing: str, store_table: TableRef, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_order_files(landing, 2, 40)
    source = orders_source(landing)
    plan = plan_for(source, store_table)  # type: ignore[arg-type]
    monkeypatch.setenv("EOD_FAULTPOINTS", f"{point}=raise@1")
    with pytest.raises(InjectedFault):
        run_load(spark, spec_for(source, store_table, plan, try_number=1))  # type: ignore[arg-type]
    retry = plan_for(source, store_table)  # type: ignore[arg-type]
    assert retry == plan  # the plan log on S3 hands the retry the same frozen batch
    result = run_load(spark, spec_for(source, store_table, retry, try_number=2))  # type: ignore[arg-type]
    assert result.outcome == ("already_committed" if point == "after_commit" else "committed")
    assert _history(store_table) == 1
    cmp = check(store_table, landing)  # type: ignore[arg-type]
    assert cmp.exact and cmp.table_rows == 80, cmp.describe()
    # The failed attempt's staged objects are gone once the batch is committed.
    store = store_table.storage()
    batch = f"eod_data/{plan.pipeline_id}/{plan.batch_key}"
    attempts = [n for n in store.list(batch) if store.has_prefix(f"{batch}/{n}")]
    assert len(attempts) == 1, attempts
    assert audit_table(store_table).ok


def test_racing_attempts_of_one_batch_commit_once(spark: Any, landing: str, store_table: TableRef) -> None:
    write_order_files(landing, 3, 30)
    source = orders_source(landing)
    plan = plan_for(source, store_table)  # type: ignore[arg-type]
    specs = [spec_for(source, store_table, plan, try_number=n) for n in (1, 2)]  # type: ignore[arg-type]
    outcomes: list[str] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def attempt(n: int) -> None:
        try:
            barrier.wait()
            outcomes.append(run_load(spark, specs[n]).outcome)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=attempt, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(outcomes) == ["already_committed", "committed"], outcomes
    assert _history(store_table) == 1 and ask(store_table, plan.key).committed
    cmp = check(store_table, landing)  # type: ignore[arg-type]
    assert cmp.exact and cmp.table_rows == 90, cmp.describe()


def test_a_restatement_swaps_the_batch_in_one_commit(spark: Any, landing: str, store_table: TableRef) -> None:
    write_order_files(landing, 2, 25)
    source = orders_source(landing)
    plan = plan_for(source, store_table)  # type: ignore[arg-type]
    assert run_load(spark, spec_for(source, store_table, plan)).outcome == "committed"  # type: ignore[arg-type]
    restated = plan_restatement(
        PlanLog(store_table, plan.pipeline_id),
        plan,
        run_token="restate-run",
        committed_generation=ask(store_table, plan.key).committed_generation,
        replan=lambda p, g: source.replan(p, g),
    )
    spec = spec_for(source, store_table, restated, try_number=2, restate=True, previous_generation=0)  # type: ignore[arg-type]
    result = run_load(spark, spec)
    assert result.outcome == "committed" and result.generation == 1
    assert _history(store_table) == 2 and ask(store_table, plan.key, 1).committed
    cmp = check(store_table, landing)  # type: ignore[arg-type]
    assert cmp.exact and cmp.table_rows == 50, cmp.describe()
    assert audit_table(store_table).ok


def test_another_writer_compacting_and_vacuuming_between_spark_loads(
    spark: Any, landing: str, store_table: TableRef
) -> None:
    """deltalake's OPTIMIZE and VACUUM (no retention) between loads: every batch still reads
    as committed, a retry of a compacted batch writes nothing, the next batch loads, and the
    table holds each landing row once."""
    specs = []
    for n, run in enumerate(("run-1", "run-2")):
        write_order_files(landing, 2, 15, first_id=1 + 100 * n)
        plan = plan_for(orders_source(landing), store_table, run=run)  # type: ignore[arg-type]
        specs.append(spec_for(orders_source(landing), store_table, plan))  # type: ignore[arg-type]
        assert run_load(spark, specs[-1]).outcome == "committed"
    dt = DeltaTable(store_table.location, storage_options=store_table.storage_options)
    dt.optimize.compact()
    dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    for spec in specs:
        assert ask(store_table, spec.plan.key).committed
    assert run_load(spark, specs[0]).outcome == "already_committed"
    write_order_files(landing, 1, 10, first_id=301)
    plan = plan_for(orders_source(landing), store_table, run="run-3")  # type: ignore[arg-type]
    assert run_load(spark, spec_for(orders_source(landing), store_table, plan)).outcome == "committed"  # type: ignore[arg-type]
    cmp = check(store_table, landing)  # type: ignore[arg-type]
    assert cmp.exact and cmp.table_rows == 70, cmp.describe()
    assert audit_table(store_table).ok


def test_an_object_store_load_refuses_what_it_does_not_do_yet(s3_server: Any) -> None:
    from airflow_eod.core.options import check_object_store_load

    ref = TableRef.parse(f"s3://{s3_server.bucket}/loads/refused", s3_server.options())
    for kwargs, cause in (
        ({"engine": "delta-spark", "execution": "local", "quarantine": None}, "engine='delta-spark'"),
        ({"engine": "delta-spark", "execution": "submit", "quarantine": None}, "engine='delta-spark'"),
        (
            {"engine": "delta-rs", "execution": "local", "quarantine": "gs://b/q"},
            "quarantine_table_uri gs://b/q is on GCS",
        ),
    ):
        with pytest.raises(ConfigurationError, match=cause):
            check_object_store_load(ref, **kwargs)  # type: ignore[arg-type]
    check_object_store_load(ref, engine="delta-rs", execution="local", quarantine=None)
    check_object_store_load(ref, engine="delta-rs", execution="local", quarantine="s3a://other-bucket/q")
    # Submitted to a cluster, an S3 table is loaded (tests/airflow/test_submit_s3.py); Spark's
    # writes to Azure and GCS are not supported yet, so a submitted load there is refused.
    check_object_store_load(ref, engine="delta-rs", execution="submit", quarantine="s3://other-bucket/q")
    for uri in ("az://container/lake/t", "abfss://c@acct.dfs.core.windows.net/lake/t", "gs://b/lake/t"):
        elsewhere = TableRef.parse(uri)
        with pytest.raises(ConfigurationError, match=r"execution='submit' \(a submitted driver writes to S3"):
            check_object_store_load(elsewhere, engine="delta-rs", execution="submit", quarantine=None)
    local = TableRef.parse("/tmp/eod-never-written/t")
    with pytest.raises(ConfigurationError, match="on a local file system: a load reaches one store"):
        check_object_store_load(local, engine="delta-rs", execution="local", quarantine="s3://b/q")


@pytest.mark.parametrize("point", ["before_write", "after_stage", "before_commit", "after_commit"])
def test_malformed_records_reach_a_quarantine_table_on_s3_once_across_a_crash(
    spark: Any, landing: str, s3_table: TableRef, s3_server: Any, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A quarantine table on the table's store takes the table's connection: the malformed
    records are staged there over s3a and delivered after the main commit, once, whether the
    attempt died before the main commit or between it and the delivery."""
    import os

    write_order_files(landing, 1, 12)
    with open(os.path.join(landing, "z-bad.csv"), "w") as fh:
        fh.write("order_id,customer,amount,order_date,ordered_at\n")
        fh.write("x1,a,1,2026-11-01,2026-11-01T00:00:00Z\nx2,b,2,2026-11-01,2026-11-01T00:00:00Z\n")
    quarantine = f"s3://{s3_server.bucket}/loads/{uuid.uuid4().hex}/rejects"
    source = orders_source(landing)
    plan = plan_for(source, s3_table)  # type: ignore[arg-type]
    monkeypatch.setenv("EOD_FAULTPOINTS", f"{point}=raise@1")
    with pytest.raises(InjectedFault):
        run_load(spark, spec_for(source, s3_table, plan, quarantine_table_uri=quarantine))  # type: ignore[arg-type]
    retry = run_load(spark, spec_for(source, s3_table, plan, try_number=2, quarantine_table_uri=quarantine))  # type: ignore[arg-type]
    assert retry.rows == 12
    q = DeltaTable(quarantine, storage_options=s3_table.storage_options)
    assert q.version() == 0  # one delivery
    assert sorted(r["raw_record"].split(",")[0] for r in q.to_pyarrow_table().to_pylist()) == ["x1", "x2"]
    assert _history(s3_table) == 1
    q_ref = TableRef.parse(quarantine, s3_table.storage_options)
    assert ask(q_ref, plan.key).committed
    os.unlink(os.path.join(landing, "z-bad.csv"))
    cmp = check(s3_table, landing)  # type: ignore[arg-type]
    assert cmp.exact and cmp.table_rows == 12, cmp.describe()
    assert audit_table(s3_table).ok


@pytest.mark.jdbc
@pytest.mark.parametrize("point", ["after_stage", "after_commit"])
def test_jdbc_batches_into_a_store_survive_a_crash_and_follow_the_key_frontier(
    spark: Any, postgres: Any, store_table: TableRef, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other source: key-range batches from PostgreSQL into the store's table, a crash at
    a boundary and its retry, then the next range; the table against PostgreSQL row by row."""
    from airflow_eod.sources import Credentials, JdbcIncrementalSource, ReadContext
    from airflow_eod.spark.load_spec import LoadSettings, LoadSpec
    from tests.support.jdbc_helpers import check_against_postgres, create_orders, insert_orders

    name = f"orders_{store_table.scheme}_{point}"  # one source table per store and point
    create_orders(postgres, name)
    insert_orders(postgres, name, range(1, 61))
    src = JdbcIncrementalSource(url=postgres.jdbc_url, table=name, key_column="id", max_rows_per_batch=40)
    ctx = ReadContext(spark_factory=lambda: spark, credentials=Credentials(postgres.user, postgres.password))

    def plan(run: str) -> Any:
        return src.plan(
            PlanLog(store_table, "tests.jdbc_s3"),
            ctx,
            run_token=run,
            is_committed=lambda k: ask(store_table, k).committed,
        )

    def spec(p: Any, try_number: int) -> LoadSpec:
        return LoadSpec(
            table=store_table, plan=p, source=src, settings=LoadSettings(run_id="r", try_number=try_number)
        )

    first = plan("r0")
    monkeypatch.setenv("EOD_FAULTPOINTS", f"{point}=raise@1")
    with pytest.raises(InjectedFault):
        run_load(spark, spec(first, 1), credentials=ctx.credentials)
    monkeypatch.delenv("EOD_FAULTPOINTS")
    assert plan("r0") == first
    outcome = run_load(spark, spec(first, 2), credentials=ctx.credentials).outcome
    assert outcome == ("already_committed" if point == "after_commit" else "committed")
    second = plan("r1")
    assert (second.boundary["low"], second.boundary["high"]) == (40, 60)
    assert run_load(spark, spec(second, 1), credentials=ctx.credentials).outcome == "committed"
    cmp = check_against_postgres(postgres, name, store_table)  # type: ignore[arg-type]
    assert cmp.exact and cmp.table_rows == 60, cmp.describe()
    assert _history(store_table) == 2 and audit_table(store_table).ok


@pytest.mark.parametrize("point", [None, "after_stage", "after_commit"])
def test_odd_partition_values_are_staged_under_plain_ascii_keys_on_a_store(
    spark: Any, landing: str, s3_table: TableRef, point: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a file system the partition folder is renamed to the spelling every Delta writer
    reads alike (``customer=%E6%97%A5``); on a store each staged object moves to that key (a
    copy and a delete), and the table reads back the values themselves, also when the attempt
    that moved them crashed after staging or after its commit and a retry finished."""
    values = ["日本", "ü ß", "a%b", "a+b", "k=v", "plain"]
    with open(f"{landing}/orders-odd.csv", "w") as fh:
        fh.write("order_id,customer,amount,order_date,ordered_at\n")
        for i, v in enumerate(values):
            fh.write(f"{i},{v},1.00,2026-11-01,2026-11-01T00:00:00.000000Z\n")
    source = orders_source(landing)
    plan = plan_for(source, s3_table)  # type: ignore[arg-type]
    if point is not None:
        monkeypatch.setenv("EOD_FAULTPOINTS", f"{point}=raise@1")
        with pytest.raises(InjectedFault):
            run_load(spark, spec_for(source, s3_table, plan, partition_by=["customer"]))  # type: ignore[arg-type]
    retry = spec_for(source, s3_table, plan, try_number=2, partition_by=["customer"])  # type: ignore[arg-type]
    result = run_load(spark, retry)
    assert result.outcome == ("already_committed" if point == "after_commit" else "committed")
    assert result.rows == len(values) and _history(s3_table) == 1
    dt = DeltaTable(s3_table.location, storage_options=s3_table.storage_options)
    import pyarrow as pa

    adds = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    assert all(a["path"].isascii() and " " not in a["path"] for a in adds), [a["path"] for a in adds]
    assert sorted(a["partition.customer"] for a in adds) == sorted(values)
    store = s3_table.storage()
    staged = [k for k, _ in store.walk("eod_data")]  # type: ignore[attr-defined]
    assert staged and all(k.isascii() and " " not in k for k in staged), staged  # nothing at odd keys
    cmp = check(s3_table, landing)  # type: ignore[arg-type]
    assert cmp.exact and cmp.table_rows == len(values), cmp.describe()
    assert audit_table(s3_table).ok


def test_a_store_whose_connector_is_not_on_the_class_path_is_refused_naming_the_fix(spark: Any) -> None:
    """The shared session carries the s3a connector only: a GCS URI needs another, and the
    refusal says how to fetch it (nothing is set on the session)."""
    from airflow_eod.spark.object_store_conf import prepare_session

    with pytest.raises(ConfigurationError, match=r"python -m airflow_eod.spark.cloud_jars gcs") as err:
        prepare_session(spark, "gs://bucket/in", {}, "landing path gs://bucket/in")
    assert str(err.value).startswith("landing path gs://bucket/in: Spark cannot reach gs://")
