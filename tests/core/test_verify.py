"""``airflow-eod verify``: the audit of a table that does not trust its writer.

Real Delta tables, no Spark: batches are staged with pyarrow the way Spark stages them
(:func:`tests.support.helpers.stage_rows`) and committed by the real commit engine; then the tables
are damaged on purpose, the way a foreign writer, a person or a bug would, and each damage
must come back as its own finding kind, naming the batch.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from deltalake.transaction import AddAction

from airflow_eod.cli import main
from airflow_eod.core.audit import verify as table_audit
from airflow_eod.core.audit.verify import AuditReport, Finding, audit_table
from airflow_eod.core.batch import fingerprint
from airflow_eod.core.delta.parquet_stats import file_stats
from airflow_eod.core.errors import UnsupportedTableError
from airflow_eod.core.load_commit import commit_batch
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.records.record_files import RecordStore
from airflow_eod.core.table_ref import TableRef
from tests.support.helpers import land_and_plan, orders_source, spec_for, stage_rows

PIPE = "tests.verify"
FILES = "tests.verify.files"
DAY_CFG = {"delta.setTransactionRetentionDuration": "interval 1 days"}


def _plan(table: str, day: int, *, planned_at: str = "", generation: int = 0) -> Plan:
    key = f"i-202611{day:02d}T000000Z-202611{day + 1:02d}T000000Z"
    plan = Plan(PIPE, key, "interval", {"day": day}, [], planned_at=planned_at, generation=generation)
    return PlanLog(TableRef.parse(table), PIPE).put_plan(plan)


def _load(table: str, plan: Plan, rows: list[int], *, cfg: dict[str, str] | None = None) -> None:
    gen = plan.generation
    staged = stage_rows(table, plan, gen, f"{plan.batch_key}/g{gen}", rows)
    ours, status = commit_batch(
        TableRef.parse(table), plan.key, gen, *staged, table_configuration=cfg, replace_previous=gen > 0
    )
    assert ours and status.committed_generation == gen


def _record(table: str, plan: Plan, generation: int | None = None) -> tuple[str, dict[str, Any]]:
    """The path and body of the batch's commit record (newest, or at ``generation``)."""
    log = RecordStore(plan_log=PlanLog(TableRef.parse(table), plan.pipeline_id))
    table_id = str(DeltaTable(table).metadata().id)
    body = (
        log.newest_commit_record(plan.batch_key, table_id)
        if generation is None
        else log.commit_record(plan.batch_key, generation, table_id)
    )
    assert body is not None
    return log.commit_record_path(plan.batch_key, body["generation"], table_id), body


def _rewrite_record(path: str, change: Any) -> None:
    """Edit a record and give it a valid checksum, as a careless hand (or a bug) would."""
    with open(path) as fh:
        body = json.load(fh)
    body.pop("checksum")
    change(body)
    body["checksum"] = fingerprint(body)
    os.chmod(path, 0o644)
    with open(path, "w") as fh:
        json.dump(body, fh)


def _append_files(table: str, paths: list[str]) -> None:
    """Another writer's commit that adds existing Parquet files (dataChange=true)."""
    dt = DeltaTable(table)
    adds = []
    for rel in paths:
        full = os.path.join(table, rel)
        _, stats = file_stats(full)
        st = os.stat(full)
        adds.append(AddAction(rel, st.st_size, {}, int(st.st_mtime * 1000), True, stats))
    dt.create_write_transaction(adds, mode="append", schema=dt.schema())


def _kinds(report: AuditReport) -> dict[str, list[Finding]]:
    out: dict[str, list[Finding]] = {}
    for f in report.findings:
        out.setdefault(f.kind, []).append(f)
    return out


def _only(report: AuditReport, kind: str) -> Finding:
    found = _kinds(report).get(kind, [])
    assert len(found) == 1, f"expected one {kind}, got {report.findings}"
    return found[0]


@pytest.fixture
def loaded(table: str, tmp_path: Any) -> dict[str, Plan]:
    """Three interval batches (the first restated to generation 1) and one offset batch."""
    plans = {str(day): _plan(table, day) for day in (20, 21, 22)}
    for i, plan in enumerate(plans.values()):
        _load(table, plan, list(range(i * 10, i * 10 + 5)))
    plans["20.g1"] = _plan(table, 20, generation=1)
    _load(table, plans["20.g1"], [100, 101])
    plans["o"] = land_and_plan(table, str(tmp_path / "landing"), FILES, 0)
    commit_batch(
        TableRef.parse(table), plans["o"].key, 0, *stage_rows(table, plans["o"], 0, "files", [500, 501, 502])
    )
    return plans


def test_a_clean_table_with_a_restatement_verifies(table: str, loaded: dict[str, Plan], capsys: Any) -> None:
    report = audit_table(table)
    assert report.ok and report.findings == []
    got = {(b.pipeline_id, b.batch_key[:11]): b for b in report.batches}
    assert len(got) == 4
    restated = got[(PIPE, "i-20261120T")]
    assert (restated.generation, restated.recorded_rows, restated.live_rows, restated.live_files) == (
        1,
        2,
        2,
        1,
    )
    assert got[(FILES, "o-00000000-")].recorded_rows == 3
    assert main(["verify", table]) == 0
    assert "verify: 4 batches, 0 errors, 0 warnings" in capsys.readouterr().out


