"""A table URI and delta-rs storage options, turned into the URI Spark writes and the Hadoop
settings that take it there (airflow_eod/spark/object_store_conf.py); no JVM needed. The s3a
settings are exercised against a real server in tests/spark/test_s3a_write.py."""

from __future__ import annotations

import json
import logging

import pytest

from airflow_eod.spark.object_store_conf import Secret, apply_to_session, hadoop_store_conf

S3 = {
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
    "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "s3cr3t-value",
    "AWS_SESSION_TOKEN": "t0ken-value",
    "AWS_REGION": "eu-west-1",
    "AWS_ALLOW_HTTP": "true",
}


def test_s3_becomes_s3a_with_per_bucket_settings_and_secrets_apart() -> None:
    conf = hadoop_store_conf("s3://lake/tables/orders", S3)
    assert conf.uri == "s3a://lake/tables/orders"
    p = "fs.s3a.bucket.lake."
    assert dict(conf.settings) == {
        p + "fast.upload.buffer": "bytebuffer",
        p + "endpoint": "http://127.0.0.1:9000",
        p + "path.style.access": "true",
        p + "connection.ssl.enabled": "false",
        p + "endpoint.region": "eu-west-1",
        p + "access.key": "AKIDEXAMPLE",
        p + "aws.credentials.provider": "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider",
    }
    assert dict(conf.secrets) == {
        p + "secret.key": Secret("s3cr3t-value"),
        p + "session.token": Secret("t0ken-value"),
    }
    # Every key is per bucket: a second bucket's settings do not touch this one's.
    assert all(k.startswith(p) for k in conf.keys())


def test_no_secret_shows_in_repr_str_or_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    conf = hadoop_store_conf("s3://lake/t", S3)
    with caplog.at_level(logging.INFO):
        logging.getLogger("test").info("conf %s %r %s", conf, conf, conf.secrets)
    for text in (repr(conf), str(conf), caplog.text):
        assert "s3cr3t-value" not in text and "t0ken-value" not in text
        assert "***" in text
    assert dict(conf.revealed())["fs.s3a.bucket.lake.secret.key"] == "s3cr3t-value"


def test_https_endpoint_keeps_tls_and_options_are_taken_in_any_case() -> None:
    conf = hadoop_store_conf(
        "s3a://b/p",
        {"aws_endpoint_url": "https://minio.example", "aws_access_key_id": "k", "aws_secret_access_key": "s"},
    )
    assert conf.uri == "s3a://b/p"
    assert "fs.s3a.bucket.b.connection.ssl.enabled" not in conf.settings
    assert conf.settings["fs.s3a.bucket.b.aws.credentials.provider"].endswith(".SimpleAWSCredentialsProvider")


def test_s3_without_options_sets_no_credentials_and_a_lone_key_is_refused() -> None:
    conf = hadoop_store_conf("s3://b/p")
    assert dict(conf.settings) == {"fs.s3a.bucket.b.fast.upload.buffer": "bytebuffer"} and not conf.secrets
    with pytest.raises(ValueError, match="go together"):
        hadoop_store_conf("s3://b/p", {"AWS_ACCESS_KEY_ID": "k"})


@pytest.mark.parametrize(
    "uri",
    ["az://raw/t", "abfss://raw@acct.dfs.core.windows.net/t", "azure://raw/t"],
)
def test_azure_becomes_abfss_with_the_accounts_key(uri: str) -> None:
    conf = hadoop_store_conf(uri, {"AZURE_STORAGE_ACCOUNT_NAME": "acct", "AZURE_STORAGE_ACCOUNT_KEY": "a2V5"})
    assert conf.uri == "abfss://raw@acct.dfs.core.windows.net/t"
    fqdn = "acct.dfs.core.windows.net"
    assert conf.settings == {f"fs.azure.account.auth.type.{fqdn}": "SharedKey"}
    assert conf.secrets == {f"fs.azure.account.key.{fqdn}": Secret("a2V5")}


def test_azure_client_secret_and_sas() -> None:
    oauth = hadoop_store_conf(
        "az://c/t",
        {
            "AZURE_STORAGE_ACCOUNT_NAME": "a",
            "AZURE_CLIENT_ID": "id",
            "AZURE_CLIENT_SECRET": "cs",
            "AZURE_TENANT_ID": "tn",
        },
    )
    fqdn = "a.dfs.core.windows.net"
    assert oauth.settings[f"fs.azure.account.oauth2.client.endpoint.{fqdn}"].endswith("/tn/oauth2/token")
    assert oauth.secrets == {f"fs.azure.account.oauth2.client.secret.{fqdn}": Secret("cs")}
    sas = hadoop_store_conf(
        "az://c/t", {"AZURE_STORAGE_ACCOUNT_NAME": "a", "AZURE_STORAGE_SAS_KEY": "?sv=1&sig=x"}
    )
    assert sas.secrets == {f"fs.azure.sas.fixed.token.{fqdn}": Secret("sv=1&sig=x")}


