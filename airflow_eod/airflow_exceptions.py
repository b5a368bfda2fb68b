"""The Airflow exceptions the operators and the sensor raise, from where the running Airflow
keeps them (``airflow.sdk.exceptions`` from Airflow 3.2 on, ``airflow.exceptions`` in 3.1),
and the one way an error no retry can fix ends a task."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow_eod.core.errors import EodError

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
    "ending_at_once",
]


def ending_at_once(exc: EodError, where: str = "") -> AirflowFailException:
    """The exception that ends the task now for ``exc``, an error another try would meet again
    (``exc.retryable`` is false), so that it does not spend the task's retries."""
    return AirflowFailException(
        f"{where}{exc} [{type(exc).__name__}: no retry can fix this, so the task ends without "
        "retrying; docs/reference.md, 'Errors that end a task at once']"
    )
