"""A Kafka connection without a broker: the ``kafka`` Airflow connection as KafkaSourceHook
reads it, the settings Spark's reader gets (airflow_eod/sources/kafka_config.py), and what
KafkaToDeltaOperator refuses when the DAG is parsed. Fast: no JVM, no broker, no DB."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.source import Credentials
from airflow_eod.hooks.kafka_source import KafkaSourceHook
from airflow_eod.operators.kafka_to_delta import KafkaToDeltaOperator
from airflow_eod.sources.kafka_config import check_client_config, planning_config, spark_reader_options

PASSWORD = "kp-7Zq!x"
BROKERS = "b1.internal:9092,b2.internal:9092"


def _hook(monkeypatch: Any, conn_id: str, **fields: Any) -> KafkaSourceHook:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "kafka", **fields}))
    return KafkaSourceHook(kafka_config_id=conn_id)


def _plan(isolation: str = "read_committed") -> Any:
    partitions = {"0": [0, 5], "1": [3, 7]}
    boundary = {"topics": {"orders": {"id": "tid", "partitions": partitions}}, "isolation_level": isolation}
    return SimpleNamespace(boundary=boundary)


# -- the hook ------------------------------------------------------------------------------------


def test_the_brokers_come_from_the_extra_or_the_host_and_port(monkeypatch: Any) -> None:
    hook = _hook(monkeypatch, "k_extra", host="ignored", extra={"bootstrap.servers": BROKERS})
    assert (hook.bootstrap_servers, hook.client_config, hook.credentials()) == (BROKERS, {}, None)
    assert _hook(monkeypatch, "k_hp", host="b1.internal", port=9093).bootstrap_servers == "b1.internal:9093"
    assert _hook(monkeypatch, "k_h", host="b1.internal").bootstrap_servers == "b1.internal:9092"
    assert _hook(monkeypatch, "k_list", host=BROKERS).bootstrap_servers == BROKERS
    with pytest.raises(ConfigurationError, match=r"connection 'k_none' names no brokers.*bootstrap.servers"):
        _ = _hook(monkeypatch, "k_none", extra={"security.protocol": "SSL"}).bootstrap_servers


def test_login_and_password_are_the_sasl_credentials_and_are_masked(monkeypatch: Any) -> None:
    from airflow.sdk._shared.secrets_masker import redact

    extra = {"bootstrap.servers": BROKERS, "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"}
    hook = _hook(monkeypatch, "k_login", login="loader", password=PASSWORD, extra=extra)
    creds = hook.credentials()
    assert creds is not None and (creds.user, creds.password) == ("loader", PASSWORD)
    assert hook.client_config == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"}
    assert PASSWORD not in repr(creds)
    assert PASSWORD not in str(redact(f"connecting with {PASSWORD}"))


def test_sasl_secrets_in_the_extra_are_taken_as_credentials_never_as_settings(monkeypatch: Any) -> None:
    from airflow.sdk._shared.secrets_masker import redact

    secret = "extra-pw-Q81"
    extra = {
        "bootstrap.servers": BROKERS,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.username": "from-extra",
        "sasl.password": secret,
    }
    hook = _hook(monkeypatch, "k_sasl_extra", extra=extra)
    assert hook.client_config == {"security.protocol": "SASL_PLAINTEXT"}
    creds = hook.credentials()
    assert creds is not None and (creds.user, creds.password) == ("from-extra", secret)
    assert secret not in str(redact(f"pw {secret}")), "a password of the extra is masked too"
    # The connection's own login and password win over the extra's.
    both = _hook(monkeypatch, "k_both", login="conn-user", password=PASSWORD, extra=extra).credentials()
    assert both is not None and (both.user, both.password) == ("conn-user", PASSWORD)


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("ssl.key.password", "pw", "is a secret"),
        ("sasl.oauthbearer.client.secret", "s", "is a secret"),
        ("ssl.certificate.location", "/etc/c.pem", "not one airflow-eod passes"),
        ("sasl.oauthbearer.method", "oidc", "not one airflow-eod passes"),
        ("enable.idempotence", "true", "not one airflow-eod passes"),
        ("security.protocol", "TLS", "is not one of"),
        ("sasl.mechanism", "GSSAPI", "is not supported"),
        ("sasl.mechanism", "OAUTHBEARER", "is not supported"),
    ],
)
def test_a_setting_that_cannot_reach_both_clients_is_refused_by_name(
    monkeypatch: Any, key: str, value: str, why: str
) -> None:
    hook = _hook(monkeypatch, "k_bad", extra={"bootstrap.servers": BROKERS, key: value})
    with pytest.raises(ConfigurationError, match=rf"connection 'k_bad'.*{why}") as err:
        _ = hook.client_config
    assert key in str(err.value) or value in str(err.value)


def test_the_connection_is_fetched_once(monkeypatch: Any) -> None:
    hook = _hook(monkeypatch, "k_once", login="u", password=PASSWORD, extra={"bootstrap.servers": BROKERS})
    fetched: list[str] = []
    real = KafkaSourceHook.get_connection

    def counting(conn_id: str) -> Any:
        fetched.append(conn_id)
        return real(conn_id)

    monkeypatch.setattr(KafkaSourceHook, "get_connection", staticmethod(counting))
    assert (
        hook.bootstrap_servers and hook.client_config == {} and hook.credentials() and hook.bootstrap_servers
    )
    assert fetched == ["k_once"]


# -- kafka_config: the planning client and Spark's reader --------------------------------------


def test_the_reader_options_read_exactly_the_frozen_ranges() -> None:
    options = spark_reader_options(BROKERS, {}, _plan("read_uncommitted"), None)  # type: ignore[arg-type]
    assert options["kafka.bootstrap.servers"] == BROKERS
    assert json.loads(options["assign"]) == {"orders": [0, 1]}
    assert json.loads(options["startingOffsets"]) == {"orders": {"0": 0, "1": 3}}
    assert json.loads(options["endingOffsets"]) == {"orders": {"0": 5, "1": 7}}
    assert options["kafka.isolation.level"] == "read_uncommitted"
    assert options["failOnDataLoss"] == "true", "a deleted record fails the read, never leaves a hole"
    assert not any("sasl" in k or "ssl" in k or "security" in k for k in options)


def test_security_settings_are_translated_for_the_java_client() -> None:
    config = {
        "security.protocol": "sasl_ssl",
        "sasl.mechanisms": "scram-sha-256",
        "ssl.ca.location": "/etc/kafka/ca.pem",
        "client.id": "eod-loader",
        "group.id": "planning-only",
        "socket.timeout.ms": "5000",
    }
    check_client_config(config)
    options = spark_reader_options(BROKERS, config, _plan(), Credentials("u", "p"))  # type: ignore[arg-type]
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == "SCRAM-SHA-256"
    assert (options["kafka.ssl.truststore.type"], options["kafka.ssl.truststore.location"]) == (
        "PEM",
        "/etc/kafka/ca.pem",
    )
    assert options["kafka.client.id"] == "eod-loader"
    assert "kafka.group.id" not in options and "kafka.socket.timeout.ms" not in options
    assert options["kafka.sasl.jaas.config"].startswith(
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
    )


def test_host_name_checking_off_is_said_the_java_way() -> None:
    """librdkafka's ``none`` is an empty value for the Java client; ``https`` is the same."""
    off = {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "none"}
    check_client_config(off)
    assert (
        spark_reader_options(BROKERS, off, _plan(), None)["kafka.ssl.endpoint.identification.algorithm"] == ""
    )  # type: ignore[arg-type]
    on = {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "https"}
    assert (
        spark_reader_options(BROKERS, on, _plan(), None)["kafka.ssl.endpoint.identification.algorithm"]
        == "https"
    )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mechanism", "module"),
    [
        ("PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule"),
        ("SCRAM-SHA-256", "org.apache.kafka.common.security.scram.ScramLoginModule"),
        ("SCRAM-SHA-512", "org.apache.kafka.common.security.scram.ScramLoginModule"),
    ],
)
def test_the_jaas_login_quotes_quotes_and_backslashes(mechanism: str, module: str) -> None:
    config = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism}
    creds = Credentials('us"er', 'p\\a"ss')
    jaas = spark_reader_options(BROKERS, config, _plan(), creds)["kafka.sasl.jaas.config"]  # type: ignore[arg-type]
    assert jaas == f'{module} required username="us\\"er" password="p\\\\a\\"ss";'


