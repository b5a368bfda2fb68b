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


@pytest.fixture
def s3_merge_table(s3_server: Any, spark: Any) -> TableRef:
    from tests.support.spark_conf import find_s3a_jars

    why = find_s3a_jars()
    if why is not None:
        pytest.skip(why)
    return TableRef.parse(f"s3://{s3_server.bucket}/merges/{uuid.uuid4().hex}/t", s3_server.options())


def _merged_once(table: TableRef, result: Any, changes: list[Any]) -> None:
    got = check_merge(table.location, changes, storage_options=table.storage_options)
    assert got.ok, got
    history = DeltaTable(table.location, storage_options=table.storage_options).history()
    markers = [h for h in history if h.get("operation") == "MERGE"]
    assert len(markers) == 1 and ask(table, spec_key(result)).committed


@pytest.mark.faults
@pytest.mark.parametrize("point", ["before_write", "before_commit", "before_record", "after_commit"])
def test_a_merge_into_s3_crashed_at_each_boundary_is_merged_once_by_the_retry(
    spark: Any, tmp_path: Any, s3_merge_table: TableRef, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other boundaries of the crash after staging above, on S3: the retry merges the
    frozen batch once (or finds it committed), and the table is the source's newest rows."""
    landing = str(tmp_path / "landing")
    first = [(i, "n", i, 1, "I") for i in range(1, 9)]
    write_changes(landing, "c-0001.csv", first)
    assert _load(spark, landing, s3_merge_table, "run-1").outcome == "committed"
    second = [(2, "u", 20, 2, "U"), (3, "d", 0, 2, "D"), (9, "new", 9, 1, "I"), (4, "stale", 0, 0, "U")]
    write_changes(landing, "c-0002.csv", second)
    monkeypatch.setenv("EOD_FAULTPOINTS", f"{point}=raise@1")
    with pytest.raises(InjectedFault):
        _load(spark, landing, s3_merge_table, "run-2", try_number=1)
    monkeypatch.delenv("EOD_FAULTPOINTS")
    retry = _load(spark, landing, s3_merge_table, "run-2", try_number=2)
    assert retry.outcome == (
        "already_committed" if point in ("before_record", "after_commit") else "committed"
    )
    _merged_once(s3_merge_table, retry, first + second)


@pytest.mark.faults
def test_two_attempts_merging_one_batch_into_s3_commit_once(
    spark: Any, tmp_path: Any, s3_merge_table: TableRef
) -> None:
    import threading

    landing = str(tmp_path / "landing")
    changes = [(i, "n", i, 1, "I") for i in range(1, 7)] + [(2, "u", 20, 2, "U")]
    write_changes(landing, "c-0001.csv", changes)
    outcomes: list[str] = []
    errors: list[BaseException] = []
    results: list[Any] = []
    barrier = threading.Barrier(2)

    def attempt(n: int) -> None:
        try:
            barrier.wait()
            results.append(_load(spark, landing, s3_merge_table, "run-1", try_number=n + 1))
            outcomes.append(results[-1].outcome)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=attempt, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(outcomes) == ["already_committed", "committed"], outcomes
    got = check_merge(s3_merge_table.location, changes, storage_options=s3_merge_table.storage_options)
    assert got.ok, got
    assert ask(s3_merge_table, spec_key(results[0])).committed
    assert (
        len(DeltaTable(s3_merge_table.location, storage_options=s3_merge_table.storage_options).history())
        == 1
    )
