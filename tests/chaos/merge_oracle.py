"""The merge checker: the table against the source's newest row per key, row by row.

What the table must hold is the newest change per key (tombstones included) over the
batches the table says are committed: their keys come from the table (``table_status`` and
``ask``, the markers and commit records), their files from the plan each committed
generation froze, and each planned file is matched to the version the world wrote by its
fingerprint (:meth:`~tests.chaos.merge_world.MergeWorld.version_of`). The rows are never
taken from the write path: the world knows every change. A committed batch's earlier
generations (a restatement re-applies a batch; what the first generation merged stays where
nothing newer replaced it) may have contributed rows too, never older ones.

Independently of the plans: a file that is there at the end and was due (not late, not
hidden) is in some committed batch, and no file is in two committed batches of a pipeline.

Findings, each a line a person can read:

- **duplicates**: a key with more than one row; a file in two committed batches;
- **losses**: a key some committed batch changed that the table lacks; a due file in no
  committed batch;
- **wrong**: a row no change wrote, a row that differs from its change, a row older than the
  newest committed change of its key (regressed), a row of a change no committed batch
  holds, a committed plan's file version the world never wrote, and the two readers (delta-rs
  and a replay of the log) disagreeing.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from tests.chaos.merge_world import MERGE_COLUMNS, Change, MergeWorld
from tests.chaos.oracle import Verdict
from tests.chaos.store import delta, exists, log_is_whole, ref, rows_by_log
from tests.chaos.world import REQUIRED


def _table_rows(uri: str) -> list[tuple[Any, ...]]:
    if not exists(uri):
        return []
    data = delta(uri).to_pyarrow_table(columns=MERGE_COLUMNS).to_pylist()
    return [tuple(r[c] for c in MERGE_COLUMNS) for r in data]


def committed_plans(table: str, pipelines: list[str]) -> dict[tuple[str, str], list[Any]]:
    """For each committed batch of ``pipelines`` on ``table``: the plans of its generations,
    oldest first (the last is the committed generation's)."""
    from airflow_eod.core.ask import ask
    from airflow_eod.core.audit.status import table_status
    from airflow_eod.core.batch import BatchKey
    from airflow_eod.core.planlog.store import PlanLog

    out: dict[tuple[str, str], list[Any]] = {}
    if not exists(table):
        return out
    for summary in table_status(ref(table)):
        if summary.pipeline_id not in pipelines:
            continue
        log = PlanLog(ref(table), summary.pipeline_id)
        for b in summary.committed:
            status = ask(ref(table), BatchKey(summary.pipeline_id, b.batch_key))
            assert status.committed_generation == b.generation, (b, status)
            assert b.generation is not None
            plans = [log.get_plan(b.batch_key, g) for g in range(b.generation + 1)]
            out[(summary.pipeline_id, b.batch_key)] = [p for p in plans if p is not None]
            assert plans[-1] is not None, f"{b.batch_key} generation {b.generation} has no plan"
    return out


def check_merge_table(
    world: MergeWorld,
    table: str,
    pipelines: list[str],
    verdict: Verdict | None = None,
    *,
    landing: str | None = None,
) -> Verdict:
    """Compare the merge ``table`` (loaded by ``pipelines`` from ``world``) with the source's
    newest change per key over the batches the table says are committed.

    :param landing: the local landing root, where the plans name files on S3.
    """
    verdict = verdict or Verdict()
    name = os.path.basename(table)
    must: set[int] = set()  # versions in a committed generation
    may: set[int] = set()  # versions in an earlier generation of a committed batch
    batches_of: dict[tuple[str, str], list[str]] = {}  # (pipeline, path) -> committed batches
    for (pipeline, key), plans in committed_plans(table, pipelines).items():
        for i, plan in enumerate(plans):
            current = i == len(plans) - 1
            for entry in plan.inputs:
                version = world.version_of(entry, landing)
                if version is None:
                    verdict.wrong.append(
                        f"{name}: batch {key} (generation {plan.generation}) froze {entry.get('path')} "
                        f"in a version the world never wrote ({entry})"
                    )
                    continue
                (must if current else may).add(version)
                if current:
                    path = os.path.realpath(str(entry.get("path")))
                    batches_of.setdefault((pipeline, path), []).append(key)
    # Every due file is in a committed batch, and none in two of one pipeline.
    for state in world.paths.values():
        if state.expect != REQUIRED or not state.exists:
            continue
        holds = any(world.changes.get(v.entity) for v in state.versions)
        if holds and not any(v.entity in must for v in state.versions):
            verdict.losses.append(f"{name}: {state.path} is due and in no committed batch")
    for (pipeline, path), keys in sorted(batches_of.items()):
        if len(keys) > 1:
            verdict.duplicates.append(f"{name}: {path} is in {len(keys)} batches of {pipeline}: {keys}")

    newest: dict[int, Change] = {}
    allowed: set[int] = set()  # the seqs of changes a committed batch (any generation) holds
    for version in must | may:
        for c in world.changes.get(version, []):
            allowed.add(c[3])
            if version in must and (c[0] not in newest or c[3] > newest[c[0]][3]):
                newest[c[0]] = c
    rows = _table_rows(table)
    verdict.rows += len(rows)
    if rows and log_is_whole(table):
        # A second reader: a path the log encodes wrongly reads differently (or fails) here.
        if Counter(rows_by_log(table, MERGE_COLUMNS)) != Counter(rows):
            verdict.wrong.append(f"{name}: delta-rs and a replay of the log read different rows")
    per_key: dict[Any, list[tuple[Any, ...]]] = {}
    for row in rows:
        per_key.setdefault(row[0], []).append(row)
    for key, held in sorted(per_key.items(), key=lambda kv: str(kv[0])):
        if len(held) > 1:
            verdict.duplicates.append(f"{name}: key {key} has {len(held)} rows: {sorted(held, key=str)}")
        for row in held:
            seq = row[3]
            change = world.by_seq.get(seq) if isinstance(seq, int) else None
            if change is None or change[0] != key:
                verdict.wrong.append(f"{name}: row {row} is no change the source wrote")
            elif tuple(row) != change:
                verdict.wrong.append(f"{name}: row {row} differs from the change it names, {change}")
            elif seq not in allowed:
                verdict.wrong.append(f"{name}: row {row} is of a change no committed batch holds")
            elif key in newest and seq < newest[key][3]:
                verdict.wrong.append(
                    f"{name}: key {key} regressed: the table holds seq {seq}, a committed batch has "
                    f"the newer {newest[key]}"
                )
    for key, change in sorted(newest.items()):
        if key not in per_key:
            verdict.losses.append(f"{name}: key {key} is missing; its newest committed change is {change}")
    return verdict