def test_sasl_without_credentials_is_refused_and_planning_gets_them_as_librdkafka_settings() -> None:
    config = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}
    with pytest.raises(ConfigurationError, match="needs a user and password"):
        spark_reader_options(BROKERS, config, _plan(), None)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="needs a user and password"):
        planning_config(BROKERS, config, None)
    planning = planning_config(BROKERS, config, Credentials("u", PASSWORD))
    assert planning == {
        "bootstrap.servers": BROKERS,
        **config,
        "sasl.username": "u",
        "sasl.password": PASSWORD,
    }
    # Without SASL, credentials are not sent anywhere.
    assert planning_config(BROKERS, {}, Credentials("u", PASSWORD)) == {"bootstrap.servers": BROKERS}
    assert "kafka.sasl.jaas.config" not in spark_reader_options(BROKERS, {}, _plan(), Credentials("u", "p"))  # type: ignore[arg-type]


def test_brokers_and_secrets_are_refused_in_client_config() -> None:
    with pytest.raises(ConfigurationError, match="pass the brokers as bootstrap_servers"):
        check_client_config({"bootstrap.servers": BROKERS})
    for key in ("sasl.username", "sasl.password", "ssl.keystore.password"):
        with pytest.raises(ConfigurationError, match=f"{key!r} is a secret"):
            check_client_config({key: "x"})


