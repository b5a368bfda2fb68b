"""A Delta table at one version, as far as markers, metadata and protocol go (what
:func:`airflow_eod.core.delta.log.read_log` returns)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from airflow_eod.core.delta.checkpoint_index import IndexMismatch
from airflow_eod.core.delta.checkpoints import checkpoint_files, read_checkpoint
from airflow_eod.core.delta.metadata import TableMetadata, TableProtocol
from airflow_eod.core.delta.reading import LOG_DIR, LogReadStats
from airflow_eod.core.table_ref import TableRef

log = logging.getLogger(__name__)


class Markers(Protocol):
    def lookup(self, app_id: str) -> int | None: ...


class TableMarkers:
    """A checkpoint's markers as decoded from the checkpoint (``appId``, ``version``)."""

    def __init__(self, markers: pa.Table | None) -> None:
        self._markers = markers

    def lookup(self, app_id: str) -> int | None:
        markers = self._markers
        if markers is None or markers.num_rows == 0:
            return None
        hit = markers.filter(pc.equal(markers.column("appId"), app_id))
        return int(hit.column("version")[0].as_py()) if hit.num_rows else None


@dataclass
class TableLog:
    """A Delta table at one version, as far as markers, metadata and protocol go.

    :param ref: the table.
    :param table_version: the version read.
    :param checkpoint_version: the version of the checkpoint the reading started from
        (``-1``: none).
    """

    ref: TableRef
    table_version: int
    checkpoint_version: int
    _metadata: TableMetadata
    _protocol: TableProtocol
    _tail_markers: dict[str, tuple[int, int]] = field(default_factory=dict)
    _checkpoint_markers: Markers | None = None
    stats: LogReadStats = field(default_factory=LogReadStats)
    _full: DeltaTable | None = None
    read_at: float = 0.0  # when the probing that found the newest version began (time.time())
    checkpoint_parts: int | None = None

    @property
    def path(self) -> str:
        """The table's local path."""
        return self.ref.path

    def version(self) -> int:
        return self.table_version

    def metadata(self) -> TableMetadata:
        return self._metadata

    def protocol(self) -> TableProtocol:
        return self._protocol

    def schema_json(self) -> str:
        return self._metadata.schema_string

    def transaction_version(self, app_id: str) -> int | None:
        """The ``txn`` version of ``app_id`` while the log holds it.

        Unlike ``deltalake``, a marker past ``delta.setTransactionRetentionDuration`` still
        counts until a checkpoint drops it: a batch that may have landed is never forgotten
        sooner than it must be.
        """
        if self._full is not None:
            return self._full.transaction_version(app_id)
        found = self._tail_markers.get(app_id)
        if found is not None:
            return found[0]
        markers = self._checkpoint_markers
        if markers is None:
            return None
        try:
            return markers.lookup(app_id)
        except IndexMismatch as exc:
            log.warning(
                "the index of checkpoint %d of %s is unusable (%s): reading the checkpoint",
                self.checkpoint_version,
                self.path,
                exc,
            )
            files = checkpoint_files(
                os.path.join(self.path, LOG_DIR), self.checkpoint_version, self.checkpoint_parts
            )
            markers = read_checkpoint(files, self.stats, store=self.ref.storage())[1]
            self._checkpoint_markers = TableMarkers(markers)
            return self._checkpoint_markers.lookup(app_id)

    def marker_commit(self, app_id: str) -> int | None:
        """The version of the commit after the checkpoint that set ``app_id``'s marker, if any."""
        found = self._tail_markers.get(app_id)
        return found[1] if found is not None and found[1] >= 0 else None

    def snapshot(self) -> DeltaTable:
        """The full ``deltalake`` snapshot at this version (every live file): for the few
        steps that need the files, such as a restatement's swap."""
        return DeltaTable(self.path, version=self.table_version, storage_options=self.ref.storage_options)
