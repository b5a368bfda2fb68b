"""DeltaTableLink: the load's target table, as a button on the task in the Airflow UI."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperatorLink

from airflow_eod.core.table_ref import TableRef


class DeltaTableLink(BaseOperatorLink):
    """A link to the table's location (``file://`` and its path), the table the task loaded.

    Airflow evaluates it in the worker once the task has run, with the operator's rendered
    fields, so a templated ``table_uri`` links to the table of that run.
    """

    name = "Delta table"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return TableRef.parse(operator.table_uri).asset_uri
