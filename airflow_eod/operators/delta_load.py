"""The shared flow of every load operator; each operator only says what its source is.

Plan (freeze the batch), ask (does the table have it?), restate if asked to, run the Spark
load, and decide from the table however the attempt ended.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pendulum
from airflow.sdk import BaseOperator

from airflow_eod.core.ask import ask
from airflow_eod.core.errors import ConfigurationError, InputChangedError
from airflow_eod.core.plan_log import Plan, PlanLog
from airflow_eod.core.planner import own_files
from airflow_eod.core.restatement import plan_restatement, refreeze_restatement
from airflow_eod.core.result import NO_NEW_DATA, LoadResult
from airflow_eod.core.table_layout import normalise
from airflow_eod.operators.run_context import (
    data_interval_for,
    pipeline_id_for,
    run_token_for,
    try_number_for,
)
from airflow_eod.sources.base import Credentials, ReadContext, Source

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no", "", "none"):
        return False
    raise ConfigurationError(f"restate must be true or false, not {value!r}")


class DeltaLoadOperator(BaseOperator):
    """Base of the load operators: everything but the source.

    :param table_uri: the target Delta table (templated).
    :param pipeline_id: the dedup namespace (templated); defaults to ``<dag_id>.<task_id>``.
        Renaming it starts a new namespace: batches are loaded again under the new name.
        An instance of a mapped task (``.partial(...).expand(...)``) defaults to
        ``<dag_id>.<task_id>.m<map_index>``: the map index is part of the id, so reordering,
        inserting into or removing from the expand list re-maps inputs to pipelines. For
        mapped loads give each input an explicit id that names it, e.g.
        ``.expand_kwargs([{"landing_path": "/landing/eu", "pipeline_id": "orders.eu"}, ...])``,
        or a templated one such as ``"orders.{{ task.landing_path | replace('/', '_') }}"``.
    :param partition_by: partition columns of a table this load creates.
    :param transform: ``"module:function"`` or a callable taking and returning a DataFrame.
    :param engine: ``delta-rs`` (default) or ``delta-spark`` (needs the Delta jars).
    :param spark_conf: extra settings for the local SparkSession.
    :param table_configuration: table properties for a table this load creates.
    :param restate: (templated) re-load a batch on purpose as a new generation that replaces
        the old one in one commit, e.g. ``"{{ params.restate }}"``. Without
        ``restate_batch_key`` it is this run's own batch (its interval, or the offset batch
        this run loaded).
    :param restate_batch_key: (templated) the batch to restate, e.g.
        ``"{{ params.restate_batch_key }}"``; needed to restate an offset batch from a new run.
    :param schema_drift: ``fail`` (default) or ``add_columns`` (new nullable source columns
        are added to the table in the batch's commit; type changes always fail).
    :param quarantine_table_uri: (templated) a Delta table for malformed records; unset,
        malformed records fail the batch.
    :param interval_start: (templated) explicit batch interval start, for manual runs
        without a logical date (ISO 8601 with a time zone).
    :param interval_end: (templated) explicit batch interval end.
    """

    template_fields: Sequence[str] = (
        "table_uri",
        "pipeline_id",
        "restate",
        "restate_batch_key",
        "quarantine_table_uri",
        "interval_start",
        "interval_end",
    )
    ui_color = "#00add4"

    def __init__(
        self,
        *,
        table_uri: str,
        pipeline_id: str | None = None,
        partition_by: Sequence[str] | None = None,
        transform: str | Callable[[DataFrame], DataFrame] | None = None,
        engine: str = "delta-rs",
        spark_conf: dict[str, str] | None = None,
        table_configuration: dict[str, str] | None = None,
        restate: bool | str = False,
        restate_batch_key: str | None = None,
        schema_drift: str = "fail",
        quarantine_table_uri: str | None = None,
        interval_start: str | datetime | None = None,
        interval_end: str | datetime | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.pipeline_id = pipeline_id
        self.partition_by = list(partition_by or [])
        self.transform = transform
        self.engine = engine
        self.spark_conf = spark_conf or {}
        self.table_configuration = table_configuration or {}
        self.restate = restate
        self.restate_batch_key = restate_batch_key
        self.schema_drift = schema_drift
        self.quarantine_table_uri = quarantine_table_uri
        self.interval_start = interval_start
        self.interval_end = interval_end

    # -- what subclasses provide ---------------------------------------------------
    def build_source(self) -> Source:
        raise NotImplementedError

    def credentials(self) -> Credentials | None:
        return None

    # -- the flow ------------------------------------------------------------------
    def _interval(self, context: Any) -> tuple[datetime, datetime] | None:
        if self.interval_start or self.interval_end:
            if not (self.interval_start and self.interval_end):
                raise ConfigurationError("pass both interval_start and interval_end, or neither")
            bounds = [
                v if isinstance(v, datetime) else pendulum.parse(str(v))
                for v in (self.interval_start, self.interval_end)
            ]
            return bounds[0], bounds[1]  # type: ignore[return-value]
        return data_interval_for(context)

    def _restated(
        self,
        plan_log: PlanLog,
        plan: Plan,
        source: Source,
        ctx: ReadContext,
        run_token: str,
        previous: int | None,
    ) -> Plan:
        """The plan of this run's restatement (a committed batch) or re-freeze (a batch the
        table never committed), a new generation frozen from the source as it is now."""
        committed = previous is not None

        def replan(p: Plan, g: int) -> Plan:
            return source.replan(p, g, ctx, committed=committed)

        restated = own_files(
            plan_log,
            plan_restatement(
                plan_log, plan, run_token=run_token, committed_generation=previous, replan=replan
            ),
        )
        if not ask(self.table_uri, restated.key, restated.generation).committed:
            try:
                source.verify(restated, ctx)
            except InputChangedError as exc:
                # An earlier try of this run froze the restatement, failed, and the source was
                # fixed since: the run's purpose is the source as it is now, so re-freeze it.
                self.log.warning("batch %s: %s", restated.key, exc.cause)
                restated = own_files(
                    plan_log, refreeze_restatement(plan_log, restated, run_token=run_token, replan=replan)
                )
        self.log.info(
            "batch %s: %s generation %s as generation %d",
            restated.key,
            "restating" if committed else "re-freezing (never committed)",
            previous if committed else plan.generation,
            restated.generation,
        )
        return restated

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow_eod.spark.load_job import LoadSpec, run_load
        from airflow_eod.spark.session import get_session

        pipeline = pipeline_id_for(self, self.pipeline_id, context)
        source = self.build_source()
        plan_log = PlanLog(self.table_uri, pipeline)
        run_token = run_token_for(context)
        ctx = ReadContext(
            spark_factory=lambda: get_session(conf=self.spark_conf), credentials=self.credentials()
        )
        restate = _as_bool(self.restate)
        named = (self.restate_batch_key or "").strip() if restate else ""
        if named:
            plan = plan_log.get_plan(named)
            if plan is None:
                raise ConfigurationError(
                    f"restate_batch_key {named!r}: pipeline {pipeline} has no such batch in its plan "
                    "log; `airflow-eod status TABLE` lists the batch keys"
                )
            plan_log.check_source(plan, source.identity())
        else:
            plan = source.plan(
                plan_log,
                ctx,
                run_token=run_token,
                is_committed=lambda key: ask(self.table_uri, key).committed,
                interval=self._interval(context),
            )
        if plan is None:
            self.log.info("pipeline %s: the source holds nothing new; nothing to load", pipeline)
            return LoadResult(
                pipeline, None, None, None, 0, 0, NO_NEW_DATA, normalise(self.table_uri)
            ).to_dict()
        previous: int | None = None
        if restate:
            previous = ask(self.table_uri, plan.key).committed_generation
            plan = self._restated(plan_log, plan, source, ctx, run_token, previous)
        self.log.info(
            "batch %s: generation %d, %d input(s), fingerprint %s",
            plan.key,
            plan.generation,
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
            restate=restate,
            previous_generation=previous,
            schema_drift=self.schema_drift,
            quarantine_table_uri=self.quarantine_table_uri,
        )
        transform = self.transform if callable(self.transform) else None
        # run_load decides from the table however the attempt ends, so this is the result.
        result = run_load(ctx.spark, spec, transform, ctx.credentials)
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
