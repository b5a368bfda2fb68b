"""Issue 6, case 9: the quarantine table describes the same generation of a batch as the
main table, after any attempt, however it ends.

The malformed records ride in the main commit as an outbox and are delivered to the
quarantine table after it; each test ends by comparing both tables with the source.
"""

from __future__ import annotations

import json
import os
import signal
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from airflow_eod.core.ask import ask
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import SchemaMismatchError, UnsupportedTableError
from airflow_eod.core.faults import JOB_POINTS, InjectedFault
from airflow_eod.core.planlog.restatement import plan_restatement
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.table_ref import TableRef
from airflow_eod.examples.compare import compare_rows, read_delta_rows, read_landing_rows
from airflow_eod.examples.sample_data import ORDERS_ARROW_SCHEMA, ORDERS_COLUMNS, write_order_files
from airflow_eod.sources.landing_files import LandingFilesSource
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import lost_races, orders_source, plan_for, run_child, spec_for

pytestmark = [pytest.mark.guarantee, pytest.mark.spark, pytest.mark.badinput]
DAY = datetime(2026, 11, 10, tzinfo=UTC)
CSV_HEADER = "order_id,customer,amount,order_date,ordered_at\n"
BAD_PREFIX = "z-bad"


def _bad_file(landing: str, name: str, ids: list[str]) -> None:
    """A CSV file whose records have a non-numeric order_id: malformed under the schema."""
    with open(os.path.join(landing, f"{BAD_PREFIX}-{name}.csv"), "w") as fh:
        fh.write(CSV_HEADER + "".join(f"{i},c,1.00,2026-11-01,2026-11-01T00:00:00Z\n" for i in ids))


def _rejects(quarantine: str) -> list[str]:
    """The first field of every raw record the quarantine table holds (sorted)."""
    if open_table(TableRef.parse(quarantine)) is None:
        return []
    rows = pa.table(DeltaTable(quarantine).to_pyarrow_table()).to_pylist()
    return sorted(r["raw_record"].split(",")[0] for r in rows)


def _version(table: str) -> int | None:
    t = open_table(TableRef.parse(table))
    return None if t is None else t.version()


def _generations(table: str, quarantine: str, plan: Plan) -> tuple[int | None, int | None]:
    return ask(TableRef.parse(table), plan.key).committed_generation, ask(
        TableRef.parse(quarantine), plan.key
    ).committed_generation


def _check_main(table: str, landing: str) -> None:
    """Every good source row exactly once in the main table (the bad files are skipped)."""
    good = str(os.path.join(os.path.dirname(landing), "good-only"))
    os.makedirs(good, exist_ok=True)
    for name in os.listdir(landing):
        if not name.startswith(BAD_PREFIX):
            os.link(os.path.join(landing, name), os.path.join(good, name))
    source_rows = read_landing_rows(good, "csv", ORDERS_COLUMNS, ORDERS_ARROW_SCHEMA)
    cmp = compare_rows(source_rows, read_delta_rows(table, ORDERS_COLUMNS))
    assert cmp.exact, cmp.describe()


def _attempt_dirs(quarantine: str, plan: Plan) -> list[str]:
    root = os.path.join(quarantine, "eod_data", plan.pipeline_id, plan.batch_key)
    return sorted(n.split("-")[0] for n in os.listdir(root)) if os.path.isdir(root) else []


def _interval_batch(
    spark: Any, tmp_path: Any, table: str, quarantine: str, pipeline: str, rejects: list[str]
) -> tuple[LandingFilesSource, Plan, str]:
    """One interval loaded as generation 0, its ``rejects`` in the quarantine table."""
    landing = str(tmp_path / "day")
    write_order_files(landing, 2, 10)
    if rejects:
        _bad_file(landing, "g0", rejects)
    source = orders_source(landing, boundary="interval")
    plan = source.plan(
        PlanLog(TableRef.parse(table), pipeline),
        None,
        run_token="run-0",
        is_committed=lambda k: False,
        interval=(DAY, DAY + timedelta(days=1)),
    )
    assert plan is not None
    first = run_load(spark, spec_for(source, table, plan, quarantine_table_uri=quarantine))
    assert first.outcome == "committed" and first.generation == 0 and first.rows == 20
    assert _rejects(quarantine) == sorted(rejects) and _generations(table, quarantine, plan) == (
        0,
        0 if rejects else None,
    )
    return source, plan, landing


