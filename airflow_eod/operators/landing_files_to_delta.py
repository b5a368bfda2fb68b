"""LandingFilesToDeltaOperator: load a landing directory into a Delta table exactly once."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_eod.core.ask import ask
from airflow_eod.core.plan_log import PlanLog
from airflow_eod.core.result import NO_NEW_DATA, LoadResult, decide_after_failure
from airflow_eod.core.table_uri import normalise
from airflow_eod.operators.run_context import (
    data_interval_for,
    pipeline_id_for,
    run_token_for,
    try_number_for,
)
from airflow_eod.sources.landing_files import LandingFilesSource

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class LandingFilesToDeltaOperator(BaseOperator):
    """Load the files of a landing directory into a Delta table exactly once, with Spark.

    The batch is planned (frozen in the plan log beside the table) before anything is
    written; the table is asked whether it already holds the batch; only a "no" leads to a
    Spark write, and the files, the ``txn`` marker and the manifest land in one Delta
    commit. However the attempt ends, the table decides the outcome.

    :param landing_path: the landing directory (templated).
    :param table_uri: the target Delta table, a local or shared-filesystem path (templated).
    :param file_format: ``csv``, ``json`` or ``parquet``.
    :param schema: Spark DDL schema of the files, e.g. ``"id INT, name STRING"`` (templated).
    :param read_options: extra Spark reader options (templated).
    :param pattern: glob on file names.
    :param boundary: ``offsets`` (a batch is the files not loaded yet) or ``interval`` (a
        batch is the directory's files for the DAG run's data interval).
    :param max_files_per_batch: cap on files per offset batch.
    :param max_bytes_per_batch: cap on bytes per offset batch.
    :param pipeline_id: the dedup namespace; defaults to ``<dag_id>.<task_id>``. Renaming
        it starts a new namespace: batches are loaded again under the new name.
    :param partition_by: partition columns of a table this load creates.
    :param transform: ``"module:function"`` or a callable taking and returning a DataFrame.
    :param engine: ``delta-rs`` (default) or ``delta-spark`` (needs the Delta jars).
    :param spark_conf: extra settings for the local SparkSession.
    :param table_configuration: table properties for a table this load creates.
    """

    template_fields: Sequence[str] = (
        "landing_path",
        "table_uri",
        "schema",
        "read_options",
        "pipeline_id",
    )
    ui_color = "#00add4"

    def __init__(
        self,
        *,
        landing_path: str,
        table_uri: str,
        file_format: str = "csv",
        schema: str | None = None,
        read_options: dict[str, str] | None = None,
        pattern: str = "*",
        boundary: str = "offsets",
        max_files_per_batch: int | None = None,
        max_bytes_per_batch: int | None = None,
        pipeline_id: str | None = None,
        partition_by: Sequence[str] | None = None,
        transform: str | Callable[[DataFrame], DataFrame] | None = None,
        engine: str = "delta-rs",
        spark_conf: dict[str, str] | None = None,
        table_configuration: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.landing_path = landing_path
        self.table_uri = table_uri
        self.file_format = file_format
        self.schema = schema
        self.read_options = read_options or {}
        self.pattern = pattern
        self.boundary = boundary
        self.max_files_per_batch = max_files_per_batch
        self.max_bytes_per_batch = max_bytes_per_batch
        self.pipeline_id = pipeline_id
        self.partition_by = list(partition_by or [])
        self.transform = transform
        self.engine = engine
        self.spark_conf = spark_conf or {}
        self.table_configuration = table_configuration or {}

    def _source(self) -> LandingFilesSource:
        return LandingFilesSource(
            path=self.landing_path,
            file_format=self.file_format,
            schema=self.schema,
            read_options=dict(self.read_options),
            pattern=self.pattern,
            boundary=self.boundary,
            max_files_per_batch=self.max_files_per_batch,
            max_bytes_per_batch=self.max_bytes_per_batch,
        )

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow_eod.spark.load_job import LoadSpec, run_load
        from airflow_eod.spark.session import get_session

        pipeline = pipeline_id_for(self, self.pipeline_id)
        source = self._source()
        plan = source.plan(
            PlanLog(self.table_uri, pipeline),
            run_token=run_token_for(context),
            is_committed=lambda key: ask(self.table_uri, key).committed,
            interval=data_interval_for(context),
        )
        if plan is None:
            self.log.info("pipeline %s: no new files in %s; nothing to load", pipeline, self.landing_path)
            return LoadResult(
                pipeline, None, None, None, 0, 0, NO_NEW_DATA, normalise(self.table_uri)
            ).to_dict()
        self.log.info(
            "batch %s: planned %d input(s), fingerprint %s",
            plan.key,
            len(plan.inputs),
            plan.input_fingerprint[:12],
        )
        spec = LoadSpec(
            table_uri=self.table_uri,
            plan=asdict(plan),
            source=source.to_dict(),
            partition_by=self.partition_by,
            transform=self.transform if isinstance(self.transform, str) else None,
            engine=self.engine,
            run_id=context["ti"].run_id,
            try_number=try_number_for(context),
            table_configuration=dict(self.table_configuration),
        )
        transform = self.transform if callable(self.transform) else None
        try:
            result = run_load(get_session(conf=self.spark_conf), spec, transform)
        except Exception as exc:
            # The decide step: the table, not the exception, says whether the batch landed.
            decided = decide_after_failure(self.table_uri, plan.key, spec.generation, exc)
            if decided is None:
                raise
            result = decided
        self.log.info(
            "batch %s: %s (generation %s, table version %s, %d rows, %d files)",
            plan.key,
            result.outcome,
            result.generation,
            result.table_version,
            result.rows,
            result.files,
        )
        self.log.info("result %s", json.dumps(result.to_dict(), sort_keys=True))
        return result.to_dict()
