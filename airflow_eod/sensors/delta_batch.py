"""DeltaBatchSensor: wait until a Delta table says it holds a batch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from airflow_eod.core.ask import ask
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.planner import require_interval
from airflow_eod.core.result import COMMITTED, result_from_status
from airflow_eod.operators.run_context import data_interval_for, pipeline_id_for

# What a batch_key template renders to when the load it reads had nothing to load: a
# ``no_new_data`` result carries ``batch_key: None``, which Jinja renders as "None".
_NOTHING_LOADED = ("", "None")
# Every key airflow-eod derives starts with one of these (BatchKey.for_interval, for_offsets).
_KEY_PREFIXES = ("i-", "o-")


class DeltaBatchSensor(BaseSensorOperator):
    """Wait until ``table_uri`` has committed a batch at a generation (or newer).

    It reads the Delta log with ``deltalake``: no JVM, no Spark session, milliseconds per
    poke. Works in ``poke`` and ``reschedule`` mode. When done it pushes the load result
    (batch key, generation, table version, rows, files) to XCom.

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
    """

    template_fields: Sequence[str] = ("table_uri", "pipeline_id", "batch_key")

    def __init__(
        self,
        *,
        table_uri: str,
        pipeline_id: str,
        batch_key: str | None = None,
        generation: int = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table_uri = table_uri
        self.pipeline_id = pipeline_id
        self.batch_key = batch_key
        self.generation = generation
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

    def poke(self, context: Any) -> PokeReturnValue:
        try:
            batch = self._batch(context)
        except ConfigurationError as exc:
            # No retry and no further poke can fix a wrong key or a wrong set-up.
            raise AirflowFailException(f"{self.task_id}: {exc}") from exc
        status = ask(self.table_uri, batch, self.generation)
        if not status.committed:
            self.log.info("batch %s: not committed at generation %d yet", batch, self.generation)
            return PokeReturnValue(is_done=False)
        self.log.info(
            "batch %s: committed (generation %s, table version %s)",
            batch,
            status.committed_generation,
            status.table_version,
        )
        result = result_from_status(self.table_uri, status, COMMITTED)
        return PokeReturnValue(is_done=True, xcom_value=result.to_dict())
