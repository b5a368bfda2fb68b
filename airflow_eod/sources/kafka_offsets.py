"""What a Kafka cluster says about its topics, for planning: offsets, partitions, topic ids.

The planning half of the Kafka source asks the brokers through librdkafka's admin client
(``confluent-kafka``, the ``kafka`` extra), in the task, without a JVM: each partition's log
start offset (the first record Kafka still holds), its end offset (the last stable offset
under ``read_committed``: no open transaction's records, which may still abort, are ever
frozen into a batch; the high watermark under ``read_uncommitted``) and each topic's id, which
a deleted and re-created topic of the same name does not keep. Spark reads what is planned
(:mod:`airflow_eod.spark.kafka_reader`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_eod.core.errors import ConfigurationError, EodError

ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
_TIMEOUT_S = 30.0
# How long a planning call keeps asking while the brokers answer with a transient error (a
# partition's leader not known yet, just after partitions were added or a leader moved).
_RETRY_S = 15.0
# Broker errors that say "ask again shortly", by librdkafka's name (KafkaError.name()): the
# admin client marks few of them retriable itself.
_TRANSIENT = frozenset(
    {
        "NOT_LEADER_FOR_PARTITION",
        "LEADER_NOT_AVAILABLE",
        "BROKER_NOT_AVAILABLE",
        "REPLICA_NOT_AVAILABLE",
        "OFFSET_NOT_AVAILABLE",
        "REQUEST_TIMED_OUT",
        "NOT_CONTROLLER",
        "FENCED_LEADER_EPOCH",
        "UNKNOWN_LEADER_EPOCH",
        "_TRANSPORT",
        "_TIMED_OUT",
    }
)


class KafkaUnavailableError(EodError):
    """The brokers did not answer (a transient error: another try may succeed)."""


@dataclass(frozen=True)
class TopicState:
    """One topic as the brokers describe it now.

    :param name: the topic.
    :param topic_id: its id (a deleted and re-created topic gets a new one).
    :param starts: each partition's log start offset.
    :param ends: each partition's end offset (exclusive) at the isolation level asked.
    """

    name: str
    topic_id: str
    starts: dict[int, int]
    ends: dict[int, int]


def _client() -> Any:
    try:
        from confluent_kafka import admin
    except ImportError as exc:  # pragma: no cover - depends on the extra being installed
        raise ConfigurationError(
            "the Kafka source plans with confluent-kafka, which is not installed: "
            "pip install 'airflow-eod[kafka]'"
        ) from exc
    return admin


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` (a ``KafkaException``) is an error the brokers stop giving shortly."""
    err = exc.args[0] if exc.args else None
    if err is None or not hasattr(err, "name"):
        return False
    return bool(getattr(err, "retriable", lambda: False)()) or err.name() in _TRANSIENT


def retrying(call: Callable[[], Any], *, seconds: float | None = None, pause: float = 0.2) -> Any:
    """``call()``, asked again while it fails with a :func:`transient` error, for at most
    ``seconds``; then its last error is raised (so is any other error, at once)."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + (_RETRY_S if seconds is None else seconds)
    while True:
        try:
            return call()
        except KafkaException as exc:
            if not transient(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 2.0)


def describe_topics(
    config: Mapping[str, Any], topics: Sequence[str], *, isolation_level: str
) -> dict[str, TopicState]:
    """The id, partitions and offsets of each of ``topics``. A transient broker error (a
    new partition's leader not known yet) is asked again for a few seconds first.

    :param config: the librdkafka client configuration (``bootstrap.servers``, security).
    :param topics: the topics.
    :param isolation_level: ``read_committed`` (end = last stable offset) or
        ``read_uncommitted`` (end = high watermark).
    :raises ConfigurationError: for a topic that does not exist.
    :raises KafkaUnavailableError: when the brokers do not answer in time.
    """
    admin = _client()
    from confluent_kafka import KafkaException

    client = admin.AdminClient({**config, "socket.timeout.ms": 10_000})
    try:
        return retrying(lambda: _describe(admin, client, config, topics, isolation_level))
    except KafkaException as exc:
        raise KafkaUnavailableError(
            f"Kafka on {config.get('bootstrap.servers')} did not answer for topics {list(topics)}: {exc}"
        ) from exc


def _describe(
    admin: Any, client: Any, config: Mapping[str, Any], topics: Sequence[str], isolation_level: str
) -> dict[str, TopicState]:
    """One try of :func:`describe_topics`."""
    from confluent_kafka import IsolationLevel, KafkaException, TopicCollection, TopicPartition

    described = client.describe_topics(TopicCollection(list(topics)), request_timeout=_TIMEOUT_S)
    found: dict[str, Any] = {}
    for name, future in described.items():
        try:
            found[name] = future.result(timeout=_TIMEOUT_S)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if getattr(err, "name", lambda: "")() == "UNKNOWN_TOPIC_OR_PART":
                raise ConfigurationError(
                    f"Kafka topic {name!r} does not exist on {config.get('bootstrap.servers')}"
                ) from None
            raise
    parts = [TopicPartition(name, p.id) for name, d in found.items() for p in d.partitions]
    level = (
        IsolationLevel.READ_COMMITTED
        if isolation_level == "read_committed"
        else IsolationLevel.READ_UNCOMMITTED
    )
    earliest = client.list_offsets(
        {tp: admin.OffsetSpec.earliest() for tp in parts},
        isolation_level=level,
        request_timeout=_TIMEOUT_S,
    )
    latest = client.list_offsets(
        {tp: admin.OffsetSpec.latest() for tp in parts},
        isolation_level=level,
        request_timeout=_TIMEOUT_S,
    )
    states: dict[str, TopicState] = {
        name: TopicState(name, str(d.topic_id), {}, {}) for name, d in found.items()
    }
    for tp, future in earliest.items():
        states[tp.topic].starts[tp.partition] = int(future.result(timeout=_TIMEOUT_S).offset)
    for tp, future in latest.items():
        states[tp.topic].ends[tp.partition] = int(future.result(timeout=_TIMEOUT_S).offset)
    return states


def split_cap(backlog: Mapping[tuple[str, int], int], cap: int | None) -> dict[tuple[str, int], int]:
    """How many offsets of each partition's backlog one batch takes, at most ``cap`` in all.

    Proportional to each backlog (largest remainders first, ties by topic and partition), so
    no partition starves and the split depends only on the backlog: the same plan from the
    same offsets, whoever plans it.

    :param backlog: offsets waiting per ``(topic, partition)``.
    :param cap: the most offsets one batch spans (``None``: all of them).
    """
    total = sum(backlog.values())
    if cap is None or total <= cap:
        return dict(backlog)
    taken = {tp: backlog[tp] * cap // total for tp in backlog}
    left = cap - sum(taken.values())
    by_remainder = sorted(backlog, key=lambda tp: (-(backlog[tp] * cap % total), tp))
    for tp in by_remainder[:left]:
        taken[tp] += 1
    return taken
