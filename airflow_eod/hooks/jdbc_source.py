"""JdbcSourceHook: the database a JDBC load reads, from one Airflow connection."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.log import mask_secret

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.sources.base import Credentials

# Connection types whose host, port and schema (the database) make a JDBC URL.
_URL_SCHEMES = {"postgres": "postgresql", "postgresql": "postgresql"}
# The JDBC provider's connection type: its host is the whole JDBC URL.
_JDBC_CONN_TYPE = "jdbc"
DEFAULT_DRIVER = "org.postgresql.Driver"


class JdbcSourceHook(BaseHook):
    """The connection of a JDBC source: fetched once, its JDBC URL, driver class and
    credentials built here and nowhere else, and its password registered with Airflow's
    secrets masker as soon as it is read, so that no log line of the task shows it.

    Two connection forms are read:

    - a ``postgres`` connection (the one ``apache-airflow-providers-postgres`` defines): host,
      port (default 5432) and schema (the database) make ``jdbc:postgresql://host:port/db``;
    - a ``jdbc`` connection (as ``apache-airflow-providers-jdbc`` defines it): its host is the
      JDBC URL, and ``extra.driver_class`` names the driver.

    Either may set ``extra.jdbc_url`` (the URL, taking precedence) and ``extra.driver``. The
    URL must not carry a user or a password: those are the connection's login and password,
    and they reach Spark only as the reader's ``user``/``password`` options.

    :param jdbc_conn_id: the Airflow connection id.
    """

    conn_name_attr = "jdbc_conn_id"
    default_conn_name = "postgres_default"
    hook_name = "airflow-eod JDBC source"

    def __init__(self, jdbc_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.jdbc_conn_id = jdbc_conn_id

    @cached_property
    def connection(self) -> Any:
        """The Airflow connection, fetched once per hook."""
        conn = self.get_connection(self.jdbc_conn_id)
        if conn.password:
            mask_secret(conn.password)
        return conn

    @property
    def _extra(self) -> dict[str, Any]:
        return dict(self.connection.extra_dejson or {})

    @property
    def jdbc_url(self) -> str:
        """The JDBC URL of the database."""
        conn, extra = self.connection, self._extra
        if extra.get("jdbc_url"):
            return str(extra["jdbc_url"])
        if conn.conn_type == _JDBC_CONN_TYPE and conn.host:
            return str(conn.host)
        scheme = _URL_SCHEMES.get(conn.conn_type or "")
        if scheme is None or not conn.host:
            raise ConfigurationError(
                f"connection {self.jdbc_conn_id!r} (type {conn.conn_type!r}): use a postgres connection "
                "with host, port and schema (the database), a jdbc connection whose host is the JDBC "
                "URL, or set extra.jdbc_url"
            )
        # An IPv6 address goes in brackets, or its colons read as the port's.
        host = f"[{conn.host}]" if ":" in conn.host and not conn.host.startswith("[") else conn.host
        return f"jdbc:{scheme}://{host}:{conn.port or 5432}/{conn.schema or ''}"

    @property
    def driver(self) -> str:
        """The JDBC driver class."""
        extra = self._extra
        return str(extra.get("driver") or extra.get("driver_class") or DEFAULT_DRIVER)

    def credentials(self) -> Credentials:
        """The connection's login and password."""
        conn = self.connection
        if not conn.login:
            raise ConfigurationError(f"connection {self.jdbc_conn_id!r} has no login")
        return Credentials(conn.login, conn.password or "")
