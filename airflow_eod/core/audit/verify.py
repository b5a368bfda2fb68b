"""The audit behind ``airflow-eod verify``: does a table keep the exactly-once guarantee?

It trusts no writer, airflow-eod included: it neither asks (:mod:`airflow_eod.core.ask`) nor
judges commit records the way the load path does. It reads the facts itself
(:mod:`airflow_eod.core.audit.facts`: the live files and their statistics, the ``txn``
markers and the commits still in ``_delta_log/``, the commit records and plans in the plan
log) and reports where they break the guarantee, as :class:`Finding` objects of the fixed
kinds in :data:`SAYS` (errors: the guarantee is broken, or will be; warnings: worth a look).
docs/reference.md says what each kind means, docs/runbook.md what to do about it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from deltalake import DeltaTable

from airflow_eod.core.audit.facts import (
    file_rows,
    read_live_files,
    read_log_facts,
    read_plan_log_facts,
    same_bytes,
)
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.durations import parse_interval
from airflow_eod.core.errors import EodError, UnsupportedTableError
from airflow_eod.core.planlog.retention import RETENTION_KEY, safety_margin
from airflow_eod.core.table_layout import DATA_DIR, local_path

ERROR, WARNING = "error", "warning"
# Every kind of finding, what it says (the message, after "batch <pipeline>/<key>: " when it
# concerns one batch), and its severity.
SAYS: dict[str, tuple[str, str]] = {
    "file_outside_batch": (ERROR, "live file {file} ({rows} rows) is under eod_data/, but no "
        "committed batch generation lists it (a zombie attempt's file, or a copy): its rows are extra"),
    "stale_generation_live": (ERROR, "live file {file} ({rows} rows) is of a generation older than "
        "the committed generation {gen}, so rows of the batch are visible twice; restate the batch"),
    "file_in_two_batches": (ERROR, "live file {file} is listed by the commit records of {batches}"),
    "duplicate_file_content": (ERROR, "{n} live files hold the same bytes ({rows} rows each), so those "
        "rows are visible {n} times: {who}"),
    "row_count_mismatch": (ERROR, "generation {gen}: its commit record says {rows} rows, but its "
        "{files} live file(s) hold {live}"),
    "row_total_mismatch": (ERROR, "the table holds {total} live rows, but its {batches} committed "
        "batches recorded {recorded} and other writers' files hold {others}: {diff} rows {more} than "
        "accounted for (the other findings say where, if they explain it)"),
    "batch_file_not_live": (ERROR, "generation {gen}: {n} of its {files} file(s) are not live (e.g. "
        "{file}, removed by {by}): {rows} of its {recorded} rows left the table with them, unless that "
        "commit rewrote them into other files (a DELETE, UPDATE or MERGE)"),
    "missing_data_file": (ERROR, "live file {file} ({role}) is missing on disk: every read of the "
        "table fails"),
    "file_not_in_table": (ERROR, "live file {file} ({role}) {why}: every reader of the table reads "
        "whatever it leads to, and verify does not open it (its bytes are not compared, its footer "
        "not read)"),
    "corrupt_record": (ERROR, "commit record {record} {why}; the table is the truth"),
    "record_without_marker_commit": (ERROR, "commit record {record} says generation {gen} landed at "
        "table version {version}, but that commit carries {found}"),
    "marker_without_record": (ERROR, "its marker (generation {gen}) is {age}, and there is no commit "
        "record of that generation: once the marker expires the batch can load again; run "
        "`airflow-eod ask` on it now, which writes the record"),
    "corrupt_plan_log_entry": (ERROR, "{error}"),
    "overlapping_intervals": (ERROR, "its JDBC key range {interval} overlaps {other} of batch {other_key} "
        "of the same pipeline, also committed: the source rows in {overlap} were loaded by both"),
    "marker_set_by_another_writer": (ERROR, "its marker (generation {gen}) was set by commit {version} "
        "({op}), which carries no airflow-eod manifest of the batch: another writer used the "
        "pipeline's app id in its own write, and {own} (see docs/runbook.md, 'a marker another "
        "writer set')"),
    "rows_deleted_unattributed": (WARNING, "the table holds {total} live rows, {diff} fewer than its "
        "{batches} committed batches recorded ({recorded}) plus other writers' rows ({others}); "
        "other writers' DELETE or MERGE (commit(s) {versions}) deleted at least as many rows from "
        "files in which an OPTIMIZE or MERGE had mixed batch rows with theirs, and whose rows those "
        "were the log cannot tell: compare the table with the source to know whether batch rows "
        "went"),
    "record_missing": (WARNING, "the table's marker says generation {gen} is committed, but there is "
        "no commit record of it (its committer died after the commit); `airflow-eod ask` on the "
        "batch writes it"),
    "foreign_file": (WARNING, "live file {file} ({rows} rows) belongs to no batch: another writer's "
        "data, which is allowed (its rows count as theirs)"),
    "compacted_file": (WARNING, "commit {version} (another writer's OPTIMIZE, dataChange=false) "
        "rewrote files into {n} live file(s), e.g. {file}: the batches whose files it replaced "
        "cannot be counted one by one"),
    "batch_file_compacted": (WARNING, "generation {gen}: {n} of its {files} file(s) were rewritten by "
        "another writer's OPTIMIZE (commit {version}): its row count cannot be checked, and it "
        "cannot be restated"),
    "batch_file_rewritten": (WARNING, "generation {gen}: {n} of its {files} file(s) were rewritten by "
        "another writer's {op} (commit {version}), which kept every row it read (its output holds as "
        "many rows or more, and it says it deleted none): its rows may have new values now, its "
        "own row count cannot be checked (the table-wide one still is), and it cannot be restated"),
    "batch_file_removed_unseen": (WARNING, "generation {gen}: {n} of its {files} file(s) were removed "
        "by a commit that has left the log (e.g. {file}): an OPTIMIZE and a DELETE look alike now, so "
        "its row count cannot be checked on its own; the table-wide count checks that its {rows} "
        "rows are still held by other files"),
    "quarantine_behind": (ERROR, "generation {gen}: its commit carries {n} malformed record(s) for the "
        "quarantine table {q}, which holds {what} of the batch: the two tables describe different "
        "generations (unless a load of the batch is running right now)"),
    "stuck_plan": (WARNING, "generation {gen} was planned {age} ago ({at}) and never committed"),
    "marker_near_expiry": (WARNING, "its marker (generation {gen}) is {age}; its commit record "
        "answers once it expires"),
    "plan_near_expiry": (WARNING, "generation {gen} was planned {age} ago ({at}) and never committed; "
        "the table's retention window is {window} ({key}), so loading it {tense} refused with "
        "RetentionWindowError: restate it on purpose"),
    "rows_unknown": (WARNING, "the rows of {what} are unknown, so the table-wide row count {scope}"),
}  # fmt: skip
# The runbook section for each kind ("`airflow-eod verify` reports ..." for the others).
_SECTION = {
    **dict.fromkeys(
        ["file_in_two_batches", "corrupt_record", "record_without_marker_commit"], "a corrupt commit record"
    ),
    "corrupt_plan_log_entry": "plan-log entry ... is corrupt / fails its checksum",
    "stuck_plan": "A batch is stuck (planned, never committed)",
    "plan_near_expiry": "older than the table's transaction-retention window",
    "quarantine_behind": "The quarantine table is behind the main table",
    "overlapping_intervals": "Two JDBC interval batches overlap",
}


# A MERGE's count of the target rows it deleted: Delta Spark's name, and delta-rs's.
_MERGE_DELETED = ("numTargetRowsDeleted", "num_target_rows_deleted")

@dataclass(frozen=True)
class Finding:
    """One thing the audit found.

    :param severity: ``error`` (the guarantee is broken, or will be) or ``warning``.
    :param kind: a stable slug, a key of :data:`SAYS`.
    :param pipeline_id: the pipeline it concerns, if one.
    :param batch_key: the batch it concerns, if one.
    :param message: what was found and where the runbook says what to do.
    :param paths: the files it names, relative to the table root.
    """

    severity: str
    kind: str
    pipeline_id: str | None
    batch_key: str | None
    message: str
    paths: list[str] = field(default_factory=list)


@dataclass
class BatchSummary:
    """One committed batch as the audit counted it (``None``: not known)."""

    pipeline_id: str
    batch_key: str
    generation: int
    table_version: int | None
    recorded_rows: int | None
    live_rows: int | None
    live_files: int


@dataclass
class AuditReport:
    """What :func:`audit_table` found in one table at one version."""

    table_uri: str
    table_version: int
    checked_at: datetime
    batches: list[BatchSummary] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == WARNING]

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        body = asdict(self)
        body.update(checked_at=self.checked_at.isoformat(), ok=self.ok)
        return body


@dataclass
class _Batch:
    key: BatchKey
    records: dict[int, dict[str, Any]] = field(default_factory=dict)  # generation -> record body
    where: dict[int, str] = field(default_factory=dict)  # generation -> the record's path
    marker: int | None = None
    marker_ms: int | None = None
    generation: int | None = None  # committed, as the audit reads it
    version: int | None = None
    rows: int | None = None
    files: list[str] = field(default_factory=list)
    old_files: set[str] = field(default_factory=set)  # listed by records of other generations


def _age(span: timedelta) -> str:
    days = span.total_seconds() / 86400
    return f"{days:.1f} days" if days >= 2 else f"{days * 24:.1f} hours"


class _Audit:
    def __init__(self, path: str, now: datetime, stuck_after: timedelta, expiry_warning: float) -> None:
        self.path, self.now, self.stuck_after, self.expiry_warning = path, now, stuck_after, expiry_warning
        self.findings: list[Finding] = []
        dt = DeltaTable(path)
        self.version, self.table_id = dt.version(), str(dt.metadata().id)
        retention = (dt.metadata().configuration or {}).get(RETENTION_KEY)
        self.window = parse_interval(retention) if retention else None
        self.live = read_live_files(path, dt)
        self.rows = {p: f.rows for p, f in self.live.items()}
        self.log = read_log_facts(path, self.version)
        facts = read_plan_log_facts(path, self.table_id)
        self.plans = facts.plans
        for where, error in facts.unreadable:
            self.add("corrupt_plan_log_entry", None, [where], error=error)
        self.batches: dict[BatchKey, _Batch] = {}
        for batch, gens in facts.records.items():
            for gen, (where, body) in gens.items():
                self._take_record(batch, gen, where, body)
        for app_id, (gen, ms) in self.log.markers.items():
            if (key := BatchKey.from_app_id(app_id)) is not None:
                self.batch(key).marker, self.batch(key).marker_ms = gen, ms
        self.role: dict[str, str] = {}  # live file -> whose it is, for messages
        # Rows of batch files removed by commits no longer in the log (None: not known).
        self.unseen_rows: list[int | None] = []

    def add(self, kind: str, batch: BatchKey | None, paths: list[str] | None = None, **say: Any) -> None:
        severity, text = SAYS[kind]
        where = _SECTION.get(kind, "`airflow-eod verify` reports ...")
        about = f"batch {batch.label}: " if batch else ""
        message = f"{about}{text.format(**say)}; see docs/runbook.md, '{where}'"
        pipeline, key = (batch.pipeline_id, batch.key) if batch else (None, None)
        self.findings.append(Finding(severity, kind, pipeline, key, message, sorted(paths or [])))

    def batch(self, key: BatchKey) -> _Batch:
        return self.batches.setdefault(key, _Batch(key))

    def committed(self) -> list[_Batch]:
        found = [b for b in self.batches.values() if b.generation is not None]
        return sorted(found, key=lambda b: b.key.label)

    def _take_record(self, batch: BatchKey, gen: int, where: str, body: dict[str, Any]) -> None:
        if body["table_version"] > self.version:
            # A load that committed after the snapshot was read (verify runs beside loads):
            # not part of what is audited. A record past the table's newest version is corrupt.
            if body["table_version"] <= DeltaTable(self.path).version():
                return
            why = f"says generation {gen} landed at version {body['table_version']}, past the table's"
            self.add("corrupt_record", batch, [where], record=where, why=f"{why} {self.version}")
        else:
            self.batch(batch).records[gen], self.batch(batch).where[gen] = body, where

    # -- which generation each batch holds, and its files ------------------------------
    def resolve(self) -> None:
        for b in self.batches.values():
            newest = max(b.records, default=None)
            set_back = self._marker_set_back(b, newest)
            if newest is not None:
                self._check_record(b, newest, set_back)
            b.generation = b.marker if b.marker is not None else newest  # the table is the truth
            foreign = None
            if b.generation is not None and b.generation not in b.records:
                foreign = self.log.foreign.get((b.key.app_id, b.generation))
            # Another writer set the marker: the batch's own newest commit (its record, or its
            # commit in the log) is the table's word on its rows, not that marker.
            own = self._own_newest(b) if set_back is not None or foreign is not None else None
            if set_back is not None:
                op = "no longer in the log"
                if isinstance(set_back, int):
                    op = self.log.operations.get(set_back, "no commitInfo")
                back = f"set it back below the batch's own newest generation, {own}"
                say_back: dict[str, Any] = {"gen": b.marker, "version": set_back, "op": op, "own": back}
                self.add("marker_set_by_another_writer", b.key, **say_back)
            elif foreign is not None:
                op = self.log.operations.get(foreign, "no commitInfo")
                said = "it was never loaded" if own is None else f"its own newest generation is {own}"
                say: dict[str, Any] = {"gen": b.generation, "version": foreign, "op": op, "own": said}
                self.add("marker_set_by_another_writer", b.key, **say)
            if own is not None:
                b.generation = own
            if b.generation is None:
                continue
            b.old_files = {f for g, body in b.records.items() if g != b.generation for f in body["files"]}
            record, landed = b.records.get(b.generation), self.log.landed.get((b.key.app_id, b.generation))
            if record is not None:
                b.version, b.files = record["table_version"], record["files"]
                b.rows = record["manifest"].get("rows")
            elif landed is not None:
                b.version, b.rows, b.files = landed
            else:  # no record, and its commit left the log: its directory is all there is to go on
                prefix = f"{DATA_DIR}/{b.key.pipeline_id}/{b.key.key}/g{b.generation}-"
                b.files = sorted(p for p in self.live if p.startswith(prefix))
            if foreign is None and own is None and not self._marker_expiring(b) and record is None:
                self.add("record_missing", b.key, gen=b.generation)

    def _own_newest(self, b: _Batch) -> int | None:
        """The newest generation of ``b`` that a commit of its own landed: its record, or its
        commit with the batch's manifest in the log."""
        return max({*b.records, *(g for a, g in self.log.owned if a == b.key.app_id)}, default=None)

    def _marker_set_back(self, b: _Batch, newest: int | None) -> int | str | None:
        """The commit (``"?"``: no longer in the log) of another writer that set ``b``'s
        marker back below the generation of its newest record, whose own commit is the
        table's (in the log with the batch's manifest, or its files live); else ``None``."""
        if b.marker is None or newest is None or newest <= b.marker:
            return None
        files = b.records[newest].get("files") or []
        if (b.key.app_id, newest) not in self.log.owned and not any(f in self.live for f in files):
            return None
        setter = self.log.set_by.get(b.key.app_id)
        if setter is not None and setter[1]:
            return None  # the batch's own commit set it last: the record is wrong
        return "?" if setter is None else setter[0]

    def _check_record(self, b: _Batch, gen: int, set_back: int | str | None = None) -> None:
        where, version = b.where[gen], int(b.records[gen]["table_version"])
        carried = self.log.commits.get(version)
        # Only commits past the checkpoint are the table's word (see table_facts.read_log_facts).
        if carried is not None and version > self.log.checkpoint and (b.key.app_id, gen) not in carried:
            found = [g for a, g in carried if a == b.key.app_id]
            say = {"record": where, "gen": gen, "version": version}
            said = f"marker generation(s) {found}" if found else "no marker of the batch"
            self.add("record_without_marker_commit", b.key, [where], found=said, **say)
        if b.marker is not None and b.marker < gen and set_back is None:
            why = f"is of generation {gen}, but the table's marker is at generation {b.marker}"
            self.add("corrupt_record", b.key, [where], record=where, why=why)
        landed = self.log.landed.get((b.key.app_id, gen))
        if carried is not None and version > self.log.checkpoint and landed and landed[0] == version:
            # The commit is the table's word on what the generation added: a record that
            # lists other files (a copy, say) or other rows would make them count as its own.
            body, files = b.records[gen], set(landed[2])
            extra = sorted(set(body["files"]) - files)
            if extra or set(body["files"]) < files:
                listed = len(body["files"])
                why = f"lists {listed} file(s), but its commit (version {version}) added {len(files)}"
                shown = f" (e.g. {extra[0]}, which it did not add)" if extra else ""
                self.add("corrupt_record", b.key, [where, *extra], record=where, why=why + shown)
            elif landed[1] is not None and body["manifest"].get("rows") != landed[1]:
                rows = body["manifest"].get("rows")
                why = f"says {rows} rows, but its commit (version {version}) says {landed[1]}"
                self.add("corrupt_record", b.key, [where], record=where, why=why)

    def _marker_expiring(self, b: _Batch) -> bool:
        """Report a marker older than ``expiry_warning`` of the window; True if it is."""
        if self.window is None or b.marker_ms is None or b.marker is None:
            return False
        age = self.now - datetime.fromtimestamp(b.marker_ms / 1000, UTC)
        if age <= self.window * self.expiry_warning:
            return False
        old = f"{_age(age)} old, {age / self.window:.0%} of the table's {RETENTION_KEY} ({_age(self.window)})"
        kind = "marker_near_expiry" if b.marker in b.records else "marker_without_record"
        self.add(kind, b.key, gen=b.marker, age=old)
        return True

    # -- the files -------------------------------------------------------------------
    def check_files(self) -> None:
        owners: dict[str, list[_Batch]] = {}
        for b in self.committed():
            for f in b.files:
                owners.setdefault(f, []).append(b)
                self.role[f] = f"batch {b.key.label} generation {b.generation}"
        for f, bs in sorted(owners.items()):
            if len(bs) > 1 and f in self.live:
                names = " and ".join(b.key.label for b in bs)
                self.add("file_in_two_batches", bs[0].key, [f], file=f, batches=names)
        replaced = {f: b for b in self.committed() for f in b.old_files}
        optimized: dict[int, list[str]] = {}
        for f in sorted(self.live):
            key, attempt = self.live[f].batch, self.live[f].generation
            if not self.live[f].on_disk:
                self.add("missing_data_file", key, [f], file=f, role=self.role.get(f, "of no batch"))
            if self.live[f].refused:
                why, role = self.live[f].refused, self.role.get(f, "of no batch")
                self.add("file_not_in_table", key, [f], file=f, role=role, why=why)
            if f in owners:
                continue
            # A file an older record lists, or in an older generation's attempt directory.
            owner = replaced.get(f) or (self.batches.get(key) if key else None)
            gen = owner.generation if owner else None
            older = attempt is not None and gen is not None and attempt < gen
            if owner and gen is not None and (f in owner.old_files or older):
                self.role[f] = f"a replaced generation of batch {owner.key.label}"
                self.add("stale_generation_live", owner.key, [f], file=f, rows=self.rows[f], gen=gen)
            elif f.startswith(f"{DATA_DIR}/"):
                self.role[f] = "of no committed batch"
                self.add("file_outside_batch", key, [f], file=f, rows=self.rows[f])
            elif f in self.log.adds and not self.log.adds[f][1]:
                self.role[f] = f"OPTIMIZE output of commit {self.log.adds[f][0]}"
                optimized.setdefault(self.log.adds[f][0], []).append(f)
            else:
                self.role[f] = "another writer's file"
                self.add("foreign_file", None, [f], file=f, rows=self.rows[f])
        for v, files in sorted(optimized.items()):
            self.add("compacted_file", None, files, version=v, n=len(files), file=files[0])

    def check_batches(self) -> list[BatchSummary]:
        out = []
        for b in self.committed():
            assert b.generation is not None
            live = [f for f in b.files if f in self.live]
            known = [self.rows[f] for f in live]
            live_rows = None if None in known else sum(r or 0 for r in known)
            key, gen = b.key, b.generation
            out.append(BatchSummary(key.pipeline_id, key.key, gen, b.version, b.rows, live_rows, len(live)))
            # Rows an UPDATE or MERGE hid in a live file (deletion vectors) and kept in new files.
            moved = self._kept_in_place(live)
            if live_rows is not None:
                live_rows += sum(rows for _, rows in moved.values())
            gone = [f for f in b.files if f not in self.live]
            # A file an OPTIMIZE rewrote (dataChange=false) moved its rows; any other removal lost them.
            # dataChange=false promises the rows moved: only a commit that added files can
            # have moved them (one that only removed files dropped them, whatever it says).
            compacted = [
                f
                for f in gone
                if f in self.log.removes
                and not self.log.removes[f][1]
                and self.log.changes.get(self.log.removes[f][0], ([], []))[0]
            ]
            # Removed by a commit a log cleanup took: whether it moved the rows (OPTIMIZE) or
            # dropped them (DELETE) is only told by the table-wide count (check_total).
            unseen = [f for f in gone if f not in self.log.removes]
            # An UPDATE or MERGE rewrote the file and kept every row of it (in new files).
            rewritten = [
                f
                for f in gone
                if f not in compacted and f not in unseen and self._kept_rows(self.log.removes[f][0])
            ]
            lost = [f for f in gone if f not in compacted and f not in unseen and f not in rewritten]
            say: dict[str, Any] = {"gen": gen, "files": len(b.files)}
            if unseen:
                known = [self.log.adds[f][2] if f in self.log.adds else None for f in lost + compacted]
                rows_gone = None
                if b.rows is not None and live_rows is not None and None not in known:
                    rows_gone = b.rows - live_rows - sum(r or 0 for r in known)
                self.unseen_rows.append(rows_gone)
                shown = "?" if rows_gone is None else rows_gone
                self.add(
                    "batch_file_removed_unseen", key, unseen, n=len(unseen), file=unseen[0], rows=shown, **say
                )
            if lost:
                rows = [self.log.adds[f][2] if f in self.log.adds else None for f in lost]
                removed = self.log.removes.get(lost[0])
                by = "a commit no longer in the log"
                if removed:
                    by = f"commit {removed[0]} ({self.log.operations.get(removed[0], 'no commitInfo')})"
                count = f"{sum(r or 0 for r in rows)}{'+' if None in rows else ''}"
                say.update(n=len(lost), file=lost[0], by=by, rows=count, recorded=b.rows)
                self.add("batch_file_not_live", key, lost, **say)
            if rewritten or moved:
                first = rewritten[0] if rewritten else min(moved)
                v = self.log.removes[first][0] if rewritten else moved[first][0]
                said = {"gen": gen, "files": len(b.files)}
                op, paths = self.log.operations.get(v, ""), rewritten + sorted(moved)
                self.add("batch_file_rewritten", key, paths, n=len(paths), op=op, version=v, **said)
            if compacted:
                say.update(n=len(compacted), version=self.log.removes[compacted[0]][0])
                self.add("batch_file_compacted", key, compacted, **say)
            elif (
                not lost
                and not rewritten
                and not unseen
                and b.rows is not None
                and live_rows is not None
                and live_rows != b.rows
            ):
                say.update(rows=b.rows, files=len(live), live=live_rows)
                self.add("row_count_mismatch", key, live, **say)
        return out

    def check_duplicates(self) -> None:
        owned = {f for b in self.committed() for f in b.files}
        # Files of replaced generations still on disk (until VACUUM): a copy of one, live under
        # another name, puts the old rows back beside the new generation's.
        replaced = {f: b for b in self.committed() for f in b.old_files if f not in self.live}
        live = [f.path for f in self.live.values() if f.on_disk and not f.refused]
        for same in same_bytes(self.path, live + sorted(replaced)):
            copies = [f for f in same if f in self.live]
            if all(f in owned for f in copies):
                continue  # each is listed by its own batch's record: that is data, not a copy
            if not any(f in owned or f in replaced or f.startswith(f"{DATA_DIR}/") for f in same):
                # Every one is another writer's (two identical appends, say): their business,
                # counted as theirs; a copy of a file of ours is what breaks the guarantee.
                continue
            # A zero-row file shows no row twice (empty batches stage identical empty files);
            # the footer says so, not the statistics, which a copy may carry forged.
            if file_rows(self.path, same[0], None) == 0:
                continue
            who = "; ".join(f"{f} ({self.role.get(f, 'of no batch')})" for f in copies)
            batch = next((b.key for b in self.committed() if set(same) & set(b.files)), None)
            if len(copies) > 1:
                self.add(
                    "duplicate_file_content", batch, copies, n=len(copies), rows=self.rows[copies[0]], who=who
                )
                continue
            old = replaced[next(f for f in same if f in replaced)]
            (copy,) = copies
            # It was a foreign file to check_files; it is a replaced generation's file.
            self.findings = [f for f in self.findings if not (f.kind == "foreign_file" and f.paths == [copy])]
            self.role[copy] = f"a copy of a replaced generation's file of batch {old.key.label}"
            self.add(
                "stale_generation_live", old.key, [copy], file=copy, rows=self.rows[copy], gen=old.generation
            )

    def check_total(self) -> None:
        committed = self.committed()
        carrier = {f for b in committed for f in b.files}  # the files that hold batch rows
        ours = {v for v, txns in self.log.commits.items() if any(BatchKey.from_app_id(a) for a, _ in txns)}
        theirs = [f for f in self.live if not f.startswith(f"{DATA_DIR}/")]
        folded: dict[str, int | None] = {}
        # Another writer's commit that rewrote files holding batch rows (OPTIMIZE, DELETE,
        # MERGE, or a rewrite of such a rewrite) holds their rows in its output, in place of
        # its inputs: only the other writers' rows it folded in count as theirs.
        inserted = 0
        # Rows another writer deleted from files that held batch rows and its own rows mixed
        # (an OPTIMIZE or MERGE put them together): whose rows they were, the log cannot tell.
        mixed_deletes: dict[int, int] = {}
        mixed: set[str] = set()  # files holding batch rows and another writer's rows
        theirs_mixed = 0  # other writers' rows that went into such files (rows folded in)
        for v, (added, removed) in sorted(self.log.changes.items()):
            touched = carrier & set(removed)
            if v not in ours and touched:
                # Other writers' files it rewrote, counted before its output joins the carriers
                # (a file it added back in place with a deletion vector is one of them too).
                carried = self.log.removed_hidden.get(v, {})
                theirs_in = [f for f in removed if f not in carrier and not f.startswith(f"{DATA_DIR}/")]
                for f in theirs_in:
                    rows = file_rows(self.path, f, self.log.adds.get(f, (0, True, None))[2])
                    folded[f] = None if rows is None else rows - carried.get(f, 0)
                carrier.update(f for f in added if not f.startswith(f"{DATA_DIR}/"))
                inserts = self._merge_inserts(v, added, removed)
                inserted += inserts
                # Only when every batch-row file it rewrote also held another writer's rows
                # can the rows it deleted have been theirs (Delta rewrites only files in which
                # it deletes a row: a file of batch rows alone lost one of them).
                if touched <= mixed and (gone := self._rows_deleted(v)):
                    mixed_deletes[v] = gone
                outputs, into = self._mixing(v, added, touched, theirs_in, mixed, everywhere=bool(inserts))
                mixed.update(outputs)
                theirs_mixed += sum(folded[f] or 0 for f in into)
        others = [self.rows[f] for f in theirs if f not in carrier]
        unknown = [b for b in committed if b.rows is None]
        # A batch without a recorded count whose files are all live is left out of the count
        # (its files with it); one whose files moved has rows in files the count cannot split.
        moved = any(f not in self.live for b in unknown for f in b.files)
        left_out = {f for b in unknown for f in b.files}
        if (
            None in self.rows.values()
            or None in folded.values()
            or None in others
            or None in self.unseen_rows
            or moved
        ):
            what = ", ".join(b.key.label for b in unknown) or "a file with neither statistics nor a footer"
            self.add("rows_unknown", None, what=what, scope="was not reconciled")
            return
        if unknown:
            what = ", ".join(b.key.label for b in unknown)
            self.add("rows_unknown", None, what=what, scope="leaves them and their files out")
        total = sum(r or 0 for f, r in self.rows.items() if f not in left_out)
        recorded = sum(b.rows or 0 for b in committed)
        other = sum(r or 0 for r in [*others, *folded.values()]) + inserted
        # Batch rows whose files a commit no longer in the log removed are, if that commit was
        # a compaction, in files that are counted as other writers' now: only in those whose
        # origin the log no longer shows, or in the output of a later rewrite of such files.
        # Only as many as those can hold are counted there; the rest left the table.
        unseen = sum(r or 0 for r in self.unseen_rows)
        if unseen:
            cap = self._unseen_capacity(ours, list(folded))
            held = sum(cap.get(f, 0) for f in theirs if f not in carrier) + sum(cap.get(f, 0) for f in folded)
            other -= min(unseen, held)
        say: dict[str, Any] = dict(total=total, batches=len(committed), recorded=recorded, others=other)
        diff = total - recorded - other
        # Rows a DELETE took from mixed files may have been the other writers' rows, but no
        # more of them than other writers ever put into such files.
        if diff < 0 and -diff <= min(sum(mixed_deletes.values()), theirs_mixed + inserted):
            versions = ", ".join(str(v) for v in mixed_deletes)
            self.add("rows_deleted_unattributed", None, diff=-diff, versions=versions, **say)
        elif diff:
            self.add("row_total_mismatch", None, diff=abs(diff), more=("fewer", "more")[diff > 0], **say)

    def _mixing(
        self,
        version: int,
        added: list[str],
        touched: set[str],
        theirs_in: list[str],
        mixed: set[str],
        *,
        everywhere: bool,
    ) -> tuple[list[str], list[str]]:
        """What another writer's rewrite of batch-row files (commit ``version``) mixed: the
        files it ``added`` that may hold batch rows and another writer's rows together, and
        which of the other writers' files it rewrote (``theirs_in``) went into them.
        ``mixed``: the files found mixed so far.

        An OPTIMIZE or a DELETE keeps every row in its partition: only outputs in a partition
        where both batch rows (``touched``, which includes mixed files) and another writer's
        rows came in are mixed. An UPDATE may move rows to another partition and a MERGE
        (``everywhere``: it inserted rows) may put them anywhere, as may a partition that is
        not known: then every output is."""
        outputs = [f for f in added if not f.startswith(f"{DATA_DIR}/")]
        came_in = theirs_in + [f for f in touched if f in mixed]
        if not came_in and not everywhere:
            return [], []
        part = self.log.partitions.get
        if (
            everywhere
            or self.log.operations.get(version) not in ("OPTIMIZE", "DELETE")
            or any(part(f) is None for f in [*touched, *theirs_in, *outputs])
        ):
            return outputs, theirs_in
        both = {part(f) for f in touched} & {part(f) for f in came_in}
        return [f for f in outputs if part(f) in both], [f for f in theirs_in if part(f) in both]

    def _rows_deleted(self, version: int) -> int:
        """The rows another writer's DELETE or MERGE (commit ``version``) deleted: its
        ``operationMetrics``' count, else its input less its output (0 when not known)."""
        op = self.log.operations.get(version)
        if op not in ("DELETE", "MERGE"):
            return 0
        said = self._count(version, "numDeletedRows", "num_deleted_rows", *_MERGE_DELETED)
        if said is not None:
            return said
        rows = self._io_rows(version)
        return 0 if rows is None else max(0, rows[0] - rows[1])

    def _count(self, version: int, *names: str) -> int | None:
        """A count of commit ``version``'s ``operationMetrics``, under the first of ``names``
        it has (Delta Spark's name and delta-rs's differ); ``None`` when it gives none."""
        metrics = self.log.metrics.get(version, {})
        said = next((str(metrics[n]) for n in names if n in metrics), "")
        return int(said) if said.isdigit() else None

    def _rows_of(self, files: list[str]) -> int | None:
        """The rows ``files`` hold (live: their statistics; gone: their add in the log, or the
        footer while the file is on disk); ``None`` when one is not known."""
        total = 0
        for f in files:
            rows = self.rows[f] if f in self.live else None
            if rows is None:
                rows = file_rows(self.path, f, self.log.adds[f][2] if f in self.log.adds else None)
            if rows is None:
                return None
            total += rows
        return total

    def _io_rows(self, version: int) -> tuple[int, int] | None:
        """(rows in, rows out) of commit ``version``: the rows of the files it removed, net of
        the deletion vectors they carried, plus those it hid in place; the rows of the files
        it added, less those it added back in place. ``None`` when a count is not known."""
        added, removed = self.log.changes.get(version, ([], []))
        in_place = self.log.hidden.get(version, {})
        rows_in = self._rows_of([f for f in removed if f not in in_place])
        rows_out = self._rows_of([f for f in added if f not in in_place])
        if rows_in is None or rows_out is None:
            return None
        carried = sum(self.log.removed_hidden.get(version, {}).values())
        return rows_in - carried + sum(in_place.values()), rows_out

    def _merge_inserts(self, version: int, added: list[str], removed: list[str]) -> int:
        """The rows a MERGE inserted in the files it wrote beside the batch rows it rewrote:
        the other writer's rows. Only a MERGE that counts its inserts, and no more than its
        output holds beyond its input: rows any other commit (an OPTIMIZE) added on top of
        what it removed stay unexplained, so a rewrite that doubled batch rows is found."""
        if self.log.operations.get(version) != "MERGE":
            return 0
        count = self._count(version, "numTargetRowsInserted", "num_target_rows_inserted")
        if count is None:
            return 0  # no count of its inserts
        rows = self._io_rows(version)
        if rows is None:
            return 0
        rows_in, rows_out = rows
        # What it wrote beyond what it read and kept: its inserts, plus the rows it deleted.
        deleted = self._count(version, *_MERGE_DELETED) or 0
        return max(0, min(count, rows_out - rows_in + deleted))

    def _kept_rows(self, version: int) -> bool:
        """Whether commit ``version`` is another writer's UPDATE or MERGE that kept every row
        of the files it removed: an UPDATE whose output holds as many rows as its input, a
        MERGE that says it deleted no row and whose output holds at least as many. Anything
        else that removed a batch file (a DELETE, an overwrite) may have dropped rows."""
        op = self.log.operations.get(version)
        added = self.log.changes.get(version, ([], []))[0]
        if op not in ("UPDATE", "MERGE") or not added:
            return False
        if op == "MERGE" and self._count(version, *_MERGE_DELETED) != 0:
            return False  # deleted rows, or no count of them
        # On a table with deletion vectors the files it read stay, with the rows it changed
        # hidden: those rows are its input, and the files it added back are not its output.
        rows = self._io_rows(version)
        if rows is None:
            return False
        rows_in, rows_out = rows
        return rows_out == rows_in if op == "UPDATE" else rows_out >= rows_in

    def _kept_in_place(self, files: list[str]) -> dict[str, tuple[int, int]]:
        """Of the live ``files``, those in which another writer's UPDATE or MERGE (one that
        kept every row it read, see ``_kept_rows``) hid rows with a deletion vector -> (the
        newest such commit, the rows they hid). A DELETE's hidden rows are not among them: the
        batch's live count stays short of its record, and that is reported."""
        out: dict[str, tuple[int, int]] = {}
        for v, in_place in sorted(self.log.hidden.items()):
            mine = {f: rows for f, rows in in_place.items() if f in files and rows > 0}
            if mine and self._kept_rows(v):
                for f, rows in mine.items():
                    out[f] = (v, out.get(f, (v, 0))[1] + rows)
        return out

    def _unseen_capacity(self, ours: set[int], folded: list[str]) -> dict[str, int]:
        """Other writers' files -> how many of their rows may be batch rows that a commit no
        longer in the log moved there: all rows of a file whose add has left the log, and, for
        a later rewrite in the log, as many as its inputs could hold (at most its output)."""

        def rows_of(f: str) -> int | None:
            if f in self.live:
                return self.rows[f]
            return file_rows(self.path, f, self.log.adds[f][2] if f in self.log.adds else None)

        def capacity(f: str) -> int:
            if f in cap:
                return cap[f]
            if f.startswith(f"{DATA_DIR}/") or f in self.log.adds:
                return 0
            rows = rows_of(f)
            return -1 if rows is None else rows  # -1: unknown, bounded by the output below

        cap: dict[str, int] = {}
        for v, (added, removed) in sorted(self.log.changes.items()):
            outs = [f for f in added if not f.startswith(f"{DATA_DIR}/")]
            inputs = [capacity(f) for f in removed]
            if v in ours or not outs or not any(inputs):
                continue
            counts = [rows_of(f) for f in outs]
            out_rows = sum(r or 0 for r in counts)
            held = out_rows if -1 in inputs or None in counts else min(out_rows, sum(inputs))
            cap.update(dict.fromkeys(outs, 0))
            cap[outs[0]] = held  # the outputs together; which one holds them does not matter
        for f in [*self.live, *folded]:
            if f not in cap:
                cap[f] = max(capacity(f), 0)
        return cap

    # -- the quarantine table ------------------------------------------------------------
    def check_quarantine(self) -> None:
        """Each committed generation's outbox (``manifest.extra["quarantine"]``) delivered."""
        held: dict[str, dict[BatchKey, int] | None] = {}
        for b in self.committed():
            record = b.records.get(b.generation) if b.generation is not None else None
            # The record's manifest, or, when its committer died before the record, the
            # manifest of the commit in the log: the outbox rides in both.
            extra = (record or {}).get("manifest", {}).get("extra")
            if extra is None and b.generation is not None:
                extra = self.log.extras.get((b.key.app_id, b.generation))
            box = (extra or {}).get("quarantine")
            if not isinstance(box, dict):
                continue
            staged = (box.get("staged") or {}).get("files") or []
            if not staged and not box.get("replace_previous"):
                continue  # nothing to deliver: the delivery is skipped on purpose
            q = str(box.get("table_uri"))
            if q not in held:
                held[q] = _generations_held(q)
            there = held[q]
            got = None if there is None else there.get(b.key)
            # An empty outbox only has to remove earlier rejects: none there is in step too.
            if got == b.generation or (got is None and not staged):
                continue
            rejects = sum(int(f.get("num_records") or 0) for f in staged)
            what = "no generation" if got is None else f"generation {got}"
            self.add("quarantine_behind", b.key, gen=b.generation, n=rejects, q=q, what=what)

    # -- JDBC interval batches that overlap ---------------------------------------------
    def check_overlapping_intervals(self) -> None:
        """Committed JDBC interval batches of one pipeline whose key ranges overlap (planned
        by a release that did not refuse them, or with the refusal bypassed): a sweep over
        each pipeline's intervals sorted by start, against the furthest end so far."""
        spans: dict[str, list[tuple[datetime, datetime, BatchKey]]] = {}
        for b in self.committed():
            plan = self.plans.get(b.key)
            if plan is not None and _is_jdbc_interval(plan.kind, plan.boundary, plan.source, plan.inputs):
                start, end = _utc(plan.boundary["start"]), _utc(plan.boundary["end"])
                spans.setdefault(b.key.pipeline_id, []).append((start, end, b.key))
        for items in spans.values():
            reach: tuple[datetime, datetime, BatchKey] | None = None  # the furthest-reaching so far
            for start, end, key in sorted(items, key=lambda t: (t[0], t[1], t[2].key)):
                if reach is not None and start < reach[1]:
                    self.add(
                        "overlapping_intervals",
                        key,
                        interval=_span(start, end),
                        other=_span(reach[0], reach[1]),
                        other_key=reach[2].key,
                        overlap=_span(start, min(end, reach[1])),
                    )
                if reach is None or end > reach[1]:
                    reach = (start, end, key)

    # -- plans over time ---------------------------------------------------------------
    def check_plans(self) -> None:
        for key, plan in sorted(self.plans.items(), key=lambda kv: kv[0].label):
            b = self.batches.get(key)
            if (b and b.generation is not None and b.generation >= plan.generation) or not plan.planned_at:
                continue
            age = self.now - datetime.fromisoformat(plan.planned_at)
            say: dict[str, Any] = {"gen": plan.generation, "age": _age(age), "at": plan.planned_at}
            if age > self.stuck_after:
                self.add("stuck_plan", key, **say)
            if self.window is not None and age > self.window * self.expiry_warning:
                tense = "is" if age > self.window - safety_margin(self.window) else "will be"
                say.update(window=_age(self.window), key=RETENTION_KEY, tense=tense)
                self.add("plan_near_expiry", key, **say)


