"""The merge job's key digest: the evidence ``verify`` checks a merge batch's keys by.

Written once per attempt, before the merge's first round (the batch's rows after the
in-batch dedupe do not change between rounds), into the attempt's own folder under ``_eod``
(:func:`airflow_eod.core.merge_digest.digest_dir`); the manifest names it. What the folder
holds and why: :mod:`airflow_eod.core.merge_digest`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_eod.core.errors import UnsafePathError
from airflow_eod.core.merge_digest import DELETE_COLUMN, KEYS_DIR_ENTRY, digest_dir
from airflow_eod.core.merge_rules import MergeRules
from airflow_eod.spark.staging import spark_uri

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from airflow_eod.spark.load_spec import LoadSpec

# Rows per digest file: a few large files rather than one per shuffle partition (every
# file is a request to write, and one more for verify to read).
ROWS_PER_FILE = 2_000_000


def write_key_digest(
    batch_rows: DataFrame, rows: int, spec: LoadSpec, rules: MergeRules, deletes: Column
) -> dict[str, str]:
    """Write the digest of ``batch_rows`` (the batch's newest row per key, ``rows`` of them)
    and return the manifest's entry naming its folder (relative to the table root).

    :param batch_rows: the batch's rows after :func:`~airflow_eod.spark.merge_job.newest_per_key`.
    :param rows: how many there are (already counted).
    :param spec: the load (its table, batch, generation and attempt name the folder).
    :param rules: the merge rules (the key and ordering columns).
    :param deletes: true for a row that deletes its key
        (:func:`~airflow_eod.spark.merge_job.is_delete`: the merge's own test).
    """
    rel = digest_dir(spec.plan.key, spec.generation, spec.attempt_id)
    try:
        # Refused if a link inside the table leads the folder out of it.
        out = spec.table.dir(rel)
    except UnsafePathError as exc:
        raise UnsafePathError(spec.plan.key.label, f"{exc.cause}; nothing was written") from None
    digest = batch_rows.select(*rules.keys, rules.order_by, deletes.alias(DELETE_COLUMN))
    files = max(1, -(-rows // ROWS_PER_FILE))
    # The folder is this attempt's alone: what an earlier call of the same attempt left
    # there (it died before its commit) is replaced, never another attempt's digest.
    digest.coalesce(files).write.mode("overwrite").parquet(spark_uri(batch_rows, spec.table, out))
    return {KEYS_DIR_ENTRY: rel}
