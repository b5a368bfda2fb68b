"""``verify`` on merge tables (issue 22 item 4): one live row per key, and each committed
merge batch's keys live at its ordering value or newer unless a delete superseded them.

One table is loaded once with real Spark merges (three merge batches of one pipeline, two
append batches of another, one of them folded by a merge) and copied for each case; another
writer's changes are real delta-rs commits (``DeltaTable.delete``, ``write_deltalake``).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake

from airflow_eod.cli import main as cli
from airflow_eod.core.audit.status import table_status
from airflow_eod.core.audit.verify import AuditReport, audit_table
from airflow_eod.core.faults import InjectedFault
from airflow_eod.core.merge_digest import DELETE_COLUMN
from airflow_eod.core.planlog.restatement import plan_restatement
from airflow_eod.core.planlog.store import PlanLog
from airflow_eod.core.storage.local import LocalStorage
from airflow_eod.core.table_ref import TableRef
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import plan_for, spec_for
from tests.support.merge_helpers import MERGE_SETTINGS, Change, cdc_source, check_merge, write_changes

pytestmark = pytest.mark.spark

MERGE, APPEND = "tests.merge", "tests.append"
FIRST: list[Change] = [(i, f"n{i}", i * 10, 1, "I") for i in range(1, 21)]
# Updates, a delete (a tombstone), a new key and a stale update (older seq: no effect).
SECOND: list[Change] = [(i, f"u{i}", i * 100, 2, "U") for i in (1, 2, 3, 4, 5)]
SECOND += [(7, "n7", 70, 3, "D"), (21, "n21", 210, 2, "I"), (9, "stale", 0, 0, "U")]
# Updates, a new key, and an update of a row the append pipeline loaded (its file is merged).
THIRD: list[Change] = [(i, f"v{i}", i * 1000, 4, "U") for i in (3, 4, 5, 6, 8)]
THIRD += [(30, "n30", 300, 1, "I"), (101, "m101", 1010, 2, "U")]
APPEND_1: list[Change] = [(i, f"a{i}", i, 1, "I") for i in (100, 101, 102)]
APPEND_2: list[Change] = [(i, f"a{i}", i, 1, "I") for i in (200, 201, 202)]


def _load(spark: Any, landing: str, table: str, run: str, pipeline: str, **kw: Any) -> Any:
    source = cdc_source(landing)
    plan = plan_for(source, table, run, pipeline=pipeline)
    result = run_load(spark, spec_for(source, table, plan, **kw))
    assert result.outcome == "committed", result
    return result


def _merge(spark: Any, landing: str, table: str, run: str, changes: list[Change], **kw: Any) -> Any:
    write_changes(landing, f"{run}.csv", changes)
    return _load(spark, landing, table, run, MERGE, **{**MERGE_SETTINGS, **kw})


def _append(spark: Any, landing: str, table: str, run: str, changes: list[Change]) -> Any:
    write_changes(landing, f"{run}.csv", changes)
    return _load(spark, landing, table, run, APPEND)


@pytest.fixture(scope="module")
def loaded(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The merged table, loaded once: its path and its batch keys by name."""
    root = tmp_path_factory.mktemp("merged")
    table, merges, appends = str(root / "table"), str(root / "merges"), str(root / "appends")
    keys = {"m1": _merge(spark, merges, table, "m1", FIRST).batch_key}
    keys["a1"] = _append(spark, appends, table, "a1", APPEND_1).batch_key
    keys["m2"] = _merge(spark, merges, table, "m2", SECOND).batch_key
    keys["a2"] = _append(spark, appends, table, "a2", APPEND_2).batch_key
    keys["m3"] = _merge(spark, merges, table, "m3", THIRD).batch_key
    return {"table": table, "keys": keys}


@pytest.fixture
def table(loaded: dict[str, Any], tmp_path: Any) -> str:
    """A copy of the merged table, for one case to change."""
    copy = str(tmp_path / "table")
    shutil.copytree(loaded["table"], copy, symlinks=True)
    return copy


def _kinds(report: AuditReport, severity: str | None = None) -> dict[str, list[str | None]]:
    out: dict[str, list[str | None]] = {}
    for f in report.findings:
        if severity is None or f.severity == severity:
            out.setdefault(f.kind, []).append(f.batch_key)
    return out


def _say(report: AuditReport) -> str:
    return "\n".join(f"{f.severity} {f.kind}: {f.message}" for f in report.findings)


