"""Faults with the landing files on S3 as well as the table (issue 21): loads that read a
landing prefix on SeaweedFS over s3a and write a Delta table on it, crashed at each boundary
of the write path and retried, raced by two attempts of one batch, and given a landing prefix
that changes after planning. Each ends with the row-by-row checker reading the prefix through
the storage seam (``examples/compare.read_store_landing_rows``), independent of Spark.

The retry must be handed the frozen batch (invariant I3): the same files, sizes and ETags,
even when a file landed under the prefix in between; that file goes to a later batch."""

from __future__ import annotations

import os
import threading
import uuid
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core.ask import ask
from airflow_eod.core.audit.verify import audit_table
from airflow_eod.core.errors import InputChangedError
from airflow_eod.core.faults import JOB_POINTS, InjectedFault
from airflow_eod.core.planlog.store import Plan
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.compare import Comparison, compare_rows, read_delta_rows, read_store_landing_rows
from airflow_eod.examples.sample_data import ORDERS_ARROW_SCHEMA, ORDERS_COLUMNS, write_order_files
from airflow_eod.sources.landing_files import LandingFilesSource
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import ORDERS_DDL, check, plan_for, spec_for

pytestmark = [pytest.mark.spark, pytest.mark.objectstore, pytest.mark.faults]
# The points a try passes once its commit is in the table (core/faults.py).
COMMITTED_BY_THEN = ("before_record", "after_commit")


@pytest.fixture
def s3a(spark: Any) -> None:
    from tests.support.spark_conf import find_s3a_jars

    why = find_s3a_jars()
    if why is not None:
        pytest.skip(why)


@pytest.fixture
def landing_uri(s3_server: Any, s3a: None) -> TableRef:
    """A fresh landing prefix on the S3 server (plain ASCII: odd prefix names are another
    file's business), as a reference carrying its storage options."""
    return TableRef.parse(f"s3://{s3_server.bucket}/landing/{uuid.uuid4().hex}/land", s3_server.options())


@pytest.fixture
def s3_table(s3_server: Any, s3a: None) -> TableRef:
    return TableRef.parse(f"s3://{s3_server.bucket}/loads/{uuid.uuid4().hex}/orders", s3_server.options())


def _source(landing: TableRef) -> LandingFilesSource:
    return LandingFilesSource(
        path=landing.location, file_format="csv", schema=ORDERS_DDL, storage_options=landing.storage_options
    )


def _upload(landing: TableRef, tmp: Any, files: int, rows: int, *, first_id: int) -> list[str]:
    """Write order files locally (ids from ``first_id``), then put each under the prefix."""
    local = os.path.join(str(tmp), f"gen-{first_id}")
    write_order_files(local, files, rows, first_id=first_id)
    store = landing.storage()
    keys = [f"{first_id}-{name}" for name in sorted(os.listdir(local))]
    for key in keys:
        with open(os.path.join(local, key.split("-", 1)[1]), "rb") as fh:
            store.put(key, fh.read())
    return keys


def _files(plan: Plan) -> list[tuple[str, int, str]]:
    return [(f["path"], f["size"], f["etag"]) for f in plan.inputs]


def _landing_rows(landing: TableRef) -> list[tuple[Any, ...]]:
    return read_store_landing_rows(
        landing.location, landing.storage_options, "csv", ORDERS_COLUMNS, ORDERS_ARROW_SCHEMA
    )


def _against(rows: list[tuple[Any, ...]], table: TableRef) -> Comparison:
    """The table against ``rows`` (the landing rows as they were at some point), row by row."""
    return compare_rows(rows, read_delta_rows(table, ORDERS_COLUMNS))


def _commits(table: TableRef) -> int:
    return len(DeltaTable(table.location, storage_options=table.storage_options).history())


