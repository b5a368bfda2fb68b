"""The two runners of a frozen batch, side by side, of the same shape: each returns the
``run`` step of :func:`airflow_eod.core.load_flow.load_batch` (a
:data:`~airflow_eod.core.load_flow.Run`: a frozen batch in, the table's answer out).

- :func:`airflow_eod.runners.local.local_run`: the load job in this process, on a local
  SparkSession. No Airflow.
- :func:`airflow_eod.runners.submit.submit_run`: the load job in a driver that spark-submit
  starts through the Spark provider's ``SparkSubmitHook``
  (:mod:`airflow_eod.hooks.spark_submit`, the one module that knows the hook's insides).
  The operators own it: it imports Airflow.

Nothing is imported here, so that the local runner never pulls Airflow in.
"""
