"""Kafka test helpers: produce records, plan and load a batch, and the row-by-row checker
that compares a Delta table with what Kafka holds (what was produced, minus aborted
transactions)."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from airflow_eod.core.ask import ask
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.table_ref import TableRef
from airflow_eod.sources import KafkaSource, ReadContext
from airflow_eod.spark.load_spec import LoadSettings, LoadSpec

PIPELINE = "tests.kafka"


def topic_name(prefix: str = "orders") -> str:
    """A fresh topic name (the broker is shared by the whole test session)."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def records(n: int, partitions: int, tag: str = "r", start: int = 0) -> list[tuple[int, str, str]]:
    """``n`` records ``(partition, key, value)`` spread round-robin over ``partitions``."""
    return [(i % partitions, f"k{i}", f"{tag}-{i}") for i in range(start, start + n)]


def kafka_source(broker: Any, topics: str | list[str], **kw: Any) -> KafkaSource:
    return KafkaSource(
        bootstrap_servers=broker.bootstrap, topics=[topics] if isinstance(topics, str) else topics, **kw
    )


def ctx_for(spark: Any, credentials: Any = None) -> ReadContext:
    return ReadContext(spark_factory=lambda: spark, credentials=credentials)


def plan_kafka(
    source: KafkaSource, table: str, ctx: ReadContext, run: str = "run-1", pipeline: str = PIPELINE
) -> Plan | None:
    return source.plan(
        PlanLog(TableRef.parse(table), pipeline),
        ctx,
        run_token=run,
        is_committed=lambda k: ask(TableRef.parse(table), k).committed,
    )


def kafka_spec(source: KafkaSource, table: str, plan: Plan, try_number: int = 1, **settings: Any) -> LoadSpec:
    return LoadSpec(
        table=TableRef.parse(table),
        plan=plan,
        source=source,
        settings=LoadSettings(**{"run_id": "run-1", "try_number": try_number, **settings}),
    )


def table_records(
    table: str, storage_options: dict[str, str] | None = None
) -> list[tuple[str, int, int, str | None]]:
    """``(topic, partition, offset, value)`` of every row of the Delta table, as read by delta-rs."""
    from deltalake import DeltaTable

    data = DeltaTable(table, storage_options=storage_options).to_pyarrow_table(
        columns=["kafka_topic", "kafka_partition", "kafka_offset", "value"]
    )
    return list(
        zip(
            data.column("kafka_topic").to_pylist(),
            data.column("kafka_partition").to_pylist(),
            data.column("kafka_offset").to_pylist(),
            data.column("value").to_pylist(),
            strict=True,
        )
    )


def kafka_records(broker: Any, topic: str) -> list[tuple[str, int, int, str | None]]:
    """Every committed record Kafka holds for ``topic``, read with a plain read_committed
    consumer (librdkafka, not Spark: the checker does not share the reader it checks)."""
    from confluent_kafka import Consumer, TopicPartition

    admin = broker.admin()
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    consumer = Consumer(
        broker.config(
            **{
                "group.id": f"checker-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
    )
    out: list[tuple[str, int, int, str | None]] = []
    try:
        for p in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, p, low)])
            # Until the consumer's position passes the high watermark: the last offsets may be
            # a transaction's marker or aborted records, which read_committed never delivers
            # (waiting for a record there cost a poll's whole timeout per partition).
            idle, last = 0, -1
            while True:
                msg = consumer.poll(1)
                if msg is not None and not msg.error():
                    value = msg.value()
                    out.append((topic, p, msg.offset(), None if value is None else value.decode()))
                position = consumer.position([TopicPartition(topic, p)])[0].offset
                if position >= high:
                    break
                # Two idle polls without a move: an open transaction holds the last stable
                # offset below the high watermark, and nothing past it is delivered (ten while
                # the consumer has no position yet: its first fetch may be slow).
                idle = idle + 1 if msg is None and position == last else 0
                last = position
                if idle >= (2 if position >= 0 else 10):
                    break
            consumer.unassign()
    finally:
        consumer.close()
    return out


def check_exactly_once(
    table: str,
    expected: list[tuple[str, int, int, str | None]],
    storage_options: dict[str, str] | None = None,
) -> None:
    """The table holds each expected record once, and nothing else (row by row)."""
    got = Counter(table_records(table, storage_options))
    want = Counter(expected)
    dups = {r: n for r, n in got.items() if n > 1}
    missing = want - got
    extra = got - want
    assert not dups, f"duplicated records: {list(dups.items())[:5]}"
    assert not missing, f"{sum(missing.values())} records missing: {list(missing)[:5]}"
    assert not extra, f"{sum(extra.values())} unexpected records: {list(extra)[:5]}"
