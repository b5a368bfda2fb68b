"""Test infrastructure, not tests: helpers that build landing files and tables, and the
servers some tiers start (PostgreSQL, a Spark standalone cluster, Airflow services) with the
reaper that stops them when a run dies."""