def _theirs(table: str, *rows: Change) -> None:
    """Another writer's append of ``rows`` (one delta-rs commit)."""
    cols = list(zip(*rows, strict=True))
    data = pa.table(
        {
            "id": pa.array(cols[0], pa.int64()),
            "name": pa.array(cols[1], pa.string()),
            "amount": pa.array(cols[2], pa.int64()),
            "seq": pa.array(cols[3], pa.int64()),
            "op": pa.array(cols[4], pa.string()),
        }
    )
    write_deltalake(table, data, mode="append")


def _manifest_entry(table: str, version: int) -> dict[str, Any]:
    with open(os.path.join(table, "_delta_log", f"{version:020d}.json")) as fh:
        info = next(json.loads(line)["commitInfo"] for line in fh if '"commitInfo"' in line)
    entry: dict[str, Any] = json.loads(info["userMetadata"])["airflow_eod"]["extra"]["merge"]
    return entry


def _version(table: str, batch_key: str) -> int:
    return next(
        b.table_version
        for b in audit_table(table).batches
        if b.batch_key == batch_key and b.table_version is not None
    )


def test_a_clean_merge_table_audits_ok_and_status_lists_it(loaded: dict[str, Any], table: str) -> None:
    keys = loaded["keys"]
    got = check_merge(table, FIRST + SECOND + THIRD + APPEND_1 + APPEND_2)
    assert got.ok, got
    report = audit_table(table)
    # Before: batch_file_not_live x2, row_count_mismatch, row_total_mismatch (all false).
    assert report.ok, _say(report)
    # The append batch whose file the third merge folded in is told apart, and only it.
    assert _kinds(report) == {"batch_file_merged": [keys["a1"]]}, _say(report)
    # Each merge commit names its digest: the batch's deduped keys, seq and delete flag.
    entry = _manifest_entry(table, _version(table, keys["m2"]))
    assert entry["keys_dir"].startswith(f"_eod/merge_keys/{MERGE}/{keys['m2']}/g0-")
    digest = pq.read_table(os.path.join(table, entry["keys_dir"])).to_pylist()
    assert sorted((r["id"], r["seq"], r[DELETE_COLUMN]) for r in digest) == sorted(
        (c[0], c[3], c[4] == "D") for c in SECOND
    )
    # status reads the merge table as any other.
    summary = {s.pipeline_id: s for s in table_status(TableRef.parse(table))}
    assert [b.rows for b in summary[MERGE].committed] == [20, len(SECOND), len(THIRD)]
    assert len(summary[APPEND].committed) == 2
    assert cli(["status", table]) == 0
    assert cli(["verify", table]) == 0


def test_an_older_row_written_back_is_a_regressed_key(loaded: dict[str, Any], table: str) -> None:
    keys = loaded["keys"]
    DeltaTable(table).delete("id = 3")
    _theirs(table, (3, "old", 30, 1, "I"))  # seq 1: the first batch's, older than the 2nd's and 3rd's
    report = audit_table(table)
    assert _kinds(report, "error") == {"merge_key_regressed": [keys["m2"], keys["m3"]]}, _say(report)
    assert "id=3: live seq 1, the batch's seq 4" in _say(report)


def test_a_tombstone_overwritten_at_its_own_seq_is_a_regressed_key(
    loaded: dict[str, Any], table: str
) -> None:
    DeltaTable(table).delete("id = 7")
    _theirs(table, (7, "back", 70, 3, "U"))  # the delete's seq, not a delete
    report = audit_table(table)
    assert _kinds(report, "error") == {"merge_key_regressed": [loaded["keys"]["m2"]]}, _say(report)
    assert "id=7: live seq 3, the batch's seq 3 (a delete)" in _say(report)


def test_a_deleted_key_is_a_lost_key(loaded: dict[str, Any], table: str) -> None:
    keys = loaded["keys"]
    DeltaTable(table).delete("id = 4")
    report = audit_table(table)
    assert _kinds(report, "error") == {"merge_key_lost": [keys["m1"], keys["m2"], keys["m3"]]}, _say(report)


def test_a_key_another_writer_appended_again_is_a_duplicate(loaded: dict[str, Any], table: str) -> None:
    _theirs(table, (5, "dup", 50, 9, "U"), (200, "dup", 1, 9, "U"))
    report = audit_table(table)
    # Key 5 is a merged key; 200 only the append pipeline's, which may hold a key twice.
    assert _kinds(report, "error") == {"merge_duplicate_key": [None]}, _say(report)
    assert "1 key(s) (id) that merge batches loaded" in _say(report) and "id=5: 2 rows" in _say(report)


