"""What the test DAGs import from Airflow that moved between the releases we support: the
SDK has CronDataIntervalTimetable from Airflow 3.2 on; 3.1 keeps it in airflow.timetables."""

from __future__ import annotations

try:
    from airflow.sdk import CronDataIntervalTimetable
except ImportError:  # Airflow 3.1
    from airflow.timetables.interval import CronDataIntervalTimetable  # type: ignore[no-redef]

__all__ = ["CronDataIntervalTimetable"]
