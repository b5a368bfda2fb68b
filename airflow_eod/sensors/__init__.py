"""Airflow sensors: they ask the table, through the protocol core, without a JVM."""