def _correct(landing: str, rows: int, first_id: int, rejects: list[str]) -> None:
    """Replace the interval's files with corrected ones (and ``rejects``, if any)."""
    for name in os.listdir(landing):
        os.unlink(os.path.join(landing, name))
    write_order_files(landing, 1, rows, first_id=first_id)
    if rejects:
        _bad_file(landing, "g1", rejects)


def _restated(source: LandingFilesSource, table: str, plan: Plan, pipeline: str) -> Plan:
    return plan_restatement(
        PlanLog(TableRef.parse(table), pipeline),
        plan,
        run_token="fix-run",
        committed_generation=ask(TableRef.parse(table), plan.key).committed_generation,
        replan=source.replan,
    )


# -- (a) a restatement ------------------------------------------------------------------


def test_a_clean_restatement_removes_the_old_generations_rejects(
    spark: Any, tmp_path: Any, table: str
) -> None:
    quarantine = str(tmp_path / "quarantine")
    source, plan, landing = _interval_batch(spark, tmp_path, table, quarantine, "tests.q_clean", ["x1", "x2"])
    _correct(landing, 7, 800, [])
    restated = _restated(source, table, plan, "tests.q_clean")
    result = run_load(spark, spec_for(source, table, restated, restate=True, quarantine_table_uri=quarantine))
    assert result.outcome == "committed" and result.generation == 1 and result.rows == 7
    assert _rejects(quarantine) == [], "the rejects of generation 0 are rows that are now loaded"
    assert _generations(table, quarantine, plan) == (1, 1)
    assert _version(quarantine) == 1, "the old rejects go in one quarantine commit"
    _check_main(table, landing)


def test_a_restatement_with_new_rejects_replaces_the_old_ones(spark: Any, tmp_path: Any, table: str) -> None:
    quarantine = str(tmp_path / "quarantine")
    source, plan, landing = _interval_batch(spark, tmp_path, table, quarantine, "tests.q_new", ["x1", "x2"])
    _correct(landing, 5, 900, ["y1"])
    restated = _restated(source, table, plan, "tests.q_new")
    result = run_load(spark, spec_for(source, table, restated, restate=True, quarantine_table_uri=quarantine))
    assert result.outcome == "committed" and result.generation == 1 and result.rows == 5
    assert _rejects(quarantine) == ["y1"] and _generations(table, quarantine, plan) == (1, 1)
    _check_main(table, landing)


def test_a_clean_first_load_makes_no_quarantine_commit(spark: Any, tmp_path: Any, table: str) -> None:
    quarantine = str(tmp_path / "quarantine")
    source, plan, landing = _interval_batch(spark, tmp_path, table, quarantine, "tests.q_none", [])
    assert open_table(TableRef.parse(quarantine)) is None
    # A clean restatement of a batch that never had rejects has nothing to remove either.
    _correct(landing, 4, 700, [])
    restated = _restated(source, table, plan, "tests.q_none")
    run_load(spark, spec_for(source, table, restated, restate=True, quarantine_table_uri=quarantine))
    assert (
        open_table(TableRef.parse(quarantine)) is None
        and ask(TableRef.parse(table), plan.key).committed_generation == 1
    )
    _check_main(table, landing)


# -- (b) a refused main commit ----------------------------------------------------------


def _add_column(df: Any) -> Any:
    from pyspark.sql import functions as F

    return df.withColumn("channel", F.lit("web"))


@pytest.mark.parametrize("refusal", ["schema_mismatch", "unsupported_table"])
def test_a_refused_main_commit_leaves_the_quarantine_table_unchanged(
    spark: Any, landing: str, table: str, tmp_path: Any, refusal: str
) -> None:
    quarantine = str(tmp_path / "quarantine")
    write_order_files(landing, 1, 10)
    _bad_file(landing, "seed", ["s1"])
    source = orders_source(landing)
    seed = plan_for(source, table, run="seed")
    run_load(spark, spec_for(source, table, seed, quarantine_table_uri=quarantine))
    assert _rejects(quarantine) == ["s1"]
    if refusal == "unsupported_table":
        DeltaTable(table).alter.add_constraint({"positive_amount": "amount > 0"})
    main_version, q_version = _version(table), _version(quarantine)

    write_order_files(landing, 1, 10, first_id=500)
    _bad_file(landing, "next", ["n1", "n2"])
    plan = plan_for(source, table, run="next")
    spec = spec_for(source, table, plan, quarantine_table_uri=quarantine)
    if refusal == "schema_mismatch":
        with pytest.raises(SchemaMismatchError) as err:
            run_load(spark, spec, transform=_add_column)
        assert str(err.value).startswith(f"batch {plan.key.label}: schema does not match")
    else:
        with pytest.raises(UnsupportedTableError, match="CHECK constraints"):
            run_load(spark, spec)
    assert _version(table) == main_version and _version(quarantine) == q_version
    assert _rejects(quarantine) == ["s1"], "nothing of the refused batch reached the quarantine"
    assert _generations(table, quarantine, plan) == (None, None)


