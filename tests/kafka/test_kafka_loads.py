"""Kafka loads against a real broker: batches of frozen offset ranges, checked row by row."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_eod.core.ask import ask
from airflow_eod.core.table_ref import TableRef
from airflow_eod.spark.load_job import run_load
from tests.support.kafka_helpers import (
    check_exactly_once,
    ctx_for,
    kafka_records,
    kafka_source,
    kafka_spec,
    plan_kafka,
    records,
    topic_name,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def test_batches_of_several_partitions_load_each_record_once(
    spark: Any, kafka_broker: Any, table: str
) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 3)
    kafka_broker.produce(topic, records(30, 3))
    source = kafka_source(kafka_broker, topic)
    ctx = ctx_for(spark)
    plan = plan_kafka(source, table, ctx)
    assert plan is not None
    assert plan.boundary["topics"][topic]["partitions"] == {"0": [0, 10], "1": [0, 10], "2": [0, 10]}
    first = run_load(spark, kafka_spec(source, table, plan))
    assert first.outcome == "committed" and first.rows == 30
    # A retry of the same batch writes nothing.
    again = run_load(spark, kafka_spec(source, table, plan, try_number=2))
    assert again.outcome == "already_committed"
    # More records: the next batch starts where the last one ended.
    kafka_broker.produce(topic, records(9, 3, start=30))
    nxt = plan_kafka(source, table, ctx, run="run-2")
    assert nxt is not None and nxt.boundary["topics"][topic]["partitions"]["0"] == [10, 13]
    assert run_load(spark, kafka_spec(source, table, nxt)).rows == 9
    assert plan_kafka(source, table, ctx, run="run-3") is None
    check_exactly_once(table, kafka_records(kafka_broker, topic))
    assert ask(TableRef.parse(table), nxt.key).committed


def test_a_loaded_batch_s_offsets_reach_a_monitoring_group_and_planning_never_reads_it(
    spark: Any, kafka_broker: Any, table: str
) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    from airflow_eod.sources.kafka_group import commit_group_offsets

    topic = topic_name()
    kafka_broker.create_topic(topic, 2)
    kafka_broker.produce(topic, records(8, 2))
    source = kafka_source(kafka_broker, topic)
    ctx = ctx_for(spark)
    plan = plan_kafka(source, table, ctx)
    assert plan is not None
    assert run_load(spark, kafka_spec(source, table, plan)).outcome == "committed"
    group = f"monitor-{topic}"
    assert commit_group_offsets(kafka_broker.config(), group, plan.boundary, plan.key.label)
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in (0, 1)])]
    listed = kafka_broker.admin().list_consumer_group_offsets(request)[group].result(timeout=30)
    assert {tp.partition: tp.offset for tp in listed.topic_partitions} == {0: 4, 1: 4}
    # The group says "everything read"; the pipeline's frontier is the table's: more records
    # are planned from the last batch's ends, whatever the group holds.
    rewind = [TopicPartition(topic, p, 0) for p in (0, 1)]
    from confluent_kafka import Consumer

    consumer = Consumer(kafka_broker.config(**{"group.id": group, "enable.auto.commit": False}))
    consumer.commit(offsets=rewind, asynchronous=False)
    consumer.close()
    kafka_broker.produce(topic, records(2, 2, start=8))
    nxt = plan_kafka(source, table, ctx, run="run-2")
    assert nxt is not None and nxt.boundary["topics"][topic]["partitions"] == {"0": [4, 5], "1": [4, 5]}
    # A broker that is not there: a warning, not a failure (monitoring only).
    assert not commit_group_offsets(
        {"bootstrap.servers": "127.0.0.1:1", "socket.timeout.ms": 1000, "session.timeout.ms": 6000},
        group,
        plan.boundary,
        plan.key.label,
    )


def test_a_catch_up_run_stops_at_the_ends_the_topics_had_when_it_began(
    spark: Any, kafka_broker: Any, table: str
) -> None:
    """``availableNow``: records produced while a catch-up run loads wait for the next run,
    so a run on a topic that is always written to ends (the operator sets ``end_offsets``)."""
    import dataclasses

    topic = topic_name()
    kafka_broker.create_topic(topic, 2)
    kafka_broker.produce(topic, records(10, 2))
    ctx = ctx_for(spark)
    base = kafka_source(kafka_broker, topic, max_records_per_batch=4)
    run = dataclasses.replace(base, end_offsets=base.end_offsets_now(ctx))
    assert run.end_offsets == {topic: {"0": 5, "1": 5}}
    first = plan_kafka(run, table, ctx, run="catch-up-1")
    assert first is not None and run_load(spark, kafka_spec(run, table, first)).rows == 4
    kafka_broker.produce(topic, records(6, 2, start=10))  # produced while the run loads
    loaded = 4
    for n in range(2, 10):
        nxt = plan_kafka(run, table, ctx, run=f"catch-up-{n}")
        if nxt is None:
            break
        assert all(r[1] <= 5 for r in nxt.boundary["topics"][topic]["partitions"].values())
        loaded += run_load(spark, kafka_spec(run, table, nxt)).rows
    assert loaded == 10
    # The next run (new ends) takes what was produced meanwhile; the source's identity is the
    # same, whatever a run's ends were.
    later = dataclasses.replace(base, end_offsets=base.end_offsets_now(ctx))
    assert later.identity() == run.identity()
    rest = plan_kafka(later, table, ctx, run="next-run")
    assert rest is not None and rest.boundary["topics"][topic]["partitions"] == {"0": [5, 7], "1": [5, 7]}
    while rest is not None:
        run_load(spark, kafka_spec(later, table, rest))
        rest = plan_kafka(later, table, ctx, run=f"next-run-{rest.seq}")
    check_exactly_once(table, kafka_records(kafka_broker, topic))
