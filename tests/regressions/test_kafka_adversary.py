"""The Kafka source under attack: what the ordinary Kafka tests do not try.

Each test reproduces a finding of the adversary review of issue 23 (a wedge, a duplicate, a
loss, a leaked secret), against the session's real broker and SparkSession where one is
needed.
"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_eod.sources.kafka_topics import TopicRecreatedError
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


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.guarantee
def test_a_re_created_topic_of_a_two_topic_pipeline_has_a_way_out_that_loads_the_other_once(
    spark: Any, kafka_broker: Any, table: str
) -> None:
    """One of two topics re-created: planning refuses, and the way out its message names
    (``topic_changes='accept'`` for one run) loads the other topic on from its frontier and the
    new topic from its first record. Before the fix the only way out was a new pipeline_id,
    which loads the other topic again from its first record: every record of it twice."""
    a, b = topic_name("a"), topic_name("b")
    kafka_broker.create_topic(a, 1)
    kafka_broker.create_topic(b, 1)
    kafka_broker.produce(a, records(3, 1, tag="a"))
    kafka_broker.produce(b, records(3, 1, tag="b-old"))
    ctx = ctx_for(spark)
    strict = kafka_source(kafka_broker, [a, b])
    first = plan_kafka(strict, table, ctx)
    assert first is not None
    assert run_load(spark, kafka_spec(strict, table, first)).rows == 6
    old_b = kafka_records(kafka_broker, b)
    kafka_broker.delete_topic(b)
    kafka_broker.create_topic(b, 1)
    kafka_broker.produce(b, records(2, 1, tag="b-new"))
    kafka_broker.produce(a, records(2, 1, tag="a", start=3))
    with pytest.raises(TopicRecreatedError) as refused:
        plan_kafka(strict, table, ctx, run="run-2")
    assert '"eod_topic_changes": "accept"' in str(refused.value)
    lenient = kafka_source(kafka_broker, [a, b], topic_changes="accept")
    second = plan_kafka(lenient, table, ctx, run="run-2")
    assert second is not None
    assert second.boundary["topics"][a]["partitions"] == {"0": [3, 5]}
    assert second.boundary["topics"][b]["partitions"] == {"0": [0, 2]}
    assert run_load(spark, kafka_spec(lenient, table, second)).rows == 4
    # Back to topic_changes='fail': the pipeline goes on from the new topic's frontier.
    kafka_broker.produce(b, records(1, 1, tag="b-new", start=2))
    third = plan_kafka(strict, table, ctx, run="run-3")
    assert third is not None and third.boundary["topics"][b]["partitions"] == {"0": [2, 3]}
    assert run_load(spark, kafka_spec(strict, table, third)).rows == 1
    check_exactly_once(table, kafka_records(kafka_broker, a) + old_b + kafka_records(kafka_broker, b))


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.guarantee
def test_a_frozen_batch_whose_topic_was_re_created_is_re_frozen_without_wedging_the_pipeline(
    spark: Any, kafka_broker: Any, table: str
) -> None:
    """A batch frozen, never loaded, and one of its topics re-created: every attempt refuses
    it and names a re-freeze; the re-freeze loads the other topic's frozen range and leaves
    the new topic to the next batch, from its first record. Before the fix the re-freeze
    refused too, and the pipeline could never move again."""
    from airflow_eod.core.ask import ask
    from airflow_eod.core.planlog.restatement import plan_restatement
    from airflow_eod.core.planlog.store import PlanLog
    from airflow_eod.core.table_ref import TableRef

    a, b = topic_name("a"), topic_name("b")
    kafka_broker.create_topic(a, 1)
    kafka_broker.create_topic(b, 1)
    kafka_broker.produce(a, records(3, 1, tag="a"))
    kafka_broker.produce(b, records(3, 1, tag="b-old"))
    ctx = ctx_for(spark)
    source = kafka_source(kafka_broker, [a, b])
    first = plan_kafka(source, table, ctx)
    assert first is not None
    assert run_load(spark, kafka_spec(source, table, first)).rows == 6
    kafka_broker.produce(a, records(2, 1, tag="a", start=3))
    kafka_broker.produce(b, records(2, 1, tag="b-old", start=3))
    frozen = plan_kafka(source, table, ctx, run="run-2")
    assert frozen is not None
    old_b = kafka_records(kafka_broker, b)[:3]  # batch 1's records of the old b are never read
    kafka_broker.delete_topic(b)
    kafka_broker.create_topic(b, 1)
    kafka_broker.produce(b, records(2, 1, tag="b-new"))
    with pytest.raises(TopicRecreatedError, match="re-freeze it"):
        run_load(spark, kafka_spec(source, table, frozen))
    ref = TableRef.parse(table)
    refrozen = plan_restatement(
        PlanLog(ref, frozen.pipeline_id),
        frozen,
        run_token="refreeze-run",
        committed_generation=None,
        replan=lambda p, g: source.replan(p, g, ctx, committed=False),
    )
    assert refrozen.generation == 1
    assert refrozen.boundary["topics"][a]["partitions"] == {"0": [3, 5]}
    assert refrozen.boundary["topics"][b]["partitions"] == {"0": [0, 0]}
    assert run_load(spark, kafka_spec(source, table, refrozen)).rows == 2
    assert ask(ref, refrozen.key).committed
    nxt = plan_kafka(source, table, ctx, run="run-3")
    assert nxt is not None and nxt.boundary["topics"][b]["partitions"] == {"0": [0, 2]}
    assert run_load(spark, kafka_spec(source, table, nxt)).rows == 2
    check_exactly_once(table, kafka_records(kafka_broker, a) + old_b + kafka_records(kafka_broker, b))


@pytest.mark.spark
@pytest.mark.security
@pytest.mark.parametrize(
    ("user", "password"),
    [
        ("alice", 'p"w\\x'),
        ("alice", "SECRET-head\n tokenauth=true"),
        ("alice", "SECRET-head\r\nSECRET-tail"),
        ('al"ice\nx=y', "pw//not-a-comment /* nor this */"),
        ("alice", "tab\there, é, \u2028"),
    ],
)
def test_the_jaas_login_spark_s_kafka_client_parses_carries_the_credentials_as_given(
    spark: Any, user: str, password: str
) -> None:
    """The ``sasl.jaas.config`` built from the connection's login and password, parsed by
    the Kafka client Spark reads with: exactly those two options, with those values. Before
    the fix a line break in a password ended its quoted string: the login failed, and
    Kafka's error named the password's tail (``Value not specified for key 'SECRET-tail'``)
    in the task log, unmasked (the secrets masker knows only the whole password)."""
    from airflow_eod.core.source import Credentials
    from airflow_eod.sources.kafka_config import _jaas

    jvm = spark._jvm
    configs = jvm.java.util.HashMap()
    text = _jaas("SCRAM-SHA-256", Credentials(user, password))
    configs.put("sasl.jaas.config", jvm.org.apache.kafka.common.config.types.Password(text))
    context = jvm.org.apache.kafka.common.security.JaasContext.loadClientContext(configs)
    entries = context.configurationEntries()
    assert entries.size() == 1
    assert dict(entries.get(0).getOptions()) == {"username": user, "password": password}


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.guarantee
def test_a_deleted_topic_of_a_two_topic_pipeline_leaves_a_way_to_load_the_other_once(
    spark: Any, kafka_broker: Any, table: str
) -> None:
    """One of two topics deleted for good, while a batch of both is frozen: the frozen batch
    is refused naming a re-freeze, which loads the other topic's range; planning refuses
    naming ``topic_changes='accept'``, which plans the other topic on from its frontier. Before the
    fix every attempt, re-freeze and plan failed (``topic does not exist``), and dropping the
    topic from ``topics`` is another source: a new pipeline_id, which loads the other topic
    again from its first record."""
    from airflow_eod.core.errors import ConfigurationError
    from airflow_eod.core.planlog.restatement import plan_restatement
    from airflow_eod.core.planlog.store import PlanLog
    from airflow_eod.core.table_ref import TableRef
    from airflow_eod.sources.kafka_topics import RecordsDeletedError

    a, b = topic_name("a"), topic_name("b")
    kafka_broker.create_topic(a, 1)
    kafka_broker.create_topic(b, 1)
    kafka_broker.produce(a, records(3, 1, tag="a"))
    kafka_broker.produce(b, records(3, 1, tag="b"))
    ctx = ctx_for(spark)
    strict = kafka_source(kafka_broker, [a, b])
    first = plan_kafka(strict, table, ctx)
    assert first is not None
    assert run_load(spark, kafka_spec(strict, table, first)).rows == 6
    loaded_b = kafka_records(kafka_broker, b)
    kafka_broker.produce(a, records(2, 1, tag="a", start=3))
    kafka_broker.produce(b, records(2, 1, tag="b", start=3))
    frozen = plan_kafka(strict, table, ctx, run="run-2")
    assert frozen is not None
    kafka_broker.delete_topic(b)
    with pytest.raises(RecordsDeletedError, match="re-freeze it"):
        run_load(spark, kafka_spec(strict, table, frozen))
    refrozen = plan_restatement(
        PlanLog(TableRef.parse(table), frozen.pipeline_id),
        frozen,
        run_token="refreeze-run",
        committed_generation=None,
        replan=lambda p, g: strict.replan(p, g, ctx, committed=False),
    )
    assert refrozen.boundary["topics"] == {
        a: {"id": frozen.boundary["topics"][a]["id"], "partitions": {"0": [3, 5]}}
    }
    assert run_load(spark, kafka_spec(strict, table, refrozen)).rows == 2
    kafka_broker.produce(a, records(2, 1, tag="a", start=5))
    with pytest.raises(ConfigurationError, match="eod_topic_changes"):
        plan_kafka(strict, table, ctx, run="run-3")
    lenient = kafka_source(kafka_broker, [a, b], topic_changes="accept")
    third = plan_kafka(lenient, table, ctx, run="run-3")
    assert third is not None and third.boundary["topics"] == {
        a: {"id": frozen.boundary["topics"][a]["id"], "partitions": {"0": [5, 7]}}
    }
    assert run_load(spark, kafka_spec(lenient, table, third)).rows == 2
    # The deleted topic's frontier is kept (the batch's "absent"): created again under its
    # name it is a re-created topic, refused, or with topic_changes='accept' loaded from its start.
    assert set(third.boundary["absent"]) == {b}
    kafka_broker.create_topic(b, 1)
    kafka_broker.produce(b, records(2, 1, tag="b-new"))
    with pytest.raises(TopicRecreatedError):
        plan_kafka(strict, table, ctx, run="run-4")
    fourth = plan_kafka(lenient, table, ctx, run="run-4")
    assert fourth is not None and fourth.boundary["topics"][b]["partitions"] == {"0": [0, 2]}
    assert "absent" not in fourth.boundary
    assert run_load(spark, kafka_spec(lenient, table, fourth)).rows == 2
    check_exactly_once(table, kafka_records(kafka_broker, a) + loaded_b + kafka_records(kafka_broker, b))


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.guarantee
def test_an_aborted_transaction_whose_marker_lies_past_the_frozen_end_never_lands(
    spark: Any, kafka_broker: Any, table: str
) -> None:
    """Transaction T1 aborted while T2, begun after T1's records, is still open: the last
    stable offset stops at T2's first record, so the frozen range holds T1's aborted records
    and not its abort marker (which lies after T2's records). Spark's read_committed reader
    must still drop them; the next batch, after T2 commits, loads T2 and what followed once."""
    topic = topic_name("txn")
    kafka_broker.create_topic(topic, 1)
    kafka_broker.produce(topic, [(0, "k0", "plain-0"), (0, "k1", "plain-1")])
    t1 = kafka_broker.transactional_producer(f"t1-{topic}")
    t2 = kafka_broker.transactional_producer(f"t2-{topic}")
    t1.begin_transaction()
    for i in range(2):
        t1.produce(topic, key=f"a{i}", value=f"aborted-{i}", partition=0)
    t1.flush(30)
    t2.begin_transaction()
    for i in range(2):
        t2.produce(topic, key=f"c{i}", value=f"t2-{i}", partition=0)
    t2.flush(30)
    t1.abort_transaction(30)
    kafka_broker.produce(topic, [(0, "k2", "plain-2")])
    ctx = ctx_for(spark)
    source = kafka_source(kafka_broker, topic)
    first = plan_kafka(source, table, ctx)
    assert first is not None and first.boundary["topics"][topic]["partitions"] == {"0": [0, 4]}
    assert run_load(spark, kafka_spec(source, table, first)).rows == 2
    t2.commit_transaction(30)
    nxt = plan_kafka(source, table, ctx, run="run-2")
    assert nxt is not None
    assert run_load(spark, kafka_spec(source, table, nxt)).rows == 3
    assert plan_kafka(source, table, ctx, run="run-3") is None
    check_exactly_once(table, kafka_records(kafka_broker, topic))


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.guarantee
@pytest.mark.parametrize("field", ["Kafka_Offset", "KEY", "_eod_corrupt_record"])
def test_a_json_value_field_named_like_a_column_the_source_adds_is_refused_by_name(
    spark: Any, kafka_broker: Any, table: str, field: str
) -> None:
    """A value schema whose field differs from a column the source adds only by case (Spark
    resolves names case-insensitively), or takes a name airflow-eod reserves: refused,
    naming the field, before anything is written; never a table whose ``kafka_offset`` or
    corrupt-record column a producer's JSON decides."""
    from airflow_eod.core.errors import ConfigurationError

    topic = topic_name("json")
    kafka_broker.create_topic(topic, 1)
    kafka_broker.produce(topic, [(0, "k0", f'{{"{field}": 999, "amount": 1}}')])
    # Refused where the source is made (when the DAG is parsed, for the operator).
    with pytest.raises(ConfigurationError, match=field):
        kafka_source(kafka_broker, topic, value_format="json", schema=f"`{field}` BIGINT, amount INT")
    # And by the reader, for a source made another way (a spec written by an older release).
    source = kafka_source(kafka_broker, topic, value_format="json", schema="`other` BIGINT, amount INT")
    ctx = ctx_for(spark)
    plan = plan_kafka(source, table, ctx)
    assert plan is not None
    object.__setattr__(source, "schema", f"`{field}` BIGINT, amount INT")
    with pytest.raises(ConfigurationError, match=field):
        run_load(spark, kafka_spec(source, table, plan))
