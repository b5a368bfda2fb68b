"""Airflow operators: thin adapters over the protocol core and the Spark load job."""
