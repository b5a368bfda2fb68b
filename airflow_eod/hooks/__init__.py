"""Hooks: what the operators read from Airflow connections."""