@pytest.mark.parametrize("point", JOB_POINTS)
def test_a_crash_at_each_boundary_then_a_retry_of_the_same_files_commits_once(
    spark: Any,
    landing_uri: TableRef,
    s3_table: TableRef,
    tmp_path: Any,
    point: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _upload(landing_uri, tmp_path, 2, 20, first_id=1)
    source = _source(landing_uri)
    plan = plan_for(source, s3_table)  # type: ignore[arg-type]
    planned_rows = _landing_rows(landing_uri)
    assert len(plan.inputs) == 2 and len(planned_rows) == 40
    monkeypatch.setenv("EOD_FAULTPOINTS", f"{point}=raise@1")
    with pytest.raises(InjectedFault):
        run_load(spark, spec_for(source, s3_table, plan, try_number=1))  # type: ignore[arg-type]
    # A file lands under the prefix between the crash and the retry: the retry is handed the
    # frozen batch all the same (I3), the same paths, sizes and ETags, and not the new file.
    late = _upload(landing_uri, tmp_path, 1, 7, first_id=1000)
    retry = plan_for(source, s3_table)  # type: ignore[arg-type]
    assert retry == plan and _files(retry) == _files(plan)
    result = run_load(spark, spec_for(source, s3_table, retry, try_number=2))  # type: ignore[arg-type]
    # From ``before_record`` on, the first try's commit is in the table: the retry finds it.
    assert result.outcome == ("already_committed" if point in COMMITTED_BY_THEN else "committed")
    assert _commits(s3_table) == 1 and ask(s3_table, plan.key).committed
    cmp = _against(planned_rows, s3_table)
    assert cmp.exact and cmp.table_rows == 40, cmp.describe()
    # The next run plans the file that landed late, and only it.
    monkeypatch.delenv("EOD_FAULTPOINTS")
    nxt = plan_for(source, s3_table, run="run-2")  # type: ignore[arg-type]
    assert [f["path"] for f in nxt.inputs] == [f"{landing_uri.location}/{late[0]}"]
    assert run_load(spark, spec_for(source, s3_table, nxt, try_number=1)).outcome == "committed"  # type: ignore[arg-type]
    assert _commits(s3_table) == 2
    cmp = check(s3_table, landing_uri)  # type: ignore[arg-type]
    assert cmp.exact and cmp.table_rows == 47, cmp.describe()
    assert audit_table(s3_table).ok


def test_racing_attempts_reading_one_landing_prefix_commit_once(
    spark: Any, landing_uri: TableRef, s3_table: TableRef, tmp_path: Any
) -> None:
    """Two attempts of one run freeze at once (one plan wins the plan log, both get it) and
    then load at once: one commit, the other attempt finds it."""
    _upload(landing_uri, tmp_path, 3, 15, first_id=1)
    source = _source(landing_uri)
    plans: dict[int, Plan] = {}
    outcomes: list[str] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(2, timeout=120)

    def attempt(n: int) -> None:
        try:
            barrier.wait()
            plans[n] = plan_for(source, s3_table)  # type: ignore[arg-type]
            barrier.wait()
            outcomes.append(run_load(spark, spec_for(source, s3_table, plans[n], try_number=n + 1)).outcome)  # type: ignore[arg-type]
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=attempt, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert plans[0] == plans[1] and len(plans[0].inputs) == 3
    assert sorted(outcomes) == ["already_committed", "committed"], outcomes
    assert _commits(s3_table) == 1 and ask(s3_table, plans[0].key).committed
    cmp = check(s3_table, landing_uri)  # type: ignore[arg-type]
    assert cmp.exact and cmp.table_rows == 45, cmp.describe()
    assert audit_table(s3_table).ok


def test_a_file_landing_after_planning_waits_for_the_next_batch(
    spark: Any, landing_uri: TableRef, s3_table: TableRef, tmp_path: Any
) -> None:
    _upload(landing_uri, tmp_path, 2, 10, first_id=1)
    source = _source(landing_uri)
    plan = plan_for(source, s3_table)  # type: ignore[arg-type]
    planned_rows = _landing_rows(landing_uri)
    late = _upload(landing_uri, tmp_path, 1, 5, first_id=500)
    result = run_load(spark, spec_for(source, s3_table, plan))  # type: ignore[arg-type]
    assert result.outcome == "committed" and result.rows == 20
    cmp = _against(planned_rows, s3_table)
    assert cmp.exact and cmp.table_rows == 20, cmp.describe()
    nxt = plan_for(source, s3_table, run="run-2")  # type: ignore[arg-type]
    assert nxt.key != plan.key and [f["path"] for f in nxt.inputs] == [f"{landing_uri.location}/{late[0]}"]
    assert run_load(spark, spec_for(source, s3_table, nxt)).outcome == "committed"  # type: ignore[arg-type]
    cmp = check(s3_table, landing_uri)  # type: ignore[arg-type]
    assert cmp.exact and cmp.table_rows == 25, cmp.describe()
    assert _commits(s3_table) == 2


@pytest.mark.parametrize("change", ["rewrite", "delete"])
def test_a_file_changed_between_a_crash_and_its_retry_fails_the_retry_and_nothing_is_committed(
    spark: Any,
    landing_uri: TableRef,
    s3_table: TableRef,
    tmp_path: Any,
    change: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first try dies with its files staged; a planned file is then rewritten (the same
    size, other bytes: only the ETag tells) or deleted. The retry gets the frozen plan and
    refuses it clearly, naming the file; nothing is committed, then or later by accident."""
    keys = _upload(landing_uri, tmp_path, 2, 12, first_id=1)
    source = _source(landing_uri)
    plan = plan_for(source, s3_table)  # type: ignore[arg-type]
    monkeypatch.setenv("EOD_FAULTPOINTS", "after_stage=raise@1")
    with pytest.raises(InjectedFault):
        run_load(spark, spec_for(source, s3_table, plan, try_number=1))  # type: ignore[arg-type]
    store = landing_uri.storage()
    if change == "rewrite":
        old = store.get(keys[0])
        new = old.replace(b"customer-", b"customer+", 1)
        assert new != old and len(new) == len(old)
        store.put(keys[0], new)
    else:
        store.delete(keys[0])
    retry = plan_for(source, s3_table)  # type: ignore[arg-type]
    assert retry == plan and _files(retry) == _files(plan)
    match = "etag" if change == "rewrite" else "gone"
    with pytest.raises(InputChangedError, match=match) as err:
        run_load(spark, spec_for(source, s3_table, retry, try_number=2))  # type: ignore[arg-type]
    assert keys[0] in str(err.value)
    assert not ask(s3_table, plan.key).committed
    assert not s3_table.storage().has_prefix("_delta_log")
