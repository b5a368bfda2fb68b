"""What Kafka does to a frozen range, against the real broker, each with a clear outcome and
the row-by-row checker where rows land: records deleted (DeleteRecords, retention), partitions
added, a topic re-created, transactions (aborted, committed, open), compaction, JSON values
(malformed, quarantined), binary values, tombstones, and the per-batch cap."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from airflow_eod.core.ask import ask
from airflow_eod.core.errors import MalformedInputError
from airflow_eod.core.faults import InjectedFault
from airflow_eod.core.table_ref import TableRef
from airflow_eod.sources.kafka_topics import KafkaSource, RecordsDeletedError, TopicRecreatedError
from airflow_eod.spark.load_job import run_load
from tests.support.helpers import restate
from tests.support.kafka_helpers import (
    check_exactly_once,
    ctx_for,
    kafka_records,
    kafka_source,
    kafka_spec,
    plan_kafka,
    records,
    table_records,
    topic_name,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def _committed(table: str, plan: Any) -> bool:
    return ask(TableRef.parse(table), plan.key).committed


def _delta_rows(table: str, columns: list[str]) -> list[tuple[Any, ...]]:
    from deltalake import DeltaTable

    data = DeltaTable(table).to_pyarrow_table(columns=columns)
    return list(zip(*(data.column(c).to_pylist() for c in columns), strict=True))


def _wait(what: str, condition: Any, seconds: float = 60.0, poke: Any = None) -> None:
    """Until ``condition()``; ``poke()`` every 2 s meanwhile (a record that rolls the active
    segment, should the topic's new ``segment.ms`` have reached the broker after the last)."""
    deadline = time.monotonic() + seconds
    poked = time.monotonic()
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen in {seconds}s")
        if poke is not None and time.monotonic() - poked > 2:
            poke()
            poked = time.monotonic()
        time.sleep(0.5)


def _log_start(broker: Any, topic: str, partition: int) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(broker.config(**{"group.id": "watermarks"}))
    try:
        low, _high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        consumer.close()
    return int(low)


def _alter_topic(broker: Any, topic: str, **config: str) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in config.items()
        ],
    )
    for future in broker.admin().incremental_alter_configs([resource]).values():
        future.result(timeout=30)


# -- 1. records deleted (DeleteRecords, retention) -------------------------------------
@pytest.mark.badinput
def test_records_deleted_under_a_frozen_plan_refuse_it_and_a_refreeze_loads_the_rest(
    spark: Any, kafka_broker: Any, table: str
) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 2)
    kafka_broker.produce(topic, records(20, 2))
    source = kafka_source(kafka_broker, topic)
    ctx = ctx_for(spark)
    plan = plan_kafka(source, table, ctx)
    assert plan is not None
    kafka_broker.delete_records(topic, {0: 4})
    with pytest.raises(RecordsDeletedError) as refused:
        run_load(spark, kafka_spec(source, table, plan))
    message = str(refused.value)
    assert plan.key.label in message
    assert f"{topic}-0 offsets [0, 4)" in message and "re-freeze" in message
    assert not _committed(table, plan)
    # The re-freeze is the decision to load what is left; its plan records what was skipped.
    again = restate(source, table, plan, ctx=ctx)
    assert again.generation == plan.generation + 1
    assert again.boundary["topics"][topic]["partitions"] == {"0": [4, 10], "1": [0, 10]}
    skipped = {(i["topic"], i["partition"]): i.get("skipped") for i in again.inputs}
    assert skipped == {(topic, 0): [0, 4], (topic, 1): None}
    result = run_load(spark, kafka_spec(source, table, again))
    assert result.outcome == "committed" and result.rows == 16
    check_exactly_once(table, kafka_records(kafka_broker, topic))


