"""The files an attempt staged for a batch: written beside the table, not yet part of it,
until the commit adds them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from deltalake.transaction import AddAction


@dataclass(frozen=True)
class StagedFile:
    """A Parquet file written for a batch attempt, not yet part of the table.

    :param path: the path relative to the table root, with ``/`` separators.
    :param size: bytes.
    :param modification_time: milliseconds since the epoch.
    :param partition_values: Delta partition values (strings, ``None`` for null).
    :param num_records: rows in the file.
    :param stats: the Delta stats JSON.
    """

    path: str
    size: int
    modification_time: int
    partition_values: Mapping[str, str | None]
    num_records: int
    stats: str

    def add_action(self) -> AddAction:
        return AddAction(
            self.path, self.size, dict(self.partition_values), self.modification_time, True, self.stats
        )


@dataclass(frozen=True)
class StagedBatch:
    """The files one attempt wrote for a batch, and the schema they share.

    :param schema_json: the Delta (Spark) schema JSON of the batch, partition columns
        included.
    :param partition_by: partition columns, in order.
    :param attempt_dir: the attempt's directory, relative to the table root.
    :param files: the Parquet files.
    """

    schema_json: str
    partition_by: list[str]
    attempt_dir: str
    files: list[StagedFile] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(f.num_records for f in self.files)
