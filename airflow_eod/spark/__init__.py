"""The Spark side: code that runs in the Spark driver, locally or under spark-submit."""
