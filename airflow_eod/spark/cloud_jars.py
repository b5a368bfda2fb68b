"""The Hadoop object-store connectors that match the Hadoop pyspark ships, fetched once.

Spark writes to ``s3a://``, ``abfss://`` and ``gs://`` through Hadoop file-system connectors
that pyspark's wheel does not carry: ``hadoop-aws`` with the AWS SDK bundle, ``hadoop-azure``,
and Google's GCS connector. A connector must be built for the Hadoop on the classpath (a
``hadoop-aws`` of another release fails with ``NoSuchMethodError`` at the first write), so
the set is chosen by the Hadoop release of pyspark's ``hadoop-client-api`` jar, and fetched
with Maven into the same cache as the Delta jars (:mod:`airflow_eod.spark.jars`): a second
run fetches nothing.

The AWS SDK v2 ``bundle`` that ``hadoop-aws`` 3.4+ declares is one shaded jar of every AWS
service client, about 690 MB for 2.35.4: it is what Hadoop tests and ships against, so it is
taken as it is rather than trimmed to the S3 clients.

Run ``python -m airflow_eod.spark.cloud_jars s3`` to print the comma-separated paths of the
S3 connector (fetching what the cache lacks), ``--coordinates`` for the Maven coordinates to
put on a cluster.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys

from airflow_eod.spark.jars import DEFAULT_CACHE, Jar, JarFetchError, cached, fetch

HADOOP = "org.apache.hadoop"
AWS_V2 = "software.amazon.awssdk"
# Per Hadoop release (the one pyspark ships: Spark 3.5 -> 3.3.4, 4.0 -> 3.4.1, 4.1 -> 3.4.2,
# 4.2 -> 3.5.0), the versions its own hadoop-project pom pins: the AWS SDK (v1 bundle before
# Hadoop 3.4, v2 bundle since), the S3 analytics accelerator hadoop-aws 3.4.2+ declares at
# compile scope, and WildFly OpenSSL, which hadoop-azure loads for TLS.
_S3: dict[str, list[Jar]] = {
    "3.3.4": [Jar("com.amazonaws", "aws-java-sdk-bundle", "1.12.262")],
    "3.4.1": [Jar(AWS_V2, "bundle", "2.24.6")],
    "3.4.2": [
        Jar(AWS_V2, "bundle", "2.29.52"),
        Jar("software.amazon.s3.analyticsaccelerator", "analyticsaccelerator-s3", "1.2.1"),
    ],
    "3.5.0": [
        Jar(AWS_V2, "bundle", "2.35.4"),
        Jar("software.amazon.s3.analyticsaccelerator", "analyticsaccelerator-s3", "1.3.1"),
    ],
}
_WILDFLY = {"3.3.4": "1.0.7.Final", "3.4.1": "1.1.3.Final", "3.4.2": "2.1.4.Final", "3.5.0": "2.2.5.Final"}
# Before Hadoop 3.5, Google's shaded GCS connector (one jar with its Google clients relocated;
# Spark's own hadoop-cloud module pins hadoop3-2.2.28 for Hadoop 3.4.2). Hadoop 3.5 ships its
# own, hadoop-gcp, and its core-default.xml maps gs:// to it with fs.gs.* defaults ("64m")
# that Google's 2.2 connector cannot parse ("For input string: 64m" at the first gs:// use).
GCS_CONNECTOR = Jar("com.google.cloud.bigdataoss", "gcs-connector", "hadoop3-2.2.28", "shaded")
_HADOOP_GCP_SINCE = (3, 5)
STORES = ("s3", "azure", "gcs")


def hadoop_version(jars_dir: str | None = None) -> str:
    """The Hadoop release of pyspark's ``hadoop-client-api`` jar.

    :param jars_dir: pyspark's ``jars`` folder (default: that of the installed pyspark).
    :raises JarFetchError: when the folder holds no such jar.
    """
    if jars_dir is None:
        import pyspark

        jars_dir = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    for path in sorted(glob.glob(os.path.join(jars_dir, "hadoop-client-api-*.jar"))):
        found = re.fullmatch(r"hadoop-client-api-(\d+\.\d+\.\d+)\.jar", os.path.basename(path))
        if found:
            return found.group(1)
    raise JarFetchError(f"no hadoop-client-api-<version>.jar in {jars_dir}: which Hadoop is this Spark's?")


def object_store_jars(store: str, hadoop: str | None = None) -> list[Jar]:
    """The jars Spark needs to write to ``store`` (``s3``, ``azure`` or ``gcs``) on ``hadoop``.

    :param store: the store.
    :param hadoop: a Hadoop release (default: the one pyspark ships).
    :raises JarFetchError: for an unknown store, or a Hadoop release no known set serves.
    """
    if store not in STORES:
        raise JarFetchError(f"unknown store {store!r} (known: {', '.join(STORES)})")
    hadoop = hadoop or hadoop_version()
    if store == "gcs":
        if tuple(int(n) for n in hadoop.split(".")[:2]) >= _HADOOP_GCP_SINCE:
            return [Jar(HADOOP, "hadoop-gcp", hadoop)]
        return [GCS_CONNECTOR]
    if hadoop not in _S3:
        raise JarFetchError(
            f"no {store} connector set is known for Hadoop {hadoop} (known: {', '.join(sorted(_S3))}); "
            "pass the jars yourself (spark.jars)"
        )
    if store == "s3":
        return [Jar(HADOOP, "hadoop-aws", hadoop), *_S3[hadoop]]
    # ABFS needs neither azure-storage nor its Key Vault client: those serve the legacy wasb://.
    return [
        Jar(HADOOP, "hadoop-azure", hadoop),
        Jar("org.wildfly.openssl", "wildfly-openssl", _WILDFLY[hadoop]),
        Jar("org.hdrhistogram", "HdrHistogram", "2.1.12"),
    ]


# A table URI's scheme -> the store whose connector writes it.
SCHEME_STORES = {"s3": "s3", "az": "azure", "abfs": "azure", "abfss": "azure", "gs": "gcs"}


def connector_class_path(scheme: str, cache: str = DEFAULT_CACHE) -> str | None:
    """The driver class path entries (``:``-joined) of the connector for tables on ``scheme``
    when the cache holds its jars (``python -m airflow_eod.spark.cloud_jars s3`` fetched
    them), else ``None``; fetches nothing (the bundle is hundreds of MB: not a task's job)."""
    store = SCHEME_STORES.get(scheme)
    if store is None:
        return None
    try:
        paths = cached(object_store_jars(store), cache)
    except JarFetchError:
        return None
    return ":".join(paths) if paths else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_eod.spark.cloud_jars",
        description="Print the object-store connector jars for pyspark's Hadoop (or a given one), "
        "fetching what the cache lacks with Maven.",
    )
    parser.add_argument("stores", nargs="+", choices=STORES, help="the stores whose connectors to print")
    parser.add_argument("--hadoop-version", help="a Hadoop release, e.g. 3.4.1 (default: pyspark's)")
    parser.add_argument("--cache", default=DEFAULT_CACHE, help=f"the cache folder (default {DEFAULT_CACHE})")
    parser.add_argument(
        "--coordinates", action="store_true", help="print the Maven coordinates only; fetch nothing"
    )
    args = parser.parse_args(argv)
    try:
        jars = [jar for store in args.stores for jar in object_store_jars(store, args.hadoop_version)]
        if args.coordinates:
            print(",".join(j.coordinate for j in jars))
        else:
            print(",".join(fetch(jars, args.cache)))
    except (JarFetchError, OSError, subprocess.SubprocessError) as exc:
        print(f"airflow-eod: the object-store connector jars are not available: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
