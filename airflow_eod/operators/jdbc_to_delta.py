"""JdbcToDeltaOperator: load a database table into a Delta table exactly once, in batches
of a monotonic key."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any
from urllib.parse import urlparse

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.merge_rules import check_merge_columns
from airflow_eod.core.options import (
    BOUNDARIES,
    KEY_TYPES,
    NULL_KEY_POLICIES,
    Boundary,
    KeyType,
    NullKeys,
    check_catch_up_boundary,
    choice,
)
from airflow_eod.core.source import Credentials
from airflow_eod.hooks.jdbc_source import JdbcSourceHook
from airflow_eod.operators.delta_load import BaseDeltaLoadOperator
from airflow_eod.operators.interval_timetable import IntervalTimetableCheck, check_interval_timetable
from airflow_eod.sources.jdbc_incremental import JdbcIncrementalSource


class JdbcToDeltaOperator(IntervalTimetableCheck, BaseDeltaLoadOperator):
    """Load rows of a database table into a Delta table exactly once, with Spark over JDBC.

    An offset batch is the key range ``(low, high]``, ``high`` read once at planning; an
    interval batch is ``data_interval_start <= key < data_interval_end``. Credentials come
    from the Airflow connection and appear in no log, XCom, plan or commit. Arguments
    shared by every load operator are described on
    :class:`~airflow_eod.operators.delta_load.BaseDeltaLoadOperator`.

    :param jdbc_conn_id: an Airflow connection, read by
        :class:`~airflow_eod.hooks.jdbc_source.JdbcSourceHook`: ``postgres`` (host, port,
        schema: the database, login, password) or ``jdbc`` (host: the JDBC URL, login,
        password); ``extra`` may hold ``jdbc_url``.
    :param source_table: the table to read, optionally schema-qualified (templated).
    :param key_column: the monotonic key column (integer id or timestamp).
    :param key_type: ``integer`` or ``timestamp``.
    :param columns: the columns to load (default: all).
    :param max_rows_per_batch: cap on rows per offset batch.
    :param num_partitions: parallel JDBC reads, split by key range.
    :param boundary: ``offsets`` or ``interval``. Interval batches of one pipeline never
        overlap: an interval that overlaps one already frozen is refused with
        :class:`~airflow_eod.core.errors.OverlappingIntervalError`.
    :param null_keys: rows whose key is NULL are loaded by no batch; planning counts them:
        ``warn`` (default: a warning in the task log, and ``null_key_rows`` on the result)
        or ``fail`` (:class:`~airflow_eod.core.errors.NullKeyError`, ends the task at once).
    :param driver: the JDBC driver class (default ``org.postgresql.Driver``). A connection's
        ``extra.driver_class`` is used only where Airflow's ``[providers.jdbc]
        allow_driver_class_in_extra`` is on (see :class:`~airflow_eod.hooks.jdbc_source.JdbcSourceHook`).
    """

    template_fields: Sequence[str] = (*BaseDeltaLoadOperator.template_fields, "source_table")

    def __init__(
        self,
        *,
        jdbc_conn_id: str,
        source_table: str,
        key_column: str,
        key_type: KeyType = "integer",
        columns: Sequence[str] | None = None,
        max_rows_per_batch: int | None = None,
        num_partitions: int = 1,
        boundary: Boundary = "offsets",
        null_keys: NullKeys = "warn",
        driver: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        choice("key_type", key_type, KEY_TYPES)
        choice("boundary", boundary, BOUNDARIES)
        choice("null_keys", null_keys, NULL_KEY_POLICIES)
        check_catch_up_boundary(self.catch_up, boundary)
        if boundary == "interval" and key_type != "timestamp":
            raise ConfigurationError("boundary='interval' needs a timestamp key (key_type='timestamp')")
        if self.transform is None:  # a transform may add or rename columns
            check_merge_columns(self._merge_rules, list(columns) if columns else None, "columns")
        self.jdbc_conn_id = jdbc_conn_id
        self.source_table = source_table
        self.key_column = key_column
        self.key_type = key_type
        self.columns = list(columns) if columns else None
        self.max_rows_per_batch = max_rows_per_batch
        self.num_partitions = num_partitions
        self.boundary = boundary
        self.null_keys = null_keys
        self.driver = driver
        # A DAG whose runs all get zero-length intervals is refused now, not at run time.
        check_interval_timetable(self, self.get_dag())

    @cached_property
    def hook(self) -> JdbcSourceHook:
        """The hook that owns the connection (fetched once per task)."""
        return JdbcSourceHook(jdbc_conn_id=self.jdbc_conn_id, driver=self.driver)

    def build_source(self) -> JdbcIncrementalSource:
        return JdbcIncrementalSource(
            url=self.hook.jdbc_url,
            table=self.source_table,
            key_column=self.key_column,
            key_type=self.key_type,
            columns=self.columns,
            max_rows_per_batch=self.max_rows_per_batch,
            num_partitions=self.num_partitions,
            boundary=self.boundary,
            driver=self.hook.driver,
            null_keys=self.null_keys,
        )

    def lineage_inputs(self) -> list[tuple[str, str]]:
        """OpenLineage's naming for a PostgreSQL table: ``postgres://host:port`` and
        ``database.schema.table`` (schema ``public`` when the table names none)."""
        url = urlparse(self.hook.jdbc_url.removeprefix("jdbc:"))
        scheme = "postgres" if url.scheme == "postgresql" else url.scheme
        database = url.path.lstrip("/")
        table = self.source_table if "." in self.source_table else f"public.{self.source_table}"
        host = f"[{url.hostname}]" if url.hostname and ":" in url.hostname else url.hostname
        return [(f"{scheme}://{host}:{url.port or 5432}", f"{database}.{table}")]

    def credentials(self) -> Credentials:
        return self.hook.credentials()