def test_an_optimize_by_another_writer_is_a_warning_not_an_error(
    table: str, loaded: dict[str, Plan], capsys: Any
) -> None:
    # Another writer's rows too, so the compaction folds foreign rows and batch rows together.
    write_deltalake(table, pa.table({"seq": pa.array([900], pa.int64()), "src": ["other"]}), mode="append")
    DeltaTable(table).optimize.compact()
    report = audit_table(table)
    assert report.ok, report.errors
    kinds = _kinds(report)
    assert set(kinds) == {"compacted_file", "batch_file_compacted"}
    assert {f.batch_key for f in kinds["batch_file_compacted"]} == {p.batch_key for p in loaded.values()}
    assert main(["verify", table]) == 0
    assert main(["verify", table, "--strict"]) == 1
    assert "verify: 4 batches, 0 errors, 5 warnings" in capsys.readouterr().out


def test_a_copy_of_a_batch_file_appended_by_another_writer_is_a_duplicate(
    table: str, loaded: dict[str, Plan], capsys: Any
) -> None:
    plan = loaded["21"]
    original = _record(table, plan)[1]["files"][0]
    shutil.copy(os.path.join(table, original), os.path.join(table, "copy-of-21.parquet"))
    _append_files(table, ["copy-of-21.parquet"])
    report = audit_table(table)
    dup = _only(report, "duplicate_file_content")
    assert dup.severity == "error" and dup.batch_key == plan.batch_key
    assert dup.paths == sorted([original, "copy-of-21.parquet"])
    assert plan.batch_key in dup.message and "5 rows each" in dup.message
    assert _only(report, "foreign_file").paths == ["copy-of-21.parquet"]
    assert main(["verify", table]) == 1
    assert "[duplicate_file_content]" in capsys.readouterr().out


def test_a_zombie_file_in_the_batch_directory_is_outside_the_batch(
    table: str, loaded: dict[str, Plan]
) -> None:
    plan = loaded["22"]
    original = _record(table, plan)[1]["files"][0]
    zombie = f"eod_data/{PIPE}/{plan.batch_key}/g0-zombie/part-0.parquet"
    os.makedirs(os.path.dirname(os.path.join(table, zombie)))
    shutil.copy(os.path.join(table, original), os.path.join(table, zombie))
    _append_files(table, [zombie])
    report = audit_table(table)
    outside = _only(report, "file_outside_batch")
    assert (outside.severity, outside.batch_key, outside.paths) == ("error", plan.batch_key, [zombie])
    assert _only(report, "duplicate_file_content").paths == sorted([original, zombie])
    total = _only(report, "row_total_mismatch")
    assert "5 rows more than accounted for" in total.message


def test_an_older_generation_added_back_is_stale(table: str, loaded: dict[str, Plan]) -> None:
    plan = loaded["20.g1"]
    old = _record(table, plan, 0)[1]["files"][0]
    assert "/g0-" in old
    _append_files(table, [old])
    report = audit_table(table)
    stale = _only(report, "stale_generation_live")
    assert (stale.severity, stale.batch_key, stale.paths) == ("error", plan.batch_key, [old])
    assert "generation 1" in stale.message
    assert "5 rows more" in _only(report, "row_total_mismatch").message
    assert not report.ok


def test_a_live_file_deleted_from_disk_is_missing(table: str, loaded: dict[str, Plan], capsys: Any) -> None:
    plan = loaded["21"]
    gone = _record(table, plan)[1]["files"][0]
    os.remove(os.path.join(table, gone))
    report = audit_table(table)
    missing = _only(report, "missing_data_file")
    assert (missing.severity, missing.batch_key, missing.paths) == ("error", plan.batch_key, [gone])
    assert "every read of the table fails" in missing.message
    assert main(["verify", table]) == 1
    capsys.readouterr()


def test_a_record_with_a_wrong_row_count(table: str, loaded: dict[str, Plan]) -> None:
    plan = loaded["22"]
    path, _ = _record(table, plan)
    _rewrite_record(path, lambda body: body["manifest"].update(rows=7))
    report = audit_table(table)
    wrong = _only(report, "row_count_mismatch")
    assert (wrong.severity, wrong.batch_key) == ("error", plan.batch_key)
    assert "says 7 rows" in wrong.message and "hold 5" in wrong.message
    assert "2 rows fewer" in _only(report, "row_total_mismatch").message


def test_a_batch_file_removed_by_another_writer_is_not_live(table: str, loaded: dict[str, Plan]) -> None:
    plan = loaded["21"]
    DeltaTable(table).delete("seq = 11")  # rewrites the batch's file without it, dataChange=true
    report = audit_table(table)
    lost = _only(report, "batch_file_not_live")
    assert (lost.severity, lost.batch_key, lost.paths) == (
        "error",
        plan.batch_key,
        _record(table, plan)[1]["files"],
    )
    assert "(DELETE)" in lost.message
    assert _only(report, "foreign_file")  # the DELETE's rewritten file
    assert "1 rows fewer" in _only(report, "row_total_mismatch").message  # the row the DELETE took


