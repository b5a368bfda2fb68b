"""What the audit reports: the fixed kinds of finding, their messages, and the report.

Each kind in :data:`SAYS` has a severity (errors: the guarantee is broken, or will be;
warnings: worth a look) and a message; :func:`finding` writes one, naming the runbook section
(:data:`SECTIONS`) that says what to do. docs/reference.md says what each kind means.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from airflow_eod.core.batch import BatchKey

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
    "merge_duplicate_key": (ERROR, "{n} key(s) ({keys}) {scope} have more than one live row (e.g. "
        "{examples}): a merge keeps one live row per key, so another writer added rows of keys a merge "
        "holds (an append, a copied file), and readers see those keys more than once"),
    "merge_key_regressed": (ERROR, "generation {gen}: {n} of the {keys} key(s) it loaded are live at "
        "an older {order} than the batch's, or at the same {order} with the other delete-ness (e.g. "
        "{examples}): a merge never replaces a row with an older one, so another writer put an older "
        "row back (a rewrite, a delete undone, a tombstone overwritten)"),
    "merge_key_lost": (ERROR, "generation {gen}: {n} of the {keys} key(s) it loaded have no live row, "
        "and no merge batch deleted them at the batch's {order} or later (e.g. {examples}): their rows "
        "left the table (another writer's DELETE or overwrite, a removed file)"),
    "merge_keys_refused": (ERROR, "generation {gen}: its manifest names {dir} as its key digest, which "
        "is refused ({why}); nothing was read there and its keys were not checked: airflow-eod's "
        "manifests name the batch's own digest folder"),
    "quarantine_behind": (ERROR, "generation {gen}: its commit carries {n} malformed record(s) for the "
        "quarantine table {q}, which holds {what} of the batch: the two tables describe different "
        "generations (unless a load of the batch is running right now)"),
    "stuck_plan": (WARNING, "generation {gen} was planned {age} ago ({at}) and never committed"),
    "marker_near_expiry": (WARNING, "its marker (generation {gen}) is {age}; its commit record "
        "answers once it expires"),
    "plan_near_expiry": (WARNING, "generation {gen} was planned {age} ago ({at}) and never committed; "
        "the table's retention window is {window} ({key}), so loading it {tense} refused with "
        "RetentionWindowError: restate it on purpose"),
    "batch_file_merged": (WARNING, "generation {gen}: {n} of its {files} file(s) were rewritten by the "
        "merge of {by} (commit {version}), which replaces the rows of keys it loads newer rows of: its "
        "row count cannot be checked (it is left out of the table-wide count), and it cannot be "
        "restated"),
    "merge_keys_missing": (WARNING, "generation {gen}: its key digest {why}, so its keys were not "
        "checked against the table"),
    "merge_keys_unchecked": (WARNING, "merge key ({keys}): {what}, because {why}"),
    "rows_unknown": (WARNING, "the rows of {what} are unknown, so the table-wide row count {scope}"),
}  # fmt: skip
# The runbook section for each kind ("`airflow-eod verify` reports ..." for the others).
SECTIONS = {
    **dict.fromkeys(
        ["file_in_two_batches", "corrupt_record", "record_without_marker_commit"], "a corrupt commit record"
    ),
    "corrupt_plan_log_entry": "plan-log entry ... is corrupt / fails its checksum",
    "stuck_plan": "A batch is stuck (planned, never committed)",
    "plan_near_expiry": "older than the table's transaction-retention window",
    "quarantine_behind": "The quarantine table is behind the main table",
    "overlapping_intervals": "Two JDBC interval batches overlap",
    **dict.fromkeys(
        ["merge_duplicate_key", "merge_key_regressed", "merge_key_lost", "merge_keys_refused"],
        "A merge key is duplicated, regressed or lost",
    ),
}


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


def finding(kind: str, batch: BatchKey | None, paths: list[str] | None = None, **say: Any) -> Finding:
    """A finding of ``kind`` (a key of :data:`SAYS`), its message filled in with ``say``.

    :param kind: the kind of finding.
    :param batch: the batch it concerns, if one (its label starts the message).
    :param paths: the files it names, relative to the table root.
    :param say: the values the kind's message names.
    """
    severity, text = SAYS[kind]
    where = SECTIONS.get(kind, "`airflow-eod verify` reports ...")
    about = f"batch {batch.label}: " if batch else ""
    message = f"{about}{text.format(**say)}; see docs/runbook.md, '{where}'"
    pipeline, key = (batch.pipeline_id, batch.key) if batch else (None, None)
    return Finding(severity, kind, pipeline, key, message, sorted(paths or []))


def age_words(span: timedelta) -> str:
    """``span`` as a finding says it: days from two days on, hours below."""
    days = span.total_seconds() / 86400
    return f"{days:.1f} days" if days >= 2 else f"{days * 24:.1f} hours"
