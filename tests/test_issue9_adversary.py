"""Adversarial review of issue 9 (``airflow-eod verify`` and the chaos checker).

Each test reproduces one defect and asserts the behaviour the docs promise, so it fails
on the code as reviewed. Most need no Spark: tables are built the way tests/test_verify.py
builds them (staged with pyarrow, committed by the real commit engine). One needs Spark,
because the defect is in what the real write path produces.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from deltalake import DeltaTable
from deltalake.transaction import AddAction

from airflow_eod.cli import main
from airflow_eod.core import table_audit
from airflow_eod.core.commit import commit_batch
from airflow_eod.core.parquet_stats import file_stats
from airflow_eod.core.plan_log import PlanLog
from airflow_eod.core.table_audit import audit_table
from airflow_eod.core.table_layout import normalise
from tests.chaos.oracle import check_tables
from tests.chaos.world import World
from tests.helpers import orders_source, spec_for, stage_rows
from tests.test_chaos_checker import _table
from tests.test_verify import _load, _plan, _record, loaded  # noqa: F401  (fixture)

DAY = datetime(2026, 11, 1, tzinfo=UTC)


def _append(table: str, rel: str, stats: str | None) -> None:
    """Another writer's commit adding the existing Parquet file ``rel`` with ``stats``."""
    dt = DeltaTable(table)
    st = os.stat(os.path.join(table, rel))
    add = AddAction(rel, st.st_size, {}, int(st.st_mtime * 1000), True, stats)
    dt.create_write_transaction([add], mode="append", schema=dt.schema())


def _rows(table: str) -> int:
    return DeltaTable(table).to_pyarrow_table().num_rows


def _kinds(report: Any) -> set[str]:
    return {f.kind for f in report.findings}


# -- a. false negatives ---------------------------------------------------------------
def test_verify_flags_a_byte_identical_copy_of_a_batch_file_added_without_stats(
    table: str, loaded: dict[str, Any], capsys: Any
) -> None:
    """reference.md: duplicate_file_content is 'two or more live files with the same bytes'.
    A copy appended by a writer that writes no statistics (or other statistics) is the same
    bytes, but it is never hashed: only files whose stats (min/max) look alike are compared."""
    plan = loaded["21"]
    original = _record(table, plan)[1]["files"][0]
    shutil.copy(os.path.join(table, original), os.path.join(table, "restored.parquet"))
    _append(table, "restored.parquet", stats=None)
    assert _rows(table) == 2 + 5 + 5 + 3 + 5  # batch 21's five rows are visible twice
    report = audit_table(table)
    assert "duplicate_file_content" in _kinds(report), report.findings
    assert main(["verify", table]) == 1
    capsys.readouterr()


def test_verify_flags_a_replaced_generations_file_added_back_under_another_name(
    table: str, loaded: dict[str, Any], capsys: Any
) -> None:
    """After a restatement only the newest generation's rows may be visible (I1). The bytes of
    generation 0's file (its record lists it; it is on disk until VACUUM) added back under
    another name put the old rows back next to generation 1's: verify calls it a foreign
    file (a warning) and exits 0. Added back under its own name it is stale_generation_live."""
    plan = loaded["20.g1"]
    old = _record(table, plan, 0)[1]["files"][0]
    shutil.copy(os.path.join(table, old), os.path.join(table, "restored.parquet"))
    _append(table, "restored.parquet", stats=file_stats(os.path.join(table, old))[1])
    report = audit_table(table)
    assert not report.ok, report.findings
    assert main(["verify", table]) == 1
    capsys.readouterr()


def test_verify_does_not_let_one_unknown_batch_hide_rows_dropped_by_a_fake_optimize(
    table: str, capsys: Any
) -> None:
    """A commit that removes a batch's file with dataChange=false and adds nothing (an
    'OPTIMIZE' that drops data) takes the batch's rows away. Per batch, verify only warns
    (batch_file_compacted: 'the table-wide one still is' checked), and the table-wide count
    is skipped as soon as any other batch's rows are unknown (a record the committer never
    wrote, its commit gone with log cleanup: itself only a warning). Exit 0, rows lost."""
    cfg = {"delta.checkpointInterval": "1", "delta.logRetentionDuration": "interval 0 seconds"}
    plans = [_plan(table, day) for day in (20, 21, 22)]
    for i, plan in enumerate(plans):
        _load(table, plan, [i, i + 10], cfg=cfg)
    path, _ = _record(table, plans[0])
    os.rename(path, path + ".aside")  # the committer of the first batch died before its record
    victim = _record(table, plans[1])[1]["files"][0]
    version = DeltaTable(table).version() + 1
    with open(os.path.join(table, "_delta_log", f"{version:020d}.json"), "x") as fh:
        fh.write(json.dumps({"commitInfo": {"timestamp": 1, "operation": "OPTIMIZE"}}) + "\n")
        fh.write(json.dumps({"remove": {"path": victim, "dataChange": False, "deletionTimestamp": 1}}) + "\n")
    assert _rows(table) == 4  # batch 21's two rows are gone
    report = audit_table(table)
    assert not report.ok, report.findings
    assert main(["verify", table]) == 1
    capsys.readouterr()


