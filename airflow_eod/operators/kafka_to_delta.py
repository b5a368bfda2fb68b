"""KafkaToDeltaOperator: load Kafka topics into a Delta table exactly once, in batches of
frozen offset ranges."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow_eod.core.ddl_schema import ddl_columns
from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.merge_rules import check_merge_columns
from airflow_eod.core.options import choice
from airflow_eod.core.source import Credentials, ReadContext
from airflow_eod.core.table_ref import TableRef
from airflow_eod.hooks.kafka_source import KafkaSourceHook
from airflow_eod.operators.delta_load import BaseDeltaLoadOperator
from airflow_eod.run_conf import conf_of, source_overrides
from airflow_eod.run_context import pipeline_id_for
from airflow_eod.sources.kafka_offsets import ISOLATION_LEVELS
from airflow_eod.sources.kafka_topics import (
    DATA_LOSS_POLICIES,
    METADATA_COLUMNS,
    TOPIC_CHANGE_POLICIES,
    VALUE_FORMATS,
    KafkaSource,
)

# The columns a string or binary load writes (a JSON load: key, the value's fields, and these).
_FIXED_COLUMNS = ["key", "value", *METADATA_COLUMNS]


class KafkaToDeltaOperator(BaseDeltaLoadOperator):
    """Load the records of Kafka topics into a Delta table exactly once, with Spark's batch
    ``kafka`` reader.

    A batch is the frozen offset range of every partition of ``topics``: from where the
    pipeline's last committed batch ended (the partitions' first records for the first batch,
    offset 0 for partitions added since) to each partition's end when planned. Every retry
    reads exactly those records; nothing is committed to Kafka's consumer groups (the table's
    markers and the plan log are the record). ``catch_up=True`` loads batch after batch up
    to the end offsets the topics had when the run began, like Structured Streaming's
    ``Trigger.AvailableNow`` (records produced meanwhile wait for the next run).
    Arguments shared by every load operator are described on
    :class:`~airflow_eod.operators.delta_load.BaseDeltaLoadOperator`; see
    docs/sources/kafka.md.

    :param kafka_config_id: an Airflow ``kafka`` connection (the Apache Kafka provider's):
        ``extra`` holds ``bootstrap.servers`` and the client's security settings; login and
        password are the SASL credentials (:class:`~airflow_eod.hooks.kafka_source.KafkaSourceHook`).
    :param topics: the topics to load (a name or a list).
    :param max_records_per_batch: cap on the offsets one batch spans, over all partitions.
    :param value_format: ``string`` (default: ``key`` and ``value`` as text), ``binary``, or
        ``json`` (the value's fields as columns, parsed with ``schema``).
    :param schema: the value's schema for ``json``, a Spark DDL string such as
        ``"order_id BIGINT, amount DECIMAL(10,2)"``.
    :param isolation_level: ``read_committed`` (default: aborted transactions never land, open
        ones are never frozen) or ``read_uncommitted``.
    :param data_loss: ``fail`` (default): records Kafka deleted before a batch read them refuse
        the batch; ``skip``: load past them, recording the skipped offsets in the plan. One run
        can accept the loss without a DAG change: ``dag_run.conf`` ``{"eod_pipeline": "<id>",
        "eod_data_loss": "skip"}``.
    :param topic_changes: ``fail`` (default): a deleted topic, or one deleted and created again
        under its name (a new topic id), refuses planning; ``accept``: plan without a deleted
        topic and load a re-created one from its first record. Best accepted for one run
        (``dag_run.conf`` ``{"eod_pipeline": "<id>", "eod_topic_changes": "accept"}``), after
        checking that the topic was not mirrored with its history from another cluster.
    :param monitoring_group_id: a consumer group to commit each loaded batch's end offsets to,
        after the table holds it, so that lag monitors see the pipeline's progress (best
        effort, never read back: :mod:`airflow_eod.sources.kafka_group`).
    """

    template_fields: Sequence[str] = (*BaseDeltaLoadOperator.template_fields,)

    def __init__(
        self,
        *,
        kafka_config_id: str = KafkaSourceHook.default_conn_name,
        topics: str | Sequence[str],
        max_records_per_batch: int | None = None,
        value_format: str = "string",
        schema: str | None = None,
        isolation_level: str = "read_committed",
        data_loss: str = "fail",
        topic_changes: str = "fail",
        monitoring_group_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        choice("value_format", value_format, VALUE_FORMATS)
        choice("isolation_level", isolation_level, ISOLATION_LEVELS)
        choice("data_loss", data_loss, DATA_LOSS_POLICIES)
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        if not self.topics:
            raise ConfigurationError("topics must name at least one Kafka topic")
        if value_format == "json" and not schema:
            raise ConfigurationError("value_format='json' needs a schema (a Spark DDL string)")
        # The source's own checks (topic names, schema only with json, the cap), when the DAG
        # is parsed rather than when the task runs; the brokers come from the connection later.
        KafkaSource(
            bootstrap_servers="checked-at-run-time:9092",
            topics=self.topics,
            max_records_per_batch=max_records_per_batch,
            value_format=value_format,
            schema=schema,
            isolation_level=isolation_level,
            data_loss=data_loss,
            topic_changes=topic_changes,
        )
        if self.transform is None:
            columns = _FIXED_COLUMNS
            if value_format == "json":
                columns = ["key", *ddl_columns("schema", str(schema)), *_FIXED_COLUMNS[2:]]
            check_merge_columns(self._merge_rules, columns, "the Kafka source's columns")
        self.kafka_config_id = kafka_config_id
        self.max_records_per_batch = max_records_per_batch
        self.value_format = value_format
        self.schema = schema
        self.isolation_level = isolation_level
        self.data_loss = data_loss
        self.topic_changes = topic_changes
        self._run_overrides: dict[str, str] = {}
        self.monitoring_group_id = monitoring_group_id

    @cached_property
    def hook(self) -> KafkaSourceHook:
        """The hook that owns the connection (fetched once per task)."""
        return KafkaSourceHook(kafka_config_id=self.kafka_config_id)

    def build_source(self) -> KafkaSource:
        """The source, with this run's ``dag_run.conf`` overrides, and (a catch-up run) the
        end offsets when the run began: the run stops there, as ``availableNow`` does."""
        overrides = self._run_overrides
        source = KafkaSource(
            data_loss=overrides.get("data_loss", self.data_loss),
            topic_changes=overrides.get("topic_changes", self.topic_changes),
            bootstrap_servers=self.hook.bootstrap_servers,
            topics=self.topics,
            client_config=self.hook.client_config,
            max_records_per_batch=self.max_records_per_batch,
            value_format=self.value_format,
            schema=self.schema,
            isolation_level=self.isolation_level,
        )
        if self.catch_up:
            ends = source.end_offsets_now(ReadContext(credentials=self.credentials()))
            source = dataclasses.replace(source, end_offsets=ends)
        return source

    def credentials(self) -> Credentials | None:
        return self.hook.credentials()

    def _load(self, context: Any) -> dict[str, Any]:
        # The ways out that need no DAG change, for one run of one pipeline.
        self._run_overrides = source_overrides(
            conf_of(context),
            pipeline_id_for(self, self.pipeline_id, context),
            {"eod_data_loss": DATA_LOSS_POLICIES, "eod_topic_changes": TOPIC_CHANGE_POLICIES},
        )
        returned = super()._load(context)
        result = self._result
        if self.monitoring_group_id and result is not None and result.batch_key is not None:
            self._commit_to_group(result.pipeline_id, result.batch_key, result.generation or 0)
        return returned

    def _commit_to_group(self, pipeline_id: str, batch_key: str, generation: int) -> None:
        from airflow_eod.core.planlog.store import PlanLog
        from airflow_eod.hooks.object_store import table_ref
        from airflow_eod.sources.kafka_config import planning_config
        from airflow_eod.sources.kafka_group import commit_group_offsets

        plan = PlanLog(table_ref(self.table_uri, self.storage_conn_id), pipeline_id).get_plan(
            batch_key, generation
        )
        if plan is None:
            return
        config = planning_config(self.hook.bootstrap_servers, self.hook.client_config, self.credentials())
        assert self.monitoring_group_id is not None
        commit_group_offsets(config, self.monitoring_group_id, plan.boundary, plan.key.label)

    def lineage_inputs(self) -> list[tuple[str, str]]:
        """OpenLineage's naming for Kafka: ``kafka://<first broker>`` and the topic."""
        first = self.hook.bootstrap_servers.split(",")[0].strip()
        return [(f"kafka://{first}", topic) for topic in self.topics]

    def _connector_jars(self) -> str:
        from airflow_eod.spark.kafka_jars import cached_kafka_jars

        jars = cached_kafka_jars()
        if jars is None:
            raise ConfigurationError(
                "Spark's Kafka connector is not in this worker's jar cache: fetch it once with "
                "`python -m airflow_eod.spark.kafka_jars` (Maven), or pass its jars with jars= "
                "(`python -m airflow_eod.spark.kafka_jars --coordinates` prints them)"
            )
        return jars

    def _local_conf(self, table: TableRef) -> dict[str, str]:
        conf = super()._local_conf(table)
        if not (self.jars and "spark-sql-kafka" in self.jars):
            conf["spark.jars"] = ",".join(filter(None, [conf.get("spark.jars"), self._connector_jars()]))
        return conf

    def _submit_conf(self, table: TableRef) -> dict[str, str]:
        conf = super()._submit_conf(table)
        if not (self.jars and "spark-sql-kafka" in self.jars) and "packages" not in self.submit_kwargs:
            conf["spark.jars"] = ",".join(filter(None, [conf.get("spark.jars"), self._connector_jars()]))
        return conf
