"""Against the peer on Kafka: the same increments of a topic loaded by airflow-eod's
``KafkaSource`` and by Spark Structured Streaming's Kafka source with a Delta sink and
``Trigger.AvailableNow``, side by side in one SparkSession (issue 23).

One broker is started for the area (``tests/support/kafka_broker.KafkaBroker``, KRaft, on
127.0.0.1). A topic of ``kafka_partitions`` partitions receives ``kafka_records`` records in
``kafka_increments`` increments (produced idempotently with librdkafka, every ack awaited,
untimed). After each increment both sides load it, in alternating order:

- *Structured Streaming*: ``spark.readStream.format("kafka")`` subscribed to the topic
  (``startingOffsets=earliest``, ``failOnDataLoss=true``, ``kafka.isolation.level=
  read_committed``), the same columns as airflow-eod's reader (``key`` and ``value`` as
  strings, ``kafka_topic``, ``kafka_partition``, ``kafka_offset``, ``kafka_timestamp``),
  ``writeStream.format("delta")`` with a checkpoint folder and ``trigger(availableNow=True)``,
  started and awaited as a scheduled job would (Delta Spark writes the table);
- *airflow-eod*: what ``KafkaToDeltaOperator(catch_up=True)`` runs in a task: the catch-up
  loop (:func:`airflow_eod.core.catch_up.load_batches`) of :func:`load_batch` with the local
  runner (``plan`` freezes the offset ranges in the plan log, the ask, then ``run_load``,
  delta-rs engine), batch after batch until the topic is drained.

No cap on either side (no ``maxOffsetsPerTrigger``, no ``max_records_per_batch``): each
increment is one micro-batch and one batch. One untimed warm-up load of each runs first, on a
topic and tables of its own. After every increment each table's rows per partition (count,
distinct offsets, smallest and largest offset, read with delta-rs) must equal the
partition's offsets in Kafka (log start to high watermark), and the rows each side loaded
must equal the records produced; at the end both tables are compared row by row with what
Kafka holds, read with a plain librdkafka consumer (``tests/support/kafka_helpers``): each
record once, nothing else. A mismatch fails the area: a fast wrong load is not a result.
Needs Java, the broker's jars (Maven, cached), Spark's Kafka connector jars and the Delta Spark
jars; without one of them the area prints one row saying what is missing.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from airflow_eod.core.catch_up import load_batches
from airflow_eod.core.load_flow import LoadRequest, load_batch
from airflow_eod.core.result import LoadResult
from airflow_eod.core.source import ReadContext
from airflow_eod.core.table_ref import TableRef
from airflow_eod.runners.local import local_run
from airflow_eod.sources import KafkaSource
from airflow_eod.spark.load_spec import LoadSettings
from benchmarks.common import DELTA_SPARK_JARS_ENV, Row, Settings, fmt_int, progress, ratio_of, row

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tests.support.kafka_broker import KafkaBroker

AREA = "kafka"
PIPELINE = "bench.kafka"
WARM_RECORDS = 2_000
SIDES = ("stream", "eod")
LABELS = {
    "stream": "Structured Streaming availableNow (Kafka source, Delta sink)",
    "eod": "airflow-eod KafkaSource catch-up load (run_load, delta-rs)",
}
# Produce fast, untimed: the whole increment queued in librdkafka (its default queue of
# 100,000 messages would raise BufferError mid-increment), batched per partition.
PRODUCER = {"queue.buffering.max.messages": 2_000_000, "linger.ms": 20, "batch.num.messages": 10_000}


def _missing() -> str | None:
    """Why the area cannot run here, or ``None``."""
    from tests.support.spark_conf import find_kafka_jars

    if not os.environ.get(DELTA_SPARK_JARS_ENV):
        return f"{DELTA_SPARK_JARS_ENV} does not name the Delta Spark jars (`make jars`)"
    why = find_kafka_jars()
    if why:
        return why
    if shutil.which("java") is None:
        return "no java on PATH (the broker is a JVM)"
    try:
        import confluent_kafka  # noqa: F401  (the producer, the planning client, the checker)
    except ImportError:
        return "confluent-kafka is not installed"
    return None


def _start_broker() -> KafkaBroker:
    """The area's broker; a missing prerequisite (pytest's skip in the tests' starter) is
    turned into an error that says why."""
    import pytest

    from tests.support.kafka_broker import KafkaBroker

    try:
        return KafkaBroker.start()
    except pytest.skip.Exception as exc:
        raise RuntimeError(f"the Kafka broker cannot start: {exc}") from None


def _records(start: int, n: int, partitions: int) -> Iterator[tuple[int, str, str]]:
    """``n`` order-like records, round-robin over the partitions (about 100 bytes a value)."""
    for i in range(start, start + n):
        yield (
            i % partitions,
            f"order-{i}",
            f'{{"order_id": {i}, "customer": "customer-{i % 10_007}", '
            f'"amount": {i % 100_000 / 100:.2f}, "status": "paid"}}',
        )


def _produce(broker: KafkaBroker, topic: str, start: int, n: int, partitions: int) -> None:
    acks = broker.produce(topic, _records(start, n, partitions), **PRODUCER)
    if len(acks) != n:
        raise RuntimeError(f"produce to {topic}: {len(acks)} acks for {n} records")


def stream_load(
    spark: SparkSession, bootstrap: str, topic: str, table: str, checkpoint: str
) -> tuple[float, dict[str, int]]:
    """Seconds of one ``availableNow`` run of the streaming query, started and awaited, and
    where its micro-batches say their time went (``durationMs``, summed over them)."""
    from pyspark.sql import functions as F

    t0 = time.perf_counter()
    records = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
        .option("kafka.isolation.level", "read_committed")
        .option("includeHeaders", "false")
        .load()
    )
    shaped = records.select(
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").alias("value"),
        F.col("topic").alias("kafka_topic"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("timestamp").alias("kafka_timestamp"),
    )
    query = (
        shaped.writeStream.format("delta")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(table)
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - t0
    if query.exception() is not None:
        raise RuntimeError(f"the streaming query failed: {query.exception()}")
    spent: dict[str, int] = {}
    for progress_ in query.recentProgress:
        for step, ms_ in (progress_.durationMs or {}).items():
            spent[step] = spent.get(step, 0) + int(ms_)
    return elapsed, spent


def eod_load(spark: SparkSession, bootstrap: str, topic: str, table: str, token: str) -> tuple[float, int]:
    """Seconds of one catch-up run (plan, ask, ``run_load``; until drained) and its batches."""
    source = KafkaSource(bootstrap_servers=bootstrap, topics=[topic])
    ref = TableRef.parse(table)
    ctx = ReadContext(spark_factory=lambda: spark)
    run = local_run(lambda: spark, ref, source, settings=LoadSettings(try_number=1, engine="delta-rs"))

    def load_one(request: LoadRequest) -> LoadResult:
        return load_batch(request, source, ctx, run=run)

    t0 = time.perf_counter()
    caught = load_batches(LoadRequest(ref, PIPELINE, token, try_number=1), load_one)
    elapsed = time.perf_counter() - t0
    bad = [r for r in caught.batches if r.outcome != "committed"]
    if bad or not caught.drained or not caught.batches:
        raise RuntimeError(
            f"catch-up {token}: {[r.outcome for r in caught.batches]}, drained {caught.drained}"
        )
    return elapsed, len(caught.batches)


def table_files(table: str) -> tuple[int, int]:
    """The live files of a Delta table and their bytes."""
    adds = pa.table(DeltaTable(table).get_add_actions(flatten=True))
    return adds.num_rows, int(pc.sum(adds["size_bytes"]).as_py() or 0)


def table_rows(table: str) -> int:
    """The rows a Delta table holds, from its live files' statistics (both writers put them)."""
    adds = pa.table(DeltaTable(table).get_add_actions(flatten=True))
    return int(pc.sum(adds["num_records"]).as_py() or 0)


