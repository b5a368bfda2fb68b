"""The Airflow exceptions the operators and the sensor raise, from where the running Airflow
keeps them: ``airflow.sdk.exceptions`` from Airflow 3.2 on, ``airflow.exceptions`` in 3.1."""

from __future__ import annotations

try:
    from airflow.sdk.exceptions import (
        AirflowException,
        AirflowFailException,
        AirflowSensorTimeout,
        AirflowSkipException,
        AirflowTaskTimeout,
        TaskDeferred,
    )
except ImportError:  # Airflow 3.1
    from airflow.exceptions import (  # type: ignore[no-redef]
        AirflowException,
        AirflowFailException,
        AirflowSensorTimeout,
        AirflowSkipException,
        AirflowTaskTimeout,
        TaskDeferred,
    )

__all__ = [
    "AirflowException",
    "AirflowFailException",
    "AirflowSensorTimeout",
    "AirflowSkipException",
    "AirflowTaskTimeout",
    "TaskDeferred",
]
