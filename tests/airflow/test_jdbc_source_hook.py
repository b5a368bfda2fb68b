"""JdbcSourceHook: one place that reads a JDBC source's Airflow connection (fetched once),
builds its URL, driver and credentials, and registers its password with the masker."""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.hooks.jdbc_source import JdbcSourceHook

pytestmark = pytest.mark.airflow

PASSWORD = "pw-9f3!kq"


def _conn(monkeypatch: Any, conn_id: str, **fields: Any) -> JdbcSourceHook:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))
    return JdbcSourceHook(jdbc_conn_id=conn_id)


def test_a_postgres_connection_makes_the_url_from_host_port_and_database(monkeypatch: Any) -> None:
    hook = _conn(
        monkeypatch, "pg_src", conn_type="postgres", host="db.internal", port=6432, schema="sales",
        login="loader", password=PASSWORD,
    )  # fmt: skip
    assert hook.jdbc_url == "jdbc:postgresql://db.internal:6432/sales"
    assert hook.driver == "org.postgresql.Driver"
    assert (hook.credentials().user, hook.credentials().password) == ("loader", PASSWORD)
    assert PASSWORD not in hook.jdbc_url


def test_a_jdbc_connection_is_read_as_the_jdbc_provider_defines_it(monkeypatch: Any) -> None:
    hook = _conn(
        monkeypatch, "jdbc_src", conn_type="jdbc", host="jdbc:postgresql://10.0.0.5:5432/dw?sslmode=require",
        login="loader", password=PASSWORD, extra={"driver_class": "org.postgresql.Driver"},
    )  # fmt: skip
    assert hook.jdbc_url == "jdbc:postgresql://10.0.0.5:5432/dw?sslmode=require"
    assert hook.driver == "org.postgresql.Driver"


def test_extra_jdbc_url_wins_and_a_connection_without_one_or_a_login_is_refused(monkeypatch: Any) -> None:
    # A driver class from the extra needs the JDBC provider's gate (issue 18, item 28).
    monkeypatch.setenv("AIRFLOW__PROVIDERS_JDBC__ALLOW_DRIVER_CLASS_IN_EXTRA", "True")
    hook = _conn(
        monkeypatch, "x_src", conn_type="postgres", host="h", login="u", password=PASSWORD,
        extra={"jdbc_url": "jdbc:postgresql://other:5433/db", "driver": "com.example.Driver"},
    )  # fmt: skip
    assert (hook.jdbc_url, hook.driver) == ("jdbc:postgresql://other:5433/db", "com.example.Driver")
    with pytest.raises(ConfigurationError, match="use a postgres connection"):
        _ = _conn(monkeypatch, "mysql_src", conn_type="mysql", host="h", login="u").jdbc_url
    with pytest.raises(ConfigurationError, match="has no login"):
        _conn(monkeypatch, "anon_src", conn_type="postgres", host="h", schema="d").credentials()


def test_the_connection_is_fetched_once_and_its_password_is_masked(monkeypatch: Any) -> None:
    from airflow.sdk._shared.secrets_masker import redact

    hook = _conn(
        monkeypatch, "once_src", conn_type="postgres", host="h", schema="d", login="u", password=PASSWORD
    )
    fetched: list[str] = []
    real = JdbcSourceHook.get_connection

    def counting(conn_id: str) -> Any:
        fetched.append(conn_id)
        return real(conn_id)

    monkeypatch.setattr(JdbcSourceHook, "get_connection", staticmethod(counting))
    assert hook.jdbc_url and hook.credentials() and hook.driver and hook.jdbc_url
    assert fetched == ["once_src"]
    assert PASSWORD not in str(redact(f"connecting with {PASSWORD}"))
