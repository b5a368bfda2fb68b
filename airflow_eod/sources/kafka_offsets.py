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
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from airflow_eod.core.errors import ConfigurationError, KafkaUnavailableError

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
    config: Mapping[str, Any], topics: Sequence[str], *, isolation_level: str, missing_ok: bool = False
) -> dict[str, TopicState]:
    """The id, partitions and offsets of each of ``topics``. A transient broker error (a
    new partition's leader not known yet) is asked again for a few seconds first.

    :param config: the librdkafka client configuration (``bootstrap.servers``, security).
    :param topics: the topics.
    :param isolation_level: ``read_committed`` (end = last stable offset) or
        ``read_uncommitted`` (end = high watermark).
    :param missing_ok: leave a topic that does not exist out of the answer.
    :raises ConfigurationError: for a topic that does not exist (unless ``missing_ok``), or a
        SASL login the brokers refuse (a wrong user or password does not right itself on a retry).
    :raises KafkaUnavailableError: when the brokers do not answer in time.
    """
    admin = _client()
    from confluent_kafka import KafkaError, KafkaException

    errors: list[Any] = []
    # librdkafka reports a refused login or an unreachable broker only to error_cb; the
    # request itself just times out. Collected, they become the error's cause.
    client = admin.AdminClient({**config, "socket.timeout.ms": 10_000, "error_cb": errors.append})
    brokers = config.get("bootstrap.servers")

    def result(future: Any) -> Any:
        deadline = time.monotonic() + _TIMEOUT_S
        while True:
            try:
                return future.result(timeout=0.2)
            except FutureTimeout:
                client.poll(0)  # serves error_cb
                refused = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
                if refused:
                    raise ConfigurationError(
                        f"Kafka on {brokers} refused the SASL login of user "
                        f"{config.get('sasl.username')!r}: {refused[-1].str()}; check the connection's "
                        "login and password"
                    ) from None
                if time.monotonic() > deadline:
                    seen = "; ".join(dict.fromkeys(e.str() for e in errors[-3:])) or "no answer"
                    raise KafkaUnavailableError(
                        f"Kafka on {brokers} did not answer in {_TIMEOUT_S:.0f}s for topics "
                        f"{list(topics)}: {seen}"
                    ) from None

    try:
        return retrying(lambda: _describe(admin, client, result, config, topics, isolation_level, missing_ok))
    except KafkaException as exc:
        seen = "; ".join(dict.fromkeys(e.str() for e in errors[-3:]))
        raise KafkaUnavailableError(
            f"Kafka on {brokers} did not answer for topics {list(topics)}: {exc}{'; ' + seen if seen else ''}"
        ) from exc


def _describe(
    admin: Any,
    client: Any,
    result: Callable[[Any], Any],
    config: Mapping[str, Any],
    topics: Sequence[str],
    isolation_level: str,
    missing_ok: bool,
) -> dict[str, TopicState]:
    """One try of :func:`describe_topics` (``result`` waits for one of the client's answers)."""
    from confluent_kafka import IsolationLevel, KafkaException, TopicCollection, TopicPartition

    described = client.describe_topics(TopicCollection(list(topics)), request_timeout=_TIMEOUT_S)
    found: dict[str, Any] = {}
    for name, future in described.items():
        try:
            found[name] = result(future)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if getattr(err, "name", lambda: "")() == "UNKNOWN_TOPIC_OR_PART":
                if missing_ok:
                    continue
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
        states[tp.topic].starts[tp.partition] = int(result(future).offset)
    for tp, future in latest.items():
        states[tp.topic].ends[tp.partition] = int(result(future).offset)
    return states


def split_cap(backlog: Mapping[tuple[str, int], int], cap: int | None) -> dict[tuple[str, int], int]:
    """How many offsets of each partition's backlog one batch takes, at most ``cap`` in all.

    Each partition with a backlog takes one offset first (when ``cap`` has room for one each),
    the rest in proportion to each backlog (largest remainders first, ties by topic and
    partition), so no partition starves and the split depends only on the backlog: the same
    plan from the same offsets, whoever plans it. A ``cap`` below the number of partitions
    with a backlog takes the largest backlogs first.

    :param backlog: offsets waiting per ``(topic, partition)``.
    :param cap: the most offsets one batch spans (``None``: all of them).
    """
    total = sum(backlog.values())
    if cap is None or total <= cap:
        return dict(backlog)
    waiting = [tp for tp, n in backlog.items() if n > 0]
    # Proportions alone would give a partition far behind a busy one nothing, batch after
    # batch, for as long as the busy one's backlog outgrows it (1 against 1000, cap 10: 0).
    floor = {tp: int(len(waiting) <= cap and backlog[tp] > 0) for tp in backlog}
    rest = {tp: backlog[tp] - floor[tp] for tp in backlog}
    room, rest_total = cap - sum(floor.values()), sum(rest.values())  # rest_total > room >= 0
    taken = {tp: floor[tp] + rest[tp] * room // rest_total for tp in backlog}
    left = cap - sum(taken.values())
    by_remainder = sorted(backlog, key=lambda tp: (-(rest[tp] * room % rest_total), tp))
    for tp in by_remainder[:left]:
        taken[tp] += 1
    return taken
