"""A Kafka pipeline's topics are its source: a run with other topics is refused before
anything is frozen (docs/sources/kafka.md, "Changing the topics")."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.planlog.store import PlanLog
from airflow_eod.core.table_ref import TableRef
from tests.support.kafka_helpers import PIPELINE, ctx_for, kafka_source, records, topic_name

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def test_a_run_with_another_set_of_topics_is_refused(kafka_broker: Any, table: str) -> None:
    first, added = topic_name("a"), topic_name("b")
    for topic in (first, added):
        kafka_broker.create_topic(topic, 1)
        kafka_broker.produce(topic, records(2, 1))
    log = PlanLog(TableRef.parse(table), PIPELINE)
    ctx = ctx_for(None)

    def plan(topics: list[str], run: str) -> Any:
        # The table's answer is given: this test is about planning, not loading.
        return kafka_source(kafka_broker, topics).plan(log, ctx, run_token=run, is_committed=lambda k: True)

    assert plan([first], "run-1") is not None
    with pytest.raises(ConfigurationError, match="frontier belongs to one source"):
        plan([first, added], "run-2")
    kafka_broker.produce(first, records(1, 1, start=2))
    again = plan([first], "run-3")
    assert again is not None and again.boundary["topics"][first]["partitions"] == {"0": [2, 3]}
