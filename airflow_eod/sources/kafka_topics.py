"""The Kafka source: records of one or more topics, in batches of frozen offset ranges.

A batch is ``{topic: {partition: [from, until)}}`` over every partition of its topics, with
each topic's id, frozen in the plan log before anything is read: ``from`` is where the
pipeline's previous batch ended (a partition's log start offset for the first batch, 0 for
a partition added since), ``until`` the partition's end offset when planned (the last
stable offset under ``read_committed``), optionally capped per batch. Every attempt of the
batch reads exactly those ranges (Spark's batch ``kafka`` reader with ``startingOffsets`` and
``endingOffsets``), so a retry reads the same records. Nothing is stored in Kafka's consumer
groups: the plan log and the table's markers are the record.

What Kafka can do to a frozen range, and what happens then:

- records deleted (retention, ``DeleteRecords``) before a batch read them: refused, naming
  the partitions and offsets; ``data_loss="skip"`` (or a re-freeze of a frozen batch)
  accepts the loss on purpose and records the skipped ranges in the plan;
- a topic deleted and re-created under the same name: refused (its topic id changed, and its
  offsets restart), at planning and before the commit;
- partitions added: read from offset 0 by the next batch;
- transactional producers: ``read_committed`` (default) never reads aborted records or
  transaction markers (offsets with gaps), and never freezes an open transaction's records;
- compacted topics: a retry reads the range's records that compaction kept (see
  docs/sources/kafka.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any, ClassVar

from airflow_eod.core.batch import BatchKey
from airflow_eod.core.ddl_schema import ddl_columns
from airflow_eod.core.errors import (
    ConfigurationError,
    InputChangedError,
    RecordsDeletedError,
    TopicRecreatedError,
)
from airflow_eod.core.options import choice
from airflow_eod.core.planlog.offsets import OffsetHistory
from airflow_eod.core.planlog.restatement import refreeze_hint
from airflow_eod.core.planlog.store import Plan, PlanLog
from airflow_eod.core.planner import plan_offset_batch
from airflow_eod.core.source import ReadContext
from airflow_eod.sources.kafka_changes import (
    RECREATED_WAY_OUT,
    missing_topics,
    records_lost,
    recreated_topics,
    refuse_recreated,
)
from airflow_eod.sources.kafka_config import check_client_config, planning_config, spark_reader_options
from airflow_eod.sources.kafka_offsets import ISOLATION_LEVELS, TopicState, describe_topics, split_cap

log = logging.getLogger(__name__)

VALUE_FORMATS = ("string", "binary", "json")
# Where each record came from, as columns of the table (beside ``key`` and the value).
METADATA_COLUMNS = ("kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp")


def clashing_fields(fields: list[str]) -> list[str]:
    """The JSON value fields named like a column the source writes itself (compared without
    case: Spark's names are case-insensitive) or with airflow-eod's reserved prefix ``_eod_``:
    each would be a duplicate column at the write, or stand in for one of ours."""
    ours = {"key", *METADATA_COLUMNS}
    return [f for f in fields if f.lower() in ours or f.lower().startswith("_eod_")]


DATA_LOSS_POLICIES = ("fail", "skip")
TOPIC_CHANGE_POLICIES = ("fail", "accept")


@dataclass(frozen=True)
class KafkaSource:
    """Records of Kafka topics, in batches of frozen per-partition offset ranges.

    :param bootstrap_servers: the brokers, ``host:port,...``.
    :param topics: the topics to load (one pipeline, one table).
    :param client_config: more librdkafka client settings without secrets (``security.protocol``,
        ``sasl.mechanism``, ``ssl.ca.location``, ...): they reach both the planning client and
        Spark's reader (:mod:`airflow_eod.sources.kafka_config`). The SASL user and password
        come from the read context's credentials.
    :param max_records_per_batch: cap on the offsets one batch spans, over all partitions,
        split in proportion to each partition's backlog (offsets, not records: transaction
        markers and aborted records take offsets too).
    :param value_format: ``string`` (key and value as UTF-8 text), ``binary`` (as bytes) or
        ``json`` (the value parsed with ``schema`` into columns; malformed values fail the
        batch or go to the quarantine table).
    :param schema: the value's schema for ``json``, a Spark DDL string.
    :param isolation_level: ``read_committed`` (default) or ``read_uncommitted``.
    :param data_loss: ``fail`` (default): records deleted before a batch read them refuse
        it; ``skip``: plan past them, recording the skipped ranges (a warning in the log).
    :param topic_changes: ``fail`` (default): a topic of the pipeline that was deleted, or
        deleted and created again (a new topic id), refuses planning; ``accept``: plan without
        a deleted topic, and load a re-created one from its first record (its old records no
        batch loaded are gone). Meant for one run, through ``dag_run.conf``.
    :param end_offsets: with ``catch_up``: the end offsets when the run began
        (``{topic: {partition: offset}}``); no batch of the run goes past them, so a run ends
        on a topic that is always written to, as ``Trigger.AvailableNow`` does. Not part of
        the source's identity: each run sets its own.
    """

    bootstrap_servers: str
    topics: list[str]
    client_config: dict[str, Any] = field(default_factory=dict)
    max_records_per_batch: int | None = None
    value_format: str = "string"
    schema: str | None = None
    isolation_level: str = "read_committed"
    data_loss: str = "fail"
    topic_changes: str = "fail"
    end_offsets: dict[str, dict[str, int]] | None = None

    kind: ClassVar[str] = "kafka"

    def __post_init__(self) -> None:
        choice("value_format", self.value_format, VALUE_FORMATS)
        choice("isolation_level", self.isolation_level, ISOLATION_LEVELS)
        choice("data_loss", self.data_loss, DATA_LOSS_POLICIES)
        choice("topic_changes", self.topic_changes, TOPIC_CHANGE_POLICIES)
        if not self.bootstrap_servers or not str(self.bootstrap_servers).strip():
            raise ConfigurationError("the Kafka source needs bootstrap_servers (host:port,...)")
        if not self.topics or len(set(self.topics)) != len(self.topics):
            raise ConfigurationError(f"topics must name at least one topic, each once (got {self.topics!r})")
        for topic in self.topics:
            if not isinstance(topic, str) or not topic or any(c in topic for c in ',"\\') or len(topic) > 249:
                raise ConfigurationError(f"{topic!r} is not a Kafka topic name")
        if self.value_format == "json" and not self.schema:
            raise ConfigurationError("value_format='json' needs a schema (a Spark DDL string)")
        if self.value_format != "json" and self.schema:
            raise ConfigurationError("schema is for value_format='json' only")
        if self.value_format == "json":
            # The value's fields sit beside the key and the record's origin: a field of the same
            # name (Spark's names are case-insensitive) would be a duplicate column at write time.
            clash = clashing_fields(ddl_columns("schema", str(self.schema)))
            if clash:
                raise ConfigurationError(
                    f"schema fields {clash} have the names of columns the Kafka source writes "
                    f"itself {['key', *METADATA_COLUMNS]} (or airflow-eod's reserved prefix _eod_): "
                    "rename them in the schema"
                )
        if self.max_records_per_batch is not None and self.max_records_per_batch < 1:
            raise ConfigurationError("max_records_per_batch must be at least 1")
        check_client_config(self.client_config)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.kind, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KafkaSource:
        return cls(**{k: v for k, v in data.items() if k != "type"})

    @property
    def boundary(self) -> str:
        return "offsets"

    def identity(self) -> dict[str, Any]:
        """What decides the slice: a stored plan is reused only by the same source. The
        brokers' addresses are not part of it (a cluster may move), its topics are."""
        return {"type": self.kind, "topics": sorted(self.topics), "isolation_level": self.isolation_level}

    # -- what the brokers say ------------------------------------------------------------
    def _states(self, ctx: ReadContext) -> dict[str, TopicState]:
        """The topics that exist, as the brokers describe them (a deleted topic is absent)."""
        config = planning_config(self.bootstrap_servers, self.client_config, ctx.credentials)
        return describe_topics(config, self.topics, isolation_level=self.isolation_level, missing_ok=True)

    # -- planning ------------------------------------------------------------------------
    def _next_offsets(
        self, ctx: ReadContext, label: Callable[[], str]
    ) -> Callable[[OffsetHistory], tuple[dict[str, Any], list[dict[str, Any]]] | None]:
        def next_offsets(history: OffsetHistory) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
            newest = history.newest()
            # A topic missing when a batch was planned keeps its frontier in the batch's
            # "absent" (never read): should it come back under its id, it goes on from there.
            frontier: dict[str, Any] = (
                {**newest.boundary.get("absent", {}), **newest.boundary["topics"]}
                if newest is not None
                else {}
            )
            states = self._states(ctx)
            gone = missing_topics(
                self.topics, states, label(), topic_changes=self.topic_changes, brokers=self.bootstrap_servers
            )
            recreated = recreated_topics(frontier, states)
            if recreated and self.topic_changes != "accept":
                way_out = RECREATED_WAY_OUT.format(pipeline=label().rpartition("/")[0])
                refuse_recreated(frontier, states, label(), way_out)
            if recreated:
                # Accepted on purpose: the old topic's records this pipeline had not loaded
                # are gone with it; the new topic is loaded from its first record, the other
                # topics go on from their frontier.
                log.warning(
                    "batch %s: Kafka topics %s were re-created; topic_changes='accept': loading them from "
                    "their first records, without the old topics' records no batch loaded",
                    label(),
                    recreated,
                )
                frontier = {t: e for t, e in frontier.items() if t not in recreated}
            starts: dict[tuple[str, int], int] = {}
            skipped: list[dict[str, Any]] = []
            for topic in sorted(self.topics):
                if topic not in states:
                    continue  # deleted, and accepted (missing_topics)
                state = states[topic]
                known = frontier.get(topic, {}).get("partitions", {})
                if known and any(int(p) not in state.ends for p in known):
                    raise TopicRecreatedError(
                        label(),
                        f"Kafka topic {topic!r} has partitions {sorted(state.ends)} now, and the pipeline "
                        f"loaded partitions {sorted(int(p) for p in known)}: partitions are never "
                        "removed from a topic, so it was re-created; load it under a new pipeline_id",
                    )
                for partition in sorted(state.ends):
                    if str(partition) in known:
                        start = int(known[str(partition)][1])
                    elif newest is not None and topic in frontier:
                        start = 0  # a partition added since the last batch: all of it
                    else:
                        start = state.starts[partition]  # the first batch: what Kafka holds
                    if start < state.starts[partition]:
                        skipped.append(
                            {
                                "topic": topic,
                                "partition": partition,
                                "from": start,
                                "until": state.starts[partition],
                            }
                        )
                        start = state.starts[partition]
                    starts[(topic, partition)] = start
            if skipped:
                records_lost(skipped, label(), data_loss=self.data_loss)
            backlog = {tp: max(0, self._end(states, tp) - start) for tp, start in starts.items()}
            if not any(backlog.values()):
                return None
            taken = split_cap(backlog, self.max_records_per_batch)
            boundary, inputs = self._frozen(states, {tp: (s, s + taken[tp]) for tp, s in starts.items()})
            absent = {topic: frontier[topic] for topic in gone if topic in frontier}
            if absent:
                boundary["absent"] = absent
            for entry in inputs:
                for lost in skipped:
                    if (lost["topic"], lost["partition"]) == (entry["topic"], entry["partition"]):
                        entry["skipped"] = [lost["from"], lost["until"]]
            return boundary, inputs

        return next_offsets

    def _end(self, states: dict[str, TopicState], tp: tuple[str, int]) -> int:
        """Where a batch of ``tp`` may end now: the partition's end, or (a catch-up run) the end
        it had when the run began, whichever is lower; a partition added since waits."""
        end = states[tp[0]].ends[tp[1]]
        if self.end_offsets is None:
            return end
        return min(end, int(self.end_offsets.get(tp[0], {}).get(str(tp[1]), 0)))

    def end_offsets_now(self, ctx: ReadContext) -> dict[str, dict[str, int]]:
        """Each partition's end now (``{topic: {partition: offset}}``), for a catch-up run's
        :attr:`end_offsets`."""
        return {t: {str(p): e for p, e in st.ends.items()} for t, st in self._states(ctx).items()}

    def _frozen(
        self, states: dict[str, TopicState], ranges: dict[tuple[str, int], tuple[int, int]]
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        topics: dict[str, Any] = {}
        inputs: list[dict[str, Any]] = []
        for (topic, partition), (start, until) in sorted(ranges.items()):
            entry = topics.setdefault(topic, {"id": states[topic].topic_id, "partitions": {}})
            entry["partitions"][str(partition)] = [start, until]
            inputs.append({"topic": topic, "partition": partition, "from": start, "until": until})
        return {"topics": topics, "isolation_level": self.isolation_level}, inputs

    def plan(
        self,
        plan_log: PlanLog,
        ctx: ReadContext,
        *,
        run_token: str,
        is_committed: Callable[[BatchKey], bool],
        interval: tuple[datetime, datetime] | None = None,
    ) -> Plan | None:
        """Freeze the next batch of offsets (``None``: no new records in any partition)."""
        return plan_offset_batch(
            plan_log,
            run_token=run_token,
            is_committed=is_committed,
            next_offsets=self._next_offsets(ctx, lambda: f"{plan_log.pipeline_id}/(next batch)"),
            source=self.identity(),
        )

    def replan(self, plan: Plan, generation: int, ctx: ReadContext, *, committed: bool = True) -> Plan:
        """The same ranges, for a restatement (``committed``) or a re-freeze. A re-freeze of a
        batch whose first records were deleted before it read them starts each range at the
        partition's log start offset, recording the skipped offsets: asking for it is the
        decision to load what is left. A restatement needs all of them (or ``data_loss='skip'``)."""
        states = self._states(ctx)
        frozen: dict[str, Any] = plan.boundary["topics"]
        recreated = recreated_topics(frozen, states)
        if committed:
            # The table holds the old topic's records: restating them from the new topic
            # would replace them with other records (or none).
            refuse_recreated(
                frozen,
                states,
                plan.key.label,
                "The table holds the old topic's records of this batch, which Kafka no longer has: "
                "a restatement would replace them with none, so it is refused",
            )
        ranges: dict[tuple[str, int], tuple[int, int]] = {}
        skipped: list[dict[str, Any]] = []
        absent: dict[str, Any] = dict(plan.boundary.get("absent", {}))
        for topic, entry in frozen.items():
            if topic not in states:
                if committed:
                    raise RecordsDeletedError(
                        plan.key.label,
                        f"Kafka topic {topic!r} no longer exists, and the table holds its records of "
                        "this batch: a restatement would replace them with none, so it is refused",
                    )
                # A re-freeze of a batch nobody committed: the deleted topic's records are gone.
                log.warning("batch %s: re-frozen without deleted topic %r", plan.key.label, topic)
                # Its frontier stays where the batch began: should it come back under its id
                # (a broker that did not know it yet), no record of it is passed over.
                absent[topic] = {
                    "id": entry.get("id"),
                    "partitions": {p: [int(r[0]), int(r[0])] for p, r in entry["partitions"].items()},
                }
                continue
            if topic in recreated:
                # A re-freeze of a batch nobody committed: the old topic's frozen records are
                # gone with it. An empty range at each partition's log start, under the new
                # id, so that the next batch loads the new topic from its first record.
                log.warning(
                    "batch %s: re-frozen without re-created topic %r's old records", plan.key.label, topic
                )
                for partition, first in states[topic].starts.items():
                    ranges[(topic, partition)] = (first, first)
                continue
            for partition, (start, until) in entry["partitions"].items():
                first = states[topic].starts.get(int(partition), 0)
                if start < first < until or (start < first and first >= until and until > start):
                    skipped.append(
                        {
                            "topic": topic,
                            "partition": int(partition),
                            "from": start,
                            "until": min(first, until),
                        }
                    )
                    start = min(first, until)
                ranges[(topic, int(partition))] = (int(start), int(until))
        if not ranges:
            raise ConfigurationError(
                f"batch {plan.key.label}: none of its Kafka topics {sorted(frozen)} exists any more; "
                "there is nothing to re-freeze it with"
            )
        if skipped and committed:
            records_lost(skipped, plan.key.label, data_loss=self.data_loss)
        elif skipped:
            log.warning("batch %s: re-frozen without %s", plan.key.label, skipped)
        boundary, inputs = self._frozen(states, ranges)
        if absent:
            boundary["absent"] = absent
        for topic, entry in boundary["topics"].items():
            if topic not in recreated:
                entry["id"] = frozen[topic].get("id", entry["id"])
        for entry in inputs:
            for lost in skipped:
                if (lost["topic"], lost["partition"]) == (entry["topic"], entry["partition"]):
                    entry["skipped"] = [lost["from"], lost["until"]]
        return replace(
            plan,
            boundary=boundary,
            inputs=inputs,
            generation=generation,
            planned_at="",
            source=self.identity(),
        )

    def check_readable(self, plan: Plan, ctx: ReadContext) -> None:
        """Before Spark reads: the topics are the ones planned, and Kafka still holds every
        frozen offset (:class:`RecordsDeletedError` names the way out: a re-freeze)."""
        states = self._states(ctx)
        self._check_topics(plan, states)
        gone = []
        for topic, entry in plan.boundary["topics"].items():
            for partition, (start, until) in entry["partitions"].items():
                first = states[topic].starts.get(int(partition), 0)
                if start < until and first > start:
                    gone.append(f"{topic}-{partition} offsets [{start}, {min(first, until)})")
        if gone:
            raise RecordsDeletedError(
                plan.key.label,
                f"Kafka no longer holds {', '.join(gone)} of this frozen batch: they were deleted "
                "(retention, DeleteRecords) after it was planned and before it was read; nothing was "
                "committed, and no retry brings them back. To load what is left on purpose, "
                f"re-freeze it: {refreeze_hint(plan.pipeline_id, plan.batch_key)}",
            )

    def _check_topics(self, plan: Plan, states: dict[str, TopicState]) -> None:
        gone = sorted(topic for topic in plan.boundary["topics"] if topic not in states)
        if gone:
            raise RecordsDeletedError(
                plan.key.label,
                f"Kafka topics {gone} of this frozen batch no longer exist: their records are gone; "
                "nothing was committed, and no retry brings them back. To load the batch's other "
                "topics on purpose without them, re-freeze it: "
                f"{refreeze_hint(plan.pipeline_id, plan.batch_key)}",
            )
        refuse_recreated(
            plan.boundary["topics"],
            states,
            plan.key.label,
            "To load on without the old topic's frozen records on purpose (the new topic then "
            f"loads from its first record), re-freeze it: {refreeze_hint(plan.pipeline_id, plan.batch_key)}",
        )
        for topic, entry in plan.boundary["topics"].items():
            for partition, (_start, until) in entry["partitions"].items():
                end = states[topic].ends.get(int(partition))
                if end is None or end < until:
                    raise InputChangedError(
                        plan.key.label,
                        f"Kafka partition {topic}-{partition} ends at offset {end} now, before the "
                        f"frozen offset {until} of this batch (records were truncated: an unclean "
                        "leader election, or the topic was re-created); nothing was committed. "
                        f"Re-freeze it on purpose: {refreeze_hint(plan.pipeline_id, plan.batch_key)}",
                    )

    def verify(self, plan: Plan, ctx: ReadContext) -> None:
        """After the read, before the commit: the topics Spark read by name are the ones the
        batch froze (same ids, not truncated below the frozen ends). Records deleted after
        the read do not matter: they were read (Spark fails a read that misses any)."""
        self._check_topics(plan, self._states(ctx))

    def spark_options(self, plan: Plan, ctx: ReadContext) -> dict[str, str]:
        """Spark ``kafka`` reader options for exactly the frozen ranges (credentials in)."""
        return spark_reader_options(self.bootstrap_servers, self.client_config, plan, ctx.credentials)
