"""What Kafka did to a pipeline's topics, and the refusals that say so: topics deleted,
topics deleted and created again (a new topic id), records deleted before a batch read them.

Each refusal names the batch, what changed, and the way out that needs no DAG change (one
run's ``dag_run.conf``), or lets the change pass where the source's policy accepts it
(``topic_changes='accept'``, ``data_loss='skip'``), with a warning that says what was passed.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow_eod.core.errors import ConfigurationError, RecordsDeletedError, TopicRecreatedError
from airflow_eod.sources.kafka_offsets import TopicState

log = logging.getLogger(__name__)

RECREATED_WAY_OUT = (
    "To go on, accept on purpose that the old topic's records no batch loaded are gone: trigger "
    'one run with conf {{"eod_pipeline": "{pipeline}", "eod_topic_changes": "accept"}} (or set '
    "topic_changes='accept' on the operator): the new topic is loaded from its first record, the "
    "pipeline's other topics go on from their frontier. Never accept it for a cluster whose "
    "topics were mirrored with their history (a migration): that history would load again"
)


def missing_topics(
    topics: list[str], states: dict[str, TopicState], label: str, *, topic_changes: str, brokers: str
) -> list[str]:
    """The pipeline's topics that do not exist: refused, unless ``topic_changes='accept'``
    accepts on purpose that a deleted topic's records no batch loaded are gone."""
    gone = [topic for topic in sorted(topics) if topic not in states]
    if gone and topic_changes != "accept":
        pipeline = label.rpartition("/")[0]
        raise ConfigurationError(
            f"batch {label}: Kafka topics {gone} do not exist on {brokers}; nothing "
            "was loaded. If they were deleted on purpose, trigger one run with conf "
            f'{{"eod_pipeline": "{pipeline}", "eod_topic_changes": "accept"}} (or set '
            "topic_changes='accept'): it loads the pipeline's other topics on from their "
            "frontier without them (their records no batch loaded are gone; a topic created "
            "again under the name is loaded from its first record)"
        )
    if gone:
        log.warning(
            "batch %s: Kafka topics %s do not exist; topic_changes='accept': planning without them",
            label,
            gone,
        )
    return gone


def recreated_topics(frozen: dict[str, Any], states: dict[str, TopicState]) -> list[str]:
    """The topics of ``frozen`` whose id is not the one they have now."""
    return [
        topic
        for topic, entry in frozen.items()
        if topic in states and entry.get("id") and states[topic].topic_id != entry["id"]
    ]


def refuse_recreated(frozen: dict[str, Any], states: dict[str, TopicState], label: str, way_out: str) -> None:
    """:class:`TopicRecreatedError` for the first topic of ``frozen`` with another id now."""
    for topic in recreated_topics(frozen, states):
        raise TopicRecreatedError(
            label,
            f"Kafka topic {topic!r} was deleted and created again (topic id {frozen[topic]['id']} "
            f"when planned, {states[topic].topic_id} now): its offsets restart, so the pipeline's "
            f"frontier means nothing in it; nothing was loaded. {way_out}",
        )


def records_lost(skipped: list[dict[str, Any]], label: str, *, data_loss: str) -> None:
    """Records deleted before any batch read them: refused, or (``data_loss='skip'``) a
    warning naming them (the plan records them)."""
    ranges = ", ".join(f"{s['topic']}-{s['partition']} offsets [{s['from']}, {s['until']})" for s in skipped)
    if data_loss == "skip":
        log.warning(
            "batch %s: Kafka no longer holds %s (deleted by retention or DeleteRecords before any "
            "batch read them); data_loss='skip': planning past them, the plan records them",
            label,
            ranges,
        )
        return
    raise RecordsDeletedError(
        label,
        f"Kafka no longer holds {ranges}: they were deleted (retention, DeleteRecords) before "
        "this pipeline read them, and no retry brings them back; nothing was loaded. To go on "
        "without them, accept the loss on purpose: trigger one run with conf "
        f'{{"eod_pipeline": "{label.rpartition("/")[0]}", "eod_data_loss": "skip"}} (or set '
        "data_loss='skip' on the operator; the plan records the skipped ranges), and raise the "
        "topic's retention so that it does not recur",
    )
