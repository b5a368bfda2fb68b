"""KafkaToDeltaOperator: load Kafka topics into a Delta table exactly once, in batches of
frozen offset ranges."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow_eod.core.ddl_schema import ddl_columns
from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.merge_rules import check_merge_columns
from airflow_eod.core.options import choice
from airflow_eod.core.source import Credentials
from airflow_eod.core.table_ref import TableRef
from airflow_eod.hooks.kafka_source import KafkaSourceHook
from airflow_eod.operators.delta_load import BaseDeltaLoadOperator
from airflow_eod.sources.kafka_offsets import ISOLATION_LEVELS
from airflow_eod.sources.kafka_topics import DATA_LOSS_POLICIES, VALUE_FORMATS, KafkaSource

# The columns a string or binary load writes (a JSON load: key, the value's fields, and these).
_FIXED_COLUMNS = ["key", "value", "kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp"]


class KafkaToDeltaOperator(BaseDeltaLoadOperator):
    """Load the records of Kafka topics into a Delta table exactly once, with Spark's batch
    ``kafka`` reader.

    A batch is the frozen offset range of every partition of ``topics``: from where the
    pipeline's last committed batch ended (the partitions' first records for the first batch,
    offset 0 for partitions added since) to each partition's end when planned. Every retry
    reads exactly those records; nothing is committed to Kafka's consumer groups (the table's
    markers and the plan log are the record). ``catch_up=True`` loads batch after batch
    until the topics are drained, like Structured Streaming's ``Trigger.AvailableNow``.
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
        the batch; ``skip``: load past them, recording the skipped offsets in the plan.
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

    @cached_property
    def hook(self) -> KafkaSourceHook:
        """The hook that owns the connection (fetched once per task)."""
        return KafkaSourceHook(kafka_config_id=self.kafka_config_id)

    def build_source(self) -> KafkaSource:
        return KafkaSource(
            bootstrap_servers=self.hook.bootstrap_servers,
            topics=self.topics,
            client_config=self.hook.client_config,
            max_records_per_batch=self.max_records_per_batch,
            value_format=self.value_format,
            schema=self.schema,
            isolation_level=self.isolation_level,
            data_loss=self.data_loss,
        )

    def credentials(self) -> Credentials | None:
        return self.hook.credentials()

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