def test_a_record_that_names_another_commit(table: str, loaded: dict[str, Plan]) -> None:
    plan = loaded["22"]
    path, body = _record(table, plan)
    _rewrite_record(path, lambda b: b.update(table_version=body["table_version"] - 1))
    finding = _only(audit_table(table), "record_without_marker_commit")
    assert (finding.severity, finding.batch_key, finding.paths) == (
        "error",
        plan.batch_key,
        [os.path.relpath(path, table)],
    )
    assert "no marker of the batch" in finding.message


def test_a_record_newer_than_the_marker_is_corrupt(table: str, loaded: dict[str, Plan]) -> None:
    plan = loaded["21"]
    body = _record(table, plan)[1]
    # A record of generation 1 the table never committed (the marker stays at 0).
    fake = dict(body, generation=1)
    fake["manifest"] = dict(body["manifest"], generation=1)
    fake.pop("checksum", None)
    RecordStore(plan_log=PlanLog(TableRef.parse(table), PIPE)).put_commit_record(
        plan.batch_key, 1, body["table_id"], fake
    )
    report = audit_table(table)
    corrupt = [f for f in _kinds(report)["corrupt_record"] if f.batch_key == plan.batch_key]
    assert corrupt and "marker is at generation 0" in corrupt[0].message and not report.ok


def test_a_marker_without_its_record_warns_then_errs_near_expiry(table: str) -> None:
    plans = [_plan(table, day) for day in (20, 21)]
    for i, plan in enumerate(plans):
        _load(table, plan, [i], cfg=DAY_CFG)
    path, _ = _record(table, plans[1])
    os.rename(path, path + ".aside")  # the committer died between its commit and its record
    report = audit_table(table)
    missing = _only(report, "record_missing")
    assert (missing.severity, missing.batch_key, report.ok) == ("warning", plans[1].batch_key, True)
    assert report.batches[1].recorded_rows == 1  # read from the commit still in the log

    later = datetime.now(UTC) + timedelta(hours=22)  # 0.8 of the 1-day window has passed
    report = audit_table(table, now=later)
    unrecorded = _only(report, "marker_without_record")
    assert (unrecorded.severity, unrecorded.batch_key) == ("error", plans[1].batch_key)
    near = _only(report, "marker_near_expiry")
    assert (near.severity, near.batch_key) == ("warning", plans[0].batch_key)
    assert "record_missing" not in _kinds(report)
    assert audit_table(table, now=later, expiry_warning=0.95).ok


def test_plans_stuck_and_near_the_end_of_the_window(table: str, capsys: Any) -> None:
    _load(table, _plan(table, 20), [1], cfg=DAY_CFG)
    now = datetime.now(UTC)
    stuck = _plan(table, 21, planned_at=(now - timedelta(hours=30)).isoformat())
    young = _plan(table, 22, planned_at=(now - timedelta(hours=20)).isoformat())
    report = audit_table(table, now=now)
    finding = _only(report, "stuck_plan")  # the 20-hour-old plan is not stuck yet
    assert (finding.severity, finding.batch_key) == ("warning", stuck.batch_key)
    assert "A batch is stuck" in finding.message and "30.0 hours" in finding.message
    near = {f.batch_key: f for f in _kinds(report)["plan_near_expiry"]}
    assert set(near) == {stuck.batch_key, young.batch_key}
    assert "is refused with RetentionWindowError" in near[stuck.batch_key].message
    assert "will be refused with RetentionWindowError" in near[young.batch_key].message
    assert report.ok
    assert "stuck_plan" not in _kinds(audit_table(table, stuck_after=timedelta(days=2)))
    later = _kinds(audit_table(table, now=now, expiry_warning=0.9))["plan_near_expiry"]
    assert [f.batch_key for f in later] == [stuck.batch_key]  # 20 hours is under 0.9 of a day
    assert main(["verify", table]) == 0
    assert main(["verify", table, "--strict"]) == 1
    capsys.readouterr()
    assert main(["verify", table, "--stuck-after", "36h", "--expiry-warning", "0.9"]) == 0
    out = capsys.readouterr().out
    assert "[stuck_plan]" not in out and out.count("[plan_near_expiry]") == 1


def test_a_corrupt_plan_entry_is_an_error(table: str, loaded: dict[str, Plan]) -> None:
    path = os.path.join(table, "_eod", "pipelines", PIPE, "intervals", f"{loaded['21'].batch_key}.json")
    with open(path) as fh:
        text = fh.read()
    os.chmod(path, 0o644)
    with open(path, "w") as fh:
        fh.write(text.replace('"day": 21', '"day": 99'))
    finding = _only(audit_table(table), "corrupt_plan_log_entry")
    assert finding.severity == "error" and finding.paths == [os.path.relpath(path, table)]


def test_verify_json_and_exit_codes(table: str, loaded: dict[str, Plan], tmp_path: Any, capsys: Any) -> None:
    os.remove(os.path.join(table, _record(table, loaded["22"])[1]["files"][0]))
    assert main(["verify", table, "--json"]) == 1
    body = json.loads(capsys.readouterr().out)
    assert body["ok"] is False and body["table_version"] == DeltaTable(table).version()
    assert [f["kind"] for f in body["findings"]] == ["missing_data_file"]
    assert {b["batch_key"] for b in body["batches"]} == {p.batch_key for p in loaded.values()}

    nowhere = str(tmp_path / "nowhere")
    assert main(["verify", nowhere]) == 2
    assert "there is no Delta table" in capsys.readouterr().err
    with pytest.raises(UnsupportedTableError):
        audit_table(nowhere)
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("x")
    assert main(["verify", str(junk)]) == 2
    for bad in (["--stuck-after", "soon"], ["--expiry-warning", "1.5"]):
        with pytest.raises(SystemExit) as exit_:
            main(["verify", table, *bad])
        assert exit_.value.code == 2


