"""The plan log: frozen batch plans stored beside the table with put-if-absent.

Every attempt of a batch (a retry, a re-planned run, a zombie) must read exactly the same
slice (invariant I3). The first attempt to plan a batch writes its plan here; every later
attempt finds that plan and uses it. Spark Structured Streaming's offsets log is the model.

Layout, under ``<table>/_eod/pipelines/<pipeline_id>/``::

    intervals/<batch_key>.json   plan of an interval batch
    offsets/<seq>.json           plan of the seq-th offset batch (seq is 8 digits)
    ....g<N>.json                the plan of generation N (a restatement) of that batch
    claims/<run hash>.json       which offset batch a DAG run is loading
    restatements/<hash>.json     which generation a DAG run restates a batch to

Entries carry a checksum; an entry that does not parse or whose checksum does not match
(hand edits, truncation) raises :class:`PlanLogError` rather than being used.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from airflow_eod.core.atomic_file import put_if_absent
from airflow_eod.core.batch import BatchKey, fingerprint, validate_pipeline_id
from airflow_eod.core.errors import PlanLogError
from airflow_eod.core.table_layout import META_DIR, local_path

PLAN_FORMAT = 1
INTERVAL = "interval"
OFFSETS = "offsets"


@dataclass(frozen=True)
class Plan:
    """A frozen batch plan.

    :param pipeline_id: the pipeline.
    :param batch_key: the batch key derived from the boundary.
    :param kind: ``interval`` or ``offsets``.
    :param boundary: the interval (``start``/``end``) or the offset range.
    :param inputs: the frozen inputs, e.g. files with path, size and mtime.
    :param seq: the position of an offset batch in its pipeline (``None`` for intervals).
    :param planned_at: when the plan was first written (ISO 8601, UTC).
    :param generation: 0 for the first load; N for the plan of the N-th restatement.
    """

    pipeline_id: str
    batch_key: str
    kind: str
    boundary: dict[str, Any]
    inputs: list[dict[str, Any]]
    seq: int | None = None
    planned_at: str = ""
    generation: int = 0

    @property
    def key(self) -> BatchKey:
        return BatchKey(self.pipeline_id, self.batch_key)

    @property
    def input_fingerprint(self) -> str:
        return fingerprint({"boundary": self.boundary, "inputs": self.inputs})

    def to_json(self) -> str:
        """The plan as JSON: what a submitted Spark driver receives."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        return cls(**json.loads(text))


def _now_iso() -> str:
    return datetime.now(UTC).isoformat()


class PlanLog:
    """The plan log of one pipeline on one table.

    :param table_uri: the target Delta table (local or shared-filesystem path).
    :param pipeline_id: the pipeline whose plans this log holds.
    """

    def __init__(self, table_uri: str, pipeline_id: str) -> None:
        self.pipeline_id = validate_pipeline_id(pipeline_id)
        self.root = os.path.join(local_path(table_uri), META_DIR, "pipelines", pipeline_id)

    # -- low level ---------------------------------------------------------------
    def _path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def _put_if_absent(self, path: str, body: dict[str, Any]) -> bool:
        """Write ``body`` at ``path`` unless something is there; True if we wrote it."""
        payload = dict(body, format=PLAN_FORMAT)
        payload["checksum"] = fingerprint(payload)
        return put_if_absent(path, json.dumps(payload, sort_keys=True))

    def _read(self, path: str) -> dict[str, Any] | None:
        try:
            with open(path) as fh:
                text = fh.read()
        except FileNotFoundError:
            return None
        try:
            payload = json.loads(text)
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

    def offset_seqs(self) -> list[int]:
        """The sequence numbers of every stored offset plan, ascending."""
        try:
            names = os.listdir(self._path("offsets"))
        except FileNotFoundError:
            return []
        return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())

    def get_offset_plan(self, seq: int) -> Plan:
        path = self._plan_path(OFFSETS, "", seq)
        plan = self._plan_from(path, self._read(path))
        if plan is None:
            raise PlanLogError(f"plan-log entry {path} is missing")
        return plan

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

    def claim_restatement(self, run_token: str, batch_key: str, generation: int) -> int:
        """Record that the run ``run_token`` restates ``batch_key`` to ``generation``; a retry of
        the same run gets the generation of its first claim, so it never restates twice."""
        path = self._restatement_path(run_token, batch_key)
        self._put_if_absent(path, {"run_token": run_token, "batch_key": batch_key, "generation": generation})
        body = self._read(path)
        if body is None or body.get("batch_key") != batch_key or not isinstance(body.get("generation"), int):
            raise PlanLogError(f"restatement claim {path} is inconsistent")
        return int(body["generation"])
