"""Spark's Kafka connector for the installed Spark, fetched once from Maven into the cache.

pyspark's wheel does not carry the ``kafka`` data source: it is ``spark-sql-kafka-0-10`` with
``spark-token-provider-kafka-0-10``, the ``kafka-clients`` release that Spark build pins, and
``commons-pool2`` (its consumer pool). Spark ships the rest (lz4, snappy, Scala). They are
fetched with Maven into the same cache as the Delta jars (:mod:`airflow_eod.spark.jars`), so
a second run fetches nothing, and a task puts the cached paths in ``spark.jars``; a cluster
takes the same coordinates (``--coordinates``) with ``--packages``.

Run ``python -m airflow_eod.spark.kafka_jars`` to print the comma-separated paths (fetching
what the cache lacks).
"""

from __future__ import annotations

import sys

from airflow_eod.spark.jars import DEFAULT_CACHE, Jar, JarFetchError, cached, jars_cli, spark_minor

SPARK = "org.apache.spark"
# Per Spark minor release: the kafka-clients and commons-pool2 releases its connector's pom
# declares (read from spark-sql-kafka-0-10_2.13's pom with `mvn dependency:copy-dependencies`).
_CLIENTS_FOR_SPARK: dict[str, tuple[str, str]] = {
    "4.2": ("3.9.2", "2.13.1"),
}


def kafka_connector_jars(spark_version: str | None = None) -> list[Jar]:
    """The jars of Spark's ``kafka`` source for Spark ``spark_version`` (default: installed).

    :raises JarFetchError: for a Spark release whose connector set is not known here.
    """
    from importlib import metadata

    version = spark_version or metadata.version("pyspark")
    minor = spark_minor(version)
    if minor not in _CLIENTS_FOR_SPARK:
        raise JarFetchError(
            f"the Kafka connector set is not known for Spark {minor} (known: "
            f"{', '.join(sorted(_CLIENTS_FOR_SPARK))}); pass the jars yourself (jars=, or "
            f"submit_kwargs={{'packages': 'org.apache.spark:spark-sql-kafka-0-10_2.13:{version}'}})"
        )
    clients, pool = _CLIENTS_FOR_SPARK[minor]
    return [
        Jar(SPARK, "spark-sql-kafka-0-10_2.13", version),
        Jar(SPARK, "spark-token-provider-kafka-0-10_2.13", version),
        Jar("org.apache.kafka", "kafka-clients", clients),
        Jar("org.apache.commons", "commons-pool2", pool),
    ]


def cached_kafka_jars(cache: str = DEFAULT_CACHE) -> str | None:
    """The comma-separated paths of the connector when the cache holds it, else ``None``;
    fetches nothing (a task does not run Maven: ``make jars-kafka`` or this module's CLI)."""
    try:
        paths = cached(kafka_connector_jars(), cache)
    except JarFetchError:
        return None
    return ",".join(paths) if paths else None


def main(argv: list[str] | None = None) -> int:
    return jars_cli(
        argv,
        prog="python -m airflow_eod.spark.kafka_jars",
        what="Spark's Kafka connector jars",
        jars_for=kafka_connector_jars,
    )


if __name__ == "__main__":
    sys.exit(main())
