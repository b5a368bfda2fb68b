"""Staging a batch's malformed records for the quarantine table, uncommitted: the
*outbox* that rides in the main commit (:mod:`airflow_eod.core.quarantine_outbox`, which
also delivers it once the main commit has landed, without Spark).

:mod:`airflow_eod.spark.load_job` calls it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from airflow_eod.core.ask import ask_table
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.delta import compat as table_compat
from airflow_eod.core.delta.binding import check_table_identity
from airflow_eod.core.delta.table import open_table
from airflow_eod.core.errors import BatchRefusedError
from airflow_eod.core.quarantine_outbox import QUARANTINE_SCHEMA_JSON, Outbox
from airflow_eod.core.replaced_files import replaced_files
from airflow_eod.core.staged_files import StagedBatch
from airflow_eod.core.table_layout import attempt_dir
from airflow_eod.core.table_ref import TableRef

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


def _check_quarantine_table(
    quarantine: TableRef, batch: BatchKey, generation: int, replace_previous: bool, main: TableRef
) -> None:
    """Refuse, before the main commit, a quarantine table the delivery could never commit to:
    otherwise the main commit would land and every delivery after it would fail. That
    includes a replacement the quarantine table would refuse (append-only, or old rejects
    that another writer's OPTIMIZE rewrote)."""
    table = open_table(quarantine)  # a foreign, non-Delta directory raises here
    check_table_identity(quarantine, None if table is None else str(table.metadata().id))
    if table is None:
        return
    table_compat.check_writable(table, quarantine)
    table_compat.check_schema(table, QUARANTINE_SCHEMA_JSON, [], batch.label)
    status = ask_table(table, batch, generation)
    owner = (status.manifest.extra or {}).get("quarantine_of") if status.manifest else None
    if owner is not None and owner != main.location:
        # Deliveries are fenced by the batch's marker in the quarantine table; a second main
        # table with the same pipeline id and batch key would find it taken and drop its rejects.
        raise BatchRefusedError(
            batch.label,
            f"the quarantine table {quarantine} already holds this batch for the table {owner}; "
            "a quarantine table serves one main table per pipeline id: give this load its own "
            "quarantine_table_uri or its own pipeline_id",
        )
    if replace_previous and not status.committed:
        replaced_files(table, batch, status, f"{batch.label} (quarantine table {quarantine})")


def stage_outbox(
    quarantine: TableRef,
    batch: BatchKey,
    generation: int,
    attempt_id: str,
    bad: DataFrame | None,
    *,
    replace_previous: bool,
    main: TableRef,
) -> Outbox | None:
    """Stage the batch's malformed records in the quarantine table, uncommitted.

    :param quarantine: the quarantine table.
    :param batch: the batch.
    :param generation: the generation being loaded.
    :param attempt_id: this attempt (names the staging directory).
    :param bad: the malformed records, or ``None`` when there are none.
    :param replace_previous: whether delivery replaces earlier generations' rejects.
    :param main: the table the rejects belong to.
    :returns: the outbox to put in the main manifest, or ``None`` when nothing needs to
        reach the quarantine table (no malformed records and nothing to replace).
    """
    if bad is None and not replace_previous:
        return None
    _check_quarantine_table(quarantine, batch, generation, replace_previous, main)
    q_uri = quarantine.location
    if bad is None:
        empty = StagedBatch(QUARANTINE_SCHEMA_JSON, [], attempt_dir(batch, generation, attempt_id))
        return Outbox(q_uri, replace_previous, empty)
    from airflow_eod.spark.staging import stage_dataframe

    staged = stage_dataframe(bad, quarantine, batch, generation, attempt_id, [])
    log.info(
        "batch %s: staged %d malformed record(s) in %d file(s) for the quarantine table %s; "
        "they are committed there only after the main commit",
        batch,
        staged.rows,
        len(staged.files),
        q_uri,
    )
    return Outbox(q_uri, replace_previous, staged)
