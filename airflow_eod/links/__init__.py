"""Operator extra links: buttons on a task in the Airflow UI."""
