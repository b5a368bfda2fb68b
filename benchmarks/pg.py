"""A real PostgreSQL for the JDBC planning figures, started by the tests' own starter
(:mod:`tests.support.postgres_server`), and the source table the JDBC pipeline plans against."""

from __future__ import annotations

import socket
from typing import Any

SOURCE_TABLE = "bench_orders"
# A fixed port when it is free, so that a resumed history (``--resume``) sees the same JDBC
# URL, which is part of the source's identity in its plans.
PREFERRED_PORT = 54329


class PostgresUnavailable(RuntimeError):
    """The server could not be started here (binaries or the JDBC jar missing)."""


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start() -> Any:
    """Start a throwaway server on 127.0.0.1 (``tests.support.postgres_server.PostgresServer``)."""
    try:
        from tests.support import postgres_server
    except ImportError as exc:  # pytest or psycopg2 missing: `pip install -e '.[bench]'`
        raise PostgresUnavailable(f"cannot import tests.support.postgres_server: {exc}") from exc
    own_free_port = postgres_server.free_port
    if _port_free(PREFERRED_PORT):
        postgres_server.free_port = lambda: PREFERRED_PORT  # type: ignore[assignment]
    try:
        return postgres_server.PostgresServer.start()
    except BaseException as exc:  # the starter skips (pytest's Skipped) when binaries are missing
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise PostgresUnavailable(str(exc) or type(exc).__name__) from exc
    finally:
        postgres_server.free_port = own_free_port  # type: ignore[assignment]


def create_source_table(pg: Any) -> None:
    pg.execute(
        f"CREATE TABLE IF NOT EXISTS {SOURCE_TABLE} (id bigint PRIMARY KEY, customer text, "
        "amount numeric(10,2), created_at timestamp NOT NULL)"
    )


def ensure_rows(pg: Any, upto: int) -> None:
    """Insert rows so that ids ``1..upto`` exist and none above (ids only ever grow here)."""
    have = pg.rows(f"SELECT COALESCE(MAX(id), 0) FROM {SOURCE_TABLE}")[0][0]
    if int(have) >= upto:
        return
    pg.execute(
        f"INSERT INTO {SOURCE_TABLE} (id, customer, amount, created_at) "
        "SELECT g, 'c' || (g %% 7), g / 4.0, TIMESTAMP '2026-11-01' + g * INTERVAL '1 second' "
        "FROM generate_series(%s, %s) AS g",
        (int(have) + 1, upto),
    )