def test_the_append_batches_keep_their_checks(loaded: dict[str, Any], table: str) -> None:
    DeltaTable(table).delete("id = 201")  # a row of the untouched append batch
    report = audit_table(table)
    errors = _kinds(report, "error")
    assert errors.get("batch_file_not_live") == [loaded["keys"]["a2"]], _say(report)
    assert not [k for k in errors if k.startswith("merge_")], _say(report)


def test_a_missing_digest_is_a_warning(loaded: dict[str, Any], table: str) -> None:
    keys = loaded["keys"]
    shutil.rmtree(os.path.join(table, "_eod", "merge_keys", MERGE, keys["m1"]))
    report = audit_table(table)
    assert report.ok, _say(report)
    assert _kinds(report, "warning")["merge_keys_missing"] == [keys["m1"]]
    # The other batches are still judged, and the duplicate check then looks at every key.
    DeltaTable(table).delete("id = 6")
    _theirs(table, (6, "old", 6, 1, "I"), (201, "dup", 1, 9, "U"))
    errors = _kinds(audit_table(table), "error")
    assert errors["merge_key_regressed"] == [keys["m3"]] and errors["merge_duplicate_key"] == [None]


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every key the table's local storage is asked to list or read."""
    seen: list[str] = []
    for name in ("list", "get", "get_range", "head"):
        real = getattr(LocalStorage, name)

        def spy(self: LocalStorage, key: str, *a: Any, _real: Any = real, **kw: Any) -> Any:
            seen.append(key)
            return _real(self, key, *a, **kw)

        monkeypatch.setattr(LocalStorage, name, spy)
    yield seen


