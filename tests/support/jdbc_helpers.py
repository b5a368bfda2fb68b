"""Helpers for the `jdbc` tests: an orders table in PostgreSQL and its checker."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from airflow_eod.examples.compare import Comparison, compare_rows, read_delta_rows

COLUMNS = ["id", "customer", "amount", "created_at"]
BASE = dt.datetime(2026, 11, 1, 0, 0, 0)


def create_orders(pg: Any, table: str) -> None:
    pg.execute(
        f"CREATE TABLE {table} (id bigint PRIMARY KEY, customer text, amount numeric(10,2), "
        "created_at timestamp NOT NULL)"
    )


def insert_orders(pg: Any, table: str, ids: range, *, hours_apart: int = 1) -> None:
    pg.execute(
        f"INSERT INTO {table} (id, customer, amount, created_at) VALUES (%s, %s, %s, %s)",
        [
            (i, f"c{i % 7}", Decimal(i) / 4, BASE + dt.timedelta(hours=i * hours_apart, microseconds=i))
            for i in ids
        ],
        many=True,
    )


def _naive(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(
        v.astimezone(dt.UTC).replace(tzinfo=None) if isinstance(v, dt.datetime) and v.tzinfo else v
        for v in row
    )


def check_against_postgres(pg: Any, source_table: str, delta_table: str, where: str = "TRUE") -> Comparison:
    """Row-by-row comparison of the Delta table with the PostgreSQL rows ``where``."""
    source = [_naive(r) for r in pg.rows(f"SELECT {', '.join(COLUMNS)} FROM {source_table} WHERE {where}")]
    target = [_naive(r) for r in read_delta_rows(delta_table, COLUMNS)]
    return compare_rows(source, target)


def airflow_connection(pg: Any) -> str:
    """The server as an Airflow connection (``AIRFLOW_CONN_...``), JSON form."""
    import json

    return json.dumps(
        {
            "conn_type": "postgres",
            "host": pg.host,
            "port": pg.port,
            "schema": pg.database,
            "login": pg.user,
            "password": pg.password,
        }
    )
