"""The local runner: the load job of each batch in this process, on a local SparkSession."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from airflow_eod.core.load_flow import FrozenBatch, Run
from airflow_eod.core.result import LoadResult
from airflow_eod.core.source import Credentials, Source
from airflow_eod.core.table_ref import TableRef
from airflow_eod.spark.load_job import Transform, run_load
from airflow_eod.spark.load_spec import LoadSettings, LoadSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def local_run(
    session: Callable[[], SparkSession],
    ref: TableRef,
    source: Source,
    *,
    settings: LoadSettings | None = None,
    transform_fn: Transform | None = None,
    credentials: Credentials | None = None,
) -> Run:
    """The ``run`` step of :func:`~airflow_eod.core.load_flow.load_batch` in this process.

    :param session: returns the SparkSession; called only when a batch is loaded.
    :param ref: the target table.
    :param source: the source.
    :param settings: the load's settings (the defaults when ``None``).
    :param transform_fn: a callable transform, which overrides ``settings.transform``.
    :param credentials: the source's credentials.
    """

    def run(frozen: FrozenBatch) -> LoadResult:
        spec = LoadSpec.for_batch(ref, frozen, source, settings)
        # run_load decides from the table however the attempt ends, so this is the result.
        return run_load(session(), spec, transform_fn, credentials)

    return run
