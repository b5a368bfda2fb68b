"""What an operator takes from the Airflow context: pipeline id, run token, data interval.

Shared by every operator and sensor so that they all derive batch identity the same way.
It reads the context as a plain mapping and imports nothing from Airflow, so it sits beside
the operators and sensors packages rather than in either: the sensor does not import from
the operators package.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow_eod.core.batch import validate_pipeline_id


def map_index_for(context: Any) -> int:
    """The task instance's map index: ``-1`` for a task that is not mapped."""
    index = getattr(context.get("ti"), "map_index", -1)
    return -1 if index is None else int(index)


def pipeline_id_for(task: Any, pipeline_id: str | None, context: Any) -> str:
    """The explicit pipeline id, or the default one derived from the task.

    The default is ``<dag_id>.<task_id>``, and ``<dag_id>.<task_id>.m<map_index>`` for an
    instance of a mapped task (``.expand()``): all instances of a mapped task share the
    task id, and one shared pipeline would give them one interval batch key, so only the
    first instance's input would ever be loaded.

    :param task: the operator or sensor.
    :param pipeline_id: the explicit (rendered) pipeline id, if any.
    :param context: the task's Airflow context; it says which mapped instance this is.
    """
    if pipeline_id:
        return validate_pipeline_id(pipeline_id)
    default = f"{task.dag_id}.{task.task_id}"
    index = map_index_for(context)
    if index >= 0:
        default = f"{default}.m{index}"
    return validate_pipeline_id(default)


def run_token_for(context: Any) -> str:
    """A stable identity of the DAG run, the same for every try and every clear of it.

    It only says which run claimed which offset batch; batch keys never contain it.
    """
    ti = context["ti"]
    return f"{ti.dag_id}/{ti.task_id}/{ti.run_id}/{getattr(ti, 'map_index', -1)}"


def data_interval_for(context: Any) -> tuple[datetime, datetime] | None:
    """The run's data interval, or ``None`` (Airflow 3 manual runs may have none)."""
    start = context.get("data_interval_start")
    end = context.get("data_interval_end")
    if start is None or end is None:
        return None
    return start, end


def try_number_for(context: Any) -> int | None:
    return getattr(context.get("ti"), "try_number", None)