def _utc(text: str) -> datetime:
    t = datetime.fromisoformat(text)
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _span(start: datetime, end: datetime) -> str:
    return f"[{start.isoformat()}, {end.isoformat()})"


def _is_jdbc_interval(kind: str, boundary: dict[str, Any], source: dict[str, Any], inputs: list[Any]) -> bool:
    """A JDBC interval batch (whose rows are its key range); plans older than the source's
    identity in the plan are told by their inputs (a row count, no landing files)."""
    if kind != "interval" or "start" not in boundary or "end" not in boundary:
        return False
    if source:
        return source.get("type") == "jdbc_incremental"
    return bool(inputs) and all(isinstance(i, dict) and "rows" in i and "path" not in i for i in inputs)


def _generations_held(table_uri: str) -> dict[BatchKey, int] | None:
    """The newest generation of each batch a (quarantine) table holds, by its markers and by
    its commit records (markers expire); ``None`` when there is no table there."""
    path = local_path(table_uri)
    try:
        if open_table(path) is None:
            return None
        dt = DeltaTable(path)
    except (EodError, OSError):
        return None
    out: dict[BatchKey, int] = {}
    for app_id, (gen, _) in read_log_facts(path, dt.version()).markers.items():
        if (key := BatchKey.from_app_id(app_id)) is not None:
            out[key] = gen
    for key, gens in read_plan_log_facts(path, str(dt.metadata().id)).records.items():
        out[key] = max(out.get(key, -1), *gens)
    return out


