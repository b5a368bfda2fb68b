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
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_eod.core.batch import BatchKey
from airflow_eod.core.errors import BatchError, ConfigurationError, InputChangedError, NullKeyError
from airflow_eod.core.options import BOUNDARIES, KEY_TYPES, NULL_KEY_POLICIES, choice
from airflow_eod.core.planlog.offsets import OffsetHistory
from airflow_eod.core.planlog.restatement import refreeze_hint
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.planner import plan_interval_batch, plan_offset_batch, require_interval
from airflow_eod.core.source import ReadContext
from airflow_eod.sources.jdbc_url import check_jdbc_url, redact_jdbc_url

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

POSTGRES_DRIVER = "org.postgresql.Driver"
# Session settings that decide how PostgreSQL renders a row as text, pinned for the content
# fingerprint: planning (libpq) and the check before the commit (libpq, or pgjdbc in a
# submitted driver) must render the same row the same way, whatever the role's defaults.
_PG_SETTINGS = (
    ("TimeZone", "UTC"),
    ("DateStyle", "ISO"),
    ("IntervalStyle", "postgres"),
    ("extra_float_digits", "3"),
    ("bytea_output", "hex"),
)
_PG_RENDERING = tuple(f"SET {name} TO '{value}'" for name, value in _PG_SETTINGS)
# The same settings as one statement, for Spark's reader to run as it connects.
_PG_RENDERING_AT_CONNECT = "SELECT " + ", ".join(
    f"set_config('{name}', '{value}', false)" for name, value in _PG_SETTINGS
)
# The fingerprint: the sum (exact, numeric) of a 64-bit hash of every row's text:
# order-independent, and a sum, unlike XOR, does not cancel out two identical rows changed
# alike. hashtextextended (PostgreSQL 11+) costs a tenth of md5 plus the casts to sum its
# parts (benchmarks/jdbc_fingerprint.py); it detects accidents, not a forger.
_FINGERPRINT = "concat_ws(':', 'h64sum', COALESCE(SUM(hashtextextended(eod_r::text, 0)), 0))"

# The column a PostgreSQL batch read carries beside the row: the same 64-bit hash of the row's
# text that the fingerprint sums, computed by the database as Spark reads the row, so what
# Spark read can be held to the frozen fingerprint (spark/readers.py) and then dropped.
ROW_HASH_COLUMN = "__eod_row_hash"
FINGERPRINT_SCHEME = "h64sum"

# java.sql.Types.TIMESTAMP and TIMESTAMP_WITH_TIMEZONE
_JDBC_TIMESTAMPS = (93, 2014)


def _is_zoned(meta: Any, i: int) -> bool:
    """Whether result column ``i`` is a timestamp with a time zone (PostgreSQL's driver
    reports ``timestamptz`` as TIMESTAMP, with its own type name)."""
    name = str(meta.getColumnTypeName(i)).lower()
    return int(meta.getColumnType(i)) == 2014 or "tz" in name or "with time zone" in name


# PostgreSQL type OIDs of timestamptz and timestamp, as a DB-API cursor describes them.
_PG_TIMESTAMPTZ, _PG_TIMESTAMP = 1184, 1114
_PG_URL = re.compile(
    r"^jdbc:postgresql://(?P<host>[^/:?]+)(?::(?P<port>\d+))?/(?P<db>[^?/]+)(?:\?(?P<params>.*))?$"
)
# JDBC URL parameters that mean the same to libpq; any other sends planning through the JVM.
_PG_PARAMS = {
    "sslmode": "sslmode",
    "connectTimeout": "connect_timeout",
    "ApplicationName": "application_name",
}


def postgres_conninfo(url: str) -> dict[str, Any] | None:
    """libpq connection parameters equivalent to a PostgreSQL JDBC URL, or ``None`` when the
    URL says more than libpq can be told the same way (then the JVM driver is used)."""
    m = _PG_URL.match(url)
    if m is None:
        return None
    info: dict[str, Any] = {"host": m["host"], "port": int(m["port"] or 5432), "dbname": m["db"]}
    for pair in filter(None, (m["params"] or "").split("&")):
        key, _, value = pair.partition("=")
        if key not in _PG_PARAMS:
            return None
        info[_PG_PARAMS[key]] = value
    return info


