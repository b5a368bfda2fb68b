"""Tests of the sources (airflow_eod/sources): landing files and JDBC, their planning, edges
and hostile inputs."""
