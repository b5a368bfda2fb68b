"""The SQL text of the JDBC source: quoted identifiers, typed literals, and PostgreSQL's
row rendering and content fingerprint. Values reach SQL only as literals formatted here
from typed Python values (``int`` or ``datetime``)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from airflow_eod.core.errors import ConfigurationError

POSTGRES_DRIVER = "org.postgresql.Driver"
# Session settings that decide how PostgreSQL renders a row as text, pinned for the content
# fingerprint: planning (libpq) and the check before the commit (libpq, or pgjdbc in a
# submitted driver) must render the same row the same way, whatever the role's defaults.
PG_SETTINGS = (
    ("TimeZone", "UTC"),
    ("DateStyle", "ISO"),
    ("IntervalStyle", "postgres"),
    ("extra_float_digits", "3"),
    ("bytea_output", "hex"),
)
PG_RENDERING = tuple(f"SET {name} TO '{value}'" for name, value in PG_SETTINGS)
# The same settings as one statement, for Spark's reader to run as it connects.
PG_RENDERING_AT_CONNECT = "SELECT " + ", ".join(
    f"set_config('{name}', '{value}', false)" for name, value in PG_SETTINGS
)
# The fingerprint: the sum (exact, numeric) of a 64-bit hash of every row's text:
# order-independent, and a sum, unlike XOR, does not cancel out two identical rows changed
# alike. hashtextextended (PostgreSQL 11+) costs a tenth of md5 plus the casts to sum its
# parts (benchmarks/jdbc_fingerprint.py); it detects accidents, not a forger.
FINGERPRINT_SQL = "concat_ws(':', 'h64sum', COALESCE(SUM(hashtextextended(eod_r::text, 0)), 0))"

# The column a PostgreSQL batch read carries beside the row: the same 64-bit hash of the row's
# text that the fingerprint sums, computed by the database as Spark reads the row, so what
# Spark read can be held to the frozen fingerprint (airflow_eod/spark/jdbc_reader.py) and then dropped.
ROW_HASH_COLUMN = "__eod_row_hash"
FINGERPRINT_SCHEME = "h64sum"

_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def quote_identifier(name: str, what: str = "identifier") -> str:
    """``"schema"."table"`` from ``schema.table`` after checking each part."""
    parts = name.split(".") if isinstance(name, str) else []
    if not 1 <= len(parts) <= 2 or not all(_IDENT_RE.match(p) for p in parts):
        raise ConfigurationError(
            f"{what} {name!r} is not a plain SQL identifier (letters, digits, '_', optionally "
            "schema-qualified); refusing to build SQL from it"
        )
    return ".".join(f'"{p}"' for p in parts)


def sql_literal(value: Any, key_type: str, zoned: bool = False) -> str:
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