# libpq settings from the environment that could point it at another server than the URL's.
_LIBPQ_REDIRECTS = ("PGHOSTADDR", "PGSERVICE", "PGSERVICEFILE")


def _dbapi() -> Any:
    """A PostgreSQL DB-API module (Airflow's postgres extra brings both), or ``None``."""
    for name in ("psycopg", "psycopg2"):
        try:
            return __import__(name)
        except ImportError:
            continue
    return None


_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_SECRET_IN_URL = re.compile(r"(password|user)=", re.IGNORECASE)


def quote_identifier(name: str, what: str = "identifier") -> str:
    """``"schema"."table"`` from ``schema.table`` after checking each part."""
    parts = name.split(".") if isinstance(name, str) else []
    if not 1 <= len(parts) <= 2 or not all(_IDENT_RE.match(p) for p in parts):
        raise ConfigurationError(
            f"{what} {name!r} is not a plain SQL identifier (letters, digits, '_', optionally "
            "schema-qualified); refusing to build SQL from it"
        )
    return ".".join(f'"{p}"' for p in parts)


def _literal(value: Any, key_type: str, zoned: bool = False) -> str:
    """A SQL literal from a typed value; nothing else reaches the SQL text.

    :param zoned: the key is a ``timestamp with time zone``: the literal says UTC itself.
        A plain ``TIMESTAMP`` literal compared with such a column is taken in the session's
        time zone, which the JDBC driver sets from its JVM's (a worker's local zone).
    """
    if key_type == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigurationError(f"integer key bound {value!r} is not an integer")
        return str(value)
    ts = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    if ts.tzinfo is not None:
        ts = ts.astimezone(UTC).replace(tzinfo=None)
    text = ts.strftime("%Y-%m-%d %H:%M:%S.%f")
    return f"TIMESTAMP WITH TIME ZONE '{text}+00:00'" if zoned else f"TIMESTAMP '{text}'"