@pytest.mark.badinput
def test_records_deleted_after_the_check_are_refused_by_sparks_data_loss_failure(
    spark: Any, kafka_broker: Any, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records deleted after check_readable() and before Spark fetched them (the check is
    switched off here to open that window): Spark's failOnDataLoss error becomes the same
    RecordsDeletedError, and nothing is committed."""
    topic = topic_name()
    kafka_broker.create_topic(topic, 1)
    kafka_broker.produce(topic, records(6, 1))
    source = kafka_source(kafka_broker, topic)
    plan = plan_kafka(source, table, ctx_for(spark))
    assert plan is not None
    kafka_broker.delete_records(topic, {0: 3})
    monkeypatch.setattr(KafkaSource, "check_readable", lambda self, plan, ctx: None)
    with pytest.raises(RecordsDeletedError, match="while Spark read them") as refused:
        run_load(spark, kafka_spec(source, table, plan))
    assert plan.key.label in str(refused.value) and "re-freeze" in str(refused.value)
    assert not _committed(table, plan)


@pytest.mark.badinput
def test_records_deleted_before_planning_fail_or_are_skipped_as_configured(
    spark: Any, kafka_broker: Any, table: str
) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 2)
    kafka_broker.produce(topic, records(6, 2))
    source = kafka_source(kafka_broker, topic)
    ctx = ctx_for(spark)
    first = plan_kafka(source, table, ctx)
    assert first is not None and run_load(spark, kafka_spec(source, table, first)).rows == 6
    kafka_broker.produce(topic, records(10, 2, start=6))  # offsets 3..7 of each partition
    produced = kafka_records(kafka_broker, topic)
    kafka_broker.delete_records(topic, {1: 5})  # 3 and 4 of partition 1: never read
    with pytest.raises(RecordsDeletedError, match=rf"{topic}-1 offsets \[3, 5\)") as refused:
        plan_kafka(source, table, ctx, run="run-2")
    assert "data_loss='skip'" in str(refused.value) and '"eod_data_loss": "skip"' in str(refused.value)
    # Nothing was frozen: the refused planning left no plan behind.
    skipping = kafka_source(kafka_broker, topic, data_loss="skip")
    nxt = plan_kafka(skipping, table, ctx, run="run-3")
    assert nxt is not None
    assert nxt.boundary["topics"][topic]["partitions"] == {"0": [3, 8], "1": [5, 8]}
    assert [i.get("skipped") for i in nxt.inputs] == [None, [3, 5]]
    assert run_load(spark, kafka_spec(skipping, table, nxt)).rows == 8
    check_exactly_once(table, [r for r in produced if not (r[1] == 1 and r[2] in (3, 4))])


@pytest.mark.badinput
def test_retention_deleting_a_frozen_range_refuses_it(spark: Any, kafka_broker: Any, table: str) -> None:
    """A real retention, not DeleteRecords: the topic's retention is lowered after the plan,
    and the segment rolls at the next record, so the broker deletes the frozen records."""
    topic = topic_name()
    kafka_broker.create_topic(topic, 1)
    kafka_broker.produce(topic, records(5, 1))
    source = kafka_source(kafka_broker, topic)
    ctx = ctx_for(spark)
    plan = plan_kafka(source, table, ctx)
    assert plan is not None and plan.boundary["topics"][topic]["partitions"] == {"0": [0, 5]}
    _alter_topic(kafka_broker, topic, **{"retention.ms": "100", "segment.ms": "100"})
    time.sleep(0.3)  # older than segment.ms: the next record rolls the segment
    roll = lambda: kafka_broker.produce(topic, [(0, "k-late", "late")])  # noqa: E731
    roll()
    _wait("retention deleting the first segment", lambda: _log_start(kafka_broker, topic, 0) >= 5, poke=roll)
    with pytest.raises(RecordsDeletedError, match=rf"{topic}-0 offsets \[0, 5\)"):
        run_load(spark, kafka_spec(source, table, plan))
    assert not _committed(table, plan)


# -- 2. partitions added ------------------------------------------------------------------
def test_partitions_added_between_batches_are_read_from_offset_zero(
    spark: Any, kafka_broker: Any, table: str
) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 2)
    kafka_broker.produce(topic, records(6, 2))
    source = kafka_source(kafka_broker, topic)
    ctx = ctx_for(spark)
    first = plan_kafka(source, table, ctx)
    assert first is not None and run_load(spark, kafka_spec(source, table, first)).rows == 6
    kafka_broker.add_partitions(topic, 4)
    kafka_broker.produce(topic, records(8, 4, start=6))
    nxt = plan_kafka(source, table, ctx, run="run-2")
    assert nxt is not None
    assert nxt.boundary["topics"][topic]["partitions"] == {
        "0": [3, 5],
        "1": [3, 5],
        "2": [0, 2],
        "3": [0, 2],
    }
    assert run_load(spark, kafka_spec(source, table, nxt)).rows == 8
    check_exactly_once(table, kafka_records(kafka_broker, topic))


# -- 3. a topic re-created under its name --------------------------------------------------
def _recreate(broker: Any, topic: str, partitions: int) -> None:
    broker.delete_topic(topic)
    deadline = time.monotonic() + 30
    while True:  # the name is free once the controller has removed the old topic
        try:
            broker.create_topic(topic, partitions)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.mark.badinput
def test_a_recreated_topic_is_refused_at_the_next_planning(spark: Any, kafka_broker: Any, table: str) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 2)
    kafka_broker.produce(topic, records(4, 2))
    source = kafka_source(kafka_broker, topic)
    ctx = ctx_for(spark)
    first = plan_kafka(source, table, ctx)
    assert first is not None and run_load(spark, kafka_spec(source, table, first)).rows == 4
    old_id = first.boundary["topics"][topic]["id"]
    _recreate(kafka_broker, topic, 2)
    kafka_broker.produce(topic, records(10, 2, tag="new"))  # past the old offsets: only the id tells
    with pytest.raises(TopicRecreatedError, match=re.escape(f"topic id {old_id} when planned")):
        plan_kafka(source, table, ctx, run="run-2")


@pytest.mark.badinput
def test_a_topic_recreated_after_planning_is_refused_before_the_read(
    spark: Any, kafka_broker: Any, table: str
) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 1)
    kafka_broker.produce(topic, records(3, 1))
    source = kafka_source(kafka_broker, topic)
    ctx = ctx_for(spark)
    plan = plan_kafka(source, table, ctx)
    assert plan is not None
    _recreate(kafka_broker, topic, 1)
    kafka_broker.produce(topic, records(5, 1, tag="new"))
    with pytest.raises(TopicRecreatedError, match=plan.key.label):
        run_load(spark, kafka_spec(source, table, plan))
    assert not _committed(table, plan)


@pytest.mark.badinput
def test_a_topic_recreated_while_spark_read_it_is_refused_before_the_commit(
    spark: Any, kafka_broker: Any, table: str
) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 1)
    kafka_broker.produce(topic, records(3, 1))
    source = kafka_source(kafka_broker, topic)
    ctx = ctx_for(spark)
    plan = plan_kafka(source, table, ctx)
    assert plan is not None

    def recreate_after_the_read(df: Any) -> Any:
        # The transform runs on the rows read and kept: the topic changes between the read
        # and the commit, where only verify() can see it.
        _recreate(kafka_broker, topic, 1)
        kafka_broker.produce(topic, records(5, 1, tag="new"))
        return df

    with pytest.raises(TopicRecreatedError, match=plan.key.label):
        run_load(spark, kafka_spec(source, table, plan), transform=recreate_after_the_read)
    assert not _committed(table, plan)


@pytest.mark.badinput
def test_a_topic_deleted_after_planning_is_refused_naming_it(
    spark: Any, kafka_broker: Any, table: str
) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 1)
    kafka_broker.produce(topic, records(3, 1))
    source = kafka_source(kafka_broker, topic)
    plan = plan_kafka(source, table, ctx_for(spark))
    assert plan is not None
    kafka_broker.delete_topic(topic)
    # Its records are gone: refused naming the topic and the way out (a re-freeze).
    with pytest.raises(
        RecordsDeletedError, match=re.escape(f"Kafka topics [{topic!r}] of this frozen batch")
    ) as e:
        run_load(spark, kafka_spec(source, table, plan))
    assert "re-freeze it" in str(e.value) and plan.key.label in str(e.value)
    assert not _committed(table, plan)


# -- 4. transactional producers -------------------------------------------------------------
def _transaction(producer: Any, topic: str, rows: list[tuple[int, str, str]], commit: bool) -> None:
    producer.begin_transaction()
    for partition, key, value in rows:
        producer.produce(topic, key=key, value=value, partition=partition)
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def test_aborted_transactions_never_land_and_markers_leave_gaps(
    spark: Any, kafka_broker: Any, table: str
) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 1)
    producer = kafka_broker.transactional_producer(f"tx-{topic}")
    _transaction(producer, topic, records(5, 1, tag="ok"), commit=True)  # 0-4, marker 5
    _transaction(producer, topic, records(3, 1, tag="aborted", start=5), commit=False)  # 6-8, marker 9
    _transaction(producer, topic, records(4, 1, tag="ok", start=8), commit=True)  # 10-13, marker 14
    source = kafka_source(kafka_broker, topic)
    ctx = ctx_for(spark)
    plan = plan_kafka(source, table, ctx)
    assert plan is not None and plan.boundary["topics"][topic]["partitions"] == {"0": [0, 15]}
    assert run_load(spark, kafka_spec(source, table, plan)).rows == 9
    expected = kafka_records(kafka_broker, topic)
    assert sorted(r[2] for r in expected) == [0, 1, 2, 3, 4, 10, 11, 12, 13]
    check_exactly_once(table, expected)
    assert not any(v and v.startswith("aborted") for *_r, v in table_records(table))
    assert plan_kafka(source, table, ctx, run="run-2") is None


def test_capped_ranges_of_only_markers_and_aborted_records_commit_empty_batches(
    spark: Any, kafka_broker: Any, table: str
) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 1)
    producer = kafka_broker.transactional_producer(f"tx-{topic}")
    _transaction(producer, topic, records(2, 1, tag="ok"), commit=True)  # 0-1, marker 2
    _transaction(producer, topic, records(2, 1, tag="aborted", start=2), commit=False)  # 3-4, marker 5
    _transaction(producer, topic, records(1, 1, tag="ok", start=4), commit=True)  # 6, marker 7
    source = kafka_source(kafka_broker, topic, max_records_per_batch=2)
    ctx = ctx_for(spark)
    loaded = []
    for n in range(6):
        plan = plan_kafka(source, table, ctx, run=f"run-{n}")
        if plan is None:
            break
        result = run_load(spark, kafka_spec(source, table, plan))
        assert result.outcome == "committed"
        loaded.append((plan.boundary["topics"][topic]["partitions"]["0"], result.rows))
    # A range of a marker and aborted records, or of aborted records and a marker, reads
    # nothing: Spark skips the invisible offsets to the range's end, without waiting.
    assert loaded == [([0, 2], 2), ([2, 4], 0), ([4, 6], 0), ([6, 8], 1)]
    check_exactly_once(table, kafka_records(kafka_broker, topic))


def test_an_open_transaction_is_not_frozen_until_it_commits(
    spark: Any, kafka_broker: Any, table: str
) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 1)
    kafka_broker.produce(topic, records(3, 1, tag="plain"))  # 0-2
    producer = kafka_broker.transactional_producer(f"tx-{topic}")
    producer.begin_transaction()
    for _p, key, value in records(4, 1, tag="open", start=3):  # 3-6, still open
        producer.produce(topic, key=key, value=value, partition=0)
    producer.flush(30)
    kafka_broker.produce(topic, records(2, 1, tag="plain", start=7))  # 7-8, after the open ones
    source = kafka_source(kafka_broker, topic)
    ctx = ctx_for(spark)
    plan = plan_kafka(source, table, ctx)
    # The last stable offset: the open transaction's first record.
    assert plan is not None and plan.boundary["topics"][topic]["partitions"] == {"0": [0, 3]}
    assert run_load(spark, kafka_spec(source, table, plan)).rows == 3
    producer.commit_transaction(30)  # marker at 9
    nxt = plan_kafka(source, table, ctx, run="run-2")
    assert nxt is not None and nxt.boundary["topics"][topic]["partitions"] == {"0": [3, 10]}
    assert run_load(spark, kafka_spec(source, table, nxt)).rows == 6
    check_exactly_once(table, kafka_records(kafka_broker, topic))


def test_read_uncommitted_freezes_to_the_high_watermark_and_reads_aborted_records(
    spark: Any, kafka_broker: Any, table: str
) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 1)
    producer = kafka_broker.transactional_producer(f"tx-{topic}")
    _transaction(producer, topic, records(2, 1, tag="ok"), commit=True)  # 0-1, marker 2
    _transaction(producer, topic, records(2, 1, tag="aborted", start=2), commit=False)  # 3-4, marker 5
    producer.begin_transaction()
    producer.produce(topic, key="k9", value="open-9", partition=0)  # 6, open
    producer.flush(30)
    source = kafka_source(kafka_broker, topic, isolation_level="read_uncommitted")
    ctx = ctx_for(spark)
    plan = plan_kafka(source, table, ctx)
    assert plan is not None and plan.boundary["topics"][topic]["partitions"] == {"0": [0, 7]}
    assert plan.boundary["isolation_level"] == "read_uncommitted"
    assert run_load(spark, kafka_spec(source, table, plan)).rows == 5
    # Every data record, aborted and open ones too; never the markers (2, 5).
    assert sorted((o, v) for _t, _p, o, v in table_records(table)) == [
        (0, "ok-0"),
        (1, "ok-1"),
        (3, "aborted-2"),
        (4, "aborted-3"),
        (6, "open-9"),
    ]
    producer.abort_transaction(30)


# -- 5. compacted topics --------------------------------------------------------------------
_COMPACT = {
    "cleanup.policy": "compact",
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "0",
}


def _compacted(broker: Any, topic: str, below: int) -> list[tuple[str, int, int, str | None]]:
    """Roll the active segment (``segment.ms`` passed), then wait until the cleaner has
    compacted the offsets below ``below``; what Kafka holds then."""
    time.sleep(0.3)
    roll = lambda: broker.produce(topic, [(0, "roll", "roll")])  # noqa: E731
    roll()
    _wait(
        "the cleaner compacting the frozen range",
        lambda: len([r for r in kafka_records(broker, topic) if r[2] < below]) < below,
        poke=roll,
    )
    return kafka_records(broker, topic)


@pytest.mark.badinput
def test_a_retry_after_compaction_reads_what_compaction_kept_of_the_frozen_range(
    spark: Any, kafka_broker: Any, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = topic_name("compacted")
    kafka_broker.create_topic(topic, 1, **_COMPACT)
    # Three versions of keys a, b, c: offsets 0-8.
    kafka_broker.produce(topic, [(0, k, f"{k}{v}") for v in range(3) for k in "abc"])
    source = kafka_source(kafka_broker, topic)
    ctx = ctx_for(spark)
    plan = plan_kafka(source, table, ctx)
    assert plan is not None and plan.boundary["topics"][topic]["partitions"] == {"0": [0, 9]}
    # The first attempt reads all 9 and stages them, and dies before its commit.
    monkeypatch.setenv("EOD_FAULTPOINTS", "after_stage=raise@1")
    with pytest.raises(InjectedFault):
        run_load(spark, kafka_spec(source, table, plan))
    monkeypatch.delenv("EOD_FAULTPOINTS")
    kept = [r for r in _compacted(kafka_broker, topic, 9) if r[2] < 9]
    assert sorted(r[3] for r in kept) == ["a2", "b2", "c2"]
    # The retry reads the frozen range's records compaction kept (the newest of each key):
    # Spark skips the offsets compaction removed (they are above the log start offset, so
    # failOnDataLoss does not count them as lost), and reads nothing past the range.
    result = run_load(spark, kafka_spec(source, table, plan, try_number=2))
    assert result.outcome == "committed" and result.rows == 3
    check_exactly_once(table, kept)


@pytest.mark.badinput
def test_a_frozen_range_compacted_away_entirely_commits_an_empty_batch(
    spark: Any, kafka_broker: Any, table: str
) -> None:
    topic = topic_name("compacted")
    kafka_broker.create_topic(topic, 1, **_COMPACT)
    kafka_broker.produce(topic, [(0, k, f"{k}0") for k in "abc"])  # 0-2
    source = kafka_source(kafka_broker, topic)
    ctx = ctx_for(spark)
    plan = plan_kafka(source, table, ctx)
    assert plan is not None and plan.boundary["topics"][topic]["partitions"] == {"0": [0, 3]}
    time.sleep(0.3)
    kafka_broker.produce(topic, [(0, k, f"{k}1") for k in "abc"])  # 3-5, in a new segment
    held = _compacted(kafka_broker, topic, 3)  # every record of [0, 3) has a newer version
    assert not [r for r in held if r[2] < 3] and _log_start(kafka_broker, topic, 0) == 0
    result = run_load(spark, kafka_spec(source, table, plan))
    assert result.outcome == "committed" and result.rows == 0
    # The next batch takes the newer versions.
    nxt = plan_kafka(source, table, ctx, run="run-2")
    assert nxt is not None and nxt.boundary["topics"][topic]["partitions"]["0"][0] == 3
    run_load(spark, kafka_spec(source, table, nxt))
    check_exactly_once(table, kafka_records(kafka_broker, topic))


# -- 6. value formats: JSON (malformed, quarantined), binary, tombstones --------------------
_SCHEMA = "id INT, name STRING"


def _json_topic(broker: Any) -> str:
    """Two partitions: good JSON, two malformed values in partition 1, a tombstone."""
    topic = topic_name("json")
    broker.create_topic(topic, 2)
    broker.produce(
        topic,
        [
            (0, "k0", '{"id": 0, "name": "a"}'),
            (1, "k1", '{"id": 1, "name": "b"}'),
            (1, "k2", "not json at all"),
            (0, "k3", '{"id": 3, "name": "c"}'),
            (1, "k4", '{"id": 4, "name": '),
            (0, "k5", None),  # a tombstone: its value columns are null, it is no malformed record
        ],
    )
    return topic


@pytest.mark.badinput
def test_malformed_json_values_fail_the_batch_naming_the_topic_partition(
    spark: Any, kafka_broker: Any, table: str
) -> None:
    topic = _json_topic(kafka_broker)
    source = kafka_source(kafka_broker, topic, value_format="json", schema=_SCHEMA)
    plan = plan_kafka(source, table, ctx_for(spark))
    assert plan is not None
    with pytest.raises(MalformedInputError) as refused:
        run_load(spark, kafka_spec(source, table, plan))
    message = str(refused.value)
    assert plan.key.label in message
    assert "2 malformed record(s)" in message and f"{topic}-1: 2" in message
    assert "fix the files" not in message and "quarantine_table_uri" in message
    assert not _committed(table, plan)


@pytest.mark.badinput
def test_malformed_json_values_go_to_quarantine_and_the_good_rows_load(
    spark: Any, kafka_broker: Any, table: str, tmp_path: Any
) -> None:
    topic = _json_topic(kafka_broker)
    quarantine = str(tmp_path / "rejects")
    source = kafka_source(kafka_broker, topic, value_format="json", schema=_SCHEMA)
    plan = plan_kafka(source, table, ctx_for(spark))
    assert plan is not None
    result = run_load(spark, kafka_spec(source, table, plan, quarantine_table_uri=quarantine))
    assert result.outcome == "committed" and result.rows == 4
    rows = _delta_rows(table, ["kafka_topic", "kafka_partition", "kafka_offset", "key", "id", "name"])
    # Each partition's offsets follow the order produced: partition 0 got k0, k3, k5.
    want = [
        (topic, 0, 0, "k0", 0, "a"),
        (topic, 0, 1, "k3", 3, "c"),
        (topic, 0, 2, "k5", None, None),
        (topic, 1, 0, "k1", 1, "b"),
    ]
    assert sorted(rows, key=str) == sorted(want, key=str)  # each good record once, nothing else
    assert sorted(_delta_rows(quarantine, ["source_file", "raw_record"])) == [
        (f"{topic}-1", "not json at all"),
        (f"{topic}-1", '{"id": 4, "name": '),
    ]


def test_binary_values_and_tombstones_land_as_they_are(spark: Any, kafka_broker: Any, table: str) -> None:
    topic = topic_name("binary")
    kafka_broker.create_topic(topic, 1)
    values = [b"\xff\x00\xfe", b"", None, b"plain"]
    kafka_broker.produce(topic, [(0, f"k{i}", v) for i, v in enumerate(values)])
    source = kafka_source(kafka_broker, topic, value_format="binary")
    plan = plan_kafka(source, table, ctx_for(spark))
    assert plan is not None and run_load(spark, kafka_spec(source, table, plan)).rows == 4
    rows = sorted(_delta_rows(table, ["kafka_offset", "key", "value"]))
    assert rows == [(i, f"k{i}".encode(), v) for i, v in enumerate(values)]


def test_tombstones_land_as_null_values(spark: Any, kafka_broker: Any, table: str) -> None:
    topic = topic_name("tombstones")
    kafka_broker.create_topic(topic, 2)
    kafka_broker.produce(topic, [(0, "a", "a0"), (1, "b", "b0"), (0, "a", None), (1, "b", None)])
    source = kafka_source(kafka_broker, topic)
    plan = plan_kafka(source, table, ctx_for(spark))
    assert plan is not None and run_load(spark, kafka_spec(source, table, plan)).rows == 4
    expected = kafka_records(kafka_broker, topic)
    assert [v for *_r, v in expected].count(None) == 2
    check_exactly_once(table, expected)


# -- 7. the per-batch cap ---------------------------------------------------------------------
def test_the_cap_splits_batches_across_partitions_and_loads_each_record_once(
    spark: Any, kafka_broker: Any, table: str
) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 3)
    kafka_broker.produce(topic, [(0, f"k{i}", f"p0-{i}") for i in range(12)])
    kafka_broker.produce(topic, [(1, f"k{i}", f"p1-{i}") for i in range(3)])  # partition 2 stays empty
    source = kafka_source(kafka_broker, topic, max_records_per_batch=5)
    ctx = ctx_for(spark)
    spans = []
    for n in range(10):
        plan = plan_kafka(source, table, ctx, run=f"run-{n}")
        if plan is None:
            break
        parts = plan.boundary["topics"][topic]["partitions"]
        spans.append({p: until - start for p, (start, until) in parts.items()})
        run_load(spark, kafka_spec(source, table, plan))
    # Split in proportion to each partition's backlog (12:3), never more than 5 in all.
    assert spans[0] == {"0": 4, "1": 1, "2": 0}
    assert all(sum(s.values()) <= 5 for s in spans) and sum(sum(s.values()) for s in spans) == 15
    assert len(spans) == 3
    check_exactly_once(table, kafka_records(kafka_broker, topic))
