"""Planning asks the brokers again while they answer with a transient error.

Found by the chaos harness's Kafka pipeline (``python -m benchmarks.chaos --pipeline kafka
--trials 10 --seed 100``): a load planned just after partitions were added failed its try
with ``KafkaUnavailableError: ... NOT_LEADER_FOR_PARTITION`` (the new partition's leader not
known to the broker answering ListOffsets yet), and its retries, at once, failed the same way.
"""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("confluent_kafka", reason="the Kafka source plans with confluent-kafka (the kafka extra)")

from confluent_kafka import KafkaError, KafkaException

from airflow_eod.sources import kafka_offsets
from airflow_eod.sources.kafka_offsets import KafkaUnavailableError, describe_topics


def _done(value: Any = None, error: int | None = None) -> Future[Any]:
    future: Future[Any] = Future()
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(KafkaException(KafkaError(error)))
    return future


class _Admin:
    """An admin client whose ListOffsets answers fail with ``error`` in the first
    ``failures`` tries (a try describes the topic, then lists its offsets)."""

    calls = 0  # tries

    def __init__(self, failures: int, error: int) -> None:
        self.failures, self.error = failures, error

    def describe_topics(self, topics: Any, request_timeout: float) -> dict[str, Future[Any]]:
        _Admin.calls += 1
        meta = SimpleNamespace(topic_id="t-id", partitions=[SimpleNamespace(id=0), SimpleNamespace(id=1)])
        return {"orders": _done(meta)}

    def list_offsets(self, specs: dict[Any, Any], **_: Any) -> dict[Any, Future[Any]]:
        failing = _Admin.calls <= self.failures
        return {
            tp: _done(error=self.error) if failing and tp.partition == 1 else _done(SimpleNamespace(offset=7))
            for tp in specs
        }


def _fake(monkeypatch: pytest.MonkeyPatch, failures: int, error: int) -> None:
    client = _Admin(failures, error)
    _Admin.calls = 0
    module = SimpleNamespace(
        AdminClient=lambda config: client,
        OffsetSpec=SimpleNamespace(earliest=lambda: "earliest", latest=lambda: "latest"),
    )
    monkeypatch.setattr(kafka_offsets, "_client", lambda: module)


def test_a_partition_without_a_known_leader_yet_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(monkeypatch, failures=2, error=KafkaError.NOT_LEADER_FOR_PARTITION)
    states = describe_topics({"bootstrap.servers": "b:9092"}, ["orders"], isolation_level="read_committed")
    assert states["orders"].ends == {0: 7, 1: 7} and states["orders"].topic_id == "t-id"
    assert _Admin.calls == 3  # asked again after the two failures


def test_an_error_that_does_not_pass_is_raised_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(monkeypatch, failures=99, error=KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaUnavailableError, match="TOPIC_AUTHORIZATION_FAILED"):
        describe_topics({"bootstrap.servers": "b:9092"}, ["orders"], isolation_level="read_committed")
    assert _Admin.calls == 1


def test_a_transient_error_that_lasts_is_raised_after_the_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(monkeypatch, failures=99, error=KafkaError.LEADER_NOT_AVAILABLE)
    monkeypatch.setattr(kafka_offsets, "_RETRY_S", 0.5)
    with pytest.raises(KafkaUnavailableError, match="LEADER_NOT_AVAILABLE"):
        describe_topics({"bootstrap.servers": "b:9092"}, ["orders"], isolation_level="read_committed")
    assert 1 < _Admin.calls < 99
