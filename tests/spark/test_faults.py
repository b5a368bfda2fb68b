"""Crashes at every boundary of the write path, and racing attempts, with real Spark.

Each case ends with the checker comparing the table with the landing directory row by
row: every source row exactly once, nothing else.
"""

from __future__ import annotations

import json
import os
import signal
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from deltalake import DeltaTable

from airflow_eod.core.ask import ask
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import InputChangedError
from airflow_eod.core.faults import InjectedFault
from airflow_eod.core.planlog.store import PlanLog
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.sample_data import write_order_files
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import check, lost_races, orders_source, plan_for, run_child, spec_for

pytestmark = [pytest.mark.spark, pytest.mark.faults]


def _version(table: str) -> int | None:
    t = open_table(TableRef.parse(table))
    return None if t is None else t.version()


@pytest.mark.parametrize("point", ["after_stage", "before_commit", "after_commit"])
def test_sigkill_at_a_boundary_then_retry_loads_every_row_once(
    spark: Any, landing: str, table: str, tmp_path: Any, point: str
) -> None:
    write_order_files(landing, 3, 50)
    source = orders_source(landing)
    plan = plan_for(source, table)
    child = run_child(spec_for(source, table, plan, try_number=1), str(tmp_path), f"{point}=kill@1")
    out, _ = child.communicate(timeout=300)
    assert child.returncode == -signal.SIGKILL, out.decode()[-2000:]
    committed_by_child = ask(TableRef.parse(table), plan.key).committed
    assert committed_by_child == (point == "after_commit")
    version_before = _version(table)

    # The retry: same run, so the planner hands back the same frozen batch.
    retry_plan = plan_for(source, table)
    assert retry_plan == plan
    result = run_load(spark, spec_for(source, table, retry_plan, try_number=2))
    assert result.outcome == ("already_committed" if committed_by_child else "committed")
    if committed_by_child:
        assert _version(table) == version_before, "an already committed batch writes nothing"
    cmp = check(table, landing)
    assert cmp.exact, cmp.describe()
    assert cmp.table_rows == 150
    # Files of the attempt that never committed are gone once the batch is committed.
    batch_dir = os.path.join(table, "eod_data", plan.pipeline_id, plan.batch_key)
    assert len(os.listdir(batch_dir)) == 1


@pytest.mark.parametrize("point", ["before_write", "after_stage", "before_commit", "after_commit"])
def test_a_crash_raised_at_each_boundary_is_recovered_by_the_retry(
    spark: Any, landing: str, table: str, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_order_files(landing, 2, 40)
    source = orders_source(landing)
    plan = plan_for(source, table)
    monkeypatch.setenv("EOD_FAULTPOINTS", f"{point}=raise@1")
    with pytest.raises(InjectedFault):
        run_load(spark, spec_for(source, table, plan, try_number=1))
    result = run_load(spark, spec_for(source, table, plan_for(source, table), try_number=2))
    assert result.outcome == ("already_committed" if point == "after_commit" else "committed")
    assert len(DeltaTable(table).history()) == 1
    cmp = check(table, landing)
    assert cmp.exact, cmp.describe()


def test_two_processes_loading_the_same_batch_commit_once(landing: str, table: str, tmp_path: Any) -> None:
    write_order_files(landing, 4, 50)
    source = orders_source(landing)
    plan = plan_for(source, table)
    # Both racers wait between their ask and their commit until the other is there too (a
    # rendezvous, not a sleep longer than their JVMs' start-ups differ), so both have asked
    # "no" before either commits: the fencing, not the timing, must pick the winner.
    meet = f"before_commit=meet:{tmp_path}/meet:2"
    a = run_child(spec_for(source, table, plan, try_number=1), str(tmp_path), meet, "a")
    b = run_child(spec_for(source, table, plan, try_number=2), str(tmp_path), meet, "b")
    outs = [p.communicate(timeout=300)[0].decode() for p in (a, b)]
    assert a.returncode == 0 and b.returncode == 0, "\n".join(o[-1500:] for o in outs)
    results = [json.load(open(os.path.join(str(tmp_path), f"{n}-result.json"))) for n in "ab"]
    assert sorted(r["outcome"] for r in results) == ["already_committed", "committed"]
    # The race happened: the loser's commit lost and it asked again (it did not merely find
    # the batch committed at its first ask).
    loser = [r["outcome"] for r in results].index("already_committed")
    assert lost_races(outs[loser]) >= 1 and lost_races(outs[1 - loser]) == 0, outs[loser][-3000:]
    assert len({r["table_version"] for r in results}) == 1
    assert len(DeltaTable(table).history()) == 1
    cmp = check(table, landing)
    assert cmp.exact, cmp.describe()


def test_intervals_committed_out_of_order_are_all_visible(spark: Any, tmp_path: Any, table: str) -> None:
    day = datetime(2026, 11, 18, tzinfo=UTC)
    first_id = 1
    dirs = []
    for i in range(3):
        d = str(tmp_path / f"landing/{i}")
        write_order_files(d, 1, 20, first_id=first_id)
        first_id += 20
        dirs.append(d)
    # Load the latest interval first, then the earliest, then the middle one.
    for i in (2, 0, 1):
        source = orders_source(dirs[i], boundary="interval")
        start = day + timedelta(days=i)
        plan = source.plan(
            PlanLog(TableRef.parse(table), "tests.intervals"),
            run_token=f"r{i}",
            is_committed=lambda k: ask(TableRef.parse(table), k).committed,
            interval=(start, start + timedelta(days=1)),
        )
        assert plan is not None
        assert run_load(spark, spec_for(source, table, plan)).outcome == "committed"
    cmp = check(table, str(tmp_path / "landing"))
    assert cmp.exact and cmp.table_rows == 60, cmp.describe()


def test_a_landing_file_modified_after_planning_fails_and_commits_nothing(
    spark: Any, landing: str, table: str
) -> None:
    write_order_files(landing, 2, 10)
    source = orders_source(landing)
    first = plan_for(source, table, run="r0")
    run_load(spark, spec_for(source, table, first))
    write_order_files(landing, 2, 10, first_id=1000)
    plan = plan_for(source, table, run="r1")
    victim = plan.inputs[0]["path"]
    with open(victim, "a") as fh:
        fh.write("9999,late,1.00,2026-11-21,2026-11-21T00:00:00Z\n")
    version = _version(table)
    with pytest.raises(InputChangedError) as err:
        run_load(spark, spec_for(source, table, plan))
    assert plan.key.label in str(err.value) and os.path.basename(victim) in str(err.value)
    assert _version(table) == version and not ask(TableRef.parse(table), plan.key).committed
