"""Merge loads into tables on S3 (SeaweedFS, s3a) and Azure (Azurite, abfs): the rewritten
files are read back over the store's connector with their partition values, a crash after
staging is recovered by the retry, and another writer's compaction between two merges is
no obstacle; each ends with the table against the source's newest row per key."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core.ask import ask
from airflow_eod.core.faults import InjectedFault
from airflow_eod.core.table_ref import TableRef
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import plan_for, spec_for
from tests.support.merge_helpers import MERGE_SETTINGS, cdc_source, check_merge, write_changes

pytestmark = [pytest.mark.spark, pytest.mark.objectstore, pytest.mark.merge]


@pytest.fixture(params=["s3", "azure"])
def merge_table(request: pytest.FixtureRequest, spark: Any) -> TableRef:
    if request.param == "s3":
        from tests.support.spark_conf import find_s3a_jars

        why = find_s3a_jars()
        if why is not None:
            pytest.skip(why)
        server = request.getfixturevalue("s3_server")
        return TableRef.parse(f"s3://{server.bucket}/merges/{uuid.uuid4().hex}/t", server.options())
    table: TableRef = request.getfixturevalue("az_table")
    return table


def _load(spark: Any, landing: str, table: TableRef, run: str, **kw: Any) -> Any:
    source = cdc_source(landing)
    plan = plan_for(source, table, run, pipeline="tests.store_merge")  # type: ignore[arg-type]
    return run_load(spark, spec_for(source, table, plan, **{**MERGE_SETTINGS, **kw}))  # type: ignore[arg-type]


def test_merges_into_a_store_survive_a_crash_and_another_writers_compaction(
    spark: Any, tmp_path: Any, merge_table: TableRef, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Hadoop's ABFS driver fails a task that writes several partition folders against
    # Azurite (docs/object-stores.md, "Spark's writes"): the Azure table is unpartitioned.
    parts = {"partition_by": ["name"]} if merge_table.scheme == "s3" else {}
    landing = str(tmp_path / "landing")
    first = [(i, f"p{i % 2}", i, 1, "I") for i in range(1, 25)]
    write_changes(landing, "c-0001.csv", first)
    assert _load(spark, landing, merge_table, "run-1", **parts).outcome == "committed"
    second = [(i, f"p{(i + 1) % 2}", i * 10, 2, "U") for i in range(1, 6)] + [(9, "p1", 0, 3, "D")]
    write_changes(landing, "c-0002.csv", second)
    monkeypatch.setenv("EOD_FAULTPOINTS", "after_stage=raise@1")
    with pytest.raises(InjectedFault):
        _load(spark, landing, merge_table, "run-2", **parts, try_number=1)
    monkeypatch.delenv("EOD_FAULTPOINTS")
    retry = _load(spark, landing, merge_table, "run-2", **parts, try_number=2)
    assert retry.outcome == "committed"
    options = merge_table.storage_options
    got = check_merge(merge_table.location, first + second, storage_options=options)
    assert got.ok, got
    # Another writer compacts the table; the next merge reads the compacted files.
    DeltaTable(merge_table.location, storage_options=options).optimize.compact()
    third = [(2, "p0", 7, 9, "U"), (30, "p0", 30, 1, "I")]
    write_changes(landing, "c-0003.csv", third)
    assert _load(spark, landing, merge_table, "run-3", **parts).outcome == "committed"
    got = check_merge(merge_table.location, first + second + third, storage_options=options)
    assert got.ok, got
    assert ask(merge_table, spec_key(retry)).committed


def spec_key(result: Any) -> Any:
    from airflow_eod.core.batch import BatchKey

    return BatchKey("tests.store_merge", result.batch_key)
