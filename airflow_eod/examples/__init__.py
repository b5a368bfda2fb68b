"""Runnable examples: ``python -m airflow_eod.examples.demo`` is what ``make demo`` runs."""