def audit_table(
    table_uri: str,
    *,
    stuck_after: timedelta = timedelta(days=1),
    expiry_warning: float = 0.8,
    now: datetime | None = None,
) -> AuditReport:
    """Audit the table at ``table_uri`` against the guarantee, trusting none of its writers.

    :param table_uri: the Delta table (a local path or ``file://`` URI).
    :param stuck_after: a plan not committed this long after it was planned is reported.
    :param expiry_warning: the fraction of ``delta.setTransactionRetentionDuration`` past
        which markers and uncommitted plans are reported.
    :param now: the time ages are measured at (default: now; a naive value is taken as UTC).
    :raises UnsupportedTableError: when there is no Delta table at ``table_uri``.
    """
    path = local_path(table_uri)
    if open_table(path) is None:
        raise UnsupportedTableError(f"there is no Delta table at {path} (no _delta_log with a commit)")
    now = now or datetime.now(UTC)
    now = now if now.tzinfo else now.replace(tzinfo=UTC)
    audit = _Audit(path, now, stuck_after, expiry_warning)
    audit.resolve()
    audit.check_files()
    batches = audit.check_batches()
    audit.check_duplicates()
    audit.check_total()
    audit.check_plans()
    audit.check_overlapping_intervals()
    audit.check_quarantine()
    return AuditReport(path, audit.version, now, batches, audit.findings)
