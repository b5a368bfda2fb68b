"""What an operator takes from the Airflow context: pipeline id, run token, data interval.

Shared by every operator and sensor so that they all derive batch identity the same way.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow_eod.core.batch import validate_pipeline_id


def pipeline_id_for(task: Any, pipeline_id: str | None) -> str:
    """The explicit pipeline id, or ``<dag_id>.<task_id>``."""
    return validate_pipeline_id(pipeline_id or f"{task.dag_id}.{task.task_id}")


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
