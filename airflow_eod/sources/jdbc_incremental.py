"""The JDBC incremental source: rows of a database table, sliced by a monotonic key.

With ``boundary="offsets"`` a batch is the frozen key range ``(low, high]``: ``high`` is read
once, at planning, and ``low`` is the ``high`` of the pipeline's previous batch. Rows
inserted after planning have keys above ``high`` and wait for the next batch. With
``boundary="interval"`` a batch is ``start <= key < end`` over the DAG run's data interval
(a timestamp key). The planned row count is frozen too, and for PostgreSQL a fingerprint
of the range's content (see :meth:`JdbcIncrementalSource._measure`): if the range holds
other rows when it is read, the batch fails (invariant I3). Interval batches of one
pipeline never overlap (:func:`airflow_eod.core.planner.refuse_overlaps`). Rows whose key
is NULL belong to no batch: planning counts them, and warns or refuses (``null_keys``).

Identifiers are validated and quoted; values reach SQL only as literals formatted from
typed Python values (``int`` or ``datetime``). Credentials come from the read context and
are never stored in the plan, the spec or the commit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any, ClassVar

from airflow_eod.core.batch import BatchKey
from airflow_eod.core.errors import ConfigurationError, InputChangedError, NullKeyError
from airflow_eod.core.options import BOUNDARIES, KEY_TYPES, NULL_KEY_POLICIES, choice
from airflow_eod.core.planlog.offsets import OffsetHistory
from airflow_eod.core.planlog.restatement import refreeze_hint
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.planner import plan_interval_batch, plan_offset_batch, require_interval
from airflow_eod.core.source import ReadContext
from airflow_eod.sources.jdbc_query import JdbcQueries
from airflow_eod.sources.jdbc_sql import (
    FINGERPRINT_SCHEME,
    FINGERPRINT_SQL,
    POSTGRES_DRIVER,
    ROW_HASH_COLUMN,
    quote_identifier,
    sql_literal,
)
from airflow_eod.sources.jdbc_url import check_jdbc_url

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JdbcIncrementalSource(JdbcQueries):
    """A database table read through JDBC, in batches of a monotonic key.

    :param url: the JDBC URL without credentials, e.g. ``jdbc:postgresql://db:5432/shop``.
    :param table: the table, optionally schema-qualified.
    :param key_column: a monotonic key: an integer id or a timestamp.
    :param key_type: ``integer`` or ``timestamp`` (a ``timestamp without time zone`` in UTC).
    :param columns: the columns to load (default: all).
    :param max_rows_per_batch: cap on rows per offset batch (rows that share the boundary
        key all go in the same batch, so a batch may exceed it by those).
    :param num_partitions: parallel JDBC reads, split by key range.
    :param boundary: ``offsets`` or ``interval``.
    :param driver: the JDBC driver class.
    :param null_keys: what rows whose key is NULL (never loaded by any batch) do at
        planning: ``warn`` (a warning with their count, and ``null_key_rows`` on the result)
        or ``fail`` (:class:`~airflow_eod.core.errors.NullKeyError`).
    """

    url: str
    table: str
    key_column: str
    key_type: str = "integer"
    columns: list[str] | None = None
    max_rows_per_batch: int | None = None
    num_partitions: int = 1
    boundary: str = "offsets"
    driver: str = POSTGRES_DRIVER
    fetch_size: int = 10_000
    extra: dict[str, Any] = field(default_factory=dict)
    null_keys: str = "warn"

    # The source's kind: its ``type`` in ``to_dict`` and in the registry of sources and
    # readers (airflow_eod.spark.readers).
    kind: ClassVar[str] = "jdbc_incremental"

    def __post_init__(self) -> None:
        check_jdbc_url(self.url)  # no credential in any driver's form; errors never echo it
        choice("key_type", self.key_type, KEY_TYPES)
        choice("boundary", self.boundary, BOUNDARIES)
        choice("null_keys", self.null_keys, NULL_KEY_POLICIES)
        if self.boundary == "interval" and self.key_type != "timestamp":
            raise ConfigurationError("boundary='interval' needs a timestamp key (key_type='timestamp')")
        if self.num_partitions < 1 or (self.max_rows_per_batch is not None and self.max_rows_per_batch < 1):
            raise ConfigurationError("num_partitions and max_rows_per_batch must be at least 1")
        quote_identifier(self.table, "table")
        quote_identifier(self.key_column, "key column")
        for col in self.columns or []:
            quote_identifier(col, "column")

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JdbcIncrementalSource:
        return cls(**{k: v for k, v in data.items() if k != "type"})

    def identity(self) -> dict[str, Any]:
        """What decides the slice: a stored plan is reused only by the same source."""
        return {
            "type": self.kind,
            "url": self.url,
            "table": self.table,
            "key_column": self.key_column,
            "boundary": self.boundary,
        }

    # -- SQL ---------------------------------------------------------------------
    def _range(self, boundary: dict[str, Any], zoned: bool) -> str:
        if "start" in boundary:
            return (
                f"{self._k} >= {sql_literal(boundary['start'], 'timestamp', zoned)} AND "
                f"{self._k} < {sql_literal(boundary['end'], 'timestamp', zoned)}"
            )
        low = boundary.get("low")
        upper = f"{self._k} <= {sql_literal(boundary['high'], self.key_type, zoned)}"
        return upper if low is None else f"{self._k} > {sql_literal(low, self.key_type, zoned)} AND {upper}"

    def _count(self, ctx: ReadContext, boundary: dict[str, Any], label: str | None) -> int:
        def sql(zoned: bool) -> str:
            return f"SELECT COUNT(*) AS n FROM {self._t} WHERE {self._range(boundary, zoned)}"

        return int(self._query(ctx, sql, label)[0])

    def _measure(self, ctx: ReadContext, boundary: dict[str, Any], label: str | None) -> dict[str, Any]:
        """What the range holds, as the plan freezes it: ``rows``, and for PostgreSQL a
        ``fingerprint`` of the content of exactly the columns read, computed by the database
        in the same statement (one snapshot): an UPDATE of a row, or a DELETE and re-INSERT
        that keeps the count, changes it. Other databases are checked by the count alone."""
        if not self._postgres:
            return {"rows": self._count(ctx, boundary, label)}
        cols = ", ".join(quote_identifier(c, "column") for c in self.columns) if self.columns else "*"

        def sql(zoned: bool) -> str:
            rows = f"SELECT {cols} FROM {self._t} WHERE {self._range(boundary, zoned)}"
            return f"SELECT COUNT(*) AS n, {FINGERPRINT_SQL} AS fp FROM ({rows}) eod_r"

        rows, fp = self._query(ctx, sql, label)
        return {"rows": int(rows), "fingerprint": str(fp)}

    def _null_key_rows(self, ctx: ReadContext, label: str | None) -> int:
        def sql(_zoned: bool) -> str:
            return f"SELECT COUNT(*) AS n FROM {self._t} WHERE {self._k} IS NULL"

        return int(self._query(ctx, sql, label)[0])

    def _check_null_keys(self, ctx: ReadContext, label: str) -> None:
        """Count the rows no batch loads (their key is NULL): warn, or refuse (``null_keys``)."""
        n = self._null_key_rows(ctx, label)
        ctx.facts["null_key_rows"] = n
        if n == 0:
            return
        what = (
            f"{n} row(s) of {self.table} have a NULL {self.key_column}: no batch of a key range ever "
            "loads them"
        )
        fix = (
            f"give them a {self.key_column} (above the pipeline's frontier for offset batches, so the "
            "next batch loads them) or delete them"
        )
        if self.null_keys == "fail":
            raise NullKeyError(
                label,
                f"{what}, and null_keys='fail': nothing was loaded. To go on, {fix}, or set null_keys='warn'",
            )
        log.warning("batch %s: %s (null_keys='warn'); %s", label, what, fix)

    # -- planning ----------------------------------------------------------------
    def _next_offsets(
        self, ctx: ReadContext
    ) -> Callable[[OffsetHistory], tuple[dict[str, Any], list[dict[str, Any]]] | None]:
        def next_offsets(history: OffsetHistory) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
            # Only the newest batch matters: the next one starts where it ended.
            newest = history.newest()
            low = newest.boundary["high"] if newest is not None else None

            def sql(zoned: bool) -> str:
                # The head and the rows up to it in one statement: one snapshot, one round
                # trip. Rows sharing the head key all count, beyond max_rows_per_batch.
                where = "" if low is None else f" WHERE {self._k} > {sql_literal(low, self.key_type, zoned)}"
                above = "" if low is None else f"{self._k} > {sql_literal(low, self.key_type, zoned)} AND "
                if self.max_rows_per_batch:
                    head = (
                        f"SELECT MAX(k) AS hi FROM (SELECT {self._k} AS k FROM {self._t}{where} "
                        f"ORDER BY {self._k} LIMIT {int(self.max_rows_per_batch)}) eod_limited"
                    )
                else:
                    head = f"SELECT MAX({self._k}) AS hi FROM {self._t}{where}"
                return (
                    f"SELECT hi, (SELECT COUNT(*) FROM {self._t} WHERE {above}{self._k} <= eod_head.hi) AS n "
                    f"FROM ({head}) eod_head"
                )

            high, rows = self._query(ctx, sql, None)
            if high is None:
                return None
            if self.key_type == "integer":
                high = int(high)
            boundary = {"table": self.table, "key_column": self.key_column, "low": low, "high": high}
            if self._postgres:  # the count and the content of the frozen range, one snapshot
                return boundary, [self._measure(ctx, boundary, None)]
            return boundary, [{"rows": int(rows)}]

        return next_offsets

    def plan(
        self,
        plan_log: PlanLog,
        ctx: ReadContext,
        *,
        run_token: str,
        is_committed: Callable[[BatchKey], bool],
        interval: tuple[datetime, datetime] | None = None,
    ) -> Plan | None:
        """Freeze the batch this run loads (``None``: no new rows for an offset pipeline)."""
        if self.boundary == "interval":
            interval = require_interval(interval)
            label = BatchKey.for_interval(plan_log.pipeline_id, *interval).label
            boundary = {"start": interval[0].isoformat(), "end": interval[1].isoformat()}
            # Before the plan is frozen: rows given their key as the fix fall in the interval.
            self._check_null_keys(ctx, label)
            return plan_interval_batch(
                plan_log,
                start=interval[0],
                end=interval[1],
                inputs=lambda: [self._measure(ctx, boundary, label)],
                source=self.identity(),
                exclusive=True,
            )
        plan = plan_offset_batch(
            plan_log,
            run_token=run_token,
            is_committed=is_committed,
            next_offsets=self._next_offsets(ctx),
            source=self.identity(),
        )
        # After it: the NULL-key rows are in no range, so the batch is named, and a fix that
        # gives them keys above its frontier leaves it as frozen.
        self._check_null_keys(ctx, plan.key.label if plan else f"{plan_log.pipeline_id}/(no new batch)")
        return plan

    def replan(self, plan: Plan, generation: int, ctx: ReadContext, *, committed: bool = True) -> Plan:
        """The same key range, with its rows (count and fingerprint) as they are now
        (restatement or re-freeze). Rows whose key is NULL are counted too, as at planning."""
        self._check_null_keys(ctx, plan.key.label)
        inputs = [self._measure(ctx, plan.boundary, plan.key.label)]
        return replace(plan, inputs=inputs, generation=generation, planned_at="", source=self.identity())

    def verify(self, plan: Plan, ctx: ReadContext) -> None:
        """Fail if the key range no longer holds the planned rows (I3): another count, or
        (plans with a fingerprint) the same count of other content. A plan written before
        fingerprints existed is checked by its count."""
        frozen = plan.inputs[0]
        planned = int(frozen["rows"])
        now = self._measure(ctx, plan.boundary, plan.key.label)
        way_out = (
            "nothing was committed. Re-freeze it on purpose to load it as it is now: "
            f"{refreeze_hint(plan.pipeline_id, plan.batch_key)}"
        )
        where = f"the source range {self._describe(plan.boundary)} of {self.table}"
        if now["rows"] != planned:
            raise InputChangedError(
                plan.key.label,
                f"{where} held {planned} rows when planned and holds {now['rows']} now (rows were "
                f"updated, deleted or inserted below the key frontier); {way_out}",
            )
        # Compared only when computed the same way: the scheme before the first ':' says how,
        # so a plan frozen by a release that fingerprinted otherwise keeps the count check.
        schemes = {str(fp).split(":")[0] for fp in (frozen.get("fingerprint"), now.get("fingerprint"))}
        same_scheme = len(schemes) == 1
        if "fingerprint" in frozen and same_scheme and frozen["fingerprint"] != now["fingerprint"]:
            raise InputChangedError(
                plan.key.label,
                f"{where} holds {planned} rows as planned, but their content changed since (content "
                f"fingerprint {frozen['fingerprint']} when planned, {now['fingerprint']} now: a row was "
                f"updated, or deleted and inserted again); {way_out}",
            )

    def _describe(self, boundary: dict[str, Any]) -> str:
        if "start" in boundary:
            return f"[{boundary['start']}, {boundary['end']})"
        return f"({boundary.get('low')}, {boundary['high']}] of {self.key_column}"

    # -- reading (by airflow_eod.spark.jdbc_reader) ------------------------------------
    def hashes_rows(self, plan: Plan) -> bool:
        """Whether the batch read can carry each row's hash (:data:`ROW_HASH_COLUMN`) to hold
        what Spark read to the plan's fingerprint: PostgreSQL, and a plan fingerprinted so."""
        fp = plan.inputs[0].get("fingerprint") if plan.inputs else None
        return self._postgres and str(fp).split(":")[0] == FINGERPRINT_SCHEME

    def batch_sql(self, plan: Plan, ctx: ReadContext, *, row_hash: bool = False) -> str:
        """The statement that reads exactly the planned key range (Spark's ``dbtable``).

        :param row_hash: add :data:`ROW_HASH_COLUMN`, each row's hash as the fingerprint
            computes it (see :meth:`hashes_rows`).
        """
        cols = ", ".join(quote_identifier(c, "column") for c in self.columns) if self.columns else "*"
        zoned = self.key_type == "timestamp" and self._connected(
            ctx, plan.key.label, lambda _jvm, c: self._zoned(c)
        )
        rows = f"SELECT {cols} FROM {self._t} WHERE {self._range(plan.boundary, zoned)}"
        if row_hash:
            row_hash_sql = f'hashtextextended(eod_r::text, 0) AS "{ROW_HASH_COLUMN}"'
            rows = f"SELECT eod_r.*, {row_hash_sql} FROM ({rows}) eod_r"
        return rows