def kafka_offsets(broker: KafkaBroker, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """Each partition's ``(log start, high watermark)``: what Kafka holds."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(broker.config(**{"group.id": "bench-offsets", "enable.auto.commit": False}))
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(partitions)
        }
    finally:
        consumer.close()


def check_offsets(table: str, topic: str, held: dict[int, tuple[int, int]], label: str) -> None:
    """The table holds every offset Kafka holds, each once, and nothing else, per partition
    (count, distinct offsets, smallest, largest; the producer's offsets have no gaps)."""
    data = DeltaTable(table).to_pyarrow_table(columns=["kafka_topic", "kafka_partition", "kafka_offset"])
    topics = set(pc.unique(data["kafka_topic"]).to_pylist())
    if data.num_rows and topics != {topic}:
        raise RuntimeError(f"{label}: rows of topics {topics}, not only {topic}")
    grouped = data.group_by("kafka_partition").aggregate(
        [
            ("kafka_offset", "count"),
            ("kafka_offset", "count_distinct"),
            ("kafka_offset", "min"),
            ("kafka_offset", "max"),
        ]
    )
    got = {
        int(r["kafka_partition"]): (
            r["kafka_offset_count"],
            r["kafka_offset_count_distinct"],
            r["kafka_offset_min"],
            r["kafka_offset_max"],
        )
        for r in grouped.to_pylist()
    }
    want = {p: (hi - lo, hi - lo, lo, hi - 1) for p, (lo, hi) in held.items() if hi > lo}
    if got != want:
        raise RuntimeError(
            f"{label}: per partition (rows, distinct offsets, min, max) {got}, Kafka holds {want}"
        )


def run(settings: Settings, spark: SparkSession, work: str) -> tuple[list[Row], dict[str, Any]]:
    why = _missing()
    if why:
        figure = "Kafka source: airflow-eod against Structured Streaming availableNow"
        return [Row(AREA, figure, None, "s", note=f"not measured: {why}")], {}
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    progress("kafka: starting the broker")
    broker = _start_broker()
    try:
        return _run(settings, spark, work, broker)
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


def _paths(work: str, tag: str) -> dict[str, str]:
    base = os.path.join(work, tag)
    return {
        "eod": f"{base}/eod-table",
        "stream": f"{base}/stream-table",
        "checkpoint": f"{base}/stream-checkpoint",
    }


def _load(
    spark: SparkSession, side: str, bootstrap: str, topic: str, where: dict[str, str], token: str
) -> tuple[float, int, dict[str, int]]:
    """Seconds of one side's load; the eod batches; the streaming query's ``durationMs``."""
    if side == "eod":
        return (*eod_load(spark, bootstrap, topic, where["eod"], token), {})
    took, spent = stream_load(spark, bootstrap, topic, where["stream"], where["checkpoint"])
    return took, 1, spent


def _run(
    settings: Settings, spark: SparkSession, work: str, broker: KafkaBroker
) -> tuple[list[Row], dict[str, Any]]:
    from tests.support.kafka_helpers import check_exactly_once, kafka_records

    total, parts, steps = settings.kafka_records, settings.kafka_partitions, settings.kafka_increments
    bootstrap = broker.bootstrap

    # Warm-up, untimed: class loading, JIT, both writers' first commits.
    warm_topic, warm = "bench-warm", _paths(work, "warm")
    broker.create_topic(warm_topic, parts)
    _produce(broker, warm_topic, 0, min(WARM_RECORDS, total), parts)
    for side in SIDES:
        _load(spark, side, bootstrap, warm_topic, warm, "warm")
    progress("kafka: warm-up done")

    topic, where = "bench-orders", _paths(work, "run")
    broker.create_topic(topic, parts)
    seconds: dict[str, list[float]] = {s: [] for s in SIDES}
    loaded: dict[str, list[int]] = {s: [] for s in SIDES}
    batches: list[int] = []
    stream_ms: list[dict[str, int]] = []
    produced: list[int] = []
    before = dict.fromkeys(SIDES, 0)
    for i in range(steps):
        n = total // steps + (1 if i < total % steps else 0)
        _produce(broker, topic, sum(produced), n, parts)
        produced.append(n)
        order = SIDES if i % 2 == 0 else SIDES[::-1]
        for side in order:
            spark.catalog.clearCache()
            took, count, spent = _load(spark, side, bootstrap, topic, where, f"increment-{i}")
            seconds[side].append(took)
            if side == "eod":
                batches.append(count)
            else:
                stream_ms.append(spent)
        held = kafka_offsets(broker, topic, parts)
        for side in SIDES:
            now = table_rows(where[side])
            loaded[side].append(now - before[side])
            before[side] = now
            if loaded[side][-1] != n:
                raise RuntimeError(
                    f"increment {i + 1}: {side} loaded {loaded[side][-1]} rows of {n} produced"
                )
            check_offsets(where[side], topic, held, f"increment {i + 1}, {side} table")
        progress(
            f"kafka increment {i + 1}/{steps} ({fmt_int(n)} records, {order[0]} first): "
            f"streaming {seconds['stream'][-1]:.2f} s, eod {seconds['eod'][-1]:.2f} s "
            f"({batches[-1]} batch(es)); both tables equal Kafka's offsets; "
            f"the query's durationMs {stream_ms[-1]}"
        )
    # Row by row against what Kafka holds, read with librdkafka (not Spark): each record once.
    expected = kafka_records(broker, topic)
    if len(expected) != total:
        raise RuntimeError(f"Kafka holds {len(expected)} records of {total} produced")
    for side in SIDES:
        try:
            check_exactly_once(where[side], expected)
        except AssertionError as exc:
            raise RuntimeError(f"the {side} table against Kafka: {exc}") from None
    progress(f"kafka: both tables hold the {fmt_int(total)} records exactly once")
    files = {side: table_files(where[side]) for side in SIDES}
    add_batch = sum(spent.get("addBatch", 0) for spent in stream_ms) / 1000
    out = _rows(settings, seconds, loaded, batches, produced)
    out += _layout_rows(settings, files, add_batch, sum(seconds["stream"]))
    return out, {
        "table_files": {side: list(files[side]) for side in SIDES},
        "records": total,
        "partitions": parts,
        "increments": steps,
        "produced": produced,
        "seconds": seconds,
        "rows_loaded": loaded,
        "eod_batches": batches,
        "stream_duration_ms": stream_ms,
    }


def _rows(
    settings: Settings,
    seconds: dict[str, list[float]],
    loaded: dict[str, list[int]],
    batches: list[int],
    produced: list[int],
) -> list[Row]:
    parts, steps = settings.kafka_partitions, settings.kafka_increments
    out: list[Row] = []
    for i in range(steps):
        head = f"increment {i + 1}/{steps} ({fmt_int(produced[i])} records, {parts} partitions)"
        first = "streaming first" if i % 2 == 0 else "eod first"
        s, e = seconds["stream"][i], seconds["eod"][i]
        out.append(
            Row(
                AREA,
                f"{head}: {LABELS['stream']}, wall",
                s,
                "s",
                note=f"{fmt_int(loaded['stream'][i])} rows; {first}",
            )
        )
        out.append(
            row(
                AREA,
                f"{head}: {LABELS['eod']}, wall",
                e,
                "s",
                ratio=ratio_of(e, s),
                baseline="availableNow",
                note=f"{fmt_int(loaded['eod'][i])} rows in {batches[i]} batch(es)",
            )
        )
    total = sum(produced)
    head = f"total: {fmt_int(total)} records in {steps} increments, {parts} partitions"
    s, e = sum(seconds["stream"]), sum(seconds["eod"])
    out.append(
        Row(AREA, f"{head}: {LABELS['stream']}, wall", s, "s", note=f"{fmt_int(sum(loaded['stream']))} rows")
    )
    out.append(
        row(
            AREA,
            f"{head}: {LABELS['eod']}, wall",
            e,
            "s",
            ratio=ratio_of(e, s),
            baseline="availableNow",
            note=f"{fmt_int(sum(loaded['eod']))} rows in {sum(batches)} batches",
        )
    )
    out.append(
        Row(
            AREA,
            f"{head}: both tables equal what Kafka holds",
            total,
            "rows",
            note="after each increment: rows and offsets per partition; "
            "at the end: row by row, each record once",
        )
    )
    return out


def _layout_rows(
    settings: Settings, files: dict[str, tuple[int, int]], add_batch: float, stream_total: float
) -> list[Row]:
    """What each table holds at the end (files, MiB), and how much of the streaming query's
    time its micro-batches spent in ``addBatch`` (reading the records and Delta Spark's write)."""
    head = f"total: {fmt_int(settings.kafka_records)} records"
    s_files, s_bytes = files["stream"]
    e_files, e_bytes = files["eod"]
    return [
        Row(
            AREA,
            f"{head}: files in the table, availableNow",
            s_files,
            "files",
            note=f"{s_bytes / 2**20:,.1f} MiB",
        ),
        row(
            AREA,
            f"{head}: files in the table, airflow-eod",
            e_files,
            "files",
            ratio=ratio_of(e_files, s_files),
            baseline="availableNow",
            note=f"{e_bytes / 2**20:,.1f} MiB",
        ),
        Row(
            AREA,
            f"{head}: availableNow micro-batches, addBatch (read + Delta Spark write), sum",
            add_batch,
            "s",
            note=f"of {stream_total:.2f} s; from the query's durationMs",
        ),
    ]
