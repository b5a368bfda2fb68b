"""KafkaSourceHook: the Kafka cluster a Kafka load reads, from one Airflow connection."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.log import mask_secret

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.source import Credentials
from airflow_eod.sources.kafka_config import SECRET_KEYS, check_client_config


class KafkaSourceHook(BaseHook):
    """The connection of a Kafka source, in the form of the Apache Kafka provider's ``kafka``
    connection: its ``extra`` is a librdkafka configuration (``bootstrap.servers``,
    ``security.protocol``, ``sasl.mechanism``, ``ssl.ca.location``, ...). The connection's
    host and port stand for ``bootstrap.servers`` when the extra has none; its login and
    password (or the extra's ``sasl.username``/``sasl.password``) are the SASL credentials,
    registered with Airflow's secrets masker as soon as they are read. Any other secret in the
    extra is refused, by name (see :mod:`airflow_eod.sources.kafka_config`).

    :param kafka_config_id: the Airflow connection id.
    """

    conn_name_attr = "kafka_config_id"
    default_conn_name = "kafka_default"
    conn_type = "kafka"
    hook_name = "airflow-eod Kafka source"

    def __init__(self, kafka_config_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kafka_config_id = kafka_config_id

    @cached_property
    def connection(self) -> Any:
        """The Airflow connection, fetched once per hook; its secrets masked at once."""
        conn = self.get_connection(self.kafka_config_id)
        extra = dict(conn.extra_dejson or {})
        for secret in (conn.password, extra.get("sasl.password")):
            if secret:
                mask_secret(str(secret))
        return conn

    @property
    def _extra(self) -> dict[str, Any]:
        return dict(self.connection.extra_dejson or {})

    @property
    def bootstrap_servers(self) -> str:
        """``bootstrap.servers`` of the extra, else the connection's ``host:port``."""
        conn, extra = self.connection, self._extra
        if extra.get("bootstrap.servers"):
            return str(extra["bootstrap.servers"])
        if conn.host:
            return f"{conn.host}:{conn.port or 9092}" if ":" not in str(conn.host) else str(conn.host)
        raise ConfigurationError(
            f"connection {self.kafka_config_id!r} names no brokers: set extra "
            '{"bootstrap.servers": "host:port,..."} or the connection\'s host and port'
        )

    @property
    def client_config(self) -> dict[str, Any]:
        """The extra's client settings, without the brokers and the secrets."""
        config = {k: v for k, v in self._extra.items() if k != "bootstrap.servers" and k not in SECRET_KEYS}
        try:
            check_client_config(config)
        except ConfigurationError as exc:
            raise ConfigurationError(f"connection {self.kafka_config_id!r}: {exc}") from None
        return config

    def credentials(self) -> Credentials | None:
        """The SASL user and password: the connection's login and password, or the extra's
        ``sasl.username``/``sasl.password``; ``None`` without a user."""
        conn, extra = self.connection, self._extra
        user = conn.login or extra.get("sasl.username")
        password = conn.password or extra.get("sasl.password") or ""
        return Credentials(str(user), str(password)) if user else None
