"""A Kafka connection, said twice: to librdkafka (planning) and to Spark's Java client (reading).

The Airflow Apache Kafka provider's connection holds a librdkafka configuration; the planning
client takes it as it is, and Spark's ``kafka`` reader takes the Java client's settings,
prefixed ``kafka.``. This module translates the settings both clients share, builds the SASL
login (``sasl.jaas.config``) from the credentials, and refuses a security setting it cannot
translate rather than drop it: a reader that silently connects without TLS, or not at all,
is worse than an error at parse time. Secrets never sit in the source: they come from the
read context's credentials (masked in Airflow's logs, absent from plans and specs).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.source import Credentials

if TYPE_CHECKING:
    from airflow_eod.core.planlog.store import Plan

# librdkafka setting -> Java client setting (same meaning, both clients).
_SHARED = {
    "security.protocol": "security.protocol",
    "sasl.mechanism": "sasl.mechanism",
    "sasl.mechanisms": "sasl.mechanism",
    "ssl.endpoint.identification.algorithm": "ssl.endpoint.identification.algorithm",
    "client.id": "client.id",
}
# Settings only the planning client needs (Spark's reader sets its own).
_PLANNING_ONLY = {
    "socket.timeout.ms",
    "request.timeout.ms",
    "metadata.max.age.ms",
    "reconnect.backoff.ms",
    "reconnect.backoff.max.ms",
    "broker.address.family",
    "group.id",
}
# Secrets: given as the connection's login/password or its extra, held as credentials.
SECRET_KEYS = ("sasl.username", "sasl.password")
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def check_client_config(config: Mapping[str, Any]) -> None:
    """Refuse settings that cannot reach both clients, and secrets, naming them.

    :param config: librdkafka settings without ``bootstrap.servers`` and without secrets.
    """
    for key, value in config.items():
        if key in SECRET_KEYS or "password" in key or "secret" in key:
            raise ConfigurationError(
                f"Kafka setting {key!r} is a secret: keep it in the Airflow connection (login and "
                "password, or the connection's extra), not in the DAG"
            )
        if key == "bootstrap.servers":
            raise ConfigurationError(
                "pass the brokers as bootstrap_servers (or the connection), not client_config"
            )
        if key not in _SHARED and key not in _PLANNING_ONLY and key != "ssl.ca.location":
            raise ConfigurationError(
                f"Kafka setting {key!r} is not one airflow-eod passes to both its planning client "
                f"and Spark's reader (known: {sorted({*_SHARED, *_PLANNING_ONLY, 'ssl.ca.location'})}); "
                "a client certificate or OAuth login is not supported yet"
            )
        if key == "security.protocol" and str(value).upper() not in _PROTOCOLS:
            raise ConfigurationError(f"security.protocol {value!r} is not one of {_PROTOCOLS}")
        if key in ("sasl.mechanism", "sasl.mechanisms") and str(value).upper() not in _LOGIN_MODULES:
            raise ConfigurationError(
                f"sasl.mechanism {value!r} is not supported (supported: {sorted(_LOGIN_MODULES)})"
            )


def _mechanism(config: Mapping[str, Any]) -> str:
    return str(config.get("sasl.mechanism", config.get("sasl.mechanisms", "PLAIN"))).upper()


def _uses_sasl(config: Mapping[str, Any]) -> bool:
    return str(config.get("security.protocol", "PLAINTEXT")).upper().startswith("SASL")


def planning_config(
    bootstrap_servers: str, config: Mapping[str, Any], credentials: Credentials | None
) -> dict[str, Any]:
    """The librdkafka configuration of the planning client."""
    out: dict[str, Any] = {"bootstrap.servers": bootstrap_servers, **config}
    if _uses_sasl(config):
        if credentials is None:
            raise ConfigurationError(
                "security.protocol SASL_* needs a user and password (the connection's login)"
            )
        out["sasl.username"] = credentials.user
        out["sasl.password"] = credentials.password
    return out


def _jaas(mechanism: str, credentials: Credentials) -> str:
    def quoted(text: str) -> str:
        # JAAS values are double-quoted strings (Java's StreamTokenizer): a quote or backslash
        # in them is escaped, and so is a line break, which would end the string and spill
        # the rest of the value into the parser's errors.
        escaped = text.replace("\\", "\\\\").replace('"', '\\"')
        return '"' + escaped.replace("\n", "\\n").replace("\r", "\\r") + '"'

    return (
        f"{_LOGIN_MODULES[mechanism]} required username={quoted(credentials.user)} "
        f"password={quoted(credentials.password)};"
    )


def spark_reader_options(
    bootstrap_servers: str, config: Mapping[str, Any], plan: Plan, credentials: Credentials | None
) -> dict[str, str]:
    """Options of Spark's ``kafka`` reader that read exactly the frozen ranges of ``plan``.

    :param bootstrap_servers: the brokers.
    :param config: the source's librdkafka settings (checked by :func:`check_client_config`).
    :param plan: the frozen batch.
    :param credentials: the SASL user and password, if the connection has them.

    ``failOnDataLoss`` stays on: a record of a frozen range that Kafka no longer holds fails
    the read instead of leaving a hole in the batch.
    """
    ranges = plan.boundary["topics"]
    starting = {t: {p: r[0] for p, r in e["partitions"].items()} for t, e in ranges.items()}
    ending = {t: {p: r[1] for p, r in e["partitions"].items()} for t, e in ranges.items()}
    options = {
        "kafka.bootstrap.servers": bootstrap_servers,
        "assign": json.dumps({t: sorted(int(p) for p in e["partitions"]) for t, e in ranges.items()}),
        "startingOffsets": json.dumps(starting),
        "endingOffsets": json.dumps(ending),
        "kafka.isolation.level": str(plan.boundary["isolation_level"]),
        "failOnDataLoss": "true",
        "includeHeaders": "false",
    }
    for key, value in config.items():
        if key in _SHARED:
            options[f"kafka.{_SHARED[key]}"] = (
                str(value).upper() if "protocol" in key or "mechanism" in key else str(value)
            )
    if str(config.get("ssl.endpoint.identification.algorithm", "")).lower() == "none":
        # librdkafka turns host name checking off with "none"; the Java client with an empty
        # value (it would take "none" as the name of an algorithm and fail the handshake).
        options["kafka.ssl.endpoint.identification.algorithm"] = ""
    if "ssl.ca.location" in config:
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.location"] = str(config["ssl.ca.location"])
    if _uses_sasl(config):
        if credentials is None:
            raise ConfigurationError(
                "security.protocol SASL_* needs a user and password (the connection's login)"
            )
        options["kafka.sasl.jaas.config"] = _jaas(_mechanism(config), credentials)
    return options
