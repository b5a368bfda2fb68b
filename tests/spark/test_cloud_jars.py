"""The object-store connector jars per Hadoop release (airflow_eod/spark/cloud_jars.py); Maven is
the stand-in script of test_jars.py (the real fetch is `make jars-s3`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_eod.spark.cloud_jars import hadoop_version, main, object_store_jars
from airflow_eod.spark.jars import JarFetchError, cached, fetch
from tests.spark.test_jars import _fake_mvn


def test_pysparks_hadoop_is_read_from_its_client_jar(tmp_path: Path) -> None:
    (tmp_path / "hadoop-client-api-3.4.1.jar").write_bytes(b"")
    (tmp_path / "hadoop-client-runtime-3.4.1.jar").write_bytes(b"")
    assert hadoop_version(str(tmp_path)) == "3.4.1"
    with pytest.raises(JarFetchError, match="no hadoop-client-api"):
        hadoop_version(str(tmp_path / "none"))


@pytest.mark.parametrize(
    ("hadoop", "expected"),
    [
        (
            "3.5.0",
            [
                "org.apache.hadoop:hadoop-aws:3.5.0",
                "software.amazon.awssdk:bundle:2.35.4",
                "software.amazon.s3.analyticsaccelerator:analyticsaccelerator-s3:1.3.1",
            ],
        ),
        ("3.4.1", ["org.apache.hadoop:hadoop-aws:3.4.1", "software.amazon.awssdk:bundle:2.24.6"]),
        ("3.3.4", ["org.apache.hadoop:hadoop-aws:3.3.4", "com.amazonaws:aws-java-sdk-bundle:1.12.262"]),
    ],
)
def test_the_s3_connector_is_the_one_hadoop_declares(hadoop: str, expected: list[str]) -> None:
    assert [j.coordinate for j in object_store_jars("s3", hadoop)] == expected


def test_azure_gcs_and_unknowns() -> None:
    assert [j.artifact for j in object_store_jars("azure", "3.5.0")] == [
        "hadoop-azure",
        "wildfly-openssl",
        "HdrHistogram",
    ]
    assert [j.coordinate for j in object_store_jars("gcs", "3.5.0")] == ["org.apache.hadoop:hadoop-gcp:3.5.0"]
    (gcs,) = object_store_jars("gcs", "3.4.2")
    assert gcs.coordinate == "com.google.cloud.bigdataoss:gcs-connector:hadoop3-2.2.28:jar:shaded"
    assert gcs.file_name == "gcs-connector-hadoop3-2.2.28-shaded.jar"
    with pytest.raises(JarFetchError, match=r"Hadoop 3\.2\.0"):
        object_store_jars("s3", "3.2.0")
    with pytest.raises(JarFetchError, match="unknown store"):
        object_store_jars("hdfs", "3.5.0")


def test_a_second_fetch_asks_maven_nothing(tmp_path: Path) -> None:
    mvn, log = _fake_mvn(tmp_path)
    cache = str(tmp_path / "cache")
    jars = object_store_jars("s3", "3.5.0") + object_store_jars("gcs", "3.4.1")
    first = fetch(jars, cache, mvn=mvn)
    assert fetch(jars, cache, mvn=mvn) == first == cached(jars, cache)
    assert log.read_text().split() == [j.coordinate for j in jars]
    # The shaded GCS connector's file carries its classifier, as Maven names it.
    assert os.path.basename(first[-1]) == "gcs-connector-hadoop3-2.2.28-shaded.jar"


def test_coordinates_print_without_fetching(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["s3", "--hadoop-version", "3.4.1", "--coordinates"]) == 0
    assert (
        capsys.readouterr().out.strip()
        == "org.apache.hadoop:hadoop-aws:3.4.1,software.amazon.awssdk:bundle:2.24.6"
    )
    assert main(["s3", "--hadoop-version", "2.7.0", "--coordinates"]) == 2
