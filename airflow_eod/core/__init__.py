"""The exactly-once protocol core: batch identity, manifest, plan log, the ask, the commit.

Nothing in this package imports Airflow or Spark; it is plain Python plus ``deltalake``
so that it can be tested, and reasoned about, on its own.
"""
