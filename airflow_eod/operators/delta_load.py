"""The shared surface of every load operator; each operator only says what its source is.

The flow itself (plan, ask, restate, decide) is :func:`airflow_eod.core.load_flow.load_batch`.
This module adds what Airflow brings: the run's identity, and where the batch's Spark work
runs: an in-process local SparkSession, or a driver submitted to a cluster through the
Spark provider's ``SparkSubmitHook`` (the two runners of :mod:`airflow_eod.runners`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pendulum
from airflow.sdk import Asset, BaseOperator

from airflow_eod.airflow_exceptions import ending_at_once
from airflow_eod.core import spec_files
from airflow_eod.core.catch_up import CatchUpResult, load_batches
from airflow_eod.core.errors import ConfigurationError, EodError
from airflow_eod.core.load_flow import FrozenBatch, LoadRequest, load_batch
from airflow_eod.core.merge_rules import merge_rules, refuse_templated
from airflow_eod.core.options import (
    ENGINES,
    EXECUTION_MODES,
    SCHEMA_POLICIES,
    Engine,
    Execution,
    SchemaDrift,
    WriteMode,
    check_catch_up,
    check_engine_options,
    check_object_store_load,
    check_table_uri,
    choice,
    is_template,
)
from airflow_eod.core.result import LoadResult
from airflow_eod.core.settle import settle_committed
from airflow_eod.core.source import Credentials, ReadContext, Source
from airflow_eod.core.table_ref import TableRef
from airflow_eod.hooks.object_store import table_ref
from airflow_eod.hooks.spark_submit import check_submit_kwargs
from airflow_eod.links.delta_table import DeltaTableLink
from airflow_eod.operators.lineage import OpenLineageMixin
from airflow_eod.run_conf import as_bool, conf_of, restate_request
from airflow_eod.run_context import (
    data_interval_for,
    pipeline_id_for,
    run_token_for,
    try_number_for,
)
from airflow_eod.spark.load_spec import LoadSettings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from airflow_eod.runners.submit import SubmitRun

SPECS_DIR = spec_files.SPECS_DIR


class BaseDeltaLoadOperator(OpenLineageMixin, BaseOperator):
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
    :param spark_conf: extra Spark settings: of the local SparkSession, or ``--conf`` of
        spark-submit in submit mode (e.g. ``spark.pyspark.python``, executor memory).
    :param execution: where the batch's Spark work runs: ``local`` (default: a SparkSession
        in the task's process, bound to 127.0.0.1) or ``submit`` (spark-submit of this
        package's driver through ``SparkSubmitHook`` and ``spark_conn_id``). Planning and the
        ask run in the task either way, so a batch the table holds costs no Spark at all.
    :param spark_conn_id: the Spark connection of submit mode (master, ``deploy-mode``,
        ``spark-binary``, queue, namespace: as for Airflow's ``SparkSubmitOperator``).
    :param jars: comma-separated jars the load needs, such as a JDBC driver (both modes).
    :param submit_kwargs: more ``SparkSubmitHook`` arguments in submit mode, such as
        ``executor_memory``, ``num_executors`` or ``archives``.
    :param table_configuration: table properties for a table this load creates.
    :param restate: (templated) re-load a batch on purpose as a new generation that replaces
        the old one in one commit, e.g. ``"{{ params.restate }}"``. Without
        ``restate_batch_key`` it is this run's own batch (its interval, or the offset batch
        this run loaded).
    :param restate_batch_key: (templated) the batch to restate, e.g.
        ``"{{ params.restate_batch_key }}"``; needed to restate an offset batch from a new run.
        Whatever the DAG passes, a run triggered with ``dag_run.conf``
        ``{"eod_pipeline": "<pipeline id>", "eod_restate": true, "eod_restate_batch_key":
        "<key>"}`` restates (or re-freezes) that batch of the named pipeline: the way out that
        needs no DAG change (see :mod:`airflow_eod.run_conf`).
    :param catch_up: load offset batch after offset batch in this one task until the source
        holds nothing new (like ``Trigger.AvailableNow``), each batch its own frozen, fenced
        commit; the result is the last batch's, with ``batches`` listing them. Offset
        boundaries only. A restating run loads just the batch it restates.
    :param max_batches_per_run: with ``catch_up``, the most batches one run loads (default:
        until the source is drained); the next run goes on from there.
    :param schema_drift: ``fail`` (default) or ``add_columns`` (new nullable source columns
        are added to the table in the batch's commit; type changes always fail).
    :param quarantine_table_uri: (templated) a Delta table for malformed records; unset,
        malformed records fail the batch.
    :param interval_start: (templated) explicit batch interval start, for manual runs
        without a logical date (ISO 8601 with a time zone).
    :param interval_end: (templated) explicit batch interval end.
    :param write_mode: ``append`` (default: every batch adds its rows) or ``merge`` (an
        upsert: each batch row replaces the table's row of its key when it is newer by
        ``order_by``; see docs/merge-loads.md).
    :param merge_keys: the business key of a merge load (one column or several).
    :param order_by: a merge load's ordering column (``updated_at``, a CDC sequence
        number): a row replaces the table's row of its key only when its value is greater,
        so replays and backfills in any order never regress a row.
    :param delete_when: a merge load's delete marker: a boolean column or a Spark SQL
        expression such as ``"op = 'D'"``; a row for which it is true deletes its key.
    :param keep_tombstones: keep a deleting row in the table as a tombstone (default), so
        an older insert of the key loaded later does not bring it back; readers filter them
        with ``NOT (<delete_when>)``. ``False`` needs a ``delete_when``.

    The merge settings are not templated, on purpose: they define the table, the same for
    every run, and settings that do not fit together are an import error of the DAG.
    :param storage_conn_id: (templated) for a table on an object store (``s3://``, ``az://``,
        ``abfss://``, ``gs://``), the Airflow connection its credentials come from (an
        ``aws``, ``wasb``/``adls`` or ``google_cloud_platform`` connection, see
        :class:`~airflow_eod.hooks.object_store.ObjectStoreHook`); unset: the store's default
        credential chain.
    """

    template_fields: Sequence[str] = (
        "table_uri",
        "storage_conn_id",
        "pipeline_id",
        "restate",
        "restate_batch_key",
        "quarantine_table_uri",
        "interval_start",
        "interval_end",
    )
    ui_color = "#00add4"
    operator_extra_links = (DeltaTableLink(),)

    def __init__(
        self,
        *,
        table_uri: str,
        pipeline_id: str | None = None,
        partition_by: Sequence[str] | None = None,
        transform: str | Callable[[DataFrame], DataFrame] | None = None,
        engine: Engine = "delta-rs",
        spark_conf: dict[str, str] | None = None,
        table_configuration: dict[str, str] | None = None,
        restate: bool | str = False,
        restate_batch_key: str | None = None,
        schema_drift: SchemaDrift = "fail",
        quarantine_table_uri: str | None = None,
        interval_start: str | datetime | None = None,
        interval_end: str | datetime | None = None,
        execution: Execution = "local",
        spark_conn_id: str = "spark_default",
        jars: str | None = None,
        submit_kwargs: dict[str, Any] | None = None,
        catch_up: bool = False,
        max_batches_per_run: int | None = None,
        storage_conn_id: str | None = None,
        write_mode: WriteMode = "append",
        merge_keys: Sequence[str] | str | None = None,
        order_by: str | None = None,
        delete_when: str | None = None,
        keep_tombstones: bool = True,
        **kwargs: Any,
    ) -> None:
        # What can be checked without running is checked here, when the DAG is parsed: a
        # typo is an import error in the UI, not three failed tries.
        choice("execution", execution, EXECUTION_MODES)
        choice("engine", engine, ENGINES)
        check_engine_options(
            engine,
            restate=restate,
            restate_batch_key=restate_batch_key,
            quarantine_table_uri=quarantine_table_uri,
        )
        choice("schema_drift", schema_drift, SCHEMA_POLICIES)
        refuse_templated(write_mode, merge_keys, order_by, delete_when, keep_tombstones)
        # Refused at parse time; kept for the subclasses' checks against their declared columns.
        self._merge_rules = merge_rules(write_mode, merge_keys, order_by, delete_when, keep_tombstones)
        check_table_uri("table_uri", table_uri)
        check_table_uri("quarantine_table_uri", quarantine_table_uri)
        if "outlets" not in kwargs and not is_template(table_uri):
            # The table is the task's outlet: a DAG scheduled on it runs after each load, and
            # the asset event's extra says which batch arrived (see execute). A templated
            # table has no URI yet when the DAG is parsed; declare the outlet yourself.
            try:
                kwargs["outlets"] = [Asset(uri=TableRef.parse(table_uri).asset_uri)]
            except ValueError:  # Airflow refuses URIs of more than 1500 characters
                kwargs["outlets"] = []
        super().__init__(**kwargs)
        if execution == "submit" and callable(transform):
            raise ConfigurationError(
                "execution='submit' cannot ship a callable transform to a driver on a cluster: "
                "pass it as 'package.module:function', importable where the driver runs"
            )
        check_submit_kwargs(submit_kwargs or {}, spark_conf or {})
        check_catch_up(catch_up, max_batches_per_run)
        self.catch_up = catch_up
        self.max_batches_per_run = max_batches_per_run
        self.execution = execution
        self.spark_conn_id = spark_conn_id
        self.jars = jars
        self.submit_kwargs = dict(submit_kwargs or {})
        self._submit_run: SubmitRun | None = None
        self._result: LoadResult | None = None
        self.table_uri = table_uri
        self.storage_conn_id = storage_conn_id
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
        self.write_mode = write_mode
        self.merge_keys = [merge_keys] if isinstance(merge_keys, str) else list(merge_keys or [])
        self.order_by = order_by
        self.delete_when = delete_when
        self.keep_tombstones = keep_tombstones

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

    def _store_schemes(self, table: TableRef) -> list[str]:
        """The object-store schemes Spark reaches in this load: the table's (a landing
        operator adds its landing prefix's)."""
        return [] if table.is_local else [table.scheme]

    def _with_connectors(
        self, conf: dict[str, str], table: TableRef, keys: tuple[str, ...]
    ) -> dict[str, str]:
        """``conf`` with the connector of each store the load reaches appended to the class
        path settings ``keys`` (when the cache holds its jars)."""
        from airflow_eod.spark.cloud_jars import SCHEME_STORES, connector_class_path

        # One connector per store, however many of its schemes the load reaches (s3 and s3a).
        stores: dict[str | None, str] = {}
        for scheme in self._store_schemes(table):
            stores.setdefault(SCHEME_STORES.get(scheme), scheme)
        connectors = [connector_class_path(scheme) for scheme in stores.values()]
        if any(connectors):
            # On the class path, not in spark.jars: Spark would copy the AWS SDK bundle
            # (686 MB) into its temporary folder at every start.
            for key in keys:
                conf[key] = ":".join(filter(None, [conf.get(key), *connectors]))
        return conf

    def _local_conf(self, table: TableRef) -> dict[str, str]:
        from airflow_eod.spark.session import engine_conf

        # Progress bars are for terminals: in a task log they are noise on every stage.
        conf = {"spark.ui.showConsoleProgress": "false", **engine_conf(self.engine), **self.spark_conf}
        if self.jars:
            conf["spark.jars"] = ",".join(filter(None, [conf.get("spark.jars"), self.jars]))
        return self._with_connectors(conf, table, ("spark.driver.extraClassPath",))

    def _submit_conf(self, table: TableRef) -> dict[str, str]:
        """``spark_conf`` with the store's connector on the driver's and the executors' class
        path: the paths of this worker's cache, right for a cluster whose nodes share its
        disk (or hold the jars at the same paths). On another cluster the jars must be on the
        nodes, or passed with ``jars``/``submit_kwargs={"packages": ...}`` (docs/deployment.md)."""
        keys = ("spark.driver.extraClassPath", "spark.executor.extraClassPath")
        return self._with_connectors(dict(self.spark_conf), table, keys)

    def _settings(self, context: Any) -> LoadSettings:
        """The :class:`LoadSpec` fields this operator sets, besides the batch."""
        return LoadSettings(
            partition_by=self.partition_by,
            transform=self.transform if isinstance(self.transform, str) else None,
            engine=self.engine,
            run_id=context["ti"].run_id,
            try_number=try_number_for(context),
            table_configuration=self.table_configuration,
            schema_drift=self.schema_drift,
            quarantine_table_uri=self.quarantine_table_uri,
            write_mode=self.write_mode,
            merge_keys=self.merge_keys,
            order_by=self.order_by,
            delete_when=self.delete_when,
            keep_tombstones=self.keep_tombstones,
        )

    def execute(self, context: Any) -> dict[str, Any]:
        try:
            return self._load(context)
        except EodError as exc:
            if exc.retryable:
                raise
            raise ending_at_once(exc) from exc

    def _load(self, context: Any) -> dict[str, Any]:
        source = self.build_source()
        pipeline_id = pipeline_id_for(self, self.pipeline_id, context)
        # dag_run.conf may ask this pipeline to restate: the way out needing no DAG change.
        restate, restate_batch_key = restate_request(
            conf_of(context), pipeline_id, as_bool("restate", self.restate), self.restate_batch_key
        )
        # A restatement asked by dag_run.conf is refused before it freezes a new generation.
        check_engine_options(self.engine, restate=restate)
        # The rendered table_uri, parsed once: every layer below takes the reference (with
        # the connection's storage options, for a table on an object store).
        table = table_ref(self.table_uri, self.storage_conn_id)
        check_object_store_load(
            table, engine=self.engine, execution=self.execution, quarantine=self.quarantine_table_uri
        )
        uri = self.quarantine_table_uri
        quarantine = None if uri is None else table.neighbour(uri, "quarantine_table_uri")
        request = LoadRequest(
            table=table,
            pipeline_id=pipeline_id,
            run_token=run_token_for(context),
            interval=self._interval(context),
            restate=restate,
            restate_batch_key=restate_batch_key,
            try_number=try_number_for(context),
        )

        def spark_factory() -> Any:
            from airflow_eod.spark.jvm_log import LOGGER_NAME
            from airflow_eod.spark.session import get_session

            # The JVM's log lines reach the task log at their own levels, not as errors.
            return get_session(conf=self._local_conf(table), jvm_log=logging.getLogger(LOGGER_NAME))

        # Planning runs in the task in both modes; a SparkSession is made only if it needs
        # one (a JDBC head query), never for a retry of a batch already planned.
        ctx = ReadContext(spark_factory=spark_factory, credentials=self.credentials())
        settings = self._settings(context)
        run: Callable[[FrozenBatch], LoadResult]
        if self.execution == "submit":
            from airflow_eod.runners.submit import SubmitTarget, submit_run

            target = SubmitTarget(
                conn_id=self.spark_conn_id,
                spark_conf=self._submit_conf(table),
                jars=self.jars,
                submit_kwargs=self.submit_kwargs,
            )
            run = self._submit_run = submit_run(
                target, table, source, settings=settings, credentials=ctx.credentials, log=self.log
            )
        else:
            from airflow_eod.runners.local import local_run

            run = local_run(
                lambda: ctx.spark,
                table,
                source,
                settings=settings,
                transform_fn=self.transform if callable(self.transform) else None,
                credentials=ctx.credentials,
            )

        def load_one(req: LoadRequest) -> LoadResult:
            return load_batch(
                req,
                source,
                ctx,
                run=run,
                settle=lambda status: settle_committed(table, status, quarantine),
            )

        caught_up = self._catch_up(request, load_one)
        result = load_one(request) if caught_up is None else caught_up.last
        self.log.info(
            "batch %s/%s: %s (generation %s, table version %s, %d rows, %d files)",
            result.pipeline_id,
            result.batch_key,
            result.outcome,
            result.generation,
            result.table_version,
            result.rows,
            result.files,
        )
        returned = result.to_dict() if caught_up is None else caught_up.to_dict()
        self.log.info("result %s", json.dumps(returned, sort_keys=True))
        self._result = result
        self._attach_to_asset_event(context, returned)
        return returned

    def _catch_up(
        self, request: LoadRequest, load_one: Callable[[LoadRequest], LoadResult]
    ) -> CatchUpResult | None:
        """Batch after batch in this task (``catch_up``), or ``None`` to load the one batch."""
        if not self.catch_up:
            return None
        if request.restate:
            self.log.info("pipeline %s: a restating run loads only its batch", request.pipeline_id)
            return None
        return load_batches(request, load_one, max_batches=self.max_batches_per_run)

    def _attach_to_asset_event(self, context: Any, result: LoadResult | dict[str, Any]) -> None:
        """Put the batch that arrived on the table's asset event, for the DAGs scheduled on it.

        Airflow emits the event when the task succeeds, whatever the outcome: a run with no
        new data says so (``outcome: no_new_data``, ``batch_key: null``), and a retry or a
        cleared run of a committed batch sends its key again (``already_committed``), so a
        consumer that must act once per batch keys on ``batch_key`` and ``generation``. A
        catch-up run's event carries its whole result: the last batch, and ``batches``.
        """
        events = context.get("outlet_events")
        if events is None:  # run outside a task (a test's hand-made context): no event
            return
        uri = TableRef.parse(self.table_uri).asset_uri
        for outlet in self.outlets or []:
            if isinstance(outlet, Asset) and outlet.uri == uri:
                events[outlet].extra.update(result if isinstance(result, dict) else result.to_dict())

    def on_kill(self) -> None:
        """Stop the submitted Spark application, best effort. A task killed with SIGKILL
        never gets here; its retry asks the table, and fencing lets one attempt commit."""
        if self._submit_run is not None:
            self._submit_run.on_kill()
