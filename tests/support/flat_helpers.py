"""Helpers of the flat-cost tests (tests/core/test_flat_cost.py, tests/regressions/test_flat_adversary.py and
the racer scripts those start in other processes): offset batches of one row each, staged
with pyarrow as Spark would stage them and committed through the real engine."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import Schema

from airflow_eod.core.ask import ask
from airflow_eod.core.delta.parquet_stats import file_stats
from airflow_eod.core.load_commit import commit_batch
from airflow_eod.core.manifest import Manifest
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.staged_files import StagedBatch, StagedFile
from airflow_eod.core.table_layout import attempt_dir
from airflow_eod.core.table_ref import TableRef
from airflow_eod.sources.landing_files import LandingFilesSource

PIPELINE = "tests.flat"
CONFIG = {"delta.checkpointInterval": "10"}


def stage_offset_batch(table: str, plan: Plan) -> tuple[StagedBatch, Manifest]:
    attempt = uuid.uuid4().hex[:16]
    rel_dir = attempt_dir(plan.key, plan.generation, attempt)
    os.makedirs(os.path.join(table, rel_dir), exist_ok=True)
    rel = f"{rel_dir}/part-0.parquet"
    data = pa.table({"seq": pa.array([plan.seq or 0], pa.int64())})
    pq.write_table(data, os.path.join(table, rel))
    rows, stats = file_stats(os.path.join(table, rel))
    st = os.stat(os.path.join(table, rel))
    staged = StagedBatch(
        Schema.from_arrow(data.schema).to_json(),
        [],
        rel_dir,
        [StagedFile(rel, st.st_size, int(st.st_mtime * 1000), {}, rows, stats)],
    )
    manifest = Manifest(
        plan.pipeline_id,
        plan.batch_key,
        plan.generation,
        plan.boundary,
        plan.input_fingerprint,
        rows,
        1,
        attempt,
        "delta-rs",
    )
    return staged, manifest


def grow(table: str, landing: str, upto: int) -> list[Plan]:
    """Land one file per batch and load batches until the table holds ``upto`` of them."""
    source = LandingFilesSource(path=landing, file_format="csv")
    plans: list[Plan] = []
    seq = PlanLog(TableRef.parse(table), PIPELINE).newest_offset_seq()
    for n in range(0 if seq is None else seq + 1, upto):
        with open(os.path.join(landing, f"f{n:05d}.csv"), "w") as fh:
            fh.write(f"seq\n{n}\n")
        plan = source.plan(
            PlanLog(TableRef.parse(table), PIPELINE),
            run_token=f"run-{n}",
            is_committed=lambda k: ask(TableRef.parse(table), k).committed,
        )
        assert plan is not None and plan.seq == n
        commit_batch(
            TableRef.parse(table), plan.key, 0, *stage_offset_batch(table, plan), table_configuration=CONFIG
        )
        plans.append(plan)
    return plans


def stage_tagged(table: str, plan: Any, tag: str) -> tuple[Any, Any]:
    """``stage_offset_batch`` with the pipeline in each row, so rows say which batch they came from."""

    staged, manifest = stage_offset_batch(table, plan)
    f = staged.files[0]
    path = os.path.join(table, f.path)
    data = pa.table({"seq": pa.array([plan.seq], pa.int64()), "src": pa.array([tag], pa.string())})
    pq.write_table(data, path)
    rows, stats = file_stats(path)
    st = os.stat(path)
    staged = StagedBatch(
        Schema.from_arrow(data.schema).to_json(),
        [],
        staged.attempt_dir,
        [StagedFile(f.path, st.st_size, int(st.st_mtime * 1000), {}, rows, stats)],
    )
    return staged, manifest
