"""Committing a loaded batch's offsets to a Kafka consumer group, for monitoring only.

The pipeline's frontier lives in the plan log and the table, never in Kafka: the source
neither reads nor trusts a consumer group. Teams watch consumer lag with tools that read
groups (Burrow, Kafka UI, ``kafka-consumer-groups.sh``), though; with ``monitoring_group_id``
the operator commits, after the table holds a batch, each partition's ``until`` to that
group. It is best effort: a failed commit is a warning, and the load's outcome is the
table's. A group that other consumers use is not touched differently: pick a group id of
its own.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)


def commit_group_offsets(
    config: Mapping[str, Any], group_id: str, boundary: Mapping[str, Any], label: str
) -> bool:
    """Commit each partition's frozen ``until`` of ``boundary`` to ``group_id``.

    :param config: the librdkafka client configuration (brokers, security, credentials).
    :param group_id: the consumer group to commit to.
    :param boundary: a Kafka batch's frozen boundary (``{"topics": {t: {"partitions": ...}}}``).
    :param label: the batch, for the log.
    :returns: whether the commit succeeded.
    """
    try:
        from confluent_kafka import Consumer, TopicPartition

        offsets = [
            TopicPartition(topic, int(partition), int(rng[1]))
            for topic, entry in boundary["topics"].items()
            for partition, rng in entry["partitions"].items()
        ]
        consumer = Consumer({**config, "group.id": group_id, "enable.auto.commit": False})
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
        finally:
            consumer.close()
    except Exception as exc:  # monitoring only: the table, not the group, is the record
        log.warning(
            "batch %s: committing its offsets to consumer group %r failed (monitoring only): %s",
            label,
            group_id,
            exc,
        )
        return False
    log.info("batch %s: offsets committed to consumer group %r (monitoring only)", label, group_id)
    return True