@dataclass(frozen=True)
class JdbcIncrementalSource:
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
    driver: str = "org.postgresql.Driver"
    fetch_size: int = 10_000
    extra: dict[str, Any] = field(default_factory=dict)
    null_keys: str = "warn"

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
        return {"type": "jdbc_incremental", **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JdbcIncrementalSource:
        return cls(**{k: v for k, v in data.items() if k != "type"})

    def identity(self) -> dict[str, Any]:
        """What decides the slice: a stored plan is reused only by the same source."""
        return {
            "type": "jdbc_incremental",
            "url": self.url,
            "table": self.table,
            "key_column": self.key_column,
            "boundary": self.boundary,
        }

    # -- SQL ---------------------------------------------------------------------
    @property
    def _t(self) -> str:
        return quote_identifier(self.table, "table")

    @property
    def _k(self) -> str:
        return quote_identifier(self.key_column, "key column")

    def _range(self, boundary: dict[str, Any], zoned: bool) -> str:
        if "start" in boundary:
            return (
                f"{self._k} >= {_literal(boundary['start'], 'timestamp', zoned)} AND "
                f"{self._k} < {_literal(boundary['end'], 'timestamp', zoned)}"
            )
        low = boundary.get("low")
        upper = f"{self._k} <= {_literal(boundary['high'], self.key_type, zoned)}"
        return upper if low is None else f"{self._k} > {_literal(low, self.key_type, zoned)} AND {upper}"

    def _reader(self, ctx: ReadContext) -> Any:
        """A Spark JDBC reader with the connection set; the credentials go nowhere else."""
        if ctx.credentials is None:
            raise ConfigurationError("the JDBC source needs credentials (an Airflow connection)")
        return (
            ctx.spark.read.format("jdbc")
            .option("url", self.url)
            .option("driver", self.driver)
            .option("user", ctx.credentials.user)
            .option("password", ctx.credentials.password)
        )

    def _query(self, ctx: ReadContext, build: Callable[[bool], str], label: str | None) -> list[Any]:
        """The one row a statement returns. Planning and the input check ask for one row; a
        Spark JDBC job for each cost about 150 ms more (schema probe, job, task) than the
        query itself. For PostgreSQL it goes over libpq, so planning in an Airflow task
        starts no JVM (a run with nothing new costs one query); otherwise over a plain JDBC
        connection opened in the driver's JVM.

        :param build: the statement, given whether the key is a zoned timestamp.
        """
        native = postgres_conninfo(self.url) if self._postgres else None
        if any(os.environ.get(v) for v in _LIBPQ_REDIRECTS):
            native = None  # libpq would connect elsewhere than pgjdbc does
        module = _dbapi() if native is not None else None
        if native is not None and module is not None:
            return self._query_native(module, native, ctx, build, label)

        def work(jvm: Any, conn: Any) -> list[Any]:
            for statement in _PG_RENDERING if self._postgres else ():
                conn.createStatement().execute(statement)
            return self._one_row(jvm, conn, build(self._zoned(conn)))

        return self._connected(ctx, label, work)

    @property
    def _postgres(self) -> bool:
        return self.driver == POSTGRES_DRIVER

    def _connected(self, ctx: ReadContext, label: str | None, work: Callable[[Any, Any], Any]) -> Any:
        """``work(jvm, connection)`` on a read-only JDBC connection to the source."""
        if ctx.credentials is None:
            raise ConfigurationError("the JDBC source needs credentials (an Airflow connection)")
        try:
            jvm: Any = ctx.spark._jvm  # type: ignore[attr-defined]
            # Spark's class loader holds the jars of spark.jars; DriverManager would not see them.
            driver = jvm.org.apache.spark.util.Utils.classForName(self.driver, True, False).newInstance()
            props = jvm.java.util.Properties()
            props.setProperty("user", ctx.credentials.user)
            props.setProperty("password", ctx.credentials.password)
            conn = driver.connect(self.url, props)
            if conn is None:
                shown = redact_jdbc_url(self.url)
                raise ConfigurationError(f"JDBC driver {self.driver} does not accept the URL {shown}")
            try:
                conn.setReadOnly(True)
                return work(jvm, conn)
            finally:
                conn.close()
        except ConfigurationError:
            raise
        except Exception as exc:
            raise self._query_failed(label, exc) from exc

    def _query_failed(self, label: str | None, exc: Exception) -> BatchError:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return BatchError(label, f"the source query on {self.table} failed: {text}")

    def _query_native(
        self,
        module: Any,
        info: dict[str, Any],
        ctx: ReadContext,
        build: Callable[[bool], str],
        label: str | None,
    ) -> list[Any]:
        """:meth:`_query` over a DB-API connection, with values as the JVM path gives them."""
        if ctx.credentials is None:
            raise ConfigurationError("the JDBC source needs credentials (an Airflow connection)")
        try:
            # Explicit options replace PGOPTIONS from the environment, which pgjdbc (the path
            # Spark reads with) ignores: another search_path would plan one table and read
            # another. psycopg parses timestamptz values in ISO DateStyle only, as pgjdbc
            # forces it, whatever the role's or PGDATESTYLE's setting.
            conn = module.connect(
                **info,
                user=ctx.credentials.user,
                password=ctx.credentials.password,
                options="-c DateStyle=ISO",
            )
            try:
                cur = conn.cursor()
                cur.execute("SET TRANSACTION READ ONLY")
                for statement in _PG_RENDERING:
                    cur.execute(statement)
                zoned = False
                if self.key_type == "timestamp":
                    cur.execute(f"SELECT {self._k} FROM {self._t} WHERE 1 = 0")
                    zoned = cur.description[0][1] == _PG_TIMESTAMPTZ
                cur.execute(build(zoned))
                row = cur.fetchone()
                types = [d[1] for d in cur.description]
            finally:
                conn.close()
        except ConfigurationError:
            raise
        except Exception as exc:
            raise self._query_failed(label, exc) from exc
        return [self._native_value(v, t) for v, t in zip(row, types, strict=True)]

    def _native_value(self, value: Any, type_code: Any) -> Any:
        if value is None or isinstance(value, int | str):
            return value
        if isinstance(value, datetime) and type_code in (_PG_TIMESTAMPTZ, _PG_TIMESTAMP):
            # Keys are UTC: a ``timestamp without time zone`` as written, one with a zone in UTC.
            if value.tzinfo is not None:
                value = value.astimezone(UTC).replace(tzinfo=None)
            return value.strftime("%Y-%m-%d %H:%M:%S.%f")
        return str(value)

    def _one_row(self, jvm: Any, conn: Any, sql: str) -> list[Any]:
        rows = conn.createStatement().executeQuery(sql)
        rows.next()
        width = rows.getMetaData().getColumnCount()
        return [self._value(jvm, rows, i) for i in range(1, width + 1)]

    def _zoned(self, conn: Any) -> bool:
        """Whether the key column is a ``timestamp with time zone`` (read from the table)."""
        if self.key_type != "timestamp":
            return False
        meta = (
            conn.createStatement().executeQuery(f"SELECT {self._k} FROM {self._t} WHERE 1 = 0").getMetaData()
        )
        return _is_zoned(meta, 1)

    def _value(self, jvm: Any, rows: Any, i: int) -> Any:
        """Column ``i`` of the current row as a Python value (a key, or a count)."""
        if self.key_type == "timestamp" and rows.getMetaData().getColumnType(i) in _JDBC_TIMESTAMPS:
            # Keys are UTC: a ``timestamp without time zone`` as written, one with a zone in UTC.
            java_class = jvm.java.lang.Class.forName
            if _is_zoned(rows.getMetaData(), i):
                zoned = rows.getObject(i, java_class("java.time.OffsetDateTime"))
                local = None if zoned is None else zoned.withOffsetSameInstant(jvm.java.time.ZoneOffset.UTC)
                local = None if local is None else local.toLocalDateTime()
            else:
                local = rows.getObject(i, java_class("java.time.LocalDateTime"))
            if local is None:
                return None
            return datetime.fromisoformat(str(local.toString())).strftime("%Y-%m-%d %H:%M:%S.%f")
        value = rows.getObject(i)
        if value is None or isinstance(value, int | str):
            return value
        return str(value.toString())  # BigDecimal and friends

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
            return f"SELECT COUNT(*) AS n, {_FINGERPRINT} AS fp FROM ({rows}) eod_r"

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
                f"{what}, and null_keys='fail': nothing was loaded. To go on, {fix}, or set "
                "null_keys='warn'",
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
                where = "" if low is None else f" WHERE {self._k} > {_literal(low, self.key_type, zoned)}"
                above = "" if low is None else f"{self._k} > {_literal(low, self.key_type, zoned)} AND "
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

    # -- reading -----------------------------------------------------------------
    def hashes_rows(self, plan: Plan) -> bool:
        """Whether :meth:`read` can carry each row's hash (:data:`ROW_HASH_COLUMN`) to hold
        what Spark read to the plan's fingerprint: PostgreSQL, and a plan fingerprinted so."""
        fp = plan.inputs[0].get("fingerprint") if plan.inputs else None
        return self._postgres and str(fp).split(":")[0] == FINGERPRINT_SCHEME

    def read(self, plan: Plan, ctx: ReadContext, *, row_hash: bool = False) -> DataFrame:
        """A DataFrame of exactly the planned key range, read in parallel by key range.

        :param row_hash: add :data:`ROW_HASH_COLUMN`, each row's hash as the fingerprint
            computes it, with the same rendering settings (see :meth:`hashes_rows`).
        """
        cols = ", ".join(quote_identifier(c, "column") for c in self.columns) if self.columns else "*"
        zoned = self.key_type == "timestamp" and self._connected(
            ctx, plan.key.label, lambda _jvm, c: self._zoned(c)
        )
        rows = f"SELECT {cols} FROM {self._t} WHERE {self._range(plan.boundary, zoned)}"
        if row_hash:
            row_hash_sql = f'hashtextextended(eod_r::text, 0) AS "{ROW_HASH_COLUMN}"'
            rows = f"SELECT eod_r.*, {row_hash_sql} FROM ({rows}) eod_r"
        reader = self._reader(ctx).option("dbtable", f"({rows}) eod_batch")
        reader = reader.option("fetchsize", str(self.fetch_size))
        if row_hash:
            # Rows render as text as they did for the fingerprint at planning.
            reader = reader.option("sessionInitStatement", _PG_RENDERING_AT_CONNECT)
        b = plan.boundary
        if self.num_partitions > 1 and self.key_type == "integer" and "high" in b:
            low = (b["low"] if b.get("low") is not None else 0) + 1
            reader = (
                reader.option("partitionColumn", self.key_column)
                .option("lowerBound", str(low))
                .option("upperBound", str(int(b["high"]) + 1))
                .option("numPartitions", str(self.num_partitions))
            )
        return reader.load()
