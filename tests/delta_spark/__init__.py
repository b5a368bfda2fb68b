"""The Delta Spark tier: the ``delta-spark`` engine and Delta Spark as the other writer on
the same tables (needs the jars named by EOD_DELTA_SPARK_JARS)."""
