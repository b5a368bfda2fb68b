"""Airflow triggers: they ask the table from the triggerer, through the protocol core."""
