"""Tests of the protocol core (airflow_eod/core): plan log, Delta log, commit engine, ask,
audit and the console script; most need no JVM (tables are staged with pyarrow)."""
