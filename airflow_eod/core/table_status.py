"""A per-pipeline summary of what a table holds, for the ``airflow-eod status`` command."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from airflow_eod.core.ask import open_table
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.plan_log import PlanLog
from airflow_eod.core.table_layout import META_DIR, local_path


@dataclass
class BatchSummary:
    """One batch as the table sees it."""

    batch_key: str
    generation: int | None
    table_version: int | None
    rows: int | None


@dataclass
class PipelineSummary:
    """Every batch of one pipeline that the plan log or the log's manifests know of."""

    pipeline_id: str
    batches: list[BatchSummary] = field(default_factory=list)

    @property
    def committed(self) -> list[BatchSummary]:
        return [b for b in self.batches if b.generation is not None]

    @property
    def pending(self) -> list[BatchSummary]:
        return [b for b in self.batches if b.generation is None]


def _planned_keys(table_uri: str) -> dict[str, set[str]]:
    root = os.path.join(local_path(table_uri), META_DIR, "pipelines")
    found: dict[str, set[str]] = {}
    for pipeline in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        log = PlanLog(table_uri, pipeline)
        keys = {log.get_offset_plan(s).batch_key for s in log.offset_seqs()}
        idir = os.path.join(log.root, "intervals")
        if os.path.isdir(idir):
            keys |= {n[:-5] for n in os.listdir(idir) if n.endswith(".json") and ".g" not in n}
        found[pipeline] = keys
    return found


def table_status(table_uri: str) -> list[PipelineSummary]:
    """Summaries of every pipeline that has loaded, or planned, into ``table_uri``."""
    table = open_table(table_uri)
    keys = _planned_keys(table_uri)
    landed: dict[tuple[str, str, int], tuple[int, Manifest]] = {}
    if table is not None:
        for info in table.history():
            m = Manifest.from_user_metadata(info.get("userMetadata"))
            if m is not None:
                keys.setdefault(m.pipeline_id, set()).add(m.batch_key)
                landed.setdefault((m.pipeline_id, m.batch_key, m.generation), (int(info["version"]), m))
    out: list[PipelineSummary] = []
    for pipeline in sorted(keys):
        summary = PipelineSummary(pipeline)
        for key in sorted(keys[pipeline]):
            gen = table.transaction_version(BatchKey(pipeline, key).app_id) if table is not None else None
            hit = landed.get((pipeline, key, gen)) if gen is not None else None
            summary.batches.append(
                BatchSummary(key, gen, hit[0] if hit else None, hit[1].rows if hit else None)
            )
        out.append(summary)
    return out