def test_status_and_check_still_work(table: str, loaded: dict[str, Plan], capsys: Any) -> None:
    assert main(["status", table]) == 0
    assert "pipeline tests.verify: 3 committed" in capsys.readouterr().out
    assert main(["ask", table, "--pipeline", PIPE, "--batch", loaded["20.g1"].batch_key]) == 0
    assert json.loads(capsys.readouterr().out)["generation"] == 1


def test_restating_generations_are_kept_apart(table: str) -> None:
    """A restatement plan that is not committed yet is stuck, not a second copy."""
    plan = _plan(table, 20)
    _load(table, plan, [1, 2])
    planned = (datetime.now(UTC) - timedelta(days=3)).isoformat()
    PlanLog(TableRef.parse(table), PIPE).put_plan(dataclasses.replace(plan, generation=1, planned_at=planned))
    report = audit_table(table)
    assert _only(report, "stuck_plan").message.count("generation 1") == 1
    assert report.ok and report.batches[0].generation == 0


def test_a_file_listed_by_two_records(table: str, loaded: dict[str, Plan]) -> None:
    theirs = _record(table, loaded["21"])[1]["files"][0]
    path, _ = _record(table, loaded["22"])
    _rewrite_record(path, lambda body: body["files"].append(theirs))
    report = audit_table(table)
    both = _only(report, "file_in_two_batches")
    assert both.severity == "error" and both.paths == [theirs]
    assert loaded["21"].batch_key in both.message and loaded["22"].batch_key in both.message


def test_a_batch_known_only_by_its_marker_is_counted_by_its_directory(table: str) -> None:
    """Checkpoints and log cleanup took the commit; the record was never written."""
    cfg = {"delta.checkpointInterval": "1", "delta.logRetentionDuration": "interval 0 seconds"}
    plans = [_plan(table, day) for day in (20, 21, 22)]
    for i, plan in enumerate(plans):
        _load(table, plan, [i, i + 10], cfg=cfg)
    assert not os.path.exists(os.path.join(table, "_delta_log", f"{0:020d}.json"))
    assert audit_table(table).findings == []  # markers from the checkpoint, records judge the rest
    path, body = _record(table, plans[0])
    os.rename(path, path + ".aside")
    report = audit_table(table)
    assert _only(report, "record_missing").batch_key == plans[0].batch_key
    assert plans[0].batch_key in _only(report, "rows_unknown").message
    first = report.batches[0]
    assert (first.batch_key, first.recorded_rows, first.live_rows, first.live_files) == (
        plans[0].batch_key,
        None,
        2,
        len(body["files"]),
    )
    assert report.ok


def _forget_the_log(table: str) -> None:
    """A checkpoint, then a log cleanup that takes every commit before it (as Delta does once
    ``delta.logRetentionDuration`` has passed), so the commits that removed files are gone."""
    dt = DeltaTable(table)
    dt.alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
    dt = DeltaTable(table)
    dt.create_checkpoint()
    dt.cleanup_metadata()
    assert not os.path.exists(os.path.join(table, "_delta_log", f"{0:020d}.json"))


def test_an_optimize_whose_commit_left_the_log_is_a_warning_not_an_error(
    table: str, loaded: dict[str, Plan]
) -> None:
    """Found by the chaos harness (benchmarks.chaos --seed 1): OPTIMIZE, then a log cleanup,
    reported every compacted batch as having lost rows, on a table the row-by-row check passed."""
    DeltaTable(table).optimize.compact()
    _forget_the_log(table)
    report = audit_table(table)
    assert report.ok, report.errors
    unseen = _kinds(report)["batch_file_removed_unseen"]
    assert {f.batch_key for f in unseen} == {p.batch_key for p in loaded.values()}
    assert all(f.severity == "warning" for f in unseen)


def test_a_delete_whose_commit_left_the_log_still_counts_the_rows_it_took(
    table: str, loaded: dict[str, Plan]
) -> None:
    DeltaTable(table).delete("seq = 11")
    _forget_the_log(table)
    report = audit_table(table)
    assert _only(report, "batch_file_removed_unseen").batch_key == loaded["21"].batch_key
    total = _only(report, "row_total_mismatch")
    assert total.severity == "error" and "1 rows fewer" in total.message


def test_a_batch_deleted_whole_then_the_log_cleaned_is_an_error(table: str, loaded: dict[str, Plan]) -> None:
    """Every row of a batch deleted (its file removed, nothing rewritten), then a log cleanup:
    no file of unknown origin can hold its rows, so they are counted as gone."""
    DeltaTable(table).delete("seq >= 20 AND seq < 25")
    _forget_the_log(table)
    report = audit_table(table)
    assert _only(report, "batch_file_removed_unseen").batch_key == loaded["22"].batch_key
    assert "5 rows fewer" in _only(report, "row_total_mismatch").message
    assert not report.ok


