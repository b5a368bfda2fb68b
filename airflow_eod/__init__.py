"""airflow-eod: exactly-once batch loads from Apache Airflow, through Apache Spark, into Delta Lake."""

from __future__ import annotations

__version__ = "0.1.0"
