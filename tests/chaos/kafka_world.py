"""The world of a Kafka trial: one fresh topic on the run's broker, and every record the
trial produced to it, with its fate.

Records go to a partition picked per record, through an idempotent producer or a
transactional one whose transactions commit or abort (an aborted record takes an offset that
``read_committed`` never shows; a transaction's markers take offsets too, so the committed
offsets have gaps). A transaction may stay open across a load (the load freezes at the last
stable offset, before the open transaction's records) and end later. Partitions are added
mid-history (the next batch reads them from offset 0). Every value is unique in the trial,
so a row of the table names the record it came from.

The world keeps its own record of what was produced (each delivery report's partition and
offset); :meth:`KafkaWorld.held` reads what the broker holds with a plain ``read_committed``
consumer, and the checker compares the two before it compares the table with either.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from typing import Any

from tests.support.kafka_helpers import kafka_records, table_records

Record = tuple[str, int, int, str]  # topic, partition, offset, value
COMMITTED = "committed"
ABORTED = "aborted"
OPEN = "open"
MAX_PARTITIONS = 6


class KafkaWorld:
    """One trial's topic, its producers and every record produced to it.

    :param broker: the run's :class:`~tests.support.kafka_broker.KafkaBroker`.
    :param rng: the trial's random choices.
    :param partitions: the topic's partitions at the start.
    """

    def __init__(self, *, broker: Any, rng: random.Random, partitions: int) -> None:
        self.broker = broker
        self.rng = rng
        self.topic = f"chaos-{uuid.uuid4().hex[:12]}"
        self.partitions = partitions
        broker.create_topic(self.topic, partitions)
        self.fate: dict[tuple[int, int], tuple[str, str]] = {}  # (partition, offset) -> (value, fate)
        self.kinds: Counter[str] = Counter()
        self._seq = 0
        self._lock = threading.RLock()  # loads' threads produce too (new input for a try)
        self._producer: Any = None
        self._txn: Any = None
        self._txid = f"{self.topic}-tx"
        self._open: list[tuple[int, int]] | None = None  # the open transaction's records

    # -- producers ---------------------------------------------------------------------
    def _idempotent(self) -> Any:
        from confluent_kafka import Producer

        if self._producer is None:
            self._producer = Producer(self.broker.config(**{"enable.idempotence": True, "linger.ms": 2}))
        return self._producer

    def _transactional(self) -> Any:
        from confluent_kafka import Producer

        if self._txn is None:
            # A transaction left open across a load must outlive a slow try (librdkafka's
            # default is 60 s, after which the broker aborts it behind the world's back).
            config = {"transactional.id": self._txid, "linger.ms": 2, "transaction.timeout.ms": 600_000}
            self._txn = Producer(self.broker.config(**config))
            self._txn.init_transactions(30)
        return self._txn

    def _send(self, producer: Any, n: int, partition: int | None = None) -> list[tuple[int, int]]:
        """``n`` records to ``partition`` (default: one picked per record); their
        ``(partition, offset)`` once acked."""
        acked: list[tuple[int, int, str]] = []
        errors: list[Any] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                acked.append((msg.partition(), msg.offset(), msg.value().decode()))

        for _ in range(n):
            self._seq += 1
            to = self.rng.randrange(self.partitions) if partition is None else partition
            value = f"v{self._seq}"
            producer.produce(
                self.topic, key=f"k{self._seq}", value=value, partition=to, on_delivery=delivered
            )
            producer.poll(0)
        left = producer.flush(60)
        if errors or left or len(acked) != n:
            raise RuntimeError(
                f"produce to {self.topic}: {errors[:3]}, {left} unacked, {len(acked)} of {n} acked"
            )
        for partition, offset, value in acked:
            self.fate[(partition, offset)] = (value, OPEN)
        return [(p, o) for p, o, _ in acked]

    def _settle(self, produced: list[tuple[int, int]], fate: str) -> None:
        for key in produced:
            self.fate[key] = (self.fate[key][0], fate)

    # -- what the history does ---------------------------------------------------------
    def produce(self, n: int, *, partition: int | None = None) -> None:
        """``n`` records through the idempotent producer (to ``partition``, or spread)."""
        with self._lock:
            if n:
                self._settle(self._send(self._idempotent(), n, partition), COMMITTED)
                self.kinds["produced"] += n

    def transaction(self, n: int, *, abort: bool) -> None:
        """``n`` records in one transaction, committed or aborted."""
        with self._lock:
            if self._open is not None:
                self.end_transaction(abort=self.rng.random() < 0.5)
            txn = self._transactional()
            txn.begin_transaction()
            produced = self._send(txn, n)
            if abort:
                txn.abort_transaction(30)
            else:
                txn.commit_transaction(30)
            self._settle(produced, ABORTED if abort else COMMITTED)
            self.kinds["aborted" if abort else "transactional"] += n

    def open_transaction(self, n: int) -> None:
        """A transaction begun, ``n`` records sent and acked, and left open (the last
        stable offset stays before them until :meth:`end_transaction`)."""
        with self._lock:
            if self._open is not None:
                return
            txn = self._transactional()
            txn.begin_transaction()
            self._open = self._send(txn, n)
            self.kinds["open_transaction"] += 1

    def end_transaction(self, *, abort: bool) -> None:
        with self._lock:
            if self._open is None:
                return
            txn = self._transactional()
            if abort:
                txn.abort_transaction(30)
            else:
                txn.commit_transaction(30)
            self._settle(self._open, ABORTED if abort else COMMITTED)
            self.kinds["aborted" if abort else "transactional"] += len(self._open)
            self._open = None

    def wait_markers(self, timeout: float = 30.0) -> float:
        """Wait until every ended transaction's markers are in the partitions: the broker
        answers a commit once the coordinator has logged it and writes the markers after, so
        for a moment the last stable offset still stops before the committed records. A load
        then rightly freezes less; only the drain, which stops at a load that found nothing,
        must not begin before the markers land.

        :returns: the seconds waited.
        :raises AssertionError: when the markers are not in after ``timeout`` seconds.
        """
        from airflow_eod.sources.kafka_offsets import describe_topics

        config = self.broker.config()
        started = time.monotonic()
        while True:
            stable = describe_topics(config, [self.topic], isolation_level="read_committed")
            high = describe_topics(config, [self.topic], isolation_level="read_uncommitted")
            if stable[self.topic].ends == high[self.topic].ends:
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise AssertionError(
                    f"chaos.kafka: {self.topic}: last stable offsets {stable[self.topic].ends} still "
                    f"behind the high watermarks {high[self.topic].ends} after {timeout:.0f}s"
                )
            time.sleep(0.05)

    @property
    def in_transaction(self) -> bool:
        return self._open is not None

    def add_partitions(self, more: int) -> None:
        """``more`` partitions added to the topic; the producers are made anew (librdkafka's
        metadata would not know the new partitions for minutes)."""
        with self._lock:
            if self._open is not None:
                self.end_transaction(abort=self.rng.random() < 0.5)
            total = min(MAX_PARTITIONS, self.partitions + more)
            if total == self.partitions:
                return
            self.broker.add_partitions(self.topic, total)
            self.kinds["partitions_added"] += total - self.partitions
            self.partitions = total
            self.close_producers()

    def close_producers(self) -> None:
        with self._lock:
            if self._producer is not None:
                self._producer.flush(30)
                self._producer = None
            if self._txn is not None:
                if self._open is not None:
                    self.end_transaction(abort=True)
                self._txn = None

    # -- what is expected --------------------------------------------------------------
    def committed(self) -> list[Record]:
        """Every record of a committed write: what the table must hold, once each."""
        return sorted((self.topic, p, o, v) for (p, o), (v, f) in self.fate.items() if f == COMMITTED)

    def held(self) -> list[Record]:
        """What the broker holds for the topic, read_committed (librdkafka, not Spark)."""
        return sorted((t, p, o, v or "") for t, p, o, v in kafka_records(self.broker, self.topic))

    def close(self) -> None:
        """The producers closed (any open transaction aborted) and the topic deleted."""
        try:
            self.close_producers()
        finally:
            try:
                self.broker.delete_topic(self.topic)
            except Exception:  # the topic is the trial's own: a leftover only costs disk
                pass


def table_rows(table: str) -> list[Record]:
    """``(topic, partition, offset, value)`` of every row of the trial's table."""
    return [(t, p, o, v or "") for t, p, o, v in table_records(table)]
