"""The plan log: frozen batch plans stored beside the table with put-if-absent.

Every attempt of a batch (a retry, a re-planned run, a zombie) must read exactly the same
slice (invariant I3). The first attempt to plan a batch writes its plan here; every later
attempt finds that plan and uses it. Spark Structured Streaming's offsets log is the model.

Layout, under ``<table>/_eod/pipelines/<pipeline_id>/``::

    intervals/<batch_key>.json   plan of an interval batch
    offsets/<seq>.json           plan of the seq-th offset batch (seq is 8 digits)
    ....g<N>.json                the plan of generation N (a restatement) of that batch
    claims/<run hash>.json       which offset batch a DAG run is loading
    restatements/<hash>[.N].json which generation a DAG run restates a batch to (a chain:
                                 link N+1 re-freezes a restatement whose input changed)
    files/<path hash>.json       which interval batch owns a landing file (first claim wins)
    spans/<day>/<start>_<end>.json  the intervals a JDBC pipeline froze, by the UTC days they
                                 touch (see :mod:`airflow_eod.core.planlog.intervals`)
    loaded/<seq>.json            the inputs every offset batch up to <seq> loaded (an index,
                                 see :mod:`airflow_eod.core.planlog.offsets`)
    batches/<batch_key>/g<N>.<table id>.json  the durable commit record of generation N
                                 (kept by :mod:`airflow_eod.core.records.record_files`)
    segments/<bucket>/<gen>.json settled entries, compacted (:mod:`.segments`; every read and
                                 listing here looks at the stored entries first, then there)

Entries carry their format, the id of the attempt that wrote them and a checksum, an
envelope the readers here take off again (entries of older releases have no attempt id); an
entry that does not parse or whose checksum does not match (hand edits, truncation) raises
:class:`PlanLogError` rather than being used. Every entry is written once and never
changed, so any reader, at any time, sees the same answer.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from airflow_eod.core import bounded_json
from airflow_eod.core.attempt import current_attempt_id
from airflow_eod.core.batch import fingerprint, validate_pipeline_id
from airflow_eod.core.delta.binding import bound_table_id, check_table_identity
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import PlanLogError, UnsafePathError
from airflow_eod.core.planlog.plan import INTERVAL, OFFSETS, PLAN_FORMAT, Plan
from airflow_eod.core.planlog.segments import Segments
from airflow_eod.core.storage import put_settled
from airflow_eod.core.table_layout import path_part
from airflow_eod.core.table_ref import TableRef

__all__ = ["INTERVAL", "OFFSETS", "PLAN_FORMAT", "Plan", "PlanLog", "record_name", "recorded_generations"]


def record_name(generation: int, table_id: str) -> str:
    """The name of the commit record of ``generation`` in table ``table_id`` (in
    ``batches/<batch key>/``; the records themselves are :mod:`airflow_eod.core.records`'s)."""
    # The table id is in the name: a table re-created at the same path gets records of
    # its own instead of finding the old table's in a write-once slot. It is the table's
    # metaData.id, written by whoever created the table: one safe name, or refused.
    return f"g{int(generation)}.{path_part(table_id, 'table id (metaData.id)')}.json"


def recorded_generations(names: list[str], table_id: str) -> list[int]:
    """The generations that ``names`` (of a batch's record directory) hold records of in
    table ``table_id``."""
    suffix = f".{path_part(table_id, 'table id (metaData.id)')}.json"
    return [
        int(n[1 : -len(suffix)])
        for n in names
        if n.startswith("g") and n.endswith(suffix) and n[1 : -len(suffix)].isdigit()
    ]


def _now_iso() -> str:
    return datetime.now(UTC).isoformat()


class PlanLog:
    """The plan log of one pipeline on one table.

    :param ref: the target Delta table.
    :param pipeline_id: the pipeline whose plans this log holds.
    """

    def __init__(self, ref: TableRef, pipeline_id: str) -> None:
        self.pipeline_id = validate_pipeline_id(pipeline_id)
        self.ref = ref
        self.table_path = ref.path
        self.root = os.path.join(self.table_path, *ref.plan_log_key(self.pipeline_id).split("/"))
        self._target_checked = False
        # The table's bytes. Short-lived, as this instance is: the directories it found to be
        # no link are not looked at again.
        self.storage = ref.storage()
        self.segments = Segments(storage=self.storage, root=self._key())

    # -- low level ---------------------------------------------------------------
    def _key(self, *parts: str) -> str:
        """The storage key of an entry: every part one safe name (batch keys, table ids and
        names listed here come from the table's files)."""
        parts = (*self.ref.plan_log_key(self.pipeline_id).split("/"), *parts)
        return "/".join(path_part(part, "plan-log name") for part in parts)

    def _path(self, *parts: str) -> str:
        """A path in the plan log (see :meth:`_key`), refused when a link on the way leads
        out of the table."""
        return self.storage.where(self._key(*parts))

    def entry_path(self, *parts: str) -> str:
        """The path of the entry ``parts`` (names below the plan log's root)."""
        return self._path(*parts)

    def names(self, *parts: str) -> list[str]:
        """The names in the plan-log directory ``parts``, sorted (none when it is missing),
        with those of its entries that segments hold."""
        stored = self.storage.list(self._key(*parts))
        return sorted(set(stored) | self.segments.names_under(self._rel(self._key(*parts))))

    def _rel(self, key: str) -> str:
        """The key of an entry below the plan log (a segment's name for it)."""
        return key[len(self._key()) + 1 :]

    def key_of(self, path: str) -> str:
        """The storage key of ``path`` (a path in this table, from :meth:`_path`)."""
        try:
            return self.storage.key_of(path)
        except UnsafePathError:
            raise PlanLogError(f"plan-log entry {path} is outside the table {self.table_path}") from None

    def _check_target(self) -> None:
        """Refuse to write beside a directory that is neither a Delta table nor empty: a
        refused load must leave someone else's directory exactly as it was."""
        if self._target_checked:
            return
        table = open_table(self.ref)  # raises UnsupportedTableError for a foreign directory
        check_table_identity(self.ref, None if table is None else str(table.metadata().id))
        self._target_checked = True

    def _put_if_absent(self, path: str, body: dict[str, Any]) -> bool:
        """Write ``body`` at ``path`` unless something is there; True if we wrote it. The
        envelope's attempt id tells this attempt's write from another's after an unknown
        outcome (:func:`~airflow_eod.core.storage.base.put_settled`); :meth:`_read` drops it."""
        self._check_target()
        ident = current_attempt_id()
        payload = dict(body, format=PLAN_FORMAT, attempt=ident)
        payload["checksum"] = fingerprint(payload)
        data = json.dumps(payload, sort_keys=True).encode()
        key = self.key_of(path)
        if self.segments.get(self._rel(key)) is not None:
            return False  # compacted: the segment holds the entry
        if not put_settled(self.storage, key, data, attempt=ident):
            return False
        if self.segments.get(self._rel(key)) is not None:
            # A writer paused across a compaction of this key: the segment's body wins.
            self.storage.delete(key)
            return False
        return True

    def write_entry(self, path: str, body: dict[str, Any]) -> bool:
        """Write the checksummed entry ``body`` at ``path`` (from :meth:`entry_path`, which
        refused links leading out) unless one is there; True if this call wrote it."""
        return self._put_if_absent(path, body)

    def put_entry(self, path: str, body: dict[str, Any]) -> bool:
        """Write the checksummed entry ``body`` at ``path`` (under this log) unless one is there."""
        root = os.path.realpath(self.root)
        if self.ref.is_local and os.path.commonpath([root, os.path.realpath(os.path.dirname(path))]) != root:
            # A linked directory under the log must not take the entry elsewhere (I11).
            raise PlanLogError(f"plan-log entry {path} is outside the plan log {self.root}")
        return self._put_if_absent(path, body)

    def read_entry(self, path: str) -> dict[str, Any] | None:
        """The checksummed entry at ``path`` (from :meth:`entry_path`), or ``None``."""
        return self._read(path)

    def _read(self, path: str) -> dict[str, Any] | None:
        rel = self._rel(self.key_of(path))
        try:
            text: bytes | None = self.storage.get(self.key_of(path), limit=bounded_json.MAX_PLAN_LOG_ENTRY)
        except FileNotFoundError:
            text = None
        except (bounded_json.JsonBoundError, IsADirectoryError) as exc:  # too large, a link, a device
            raise PlanLogError(
                f"plan-log entry {path} is corrupt ({exc}); see the runbook, 'a corrupt plan-log entry'"
            ) from None
        # A segment's entry wins over a stored one, which can then only be a copy that a writer
        # killed between its put and its second look at the segments left behind.
        if text is None or self.segments.present(fresh=False):
            text = self.segments.get(rel, fresh=False) or text
        if text is None:
            return None
        try:
            payload: dict[str, Any] = bounded_json.loads(text)
            checksum = payload.pop("checksum")
        except (ValueError, KeyError, AttributeError, TypeError) as exc:
            raise PlanLogError(
                f"plan-log entry {path} is corrupt ({exc}); see the runbook, 'a corrupt plan-log entry'"
            ) from None
        if fingerprint(payload) != checksum or payload.get("format") != PLAN_FORMAT:
            raise PlanLogError(
                f"plan-log entry {path} fails its checksum (edited by hand or truncated); "
                "see the runbook, 'a corrupt plan-log entry'"
            )
        payload.pop("format")
        # Entries of releases before the attempt id have none: both read the same.
        payload.pop("attempt", None)
        return payload

    def _plan_from(self, path: str, body: dict[str, Any] | None) -> Plan | None:
        if body is None:
            return None
        try:
            plan = Plan(**body)
        except TypeError as exc:
            raise PlanLogError(f"plan-log entry {path} has an unexpected shape: {exc}") from None
        if plan.pipeline_id != self.pipeline_id:
            raise PlanLogError(
                f"plan-log entry {path} belongs to pipeline {plan.pipeline_id!r}, not {self.pipeline_id!r}"
            )
        return plan

    # -- plans -------------------------------------------------------------------
    def _plan_path(self, plan_kind: str, batch_key: str, seq: int | None, generation: int = 0) -> str:
        suffix = f".g{generation}.json" if generation else ".json"
        if plan_kind == OFFSETS:
            return self._path("offsets", f"{seq:08d}{suffix}")
        return self._path("intervals", f"{batch_key}{suffix}")

    def put_plan(self, plan: Plan) -> Plan:
        """Store ``plan`` unless its slot is taken; return the plan that holds the slot.

        For an offset batch the slot is its sequence number, so two planners racing for
        batch N both end up with the one plan that won.
        """
        path = self._plan_path(plan.kind, plan.batch_key, plan.seq, plan.generation)
        body = asdict(plan)
        if not body["planned_at"]:
            body["planned_at"] = _now_iso()
        self._put_if_absent(path, body)
        stored = self._plan_from(path, self._read(path))
        assert stored is not None  # we, or a racer, just wrote it
        return stored

    def get_plan(self, batch_key: str, generation: int = 0) -> Plan | None:
        """The stored plan of ``batch_key`` at ``generation``, or ``None``."""
        if batch_key.startswith("o-"):
            try:
                seq = int(batch_key.split("-")[1])
            except (IndexError, ValueError):
                raise PlanLogError(f"batch key {batch_key!r} is not an offset key") from None
            path = self._plan_path(OFFSETS, batch_key, seq, generation)
            plan = self._plan_from(path, self._read(path))
            if plan is not None and plan.batch_key != batch_key:
                return None
            return plan
        path = self._plan_path(INTERVAL, batch_key, None, generation)
        return self._plan_from(path, self._read(path))

    def bound_table_id(self) -> str | None:
        """The id of the table this plan log is bound to (set by the first commit)."""
        return bound_table_id(self.ref)

    def newest_generation(self, batch_key: str) -> int:
        """The newest generation planned for ``batch_key`` (0 when only the first plan, or
        none, exists). Generations are planned one after another, so this probes upward."""
        gen = 0
        while self.get_plan(batch_key, gen + 1) is not None:
            gen += 1
        return gen

    def check_source(self, plan: Plan, source: dict[str, Any]) -> Plan:
        """``plan`` if it was planned from ``source``; a stored plan of another source (a
        mapped task's other directory, a changed landing path or table) is refused, never
        silently reused."""
        if plan.source and source and plan.source != source:
            raise PlanLogError(
                f"batch {plan.key.label} was planned from {json.dumps(plan.source, sort_keys=True)}, "
                f"but this attempt's source is {json.dumps(source, sort_keys=True)}; a stored plan "
                "is never reused for another source. Point the task back at the source it was "
                "planned from (a moved or renamed landing directory holds new files: move it back), "
                "or give each source its own pipeline_id (mapped tasks: one per mapped value)"
            )
        return plan

    def newest_offset_seq(self) -> int | None:
        """The sequence number of the newest offset plan, or ``None``.

        Offset plans are numbered without gaps and never removed, so the plans that exist
        are ``0..N``: a galloping search from the newest loaded index (if any) finds ``N``
        in ``O(log N)`` probes, where a listing or a probe of every number would grow with
        the pipeline's history (a JDBC pipeline writes no loaded index).
        """
        indexed = self._newest_index_seq()

        def planned(seq: int) -> bool:
            key = self.key_of(self._plan_path(OFFSETS, "", seq))
            return self.storage.head(key) is not None or self.segments.get(self._rel(key)) is not None

        low = -1 if indexed is None else indexed  # planned (or -1)
        step, high = 1, low + 1
        while planned(high):
            low, high = high, high + step
            step *= 2
        while high - low > 1:  # low is planned, high is not
            mid = (low + high) // 2
            low, high = (mid, high) if planned(mid) else (low, mid)
        return None if low < 0 else low

    def get_offset_plan(self, seq: int) -> Plan:
        path = self._plan_path(OFFSETS, "", seq)
        plan = self._plan_from(path, self._read(path))
        if plan is None:
            raise PlanLogError(f"plan-log entry {path} is missing")
        return plan

    # -- the loaded index (offset batches) ----------------------------------------
    def _newest_index_seq(self) -> int | None:
        names = self.names("loaded")
        seqs = [int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit()]
        return max(seqs) if seqs else None

    def loaded_index(self) -> tuple[int, list[str]] | None:
        """The newest index: ``(seq, keys of every batch up to seq)``, or ``None``."""
        seq = self._newest_index_seq()
        if seq is None:
            return None
        path = self._path("loaded", f"{seq:08d}.json")
        body = self._read(path)
        if body is None or body.get("through") != seq or not isinstance(body.get("keys"), list):
            raise PlanLogError(f"loaded index {path} is inconsistent")
        return seq, [str(k) for k in body["keys"]]

    def put_loaded_index(self, seq: int, keys: list[str]) -> None:
        """Store the index of every batch up to ``seq`` (first writer wins: racers compute
        the same keys from the same committed plans)."""
        self._put_if_absent(self._path("loaded", f"{seq:08d}.json"), {"through": seq, "keys": keys})

    # -- claims ------------------------------------------------------------------
    def _claim_path(self, run_token: str) -> str:
        return self._path("claims", f"{fingerprint(run_token)[:32]}.json")

    def claim(self, run_token: str, seq: int) -> int:
        """Record that the run ``run_token`` loads offset batch ``seq`` (first claim wins)."""
        path = self._claim_path(run_token)
        self._put_if_absent(path, {"run_token": run_token, "seq": seq})
        claimed = self.claimed_seq(run_token)
        assert claimed is not None  # we, or a racer for the same run, just wrote it
        return claimed

    def claimed_seq(self, run_token: str) -> int | None:
        """The offset batch the run ``run_token`` claimed, or ``None``."""
        body = self._read(self._claim_path(run_token))
        if body is None:
            return None
        if body.get("run_token") != run_token or not isinstance(body.get("seq"), int):
            raise PlanLogError(f"claim {self._claim_path(run_token)} is inconsistent")
        return int(body["seq"])

    # -- restatements ------------------------------------------------------------
    def _restatement_path(self, run_token: str, batch_key: str) -> str:
        return self._path("restatements", f"{fingerprint([run_token, batch_key])[:32]}.json")

    def _restatement_link(self, run_token: str, batch_key: str, link: int) -> str:
        path = self._restatement_path(run_token, batch_key)
        return path if link == 0 else f"{path[: -len('.json')]}.{link}.json"

    def _read_link(self, path: str, batch_key: str) -> int | None:
        body = self._read(path)
        if body is None:
            return None
        if body.get("batch_key") != batch_key or not isinstance(body.get("generation"), int):
            raise PlanLogError(f"restatement claim {path} is inconsistent")
        return int(body["generation"])

    def claim_restatement(self, run_token: str, batch_key: str, generation: int) -> int:
        """Record that the run ``run_token`` restates ``batch_key`` to ``generation``; a retry of
        the same run gets the generation of its newest claim, so it never restates twice."""
        path = self._restatement_link(run_token, batch_key, 0)
        self._put_if_absent(path, {"run_token": run_token, "batch_key": batch_key, "generation": generation})
        link, claimed = 0, self._read_link(path, batch_key)
        while True:
            nxt = self._read_link(self._restatement_link(run_token, batch_key, link + 1), batch_key)
            if nxt is None:
                break
            link, claimed = link + 1, nxt
        assert claimed is not None  # we, or a racer for the same run, just wrote link 0
        return claimed

    def reclaim_restatement(self, run_token: str, batch_key: str, stale: int, generation: int) -> int:
        """Move the run's restatement of ``batch_key`` from the uncommitted generation ``stale``
        (its input changed again) to ``generation``. Two tries racing here write the same next
        link; the first wins and both use it, so one re-freeze happens, not two."""
        link = 0
        while True:
            claimed = self._read_link(self._restatement_link(run_token, batch_key, link), batch_key)
            if claimed is None:
                raise PlanLogError(f"run {run_token} has no restatement claim for batch {batch_key}")
            if claimed == stale:
                break
            link += 1
        path = self._restatement_link(run_token, batch_key, link + 1)
        self._put_if_absent(path, {"run_token": run_token, "batch_key": batch_key, "generation": generation})
        result = self._read_link(path, batch_key)
        assert result is not None
        return result

    # -- file ownership (interval batches) ---------------------------------------
    def _file_path(self, path: str) -> str:
        return self._path("files", f"{fingerprint(path)[:40]}.json")

    def file_owner(self, path: str) -> dict[str, Any] | None:
        """The claim on the landing file ``path`` (``batch_key``, and the ``size`` and
        ``mtime_ns`` it had when claimed), or ``None``."""
        body = self._read(self._file_path(path))
        if body is None:
            return None
        if body.get("path") != path or not isinstance(body.get("batch_key"), str):
            raise PlanLogError(f"file claim {self._file_path(path)} is inconsistent")
        return body

    def claim_file(self, entry: dict[str, Any], batch_key: str) -> dict[str, Any]:
        """Make ``batch_key`` the owner of the landing file ``entry`` (path, size, mtime_ns)
        unless a batch already is; return the claim. Ownership is written once, so every
        attempt of every batch sees the same owner."""
        path = entry["path"]
        claim = self.file_owner(path)
        if claim is None:
            body = {
                "path": path,
                "batch_key": batch_key,
                "size": entry.get("size"),
                "mtime_ns": entry.get("mtime_ns"),
            }
            if "etag" in entry:  # a file on an object store is told apart by its ETag
                body["etag"] = entry["etag"]
            self._put_if_absent(self._file_path(path), body)
            claim = self.file_owner(path)
        assert claim is not None
        return claim

    def boundary_kinds(self) -> set[str]:
        """Which kinds of plans (``interval``, ``offsets``) this pipeline has stored."""
        kinds = {INTERVAL: "intervals", OFFSETS: "offsets"}
        # Whether the folder is there, not what it holds: it grows with the pipeline's history,
        # and planning lists no folder of it (the cost tests pin that). A store without
        # folders will answer with a listing of one name.
        # Compaction leaves the newest settled plans in place: segments are asked only here.
        held = self.segments.holds
        return {k for k, f in kinds.items() if self.storage.has_prefix(self._key(f)) or held(f)}
