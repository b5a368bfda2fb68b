"""LandingFilesToDeltaOperator: load a landing directory into a Delta table exactly once."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from airflow_eod.core.ddl_schema import ddl_columns
from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.merge_rules import check_merge_columns
from airflow_eod.core.options import (
    BOUNDARIES,
    FORMATS,
    Boundary,
    FileFormat,
    check_catch_up_boundary,
    check_partition_columns,
    choice,
    is_template,
)
from airflow_eod.core.table_ref import TableRef
from airflow_eod.operators.delta_load import BaseDeltaLoadOperator
from airflow_eod.operators.interval_timetable import IntervalTimetableCheck, check_interval_timetable
from airflow_eod.sources.landing_files import LandingFilesSource
from airflow_eod.sources.landing_store import check_landing_scheme, is_store_path, store_root


class LandingFilesToDeltaOperator(IntervalTimetableCheck, BaseDeltaLoadOperator):
    """Load the files of a landing directory into a Delta table exactly once, with Spark.

    The batch is planned (frozen in the plan log beside the table) before anything is
    written; the table is asked whether it already holds the batch; only a "no" leads to a
    Spark write, and the files, the ``txn`` marker and the manifest land in one Delta
    commit. However the attempt ends, the table decides the outcome. Arguments shared by
    every load operator are described on
    :class:`~airflow_eod.operators.delta_load.BaseDeltaLoadOperator`.

    :param landing_path: the landing directory (templated): a local path, or a prefix on an
        object store (``s3://bucket/prefix``; ``az://``, ``abfss://``, ``gs://``), planned from
        the store's listing (size and ETag) and read by Spark over its Hadoop connector.
    :param landing_conn_id: (templated) the connection of a landing prefix on an object store
        (an ``aws``, ``wasb``/``adls`` or ``google_cloud_platform`` one). Unset: the table's
        ``storage_conn_id`` serves both when they are on one store; neither: the store's
        default credential chain. Its secrets stay in memory: never in XCom, the plan or a spec.
    :param file_format: ``csv``, ``json`` or ``parquet``.
    :param schema: Spark DDL schema of the files, e.g. ``"id INT, name STRING"`` (templated).
        With a schema, malformed CSV/JSON records are counted per file.
    :param read_options: extra Spark reader options (templated).
    :param pattern: glob on file names.
    :param boundary: ``offsets`` (a batch is the files not loaded yet) or ``interval`` (a
        batch is the directory's files for the DAG run's data interval).
    :param max_files_per_batch: cap on files per offset batch.
    :param max_bytes_per_batch: cap on bytes per offset batch.
    """

    template_fields: Sequence[str] = (
        *BaseDeltaLoadOperator.template_fields,
        "landing_path",
        "landing_conn_id",
        "schema",
        "read_options",
    )

    def __init__(
        self,
        *,
        landing_path: str,
        file_format: FileFormat = "csv",
        schema: str | None = None,
        read_options: dict[str, str] | None = None,
        pattern: str = "*",
        boundary: Boundary = "offsets",
        max_files_per_batch: int | None = None,
        max_bytes_per_batch: int | None = None,
        landing_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        choice("file_format", file_format, FORMATS)
        choice("boundary", boundary, BOUNDARIES)
        check_catch_up_boundary(self.catch_up, boundary)
        check_landing_scheme(landing_path)
        if schema and not is_template(schema):
            columns = ddl_columns("schema", schema)
            # A transform may add or rename columns: then the schema is not the table's.
            if self.transform is None:
                check_partition_columns(self.partition_by, columns)
                check_merge_columns(self._merge_rules, columns, "the schema")
        self.landing_path = landing_path
        self.file_format = file_format
        self.schema = schema
        self.read_options = read_options or {}
        self.pattern = pattern
        self.boundary = boundary
        self.max_files_per_batch = max_files_per_batch
        self.max_bytes_per_batch = max_bytes_per_batch
        self.landing_conn_id = landing_conn_id
        # A DAG whose runs all get zero-length intervals is refused now, not at run time.
        check_interval_timetable(self, self.get_dag())

    def lineage_inputs(self) -> list[tuple[str, str]]:
        if is_store_path(self.landing_path):
            scheme, _, rest = store_root(self.landing_path).partition("://")
            bucket, _, prefix = rest.partition("/")
            return [(f"{scheme}://{bucket}", prefix or "/")]
        return [("file", os.path.abspath(self.landing_path))]

    def _landing_options(self) -> dict[str, str] | None:
        """The storage options of a landing prefix on an object store (``None`` for a local
        directory): from ``landing_conn_id``, else from the table's ``storage_conn_id``."""
        if not is_store_path(self.landing_path):
            if self.landing_conn_id is not None:
                raise ConfigurationError(
                    f"landing_conn_id {self.landing_conn_id!r} is set, but the landing path "
                    f"{self.landing_path} is local: a connection is for a prefix on an object store"
                )
            return None
        if self.execution != "local":
            # A submitted driver gets the spec, which carries no credentials.
            raise ConfigurationError(
                f"landing path {self.landing_path} is on an object store: this release reads one with "
                f"execution='local' only, not {self.execution!r} (the driver would need the store's "
                "credentials)"
            )
        conn_id = self.landing_conn_id or self.storage_conn_id
        if conn_id is None:
            return {}
        from airflow_eod.hooks.object_store import ObjectStoreHook

        scheme = self.landing_path.split("://", 1)[0].lower()
        return ObjectStoreHook(storage_conn_id=conn_id).storage_options(scheme)

    def _store_schemes(self, table: TableRef) -> list[str]:
        schemes = super()._store_schemes(table)
        if is_store_path(self.landing_path):
            schemes.append(store_root(self.landing_path).split("://", 1)[0])
        return schemes

    def build_source(self) -> LandingFilesSource:
        return LandingFilesSource(
            path=self.landing_path,
            file_format=self.file_format,
            schema=self.schema,
            read_options=dict(self.read_options),
            pattern=self.pattern,
            boundary=self.boundary,
            max_files_per_batch=self.max_files_per_batch,
            max_bytes_per_batch=self.max_bytes_per_batch,
            storage_options=self._landing_options(),
        )
