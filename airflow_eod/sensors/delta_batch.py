"""DeltaBatchSensor: wait until a Delta table says it holds a batch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue

from airflow_eod.core.ask import ask
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.errors import ConfigurationError
from airflow_eod.core.result import COMMITTED, result_from_status
from airflow_eod.operators.run_context import data_interval_for, pipeline_id_for


class DeltaBatchSensor(BaseSensorOperator):
    """Wait until ``table_uri`` has committed a batch at a generation (or newer).

    It reads the Delta log with ``deltalake``: no JVM, no Spark session, milliseconds per
    poke. Works in ``poke`` and ``reschedule`` mode. When done it pushes the load result
    (batch key, generation, table version, rows, files) to XCom.

    :param table_uri: the Delta table (templated).
    :param pipeline_id: the pipeline whose batch to wait for (templated).
    :param batch_key: the batch key (templated), e.g. from the load task's XCom
        ``{{ ti.xcom_pull(task_ids='load')['batch_key'] }}``. When unset, the key of the
        DAG run's data interval is used (for ``boundary='interval'`` pipelines).
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

    def _batch(self, context: Any) -> BatchKey:
        pipeline = pipeline_id_for(self, self.pipeline_id)
        if self.batch_key:
            return BatchKey(pipeline, self.batch_key)
        interval = data_interval_for(context)
        if interval is None:
            raise ConfigurationError(
                "DeltaBatchSensor needs batch_key, or a DAG run with a data interval to derive it from"
            )
        return BatchKey.for_interval(pipeline, *interval)

    def poke(self, context: Any) -> PokeReturnValue:
        batch = self._batch(context)
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
