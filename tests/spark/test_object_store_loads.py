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


def _history(ref: TableRef) -> int:
    return len(DeltaTable(ref.location, storage_options=ref.storage_options).history())


@pytest.mark.parametrize("point", ["before_write", "after_stage", "before_commit", "after_commit"])
def test_a_crash_at_each_boundary_is_recovered_by_the_retry(
    spark: Any, landing: str, s3_table: TableRef, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_order_files(landing, 2, 40)
    source = orders_source(landing)
    plan = plan_for(source, s3_table)  # type: ignore[arg-type]
    monkeypatch.setenv("EOD_FAULTPOINTS", f"{point}=raise@1")
    with pytest.raises(InjectedFault):
        run_load(spark, spec_for(source, s3_table, plan, try_number=1))  # type: ignore[arg-type]
    retry = plan_for(source, s3_table)  # type: ignore[arg-type]
    assert retry == plan  # the plan log on S3 hands the retry the same frozen batch
    result = run_load(spark, spec_for(source, s3_table, retry, try_number=2))  # type: ignore[arg-type]
    assert result.outcome == ("already_committed" if point == "after_commit" else "committed")
    assert _history(s3_table) == 1
    cmp = check(s3_table, landing)  # type: ignore[arg-type]
    assert cmp.exact and cmp.table_rows == 80, cmp.describe()
    # The failed attempt's staged objects are gone once the batch is committed.
    store = s3_table.storage()
    batch = f"eod_data/{plan.pipeline_id}/{plan.batch_key}"
    attempts = [n for n in store.list(batch) if store.has_prefix(f"{batch}/{n}")]
    assert len(attempts) == 1, attempts
    assert audit_table(s3_table).ok


def test_racing_attempts_of_one_batch_commit_once(spark: Any, landing: str, s3_table: TableRef) -> None:
    write_order_files(landing, 3, 30)
    source = orders_source(landing)
    plan = plan_for(source, s3_table)  # type: ignore[arg-type]
    specs = [spec_for(source, s3_table, plan, try_number=n) for n in (1, 2)]  # type: ignore[arg-type]
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
    assert _history(s3_table) == 1 and ask(s3_table, plan.key).committed
    cmp = check(s3_table, landing)  # type: ignore[arg-type]
    assert cmp.exact and cmp.table_rows == 90, cmp.describe()


def test_a_restatement_swaps_the_batch_in_one_commit(spark: Any, landing: str, s3_table: TableRef) -> None:
    write_order_files(landing, 2, 25)
    source = orders_source(landing)
    plan = plan_for(source, s3_table)  # type: ignore[arg-type]
    assert run_load(spark, spec_for(source, s3_table, plan)).outcome == "committed"  # type: ignore[arg-type]
    restated = plan_restatement(
        PlanLog(s3_table, plan.pipeline_id),
        plan,
        run_token="restate-run",
        committed_generation=ask(s3_table, plan.key).committed_generation,
        replan=lambda p, g: source.replan(p, g),
    )
    spec = spec_for(source, s3_table, restated, try_number=2, restate=True, previous_generation=0)  # type: ignore[arg-type]
    result = run_load(spark, spec)
    assert result.outcome == "committed" and result.generation == 1
    assert _history(s3_table) == 2 and ask(s3_table, plan.key, 1).committed
    cmp = check(s3_table, landing)  # type: ignore[arg-type]
    assert cmp.exact and cmp.table_rows == 50, cmp.describe()
    assert audit_table(s3_table).ok


def test_an_object_store_load_refuses_what_it_does_not_do_yet(s3_server: Any) -> None:
    from airflow_eod.core.options import check_object_store_load

    ref = TableRef.parse(f"s3://{s3_server.bucket}/loads/refused", s3_server.options())
    for kwargs, cause in (
        ({"engine": "delta-spark", "execution": "local", "quarantine": None}, "engine='delta-spark'"),
        ({"engine": "delta-rs", "execution": "submit", "quarantine": None}, "execution='submit'"),
        ({"engine": "delta-rs", "execution": "local", "quarantine": "s3://b/q"}, "quarantine_table_uri"),
    ):
        with pytest.raises(ConfigurationError, match=cause):
            check_object_store_load(ref, **kwargs)  # type: ignore[arg-type]
    check_object_store_load(ref, engine="delta-rs", execution="local", quarantine=None)
