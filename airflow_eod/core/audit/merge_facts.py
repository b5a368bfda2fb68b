"""What the merge checks read: each merge batch's key digest, and the table's live keys.

A digest (:mod:`airflow_eod.core.merge_digest`) is read only from the folder a manifest
names once :func:`~airflow_eod.core.merge_digest.checked_digest_dir` found it to be the
batch's own, only through the table's storage (no link is followed), and within a byte
budget shared by every batch of one audit. The live rows' key columns, ordering value and
delete-ness are read at the audited version by delta-rs's SQL engine, which applies
deletion vectors; only when every live file is on disk and in the table (a link is not
read) and the table holds no more than :data:`MAX_LIVE_ROWS` rows.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable, QueryBuilder

from airflow_eod.core.audit.delete_sql import delete_sql, quote
from airflow_eod.core.audit.state import AuditState
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.errors import EodError
from airflow_eod.core.merge_digest import DELETE_COLUMN, checked_digest_dir
from airflow_eod.core.merge_rules import MergeRules
from airflow_eod.core.storage import BoundError
from airflow_eod.core.table_layout import path_part

# Bounds of what one audit reads for the merge checks (invariant I11).
MAX_LIVE_ROWS = 50_000_000
MAX_DIGEST_BYTES = 512 << 20
MAX_DIGEST_FILES = 1_000
ORDER = "_eod_order"  # the ordering value, in the live rows and the digests alike


class Unread(Exception):
    """What the merge checks could not read, and why (a finding's words)."""


class Budget:
    """The digest bytes one audit may still read."""

    def __init__(self, left: int = MAX_DIGEST_BYTES) -> None:
        self.left = left


def read_digest(
    audit: AuditState, batch: BatchKey, keys_dir: object, rules: MergeRules, budget: Budget
) -> pa.Table:
    """The digest of ``batch``'s committed generation: its key columns, :data:`ORDER` and
    :data:`~airflow_eod.core.merge_digest.DELETE_COLUMN`.

    :param keys_dir: what the manifest names as the digest's folder.
    :raises UnsafePathError: when ``keys_dir`` is not a digest folder of the batch (nothing read).
    :raises Unread: when the digest is not there, too large, or not readable.
    """
    generation = audit.batches[batch].generation
    assert generation is not None
    if keys_dir is None:
        raise Unread("is not named by its manifest (a merge committed before merges wrote one)")
    rel = checked_digest_dir(keys_dir, batch, generation)
    store = audit.ref.storage()
    names = [n for n in store.list(rel) if n.endswith(".parquet") and not n.startswith(("_", "."))]
    if not names:
        raise Unread(f"({rel}) is not there (removed by hand?)")
    if len(names) > MAX_DIGEST_FILES:
        raise Unread(f"({rel}) holds {len(names)} files, more than verify reads ({MAX_DIGEST_FILES})")
    columns = [*rules.keys, rules.order_by, DELETE_COLUMN]
    parts = []
    try:
        for name in names:
            data = store.get(f"{rel}/{path_part(name, 'digest file')}", limit=budget.left)
            budget.left -= len(data)
            parts.append(pq.read_table(pa.BufferReader(data), columns=columns))
        digest = pa.concat_tables(parts)
    except BoundError:
        raise Unread(f"({rel}) is past what one audit reads of digests ({MAX_DIGEST_BYTES} bytes)") from None
    except (OSError, ValueError, EodError, pa.ArrowException) as exc:  # gone, not Parquet, no such column
        raise Unread(f"({rel}) is not readable ({type(exc).__name__}: {str(exc)[:200]})") from None
    return digest.rename_columns([*rules.keys, ORDER, DELETE_COLUMN])


def read_live_keys(audit: AuditState, rules: MergeRules) -> tuple[pa.Table, bool]:
    """The live rows' key columns, :data:`ORDER` and
    :data:`~airflow_eod.core.merge_digest.DELETE_COLUMN` (null when ``delete_when`` is not
    an expression the audit runs, see :mod:`~airflow_eod.core.audit.delete_sql`), and
    whether the delete-ness is known.

    :raises Unread: when the live rows are not read, saying why.
    """
    bad = sorted(f for f, live in audit.live.items() if live.refused or not live.on_disk)
    if bad:
        raise Unread(f"live file {bad[0]} is missing or not opened (see the findings about it)")
    known = [r for r in audit.rows.values() if r is not None]
    if sum(known) > MAX_LIVE_ROWS:
        raise Unread(f"the table holds {sum(known)} live rows, more than verify reads ({MAX_LIVE_ROWS})")
    table = DeltaTable(audit.path, storage_options=audit.ref.storage_options, version=audit.version)
    columns = [f.name for f in table.schema().fields]
    deletes: str | None = "FALSE"
    if rules.delete_when is not None:
        deletes = delete_sql(rules.delete_when, columns)
    select = [
        *(quote(k) for k in rules.keys),
        f"{quote(rules.order_by)} AS {ORDER}",
        f"{deletes or 'CAST(NULL AS BOOLEAN)'} AS {DELETE_COLUMN}",
    ]
    try:
        reader = QueryBuilder().register("t", table).execute(f"SELECT {', '.join(select)} FROM t")
        rows = pa.table(reader.read_all())
    except Exception as exc:  # DataFusion raises its own kinds (a column gone, a type it cannot read)
        raise Unread(f"the live rows are not readable by delta-rs ({str(exc)[:300]})") from None
    if None not in audit.rows.values() and rows.num_rows != sum(known):
        raise Unread(f"delta-rs reads {rows.num_rows} live rows where the files hold {sum(known)}")
    return plain(rows), deletes is not None


def plain(table: pa.Table) -> pa.Table:
    """``table`` with view and large string/binary columns as plain ones (DataFusion gives
    views; a join needs the same types on both sides)."""
    swap = {pa.string_view(): pa.string(), pa.large_string(): pa.string(), pa.binary_view(): pa.binary()}
    swap[pa.large_binary()] = pa.binary()
    fields = [pa.field(f.name, swap.get(f.type, f.type)) for f in table.schema]
    return table.cast(pa.schema(fields))
