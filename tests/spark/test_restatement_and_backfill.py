"""Restatement (a new generation swapped in one commit) and backfills in any order."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_eod.cli import main as cli
from airflow_eod.core.ask import ask
from airflow_eod.core.planlog.restatement import plan_restatement
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.sample_data import write_order_files
from airflow_eod.sources import Credentials, JdbcIncrementalSource, ReadContext
from airflow_eod.spark.load_job import run_load
from airflow_eod.spark.load_spec import LoadSpec
from tests.support.helpers import check, lost_races, orders_source, run_child, spec_for
from tests.support.jdbc_helpers import check_against_postgres, create_orders, insert_orders

pytestmark = pytest.mark.spark
DAY = datetime(2026, 11, 10, tzinfo=UTC)


def _interval_plan(source: Any, table: str, day: int, pipeline: str = "tests.backfill") -> Plan:
    start = DAY + timedelta(days=day)
    plan = source.plan(
        PlanLog(TableRef.parse(table), pipeline),
        None,
        run_token=f"run-{day}",
        is_committed=lambda k: False,
        interval=(start, start + timedelta(days=1)),
    )
    assert plan is not None
    return plan


def _commit_actions(table: str, version: int) -> dict[str, list[Any]]:
    path = os.path.join(table, "_delta_log", f"{version:020d}.json")
    out: dict[str, list[Any]] = {}
    for line in open(path):
        action = json.loads(line)
        kind = next(iter(action))
        out.setdefault(kind, []).append(action[kind])
    return out


def _loaded_then_corrected(
    spark: Any, tmp_path: Any, table: str, pipeline: str, corrected: tuple[int, int], first_id: int, **kw: Any
) -> tuple[Any, Plan, str]:
    """One interval loaded as generation 0, then its files replaced by ``corrected``
    (files, rows per file) starting at ``first_id``; returns (source, plan, landing)."""
    landing = str(tmp_path / "day")
    write_order_files(landing, 2, 10)
    source = orders_source(landing, boundary="interval")
    plan = _interval_plan(source, table, 0, pipeline)
    first = run_load(spark, spec_for(source, table, plan, **kw))
    assert first.outcome == "committed" and first.generation == 0
    for name in os.listdir(landing):
        os.unlink(os.path.join(landing, name))
    write_order_files(landing, *corrected, first_id=first_id)
    return source, plan, landing


def test_restatement_swaps_the_generation_in_one_commit(
    spark: Any, tmp_path: Any, table: str, capsys: Any
) -> None:
    source, plan, landing = _loaded_then_corrected(
        spark, tmp_path, table, "tests.restate", (3, 20), 5000, partition_by=["order_date"]
    )
    first = ask(TableRef.parse(table), plan.key)
    assert first.manifest is not None
    # Without restatement, another attempt of the batch writes nothing.
    assert run_load(spark, spec_for(source, table, plan, try_number=2)).outcome == "already_committed"
    log = PlanLog(TableRef.parse(table), "tests.restate")
    status = ask(TableRef.parse(table), plan.key)
    restated_plan = plan_restatement(
        log,
        plan,
        run_token="restate-run",
        committed_generation=status.committed_generation,
        replan=lambda p, g: source.replan(p, g),
    )
    assert restated_plan.generation == 1
    spec = spec_for(
        source, table, restated_plan, restate=True, previous_generation=0, partition_by=["order_date"]
    )
    result = run_load(spark, spec)
    assert result.outcome == "committed" and result.generation == 1 and result.rows == 60

    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 60, cmp.describe()
    swap = _commit_actions(table, result.table_version or 0)
    assert len(swap["remove"]) == first.manifest.files and len(swap["add"]) == result.files
    assert swap["txn"] == [
        {"appId": plan.key.app_id, "version": 1, "lastUpdated": swap["txn"][0]["lastUpdated"]}
    ]
    assert json.loads(swap["commitInfo"][0]["userMetadata"])["airflow_eod"]["previous_generation"] == 0
    assert DeltaTable(table).version() == (first.table_version or 0) + 1, "one commit for the swap"

    # The ask, the retry of the restating run, and the console script all see generation 1.
    again = plan_restatement(log, plan, run_token="restate-run", committed_generation=1, replan=source.replan)
    assert again == restated_plan
    assert run_load(spark, spec_for(source, table, again, restate=True)).outcome == "already_committed"
    assert (
        ask(TableRef.parse(table), plan.key, 1).committed
        and ask(TableRef.parse(table), plan.key).committed_generation == 1
    )
    assert cli(["status", table, "--json"]) == 0
    batches = json.loads(capsys.readouterr().out)[0]["batches"]
    assert [(b["generation"], b["rows"]) for b in batches] == [(1, 60)]


@pytest.mark.backfill
def test_intervals_backfilled_in_reverse_order_are_each_loaded_once(
    spark: Any, tmp_path: Any, table: str
) -> None:
    first_id = 1
    for day in (4, 3, 2, 1, 0):  # newest first, as a backwards backfill runs
        landing = str(tmp_path / "landing" / f"day{day}")
        write_order_files(landing, 1, 15, first_id=first_id)
        first_id += 15
        source = orders_source(landing, boundary="interval")
        assert (
            run_load(spark, spec_for(source, table, _interval_plan(source, table, day))).outcome
            == "committed"
        )
    # A second pass over the same intervals (a re-run backfill) writes nothing.
    version = DeltaTable(table).version()
    for day in range(5):
        source = orders_source(str(tmp_path / "landing" / f"day{day}"), boundary="interval")
        assert (
            run_load(spark, spec_for(source, table, _interval_plan(source, table, day))).outcome
            == "already_committed"
        )
    assert DeltaTable(table).version() == version
    cmp = check(table, str(tmp_path / "landing"))
    assert cmp.exact and cmp.table_rows == 75, cmp.describe()


@pytest.mark.backfill
@pytest.mark.faults
def test_two_intervals_loaded_in_parallel_processes_are_both_committed(tmp_path: Any, table: str) -> None:
    procs = []
    for day in (0, 1):
        landing = str(tmp_path / "landing" / f"day{day}")
        write_order_files(landing, 2, 25, first_id=1 + day * 1000)
        source = orders_source(landing, boundary="interval")
        # Both wait between their ask and their commit until the other is there too, so the
        # commits really overlap.
        procs.append(
            run_child(
                spec_for(source, table, _interval_plan(source, table, day)),
                str(tmp_path),
                f"before_commit=meet:{tmp_path}/meet:2",
                f"day{day}",
            )
        )
    outs = [p.communicate(timeout=300)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-1500:] for o in outs)
    results = [json.load(open(tmp_path / f"day{d}-result.json")) for d in (0, 1)]
    assert [r["outcome"] for r in results] == ["committed", "committed"]
    # They did overlap: one of them lost the race to create the table and asked again.
    assert sum(lost_races(o) for o in outs) >= 1, "\n".join(o[-1500:] for o in outs)
    cmp = check(table, str(tmp_path / "landing"))
    assert cmp.exact and cmp.table_rows == 100, cmp.describe()


@pytest.mark.backfill
@pytest.mark.jdbc
def test_jdbc_timestamp_intervals_backfilled_backwards(spark: Any, postgres: Any, table: str) -> None:
    create_orders(postgres, "orders_days")
    insert_orders(postgres, "orders_days", range(1, 96))  # one row an hour over four days
    src = JdbcIncrementalSource(
        url=postgres.jdbc_url,
        table="orders_days",
        key_column="created_at",
        key_type="timestamp",
        boundary="interval",
    )
    ctx = ReadContext(spark_factory=lambda: spark, credentials=Credentials(postgres.user, postgres.password))
    base = datetime(2026, 11, 1, tzinfo=UTC)
    rows = []
    for day in (3, 1, 2, 0):
        start = base + timedelta(days=day)
        plan = src.plan(
            PlanLog(TableRef.parse(table), "tests.jdbc_days"),
            ctx,
            run_token=f"d{day}",
            is_committed=lambda k: False,
            interval=(start, start + timedelta(days=1)),
        )
        assert plan is not None
        result = run_load(
            spark,
            LoadSpec(table=TableRef.parse(table), plan=plan, source=src),
            credentials=ctx.credentials,
        )
        rows.append(result.rows)
    # created_at = base + id hours (+ id µs): day 0 holds ids 1..23, days 1-3 24 ids each.
    assert rows == [24, 24, 24, 23]
    cmp = check_against_postgres(postgres, "orders_days", table)
    assert cmp.exact and cmp.table_rows == 95, cmp.describe()
    got = sorted(pa.table(DeltaTable(table).to_pyarrow_table())["id"].to_pylist())
    assert got == list(range(1, 96))


@pytest.mark.faults
@pytest.mark.parametrize("point", ["before_write", "after_stage", "before_commit", "after_commit"])
def test_a_restatement_that_crashes_at_a_boundary_swaps_once(
    spark: Any, tmp_path: Any, table: str, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow_eod.core.faults import InjectedFault

    source, plan, landing = _loaded_then_corrected(spark, tmp_path, table, "tests.restate_crash", (1, 7), 800)
    log = PlanLog(TableRef.parse(table), "tests.restate_crash")

    def restated() -> Plan:
        return plan_restatement(
            log,
            plan,
            run_token="fix-run",
            committed_generation=ask(TableRef.parse(table), plan.key).committed_generation,
            replan=source.replan,
        )

    monkeypatch.setenv("EOD_FAULTPOINTS", f"{point}=raise@1")
    with pytest.raises(InjectedFault):
        run_load(spark, spec_for(source, table, restated(), restate=True, previous_generation=0))
    retry = run_load(spark, spec_for(source, table, restated(), try_number=2, restate=True))
    assert retry.generation == 1
    assert retry.outcome == ("already_committed" if point == "after_commit" else "committed")
    assert (
        ask(TableRef.parse(table), plan.key).committed_generation == 1
        and len(DeltaTable(table).history()) == 2
    )
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 7, cmp.describe()


@pytest.mark.faults
def test_two_attempts_racing_to_restate_commit_one_generation(tmp_path: Any, table: str, spark: Any) -> None:
    source, plan, landing = _loaded_then_corrected(spark, tmp_path, table, "tests.restate_race", (1, 9), 900)
    target = plan_restatement(
        PlanLog(TableRef.parse(table), "tests.restate_race"),
        plan,
        run_token="fix",
        committed_generation=0,
        replan=source.replan,
    )
    procs = [
        run_child(spec_for(source, table, target, restate=True, try_number=n), str(tmp_path), faults, f"r{n}")
        for n, faults in (
            (1, f"before_commit=meet:{tmp_path}/meet:2"),
            (2, f"before_commit=meet:{tmp_path}/meet:2"),
        )
    ]
    outs = [p.communicate(timeout=300)[0].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-1500:] for o in outs)
    results = [json.load(open(tmp_path / f"r{n}-result.json")) for n in (1, 2)]
    assert sorted(r["outcome"] for r in results) == ["already_committed", "committed"]
    # Both asked before either committed: the loser's restating commit lost and asked again.
    loser = [r["outcome"] for r in results].index("already_committed")
    assert lost_races(outs[loser]) >= 1, f"the loser did not lose a commit race: {outs[loser][-3000:]}"
    assert {r["generation"] for r in results} == {1} and len(DeltaTable(table).history()) == 2
    cmp = check(table, landing)
    assert cmp.exact and cmp.table_rows == 9, cmp.describe()
