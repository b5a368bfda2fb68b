"""JdbcSourceHook: the database a JDBC load reads, from one Airflow connection."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.log import mask_secret

try:
    from airflow.sdk.configuration import conf
except ImportError:  # Airflow 3.1
    from airflow.configuration import conf  # type: ignore[no-redef]

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.source import Credentials

# Connection types whose host, port and schema (the database) make a JDBC URL.
_URL_SCHEMES = {"postgres": "postgresql", "postgresql": "postgresql"}
# The JDBC provider's connection type: its host is the whole JDBC URL.
_JDBC_CONN_TYPE = "jdbc"
DEFAULT_DRIVER = "org.postgresql.Driver"
# Airflow's JDBC provider's gates (section [providers.jdbc], both off by default): whoever can
# edit a connection must not choose a class for the worker's JVM to load (a Derby URL with
# its driver creates files anywhere the worker can write) or a jar for it to run.
CONF_SECTION = "providers.jdbc"
ALLOW_DRIVER_CLASS = "allow_driver_class_in_extra"
ALLOW_DRIVER_PATH = "allow_driver_path_in_extra"


class JdbcSourceHook(BaseHook):
    """The connection of a JDBC source: fetched once, its JDBC URL, driver class and
    credentials built here and nowhere else, and its password registered with Airflow's
    secrets masker as soon as it is read, so that no log line of the task shows it.

    Two connection forms are read:

    - a ``postgres`` connection (the one ``apache-airflow-providers-postgres`` defines): host,
      port (default 5432) and schema (the database) make ``jdbc:postgresql://host:port/db``;
    - a ``jdbc`` connection (as ``apache-airflow-providers-jdbc`` defines it): its host is the
      JDBC URL, and ``extra.driver_class`` names the driver.

    Either may set ``extra.jdbc_url`` (the URL, taking precedence). The URL must not carry a
    user or a password: those are the connection's login and password, and they reach Spark
    only as the reader's ``user``/``password`` options.

    The driver class is the ``driver`` argument (default ``org.postgresql.Driver``). As in
    Airflow's JDBC provider, a connection's ``extra.driver_class`` (or ``extra.driver``) is
    used only when ``[providers.jdbc] allow_driver_class_in_extra = True``: otherwise a
    connection that names another class is refused with an error naming that setting.
    ``extra.driver_path`` is never used (driver jars come from the operator's ``jars``).

    :param jdbc_conn_id: the Airflow connection id.
    :param driver: the JDBC driver class, set by the DAG (not by the connection).
    """

    conn_name_attr = "jdbc_conn_id"
    default_conn_name = "postgres_default"
    hook_name = "airflow-eod JDBC source"

    def __init__(
        self, jdbc_conn_id: str = default_conn_name, *, driver: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.jdbc_conn_id = jdbc_conn_id
        self._driver = driver

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
        """The JDBC driver class: the ``driver`` argument (or the default), or the connection's
        ``extra.driver_class`` only where ``[providers.jdbc] allow_driver_class_in_extra``."""
        extra = {str(k).lower(): v for k, v in self._extra.items()}
        own = self._driver or DEFAULT_DRIVER
        if extra.get("driver_path"):
            self.log.warning(
                "connection %r sets extra.driver_path; airflow-eod never loads a jar a connection "
                "names (whatever [%s] %s says): give driver jars to the operator's jars argument",
                self.jdbc_conn_id,
                CONF_SECTION,
                ALLOW_DRIVER_PATH,
            )
        named = extra.get("driver_class") or extra.get("driver")
        if not named or str(named) == own:
            return own
        if conf.getboolean(CONF_SECTION, ALLOW_DRIVER_CLASS, fallback=False):
            return str(named)
        # Refused, not replaced by the default: a wrong driver would fail later, less clearly.
        raise ConfigurationError(
            f"connection {self.jdbc_conn_id!r} names the JDBC driver class {str(named)!r} in its "
            f"extra, and a connection may choose the class the worker's JVM loads only with "
            f"[{CONF_SECTION}] {ALLOW_DRIVER_CLASS} = True (AIRFLOW__PROVIDERS_JDBC__"
            f"{ALLOW_DRIVER_CLASS.upper()}=True), as in Airflow's JDBC provider. Pass driver="
            f"{str(named)!r} to the operator instead, or set that option if every person who "
            "can edit connections may choose it"
        )

    def credentials(self) -> Credentials:
        """The connection's login and password."""
        conn = self.connection
        if not conn.login:
            raise ConfigurationError(f"connection {self.jdbc_conn_id!r} has no login")
        return Credentials(conn.login, conn.password or "")