def test_a_refused_batch_that_is_fixed_lands_in_both_tables_once(
    spark: Any, landing: str, table: str, tmp_path: Any
) -> None:
    quarantine = str(tmp_path / "quarantine")
    write_order_files(landing, 1, 10)
    source = orders_source(landing)
    run_load(spark, spec_for(source, table, plan_for(source, table, run="seed")))
    _bad_file(landing, "b", ["b1"])
    write_order_files(landing, 1, 6, first_id=300)
    plan = plan_for(source, table, run="next")
    with pytest.raises(SchemaMismatchError):
        run_load(spark, spec_for(source, table, plan, quarantine_table_uri=quarantine), transform=_add_column)
    assert open_table(TableRef.parse(quarantine)) is None, (
        "no quarantine table was created for a refused batch"
    )
    result = run_load(spark, spec_for(source, table, plan, try_number=2, quarantine_table_uri=quarantine))
    assert result.outcome == "committed" and result.rows == 6
    assert _rejects(quarantine) == ["b1"] and _generations(table, quarantine, plan) == (0, 0)
    assert _attempt_dirs(quarantine, plan) == ["g0"], "the refused attempt's staged rejects are gone"
    _check_main(table, landing)


def test_a_quarantine_table_that_cannot_take_the_rejects_is_refused_before_the_main_commit(
    spark: Any, landing: str, table: str, tmp_path: Any
) -> None:
    quarantine = str(tmp_path / "quarantine")
    from deltalake import write_deltalake

    write_deltalake(quarantine, pa.table({"id": pa.array([1], pa.int64())}))
    write_order_files(landing, 1, 10)
    _bad_file(landing, "b", ["b1"])
    source = orders_source(landing)
    plan = plan_for(source, table)
    with pytest.raises(SchemaMismatchError, match=plan.key.label):
        run_load(spark, spec_for(source, table, plan, quarantine_table_uri=quarantine))
    assert _version(table) is None and _version(quarantine) == 0


def test_the_main_commit_carries_the_outbox(spark: Any, landing: str, table: str, tmp_path: Any) -> None:
    quarantine = str(tmp_path / "quarantine")
    write_order_files(landing, 1, 10)
    _bad_file(landing, "b", ["b1", "b2"])
    source = orders_source(landing)
    plan = plan_for(source, table)
    run_load(spark, spec_for(source, table, plan, quarantine_table_uri=quarantine))
    history = DeltaTable(table).history()
    assert len(history) == 1
    body = json.loads(history[0]["userMetadata"])["airflow_eod"]["extra"]["quarantine"]
    assert body["table_uri"] == quarantine and body["replace_previous"] is False
    assert sum(f["num_records"] for f in body["staged"]["files"]) == 2
    q_files = {a for a in pa.table(DeltaTable(quarantine).get_add_actions(flatten=True))["path"].to_pylist()}
    assert q_files == {f["path"] for f in body["staged"]["files"]}


# -- crashes and races ------------------------------------------------------------------