@pytest.mark.parametrize(
    "hostile", ["../../outside", "/etc", "_eod/merge_keys/tests.merge/{other}/g0-x", "link"]
)
def test_a_hostile_keys_dir_is_refused_unread(
    loaded: dict[str, Any], table: str, tmp_path: Any, hostile: str, reads: list[str]
) -> None:
    keys = loaded["keys"]
    # A forged digest outside the table: were it read, every key would be lost.
    outside = tmp_path / "outside"
    outside.mkdir()
    forged = pa.table({"id": [999], "seq": [1], DELETE_COLUMN: [False]})
    pq.write_table(forged, str(outside / "part-0.parquet"))
    version = _version(table, keys["m2"])
    log = os.path.join(table, "_delta_log", f"{version:020d}.json")
    own = _manifest_entry(table, version)["keys_dir"]
    if hostile == "link":  # the manifest is sound; the batch's digest folder leads out
        shutil.rmtree(os.path.join(table, own))
        os.symlink(str(outside), os.path.join(table, own))
        value = own
    else:
        value = hostile.format(other=keys["m1"])
    lines = []
    with open(log) as fh:
        for line in fh:
            action = json.loads(line)
            if "commitInfo" in action:
                meta = json.loads(action["commitInfo"]["userMetadata"])
                meta["airflow_eod"]["extra"]["merge"]["keys_dir"] = value
                action["commitInfo"]["userMetadata"] = json.dumps(meta)
            lines.append(json.dumps(action))
    with open(log, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    reads.clear()
    report = audit_table(table)
    assert _kinds(report, "error") == {"merge_keys_refused": [keys["m2"]]}, _say(report)
    assert not [k for k in reads if ".." in k.split("/") or k.startswith("/") or "outside" in k], reads
    assert not [k for k in reads if k.startswith(f"{own}/")], reads  # nor its own folder's files


def test_a_deleted_key_brought_back_without_tombstones(spark: Any, tmp_path: Any) -> None:
    table, landing = str(tmp_path / "table"), str(tmp_path / "landing")
    first: list[Change] = [(i, f"n{i}", i, 1, "I") for i in range(1, 6)]
    second: list[Change] = [(2, "n2", 2, 3, "D"), (3, "u3", 3, 2, "U")]
    m1 = _merge(spark, landing, table, "m1", first, keep_tombstones=False).batch_key
    m2 = _merge(spark, landing, table, "m2", second, keep_tombstones=False).batch_key
    assert check_merge(table, first + second, tombstones=False).ok
    report = audit_table(table)
    assert report.ok and not report.warnings, _say(report)  # key 2 is gone: its delete says why
    _theirs(table, (2, "zombie", 2, 1, "I"))  # the insert the delete superseded, loaded again
    report = audit_table(table)
    assert _kinds(report, "error") == {"merge_key_regressed": [m2]}, _say(report)
    assert "id=2: live seq 1, the batch's seq 3 (a delete)" in _say(report)
    DeltaTable(table).delete("id = 5")
    report = audit_table(table)
    assert _kinds(report, "error") == {"merge_key_regressed": [m2], "merge_key_lost": [m1]}, _say(report)


def test_a_crashed_attempts_digest_is_removed_once_the_batch_commits(
    spark: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, landing = str(tmp_path / "table"), str(tmp_path / "landing")
    write_changes(landing, "m1.csv", FIRST)
    source = cdc_source(landing)
    plan = plan_for(source, table, "m1", pipeline=MERGE)
    monkeypatch.setenv("EOD_FAULTPOINTS", "after_stage=raise@1")
    with pytest.raises(InjectedFault):
        run_load(spark, spec_for(source, table, plan, try_number=1, **MERGE_SETTINGS))
    folder = os.path.join(table, "_eod", "merge_keys", MERGE, plan.batch_key)
    assert len(os.listdir(folder)) == 1  # the crashed attempt's digest
    monkeypatch.delenv("EOD_FAULTPOINTS")
    result = run_load(spark, spec_for(source, table, plan, try_number=2, **MERGE_SETTINGS))
    assert result.outcome == "committed"
    named = _manifest_entry(table, result.table_version)["keys_dir"]
    assert [f"_eod/merge_keys/{MERGE}/{plan.batch_key}/{n}" for n in os.listdir(folder)] == [named]
    report = audit_table(table)
    assert report.ok and not report.findings, _say(report)


def test_a_restated_merge_batch_audits_ok(spark: Any, tmp_path: Any) -> None:
    """A restatement re-applies the corrected batch (ties win): it rewrites only the files
    that may hold its keys, so files of its older generation that hold other keys stay."""
    table, landing = str(tmp_path / "table"), str(tmp_path / "landing")
    first: list[Change] = [(i, f"n{i}", i, 1, "I") for i in range(1, 41)]
    second: list[Change] = [(i, f"u{i}", i, 2, "U") for i in (1, 2, 3, 38, 39, 40)]
    _merge(spark, landing, table, "m1", first)
    m2 = _merge(spark, landing, table, "m2", second).batch_key
    corrected: list[Change] = [(39, "fixed", 39, 2, "U")]
    write_changes(landing, "m2.csv", corrected)
    source, ref = cdc_source(landing), TableRef.parse(table)
    plan = PlanLog(ref, MERGE).get_plan(m2)
    assert plan is not None
    again = plan_restatement(
        PlanLog(ref, MERGE), plan, run_token="fix", committed_generation=0, replan=source.replan
    )
    spec = spec_for(source, table, again, restate=True, previous_generation=0, **MERGE_SETTINGS)
    assert run_load(spark, spec).outcome == "committed"
    rows = {r["id"]: r for r in DeltaTable(table).to_pyarrow_table().to_pylist()}
    assert len(rows) == 40 and rows[39]["name"] == "fixed" and rows[38]["name"] == "u38"
    report = audit_table(table)
    assert report.ok and not report.findings, _say(report)
    assert [b.generation for b in report.batches if b.batch_key == m2] == [1]
    # Its generation 0 left files that hold other keys: merged rows, not a stale generation.
    assert [f for f in DeltaTable(table).file_uris() if f"/{m2}/g0-" in f]


@pytest.mark.objectstore
def test_a_merge_table_on_s3_is_audited_from_its_digests(spark: Any, s3_server: Any, tmp_path: Any) -> None:
    from tests.support.spark_conf import find_s3a_jars

    why = find_s3a_jars()
    if why is not None:
        pytest.skip(why)
    ref = TableRef.parse(f"s3://{s3_server.bucket}/merge-verify/{uuid.uuid4().hex}/t", s3_server.options())
    landing = str(tmp_path / "landing")
    first: list[Change] = [(i, f"n{i}", i, 1, "I") for i in range(1, 11)]
    second: list[Change] = [(i, f"u{i}", i, 2, "U") for i in (1, 2, 3)] + [(4, "n4", 4, 2, "D")]
    keys = [_merge(spark, landing, ref, run, c).batch_key for run, c in (("m1", first), ("m2", second))]  # type: ignore[arg-type]
    assert check_merge(ref.location, first + second, storage_options=ref.storage_options).ok
    report = audit_table(ref)
    assert report.ok and not report.findings, _say(report)
    assert ref.storage().list(f"_eod/merge_keys/{MERGE}/{keys[1]}")  # the digest is on S3
    DeltaTable(ref.location, storage_options=ref.storage_options).delete("id = 9")
    report = audit_table(ref)
    assert _kinds(report, "error") == {"merge_key_lost": [keys[0]]}, _say(report)
