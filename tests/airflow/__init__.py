"""Tests of the Airflow surface: operators, hooks, the sensor and its trigger, DAGs under
``dag.test()``, a real scheduler and loads submitted to a Spark cluster."""
