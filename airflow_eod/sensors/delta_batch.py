"""DeltaBatchSensor: wait until a Delta table says it holds a batch.

It waits by poking (``poke`` or ``reschedule`` mode) or, when deferrable, by handing the
wait to :class:`~airflow_eod.triggers.delta_batch.DeltaBatchTrigger` in the triggerer.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue

try:
    from airflow.sdk.configuration import conf
except ImportError:  # Airflow 3.1
    from airflow.configuration import conf  # type: ignore[no-redef]

from airflow_eod.airflow_exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
    AirflowTaskTimeout,
    ending_at_once,
)
from airflow_eod.core.ask import ask
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.errors import ConfigurationError, EodError
from airflow_eod.core.planner import require_interval
from airflow_eod.core.result import COMMITTED, result_from_status
from airflow_eod.core.table_ref import TableRef
from airflow_eod.hooks.object_store import table_ref
from airflow_eod.run_context import data_interval_for, pipeline_id_for
from airflow_eod.triggers.delta_batch import ERROR, SUCCESS, TIMEOUT, DeltaBatchTrigger

# What a batch_key template renders to when the load it reads had nothing to load: a
# ``no_new_data`` result carries ``batch_key: None``, which Jinja renders as "None".
_NOTHING_LOADED = ("", "None")
# Every key airflow-eod derives starts with one of these (BatchKey.for_interval, for_offsets).
_KEY_PREFIXES = ("i-", "o-")


class DeltaBatchSensor(BaseSensorOperator):
    """Wait until ``table_uri`` has committed a batch at a generation (or newer).

    It reads the Delta log with ``deltalake``: no JVM, no Spark session, milliseconds per
    poke. Works in ``poke`` and ``reschedule`` mode, and deferred (``deferrable=True``): then
    it asks once in the worker and, if the batch is not there yet, frees the worker slot and
    waits in the triggerer (which must be running). When done it pushes the load result
    (batch key, generation, table version, rows, files) to XCom.

    ``timeout`` (seconds) ends the wait with ``AirflowSensorTimeout`` and no retry, or a skip
    with ``soft_fail=True``, in every mode; a deferred sensor counts it from the moment it
    defers.

    :param table_uri: the Delta table (templated).
    :param pipeline_id: the pipeline whose batch to wait for (templated).
    :param batch_key: the batch key (templated), e.g. from the load task's XCom
        ``{{ ti.xcom_pull(task_ids='load')['batch_key'] }}``. When unset, the key of the
        DAG run's data interval is used (for ``boundary='interval'`` pipelines; a
        zero-length interval fails the task, see ``docs/intervals.md``).
        When set but it renders to ``None``, ``"None"`` or ``""``, the load it came from had
        nothing to load (outcome ``no_new_data``, whose ``batch_key`` is ``None``): there is
        no batch to confirm, so the sensor is **skipped** at once instead of waiting for a
        batch that can never exist (downstream tasks follow their trigger rules for a skipped
        upstream). A key of any other shape than the ones airflow-eod derives (``i-...`` for
        an interval, ``o-...`` for an offset batch) **fails** the task at once, without
        retries, naming the key.
    :param generation: the generation that counts (0: any committed load).
    :param storage_conn_id: (templated) for a table on an object store, the Airflow connection
        its credentials come from (see :class:`~airflow_eod.hooks.object_store.ObjectStoreHook`);
        the trigger is given the connection's id, never its secrets.
    :param deferrable: wait in the triggerer instead of a worker. ``None`` (the default) takes
        ``[operators] default_deferrable`` from the configuration, read when the sensor is
        built.
    """

    template_fields: Sequence[str] = ("table_uri", "pipeline_id", "batch_key", "storage_conn_id")

    def __init__(
        self,
        *,
        table_uri: str,
        pipeline_id: str,
        batch_key: str | None = None,
        generation: int = 0,
        deferrable: bool | None = None,
        storage_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.storage_conn_id = storage_conn_id
        self.pipeline_id = pipeline_id
        self.batch_key = batch_key
        self.generation = generation
        # Read when the sensor is built rather than when this module is imported (as a default
        # argument would be): a long-lived DAG processor then sees a changed setting.
        if deferrable is None:
            deferrable = conf.getboolean("operators", "default_deferrable", fallback=False)
        self.deferrable = deferrable
        # Whether a key was given at all: once rendered, a template of a no_new_data result
        # can be None itself (native rendering), which must not fall back to the interval.
        self._batch_key_given = batch_key is not None

    def _batch(self, context: Any) -> BatchKey:
        pipeline = pipeline_id_for(self, self.pipeline_id, context)
        if self._batch_key_given:
            key = "" if self.batch_key is None else str(self.batch_key).strip()
            if key in _NOTHING_LOADED:
                raise AirflowSkipException(
                    f"batch_key rendered to {self.batch_key!r}: the load it comes from had nothing "
                    f"to load (outcome no_new_data), so pipeline {pipeline} has no batch to confirm "
                    "in this run"
                )
            if not key.startswith(_KEY_PREFIXES):
                raise ConfigurationError(
                    f"batch_key {key!r} is not an airflow-eod batch key (those start with 'i-' for "
                    "an interval batch or 'o-' for an offset batch; `airflow-eod status TABLE` lists "
                    "them), so no such batch can ever be committed"
                )
            return BatchKey(pipeline, key)
        interval = data_interval_for(context)
        if interval is None:
            raise ConfigurationError(
                "DeltaBatchSensor needs batch_key, or a DAG run with a data interval to derive it from"
            )
        # A zero-length interval names a batch that no interval load commits.
        return BatchKey.for_interval(pipeline, *require_interval(interval))

    def _checked_batch(self, context: Any) -> BatchKey:
        try:
            return self._batch(context)
        except EodError as exc:
            if exc.retryable:
                raise
            # No retry and no further poke can fix a wrong key or a wrong set-up.
            raise ending_at_once(exc, f"{self.task_id}: ") from exc

    def _committed_result(self, batch: BatchKey) -> dict[str, Any] | None:
        """The load result when the table holds ``batch``, else ``None``."""
        try:
            status = ask(table_ref(self.table_uri, self.storage_conn_id), batch, self.generation)
        except EodError as exc:
            if exc.retryable:
                raise
            # Not a Delta table, a corrupt plan log...: no later poke or retry sees otherwise.
            raise ending_at_once(exc, f"{self.task_id}: batch {batch}: ") from exc
        if not status.committed:
            self.log.info("batch %s: not committed at generation %d yet", batch, self.generation)
            return None
        self.log.info(
            "batch %s: committed (generation %s, table version %s)",
            batch,
            status.committed_generation,
            status.table_version,
        )
        return result_from_status(TableRef.parse(self.table_uri), status, COMMITTED).to_dict()

    def poke(self, context: Any) -> PokeReturnValue:
        result = self._committed_result(self._checked_batch(context))
        return PokeReturnValue(is_done=result is not None, xcom_value=result)

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        batch: BatchKey | None = None
        try:
            batch = self._checked_batch(context)
            result = self._committed_result(batch)
        # The first ask runs here, in the worker, and is handled as BaseSensorOperator.execute
        # handles a poke, so that skip, fail, soft_fail, never_fail and silent_fail mean the
        # same thing whether the sensor defers or not.
        except AirflowSkipException:
            raise
        except (AirflowSensorTimeout, AirflowTaskTimeout, AirflowFailException) as exc:
            if self.soft_fail or self.never_fail:
                raise AirflowSkipException(f"Skipping: {exc}") from exc
            raise
        except Exception as exc:
            if self.never_fail:
                raise AirflowSkipException(f"Skipping due to never_fail: {exc}") from exc
            if not self.silent_fail or batch is None:
                raise
            # silent_fail: a failed poke counts as "not yet", so the trigger asks again.
            self.log.error("Sensor poke failed:\n%s", traceback.format_exc())
            result = None
        if result is not None:
            # Already there: no trip through the triggerer.
            return result
        self.log.info("batch %s: deferring to the triggerer (timeout %.0f s)", batch, self.timeout)
        self.defer(
            trigger=DeltaBatchTrigger(
                # The triggerer runs elsewhere, in another working directory.
                table_uri=TableRef.parse(self.table_uri).location,
                storage_conn_id=self.storage_conn_id,
                pipeline_id=batch.pipeline_id,
                batch_key=batch.key,
                generation=self.generation,
                poke_interval=self.poke_interval,
                timeout_at=time.time() + self.timeout,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout),
        )

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> dict[str, Any]:
        """Resume from the trigger: return the load result (it becomes the XCom return value),
        or raise. ``BaseSensorOperator.resume_execution`` turns a raise into a skip when
        ``soft_fail`` or ``never_fail`` is set."""
        event = event or {}
        status, batch = event.get("status"), event.get("batch", "?")
        if status == SUCCESS:
            self.log.info("batch %s: committed, said the trigger", batch)
            return dict(event["result"])
        if status == TIMEOUT:
            # Like a poking sensor's timeout: no retry, since a retry would wait the same way.
            raise AirflowSensorTimeout(f"{self.task_id}: {event.get('message')} ({self.timeout:.0f} s)")
        if status == ERROR:
            raise AirflowException(
                f"{self.task_id}: asking {self.table_uri} for batch {batch} failed: {event.get('message')}"
            )
        raise AirflowException(f"{self.task_id}: the trigger for batch {batch} sent no answer: {event!r}")
