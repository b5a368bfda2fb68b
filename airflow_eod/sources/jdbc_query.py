"""The JDBC source's one-row queries (planning, and the input checks before a commit).

For PostgreSQL a query goes over libpq, so planning in an Airflow task starts no JVM;
otherwise over a plain JDBC connection opened in the driver's JVM. The values come back
as the JVM path gives them either way.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from airflow_eod.core.errors import BatchError, ConfigurationError
from airflow_eod.core.source import ReadContext
from airflow_eod.sources.jdbc_sql import PG_RENDERING, POSTGRES_DRIVER, quote_identifier
from airflow_eod.sources.jdbc_url import redact_jdbc_url

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


class JdbcQueries:
    """The queries of :class:`~airflow_eod.sources.jdbc_incremental.JdbcIncrementalSource`,
    which provides the fields below."""

    url: str
    table: str
    key_column: str
    key_type: str
    driver: str

    @property
    def _t(self) -> str:
        return quote_identifier(self.table, "table")

    @property
    def _k(self) -> str:
        return quote_identifier(self.key_column, "key column")

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
            for statement in PG_RENDERING if self._postgres else ():
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
                for statement in PG_RENDERING:
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
