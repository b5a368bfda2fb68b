"""The SASL listener of the session broker: a login the broker refuses ends the task at once
with a message that names the user and never the password."""

from __future__ import annotations

import time
from typing import Any

import pytest

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.source import Credentials
from airflow_eod.sources import KafkaSource
from tests.support.kafka_helpers import ctx_for, plan_kafka, records, topic_name

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

SASL = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}


def test_a_refused_sasl_login_is_a_configuration_error_at_once(kafka_broker: Any, table: str) -> None:
    """On 624989e a wrong password made planning wait 30 s and fail with a bare
    ``TimeoutError('')`` that named no cause."""
    topic = topic_name("sasl")
    kafka_broker.create_topic(topic, 1)
    kafka_broker.produce(topic, records(3, 1))
    source = KafkaSource(bootstrap_servers=kafka_broker.sasl_bootstrap, topics=[topic], client_config=SASL)
    wrong = "not-the-password-Jq3"
    started = time.monotonic()
    with pytest.raises(ConfigurationError, match="refused the SASL login of user") as err:
        plan_kafka(source, table, ctx_for(None, Credentials(kafka_broker.sasl_user, wrong)))
    assert time.monotonic() - started < 15, "refused at once, not after the request timeout"
    assert kafka_broker.sasl_user in str(err.value) and wrong not in str(err.value)
    # The right password plans the batch over the same listener.
    plan = plan_kafka(
        source, table, ctx_for(None, Credentials(kafka_broker.sasl_user, kafka_broker.sasl_password))
    )
    assert plan is not None and plan.boundary["topics"][topic]["partitions"] == {"0": [0, 3]}