# -- found by an adversarial review of verify (issue 9) ------------------------------------
DAY = datetime(2026, 11, 1, tzinfo=UTC)


def _append(table: str, rel: str, stats: str | None) -> None:
    """Another writer's commit adding the existing Parquet file ``rel`` with ``stats``."""
    dt = DeltaTable(table)
    st = os.stat(os.path.join(table, rel))
    add = AddAction(rel, st.st_size, {}, int(st.st_mtime * 1000), True, stats)
    dt.create_write_transaction([add], mode="append", schema=dt.schema())


def _rows(table: str) -> int:
    return DeltaTable(table).to_pyarrow_table().num_rows


def _kind_set(report: AuditReport) -> set[str]:
    return {f.kind for f in report.findings}


def test_verify_flags_a_byte_identical_copy_of_a_batch_file_added_without_stats(
    table: str, loaded: dict[str, Any], capsys: Any
) -> None:
    """A copy appended with no statistics holds the same bytes; copies are found by size and
    bytes, not by statistics (it used to pass as a foreign file)."""
    plan = loaded["21"]
    original = _record(table, plan)[1]["files"][0]
    shutil.copy(os.path.join(table, original), os.path.join(table, "restored.parquet"))
    _append(table, "restored.parquet", stats=None)
    assert _rows(table) == 2 + 5 + 5 + 3 + 5  # batch 21's five rows are visible twice
    report = audit_table(table)
    assert "duplicate_file_content" in _kind_set(report), report.findings
    assert main(["verify", table]) == 1
    capsys.readouterr()


def test_verify_flags_a_replaced_generations_file_added_back_under_another_name(
    table: str, loaded: dict[str, Any], capsys: Any
) -> None:
    """After a restatement only the newest generation's rows may be visible (I1). Generation
    0's file (on disk until VACUUM) added back under another name puts the old rows back
    beside generation 1's (it used to pass as a foreign file, exit 0)."""
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
    """A dataChange=false commit that removes a batch's file and adds nothing dropped its rows;
    a batch of unknown count elsewhere must not turn the table-wide count off (it used to:
    warnings only, exit 0, rows lost)."""
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


def _commit_with_an_undelivered_outbox(table: str, quarantine: str) -> Plan:
    """A batch committed with 2 malformed records in its outbox, never delivered."""
    from airflow_eod.core.quarantine_outbox import Outbox, with_outbox

    plan = _plan(table, 20)
    staged, manifest = stage_rows(table, plan, 0, "good", [1, 2, 3])
    q_staged, _ = stage_rows(quarantine, plan, 0, "bad", [8, 9])
    manifest = with_outbox(manifest, Outbox(TableRef.parse(quarantine).location, False, q_staged))
    ours, status = commit_batch(TableRef.parse(table), plan.key, 0, staged, manifest)
    assert ours and status.committed
    return plan


def test_verify_notices_a_committed_batch_whose_rejects_never_reached_the_quarantine_table(
    table: str, tmp_path: Any, capsys: Any
) -> None:
    """The main commit carries an outbox of 2 malformed records that was never delivered (the
    task died after the main commit and was not retried): the tables are out of step."""
    plan = _commit_with_an_undelivered_outbox(table, str(tmp_path / "quarantine"))
    report = audit_table(table)
    about = [f for f in report.findings if f.batch_key == plan.batch_key and "quarantine" in f.message]
    assert about, f"verify is silent about the undelivered rejects: {report.findings}"
    capsys.readouterr()


