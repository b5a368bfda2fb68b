"""Provider metadata that Airflow's ProvidersManager reads through the entry point."""

from __future__ import annotations

from typing import Any

from airflow_eod import __version__


def get_provider_info() -> dict[str, Any]:
    """The provider info dict; it validates against Airflow's ``provider_info.schema.json``."""
    return {
        "package-name": "airflow-eod",
        "name": "Exactly-once Delta loads (airflow-eod)",
        "description": "Loads data with Apache Spark into Delta Lake tables exactly once.\n",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Delta Lake exactly-once loads",
                "external-doc-url": "https://delta.io/",
                "tags": ["apache"],
            }
        ],
        "operators": [
            {
                "integration-name": "Delta Lake exactly-once loads",
                "python-modules": [
                    "airflow_eod.operators.delta_load",
                    "airflow_eod.operators.landing_files_to_delta",
                    "airflow_eod.operators.jdbc_to_delta",
                    "airflow_eod.operators.kafka_to_delta",
                ],
            }
        ],
        "hooks": [
            {
                "integration-name": "Delta Lake exactly-once loads",
                "python-modules": [
                    "airflow_eod.hooks.jdbc_source",
                    "airflow_eod.hooks.kafka_source",
                    "airflow_eod.hooks.object_store",
                ],
            }
        ],
        "extra-links": ["airflow_eod.links.delta_table.DeltaTableLink"],
        "sensors": [
            {
                "integration-name": "Delta Lake exactly-once loads",
                "python-modules": ["airflow_eod.sensors.delta_batch"],
            }
        ],
        "triggers": [
            {
                "integration-name": "Delta Lake exactly-once loads",
                "python-modules": ["airflow_eod.triggers.delta_batch"],
            }
        ],
    }