def test_verify_notices_a_committed_batch_whose_rejects_never_reached_the_quarantine_table(
    table: str, tmp_path: Any, capsys: Any
) -> None:
    """quarantine.py: 'The quarantine table must always describe the same generation of a
    batch as the main table'. The main commit carries the outbox (2 malformed records); the
    delivery never happened (the task died after the main commit and was not retried).
    verify reads that manifest, yet says nothing: 0 findings, exit 0."""
    from airflow_eod.spark.quarantine import Outbox, with_outbox

    quarantine = str(tmp_path / "quarantine")
    plan = _plan(table, 20)
    staged, manifest = stage_rows(table, plan, 0, "good", [1, 2, 3])
    q_staged, _ = stage_rows(quarantine, plan, 0, "bad", [8, 9])
    manifest = with_outbox(manifest, Outbox(normalise(quarantine), False, q_staged))
    ours, status = commit_batch(table, plan.key, 0, staged, manifest)
    assert ours and status.committed
    report = audit_table(table)
    about = [f for f in report.findings if f.batch_key == plan.batch_key and "quarantine" in f.message]
    assert about, f"verify is silent about the undelivered rejects: {report.findings}"
    capsys.readouterr()


# -- b. false positives ---------------------------------------------------------------
@pytest.mark.spark
def test_verify_accepts_empty_interval_batches_loaded_by_the_real_write_path(
    spark: Any, tmp_path: Any, table: str, capsys: Any
) -> None:
    """Two days with no input (an empty directory, a header-only file) load as zero-row
    batches. Spark stages an empty, unpartitioned DataFrame as one zero-row Parquet file,
    and two such files are byte-identical: verify calls them duplicate_file_content
    ('0 rows each ... visible 2 times') and exits 1 on a healthy table."""
    from airflow_eod.spark.load_job import run_load

    for i, header in enumerate([False, True]):
        landing = str(tmp_path / f"day{i}")
        os.makedirs(landing)
        if header:
            with open(os.path.join(landing, "h.csv"), "w") as fh:
                fh.write("order_id,customer,amount,order_date,ordered_at\n")
        source = orders_source(landing, boundary="interval")
        plan = source.plan(
            PlanLog(table, "tests.orders"),
            None,
            run_token=f"run-{i}",
            is_committed=lambda k: False,
            interval=(DAY + timedelta(days=i), DAY + timedelta(days=i + 1)),
        )
        result = run_load(spark, spec_for(source, table, plan))
        assert result.outcome == "committed" and result.rows == 0
    report = audit_table(table)
    assert report.ok, [f.kind for f in report.errors]
    assert main(["verify", table]) == 0
    capsys.readouterr()


def test_verify_during_a_concurrent_load_reports_no_corrupt_record(
    table: str, loaded: dict[str, Any], monkeypatch: Any
) -> None:
    """verify reads the table at version N, then the plan log. A load that commits (and
    writes its record) in between is a healthy table, but its record names version N+1, so
    verify reports corrupt_record (an error, exit 1) for it. The concurrent load is modelled
    by committing a batch right after verify read the live files."""
    real = table_audit.read_live_files

    def read_while_a_load_commits(path: str, dt: DeltaTable) -> Any:
        out = real(path, dt)
        _load(table, _plan(table, 25), [7, 8])
        return out

    monkeypatch.setattr(table_audit, "read_live_files", read_while_a_load_commits)
    report = audit_table(table)
    assert report.ok, [(f.kind, f.message[:120]) for f in report.errors]


# -- c. crashes on odd input ----------------------------------------------------------
def test_verify_of_a_regular_file_exits_2_with_a_clear_error(tmp_path: Any, capsys: Any) -> None:
    """reference.md: exit 2 for 'no Delta table at TABLE'. A path that is a file raises
    NotADirectoryError out of main() (a traceback, exit 1 from the console script, which
    the runbook reads as 'the guarantee is broken')."""
    path = tmp_path / "orders.csv"
    path.write_text("a,b\n")
    assert main(["verify", str(path)]) == 2
    assert "not a Delta table" in capsys.readouterr().err


def test_verify_of_a_table_with_an_unparseable_commit_gives_a_clear_answer(
    tmp_path: Any, capsys: Any
) -> None:
    """A commit file that is not JSON (a torn copy, a disk error): verify raises deltalake's
    DeltaError out of main() (a Rust backtrace) instead of an exit code and a message that
    names the commit."""
    path = tmp_path / "broken"
    (path / "_delta_log").mkdir(parents=True)
    (path / "_delta_log" / f"{0:020d}.json").write_text("garbage\n")
    code = main(["verify", str(path)])
    assert code in (1, 2)
    assert f"{0:020d}.json" in capsys.readouterr().err


# -- d. the chaos checker -------------------------------------------------------------
def test_chaos_checker_finds_two_versions_of_a_path_with_fifteen_versions(tmp_path: Any) -> None:
    """oracle._check_paths searches only the last _MAX_UNITS (14) versions of a component and
    forgets the others: the first version's rows next to the last version's (two versions
    of one required path, a duplicate the checker reports for short histories) pass clean."""
    world = World(str(tmp_path / "landing"), random.Random(7))
    state = world.land(str(tmp_path / "landing" / "off"), 3)
    for _ in range(14):
        world.rewrite(state)
    while not state.versions[-1].rows:
        world.rewrite(state)
    assert len(state.versions) >= 15
    t = str(tmp_path / "t")
    _table(t, [*state.versions[0].rows, *state.versions[-1].rows])
    assert check_tables(world, t, None).duplicates