@pytest.mark.spark
def test_verify_accepts_empty_interval_batches_loaded_by_the_real_write_path(
    spark: Any, tmp_path: Any, table: str, capsys: Any
) -> None:
    """Days with no input load as zero-row batches whose staged files are byte-identical; they
    are not copies of each other (they used to be duplicate_file_content, exit 1)."""
    from airflow_eod.spark.load_job import run_load

    for i, header in enumerate([False, True]):
        landing = str(tmp_path / f"day{i}")
        os.makedirs(landing)
        if header:
            with open(os.path.join(landing, "h.csv"), "w") as fh:
                fh.write("order_id,customer,amount,order_date,ordered_at\n")
        source = orders_source(landing, boundary="interval")
        plan = source.plan(
            PlanLog(TableRef.parse(table), "tests.orders"),
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
    """A load that commits (and writes its record) after verify read its snapshot is not a
    corrupt record (it used to be one). The load is run right after the live files are read."""
    real = table_audit.read_live_files

    def read_while_a_load_commits(path: str, dt: DeltaTable) -> Any:
        out = real(path, dt)
        _load(table, _plan(table, 25), [7, 8])
        return out

    monkeypatch.setattr(table_audit, "read_live_files", read_while_a_load_commits)
    report = audit_table(table)
    assert report.ok, [(f.kind, f.message[:120]) for f in report.errors]


def test_verify_of_a_regular_file_exits_2_with_a_clear_error(tmp_path: Any, capsys: Any) -> None:
    """A path that is a file: exit 2 and a message (it used to raise NotADirectoryError)."""
    path = tmp_path / "orders.csv"
    path.write_text("a,b\n")
    assert main(["verify", str(path)]) == 2
    assert "not a Delta table" in capsys.readouterr().err


def test_verify_of_a_table_with_an_unparseable_commit_gives_a_clear_answer(
    tmp_path: Any, capsys: Any
) -> None:
    """A commit file that is not JSON (a torn copy, a disk error): an exit code and a message
    naming the commit (it used to be deltalake's Rust backtrace)."""
    path = tmp_path / "broken"
    (path / "_delta_log").mkdir(parents=True)
    (path / "_delta_log" / f"{0:020d}.json").write_text("garbage\n")
    code = main(["verify", str(path)])
    assert code in (1, 2)
    assert f"{0:020d}.json" in capsys.readouterr().err


def test_every_finding_kind_is_documented_and_its_runbook_section_exists() -> None:
    docs = os.path.join(os.path.dirname(__file__), "..", "..", "docs")
    with open(os.path.join(docs, "reference.md")) as fh:
        reference = fh.read()
    with open(os.path.join(docs, "runbook.md")) as fh:
        headings = [line for line in fh if line.startswith("## ")]
    assert [k for k in table_audit.SAYS if f"| `{k}` |" not in reference] == []
    for kind, section in table_audit._SECTION.items():
        assert any(section in h for h in headings), f"{kind}: no runbook section {section!r}"
    assert any("`airflow-eod verify` reports ..." in h for h in headings)


def test_identical_files_of_two_committed_batches_are_not_copies(table: str) -> None:
    """Found by the chaos harness (benchmarks.chaos --seed 3 and 5): a landing file moved to
    a new name is new input, loaded as a batch of its own with the same rows; each file is
    listed by its own batch's record, so neither is a copy (it used to be an error)."""
    plans = [_plan(table, day) for day in (20, 21)]
    for plan in plans:
        ours, _ = commit_batch(
            TableRef.parse(table), plan.key, 0, *stage_rows(table, plan, 0, "same", [7, 8, 9])
        )
        assert ours
    files = [os.path.join(table, _record(table, p)[1]["files"][0]) for p in plans]
    with open(files[0], "rb") as a, open(files[1], "rb") as b:
        assert a.read() == b.read(), "the premise: the two batches' files hold the same bytes"
    report = audit_table(table)
    assert report.findings == [], report.findings


# -- found by a second adversarial review (verify's fixes, the retry classes) -------------
def _errors(report: Any) -> list[tuple[str, str]]:
    return [(f.kind, f.message[:160]) for f in report.errors]


# -- 1. false negatives ------------------------------------------------------------------
def test_a_copy_added_with_forged_zero_row_stats_is_a_duplicate(
    table: str, loaded: dict[str, Plan], capsys: Any
) -> None:
    """Copies are found "by size and bytes, not statistics", but zero-row files are skipped
    by their *statistics*: a byte copy of a 5-row batch file appended with numRecords=0 is
    never compared, and its rows are also left out of the table-wide count."""
    plan = loaded["21"]
    original = _record(table, plan)[1]["files"][0]
    shutil.copy(os.path.join(table, original), os.path.join(table, "restored.parquet"))
    stats = json.loads(file_stats(os.path.join(table, original))[1])
    stats["numRecords"] = 0
    before = _rows(table)
    _append(table, "restored.parquet", stats=json.dumps(stats))
    assert _rows(table) == before + 5, "the premise: batch 21's five rows are visible twice"
    report = audit_table(table)
    assert not report.ok, f"verify passes a table with 5 rows visible twice: {report.findings}"
    assert main(["verify", table]) == 1
    capsys.readouterr()


def test_an_undelivered_outbox_whose_committer_died_before_its_record_is_behind(
    table: str, tmp_path: Any, capsys: Any
) -> None:
    """The task died after the main commit and before its commit record (fault point
    before_record), so before the delivery too, and was marked failed by hand. The outbox is in
    the commit in the log (its manifest), but the quarantine check reads only records: verify
    warns record_missing and exits 0 while the 2 rejects never reached the quarantine table."""
    plan = _commit_with_an_undelivered_outbox(table, str(tmp_path / "quarantine"))
    path, _ = _record(table, plan)
    os.remove(path)  # as if the committer died at before_record
    report = audit_table(table)
    assert "record_missing" in _kind_set(report)
    about = [f for f in report.errors if f.batch_key == plan.batch_key and "quarantine" in f.message]
    assert about, f"verify is silent about the undelivered rejects: {report.findings}"
    assert main(["verify", table]) == 1
    capsys.readouterr()


def test_a_delete_before_a_log_cleanup_is_not_hidden_by_a_foreign_append_still_in_the_log(
    table: str, loaded: dict[str, Plan], capsys: Any
) -> None:
    """Batch 22's five rows deleted, the log cleaned (the DELETE's commit gone), then another
    writer appends five rows and an OPTIMIZE folds them with batch files; both of those
    commits are in the log, so the appended rows are known to be the other writer's. The
    check counts every folded row as of unknown origin and lets them stand in for the deleted
    batch rows: exit 0 with 5 rows lost (the documented limit needs the append past the log's
    retention as well)."""
    import pyarrow as pa
    from deltalake import write_deltalake

    DeltaTable(table).delete("seq >= 20 AND seq < 25")
    _forget_the_log(table)
    theirs = pa.table({"seq": pa.array([900, 901, 902, 903, 904], pa.int64()), "src": ["theirs"] * 5})
    write_deltalake(table, theirs, mode="append")
    DeltaTable(table).optimize.compact()
    seqs = set(DeltaTable(table).to_pyarrow_table().column("seq").to_pylist())
    assert not seqs & set(range(20, 25)), "the premise: batch 22's rows are gone"
    report = audit_table(table)
    assert not report.ok, f"5 rows of batch 22 are lost and verify passes: {report.findings}"
    assert main(["verify", table]) == 1
    capsys.readouterr()


# -- 2. false positives on healthy tables ---------------------------------------------------
def test_optimize_log_cleanup_append_optimize_is_a_healthy_table(
    table: str, loaded: dict[str, Plan], capsys: Any
) -> None:
    """Another writer's maintenance only: OPTIMIZE, a checkpoint and log cleanup, an append of
    its own rows, OPTIMIZE again (which rewrites the first OPTIMIZE's output with the appended
    file). No row is lost or doubled, but the batch rows held by the second OPTIMIZE's output
    are no longer "of unknown origin" (its add is in the log) and no longer count for the
    batches whose files the first OPTIMIZE removed: row_total_mismatch, exit 1."""
    import pyarrow as pa
    from deltalake import write_deltalake

    before = sorted(DeltaTable(table).to_pyarrow_table().column("seq").to_pylist())
    DeltaTable(table).optimize.compact()
    _forget_the_log(table)
    theirs = pa.table({"seq": pa.array([900, 901], pa.int64()), "src": ["theirs"] * 2})
    write_deltalake(table, theirs, mode="append")
    DeltaTable(table).optimize.compact()
    after = sorted(DeltaTable(table).to_pyarrow_table().column("seq").to_pylist())
    assert after == sorted([*before, 900, 901]), "the premise: every row once, theirs added"
    report = audit_table(table)
    assert report.ok, _errors(report)
    assert main(["verify", table]) == 0
    capsys.readouterr()


# -- 3. retry classification ----------------------------------------------------------------
def test_two_first_loads_racing_to_create_the_table_do_not_end_the_loser_at_once(
    table: str, monkeypatch: Any
) -> None:
    """Two first loads of a new table (a parallel backfill): B reads "no table yet", then A
    creates the table and binds the plan log to its id, then B checks the binding against the
    "no table" it read. B gets UnsupportedTableError ("dropped and re-created?"), which since
    c3bf463 ends the task at once (AirflowFailException), though a plain retry asks again,
    finds A's table and loads B's batch. The loser must go on (or fail retryably)."""
    from airflow_eod.core import load_commit as commit_mod
    from airflow_eod.core.errors import EodError

    a, b = _plan(table, 20), _plan(table, 21)
    staged_a, staged_b = stage_rows(table, a, 0, "a", [1, 2]), stage_rows(table, b, 0, "b", [3, 4])
    real = commit_mod.open_table
    state = {"raced": False}

    def open_then_lose_the_race(path: str) -> Any:
        got = real(path)
        if got is None and not state["raced"]:
            state["raced"] = True  # A's whole first load runs between B's two reads
            assert commit_batch(TableRef.parse(table), a.key, 0, *staged_a)[0]
        return got

    monkeypatch.setattr(commit_mod, "open_table", open_then_lose_the_race)
    try:
        ours, status = commit_batch(TableRef.parse(table), b.key, 0, *staged_b)
    except EodError as exc:
        assert exc.retryable, f"a lost creation race ends the task at once: {type(exc).__name__}: {exc}"
    else:
        assert ours and status.committed
    assert state["raced"]


def test_a_record_edited_to_list_a_copy_its_commit_never_added_is_an_error(
    table: str, loaded: dict[str, Plan], capsys: Any
) -> None:
    """A copy of batch 21's file, put beside it in its own attempt directory and appended by
    another writer, then batch 21's commit record edited (checksum recomputed, as the existing
    tests do) to list the copy and 10 rows. The record's commit is still in the log and added
    one file with a manifest of 5 rows, but verify checks only that the commit carries the
    marker: the copy is "listed by its own batch", so it is not compared, and the rows add up."""
    plan = loaded["21"]
    path, body = _record(table, plan)
    original = body["files"][0]
    copy = original.replace("part-0.parquet", "part-1.parquet")
    shutil.copy(os.path.join(table, original), os.path.join(table, copy))
    _append(table, copy, stats=file_stats(os.path.join(table, copy))[1])

    def list_the_copy(b: dict[str, Any]) -> None:
        b["files"] = sorted([original, copy])
        b["manifest"]["rows"] = 10

    _rewrite_record(path, list_the_copy)
    seqs = DeltaTable(table).to_pyarrow_table().column("seq").to_pylist()
    assert sorted(s for s in seqs if 10 <= s < 15) == sorted(list(range(10, 15)) * 2), "premise: twice"
    report = audit_table(table)
    assert not report.ok, f"batch 21's rows are visible twice and verify passes: {report.findings}"
    assert main(["verify", table]) == 1
    capsys.readouterr()


def test_a_commit_that_a_log_cleanup_removes_while_it_is_read_is_not_called_unparseable(
    table: str, monkeypatch: Any
) -> None:
    """When the log is read through deltalake and that read fails (a concurrent log cleanup
    removed a commit it listed), ``_unparseable`` looks for a commit that is not JSON; a commit
    file the cleanup removed between its listing and its opening raises FileNotFoundError,
    which it reports as "is not a Delta commit: a line of it is not JSON", and the error
    becomes UnsupportedTableError: the task ends at once (c3bf463) on a race a retry passes."""
    from airflow_eod.core.delta import log as delta_log
    from airflow_eod.core.storage import LocalStorage

    _load(table, _plan(table, 20), [1, 2])
    vanished = f"{1:020d}.json"  # listed, then removed by the cleanup before it was opened
    real_list = LocalStorage.list

    def listing_with_a_vanished_commit(self: LocalStorage, prefix: str) -> list[str]:
        names = real_list(self, prefix)
        return sorted([*names, vanished]) if prefix.rstrip("/").endswith("_delta_log") else names

    def deltalake_fails(*_: Any, **__: Any) -> Any:
        raise OSError(f"Generic LocalFileSystem error: Object at location _delta_log/{vanished} not found")

    monkeypatch.setattr(LocalStorage, "list", listing_with_a_vanished_commit)
    monkeypatch.setattr(delta_log, "DeltaTable", deltalake_fails)
    with pytest.raises(Exception) as got:
        delta_log._from_deltalake(table)
    assert getattr(got.value, "retryable", True), f"{type(got.value).__name__}: {got.value}"
    assert "not JSON" not in str(got.value)


# -- another writer's UPDATE and MERGE (issue 19): rows moved, not lost ----------------------
def test_an_update_or_merge_that_keeps_every_row_is_a_warning_not_an_error(
    table: str, loaded: dict[str, Plan], capsys: Any
) -> None:
    """Another writer's UPDATE of batch 21's rows and a MERGE that matches one of batch 22's
    rows and inserts two rows of its own rewrite those batches' files (dataChange=true). No
    row left the table: before, verify called both batches' files not live (error) and the
    MERGE's inserts "2 rows more than accounted for" (error)."""
    before = len(DeltaTable(table).to_pyarrow_table())
    DeltaTable(table).update({"src": "'edited'"}, predicate="seq = 10")
    theirs = pa.table({"seq": pa.array([20, 900, 901], pa.int64()), "src": ["merged", "theirs", "theirs"]})
    (
        DeltaTable(table)
        .merge(theirs, "s.seq = t.seq", source_alias="s", target_alias="t")
        .when_matched_update_all()
        .when_not_matched_insert_all()
        .execute()
    )
    assert len(DeltaTable(table).to_pyarrow_table()) == before + 2, "the premise: two rows inserted"
    report = audit_table(table)
    assert report.ok, _errors(report)
    rewritten = _kinds(report)["batch_file_rewritten"]
    assert {f.batch_key for f in rewritten} == {loaded["21"].batch_key, loaded["22"].batch_key}
    assert main(["verify", table]) == 0
    capsys.readouterr()


def test_a_merge_that_deletes_batch_rows_and_inserts_as_many_is_still_an_error(
    table: str, loaded: dict[str, Plan], capsys: Any
) -> None:
    """The row count alone would balance (two of batch 22's rows deleted, two rows inserted):
    the MERGE's own count of the rows it deleted keeps it an error."""
    theirs = pa.table({"seq": pa.array([20, 21, 900, 901], pa.int64()), "src": ["x"] * 4})
    (
        DeltaTable(table)
        .merge(theirs, "s.seq = t.seq", source_alias="s", target_alias="t")
        .when_matched_delete()
        .when_not_matched_insert_all()
        .execute()
    )
    report = audit_table(table)
    lost = _only(report, "batch_file_not_live")
    assert lost.severity == "error" and lost.batch_key == loaded["22"].batch_key
    assert main(["verify", table]) == 1
    capsys.readouterr()


def test_a_fake_optimize_that_doubles_a_batchs_rows_is_still_an_error(
    table: str, loaded: dict[str, Plan]
) -> None:
    """A dataChange=false commit that replaces batch 21's file with one holding its rows
    twice: the table-wide count must not excuse the extra rows as inserts (only a MERGE's
    own count of its inserts does)."""
    import pyarrow.parquet as pq

    before = len(DeltaTable(table).to_pyarrow_table())
    victim = _record(table, loaded["21"])[1]["files"][0]
    data = pa.concat_tables([pq.read_table(os.path.join(table, victim))] * 2)
    pq.write_table(data, os.path.join(table, "doubled.parquet"))
    rows, stats = file_stats(os.path.join(table, "doubled.parquet"))
    size = os.path.getsize(os.path.join(table, "doubled.parquet"))
    version = DeltaTable(table).version() + 1
    add = {"path": "doubled.parquet", "size": size, "partitionValues": {}, "modificationTime": 1,
           "dataChange": False, "stats": stats}  # fmt: skip
    with open(os.path.join(table, "_delta_log", f"{version:020d}.json"), "x") as fh:
        fh.write(json.dumps({"commitInfo": {"timestamp": 1, "operation": "OPTIMIZE"}}) + "\n")
        fh.write(json.dumps({"remove": {"path": victim, "dataChange": False, "deletionTimestamp": 1}}) + "\n")
        fh.write(json.dumps({"add": add}) + "\n")
    assert rows == 10 and len(DeltaTable(table).to_pyarrow_table()) == before + 5  # the premise
    report = audit_table(table)
    assert "row_total_mismatch" in {f.kind for f in report.errors}, report.findings