def test_an_azure_emulator_is_reached_by_abfs_on_the_blob_endpoint_path_style() -> None:
    fqdn = "devstoreaccount1.dfs.core.windows.net"
    conf = hadoop_store_conf(
        "az://c/t",
        {
            "AZURE_STORAGE_ENDPOINT": "http://127.0.0.1:10042/devstoreaccount1",
            "AZURE_STORAGE_ACCOUNT_KEY": "k",
        },
    )
    assert conf.uri == f"abfs://c@{fqdn}/t"  # http, as the emulator serves it
    assert conf.settings[f"fs.azure.abfs.endpoint.{fqdn}"] == "127.0.0.1:10042"
    assert conf.settings[f"fs.azure.fns.account.service.type.{fqdn}"] == "BLOB"
    assert conf.settings[f"fs.azure.account.hns.enabled.{fqdn}"] == "false"
    assert conf.settings["fs.azure.always.use.https"] == "false"
    assert conf.secrets == {f"fs.azure.account.key.{fqdn}": Secret("k")}
    # USE_EMULATOR alone: Azurite's port and its published account and key, as object_store.
    used = hadoop_store_conf("az://c/t", {"azure_storage_use_emulator": "true"})
    assert used.settings[f"fs.azure.abfs.endpoint.{fqdn}"] == "127.0.0.1:10000"
    assert f"fs.azure.account.key.{fqdn}" in used.secrets


@pytest.mark.parametrize(
    "endpoint", ["https://127.0.0.1:10000/devstoreaccount1", "http://myproxy/a", "http://h:1/a/b"]
)
def test_an_azure_endpoint_abfs_cannot_take_is_refused_not_ignored(endpoint: str) -> None:
    with pytest.raises(ValueError, match="refused, not ignored"):
        hadoop_store_conf("az://c/t", {"AZURE_STORAGE_ACCOUNT_NAME": "a", "AZURE_STORAGE_ENDPOINT": endpoint})


def test_an_azure_endpoint_of_another_account_and_a_missing_account_are_refused() -> None:
    with pytest.raises(ValueError, match="names the account 'b'"):
        hadoop_store_conf("az://c/t", {"AZURE_STORAGE_ACCOUNT_NAME": "a", "AZURE_ENDPOINT": "http://h:1/b"})
    with pytest.raises(ValueError, match="container and an account"):
        hadoop_store_conf("az://c/t", {})


def test_gcs_keyfile_and_inline_key() -> None:
    conf = hadoop_store_conf("gs://bkt/t", {"GOOGLE_SERVICE_ACCOUNT_PATH": "/keys/sa.json"})
    assert conf.uri == "gs://bkt/t"
    assert conf.settings["fs.gs.auth.service.account.json.keyfile"] == "/keys/sa.json"
    key = {"client_email": "sa@p.iam", "private_key_id": "kid", "private_key": "-----BEGIN PRIVATE KEY-----x"}
    inline = hadoop_store_conf("gs://bkt/t", {"GOOGLE_SERVICE_ACCOUNT_KEY": json.dumps(key)})
    assert inline.secrets == {"fs.gs.auth.service.account.private.key": Secret(key["private_key"])}
    assert "BEGIN PRIVATE KEY" not in repr(inline)
    with pytest.raises(ValueError, match="not a service account key") as err:
        hadoop_store_conf("gs://bkt/t", {"GOOGLE_SERVICE_ACCOUNT_KEY": '{"private_key": "leak-me"}'})
    assert "leak-me" not in str(err.value)


@pytest.mark.parametrize("uri", ["file:///tmp/t", "/tmp/t", "s3:///no-bucket", "gs:///t"])
def test_a_uri_of_no_store_or_without_its_bucket_is_refused(uri: str) -> None:
    with pytest.raises(ValueError):
        hadoop_store_conf(uri)


def test_apply_sets_every_key_with_secrets_revealed_on_the_sessions_hadoop_conf() -> None:
    """A stand-in for the py4j object chain (the real one is exercised in test_s3a_write.py)."""

    class HadoopConf(dict[str, str]):
        def set(self, key: str, value: str) -> None:
            self[key] = value

    hadoop = HadoopConf()
    session = type(
        "S",
        (),
        {"sparkContext": type("C", (), {"_jsc": type("J", (), {"hadoopConfiguration": lambda: hadoop})})},
    )
    conf = hadoop_store_conf("s3://lake/t", S3)
    apply_to_session(session, conf)
    assert hadoop == dict(conf.revealed())
    assert hadoop["fs.s3a.bucket.lake.secret.key"] == "s3cr3t-value"


def test_spark_does_not_write_to_gcs_and_says_so_before_touching_spark() -> None:
    """hadoop-gcp (Hadoop 3.5's gs:// connector) takes no other endpoint, so its writes cannot
    be tested against an emulator here: the staging step refuses gs:// by name."""
    from airflow_eod.core.errors import ConfigurationError
    from airflow_eod.core.table_ref import TableRef
    from airflow_eod.spark.staging import spark_uri

    ref = TableRef.parse("gs://bucket/t", {"GOOGLE_SERVICE_ACCOUNT": "/nonexistent.json"})
    with pytest.raises(ConfigurationError, match=r"Spark does not write to gs://"):
        spark_uri(None, ref, "gs://bucket/t/eod_data/x")  # type: ignore[arg-type]