# -- the operator, when the DAG is parsed --------------------------------------------------------


def _op(**kw: Any) -> KafkaToDeltaOperator:
    return KafkaToDeltaOperator(task_id="load", table_uri="/lake/events", **{"topics": "orders", **kw})


def test_the_operator_refuses_at_parse_time_what_cannot_run() -> None:
    with pytest.raises(ConfigurationError, match="value_format"):
        _op(value_format="avro")
    with pytest.raises(ConfigurationError, match="needs a schema"):
        _op(value_format="json")
    with pytest.raises(ConfigurationError, match="schema is for value_format='json' only"):
        _op(schema="id BIGINT")
    with pytest.raises(ConfigurationError, match="isolation_level"):
        _op(isolation_level="serializable")
    with pytest.raises(ConfigurationError, match="data_loss"):
        _op(data_loss="ignore")
    with pytest.raises(ConfigurationError, match="at least one Kafka topic"):
        _op(topics=[])
    with pytest.raises(ConfigurationError, match="each once"):
        _op(topics=["a", "a"])
    with pytest.raises(ConfigurationError, match="is not a Kafka topic name"):
        _op(topics=["a,b"])
    with pytest.raises(ConfigurationError, match="max_records_per_batch"):
        _op(max_records_per_batch=0)
    with pytest.raises(ConfigurationError, match="is not a Spark DDL schema"):
        _op(value_format="json", schema="id BIGINT,, x")
    with pytest.raises(ConfigurationError, match=r"schema fields \['Key', 'kafka_offset'\] have the names"):
        _op(value_format="json", schema="Key STRING, kafka_offset BIGINT, amount INT")
    op = _op(topics=["a", "b"], value_format="json", schema="id BIGINT, amount DECIMAL(10,2)")
    assert op.topics == ["a", "b"] and op.kafka_config_id == "kafka_default"


def test_merge_keys_must_be_columns_the_kafka_source_writes() -> None:
    merge = {"write_mode": "merge", "order_by": "kafka_offset"}
    with pytest.raises(ConfigurationError, match=r"\['order_id'\] are not columns of the Kafka source"):
        _op(merge_keys=["order_id"], **merge)
    assert _op(merge_keys=["key"], **merge).topics == ["orders"]
    json_value = {"value_format": "json", "schema": "order_id BIGINT, amount BIGINT"}
    assert _op(merge_keys=["order_id"], **merge, **json_value).value_format == "json"
    with pytest.raises(ConfigurationError, match=r"\['value'\] are not columns"):
        _op(merge_keys=["value"], **merge, **json_value)
    # A transform may make the columns: nothing is checked then.
    assert _op(merge_keys=["order_id"], transform="SELECT *, 1 AS order_id FROM batch", **merge)


def test_brokers_that_do_not_answer_are_reported_with_librdkafkas_cause(monkeypatch: Any) -> None:
    """On 624989e the planning client's wait ended in a bare ``TimeoutError('')`` (not retried
    as Kafka's, and saying nothing); now it is KafkaUnavailableError naming the cause."""
    import socket

    from airflow_eod.sources import kafka_offsets

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setattr(kafka_offsets, "_TIMEOUT_S", 1.5)
    with pytest.raises(kafka_offsets.KafkaUnavailableError, match="Connection refused") as err:
        kafka_offsets.describe_topics(
            {"bootstrap.servers": f"127.0.0.1:{port}"}, ["orders"], isolation_level="read_committed"
        )
    assert f"127.0.0.1:{port}" in str(err.value) and "orders" in str(err.value)
