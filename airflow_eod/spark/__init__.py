"""The Spark side: code that runs in the Spark driver, locally or under spark-submit.

PySpark 4.2 warns on every task that it "does not yet fully support pandas >= 3.0.0"
(``pyspark.testing.utils`` checks pandas when a DataFrame is first used). The load path uses
no pandas API at all: Spark reads and writes the files, pyarrow reads the footers. So that
warning is silenced here, before anything of this package imports pyspark, and only it: a
transform that uses pandas UDFs should run where pandas < 3 is installed, as PySpark advises
(docs/reference.md, "pandas").
"""

import warnings

warnings.filterwarnings(
    "ignore", message=r"PySpark does not yet fully support pandas", category=FutureWarning
)
