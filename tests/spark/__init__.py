"""Tests of the Spark side (airflow_eod/spark): loads run by Spark, the write path under
faults, the readers, the session, its log and the Delta Spark jar fetcher."""