@pytest.mark.faults
@pytest.mark.parametrize("point", JOB_POINTS)
def test_a_restatement_that_crashes_at_a_boundary_keeps_both_tables_on_one_generation(
    spark: Any, tmp_path: Any, table: str, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    quarantine = str(tmp_path / "quarantine")
    pipeline = "tests.q_crash"
    source, plan, landing = _interval_batch(spark, tmp_path, table, quarantine, pipeline, ["x1", "x2"])
    _correct(landing, 8, 600, ["y1"])
    monkeypatch.setenv("EOD_FAULTPOINTS", f"{point}=raise@1")
    with pytest.raises(InjectedFault):
        run_load(
            spark,
            spec_for(
                source,
                table,
                _restated(source, table, plan, pipeline),
                restate=True,
                quarantine_table_uri=quarantine,
            ),
        )
    main_gen, q_gen = _generations(table, quarantine, plan)
    assert main_gen is not None and q_gen is not None and q_gen <= main_gen, (
        f"the quarantine table is never ahead of the main table (main {main_gen}, quarantine {q_gen})"
    )
    retry = run_load(
        spark,
        spec_for(
            source,
            table,
            _restated(source, table, plan, pipeline),
            try_number=2,
            restate=True,
            quarantine_table_uri=quarantine,
        ),
    )
    assert retry.generation == 1 and retry.rows == 8
    assert _generations(table, quarantine, plan) == (1, 1)
    assert _rejects(quarantine) == ["y1"], "each bad record of the new generation once"
    assert _attempt_dirs(quarantine, plan) == ["g0", "g1"]
    _check_main(table, landing)


@pytest.mark.faults
def test_a_crash_inside_the_delivery_is_healed_by_the_next_try(
    spark: Any, landing: str, table: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    quarantine = str(tmp_path / "quarantine")
    write_order_files(landing, 2, 10)
    _bad_file(landing, "b", ["b1", "b2"])
    source = orders_source(landing)
    plan = plan_for(source, table)
    # Try 1 dies after the main commit; try 2 dies inside the quarantine commit (the main
    # batch is already there, so its only commit is the delivery); try 3 delivers.
    monkeypatch.setenv("EOD_FAULTPOINTS", "after_commit=raise@1,before_commit=raise@2")
    for try_number in (1, 2):
        with pytest.raises(InjectedFault):
            run_load(
                spark,
                spec_for(source, table, plan, try_number=try_number, quarantine_table_uri=quarantine),
            )
        assert _generations(table, quarantine, plan) == (0, None)
    third = run_load(spark, spec_for(source, table, plan, try_number=3, quarantine_table_uri=quarantine))
    assert third.outcome == "already_committed" and third.rows == 20
    assert _generations(table, quarantine, plan) == (0, 0) and _rejects(quarantine) == ["b1", "b2"]
    assert _version(table) == 0 and _version(quarantine) == 0
    _check_main(table, landing)


@pytest.mark.faults
def test_a_process_killed_between_the_main_commit_and_the_delivery(
    spark: Any, tmp_path: Any, table: str
) -> None:
    quarantine = str(tmp_path / "quarantine")
    pipeline = "tests.q_kill"
    source, plan, landing = _interval_batch(spark, tmp_path, table, quarantine, pipeline, ["x1"])
    _correct(landing, 6, 400, [])
    restated = _restated(source, table, plan, pipeline)
    child = run_child(
        spec_for(source, table, restated, restate=True, quarantine_table_uri=quarantine),
        str(tmp_path),
        "after_commit=kill@1",
    )
    out, _ = child.communicate(timeout=300)
    assert child.returncode == -signal.SIGKILL, out.decode()[-2000:]
    assert _generations(table, quarantine, plan) == (1, 0) and _rejects(quarantine) == ["x1"]
    retry = run_load(
        spark,
        spec_for(source, table, restated, try_number=2, restate=True, quarantine_table_uri=quarantine),
    )
    assert retry.outcome == "already_committed" and retry.generation == 1
    assert _generations(table, quarantine, plan) == (1, 1) and _rejects(quarantine) == []
    _check_main(table, landing)


@pytest.mark.faults
def test_two_attempts_racing_commit_the_batch_and_its_rejects_once(
    landing: str, table: str, tmp_path: Any
) -> None:
    quarantine = str(tmp_path / "quarantine")
    write_order_files(landing, 3, 20)
    _bad_file(landing, "b", ["b1", "b2", "b3"])
    source = orders_source(landing)
    plan = plan_for(source, table)
    # Both racers wait between their ask and their commit, after staging their rejects, until
    # the other is there too, so both have asked "no" before either commits.
    a, b = (
        run_child(
            spec_for(source, table, plan, try_number=n, quarantine_table_uri=quarantine),
            str(tmp_path),
            f"before_commit=meet:{tmp_path}/meet:2",
            name,
        )
        for n, name in ((1, "a"), (2, "b"))
    )
    outs = [p.communicate(timeout=300)[0].decode() for p in (a, b)]
    assert a.returncode == 0 and b.returncode == 0, "\n".join(o[-1500:] for o in outs)
    results = [json.load(open(os.path.join(str(tmp_path), f"{n}-result.json"))) for n in "ab"]
    assert sorted(r["outcome"] for r in results) == ["already_committed", "committed"]
    loser = [r["outcome"] for r in results].index("already_committed")
    assert lost_races(outs[loser]) >= 1, f"the loser did not lose a commit race: {outs[loser][-3000:]}"
    assert len(DeltaTable(table).history()) == 1 and len(DeltaTable(quarantine).history()) == 1
    assert _rejects(quarantine) == ["b1", "b2", "b3"] and _generations(table, quarantine, plan) == (0, 0)
    assert _attempt_dirs(quarantine, plan) == ["g0"], "the loser's staged rejects are gone"
    _check_main(table, landing)
