"""DeltaBatchTrigger: ask a Delta table from the triggerer until it holds a batch.

The deferrable :class:`~airflow_eod.sensors.delta_batch.DeltaBatchSensor` hands its wait to
this trigger, so no worker slot is held while a batch is outstanding. The ask is the same one
the sensor's ``poke`` makes (:func:`airflow_eod.core.ask.ask`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_eod.core.ask import ask
from airflow_eod.core.batch import BatchKey
from airflow_eod.core.result import COMMITTED, result_from_status
from airflow_eod.hooks.object_store import table_ref

# The ``status`` of the one event the trigger yields.
SUCCESS = "success"
ERROR = "error"
TIMEOUT = "timeout"


class DeltaBatchTrigger(BaseTrigger):
    """Ask ``table_uri`` every ``poke_interval`` seconds whether it holds a batch.

    It yields exactly one event, then ends:

    - ``{"status": "success", "batch": ..., "result": {...}}`` once the batch is committed at
      ``generation`` or newer; ``result`` is the load result dict (outcome ``committed``);
    - ``{"status": "error", "batch": ..., "message": ...}`` when an ask fails (a missing or
      foreign table, an unreadable log, a key that is not valid);
    - ``{"status": "timeout", "batch": ..., "message": ...}`` once ``timeout_at`` has passed
      with the batch still not committed.

    :param table_uri: the Delta table.
    :param storage_conn_id: for a table on an object store, the connection its credentials
        come from (read in the triggerer; the serialized trigger holds only its id).
    :param pipeline_id: the pipeline of the batch.
    :param batch_key: the batch key (already rendered and checked by the sensor).
    :param generation: the generation that counts (0: any committed load).
    :param poke_interval: seconds to sleep between two asks.
    :param timeout_at: a Unix time (seconds) after which the trigger gives up, or ``None``.
    """

    def __init__(
        self,
        *,
        table_uri: str,
        pipeline_id: str,
        batch_key: str,
        generation: int = 0,
        poke_interval: float = 60.0,
        timeout_at: float | None = None,
        storage_conn_id: str | None = None,
    ) -> None:
        super().__init__()
        self.table_uri = table_uri
        self.storage_conn_id = storage_conn_id
        self.pipeline_id = pipeline_id
        self.batch_key = batch_key
        self.generation = int(generation)
        self.poke_interval = float(poke_interval)
        self.timeout_at = None if timeout_at is None else float(timeout_at)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """The classpath and the keyword arguments that rebuild this trigger (JSON values only:
        the triggerer stores them in the metadata database)."""
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table_uri": self.table_uri,
                "storage_conn_id": self.storage_conn_id,
                "pipeline_id": self.pipeline_id,
                "batch_key": self.batch_key,
                "generation": self.generation,
                "poke_interval": self.poke_interval,
                "timeout_at": self.timeout_at,
            },
        )

    @property
    def _label(self) -> str:
        return f"{self.pipeline_id}/{self.batch_key}"

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Ask until the batch is committed, an ask fails, or ``timeout_at`` passes."""
        try:
            batch = BatchKey(self.pipeline_id, self.batch_key)
            # The serialized form holds the string and the connection's id: the secrets are read
            # here, in a thread (a connection lookup blocks).
            table = await asyncio.to_thread(table_ref, self.table_uri, self.storage_conn_id)
        except Exception as exc:
            yield self._error(exc)
            return
        while True:
            try:
                # The ask reads the Delta log with blocking file I/O: in a thread, so that it
                # never stalls the triggerer's event loop and the other triggers on it.
                status = await asyncio.to_thread(ask, table, batch, self.generation)
            except Exception as exc:
                yield self._error(exc)
                return
            if status.committed:
                result = result_from_status(table, status, COMMITTED)
                self.log.info("batch %s: committed (table version %s)", batch, result.table_version)
                yield TriggerEvent({"status": SUCCESS, "batch": self._label, "result": result.to_dict()})
                return
            wait = self.poke_interval
            if self.timeout_at is not None:
                # The scheduler times a deferred task out too (the defer's ``timeout``); this
                # own deadline makes the same timeout hold where no scheduler watches, such as
                # ``dag.test()``, and says which batch it was.
                left = self.timeout_at - time.time()
                if left <= 0:
                    yield TriggerEvent(
                        {
                            "status": TIMEOUT,
                            "batch": self._label,
                            "message": f"batch {self._label} was not committed at generation "
                            f"{self.generation} before the sensor's timeout",
                        }
                    )
                    return
                wait = min(wait, left)
            self.log.info(
                "batch %s: not committed at generation %d yet; asking again in %.0f s",
                batch,
                self.generation,
                wait,
            )
            await asyncio.sleep(wait)

    def _error(self, exc: Exception) -> TriggerEvent:
        return TriggerEvent(
            {"status": ERROR, "batch": self._label, "message": f"{type(exc).__name__}: {exc}"}
        )
